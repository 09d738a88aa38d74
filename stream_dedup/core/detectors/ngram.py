"""Short-text detector (SMS, headlines): winnowed character m-grams as keys, word Jaccard to verify.

Why not SimHash here: a 30-character SMS has a handful of words, so one changed word flips many
fingerprint bits and k = 3 misses most variants (the benchmark shows by how much). Shared
substrings survive such edits.

Keys: the text's *skeleton* (letters, digits and CJK only, look-alikes folded, see
``text.skeleton``) is cut into m-grams; winnowing (Schleimer, Wilkerson, Aiken 2003) keeps the
minimum-hash gram of every window of w consecutive grams. Any common substring of at least
w + m - 1 characters yields a common key, and a text of n grams emits about 2n / (w + 1) keys
(a 70-character SMS: ~10 at w = 8, not 67). Texts shorter than m use the whole skeleton as one key.
w = 12 (a common 15-character run shares a key): on the development benchmark it finds the same SMS
copies as w = 8 with 4.6 keys per message instead of 6.6, and in the workers every key is a bucket
write and a changelog message.
Verify: Jaccard similarity of the jieba word sets of the two skeletons >= threshold, and
(unless ``edit_threshold`` is 0) normalized Levenshtein similarity of the skeletons >=
edit_threshold: a reworded question shares its words with the original but not their order, a
copy shares both.

Payload: two zero bytes, then the skeleton. The words are found when a pair is verified, not when
the text is sketched: most messages share no key with an earlier one and are never verified, and
segmentation was the largest cost of an SMS (bench/quality.py). The cheap tests go first: lengths
(edit similarity <= shorter / longer), then the edit similarity (C), then the word sets (jieba,
cached per skeleton), so most candidates of a common key are turned down without segmenting them.
Payloads of earlier versions (a word-hash count >= 1, the hashes, the skeleton) are still read.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import struct

import numpy as np
from rapidfuzz.distance import Levenshtein

from ..hashing import shingle_hashes
from ..text import skeleton
from .base import Detector, Match, Sketch

if TYPE_CHECKING:
    from ..document import Doc
    from ..tokenize import WordTokenizer

_KEY_MASK = (1 << 62) - 1
_COUNT = struct.Struct(">H")
_MARK = _COUNT.pack(0)


def winnow(hashes: np.ndarray, w: int) -> list[int]:
    """The hashes that winnowing selects (the minimum of every window of w), in order, deduplicated."""
    if hashes.size == 0:
        return []
    if hashes.size <= w:
        return [int(hashes.min())]
    windows = np.lib.stride_tricks.sliding_window_view(hashes, w)
    pos = windows.argmin(axis=1) + np.arange(windows.shape[0])
    return [int(x) for x in hashes[np.unique(pos)]]


class NgramDetector(Detector):
    name = "ngram"
    code = 2

    def __init__(self, tokenizer: "WordTokenizer", *, m: int = 4, w: int = 12, threshold: float = 0.7,
                 edit_threshold: float = 0.8, max_chars: int | None = None):
        self.tokenizer = tokenizer
        self.m = m
        self.w = w
        self.threshold = threshold
        self.edit_threshold = edit_threshold
        self.max_chars = max_chars
        # cached: a probe verifies its own skeleton against every candidate, and a campaign's
        # original is verified against every later copy. An entry holds a word set (1-3 KB for an
        # SMS): 1,024 recent skeletons cover the campaigns under way; 8,192 took ~30 MB and half an
        # hour of a 20 SMS/s stream to fill (the soak saw it as RSS creep)
        self._words_of = lru_cache(maxsize=1024)(self._segment)

    def applies(self, doc: "Doc") -> bool:
        return self.max_chars is None or len(doc.text) <= self.max_chars

    def skeleton(self, doc: "Doc") -> str:
        s = doc.cache.get("skeleton")
        if s is None:
            s = doc.cache["skeleton"] = skeleton(doc.text)
        return s

    def sketch(self, doc: "Doc") -> Sketch | None:
        sk = self.skeleton(doc)
        if not sk:
            return None
        keys = winnow(shingle_hashes(sk, self.m) & np.uint64(_KEY_MASK), self.w)
        return Sketch(tuple(dict.fromkeys(keys)), _MARK + sk.encode("utf-8"))

    @staticmethod
    def _skeleton_of(p: bytes) -> str:
        (n,) = _COUNT.unpack_from(p)  # 0: this version; n >= 1: n word hashes come first
        return p[2 + 4 * n:].decode("utf-8")

    def _segment(self, sk: str) -> frozenset[str]:
        return frozenset(self.tokenizer.words(sk)) or frozenset((sk,))

    def verify(self, a: bytes, b: bytes) -> Match | None:
        ska, skb = self._skeleton_of(a), self._skeleton_of(b)
        la, lb = len(ska), len(skb)
        if self.edit_threshold:
            # edit distance >= the length difference, so similarity <= shorter / longer
            if min(la, lb) + 1e-9 < self.edit_threshold * max(la, lb):
                return None
            if Levenshtein.normalized_similarity(ska, skb) < self.edit_threshold:
                return None
        sa, sb = self._words_of(ska), self._words_of(skb)
        inter = len(sa & sb)
        jac = inter / (len(sa) + len(sb) - inter)
        if jac < self.threshold:
            return None
        return Match(jac)
