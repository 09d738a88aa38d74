"""Feature hashing shared by the fingerprints: mmh3, cached per distinct feature.

Why a cache: a stream repeats its vocabulary; hashing a word once per process instead of once
per occurrence takes the hash out of the hot path. The cache is bounded and simply cleared when
full (vocabulary is Zipf-shaped: the frequent words come straight back).
"""
from __future__ import annotations

import mmh3
import numpy as np

_CACHE_MAX = 2_000_000
_cache64: dict[str, int] = {}


def hash64(feature: str) -> int:
    """Unsigned 64-bit mmh3 (x64 128-bit variant, first half) of the UTF-8 feature."""
    h = _cache64.get(feature)
    if h is None:
        if len(_cache64) >= _CACHE_MAX:
            _cache64.clear()
        h = mmh3.hash64(feature, signed=False)[0]
        _cache64[feature] = h
    return h


def hash64_array(features: list[str]) -> np.ndarray:
    return np.fromiter((hash64(f) for f in features), dtype=np.uint64, count=len(features))


def hash32_array(features: list[str], seed: int = 0) -> np.ndarray:
    return np.fromiter((mmh3.hash(f, seed, signed=False) for f in features), dtype=np.uint32, count=len(features))


def digest128(text: str) -> bytes:
    """The exact-duplicate digest: mmh3 x64 128-bit of the normalized UTF-8 text."""
    return mmh3.hash_bytes(text.encode("utf-8", "surrogatepass"))
