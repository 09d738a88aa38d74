"""Keep a long-running worker's RSS close to the memory it uses (glibc's malloc).

Why: CPython hands every object over 512 bytes (bucket values, message batches, numpy arrays,
word-hash sets) to ``malloc``, and RocksDB, librdkafka and the thread pool allocate from their
own threads. glibc gives each thread its own arena (up to 8 per core) and returns freed memory
to the system only from the top of a heap; a worker that allocates and frees such blocks in
varying sizes all day fragments its arenas, so RSS creeps although the live memory is flat (the
soak test measured exactly that: malloc's in-use bytes flat, its arenas growing a few MB a
minute). Two arenas are enough for a worker whose Python code runs on one thread, and
``malloc_trim(0)`` releases the free pages inside the arenas, not just at their tops.

Both are glibc functions; elsewhere (musl, macOS) they are skipped and nothing changes.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger("stream_dedup.heap")

_M_ARENA_MAX = -8  # mallopt parameter number in glibc's malloc.h


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _libc()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_MALLINFO2 = getattr(_LIBC, "mallinfo2", None)  # glibc >= 2.33
if _MALLINFO2 is not None:
    _MALLINFO2.restype = _MallInfo2


def limit_arenas(n: int = 2) -> bool:
    """At most ``n`` malloc arenas; call before threads start (arenas are made on a thread's first malloc)."""
    if _LIBC is None or n <= 0:
        return False
    ok = bool(_LIBC.mallopt(_M_ARENA_MAX, n))
    if not ok:
        log.warning("mallopt(M_ARENA_MAX, %d) refused", n)
    return ok


def trim() -> bool:
    """Give free heap pages back to the system; True when glibc released any."""
    return bool(_LIBC.malloc_trim(0)) if _LIBC is not None else False


def usage() -> dict[str, int]:
    """Where the heap is, to tell a leak from fragmentation when RSS grows.

    ``python_blocks``: objects CPython's small-object allocator holds (a leak of Python objects
    makes it grow); ``malloc_in_use`` / ``malloc_free``: bytes glibc's arenas and mmaps hand out /
    keep free (the first grows with a leak in C code or of large objects, the second with
    fragmentation). glibc only for the malloc figures."""
    out = {"python_blocks": sys.getallocatedblocks()}
    if _MALLINFO2 is not None:
        m = _MALLINFO2()
        out["malloc_in_use"] = m.uordblks + m.hblkhd
        out["malloc_free"] = m.fordblks
    return out
