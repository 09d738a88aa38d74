"""Index scaling: per-document cost and RSS / disk at 10k, 100k and 1M indexed documents.

    python bench/index_scale.py [--sizes 10000 100000 1000000] [--sample 2000]

Synthetic SimHash fingerprints (random 64-bit values; every 10th a near copy of an earlier one)
go through the same code as the workers: BucketIndex.probe_insert over RocksDB, window wider
than the run, once with 4x16 bands (4 keys of 16 bits: buckets fill up as the index grows) and once
with 5c2 (10 keys of 26 bits: buckets stay nearly empty at 1M). At each size, --sample more documents are timed (probe + insert)
and
the process RSS and the RocksDB folder size are read; the µs/doc is the median of --chunks timed
chunks of the sample. A PNG plot of µs/doc against index size is
written next to the table when matplotlib is installed.
"""
from __future__ import annotations

import argparse
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, save, table  # noqa: E402

from stream_dedup.core.detectors.base import Match  # noqa: E402
from stream_dedup.core.index import BucketIndex  # noqa: E402
from stream_dedup.core.simhash_fingerprint import BandScheme, hamming  # noqa: E402
from stream_dedup.core.store import KVStore  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def verify(a: bytes, b: bytes):
    d = hamming(int.from_bytes(a, "big"), int.from_bytes(b, "big"))
    return Match(1 - d / 64, d) if d <= 3 else None


def run(style: str, sizes: list[int], sample: int, chunks: int = 5) -> list[dict]:
    """Grow one index to each size in turn; time ``sample`` more documents at each, in ``chunks``
    timed chunks, and keep the median chunk's µs per document."""
    rng = random.Random(5)
    scheme = BandScheme.make(3, style)
    tmp = Path(tempfile.mkdtemp(prefix="bench-index-"))
    kv = KVStore(tmp / "index")
    idx = BucketIndex(kv, window=10**15)
    fps: list[int] = []
    n = 0

    def one() -> None:
        nonlocal n
        if fps and n % 10 == 0:
            fp = rng.choice(fps)
            for bit in rng.sample(range(64), 2):
                fp ^= 1 << bit
        else:
            fp = rng.getrandbits(64)
        if len(fps) < 100_000:
            fps.append(fp)
        payload = fp.to_bytes(8, "big")
        keys = scheme.keys(fp)
        idx.probe_insert(1, f"d{n}", n, payload, keys, verify)
        n += 1

    out = []
    try:
        for size in sorted(sizes):
            while n < size:
                one()
            per_chunk = []  # the sample in chunks; the median chunk (the machine is noisy)
            docs = max(1, sample // chunks)
            for _ in range(chunks):
                t0 = time.perf_counter()
                for _ in range(docs):
                    one()
                per_chunk.append((time.perf_counter() - t0) / docs * 1e6)
            us = statistics.median(per_chunk)
            r = {"style": style, "indexed": size, "us_per_doc": round(us, 1), "rss_mb": round(rss_mb(), 1),
                 "disk_mb": round(du_mb(tmp), 1)}
            out.append(r)
            print(r, flush=True)
    finally:
        kv.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--styles", nargs="+", default=["4x16", "5c2"], choices=["4x16", "5c2"])
    ap.add_argument("--chunks", type=int, default=5, help="timed chunks of the sample; the median is reported")
    a = ap.parse_args()
    results = {style: run(style, a.sizes, a.sample, max(1, a.chunks)) for style in a.styles}
    rows = [[r["style"], r["indexed"], r["us_per_doc"], r["rss_mb"], r["disk_mb"]]
            for out in results.values() for r in out]
    ratios = {style: out[-1]["us_per_doc"] / out[0]["us_per_doc"] for style, out in results.items()}
    text = table(["bands", "indexed docs", "µs/doc (probe+insert)", "RSS MB", "RocksDB MB"], rows)
    for style, out in results.items():
        text += (f"\n\n{style}: cost at {out[-1]['indexed']:,} / cost at {out[0]['indexed']:,}: "
                 f"{ratios[style]:.2f}x")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.2))
        for style, out in results.items():
            ax.plot([r["indexed"] for r in out], [r["us_per_doc"] for r in out], marker="o", label=style)
        ax.set_xscale("log")
        ax.set_xlabel("indexed documents")
        ax.set_ylabel("µs per document")
        ax.set_title("bucket index: probe + insert")
        ax.legend()
        fig.tight_layout()
        RESULTS.mkdir(parents=True, exist_ok=True)
        fig.savefig(RESULTS / "index_scale.png", dpi=120)
    except ImportError:
        pass
    save("index_scale", {"results": results, "cost_ratio_last_first": ratios}, text)


if __name__ == "__main__":
    main()
