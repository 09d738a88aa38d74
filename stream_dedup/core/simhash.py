"""64-bit SimHash (Charikar) over TF-IDF weighted words, and its band keys.

Fingerprint: each distinct word w has weight tf(w) * idf(w) and a 64-bit mmh3 hash; bit j of
the fingerprint is 1 when the weights of the words whose hash has bit j set outweigh those
whose hash has it clear. The bit matrix is a numpy unpack of the hash array; the sums are one
matrix-vector product for a long text, and one segmented reduction for a whole batch of short
texts (``simhash_many``).

Band keys (Manku, Jain, Das Sarma 2007): two fingerprints within Hamming distance k differ in
at most k of any k+1 disjoint blocks, so they agree on at least one whole block (pigeonhole).
* ``"4x16"`` style: k+1 blocks, one key per block (k = 3: 4 blocks of 16 bits, 4 keys).
* ``"5c2"`` style: k+2 blocks, one key per *pair* of blocks: at least two blocks agree, so a
  pair key is shared; keys are longer (k = 3: 5 blocks of 13/13/13/13/12, 26-bit keys,
  C(5,2) = 10 keys) and buckets are far smaller, at 2.5x the keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, combinations
from typing import Literal, Union

import numpy as np

from .hashing import hash64_list

BITS = 64


# A document's features: its distinct words, or their hash64 values already computed (the detector
# hashes a document's words once, for the IDF lookup and for the fingerprint).
Features = Union[list[str], np.ndarray]


def _hashes(words: Features) -> np.ndarray:
    if isinstance(words, np.ndarray):
        return words.astype(np.uint64, copy=False)
    return np.array(hash64_list(words), dtype=np.uint64)


def _bit_rows(words: Features) -> np.ndarray:
    """One row of 64 bits (uint8) per word: the unpacked mmh3 hash."""
    hashes = np.ascontiguousarray(_hashes(words))
    return np.unpackbits(hashes.view(np.uint8), bitorder="little").reshape(-1, BITS)


def _weighted_bits(words: Features, weights: np.ndarray) -> np.ndarray:
    """Rows of (weight if bit j of the word's hash is set, for j < 64; then the weight itself)."""
    out = np.empty((len(words), BITS + 1))
    np.multiply(_bit_rows(words), weights[:, None], out=out[:, :BITS])
    # the weight column gives each document's total, summed in the same row-by-row order as its
    # bit sums: the comparison below is the same arithmetic in the one-document and batch paths
    out[:, BITS] = weights
    return out


def _bits_set(sums: np.ndarray) -> np.ndarray:
    """Bit j set when its words outweigh the rest (ties clear it)."""
    return sums[..., :BITS] + sums[..., :BITS] > sums[..., BITS:]


# Documents with at least this many words take one BLAS matrix-vector product each (news: ~130
# words); shorter ones (SMS: ~15) a row-by-row sum, which ``simhash_many`` does for a whole batch
# in one pass. The choice depends on the document alone, so a fingerprint is the same arithmetic
# whether ``scan`` computes it alone or a worker in a batch.
LONG = 48


def simhash(words: Features, weights: np.ndarray) -> int:
    """SimHash of distinct ``words`` (or their hashes) with their ``weights`` (same length)."""
    if not len(words):
        return 0
    if len(words) >= LONG:
        ones = np.dot(weights, _bit_rows(words))  # weight of the words with each bit set
        set_ = ones > 0.5 * np.add.reduce(weights)
    else:
        set_ = _bits_set(np.add.reduce(_weighted_bits(words, weights), axis=0))
    # int.from_bytes skips a uint64 view and scalar boxing
    return int.from_bytes(np.packbits(set_, bitorder="little").tobytes(), "little")


# rows (words) per numpy pass: bounds the float64 matrix at about 8 MB however large a batch is
_ROWS = 16_384
_U64 = np.dtype("<u8")


def simhash_many(words: list[Features], weights: list[np.ndarray]) -> list[int]:
    """``simhash`` of each document of a batch, with numpy calls per batch instead of per document.

    Why: a short text costs more in numpy's per-call overhead than in arithmetic, and the workers
    prepare events a stream batch at a time. Each short document's sums run row by row over its
    own rows (``np.add.reduceat``), exactly as ``simhash`` sums them alone, so a fingerprint does
    not depend on whether or with which documents it was batched.
    """
    lens = [len(ws) for ws in words]
    out = [simhash(ws, wt) if n >= LONG else 0 for ws, wt, n in zip(words, weights, lens)]
    short = [i for i, n in enumerate(lens) if 0 < n < LONG]
    start = 0
    while start < len(short):
        end, rows = start + 1, lens[short[start]]
        while end < len(short) and rows + lens[short[end]] <= _ROWS:
            rows += lens[short[end]]
            end += 1
        docs = short[start:end]
        feats = [words[i] for i in docs]
        rows_of = (np.concatenate([_hashes(f) for f in feats]) if any(isinstance(f, np.ndarray) for f in feats)
                   else list(chain.from_iterable(feats)))
        weighted = _weighted_bits(rows_of, np.concatenate([weights[i] for i in docs]))
        sums = np.add.reduceat(weighted, np.cumsum([0] + [lens[i] for i in docs[:-1]]), axis=0)
        for i, fp in zip(docs, np.packbits(_bits_set(sums), axis=1, bitorder="little").view(_U64).ravel().tolist()):
            out[i] = fp
        start = end
    return out


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
        groups: tuple[tuple[int, ...], ...]
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
