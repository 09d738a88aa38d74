"""`scan` end to end vs raw jieba tokenization of the same documents (the floor Python segmentation sets).

    python bench/scan_vs_jieba.py [--repeat 3]

On the 1,000 THUCNews articles: (a) Python jieba.lcut of every raw text, dictionary already loaded,
in one process (the floor the issue names), and the same with the default segmenter (rjieba behind
core/segment.py); (b) `stream-dedup scan` of the same file as a subprocess, start-up included, in
one process (`-j 0`) and with the default (news: one preparing process per core); (c) the same scan
in-process without start-up, both ways. Also the share of warm scan time that the default segmenter's
``WordTokenizer.words`` (segmentation and filtering) takes, timed alone on the normalized texts.
Each repeat is a round that runs every one of these once, every other round in reverse order.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, median_runs, need_shared, read_jsonl, save, scan_cli, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    need_shared()
    import jieba

    from stream_dedup.config import load_settings
    from stream_dedup.scan import auto_jobs, default_jobs, run_scan

    path = SHARED / "news" / "thucnews_1000.jsonl"
    docs = read_jsonl(path)
    n = len(docs)
    tk = jieba.Tokenizer()
    tk.initialize()

    def sub_scan(*options: str):
        with tempfile.TemporaryDirectory() as tmp:
            scan_cli(path, f"{tmp}/v.jsonl", *options)

    from stream_dedup.core import segment
    from stream_dedup.core.stages import Preparer
    from stream_dedup.core.tokenize import WordTokenizer

    cores = default_jobs()
    settings = load_settings(environ={})
    auto = auto_jobs(settings, str(path))
    seg = segment.load(None, settings.text.segmenter)
    rs = WordTokenizer.from_settings(settings.text)
    prep = Preparer(settings)
    texts = [prep.document(d, i).text for i, d in enumerate(docs)]
    run_scan(settings, str(path), "/dev/null", quiet=True)  # warm: dictionary, IDF table, OpenCC
    # every system once a round, every other round in reverse (common.median_runs)
    t = {name: secs for name, (_, secs) in median_runs({
        "jieba": lambda: [tk.lcut(d["text"]) for d in docs],
        "scan_cli": lambda: sub_scan("--jobs", "0"),
        "scan_cli_n": lambda: sub_scan(),
        "scan": lambda: run_scan(settings, str(path), "/dev/null", quiet=True),
        "scan_n": lambda: run_scan(settings, str(path), "/dev/null", quiet=True, jobs=cores),
        "segmenter": lambda: [seg.lcut(d["text"]) for d in docs],
        "words": lambda: [rs.words(x) for x in texts],
    }, a.repeat).items()}
    t_jieba, t_scan_cli, t_scan_cli_n, t_scan, t_scan_n, t_rs, t_words = (
        t[k] for k in ("jieba", "scan_cli", "scan_cli_n", "scan", "scan_n", "segmenter", "words"))

    rows = [["jieba.lcut (dictionary loaded), 1 process", round(n / t_jieba, 1), 1.0],
            [f"{settings.text.segmenter} lcut, the default segmenter (loaded), 1 process", round(n / t_rs, 1),
             round(t_jieba / t_rs, 3)],
            ["scan in-process (warm), one process", round(n / t_scan, 1), round(t_jieba / t_scan, 3)],
            [f"scan in-process (warm), {cores} preparing processes", round(n / t_scan_n, 1),
             round(t_jieba / t_scan_n, 3)],
            ["stream-dedup scan CLI -j 0, one process (start-up included)", round(n / t_scan_cli, 1),
             round(t_jieba / t_scan_cli, 3)],
            [f"stream-dedup scan CLI, default -j ({auto}; start-up included)", round(n / t_scan_cli_n, 1),
             round(t_jieba / t_scan_cli_n, 3)]]
    text = table(["run", "docs/s", "throughput / jieba's"], rows)
    text += (f"\n\nthe default segmenter's words (segmentation and filtering) take {t_words / t_scan:.0%} of warm "
             f"scan time (one process); Python jieba's segmentation alone would take {t_jieba / t_scan:.0%}")
    save("scan_vs_jieba", {"docs": n, "jieba_s": t_jieba, "scan_s": t_scan, "scan_cli_s": t_scan_cli,
                           "scan_jobs": cores, "scan_cli_default_jobs": auto, "scan_n_s": t_scan_n,
                           "scan_cli_n_s": t_scan_cli_n,
                           "default_segmenter_s": t_rs, "default_words_s": t_words,
                           "words_share_of_scan": t_words / t_scan}, text)


if __name__ == "__main__":
    main()
