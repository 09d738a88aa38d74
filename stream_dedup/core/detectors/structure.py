"""HTML structure detector: text-structure tree + punctuation feature strings, compared per level.

The method (after the Chinese web-page dedup literature on "文本结构树 + 标点特征串"): a page's
main content is a tree of levels (headings h1..h6, emphasis blocks, body paragraphs; see
``core.html``). Every clause that ends in a high-frequency punctuation mark (after normalization:
``. ? ! ; ,``) contributes a *feature string*: its first character, its last character and the
mark. Feature strings are grouped per level into "tag text blocks". Two pages are duplicates when,
for a share > ``beta2`` (0.90) of the levels either page has, the level's blocks are similar:
``2c / (o + w) > beta`` (0.92), where o and w are the feature counts and c the common ones.

Why it suits reposted news: a repost in another site's template keeps the sentences and their
punctuation while the markup, the furniture and often the spacing change; a different article in
the *same* template shares the furniture (already dropped by extraction) but almost none of the
clause boundaries.

Payload: per level a Bloom filter of the feature strings (power-of-two bits, 16 per feature, k = 4),
so a page's payload is small and fixed per feature. ``verify`` estimates c from the filters without
the strings: fold both to the smaller size (a 2m-bit filter with index ``h mod 2m`` folds to m bits
by OR-ing its halves), then ``n(X) = -(m/k) ln(1 - bits(X)/m)`` for A, B and A|B, and
``c = n(A) + n(B) - n(A|B)``. Keys: the ``keys`` smallest feature hashes of the page (bottom-k),
which near-identical feature sets share.
"""
from __future__ import annotations

import math
import re
import struct
from typing import TYPE_CHECKING

import mmh3
import numpy as np

from .base import Detector, Match, Sketch

if TYPE_CHECKING:
    from ..document import Doc

_CLAUSE = re.compile(r"[^.?!;,]+[.?!;,]")
_K = 4
_BITS_PER_FEATURE = 16


def feature_strings(text: str) -> list[str]:
    out = []
    for m in _CLAUSE.finditer(text):
        clause = m.group().strip()
        body = clause[:-1].strip()
        if body:
            out.append(body[0] + body[-1] + clause[-1])
    return out


def _positions(h: int, m: int) -> list[int]:
    # Kirsch-Mitzenmacher double hashing from one 64-bit hash; index mod m (m a power of two) so filters fold
    a, b = h & 0xFFFFFFFF, (h >> 32) | 1
    return [(a + i * b) & (m - 1) for i in range(_K)]


def bloom(features: list[str]) -> tuple[int, np.ndarray]:
    m = 1 << max(6, math.ceil(math.log2(max(1, len(features)) * _BITS_PER_FEATURE)))
    bits = np.zeros(m, dtype=bool)
    for f in features:
        bits[_positions(mmh3.hash64(f, signed=False)[0], m)] = True
    return m, bits


def _fold(bits: np.ndarray, m: int) -> np.ndarray:
    while len(bits) > m:
        half = len(bits) // 2
        bits = bits[:half] | bits[half:]
    return bits


def _card(bits: np.ndarray) -> float:
    m = len(bits)
    x = min(int(bits.sum()), m - 1)
    return -(m / _K) * math.log(1 - x / m)


def level_similarity(a: np.ndarray, b: np.ndarray) -> float:
    m = min(len(a), len(b))
    a, b = _fold(a, m), _fold(b, m)
    na, nb, nu = _card(a), _card(b), _card(a | b)
    if na + nb == 0:
        return 1.0
    c = max(0.0, min(na, nb, na + nb - nu))
    return 2 * c / (na + nb)


class StructureDetector(Detector):
    name = "structure"
    code = 5

    def __init__(self, *, beta: float = 0.92, beta2: float = 0.90, keys: int = 6, min_features: int = 8):
        self.beta = beta
        self.beta2 = beta2
        self.n_keys = keys
        self.min_features = min_features

    def applies(self, doc: "Doc") -> bool:
        return doc.kind == "html" and bool(doc.html_blocks)

    def levels(self, doc: "Doc") -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for level, text in doc.html_blocks or ():
            fs = feature_strings(text)
            if fs:
                out.setdefault(level, []).extend(fs)
        return out

    def sketch(self, doc: "Doc") -> Sketch | None:
        levels = self.levels(doc)
        every = sorted({f for fs in levels.values() for f in fs})
        if len(every) < self.min_features:
            return None
        hashes = sorted({mmh3.hash64(f, signed=False)[0] >> 1 for f in every})
        parts = [struct.pack("<B", len(levels))]
        for level, fs in sorted(levels.items()):
            m, bits = bloom(fs)
            parts.append(struct.pack("<BB", level, int(math.log2(m))) + np.packbits(bits).tobytes())
        return Sketch(tuple(hashes[:self.n_keys]), b"".join(parts))

    @staticmethod
    def unpack(payload: bytes) -> dict[int, np.ndarray]:
        n = payload[0]
        pos, out = 1, {}
        for _ in range(n):
            level, log_m = payload[pos], payload[pos + 1]
            m = 1 << log_m
            raw = np.frombuffer(payload, dtype=np.uint8, count=m // 8, offset=pos + 2)
            out[level] = np.unpackbits(raw).astype(bool)
            pos += 2 + m // 8
        return out

    def verify(self, a: bytes, b: bytes) -> Match | None:
        la, lb = self.unpack(a), self.unpack(b)
        levels = set(la) | set(lb)
        if not levels:
            return None
        sims = [level_similarity(la[lv], lb[lv]) if lv in la and lv in lb else 0.0 for lv in sorted(levels)]
        share = sum(s > self.beta for s in sims) / len(sims)
        if share > self.beta2:
            return Match(round(min(sims), 4))
        return None
