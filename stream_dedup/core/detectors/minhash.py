"""MinHash / SuperShingle detector: character shingles, LSH band keys, estimated Jaccard to verify.

Why beside SimHash for long texts: a dropped or inserted sentence moves a 64-bit SimHash by 4-7
bits as often as not (beyond k = 3), while it removes only a few percent of a document's
shingles. MinHash verifies the set overlap directly, so its recall on such reposts is high at a
threshold far above what two different articles on one topic reach. A changed character removes
five shingles, so a repost with sentences dropped, others added and a few characters changed keeps
about half of them: the default threshold is 0.5, just above where 32 bands of 4 rows make a pair a
candidate half the time ((1/32)^(1/4)), and leave-one-edit-class-out in bench/article_edits.py.

A copy with additions (a repost with an editor's note or a list of related links, a page whose
template leaks into its extracted text) shares little of the longer text's shingles although it
holds all of the shorter one's: the payload carries the number of distinct shingles, and the
shorter set's share in the longer (Broder's containment, from the Jaccard estimate and the two
sizes) verifies it too when the shorter is ``contained_ratio`` of the longer or more.

Shingles are cut from the text's letters and digits alone (``text.letters``): a copy whose
punctuation a scraper stripped or replaced with spaces shares every shingle with the original,
where each mark took the shingles around it.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np

from ..minhash_signature import MinHasher, band_keys, containment_estimate, jaccard_estimate
from ..text import letters
from .base import Detector, Match, Sketch

if TYPE_CHECKING:
    from ..document import Doc

_SIZE = struct.Struct("<I")


class MinhashDetector(Detector):
    name = "minhash"
    code = 3

    def __init__(self, *, num_perm: int = 128, bands: int = 32, shingle: int = 5, threshold: float = 0.5,
                 containment: float = 0.9, contained_ratio: float = 0.5, min_chars: int = 0):
        if num_perm % bands:
            raise ValueError("num_perm must be a multiple of bands")
        self.hasher = MinHasher(num_perm)
        self.bands = bands
        self.shingle = shingle
        self.threshold = threshold
        self.containment = containment
        self.contained_ratio = contained_ratio
        self.min_chars = min_chars
        self._sig_bytes = 4 * num_perm

    def applies(self, doc: "Doc") -> bool:
        return len(doc.text) >= self.min_chars

    def shingles(self, doc: "Doc") -> list[str]:
        t, n = letters(doc.text), self.shingle
        return [t[i:i + n] for i in range(max(1, len(t) - n + 1))]

    def sketch(self, doc: "Doc") -> Sketch | None:
        t = letters(doc.text)
        if len(t) < self.shingle:
            return None
        sig, size = self.hasher.signature_and_count(t, self.shingle)
        return Sketch(tuple(band_keys(sig, self.bands)), sig.astype("<u4").tobytes() + _SIZE.pack(size))

    def verify(self, a: bytes, b: bytes) -> Match | None:
        n = self._sig_bytes
        j = jaccard_estimate(np.frombuffer(a, dtype="<u4", count=n // 4), np.frombuffer(b, dtype="<u4", count=n // 4))
        if j >= self.threshold:
            return Match(j)
        # a payload of an older version has no size: Jaccard alone
        if not self.containment or not j or len(a) < n + _SIZE.size or len(b) < n + _SIZE.size:
            return None
        (size_a,), (size_b,) = _SIZE.unpack_from(a, n), _SIZE.unpack_from(b, n)
        if min(size_a, size_b) < self.contained_ratio * max(size_a, size_b):
            return None
        c = containment_estimate(j, size_a, size_b)
        return Match(round(c, 4)) if c >= self.containment else None
