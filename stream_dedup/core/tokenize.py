"""Words (jieba's segmentation) and character n-grams: the features every detector is built from.

The segmenter (``segment.py``: jieba's algorithm and dictionary, in Rust by default) is loaded once
per process and shared; a user dictionary adds domain words (brands, names) so that they stay whole
tokens.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from . import segment
from .cache import GenerationalCache

if TYPE_CHECKING:
    from ..config import TextSettings

_WORDLIKE = re.compile(r"\w")
_SENTENCE_DOT = re.compile(r"(?<![0-9a-z])\.|\.(?![0-9a-z])")


def _load_stopwords(path: Path | None) -> frozenset[str]:
    if path is None:
        text = resources.files("stream_dedup").joinpath("data/stopwords_zh.txt").read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    return frozenset(w.strip() for w in text.splitlines() if w.strip() and not w.startswith("#"))


@dataclass(frozen=True)
class WordTokenizer:
    """jieba words of normalized text, without punctuation, whitespace and stop words."""

    user_dict: str | None = None
    stopwords_path: str | None = None
    segmenter: str = "rjieba"

    @classmethod
    def from_settings(cls, t: "TextSettings | None") -> "WordTokenizer":
        """The tokenizer a configuration's [text] section asks for (defaults when None)."""
        if t is None:
            return cls()
        return cls(str(t.user_dict) if t.user_dict else None, str(t.stopwords) if t.stopwords else None,
                   t.segmenter)

    @property
    def stopwords(self) -> frozenset[str]:
        return _stopwords_cached(self.stopwords_path)

    def words(self, text: str) -> list[str]:
        # normalization folds 。 to "."; jieba counts "." as a word character (decimals, URLs), so a
        # whole paragraph became one block. Sentence-final dots go back to 。 for segmentation only:
        # jieba sees sentences as it was built to, and runs faster.
        text = _SENTENCE_DOT.sub("。", text)
        seg = segment.load(self.user_dict, self.segmenter)
        if isinstance(seg, segment.JiebaRs):  # filters as it segments (the same words)
            return seg.words(text, self.stopwords)
        keep = _keep_cache(self.stopwords_path)
        young, miss = keep.young.get, keep.miss
        out = []
        for w in seg.lcut(text):
            # decided once per distinct token: a dict hit costs less than the three tests. ``young``
            # may be a retired generation after a miss rotated them; its answers are still right.
            k = young(w)
            if k is None:
                k = miss(w)
            if k:
                out.append(w)
        return out


_CACHE_SIZE = 32_768


def set_cache_size(entries: int) -> None:
    """Entries per generation of the memos of ``words`` (``text.token_cache``); per process, the last call wins."""
    global _CACHE_SIZE
    if entries != _CACHE_SIZE:
        _CACHE_SIZE = entries
        _keep_cache.cache_clear()


@lru_cache(maxsize=8)
def _keep_cache(stopwords_path: str | None) -> GenerationalCache[str, bool]:
    """Per stop-word list: token -> whether ``words`` keeps it (2 x ``_CACHE_SIZE`` tokens at most)."""
    stop = _stopwords_cached(stopwords_path)
    return GenerationalCache(lambda w: w not in stop and not w.isspace() and _WORDLIKE.search(w) is not None,
                             _CACHE_SIZE)


@lru_cache(maxsize=8)
def _stopwords_cached(path: str | None) -> frozenset[str]:
    return _load_stopwords(Path(path) if path else None)


def char_ngrams(text: str, n: int) -> list[str]:
    """All n-character substrings; the whole text when it is shorter than n (and non-empty)."""
    if len(text) <= n:
        return [text] if text else []
    return [text[i:i + n] for i in range(len(text) - n + 1)]
