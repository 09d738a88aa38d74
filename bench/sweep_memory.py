"""Memory and time of one sweep of the near-duplicate index, as ``scan``'s expiry runs it over news.

    python bench/sweep_memory.py [--docs 50000 100000 200000] [--copies-docs 100000] [--copies 50]
                                 [--bands 32] [--repeat 3]

Why a benchmark of its own: with the news detectors every stored document has a payload kept apart
from its buckets (its MinHash signature, 512 bytes, under ``P``), and a sweep deletes the payloads
that no kept entry refers to. What it holds in memory for that grows with the store (a window and a
half of documents in ``scan``), so a large window of news could cost the sweep more than the
documents' states. ``scan_memory.py`` measures SMS, whose payloads are inline.

The store: ``--docs`` documents as the news index holds them, each with ``--bands`` bucket keys
(MinHash LSH bands; random, so each bucket holds about one entry, as distinct articles do), a
512-byte payload under ``P`` and an id of 18 characters, dated 0, 1, 2, ... in a RocksDB folder
(``Buffered(KVStore)``, as ``scan`` opens it). The sweep drops the oldest third, as a sweep of
``scan`` finds entries up to half a window past the window in a store of a window and a half.

A second shape, ``--copies-docs`` documents of which every article is stored ``--copies`` times
(document i is article i mod docs/copies, as in rounds of a crawl: its copies share its bucket
keys), so a bucket holds up to that many entries and a sweep rewrites buckets rather than deleting
them, and meets a reference in every kept entry. Why: with one entry a bucket the first shape missed
a sweep that hashed each reference several times slower than before, which a scan of news over
three windows showed.

Each repeat sweeps a fresh copy of the folder twice: once timed, once under ``tracemalloc`` for the
peak of Python's heap during the sweep (numpy's arrays included; RocksDB's own memory is not). The
table gives the medians, the peak per stored document, and checks that the payloads of the kept
documents, and only those, remain.
"""
from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import save, table  # noqa: E402

from stream_dedup.core.index import BucketIndex, unpack_entries  # noqa: E402
from stream_dedup.core.store import Buffered, KVStore  # noqa: E402

DET = 2  # a detector number, as the news MinHash detector's


def build(path: Path, docs: int, bands: int, copies: int = 1) -> float:
    rng = random.Random(docs)
    articles = docs // copies
    keys = [[rng.getrandbits(63) for _ in range(bands)] for _ in range(articles)] if copies > 1 else None
    t0 = time.perf_counter()
    kv = Buffered(KVStore(path))
    idx = BucketIndex(kv, window=10**12)
    for i in range(docs):
        bks = keys[i % articles] if keys is not None else [rng.getrandbits(63) for _ in range(bands)]
        idx.insert(DET, f"thucnews-{i:09d}", i, rng.randbytes(512), bks)
    kv.flush()
    kv.store.close()
    return time.perf_counter() - t0


def sweep(folder: Path, copy: Path, cutoff: int, traced: bool) -> tuple[float, float, int, int]:
    """(seconds, peak MB of Python's heap or 0, entries dropped, payloads left) of one sweep of a copy."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    kv = Buffered(KVStore(copy))
    idx = BucketIndex(kv, window=10**12)
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    dropped = idx.sweep(cutoff)
    took = time.perf_counter() - t0
    peak = 0.0
    if traced:
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    kv.flush()
    left = kv.store.count(b"P")
    stale = sum(1 for k, v in kv.items() if k[:1] == b"L" and any(e[0] < cutoff for e in unpack_entries(v)))
    kv.store.close()
    if stale:
        sys.exit(f"{stale} buckets still hold entries older than the cutoff")
    return took, peak, dropped, left


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, nargs="*", default=[50_000, 100_000, 200_000])
    ap.add_argument("--copies-docs", type=int, nargs="*", default=[100_000],
                    help="sizes of the second shape, every article stored --copies times")
    ap.add_argument("--copies", type=int, default=50)
    ap.add_argument("--bands", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rows, data = [], []
    with tempfile.TemporaryDirectory(prefix="sweep-memory-") as tmp:
        for n, copies in [(n, 1) for n in a.docs] + [(n, a.copies) for n in a.copies_docs]:
            folder = Path(tmp) / f"index-{n}"
            built = build(folder, n, a.bands, copies)
            cutoff = n // 3
            times, peaks = [], []
            for _ in range(a.repeat):
                took, _, dropped, left = sweep(folder, Path(tmp) / "copy", cutoff, traced=False)
                times.append(took)
                _, peak, _, left_traced = sweep(folder, Path(tmp) / "copy", cutoff, traced=True)
                peaks.append(peak)
                if left != n - cutoff or left_traced != left:
                    sys.exit(f"{left} payloads left of {n - cutoff} kept documents")
            t, p = statistics.median(times), statistics.median(peaks)
            rows.append([f"{n:,}", copies, f"{dropped:,}", f"{left:,}", round(t, 2), round(p, 1), round(p * 1e6 / n)])
            data.append({"docs": n, "copies": copies, "build_s": built, "entries_dropped": dropped,
                         "payloads_left": left, "sweep_s_runs": times, "peak_heap_mb_runs": peaks})
            shutil.rmtree(folder)
    text = table(["documents stored", "copies of each article", "entries dropped", "payloads left", "sweep s (median)",
                  "peak heap MB (median)", "peak bytes / document"], rows)
    text = (f"One sweep of the news index (Buffered RocksDB, {a.bands} bands, 512-byte payloads under P),"
            f" dropping the oldest third, {a.repeat} runs each\n\n{text}")
    save("sweep_memory", {"args": vars(a), "sizes": data}, text)


if __name__ == "__main__":
    main()
