"""glibc keeps freed memory inside its heap; ``heap.trim`` gives it back (stream/heap.py)."""
from __future__ import annotations

import ctypes.util
import gc
from pathlib import Path

import pytest

from stream_dedup.stream import heap

pytestmark = pytest.mark.skipif(heap._LIBC is None, reason="glibc's malloc_trim/mallopt not available")
MB = 1 << 20


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_trim_returns_the_free_pages_of_a_fragmented_heap_to_the_system():
    assert ctypes.util.find_library("c")
    blocks = [bytes(4096) for _ in range(40_000)]  # 160 MB through malloc (over pymalloc's 512 bytes)
    kept = blocks[::64]  # one block in 64 stays alive, so the heap cannot shrink from its top
    del blocks
    before = rss()
    assert heap.trim()
    after = rss()
    assert before - after > 80 * MB, (before / MB, after / MB)
    assert len(kept) == 625


def test_arena_limit_is_accepted():
    assert heap.limit_arenas(2)
    assert not heap.limit_arenas(0)  # 0: leave glibc's default


def test_usage_tells_python_objects_from_malloc_bytes_in_use_and_free():
    # each figure is compared with the one taken just before its own allocation: in a full test
    # run a garbage collection in between frees other tests' leftovers (tens of MB of malloc)
    gc.collect()
    base = heap.usage()
    objs = [(i,) for i in range(200_000)]  # small objects: CPython's allocator
    mid = heap.usage()
    assert mid["python_blocks"] - base["python_blocks"] >= 200_000
    big = [bytes(64 * 1024) for _ in range(200)]  # 12.5 MB through malloc (not GC-tracked: no collection)
    grown = heap.usage()
    assert grown["malloc_in_use"] - mid["malloc_in_use"] >= 12 * MB
    del big
    freed = heap.usage()
    assert grown["malloc_in_use"] - freed["malloc_in_use"] >= 12 * MB
    assert len(objs) == 200_000
