"""How often CPython's cyclic garbage collector walks the heap, in the two long loops: ``scan``
and the worker.

Why: both load a lot once (modules, the IDF table's words, Faust's and aiokafka's services) and
then allocate several small objects per event (in ``scan`` they live until it ends: decide states,
digests by id). With CPython's default thresholds (a young pass every 700 allocations, a full pass
whenever the survivors grew by a quarter) the full passes walk everything loaded at start-up again
and again and find nothing to free there, and every stage of a worker stalls for each pass.

``gc.freeze`` moves what exists to a generation the collector never walks, and a young pass every
``threshold`` allocations instead of 700 keeps memory bounded all the same: the passes still run,
they only find more to free each time.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

THRESHOLD = 50_000  # allocations between young passes (CPython's default: 700)


def settle(threshold: int = THRESHOLD, *, collect: bool = False) -> int:
    """Freeze every object that exists now and set the young threshold; returns how many objects
    are frozen in all. Call it when start-up is over: what it freezes is never collected, so a
    cycle that becomes garbage later stays in memory (start-up's objects live as long as the
    process does, so nothing is lost). ``collect``: one full pass first, so that no garbage of
    start-up is frozen with them (a worker: once, at start; a scan skips it, a noticeable part
    of a short run)."""
    if collect:
        gc.collect()
    gc.set_threshold(threshold, 20, 100)
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def fewer_collections(threshold: int = THRESHOLD) -> Iterator[None]:
    """``settle`` for the length of a block (a scan inside a longer process), then back as it was."""
    old = gc.get_threshold()
    settle(threshold)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
