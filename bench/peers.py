"""Whole-process speed and F1 against the fastest MinHash LSH peers a user would pick (Rust): rensa
and gaoya.

    python bench/peers.py [--sets news sms sms150k] [--repeat 3]

Every system is its own process that reads the JSONL file and writes verdicts, start-up and imports
included, as a user runs it: ``stream-dedup scan`` with the defaults, and ``bench/peer_loop.py``
for rensa (RMinHash + RMinHashLSH) and gaoya (MinHashStringIndex): character 3-grams after NFKC,
lower-case and punctuation removal, 128 permutations, query then insert in (ts, id) order. Each
peer runs at its best threshold for the set: the one of ``--grid`` with the highest F1 (one run
each). Then the systems are timed alternately (``common.median_runs``), medians of --repeat runs.

Sets: the news and SMS development sets (``build_devset.py``) and ``sms150k``: the shared SMS
corpus's ham (labelled with its natural exact copies) and its distinct spam messages, each with
nine spam-campaign copies (``spam_edits.build``, every edit class): about 175,000 events.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, devset, median_runs, need_shared, read_jsonl, save, scan_cli, table  # noqa: E402

from stream_dedup.cli.evaluate import evaluate  # noqa: E402

WORK = REPO / "bench" / "work" / "peers"
PEERS = ("rensa", "gaoya")


def run_peer(peer: str, threshold: float, path: Path) -> list[dict]:
    out = WORK / f"{path.stem}.{peer}-{threshold}.jsonl"
    subprocess.run([sys.executable, str(REPO / "bench" / "peer_loop.py"), peer, str(threshold), str(path), str(out)],
                   check=True, capture_output=True)
    return read_jsonl(out)


def run_ours(path: Path) -> list[dict]:
    out = WORK / f"{path.stem}.scan.jsonl"
    scan_cli(path, out)
    return read_jsonl(out)


def sets(names: list[str]) -> dict[str, tuple[Path, Path]]:
    """(stream, labels) of each set."""
    out = {}
    for name in names:
        if name == "sms150k":
            from spam_edits import build

            path, labels = build(originals=10_000, ham=100_000, seed=11, copies=9)
            out[name] = (path, labels)
        else:
            out[name] = (devset() / f"{name}.jsonl", devset() / f"{name}_labels.jsonl")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["news", "sms", "sms150k"])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each system; docs/s is the median")
    ap.add_argument("--grid", type=float, nargs="+", default=[0.2, 0.3, 0.5, 0.7], help="peer thresholds tried")
    a = ap.parse_args()
    need_shared()
    WORK.mkdir(parents=True, exist_ok=True)
    rows, out = [], []
    for name, (path, labels_path) in sets(a.sets).items():
        labels = read_jsonl(labels_path)
        n = sum(1 for _ in path.open(encoding="utf-8"))
        systems = {"stream-dedup scan": partial(run_ours, path)}
        for peer in PEERS:
            f1 = {t: evaluate(run_peer(peer, t, path), labels).overall.f1 for t in a.grid}
            best = max(a.grid, key=lambda t: f1[t])
            systems[f"{peer}, Jaccard {best}"] = partial(run_peer, peer, best, path)
        runs = median_runs(systems, a.repeat)
        fastest = max(n / s for k, (_, s) in runs.items() if not k.startswith("stream-dedup"))
        for system, (verdicts, secs) in runs.items():
            o = evaluate(verdicts, labels).overall
            rows.append([name, n, system, round(o.precision, 4), round(o.recall, 4), round(o.f1, 4), round(n / secs),
                         round(n / secs / fastest, 2)])
            out.append({"set": name, "events": n, "system": system, **o.as_dict(), "docs_per_s": n / secs,
                        "vs_fastest_peer": n / secs / fastest})
            print(rows[-1], flush=True)
    text = table(["set", "events", "system", "precision", "recall", "F1", "docs/s", "vs fastest peer"], rows)
    save("peers", {"results": out, "grid": a.grid, "repeat": a.repeat}, text)


if __name__ == "__main__":
    main()
