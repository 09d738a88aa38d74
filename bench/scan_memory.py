"""Peak memory and time of `stream-dedup scan` as the input grows, against a peer's index loop.

    python bench/scan_memory.py [--docs 100000 300000 900000] [--repeat 1]

The input: the 96,982 SMS of the shared corpus, then the same messages again with a mark added
("第2版", ...), round after round, up to the size asked for, in event-time order. Every later round
is a set of near copies of the first. It is the hard case for a bounded memory: each copy's
original is far behind it, so its state must be found again wherever it went.

Systems, each a process of its own, its peak RSS read from /proc (``measured``):
* ``scan`` with the default ``engine.docs_in_memory`` (100,000): past that many documents, the
  oldest documents' verdict states and id checks go to a RocksDB folder of the run's;
* ``scan`` with every document's state in memory (``docs_in_memory`` above the input's size), as
  ``scan`` was before the setting: memory grows with the input;
* ``simhash.SimhashIndex(k=3)``, the SMS set's faster peer in ``quality.py``: for each message,
  ``Simhash(text)``, a query, then an add, read from the file and written out line by line
  (neither the input nor the verdicts held in memory).
The table gives the median wall time and peak RSS over --repeat runs, and the ratios of the
default ``scan`` to the others. One run of the default sizes takes about 20 minutes. Each repeat
runs every system once, in the opposite order from the repeat before, so that a slow hour of the
machine weighs on all of them alike.

To find which change made ``scan`` slower or bigger (how the fifty-second stop bisected one):

    python bench/scan_memory.py --docs 300000 --systems default --against ../old --repeat 6
    python bench/scan_memory.py --input some.jsonl --systems default --against ../old

``--against`` names other checkouts (``git worktree add ../old 95dfb16``): their default ``scan``
runs from their own tree beside this one's, alternately, and the table names them by commit
(``+`` when the tree has changes not committed). ``--input`` scans a JSONL file of the user's
instead of the built inputs. Runs that are not the default set write ``scan_memory_compare`` (with
``--input F``: ``scan_memory_compare_<F's name>``), so that the recorded table is kept.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, alternated, checkout_name, checkouts, need_shared, save, table  # noqa: E402

WORK = REPO / "bench" / "work" / "scan_memory"
DEFAULT_IN_MEMORY = 100_000

PEER = r"""
import json, sys
from simhash import Simhash, SimhashIndex
idx = SimhashIndex([], k=3)
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in f:
        d = json.loads(line)
        h = Simhash(d["text"])
        hits = idx.get_near_dups(h)
        out.write(json.dumps({"id": d["id"], "verdict": "duplicate" if hits else "unique"}) + "\n")
        idx.add(d["id"], h)
"""


def build(n: int) -> Path:
    """The input of ``n`` events (see the module docstring), made once."""
    path = WORK / f"sms_{n}.jsonl"
    if path.exists():
        return path
    WORK.mkdir(parents=True, exist_ok=True)
    base = [json.loads(line) for line in (SHARED / "sms" / "sms_spam_zh.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for i in range(n):
            rnd, d = divmod(i, len(base))
            text = base[d]["text"] + (f" 第{rnd + 1}版" if rnd else "")
            out.write(json.dumps({"id": f"r{rnd}-{base[d]['id']}", "text": text, "ts": 1000 + i}, ensure_ascii=False) + "\n")
    tmp.rename(path)
    return path


def measured(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of the process ``cmd`` starts (``scan``: the judging process,
    the one whose memory grows; its preparing processes hold the segmenter, the same at any size).

    The peak is its ``VmHWM`` in /proc, read every 0.1 s until it exits (the mark only rises).
    Why not ``wait4``'s rusage: a child's ``ru_maxrss`` starts from its parent's RSS at the fork,
    so every system reported the benchmark's own peak, the corpus it loaded to build the input."""
    err_log = tempfile.TemporaryFile()  # not a pipe: a child that logs a lot (the peer warns of every
    t0 = time.perf_counter()            # big bucket) would fill it and block, unread until it exits
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err_log)
    status = Path(f"/proc/{p.pid}/status")
    peak_kb = 0
    while p.poll() is None:
        try:
            hwm = [line for line in status.read_text().splitlines() if line.startswith("VmHWM:")]
            peak_kb = max(peak_kb, int(hwm[0].split()[1])) if hwm else peak_kb
        except (OSError, ValueError):
            pass  # exiting: the last reading stands
        time.sleep(0.1)
    seconds = time.perf_counter() - t0
    with err_log:
        if p.returncode:
            err_log.seek(0)
            raise RuntimeError(f"{cmd[:4]} failed ({p.returncode}): {err_log.read().decode(errors='replace')[-2000:]}")
    return seconds, peak_kb / 1024


SYSTEMS = ("default", "in-memory", "peer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[100_000, 300_000, 900_000])
    ap.add_argument("--input", type=Path, help="scan this JSONL file (id, text, ts) instead of the built inputs")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                    help="default: scan with docs_in_memory 100,000; in-memory: every state in memory; "
                         "peer: simhash.SimhashIndex's loop")
    ap.add_argument("--against", type=Path, nargs="+", default=[], metavar="CHECKOUT",
                    help="other checkouts of stream-dedup whose default scan runs beside this one's")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    if a.input is None:
        need_shared()
    elif not a.input.is_file():
        sys.exit(f"--input {a.input}: no such file")
    trees = checkouts(a.against)
    import compileall

    for tree in (REPO, *trees):
        compileall.compile_dir(str(tree / "stream_dedup"), quiet=1)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    scan = [sys.executable, "-m", "stream_dedup.cli", "scan"]
    rows, data = [], []
    if a.input:
        with open(a.input, encoding="utf-8") as f:
            inputs = [(a.input, sum(1 for _ in f))]
    else:
        inputs = [(build(n), n) for n in a.docs]
    WORK.mkdir(parents=True, exist_ok=True)  # the verdicts' file, for an --input too
    for path, n in inputs:
        out = WORK / "verdicts.jsonl"
        default = {**env, "STREAM_DEDUP_ENGINE__DOCS_IN_MEMORY": str(DEFAULT_IN_MEMORY)}
        scan_args = [str(path.resolve()), "--out", str(out), "--no-progress"]
        systems: dict[str, tuple[list[str], dict[str, str], Path]] = {}
        if "default" in a.systems:
            systems[f"scan, docs_in_memory {DEFAULT_IN_MEMORY:,} (default)"] = ([*scan, *scan_args], default, REPO)
        for t in trees:
            systems[f"scan default at {checkout_name(t)} ({t.name})"] = (
                [*scan, *scan_args], {**default, "PYTHONPATH": str(t)}, t)
        if "in-memory" in a.systems:
            systems["scan, every state in memory"] = (
                [*scan, *scan_args], {**env, "STREAM_DEDUP_ENGINE__DOCS_IN_MEMORY": str(n + 1)}, REPO)
        if "peer" in a.systems:
            systems["simhash SimhashIndex k=3 loop"] = ([sys.executable, "-c", PEER, str(path), str(out)], env, REPO)
        if not systems:
            sys.exit("nothing to run: name a system or a checkout")

        def run(name: str) -> tuple[float, float]:
            s, mb = measured(*systems[name])
            print(f"{n:>9,} {name}: {s:.1f} s, {mb:.0f} MB", file=sys.stderr, flush=True)
            return s, mb

        runs = alternated({name: partial(run, name) for name in systems}, a.repeat)
        got = {name: (statistics.median(x[0] for x in rs), statistics.median(x[1] for x in rs))
               for name, rs in runs.items()}
        ours_s, ours_mb = next(iter(got.values()))
        for name, (s, mb) in got.items():
            rows.append([f"{n:,}", name, round(s, 1), round(n / s), round(mb), round(mb / ours_mb, 2),
                         round(s / ours_s, 2), " ".join(f"{x[0]:.1f}" for x in runs[name])])
            data.append({"docs": n, "input": str(path), "system": name, "seconds": s, "docs_per_s": n / s,
                         "peak_rss_mb": mb, "rss_vs_first": mb / ours_mb, "time_vs_first": s / ours_s,
                         "runs": [{"seconds": x[0], "peak_rss_mb": x[1]} for x in runs[name]]})
        out.unlink(missing_ok=True)
    text = table(["docs", "system", "wall s", "docs/s", "peak RSS MB", "RSS / first row's", "time / first row's",
                  "wall s runs (in order)"], rows)
    recorded = a.input is None and not trees and list(a.systems) == list(SYSTEMS)
    name = "scan_memory" if recorded else "scan_memory_compare" + (f"_{a.input.stem}" if a.input else "")
    args = {**vars(a), "docs": None if a.input else a.docs, "input": a.input and str(a.input),
            "against": [str(t) for t in trees]}
    save(name, {"args": args, "rows": data}, text)


if __name__ == "__main__":
    main()
