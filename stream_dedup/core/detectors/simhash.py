"""SimHash detector for long texts (news): TF-IDF weighted jieba words, Hamming <= k."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from ..hashing import hash64_list
from ..simhash_fingerprint import BandScheme, hamming, simhash, simhash_many
from .base import Detector, Match, Sketch, doc_words

if TYPE_CHECKING:
    from ..document import Doc
    from ..idf import IdfTable
    from ..tokenize import WordTokenizer


class SimhashDetector(Detector):
    name = "simhash"
    code = 1

    def __init__(self, tokenizer: "WordTokenizer", idf: "IdfTable", *, k: int = 3, bands: str = "5c2",
                 min_features: int = 8, min_chars: int = 0):
        self.tokenizer = tokenizer
        self.idf = idf
        self.k = k
        self.scheme = BandScheme.make(k, bands)  # type: ignore[arg-type]
        self.min_features = min_features
        self.min_chars = min_chars
        self._cache_key = f"simhash#{id(self)}"  # this detector's prefetched fingerprint in Doc.cache

    def applies(self, doc: "Doc") -> bool:
        return len(doc.text) >= self.min_chars

    def features(self, doc: "Doc") -> tuple[np.ndarray, np.ndarray] | None:
        """The distinct words' hashes and their TF-IDF weights; None below ``min_features`` words.
        Hashed once here, for the IDF lookup and the fingerprint (two hashings were a visible share
        of a news article's preparing)."""
        tf = Counter(doc_words(doc, self.tokenizer))
        if len(tf) < self.min_features:
            return None
        hashes = np.array(hash64_list(list(tf)), dtype=np.uint64)
        return hashes, np.fromiter(tf.values(), dtype=np.float64, count=len(tf)) * self.idf.lookup(hashes)

    def fingerprint(self, doc: "Doc") -> int | None:
        if self._cache_key in doc.cache:
            return doc.cache[self._cache_key]
        f = self.features(doc)
        return simhash(*f) if f is not None else None

    def prefetch(self, docs: "list[Doc]") -> None:
        """One ``simhash_many`` for the batch: numpy's fixed costs once, not once per short text."""
        feats = [self.features(d) for d in docs]
        ok = [(d, f) for d, f in zip(docs, feats) if f is not None]
        fps = simhash_many([f[0] for _, f in ok], [f[1] for _, f in ok])
        for d in docs:
            d.cache[self._cache_key] = None
        for (d, _), fp in zip(ok, fps):
            d.cache[self._cache_key] = fp

    def sketch(self, doc: "Doc") -> Sketch | None:
        fp = self.fingerprint(doc)
        if fp is None:
            return None
        return Sketch(tuple(self.scheme.keys(fp)), fp.to_bytes(8, "big"))

    def verify(self, a: bytes, b: bytes) -> Match | None:
        d = hamming(int.from_bytes(a, "big"), int.from_bytes(b, "big"))
        return Match(1.0 - d / 64.0, d) if d <= self.k else None
