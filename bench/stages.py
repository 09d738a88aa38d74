"""What a document costs in each stage of `scan`, warm, in one process: where the time goes.

    python bench/stages.py [--sets news sms] [--repeat 3]

On the development benchmark's documents (bench/build_devset.py), with the default configuration:
parse + validate + normalize, words (segmentation and filtering), each detector's sketch (with the
words already computed), the whole prepare, and the engine's judge over fresh state (exact store,
bucket index, verdicts). Sketches and prepare run in chunks of ``scan.CHUNK_LINES`` documents with the detectors'
batch work (``prefetch``, ``prepare_many``), as ``scan``'s preparing processes do; the judge gets a
fresh engine sized for the set, as ``scan`` makes one. Microseconds per document over all documents
of the set (a detector that applies to fewer documents costs its total over all of them), median
of --repeat runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import devset, median_run, need_shared, save, table  # noqa: E402

from stream_dedup.config import Settings  # noqa: E402
from stream_dedup.core.detectors.base import doc_words  # noqa: E402
from stream_dedup.core.engine import Engine  # noqa: E402
from stream_dedup.core.stages import Preparer  # noqa: E402
from stream_dedup.scan import CHUNK_LINES  # noqa: E402


def stages(lines: list[bytes], repeat: int) -> list[tuple[str, float]]:
    settings = Settings()
    prep = Preparer(settings)
    prep.warm()
    out: list[tuple[str, float]] = []

    def timed(label: str, fn):
        result, secs = median_run(fn, repeat)
        out.append((label, secs))
        return result

    docs = timed("parse, validate, normalize", lambda: [prep.document(x, i) for i, x in enumerate(lines)])

    def words():
        for d in docs:
            d.cache.pop("words", None)
        return [doc_words(d, prep.tokenizer) for d in docs]

    timed("words (segmentation and filtering)", words)
    def sketches(det, applies):
        out = []
        for c in range(0, len(applies), CHUNK_LINES):
            chunk = applies[c:c + CHUNK_LINES]
            for d in chunk:  # what an earlier run left (prefetched keys, the skeleton), not the words
                d.cache = {k: v for k, v in d.cache.items() if k == "words"}
            det.prefetch(chunk)
            out += [det.sketch(d) for d in chunk]
        return out

    for det in prep.detectors:
        applies = [d for d in docs if det.applies(d)]
        if applies:
            timed(f"sketch: {det.name} ({len(applies)} docs)", lambda: sketches(det, applies))
    events = [(x, i) for i, x in enumerate(lines)]
    prepared = timed("prepare, all of the above",
                     lambda: [p for c in range(0, len(events), CHUNK_LINES)
                              for p in prep.prepare_many(events[c:c + CHUNK_LINES])])

    def judge():
        engine = Engine(settings, most_docs=len(prepared))
        try:
            for p in prepared:
                engine.judge(p)
        finally:
            engine.close()

    timed("judge (fresh state)", judge)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["news", "sms"])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    need_shared()
    ds = devset()
    rows, results = [], []
    for name in a.sets:
        lines = [x.strip() for x in (ds / f"{name}.jsonl").read_bytes().splitlines() if x.strip()]
        for label, secs in stages(lines, a.repeat):
            rows.append([name, len(lines), label, round(secs * 1e6 / len(lines), 1), round(secs, 3)])
            results.append({"set": name, "docs": len(lines), "stage": label, "us_per_doc": secs * 1e6 / len(lines),
                            "seconds": secs})
            print(rows[-1], flush=True)
    save("stages", {"results": results}, table(["set", "docs", "stage", "µs/doc", "s"], rows))


if __name__ == "__main__":
    main()
