"""Quality and speed side by side on the development benchmark: this project vs peers' index loops.

    python bench/quality.py [--sets news sms pairs] [--repeat 3]

* ours: `stream-dedup scan` with the default configuration (start-up included), then `eval`; and
  the same with one detector alone (engine.detectors = [name]) for each detector.
* simhash.SimhashIndex(k=3) with the library's default features (its own tokenization of the
  raw text): for each document in event-time order, query then add; a hit makes it a duplicate of
  the earliest hit.
* datasketch.MinHashLSH(threshold=0.7, num_perm=128) over 5-character shingles of the raw text,
  the same loop.
Precision / recall / F1 come from the same `eval` for all three; docs/s is the median wall time over
--repeat runs of each system (the verdicts are the same in every run). A run of every system is one
round, and every other round runs them in the reverse order (``common.median_runs``), so that a
slow or fast few minutes of the machine fall on all of them.
For pairs.jsonl (paraphrase questions, none of them duplicates of each other except repeated
questions) the table also gives the share of reworded pairs flagged (bigram Jaccard < 0.5).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, devset, median_runs, need_shared, read_jsonl, save, scan_cli, table  # noqa: E402

from stream_dedup.cli.evaluate import evaluate  # noqa: E402


def loop(docs: list[dict], query, add) -> list[dict]:
    out = []
    order = {d["id"]: (d["ts"], d["id"]) for d in docs}
    for d in sorted(docs, key=lambda d: (d["ts"], d["id"])):
        hits = [h for h in query(d) if h != d["id"]]
        if hits:
            best = min(hits, key=lambda h: order[h])
            out.append({"id": d["id"], "verdict": "duplicate", "duplicate_of": best, "ts": d["ts"], "match": "near"})
        else:
            out.append({"id": d["id"], "verdict": "unique", "duplicate_of": None, "ts": d["ts"], "match": None})
        add(d)
    return out


def run_simhash(docs):
    from simhash import Simhash, SimhashIndex

    idx = SimhashIndex([], k=3)
    cache = {}

    def q(d):
        cache[d["id"]] = Simhash(d["text"])
        return idx.get_near_dups(cache[d["id"]])

    return loop(docs, q, lambda d: idx.add(d["id"], cache[d["id"]]))


def run_minhash(docs):
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=0.7, num_perm=128)
    cache = {}

    def q(d):
        t = d["text"]
        m = MinHash(num_perm=128)
        m.update_batch([t[i:i + 5].encode() for i in range(max(1, len(t) - 4))])
        cache[d["id"]] = m
        return lsh.query(m)

    return loop(docs, q, lambda d: lsh.insert(d["id"], cache[d["id"]]))


ALONE = ["simhash", "minhash", "ngram", "imatch"]


def run_ours(path: Path, tmp: Path, detectors: str | None = None) -> list[dict]:
    out = tmp / f"{path.stem}.{detectors or 'auto'}.verdicts.jsonl"
    env = dict(os.environ)
    if detectors:
        env["STREAM_DEDUP_ENGINE__DETECTORS"] = json.dumps([detectors])
    scan_cli(path, out, env=env)
    return read_jsonl(out)


def reworded_flagged(verdicts: list[dict], labels: list[dict]) -> float | None:
    pairs = {lab["pair"]: lab["jaccard"] for lab in labels if lab.get("pair")}
    if not pairs:
        return None
    v = {x["id"]: x for x in verdicts}
    reworded = [p for p, j in pairs.items() if j < 0.5 and f"{p}-1" in v and f"{p}-2" in v]
    flagged = sum(1 for p in reworded if v[f"{p}-1"].get("duplicate_of") == f"{p}-2"
                  or v[f"{p}-2"].get("duplicate_of") == f"{p}-1")
    return flagged / len(reworded) if reworded else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["news", "sms", "pairs"])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each system; docs/s is the median")
    ap.add_argument("--alone", nargs="*", default=ALONE, help="also run scan with only this detector (each)")
    a = ap.parse_args()
    need_shared()
    ds = devset()
    tmp = REPO / "bench" / "work"
    rows, out = [], []
    for name in a.sets:
        path = ds / f"{name}.jsonl"
        docs = read_jsonl(path)
        labels = read_jsonl(ds / f"{name}_labels.jsonl")
        systems = {"stream-dedup scan": lambda: run_ours(path, tmp)}
        for det in a.alone:
            systems[f"stream-dedup scan, {det} only"] = partial(run_ours, path, tmp, det)
        systems["simhash SimhashIndex k=3"] = lambda: run_simhash(docs)
        systems["datasketch MinHashLSH 0.7"] = lambda: run_minhash(docs)
        # (verdicts of the last run, median wall time): the verdicts are the same in every run
        runs = median_runs(systems, a.repeat)
        best_peer = max(len(docs) / s for k, (_, s) in runs.items() if not k.startswith("stream-dedup"))
        for system, (verdicts, secs) in runs.items():
            rep = evaluate(verdicts, labels)
            o = rep.overall
            rate = len(docs) / secs
            rw = reworded_flagged(verdicts, labels)
            rows.append([name, system, round(o.precision, 4), round(o.recall, 4), round(o.f1, 4), round(rate, 1),
                         round(rate / best_peer, 2), "-" if rw is None else f"{rw:.2%}"])
            out.append({"set": name, "system": system, **o.as_dict(), "docs_per_s": rate,
                        "speed_vs_fastest_peer": rate / best_peer, "reworded_pairs_flagged": rw})
            print(rows[-1], flush=True)
    text = table(["set", "system", "precision", "recall", "F1", "docs/s", "vs fastest peer", "reworded pairs flagged"],
                 rows)
    save("quality", {"results": out}, text)


if __name__ == "__main__":
    main()
