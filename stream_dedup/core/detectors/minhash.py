"""MinHash / SuperShingle detector: character shingles, LSH band keys, estimated Jaccard to verify.

Why beside SimHash for long texts: a dropped or inserted sentence moves a 64-bit SimHash by 4-7
bits as often as not (beyond k = 3), while it removes only a few percent of a document's
shingles. MinHash verifies the set overlap directly, so its recall on such reposts is high at a
threshold far above what two different articles on one topic reach.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..minhash_signature import MinHasher, band_keys, jaccard_estimate
from .base import Detector, Match, Sketch

if TYPE_CHECKING:
    from ..document import Doc


class MinhashDetector(Detector):
    name = "minhash"
    code = 3

    def __init__(self, *, num_perm: int = 128, bands: int = 32, shingle: int = 5, threshold: float = 0.7,
                 min_chars: int = 0):
        if num_perm % bands:
            raise ValueError("num_perm must be a multiple of bands")
        self.hasher = MinHasher(num_perm)
        self.bands = bands
        self.shingle = shingle
        self.threshold = threshold
        self.min_chars = min_chars

    def applies(self, doc: "Doc") -> bool:
        return len(doc.text) >= self.min_chars

    def shingles(self, doc: "Doc") -> list[str]:
        t, n = doc.text, self.shingle
        return [t[i:i + n] for i in range(max(1, len(t) - n + 1))]

    def signature(self, doc: "Doc") -> np.ndarray:
        return self.hasher.signature_of_text(doc.text, self.shingle)

    def sketch(self, doc: "Doc") -> Sketch | None:
        if len(doc.text) < self.shingle:
            return None
        sig = self.signature(doc)
        return Sketch(tuple(band_keys(sig, self.bands)), sig.astype("<u4").tobytes())

    def verify(self, a: bytes, b: bytes) -> Match | None:
        j = jaccard_estimate(np.frombuffer(a, dtype="<u4"), np.frombuffer(b, dtype="<u4"))
        return Match(j) if j >= self.threshold else None
