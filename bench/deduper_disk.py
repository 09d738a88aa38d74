"""Disk and time of a long-lived ``Deduper``: forgetting old states (the default) against keeping them.

    python bench/deduper_disk.py [--docs 96982] [--windows 20] [--in-memory 10000] [--repeat 3]

The input: the shared SMS corpus in its order, dated ``window / (docs / windows)`` apart, so the
stream spans ``--windows`` windows of event time, as months of a service's traffic would span a
7-day window. ``engine.docs_in_memory`` is lowered to ``--in-memory`` so that states leave memory
at this corpus size; the folder they go to is what grows with the input.

Systems, each over the same events in this process, one after the other:
* the ``Deduper`` as it is made (``forget_windows=2``): a state that left memory is forgotten two to
  three windows after its last write, a folder (generation) at a time;
* ``forget_windows=None``: every state kept until ``close``, as before the setting (the peer).
At each tenth of the input, the size of the run's folder (``run/``, every file) is read, its
buffers and memtables written out first. The table
gives the folder's size at each tenth, the median check rate over ``--repeat`` runs, and the ratios.
Verdicts are compared: forgetting must not change one (a state is kept longer than the window
within which a copy can find its original). The input compresses time: its 20 generation changes
(one a window) each cost 25-35 ms (a batch written, a folder opened, the oldest deleted),
which with the default 7-day window come days apart.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, need_shared, read_jsonl, save, table  # noqa: E402

from stream_dedup import Deduper  # noqa: E402
from stream_dedup.config import load_settings  # noqa: E402


def held_mb(d: Deduper, path: Path) -> float:
    """The size of the run's folder once what it holds in memory is written out: its write buffers
    (``Buffered``) and RocksDB memtables are flushed first, else a folder of a few MB would read
    as empty (the flushes are not timed)."""
    run = d.engine.run_kv
    for gen in getattr(run, "gens", [run] if run is not None else []):
        gen.flush()
        gen.store.flush()
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6 if path.exists() else 0.0


def run(docs: list[dict], window: int, in_memory: int, forget: float | None) -> tuple[float, list[float], dict]:
    settings = load_settings(environ={"STREAM_DEDUP_ENGINE__WINDOW_MS": str(window),
                                      "STREAM_DEDUP_ENGINE__DOCS_IN_MEMORY": str(in_memory)})
    tenth = max(1, len(docs) // 10)
    sizes: list[float] = []
    verdicts: dict = {}
    checking = 0.0
    with tempfile.TemporaryDirectory(prefix="deduper-disk-") as tmp, \
            Deduper(settings, tmp, forget_windows=forget) as d:
        for i, doc in enumerate(docs, 1):
            t = time.perf_counter()
            v = d.check(doc)
            checking += time.perf_counter() - t
            verdicts[v.id] = (v.verdict, v.duplicate_of)
            if i % tenth == 0 or i == len(docs):
                sizes.append(held_mb(d, Path(tmp) / "run"))
        for v in d.revisions():  # later revisions replace a verdict given at the time of its check
            verdicts[v.id] = (v.verdict, v.duplicate_of)
    return len(docs) / checking, sizes[:10], verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=96_982)
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--in-memory", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    need_shared()
    raw = read_jsonl(SHARED / "sms" / "sms_spam_zh.jsonl", a.docs)
    window = 1_000_000
    step = max(1, window * a.windows // len(raw))
    docs = [{"id": str(d["id"]), "text": d["text"], "ts": i * step} for i, d in enumerate(raw)]
    systems = {"Deduper (forget_windows=2)": 2.0, "every state kept (forget_windows=None)": None}
    rates: dict[str, list[float]] = {name: [] for name in systems}
    sizes: dict[str, list[float]] = {}
    verdicts: dict[str, dict] = {}
    for _ in range(a.repeat):
        for name, forget in systems.items():  # alternated, so a noisy minute falls on both
            rate, sizes[name], verdicts[name] = run(docs, window, a.in_memory, forget)
            rates[name].append(rate)
    ours, peer = systems
    same = sum(verdicts[ours][k] == verdicts[peer][k] for k in verdicts[peer])
    rows, data = [], []
    for name in systems:
        rate = statistics.median(rates[name])
        s = sizes[name]
        rows.append([name, round(rate), s[4], s[-1], round(s[-1] / max(sizes[ours][-1], 1e-9), 2),
                     round(rate / statistics.median(rates[ours]), 3)])
        data.append({"system": name, "docs_per_s_median": rate, "docs_per_s_runs": rates[name],
                     "run_folder_mb_by_tenth": s})
    text = table(["system", "checks/s (median)", "run folder MB at half", "run folder MB at end",
                  "folder / Deduper's", "rate / Deduper's"], rows)
    text = (f"{len(docs):,} SMS over {a.windows} windows of event time, docs_in_memory={a.in_memory:,},"
            f" {a.repeat} runs of each system\n\n{text}\n\nVerdicts equal: {same:,} of {len(verdicts[peer]):,}."
            f" Run folder MB at each tenth of the input (last run):\n\n"
            + "\n".join(f"- {name}: {' '.join(f'{x:.1f}' for x in sizes[name])}" for name in systems))
    save("deduper_disk", {"args": vars(a), "docs": len(docs), "verdicts_equal": same, "systems": data}, text)
    if same != len(verdicts[peer]):
        sys.exit(f"forgetting changed {len(verdicts[peer]) - same} verdicts")


if __name__ == "__main__":
    main()
