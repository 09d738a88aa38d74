"""Which partition owns what: band-key buckets, document ids, exact digests.

The same pure functions place a document's probes in the workers and in ``scan`` (one partition),
so both judge it against the same buckets.
"""
from __future__ import annotations

import mmh3

from .wire import Prepared, Probe

_GOLDEN = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1


def key_partition(det: int, key: int, partitions: int) -> int:
    """Which band-key partition owns bucket (det, key): a fixed mix, the same in every process."""
    return ((((key ^ (det << 56)) * _GOLDEN) & _M64) >> 32) % partitions


def id_partition(ident: str, partitions: int) -> int:
    """Which partition owns a document id (its decide state, its page events)."""
    return mmh3.hash(ident.encode("utf-8", "surrogatepass"), signed=False) % partitions


def digest_partition(digest: bytes, partitions: int) -> int:
    """Which partition's exact store owns a digest."""
    return int.from_bytes(digest[:8], "big") % partitions


def route_probes(p: Prepared, partitions: int) -> list[Probe]:
    """Group the document's keys by owning partition: one probe per partition, never one per key."""
    if partitions == 1:  # the embedded engine: every key is partition 0's, in the order grouped below
        return [Probe(p.id, p.ts, 0, [(code, tuple(keys), payload) for code, keys, payload in p.sketches
                                      if keys])] if any(keys for _, keys, _ in p.sketches) else []
    by_part: dict[int, dict[int, list[int]]] = {}
    payloads = {}
    for code, keys, payload in p.sketches:
        payloads[code] = payload
        for key in keys:
            by_part.setdefault(key_partition(code, key, partitions), {}).setdefault(code, []).append(key)
    return [Probe(p.id, p.ts, part, [(code, tuple(ks), payloads[code]) for code, ks in dets.items()])
            for part, dets in sorted(by_part.items())]


def fan_out(p: Prepared, partitions: int) -> tuple[Prepared, list[Probe]]:
    """Split a prepared document into its probes (to the index partitions) and what the exact stage
    needs (the digest and how many probes went out, no sketches), both sent by prepare at once.

    The exact check and the probes run side by side, so a document crosses two hops from page to
    verdict. Exact copies are probed and inserted into the buckets too; their own verdicts do not
    change (an exact match beats every near match, ``DocState``).

    The Kafka worker sends both on the probes topic, the Prepared to ``digest_partition`` (see
    ``index_item``)."""
    probes = route_probes(p, partitions)
    return Prepared(p.id, p.ts, p.digest, p.kind, [], p.rank, p.snippet, len(probes), p.seen, p.note), probes
