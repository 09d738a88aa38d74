"""Feature hashing shared by the fingerprints: mmh3, cached per distinct feature.

Why a cache: a stream repeats its vocabulary; hashing a word once per process instead of once
per occurrence takes the hash out of the hot path. The cache keeps two bounded generations
(``cache.GenerationalCache``), so a worker's memory stays flat however many new words a stream brings.
"""
from __future__ import annotations

from functools import lru_cache

import mmh3
import numpy as np

from .cache import GenerationalCache

def hash64_uncached(feature: str) -> int:
    """``hash64`` without the cache: for bulk hashing of a whole vocabulary (an IDF table), which
    would only evict a stream's hot words from it."""
    return mmh3.hash64(feature, signed=False)[0]


# 2 x 32,768 words: the hot vocabulary of a news or SMS stream fits; memory stays flat
_HASHES: GenerationalCache[str, int] = GenerationalCache(hash64_uncached, 32_768)


def set_cache_size(entries: int) -> None:
    """Entries per generation (``text.token_cache``); the memo is per process, the last call wins."""
    _HASHES.resize(entries)


def hash64(feature: str) -> int:
    """Unsigned 64-bit mmh3 (x64 128-bit variant, first half) of the UTF-8 feature."""
    return _HASHES.get(feature)


def hash64_list(features: list[str]) -> list[int]:
    """``hash64`` of each feature; cached ones without a Python call each (map over dict.get)."""
    return _HASHES.get_many(features)


def digest128(text: str) -> bytes:
    """The exact-duplicate digest: mmh3 x64 128-bit of the normalized UTF-8 text."""
    return mmh3.hash_bytes(text.encode("utf-8", "surrogatepass"))


_P = np.uint64(0x100000001B3)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def shingle_hashes(text: str, n: int) -> np.ndarray:
    """64-bit hashes of every n-character substring (the whole text when shorter), vectorized.

    A polynomial over the code points of each window, finished with the splitmix64 mixer, so that
    the hash of a shingle depends only on its characters: equal shingles hash equally in every
    document and process. Replaces one Python-level hash call per shingle.
    """
    codes = _code_points(text)
    if codes.size == 0:
        return np.zeros(0, dtype=np.uint64)
    return _window_hashes(codes, min(n, codes.size))


def shingle_hashes_many(texts: list[str], n: int) -> list[np.ndarray]:
    """``shingle_hashes`` of each text, hashed in one pass over their concatenation.

    Why: a short text has few shingles, so the dozen NumPy calls of ``shingle_hashes`` cost more
    than the hashing itself. A window's hash depends only on its characters, so the
    windows of the concatenation that lie inside one text are that text's shingles; the ones that
    straddle two texts are skipped. Texts shorter than n (one shingle of their own length) are
    hashed alone. Each text's array is a view into one buffer."""
    lens = [len(t) for t in texts]
    cat = _code_points("".join(texts))
    h = _window_hashes(cat, n) if cat.size >= n else np.zeros(0, dtype=np.uint64)
    out, start = [], 0
    for t, length in zip(texts, lens):
        out.append(h[start:start + length - n + 1] if length >= n else shingle_hashes(t, n))
        start += length
    return out


_M64 = (1 << 64) - 1


def shingle_hashes_list(text: str, n: int, mask: int = _M64) -> list[int]:
    """``shingle_hashes`` in plain Python ints, equal value for value (``& mask``), for one short text.

    Why: a text judged alone (``Engine.process``, the Python API) has no batch to spread NumPy's
    fixed cost over, and for an SMS those calls were the largest part of its sketch. The window
    polynomial rolls (drop the outgoing character's term, shift, add the incoming one), mod 2^64
    as NumPy's uint64 wraps; the "+1" NumPy adds to each code point is one constant per window."""
    codes = [ord(c) for c in text]  # a lone surrogate is its code unit, as the UTF-32 'surrogatepass' view
    if not codes:
        return []
    n = min(n, len(codes))
    p = int(_P)
    top, ones = _window_constants(n)
    h = 0
    for c in codes[:n]:
        h = (h * p + c) & _M64
    windows = [h]
    for gone, new in zip(codes, codes[n:]):
        h = ((h - gone * top) * p + new) & _M64
        windows.append(h)
    mix1, mix2 = int(_MIX1), int(_MIX2)
    out = []
    for x in windows:
        x = (x + ones) & _M64
        x ^= x >> 30
        x = (x * mix1) & _M64
        x ^= x >> 27
        x = (x * mix2) & _M64
        out.append((x ^ (x >> 31)) & mask)
    return out


@lru_cache(maxsize=64)
def _window_constants(n: int) -> tuple[int, int]:
    """P^(n-1) (the outgoing character's weight) and 1 + P + ... + P^(n-1) (the "+1"s), mod 2^64."""
    p = int(_P)
    return pow(p, n - 1, 1 << 64), sum(pow(p, k, 1 << 64) for k in range(n)) & _M64


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)


def _window_hashes(codes: np.ndarray, n: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = np.zeros(codes.size - n + 1, dtype=np.uint64)
        for j in range(n):
            h = h * _P + codes[j:codes.size - n + 1 + j] + np.uint64(1)
        h ^= h >> np.uint64(30)
        h *= _MIX1
        h ^= h >> np.uint64(27)
        h *= _MIX2
        h ^= h >> np.uint64(31)
    return h
