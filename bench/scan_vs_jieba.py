"""`scan` end to end vs raw jieba tokenization of the same documents (the floor Python segmentation sets).

    python bench/scan_vs_jieba.py [--repeat 3]

On the 1,000 THUCNews articles: (a) jieba.lcut of every raw text, dictionary already loaded, in
one process; (b) `stream-dedup scan` of the same file as a subprocess, start-up included, with one
preparing process (`-j 1`) and with the default (one per core); (c) the same scan in-process
without start-up, both ways. Also reports the share of scan time spent inside jieba (cProfile).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, median_time, need_shared, read_jsonl, save, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    need_shared()
    import jieba

    from stream_dedup.config import load_settings
    from stream_dedup.scan import default_jobs, run_scan

    path = SHARED / "news" / "thucnews_1000.jsonl"
    docs = read_jsonl(path)
    n = len(docs)
    tk = jieba.Tokenizer()
    tk.initialize()
    t_jieba = median_time(lambda: [tk.lcut(d["text"]) for d in docs], a.repeat)

    def sub_scan(jobs: int):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "stream_dedup.cli", "scan", str(path), "--out", f"{tmp}/v.jsonl",
                            "--no-progress", "--jobs", str(jobs)], check=True, cwd=REPO, capture_output=True)

    cores = default_jobs()
    t_scan_cli = median_time(lambda: sub_scan(1), a.repeat)
    t_scan_cli_n = median_time(lambda: sub_scan(0), a.repeat)
    settings = load_settings(environ={})
    run_scan(settings, str(path), "/dev/null", quiet=True)  # warm: dictionary, IDF table, OpenCC
    t_scan = median_time(lambda: run_scan(settings, str(path), "/dev/null", quiet=True), a.repeat)
    t_scan_n = median_time(lambda: run_scan(settings, str(path), "/dev/null", quiet=True, jobs=cores), a.repeat)

    prof = cProfile.Profile()
    prof.enable()
    run_scan(settings, str(path), "/dev/null", quiet=True)
    prof.disable()
    st = pstats.Stats(prof, stream=io.StringIO())
    total = st.total_tt
    jieba_t = sum(v[3] for k, v in st.stats.items() if "jieba" in k[0] and k[2] == "cut")
    top = io.StringIO()
    pstats.Stats(prof, stream=top).sort_stats("tottime").print_stats(12)

    rows = [["jieba.lcut (dictionary loaded), 1 process", round(n / t_jieba, 1), 1.0],
            ["scan in-process (warm), 1 preparing process", round(n / t_scan, 1), round(t_jieba / t_scan, 3)],
            [f"scan in-process (warm), {cores} preparing processes", round(n / t_scan_n, 1),
             round(t_jieba / t_scan_n, 3)],
            ["stream-dedup scan CLI -j 1 (start-up included)", round(n / t_scan_cli, 1),
             round(t_jieba / t_scan_cli, 3)],
            [f"stream-dedup scan CLI, default -j ({cores}; start-up included)", round(n / t_scan_cli_n, 1),
             round(t_jieba / t_scan_cli_n, 3)]]
    text = table(["run", "docs/s", "throughput / jieba's"], rows)
    text += (f"\n\nshare of warm scan time inside jieba's cut, by cProfile: {jieba_t / total:.1%} (an upper bound: "
             "cProfile's cost per call falls mostly on jieba's many small calls; by the docs/s above, the same "
             f"segmentation takes about {t_jieba / t_scan:.0%} of warm scan time)")
    save("scan_vs_jieba", {"docs": n, "jieba_s": t_jieba, "scan_s": t_scan, "scan_cli_s": t_scan_cli,
                           "scan_jobs": cores, "scan_n_s": t_scan_n, "scan_cli_n_s": t_scan_cli_n,
                           "jieba_share_of_scan": jieba_t / total, "profile_top": top.getvalue()[-4000:]}, text)


if __name__ == "__main__":
    main()
