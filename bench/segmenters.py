"""Word segmenters, all jieba's algorithm and dictionary: speed and agreement with Python jieba.

    python bench/segmenters.py [--speed-docs 1000]

Segmenters: Python jieba 0.42.1 (the reference), rjieba behind ``core/segment.py``'s adapter
(``text.segmenter = "rjieba"``, the default), bare rjieba (what the adapter corrects), and
jieba_fast (jieba in C) when it is installed by hand: it is no longer an option of the project,
since its last release (0.53, 2017) does not install with current pip and it departs from jieba's
tokens on words where rjieba's adapter agrees.
* speed: docs/s of each one's segmentation of THUCNews articles and SMS (normalized as the engine
  does), dictionary loaded, median of 3 runs; for the default also ``WordTokenizer.words``
  (segmentation and filtering, what the detectors read) against the same on Python jieba.
* agreement: over every sample corpus, the documents whose tokens differ from Python jieba's, and
  those whose filtered words (no punctuation, whitespace or stop words) differ.
"""
from __future__ import annotations

import argparse
import re
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, median_runs, need_shared, read_jsonl, save, table  # noqa: E402

from stream_dedup.core import segment  # noqa: E402
from stream_dedup.core.text import normalize  # noqa: E402
from stream_dedup.core.tokenize import _SENTENCE_DOT, WordTokenizer  # noqa: E402

CORPORA = {"news": ("news/thucnews_1000.jsonl", "text"), "news titles": ("news/thucnews_titles_20k.jsonl", "text"),
           "news pages": ("news/sogou_smarty.jsonl", "text"), "sms": ("sms/sms_spam_zh.jsonl", "text")}


_WORD = re.compile(r"\w")


class _Bare:
    """rjieba without the adapter."""

    def __init__(self) -> None:
        import rjieba

        self.lcut = rjieba.Jieba().cut


def _filtered(tokens: list[str], stop: frozenset[str]) -> list[str]:
    """``WordTokenizer.words``'s keep rule applied to another segmenter's tokens."""
    return [w for w in tokens if w not in stop and not w.isspace() and _WORD.search(w)]


def _each(fn, docs: list[str]) -> list:
    return [fn(d) for d in docs]


def _texts(rel: str, key: str, limit: int | None = None) -> list[str]:
    return [_SENTENCE_DOT.sub("。", normalize(d[key])) for d in read_jsonl(SHARED / rel, limit) if d.get(key)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed-docs", type=int, default=1000, help="news articles timed (and 5x as many SMS)")
    a = ap.parse_args()
    need_shared()
    segs = {"jieba": segment.load(None, "jieba"), "rjieba (adapter, default)": segment.load(None, "rjieba"),
            "rjieba bare": _Bare()}
    try:
        import jieba_fast

        segs["jieba_fast"] = jieba_fast.Tokenizer()
        segs["jieba_fast"].initialize()
    except ImportError:
        print("jieba_fast is not installed: left out", file=sys.stderr)
    ref_words, rs_words = WordTokenizer(segmenter="jieba"), WordTokenizer(segmenter="rjieba")

    speed_rows, out = [], {"speed": [], "agreement": []}
    for name, docs in [("news", _texts(*CORPORA["news"], a.speed_docs)),
                       ("sms", _texts(*CORPORA["sms"], a.speed_docs * 5))]:
        # every run once a round, every other round in reverse (common.median_runs)
        runs = {seg: partial(_each, tk.lcut, docs) for seg, tk in segs.items()}
        runs |= {"jieba words": partial(_each, ref_words.words, docs), "rjieba words": partial(_each, rs_words.words, docs)}
        t = {k: secs for k, (_, secs) in median_runs(runs, 3).items()}
        base = t["jieba"]
        for seg in segs:
            secs = t[seg]
            speed_rows.append([name, f"{seg}: segmentation", len(docs), round(len(docs) / secs, 1), round(base / secs, 2)])
            out["speed"].append({"set": name, "run": f"{seg}: segmentation", "docs_per_s": len(docs) / secs,
                                 "vs_jieba": base / secs})
        w_ref, w_rs = t["jieba words"], t["rjieba words"]
        for run, secs in [("jieba: words (segment + filter)", w_ref), ("rjieba: words (segment + filter)", w_rs)]:
            speed_rows.append([name, run, len(docs), round(len(docs) / secs, 1), round(w_ref / secs, 2)])
            out["speed"].append({"set": name, "run": run, "docs_per_s": len(docs) / secs, "vs_jieba": w_ref / secs})
        print(speed_rows[-1], flush=True)

    agree_rows = []
    for name, (rel, key) in CORPORA.items():
        docs = _texts(rel, key)
        ref = [segs["jieba"].lcut(d) for d in docs]
        stop = ref_words.stopwords
        ref_filtered = [ref_words.words(d) for d in docs]
        for seg, tk in segs.items():
            if seg == "jieba":
                continue
            toks = sum(tk.lcut(d) != r for d, r in zip(docs, ref))
            if isinstance(tk, segment.JiebaRs):
                words = sum(tk.words(d, stop) != r for d, r in zip(docs, ref_filtered))
            else:
                words = sum(_filtered(tk.lcut(d), stop) != r for d, r in zip(docs, ref_filtered))
            agree_rows.append([name, len(docs), seg, toks, f"{1 - toks / len(docs):.3%}", words,
                               f"{1 - words / len(docs):.3%}"])
            out["agreement"].append({"set": name, "docs": len(docs), "segmenter": seg, "docs_tokens_differ": toks,
                                     "docs_words_differ": words})
            print(agree_rows[-1], flush=True)

    text = table(["set", "run", "docs", "docs/s", "vs jieba"], speed_rows)
    text += "\n\n" + table(["corpus", "docs", "segmenter", "docs whose tokens differ from jieba's", "identical",
                            "docs whose filtered words differ", "identical"], agree_rows)
    save("segmenters", out, text)


if __name__ == "__main__":
    main()
