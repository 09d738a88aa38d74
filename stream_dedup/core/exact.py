"""Exact duplicates: a decaying Bloom filter in front of a RocksDB digest store.

Layout (one store per digest partition):

    M | digest(16) | ts(8) | id   ->  b""      every document with this digest, in (ts, id) order
    E | ts(8) | digest(16) | id   ->  b""      the same, in event-time order, for expiry

The earliest document of a digest within the window is the first ``M`` key at or after
``digest | ts - window``: the store answers "exact duplicate of whom" with one seek, whatever the
arrival order. When a document arrives that is earlier than every stored copy, it becomes the
original and every stored copy is revised to point at it.

The Bloom filter is a cache of "which digests exist": it is rebuilt from the ``M`` keys when the
store is opened (after a restart or a partition move), so it needs no changelog of its own, and a
false positive only costs the one seek that proves the digest absent (counted in ``bloom_fp``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .bloom import DecayingBloom
from .keys import dec_order, enc_order, enc_ts
from .store import KVStore


@dataclass
class ExactOutcome:
    first: bool  # the earliest copy in the window: it goes on to the near-duplicate probes
    original: tuple[int, str] | None = None  # set when this document is a later copy
    revise: list[tuple[int, str]] = field(default_factory=list)  # later copies that now point here


class ExactStore:
    def __init__(self, store: KVStore, window: int, *, bloom_capacity: int = 1_000_000, bloom_fp_rate: float = 0.01):
        self.store = store
        self.window = window
        self.bloom = DecayingBloom.for_capacity(bloom_capacity, bloom_fp_rate, window)
        self.bloom_fp = 0
        self.bloom_negative = 0
        self.rebuild_bloom()

    def rebuild_bloom(self) -> int:
        n = 0
        self.bloom = DecayingBloom(self.bloom.shape, self.window, self.bloom.resolution)
        for k, _ in self.store.prefix(b"M"):
            ts, _ident = dec_order(k, 17)
            self.bloom.add(k[1:17], ts)
            n += 1
        return n

    def process(self, digest: bytes, ts: int, ident: str) -> ExactOutcome:
        me = (ts, ident)
        prefix = b"M" + digest
        out = ExactOutcome(first=True)
        if self.bloom.maybe_contains(digest, ts):
            found_any = False
            for k, _ in self.store.prefix(prefix, start=prefix + enc_ts(ts - self.window)):
                cand = dec_order(k, len(prefix))
                if cand[0] > ts + self.window:
                    break
                found_any = True
                if cand < me:
                    out = ExactOutcome(first=False, original=cand)
                    break
                if cand != me:
                    out.revise.append(cand)
            if not found_any:
                self.bloom_fp += 1
        else:
            self.bloom_negative += 1
        self.bloom.add(digest, ts)
        self.store.begin()
        self.store.put(prefix + enc_order(ts, ident), b"")
        self.store.put(b"E" + enc_ts(ts) + digest + ident.encode("utf-8", "surrogatepass"), b"")
        self.store.commit()
        return out

    def expire(self, before_ts: int) -> int:
        n = 0
        self.store.begin()
        for k, _ in list(self.store.range(b"E", b"E" + enc_ts(before_ts))):
            self.store.delete(b"M" + k[9:25] + k[1:9] + k[25:])
            self.store.delete(k)
            n += 1
        self.store.commit()
        return n
