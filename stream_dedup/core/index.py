"""The bucket index: near-duplicate candidates by (detector, band key), on RocksDB.

On-disk layout (stable; one store per band-key partition, so a worker owns whole partitions):

    B | det(1) | key(8) | ts(8) | id   ->  payload, if it is at most 64 bytes, else b""
    D | det(1) | id                     ->  payload (large payloads, stored once per document)
    E | ts(8) | det(1) | id             ->  the document's keys in this store, 8 bytes each

Bucket entries sort by (ts, id) inside a bucket, so a probe walks each bucket from the earliest
entry and stops at its first verified match: the earliest match, found without reading the rest
of a long bucket (spam campaigns make long buckets). Entries later than the probing document are
verified too: those are late matches, answered so that the later document's verdict is revised.
``E`` orders documents by event time, so expiry deletes from the front.

All writes are idempotent (same keys, same values): replaying a probe changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .detectors.base import Match
from .keys import dec_order, enc_order, enc_ts, enc_u64
from .store import KVStore

INLINE_MAX = 64
Verify = Callable[[bytes, bytes], Match | None]


@dataclass
class Found:
    """A verified candidate: the document (ts, id) and how well it matched."""

    ts: int
    id: str
    match: Match

    @property
    def order(self) -> tuple[int, str]:
        return (self.ts, self.id)


@dataclass
class ProbeResult:
    earliest: Found | None = None  # earliest matching document before the probing one
    later: list[Found] = field(default_factory=list)  # matching documents after it (late matches)
    candidates: int = 0
    capped: int = 0


class BucketIndex:
    def __init__(self, store: KVStore, *, max_candidates: int = 2000):
        self.store = store
        self.max_candidates = max_candidates

    @staticmethod
    def _bucket(det: int, key: int) -> bytes:
        return b"B" + bytes([det]) + enc_u64(key)

    def probe(self, det: int, ident: str, ts: int, payload: bytes, keys: tuple[int, ...], verify: Verify,
              window: int, *, late: bool = True) -> ProbeResult:
        """Find the earliest earlier match and (if ``late``) every later match within the window."""
        me = (ts, ident)
        res = ProbeResult()
        seen: dict[tuple[int, str], Match | None] = {}
        lo, hi = ts - window, ts + window
        for key in keys:
            prefix = self._bucket(det, key)
            n = 0
            for k, v in self.store.prefix(prefix, start=prefix + enc_ts(lo)):
                n += 1
                if n > self.max_candidates:
                    res.capped += 1
                    break
                cand = dec_order(k, len(prefix))
                if cand[0] > hi:
                    break
                if cand == me or cand[1] == ident:
                    continue
                earlier = cand < me
                if earlier and res.earliest is not None and cand >= res.earliest.order:
                    continue  # cannot beat what another bucket found
                if not earlier and not late:
                    break
                if cand in seen:
                    m = seen[cand]
                else:
                    other = v if v else self.store.get(b"D" + bytes([det]) + cand[1].encode("utf-8", "surrogatepass"))
                    m = seen[cand] = verify(payload, other) if other else None
                    res.candidates += 1
                if m is None:
                    continue
                if earlier:
                    res.earliest = Found(cand[0], cand[1], m)
                    if not late:
                        break
                else:
                    res.later.append(Found(cand[0], cand[1], m))
        # one document may sit in several buckets: report each later match once
        uniq: dict[tuple[int, str], Found] = {}
        for f in res.later:
            uniq.setdefault(f.order, f)
        res.later = sorted(uniq.values(), key=lambda f: f.order)
        return res

    def insert(self, det: int, ident: str, ts: int, payload: bytes, keys: tuple[int, ...]) -> None:
        order = enc_order(ts, ident)
        inline = payload if len(payload) <= INLINE_MAX else b""
        self.store.begin()
        for key in keys:
            self.store.put(self._bucket(det, key) + order, inline)
        if not inline:
            self.store.put(b"D" + bytes([det]) + ident.encode("utf-8", "surrogatepass"), payload)
        self.store.put(b"E" + enc_ts(ts) + bytes([det]) + ident.encode("utf-8", "surrogatepass"),
                       b"".join(enc_u64(k) for k in keys))
        self.store.commit()

    def expire(self, before_ts: int) -> int:
        """Delete every document with ts < before_ts; return how many."""
        n = 0
        self.store.begin()
        for k, v in list(self.store.range(b"E", b"E" + enc_ts(before_ts))):
            ts_b, det, ident_b = k[1:9], k[9], k[10:]
            for i in range(0, len(v), 8):
                self.store.delete(b"B" + bytes([det]) + v[i:i + 8] + ts_b + ident_b)
            self.store.delete(b"D" + bytes([det]) + ident_b)
            self.store.delete(k)
            n += 1
        self.store.commit()
        return n

    def documents(self) -> int:
        return self.store.count(b"E")
