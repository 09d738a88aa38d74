"""MinHash signatures (Broder) with numpy, and LSH band keys.

A signature is, for each of ``num_perm`` random hash functions h_i(x) = (a_i x + b_i) >> 32
(multiply-shift over 64-bit words: universal hashing without a modulo, which numpy does slowly on
uint64) of the 32-bit shingle hashes, the minimum: the share of equal positions in two signatures
estimates the Jaccard similarity of the shingle sets. Parameters come from a seeded generator, so
every process (and every worker) computes the same signatures. The whole signature is one
(n_shingles x num_perm) numpy expression; ``datasketch`` uses (a x + b) mod p the same way.

LSH: the signature is cut into ``bands`` bands of ``rows`` values; two documents share a band key
with probability 1 - (1 - J^rows)^bands, which the detector verifies by the estimated Jaccard.
"""
from __future__ import annotations

import numpy as np

from .hashing import shingle_hashes

_SHIFT = np.uint64(32)


class MinHasher:
    def __init__(self, num_perm: int = 128, seed: int = 1):
        gen = np.random.RandomState(seed)
        self.num_perm = num_perm
        self.a = gen.randint(1, 1 << 63, size=num_perm, dtype=np.uint64) | np.uint64(1)
        self.b = gen.randint(0, 1 << 63, size=num_perm, dtype=np.uint64)
        self._a_col, self._b_col = self.a[:, None], self.b[:, None]

    def signature_of_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """Signature of a set of 32-bit hashes (duplicates are harmless)."""
        if hashes.size == 0:
            return np.full(self.num_perm, 0xFFFFFFFF, dtype=np.uint32)
        # (num_perm x n), two in-place passes: x >> 32 is monotonic, so the shift moves after the
        # minimum (num_perm shifts instead of n * num_perm); together much faster than the plain
        # expression. Array arithmetic on uint64 wraps silently, as multiply-shift wants.
        perm = np.multiply(self._a_col, hashes.astype(np.uint64, copy=False))
        np.add(perm, self._b_col, out=perm)
        return (perm.min(axis=1) >> _SHIFT).astype(np.uint32)

    def signature_of_text(self, text: str, n: int) -> np.ndarray:
        """Signature of the text's n-character shingles, hashed without a Python call per shingle."""
        # no np.unique: a repeated shingle cannot change a minimum, and the dedup cost more (a sort)
        # than the repeated columns it saved
        return self.signature_of_hashes(shingle_hashes(text, n) >> _SHIFT)

    def signature_and_count(self, text: str, n: int) -> tuple[np.ndarray, int]:
        """The signature and the number of distinct shingles (their 32-bit hashes): with two
        signatures' Jaccard the sizes give the overlap, so how much of the smaller set is in the
        larger (Broder's containment)."""
        hashes = shingle_hashes(text, n) >> _SHIFT
        return self.signature_of_hashes(hashes), distinct_count(hashes)


def distinct_count(hashes: np.ndarray) -> int:
    """Distinct values of an array of 32-bit hashes: a sort and a count of changes, several times
    cheaper than ``np.unique`` on short arrays."""
    if hashes.size == 0:
        return 0
    s = np.sort(hashes.astype(np.uint32))
    return int(np.count_nonzero(s[1:] != s[:-1])) + 1


def jaccard_estimate(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / len(a)


def containment_estimate(jaccard: float, size_a: int, size_b: int) -> float:
    """The share of the smaller set in the larger, from their Jaccard and sizes: the overlap is
    J (|A| + |B|) / (1 + J)."""
    return min(1.0, jaccard * (size_a + size_b) / ((1 + jaccard) * min(size_a, size_b)))


def band_keys(sig: np.ndarray, bands: int) -> list[int]:
    """One key per band: band index in the top bits, a 48-bit hash of the band's values below."""
    rows = len(sig) // bands
    view = sig[: rows * bands].reshape(bands, rows).astype(np.uint64)
    mixed = np.zeros(bands, dtype=np.uint64)
    for r in range(rows):  # FNV-style mix of the rows of every band at once
        mixed = (mixed ^ view[:, r]) * np.uint64(0x100000001B3)
    return [(i << 48) | (int(m) & ((1 << 48) - 1)) for i, m in enumerate(mixed.tolist())]
