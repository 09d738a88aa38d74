"""64-bit SimHash (Charikar) over TF-IDF weighted words, and its band keys.

Fingerprint: each distinct word w has weight tf(w) * idf(w) and a 64-bit mmh3 hash; bit j of
the fingerprint is 1 when the weights of the words whose hash has bit j set outweigh those
whose hash has it clear. The bit matrix is a numpy unpack of the hash array, and the sum a
single matrix-vector product, so one document costs one pass over its distinct words.

Band keys (Manku, Jain, Das Sarma 2007): two fingerprints within Hamming distance k differ in
at most k of any k+1 disjoint blocks, so they agree on at least one whole block (pigeonhole).
* ``"4x16"`` style: k+1 blocks, one key per block (k = 3: 4 blocks of 16 bits, 4 keys).
* ``"5c2"`` style: k+2 blocks, one key per *pair* of blocks: at least two blocks agree, so a
  pair key is shared; keys are longer (k = 3: 5 blocks of 13/13/13/13/12, 26-bit keys,
  C(5,2) = 10 keys) and buckets are far smaller, at 2.5x the keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Literal

import numpy as np

from .hashing import hash64_list

BITS = 64


def simhash(words: list[str], weights: np.ndarray) -> int:
    """SimHash of distinct ``words`` with their ``weights`` (same length)."""
    if not words:
        return 0
    # cached word hashes come without a Python call per word; the 1-D unpack, np.dot and a uint64
    # view of the packed bits save most of numpy's fixed costs on short texts
    hashes = np.array(hash64_list(words), dtype=np.uint64)
    bits = np.unpackbits(hashes.view(np.uint8), bitorder="little").reshape(-1, BITS)
    ones = np.dot(weights, bits)  # weight of the words with each bit set
    # bit j set when its words outweigh the rest; int.from_bytes skips a uint64 view and scalar boxing
    return int.from_bytes(np.packbits(ones > 0.5 * np.add.reduce(weights), bitorder="little").tobytes(), "little")


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def split_blocks(nblocks: int, bits: int = BITS) -> list[tuple[int, int]]:
    """(shift, width) of ``nblocks`` disjoint blocks covering ``bits``; wider blocks first."""
    base, extra = divmod(bits, nblocks)
    out, shift = [], 0
    for i in range(nblocks):
        width = base + (1 if i < extra else 0)
        out.append((shift, width))
        shift += width
    return out


@dataclass(frozen=True)
class BandScheme:
    """Which blocks make a key; keys are ints: (key index << 48) | block bits."""

    blocks: tuple[tuple[int, int], ...]
    groups: tuple[tuple[int, ...], ...]

    @classmethod
    def make(cls, k: int, style: Literal["4x16", "5c2"]) -> "BandScheme":
        if style == "4x16":
            blocks = split_blocks(k + 1)
            groups = tuple((i,) for i in range(k + 1))
        elif style == "5c2":
            blocks = split_blocks(k + 2)
            groups = tuple(combinations(range(k + 2), 2))
        else:
            raise ValueError(f"unknown band style {style!r}")
        if max(sum(blocks[i][1] for i in g) for g in groups) > 48:
            raise ValueError(f"k={k} with {style} gives keys wider than 48 bits")
        return cls(tuple(blocks), groups)

    def keys(self, fp: int) -> list[int]:
        vals = [(fp >> s) & ((1 << w) - 1) for s, w in self.blocks]
        out = []
        for gi, g in enumerate(self.groups):
            key, shift = 0, 0
            for i in g:
                key |= vals[i] << shift
                shift += self.blocks[i][1]
            out.append((gi << 48) | key)
        return out
