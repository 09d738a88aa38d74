"""SimHash detector for long texts (news): TF-IDF weighted jieba words, Hamming <= k."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from ..simhash import BandScheme, hamming, simhash
from .base import Detector, Match, Sketch, doc_words

if TYPE_CHECKING:
    from ..document import Doc
    from ..idf import IdfTable
    from ..tokenize import WordTokenizer


class SimhashDetector(Detector):
    name = "simhash"
    code = 1

    def __init__(self, tokenizer: "WordTokenizer", idf: "IdfTable", *, k: int = 3, bands: str = "4x16",
                 min_features: int = 8, min_chars: int = 0):
        self.tokenizer = tokenizer
        self.idf = idf
        self.k = k
        self.scheme = BandScheme.make(k, bands)  # type: ignore[arg-type]
        self.min_features = min_features
        self.min_chars = min_chars

    def applies(self, doc: "Doc") -> bool:
        return len(doc.text) >= self.min_chars

    def fingerprint(self, doc: "Doc") -> int | None:
        tf = Counter(doc_words(doc, self.tokenizer))
        if len(tf) < self.min_features:
            return None
        words = list(tf)
        weights = np.fromiter((tf[w] * self.idf.get(w) for w in words), dtype=np.float64, count=len(words))
        return simhash(words, weights)

    def sketch(self, doc: "Doc") -> Sketch | None:
        fp = self.fingerprint(doc)
        if fp is None:
            return None
        return Sketch(tuple(self.scheme.keys(fp)), fp.to_bytes(8, "big"))

    def verify(self, a: bytes, b: bytes) -> Match | None:
        d = hamming(int.from_bytes(a, "big"), int.from_bytes(b, "big"))
        return Match(1.0 - d / 64.0, d) if d <= self.k else None
