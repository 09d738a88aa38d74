"""64-bit SimHash (Charikar) over TF-IDF weighted words, and its band keys.

Fingerprint: each distinct word w has weight tf(w) * idf(w) and a 64-bit mmh3 hash; bit j of
the fingerprint is 1 when the weights of the words whose hash has bit j set outweigh those
whose hash has it clear. The bit matrix is a numpy unpack of the hash array; the sums are one
matrix-vector product for a document, and a few numpy calls for a whole batch of short texts
(``simhash_many``).

Weights are rounded to fixed point (multiples of 2^-16) before they are summed, so every product
and partial sum is an integer-valued float64 below 2^53: exact, whatever the order of the
additions. Why: the batch and the one-document paths, BLAS with or without FMA, give the same
bits by construction (no shared summation order to keep), and a fingerprint does not depend on
the order of a document's words.

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

# 2^16 steps per unit of weight: a TF-IDF weight (idf about 1-20) keeps five significant digits,
# and a document's sums stay exact while its weights total less than 2^37
FIXED_POINT = 2.0 ** 16


def fixed(weights: np.ndarray) -> np.ndarray:
    """The weights as integer-valued float64, in units of 2^-16 (round half to even)."""
    return np.rint(np.asarray(weights, dtype=np.float64) * FIXED_POINT)


def _hashes(words: Features) -> np.ndarray:
    if isinstance(words, np.ndarray):
        return words.astype(np.uint64, copy=False)
    return np.array(hash64_list(words), dtype=np.uint64)


def _bit_rows(words: Features) -> np.ndarray:
    """One row of 64 bits (uint8) per word: the unpacked mmh3 hash."""
    hashes = np.ascontiguousarray(_hashes(words))
    return np.unpackbits(hashes.view(np.uint8), bitorder="little").reshape(-1, BITS)


def simhash(words: Features, weights: np.ndarray) -> int:
    """SimHash of distinct ``words`` (or their hashes) with their ``weights`` (same length)."""
    if not len(words):
        return 0
    q = fixed(weights)
    ones = np.dot(q, _bit_rows(words))  # weight of the words with each bit set
    # half the total is exact too (a power-of-two scaling); equal halves (a tie) clear the bit.
    # int.from_bytes skips a uint64 view and scalar boxing
    return int.from_bytes(np.packbits(ones > 0.5 * np.add.reduce(q), bitorder="little").tobytes(), "little")


# Documents with at least this many words are fingerprinted one by one in a batch too (news: ~130
# words, a BLAS product each costs little beside its arithmetic); shorter ones (SMS: ~15) together.
LONG = 48
# short documents per numpy pass: bounds its bit array at 1,024 x 48 x 64 bytes (3 MB)
_DOCS = 1024
# words per block of a batch's layout: a document takes whole blocks, its last one padded
_BLOCK = 8
_U64 = np.dtype("<u8")


def simhash_many(words: list[Features], weights: list[np.ndarray]) -> list[int]:
    """``simhash`` of each document of a batch, with numpy calls per batch instead of per document.

    Why: a short text costs more in numpy's per-call overhead than in arithmetic, and the workers
    prepare events a stream batch at a time. The short documents' hashes and fixed-point weights
    are laid out in blocks of 8 words, a document's last block padded with zero weights; one
    ``einsum`` gives every block's sums and one ``np.add.reduceat`` each document's (cheaper for an SMS
    than a weighted bit matrix summed row by row; padding every document to the batch's longest
    wasted most of the work on SMS). The sums are
    exact, so each fingerprint is bit for bit the one ``simhash`` gives the document alone.
    """
    lens = list(map(len, words))
    if lens and 0 < min(lens) and max(lens) < LONG and len(lens) <= _DOCS:  # a batch of SMS: one pass
        return _simhash_short(words, weights, np.array(lens))
    out = [simhash(ws, wt) if n >= LONG else 0 for ws, wt, n in zip(words, weights, lens)]
    short = [i for i, n in enumerate(lens) if 0 < n < LONG]
    for start in range(0, len(short), _DOCS):
        docs = short[start:start + _DOCS]
        for i, fp in zip(docs, _simhash_short([words[i] for i in docs], [weights[i] for i in docs],
                                              np.array([lens[i] for i in docs]))):
            out[i] = fp
    return out


def _simhash_short(words: list[Features], weights: list[np.ndarray], lens: np.ndarray) -> list[int]:
    """``simhash`` of documents of 1 to LONG - 1 words each."""
    stacked = (np.concatenate([_hashes(f) for f in words]) if any(isinstance(f, np.ndarray) for f in words)
               else _hashes(list(chain.from_iterable(words))))
    blocks = np.zeros(len(lens) + 1, dtype=np.int64)  # blocks[d]: document d's first block
    np.cumsum((lens + (_BLOCK - 1)) // _BLOCK, out=blocks[1:])
    firsts = blocks[:-1]
    starts = firsts * _BLOCK  # document d's first slot: its word j goes to slot starts[d] + j
    slot = np.arange(stacked.size) + np.repeat(starts - (np.cumsum(lens) - lens), lens)
    hashes = np.zeros(int(blocks[-1]) * _BLOCK, dtype=np.uint64)
    hashes[slot] = stacked
    q = np.zeros(hashes.size)
    q[slot] = fixed(np.concatenate(weights))
    bits = np.unpackbits(hashes.view(np.uint8), bitorder="little").reshape(-1, _BLOCK, BITS)
    per_block = np.einsum("kw,kwb->kb", q.reshape(-1, _BLOCK), bits)
    ones = np.add.reduceat(per_block, firsts, axis=0)
    half = 0.5 * np.add.reduceat(q, starts)
    return np.packbits(ones > half[:, None], axis=1, bitorder="little").view(_U64).ravel().tolist()


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
