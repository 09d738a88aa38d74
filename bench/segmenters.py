"""Word segmenters: jieba vs jieba_fast (the same algorithm in C), speed and token agreement.

    python bench/segmenters.py [--docs 1000]

On THUCNews articles and SMS (normalized as the engine does): docs/s of each segmenter's lcut
(median of 3 runs), and the share of documents whose *filtered* words (what the detectors use:
no punctuation, no whitespace, no stop words) are identical. jieba_fast is an option
(`text.segmenter`), not the default, unless the agreement is total.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, median_time, need_shared, read_jsonl, save, table  # noqa: E402

from stream_dedup.core.text import normalize  # noqa: E402
from stream_dedup.core.tokenize import WordTokenizer, _jieba  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    a = ap.parse_args()
    need_shared()
    try:
        import jieba_fast  # noqa: F401
    except ImportError:
        sys.exit("pip install 'stream-dedup[fast]' (jieba_fast) to run this benchmark")
    sets = {"news": [normalize(d["text"]) for d in read_jsonl(SHARED / "news" / "thucnews_1000.jsonl", a.docs)],
            "sms": [normalize(d["text"]) for d in read_jsonl(SHARED / "sms" / "sms_spam_zh.jsonl", a.docs * 5)]}
    rows, out = [], []
    for name, docs in sets.items():
        speed = {}
        for seg in ("jieba", "jieba_fast"):
            tk = _jieba(None, seg)
            secs = median_time(lambda: [tk.lcut(d) for d in docs], repeat=3)
            speed[seg] = len(docs) / secs
        ref, fast = WordTokenizer(segmenter="jieba"), WordTokenizer(segmenter="jieba_fast")
        same = sum(ref.words(d) == fast.words(d) for d in docs) / len(docs)
        rows.append([name, len(docs), round(speed["jieba"], 1), round(speed["jieba_fast"], 1),
                     round(speed["jieba_fast"] / speed["jieba"], 2), f"{same:.2%}"])
        out.append({"set": name, "docs": len(docs), "jieba_docs_per_s": speed["jieba"],
                    "jieba_fast_docs_per_s": speed["jieba_fast"], "identical_filtered_words": same})
        print(rows[-1], flush=True)
    save("segmenters", {"results": out}, table(["set", "docs", "jieba docs/s", "jieba_fast docs/s", "ratio",
                                                  "identical filtered words"], rows))


if __name__ == "__main__":
    main()
