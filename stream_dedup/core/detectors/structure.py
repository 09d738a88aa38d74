"""HTML structure detector: the text-structure tree and punctuation feature strings of Xiong, Ya and
Zhang (2013, ``docs/references/xiong2013-structure-tree-feature-strings-bloom.txt``).

The method: a page's main-content blocks carry weights (``core.html``: numbered sub-headings, then
headings h1..h6, font size, bold, font colour, then plain paragraphs). They form a tree under the
page's title by the paper's three rules: a block of the same weight as the one before is its right
sibling, of a lower weight its child, of a higher weight is compared with that block's parent, and
so on up (a first block that is an HTML heading is the title itself). A block's depth in the
tree is its level. Every clause that ends in a high-frequency punctuation mark (after
normalization ``. ? ! ; ,``) gives a *feature string*: its first and last characters and the mark.
A level's feature strings go into a Bloom filter; two pages are compared level by level by
testing each feature string of one against the other's filter: with c strings found, o and w the
two levels' string counts, the level is similar when 2c / (o + w) > ``beta`` (0.92), and the pages
are duplicates when 2s / (levels of A + levels of B) > ``beta2`` (0.90), s the similar levels. A
level holding under ``MIN_LEVEL_SHARE`` of its page's strings, the mark of template text that
extraction let through, is not counted. Both directions are tested and the smaller c kept, so
that which page came first never changes the answer.

Why it suits reposted news: a repost in another site's template keeps the sentences, their
punctuation and the article's own sub-headings while the markup around it changes; a different
article in the *same* template shares the furniture (already dropped by extraction) but almost
none of the clause boundaries.

Payload: a format byte, then per level its depth, its filter (a power of two bits, 16 per string,
k = 4 positions by double hashing) and its strings' 64-bit hashes. Keys: the ``keys`` smallest
string hashes of the page (bottom-k), which pages with nearly the same strings share: the paper
compares a page with every stored source page, which a stream cannot afford.
"""
from __future__ import annotations

import math
import re
import struct
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import mmh3
import numpy as np

from ..paragraphs import HEADING_LEVELS, NUMBERED
from .base import Detector, Match, Sketch

if TYPE_CHECKING:
    from ..document import Doc

_CLAUSE = re.compile(r"[^.?!;,]+[.?!;,]")
_K = 4
_BITS_PER_FEATURE = 16
FORMAT = 0xF1  # the first byte of this payload; earlier payloads (a level count first) are not compared
_LEVEL = struct.Struct("<BBI")  # depth, log2 of the filter's bits, string count


def feature_strings(text: str) -> list[str]:
    """First character, last character and closing mark of every clause that ends in one."""
    out = []
    for m in _CLAUSE.finditer(text):
        clause = m.group().strip()
        body = clause[:-1].strip()
        if body:
            out.append(body[0] + body[-1] + clause[-1])
    return out


def tree_depths(weights: list[int]) -> list[int]:
    """Each block's depth in the text-structure tree (the title is the root, depth 0). Weights are
    classes, a lower number a higher weight: equal -> sibling, lower weight -> child, higher -> compare
    with the parent, and so up the path to the root, which outranks every block."""
    path: list[tuple[int, int]] = [(-1, 0)]  # (weight class, depth) from the root to the last block
    out = []
    for i, w in enumerate(weights):
        if i == 0:
            path.append((w, 1))  # the first block is the root's first child whatever its weight
        else:
            while w < path[-1][0]:  # a higher weight than the node: compare with its parent
                path.pop()
            if w == path[-1][0]:
                path[-1] = (w, path[-1][1])  # a right sibling takes the node's place on the path
            else:
                path.append((w, path[-1][1] + 1))
        out.append(path[-1][1])
    return out


def _hashes(features: list[str]) -> np.ndarray:
    return np.array(sorted({mmh3.hash64(f, signed=False)[0] for f in features}), dtype=np.uint64)


def _positions(hashes: np.ndarray, m: int) -> np.ndarray:
    """The k filter positions of each hash (Kirsch-Mitzenmacher double hashing), shape (k, n)."""
    a = hashes & np.uint64(0xFFFFFFFF)
    b = (hashes >> np.uint64(32)) | np.uint64(1)
    steps = np.arange(_K, dtype=np.uint64)[:, None]
    return (a[None, :] + steps * b[None, :]) & np.uint64(m - 1)


def bloom(hashes: np.ndarray) -> np.ndarray:
    """A filter of a power of two bits, 16 per string, with the strings' positions set."""
    m = 1 << max(6, math.ceil(math.log2(max(1, hashes.size) * _BITS_PER_FEATURE)))
    bits = np.zeros(m, dtype=bool)
    bits[_positions(hashes, m).ravel()] = True
    return bits


def found_in(hashes: np.ndarray, bits: np.ndarray) -> int:
    """How many of the strings the filter says it holds (each string tested on its own)."""
    if not hashes.size:
        return 0
    return int(bits[_positions(hashes, bits.size)].all(axis=0).sum())


class Level(NamedTuple):
    bits: np.ndarray
    hashes: np.ndarray


def level_similarity(a: Level, b: Level) -> float:
    """2c / (o + w), c the strings of one level found in the other's filter (the smaller way round)."""
    o, w = a.hashes.size, b.hashes.size
    if o + w == 0:
        return 1.0
    c = min(found_in(a.hashes, b.bits), found_in(b.hashes, a.bits))
    return 2 * c / (o + w)


# a level holding less than this share of its page's feature strings is left out of the level
# count: a related-links heading or a caption that extraction let through adds a level of a string
# or two, and one such level on one page would make 2s / (o + w) fail for a page and its copy
MIN_LEVEL_SHARE = 0.05


def _substantial(levels: dict[int, Level]) -> dict[int, Level]:
    total = sum(lv.hashes.size for lv in levels.values())
    return {d: lv for d, lv in levels.items() if lv.hashes.size >= MIN_LEVEL_SHARE * total}


class StructureDetector(Detector):
    name = "structure"
    code = 5

    def __init__(self, *, beta: float = 0.92, beta2: float = 0.90, keys: int = 6, min_features: int = 8):
        self.beta = beta
        self.beta2 = beta2
        self.n_keys = keys
        self.min_features = min_features
        # a probe's own payload is compared with every candidate of its buckets, and a story's
        # original with every later copy: each decoded once while among the 1,024 most recent
        self._levels_of = lru_cache(maxsize=1024)(self._counted_levels)

    def applies(self, doc: "Doc") -> bool:
        return doc.kind == "html" and bool(doc.html_blocks)

    def levels(self, doc: "Doc") -> dict[int, list[str]]:
        """Feature strings per level (tree depth); levels without any are left out. The page's
        title is the root: an HTML heading before the first block with feature strings (the blocks
        before it, without sentences, are left out with it)."""
        blocks = doc.html_blocks or []
        features = [feature_strings(text) for _, text in blocks]
        start = 0
        for i, (w, _) in enumerate(blocks):
            if NUMBERED < w <= HEADING_LEVELS:
                start = i + 1
                break
            if features[i]:  # sentences before any heading: no title among them
                break
        out: dict[int, list[str]] = {}
        for depth, fs in zip(tree_depths([w for w, _ in blocks[start:]]), features[start:]):
            if fs:
                out.setdefault(depth, []).extend(fs)
        return out

    def sketch(self, doc: "Doc") -> Sketch | None:
        levels = {depth: _hashes(fs) for depth, fs in self.levels(doc).items()}
        every = np.unique(np.concatenate(list(levels.values()))) if levels else np.zeros(0, np.uint64)
        if every.size < self.min_features:
            return None
        parts = [struct.pack("<BB", FORMAT, len(levels))]
        for depth, hashes in sorted(levels.items()):
            bits = bloom(hashes)
            parts.append(_LEVEL.pack(min(depth, 255), int(math.log2(bits.size)), hashes.size))
            parts.append(np.packbits(bits).tobytes() + hashes.astype("<u8").tobytes())
        keys = tuple(int(h) >> 1 for h in every[:self.n_keys])
        return Sketch(keys, b"".join(parts))

    @staticmethod
    def unpack(payload: bytes) -> dict[int, Level] | None:
        """Levels by depth; None for a payload of an earlier format."""
        if len(payload) < 2 or payload[0] != FORMAT:
            return None
        pos, out = 2, {}
        for _ in range(payload[1]):
            depth, log_m, n = _LEVEL.unpack_from(payload, pos)
            pos += _LEVEL.size
            m = 1 << log_m
            bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8, count=m // 8, offset=pos)).astype(bool)
            pos += m // 8
            hashes = np.frombuffer(payload, dtype="<u8", count=n, offset=pos).astype(np.uint64)
            pos += 8 * n
            out[depth] = Level(bits, hashes)
        return out

    @classmethod
    def _counted_levels(cls, payload: bytes) -> dict[int, Level] | None:
        """The levels of a payload that count (``_substantial``); None for an earlier format."""
        levels = cls.unpack(payload)
        return _substantial(levels) if levels else None

    def verify(self, a: bytes, b: bytes) -> Match | None:
        la, lb = self._levels_of(a), self._levels_of(b)
        if not la or not lb:
            return None
        sims = [level_similarity(la[d], lb[d]) for d in la.keys() & lb.keys()]
        similar = sum(s > self.beta for s in sims)
        if 2 * similar / (len(la) + len(lb)) > self.beta2:
            return Match(round(min(sims), 4))
        return None
