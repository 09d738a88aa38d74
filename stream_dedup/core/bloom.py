"""A decaying Bloom filter for exact duplicates over a sliding window.

Choice: the decaying Bloom filter of Shen and Zhang (2008) keeps, per cell, a counter that is
set to the window length W on insert and decremented as the window slides; a cell is "set"
while its counter is positive. Storing the *insertion tick* instead of the counter is the same
filter with lazy decay (counter = W - (now - tick)), so sliding the window costs nothing: no
sweep over the cells, ever. Cells are ``uint32`` ticks of ``window / resolution`` each.

Bounds (n = distinct items inserted within one window, m cells, k hashes):
* No false negatives inside the window: an item inserted at tick t sets its k cells to >= t
  (cells only grow), so a query at any tick <= t + W + 1 finds all of them set. The extra
  tick of slack (resolution) only makes the filter keep items slightly longer than W.
* False-positive rate (1 - e^{-kn/m})^k, sized by ``for_capacity(n, p)``:
  m = -n ln p / (ln 2)^2, k = (m / n) ln 2. ``estimated_fp_rate()`` measures it from the live
  cells; the tests measure it against fresh items.
* Memory: 4 m bytes: 1,000,000 documents per window at p = 1% is 9.59 M cells, 38 MB. The workers
  give each exact partition its share (``engine.bloom_capacity / topics.partitions``).

A "maybe" is confirmed against the digest store, so a false positive costs one RocksDB read
and never marks a unique page duplicate. The clock is any monotone number: event time in
milliseconds for time windows, or an arrival counter for count windows.
"""
from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np

_EMPTY = 0
_U64 = (1 << 64) - 1  # positions wrap as uint64 arithmetic did: the same cells as filters saved before
_TWO_U64 = struct.Struct("<QQ")  # a digest's two halves, for double hashing
_HEADER = struct.Struct("<I")


@dataclass(frozen=True)
class BloomShape:
    cells: int
    hashes: int

    @classmethod
    def for_capacity(cls, capacity: int, fp_rate: float) -> "BloomShape":
        m = max(64, math.ceil(-capacity * math.log(fp_rate) / (math.log(2) ** 2)))
        k = max(1, round(m / capacity * math.log(2)))
        return cls(m, k)

    def memory_bytes(self) -> int:
        return 4 * self.cells


class DecayingBloom:
    def __init__(self, shape: BloomShape, window: int, resolution: int = 64, *, prefault: bool = True):
        if window <= 0 or resolution <= 0:
            raise ValueError("window and resolution must be positive")
        self.shape = shape
        self.window = window
        self.resolution = resolution
        self.tick_len = max(1, window // resolution)
        self.window_ticks = -(-window // self.tick_len)  # ceil
        self.cells = np.zeros(shape.cells, dtype=np.uint32)
        # np.zeros maps untouched pages; inserts touch random cells, so RSS would creep up towards
        # the filter's size for thousands of inserts. A worker touches them now (``prefault``): its
        # memory is what it will be. ``scan`` does not: touching the whole filter is start-up
        # time, for a flat RSS curve nobody watches in a batch run.
        if prefault:
            self.cells.fill(0)
        self.base: int | None = None  # tick value stored as 1; keeps uint32 cells small
        self.inserted = 0

    @classmethod
    def for_capacity(cls, capacity: int, fp_rate: float, window: int, resolution: int = 64, *,
                     prefault: bool = True) -> "DecayingBloom":
        return cls(BloomShape.for_capacity(capacity, fp_rate), window, resolution, prefault=prefault)

    @property
    def cells(self) -> np.ndarray:
        return self._cells

    @cells.setter
    def cells(self, cells: np.ndarray) -> None:
        self._cells = cells
        # scalar reads and writes through a memoryview: a document touches k (7) cells, and numpy's
        # fancy indexing and small-array arithmetic cost more per call than the whole filter's work
        self._view = cells.data

    # digests are already uniform 128-bit hashes: Kirsch-Mitzenmacher double hashing on them
    def _positions(self, digest: bytes) -> list[int]:
        h1, h2 = _TWO_U64.unpack_from(digest.ljust(16, b"\0"))
        h2 |= 1
        m = self.shape.cells
        return [((h1 + i * h2) & _U64) % m for i in range(self.shape.hashes)]

    def _tick(self, clock: int) -> int:
        t = clock // self.tick_len
        if self.base is None:
            self.base = t - (1 << 30)  # room for items older than the first one
        rel = t - self.base
        if rel >= (1 << 32) - 1:  # rebase: shift every cell down, keep order, clip the long-expired
            shift = rel - (1 << 31)
            self.cells = (np.maximum(self.cells.astype(np.int64) - shift, 0)).astype(np.uint32)
            self.base += shift
            rel -= shift
        return max(1, rel)

    def _oldest(self, tick: int) -> int:
        """The smallest cell value still inside the window at ``tick`` (0 is never inserted)."""
        return max(1, tick - self.window_ticks - 1)

    def add(self, digest: bytes, clock: int) -> bool:
        """Insert; returns what ``maybe_contains`` would have said just before, from the same pass
        over the cells (the exact stage asks both of every document)."""
        fresh = self.base is None
        t = self._tick(clock)
        oldest = self._oldest(t)
        view = self._view
        maybe = not fresh
        for p in self._positions(digest):
            c = view[p]
            if c < oldest:
                maybe = False
            if c < t:
                view[p] = t
        self.inserted += 1
        return maybe

    def maybe_contains(self, digest: bytes, clock: int) -> bool:
        """False: certainly not inserted within the window around ``clock``. True: maybe."""
        if self.base is None:
            return False
        oldest = self._oldest(self._tick(clock))
        view = self._view
        return all(view[p] >= oldest for p in self._positions(digest))

    def live_fraction(self, clock: int) -> float:
        if self.base is None:
            return 0.0
        oldest = self._oldest(self._tick(clock))
        return float(np.count_nonzero(self.cells >= oldest)) / self.shape.cells

    def estimated_fp_rate(self, clock: int) -> float:
        return self.live_fraction(clock) ** self.shape.hashes

    # --- persistence: a worker snapshots its filter into its state store
    def to_bytes(self) -> bytes:
        meta = json.dumps({"cells": self.shape.cells, "hashes": self.shape.hashes, "window": self.window,
                           "resolution": self.resolution, "base": self.base, "inserted": self.inserted}).encode()
        return _HEADER.pack(len(meta)) + meta + zlib.compress(self.cells.tobytes(), 1)

    @classmethod
    def from_bytes(cls, data: bytes) -> "DecayingBloom":
        (n,) = _HEADER.unpack_from(data)
        meta = json.loads(data[_HEADER.size:_HEADER.size + n])
        f = cls(BloomShape(meta["cells"], meta["hashes"]), meta["window"], meta["resolution"])
        f.cells = np.frombuffer(zlib.decompress(data[_HEADER.size + n:]), dtype=np.uint32).copy()
        f.base, f.inserted = meta["base"], meta["inserted"]
        return f
