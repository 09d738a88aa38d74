"""Exact duplicates: a decaying Bloom filter in front of a digest store.

Layout (any ``MutableMapping[bytes, bytes]``, like the bucket index):

    X | digest(16)  ->  the documents with this digest: (ts, id) entries sorted by (ts, id)

The earliest entry within the window is the original, whatever the arrival order. When a
document arrives that is earlier than every stored copy, it becomes the original and the
stored copies are revised to point at it. A group keeps at most ``max_members`` entries (the
earliest): later copies are still answered, only a late original beyond that many copies would
leave the extra copies pointing at the previous original.

The Bloom filter is a cache of "which digests exist": ``rebuild_bloom`` fills it from the store
(after a restart or a partition move), so it needs no changelog of its own, and a false positive
only costs the one read that proves the digest absent (counted in ``bloom_fp``), so it can never
turn a unique page into a duplicate.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, MutableMapping

from .bloom import DecayingBloom
from .index import (all_before, apply_writes, iter_entries, merge_entry, prune_items, snapshot_sink,
                    unpack_entries)


@dataclass
class ExactOutcome:
    first: bool  # the earliest copy in the window: it goes on to the near-duplicate probes
    original: tuple[int, str] | None = None  # set when this document is a later copy
    revise: list[tuple[int, str]] = field(default_factory=list)  # later copies that now point here


class ExactStore:
    def __init__(self, data: MutableMapping[bytes, bytes], window: int, *, bloom_capacity: int = 1_000_000,
                 bloom_fp_rate: float = 0.01, max_members: int = 1000, prefault: bool = True):
        self.data = data
        self.window = window
        self.max_members = max_members
        self.prefault = prefault  # see DecayingBloom
        self.bloom = DecayingBloom.for_capacity(bloom_capacity, bloom_fp_rate, window, prefault=prefault)
        self.bloom_fp = 0
        self.bloom_negative = 0
        self.watermark: int | None = None

    def rebuild_bloom(self, items: Iterable[tuple[bytes, bytes]] | None = None) -> int:
        """Refill the filter from stored digests (all of ``data``, or the given items)."""
        if self.bloom.inserted or self.bloom.base is not None:  # a fresh filter is already empty
            self.bloom = DecayingBloom(self.bloom.shape, self.window, self.bloom.resolution, prefault=self.prefault)
        n = 0
        for k, v in (self.data.items() if items is None else items):
            if k[:1] == b"X":
                for ts, _ident, _ in unpack_entries(v):
                    self.bloom.add(k[1:17], ts)
                    n += 1
        return n

    def process(self, digest: bytes, ts: int, ident: str) -> ExactOutcome:
        if self.watermark is None or ts > self.watermark:
            self.watermark = ts
        me = (ts, ident)
        key = b"X" + digest
        raw = None
        if self.bloom.add(digest, ts):  # it was maybe there: the store says whether it was
            raw = self.data.get(key)
            if not raw:
                self.bloom_fp += 1
        else:
            self.bloom_negative += 1
        entries: Iterable[tuple[int, str, bytes]] = []
        if raw and all_before(raw, me):
            # every member is earlier than this document (a stream in time order): the loop stops
            # at the first one in the window, so decode them one at a time (a campaign's digest
            # holds up to max_members)
            entries = iter_entries(raw)
        elif raw:
            entries = unpack_entries(raw)
        out = ExactOutcome(first=True)
        for cts, cid, _ in entries:
            if cts < ts - self.window or cid == ident:
                continue
            if cts > ts + self.window:
                break
            if (cts, cid) < me:
                out = ExactOutcome(first=False, original=(cts, cid))
                break
            out.revise.append((cts, cid))
        new = merge_entry(raw, (ts, ident, b""), self.watermark - self.window, self.max_members)
        if new != raw:
            self.data[key] = new
        return out

    def sweep(self, before_ts: int) -> int:
        """Drop every entry older than before_ts (walks the whole mapping: scan and tests)."""
        writes, dropped = prune_items(((k, v) for k, v in self.data.items() if k[:1] == b"X"), before_ts,
                                      sink=snapshot_sink(self.data))
        apply_writes(self.data, writes)
        return dropped
