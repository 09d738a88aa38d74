"""A spam campaign: a few SMS sent over and over, against the peers' index loops.

    python bench/campaign.py [--templates 50] [--rounds 600] [--repeat 3]

The input: --templates spam messages of the shared SMS corpus (label 1, at least 15 characters,
no two sharing more than a third of their character bigrams), sent in --rounds rounds, in
event-time order: round 0 the originals, even rounds exact copies, odd rounds near copies (a mark
" 第{r}版" added, as `scan_memory.py` does). It is the gateway's worst hour: every bucket a
campaign's messages fall in holds hundreds of copies, and an index that keeps every copy in its
buckets compares each new message with all of them. `scan_memory.py` is the other extreme: many
distinct messages, each copied a few times.

Systems, as in `quality.py` (the same peer loops, start-up included for `scan`):
* ``stream-dedup scan`` with the default configuration, and with ``engine.max_bucket`` at each
  --max-bucket (buckets that stop taking copies sooner);
* ``simhash.SimhashIndex(k=3)`` (its "Big bucket found" warnings silenced);
* ``datasketch.MinHashLSH(threshold=0.7, num_perm=128)`` over 5-character shingles.
A copy is found when its verdict is ``duplicate`` of a message of its own template (any earlier
copy: the peers name the earliest hit, ``scan`` the cluster's original); precision counts the
duplicates that name their own template, and an original called a duplicate is a false positive.
docs/s is the median wall time over --repeat runs.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, median_runs, need_shared, read_jsonl, save, scan_cli, table  # noqa: E402
from quality import run_minhash, run_simhash  # noqa: E402

WORK = REPO / "bench" / "work" / "campaign"


def bigrams(text: str) -> set[str]:
    return {text[i:i + 2] for i in range(len(text) - 1)}


def templates(n: int) -> list[str]:
    """``n`` spam messages, no two alike (bigram Jaccard <= 1/3), in corpus order."""
    picked: list[tuple[str, set[str]]] = []
    for d in read_jsonl(SHARED / "sms" / "sms_spam_zh.jsonl"):
        text = d["text"].strip()
        if d.get("label") != 1 or len(text) < 15:
            continue
        grams = bigrams(text)
        if all(len(grams & g) <= len(grams | g) / 3 for _, g in picked):
            picked.append((text, grams))
            if len(picked) == n:
                return [t for t, _ in picked]
    sys.exit(f"the corpus has only {len(picked)} distinct spam messages of 15 characters or more")


def build(n_templates: int, rounds: int) -> Path:
    """The input (see the module docstring), made once per size."""
    path = WORK / f"campaign_{n_templates}x{rounds}.jsonl"
    if path.exists():
        return path
    WORK.mkdir(parents=True, exist_ok=True)
    texts = templates(n_templates)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for r in range(rounds):
            for t, text in enumerate(texts):
                body = text if r % 2 == 0 else f"{text} 第{r}版"
                out.write(json.dumps({"id": f"t{t}-r{r}", "text": body, "ts": 1000 + r * n_templates + t},
                                     ensure_ascii=False) + "\n")
    tmp.rename(path)
    return path


def run_scan(path: Path, max_bucket: int | None) -> list[dict]:
    out = WORK / f"{path.stem}.{max_bucket or 'default'}.verdicts.jsonl"
    env = dict(os.environ)
    if max_bucket:
        env["STREAM_DEDUP_ENGINE__MAX_BUCKET"] = str(max_bucket)
    scan_cli(path, out, env=env)
    return read_jsonl(out)


def score(verdicts: list[dict]) -> dict:
    """Recall over the copies, precision over the duplicates called, originals called duplicates."""
    template = lambda ident: ident.split("-r", 1)[0]  # noqa: E731
    copies = [v for v in verdicts if not v["id"].endswith("-r0")]
    found = sum(1 for v in copies if v["verdict"] == "duplicate" and template(v["duplicate_of"] or "") == template(v["id"]))
    called = [v for v in verdicts if v["verdict"] == "duplicate"]
    right = sum(1 for v in called if template(v["duplicate_of"] or "") == template(v["id"]))
    wrong_originals = sum(1 for v in called if v["id"].endswith("-r0"))
    precision = right / len(called) if called else 1.0
    recall = found / len(copies) if copies else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "originals_called_duplicate": wrong_originals}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each system; docs/s is the median")
    ap.add_argument("--max-bucket", type=int, nargs="*", default=[100], help="engine.max_bucket of further scan runs")
    a = ap.parse_args()
    need_shared()
    logging.getLogger("simhash").setLevel(logging.ERROR)
    path = build(a.templates, a.rounds)
    docs = read_jsonl(path)
    systems = {"stream-dedup scan": lambda: run_scan(path, None)}
    for cap in a.max_bucket:
        systems[f"stream-dedup scan, engine.max_bucket {cap}"] = partial(run_scan, path, cap)
    systems["simhash SimhashIndex k=3"] = lambda: run_simhash(docs)
    systems["datasketch MinHashLSH 0.7"] = lambda: run_minhash(docs)
    runs = median_runs(systems, a.repeat)  # a round runs each once, every other round in reverse
    for name, (_, secs) in runs.items():
        print(name, f"{secs:.1f} s", file=sys.stderr, flush=True)
    best_peer = max(len(docs) / s for k, (_, s) in runs.items() if not k.startswith("stream-dedup"))
    rows, out = [], []
    for system, (verdicts, secs) in runs.items():
        q = score(verdicts)
        rate = len(docs) / secs
        rows.append([system, len(docs), round(q["precision"], 4), round(q["recall"], 4), round(q["f1"], 4),
                     q["originals_called_duplicate"], round(secs, 2), round(rate, 1), round(rate / best_peer, 2)])
        out.append({"system": system, "docs": len(docs), **q, "seconds": secs, "docs_per_s": rate,
                    "speed_vs_fastest_peer": rate / best_peer})
    text = table(["system", "docs", "precision", "recall", "F1", "originals called duplicate", "wall s", "docs/s",
                  "vs fastest peer"], rows)
    save("campaign", {"templates": a.templates, "rounds": a.rounds, "repeat": a.repeat, "max_bucket": a.max_bucket,
                      "results": out}, text)


if __name__ == "__main__":
    main()
