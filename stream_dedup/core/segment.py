"""Word segmenters: jieba's algorithm and dictionary, in Python (jieba) or in Rust (rjieba, jieba-rs).

Word segmentation was most of ``scan``'s time on news with Python jieba. rjieba runs the same
algorithm (prefix-dictionary DAG, maximum-probability route, HMM for unknown runs) on the same
dictionary much faster, but jieba-rs departs from jieba 0.42.1 in two places that change tokens
of many news articles (URLs, dates, ranges) and a few headlines and SMS:

* inside an unknown run, Python jieba's HMM step (``finalseg``) splits non-Han characters with
  ``([a-zA-Z0-9]+(?:\\.\\d+)?%?)``, so ``x.x`` and ``70-119`` become ``x . x`` and ``70 - 119``;
  jieba-rs keeps them whole;
* jieba-rs counts CJK extension blocks (e.g. ``㐀``) as Han, where jieba's block split does not.

``JiebaRs`` closes both: it splits text with jieba's own block pattern (the non-Han blocks handled
exactly as jieba does, in Python), hands rjieba only jieba's Han blocks, and splits again, with
jieba's ``finalseg`` pattern, the non-Han tokens that are not dictionary words. What is left are
near-ties inside jieba-rs (HMM on an unknown run, equal-probability routes over repeated
characters): 5 of 118,312 documents of the sample corpora segment differently, two of them only in
word order (``bench/segmenters.py`` measures it).
"""
from __future__ import annotations

import logging
import re
import threading
from itertools import filterfalse
from pathlib import Path
from typing import Protocol

#: jieba 0.42.1's patterns (``jieba.re_han_default``, ``re_skip_default``, ``re_userdict`` and
#: ``finalseg.re_skip``), copied so that the Rust path splits where jieba splits.
_HAN_BLOCK = re.compile(r"([\u4E00-\u9FD5a-zA-Z0-9+#&\._%\-]+)")
_SPACE = re.compile(r"(\r\n|\s)")
_USER_LINE = re.compile(r"^(.+?)( [0-9]+)?( [a-z]+)?$")
_HMM_SKIP = re.compile(r"([a-zA-Z0-9]+(?:\.\d+)?%?)")
_JOINERS = re.compile(r"[+#&._%\-]")  # a block without them cannot hold a token that _HMM_SKIP would split
_HAN_CHAR = re.compile(r"[\u4E00-\u9FD5]")
_WORD_CHAR = re.compile(r"\w")
_NON_WORD_JOINERS = "+#&.%-"  # the joiners that are not word characters ("_" is one)
_OTHER_WORD = re.compile(r"[^\W\u4E00-\u9FD5a-zA-Z0-9_]")  # a word character outside _HAN_BLOCK's
_BLOCK_SEP = "\n"  # joins the Han blocks for one rjieba call; never inside a block, given back as a token

SEGMENTERS = ("rjieba", "jieba")

_lock = threading.Lock()


class Segmenter(Protocol):
    def lcut(self, text: str) -> list[str]: ...


class JiebaRs:
    """rjieba behind jieba's block split: ``lcut`` gives jieba 0.42.1's tokens (see the module docstring)."""

    def __init__(self, user_dict: str | None = None):
        import rjieba

        if user_dict:  # a dictionary of its own: user words must not reach other users of rjieba
            self._rj = rjieba.Jieba()
            self.load_userdict(user_dict)
        else:  # rjieba builds a default instance on import: use it rather than build another
            self._rj = rjieba.cut.__self__  # type: ignore[attr-defined]  # the bound method's instance
        self._cut, self._is_word = self._rj.cut, self._rj.has_word

    def load_userdict(self, path: str | Path) -> None:
        """jieba's user-dictionary format: ``word [freq] [tag]`` a line, UTF-8, an optional BOM."""
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.strip().decode("utf-8").lstrip("\ufeff")
                except UnicodeDecodeError:
                    raise ValueError(f"dictionary file {path} must be utf-8 (line {n})") from None
                if not line:
                    continue
                m = _USER_LINE.match(line)
                if m is None:
                    raise ValueError(f"dictionary file {path}: line {n} is not 'word [freq] [tag]'")
                word, freq, tag = m.groups()
                self._rj.add_word(word, int(freq) if freq else None, tag.strip() if tag else None)

    def _han(self, block: str) -> tuple[list[str], set[str]]:
        """jieba's tokens of one block of its Han pattern, and the set of those that hold a joiner
        (``isalnum`` false), which ``words`` looks at for tokens without a word character."""
        words = self._cut(block)
        if _JOINERS.search(block) is None:
            return words, set()
        return self._split_joined(words)

    def _split_joined(self, words: list[str]) -> tuple[list[str], set[str]]:
        """jieba's split of rjieba's ``words`` (of one block or of blocks joined by newlines) where a
        token holds a joiner, and the set of the tokens that are not ``isalnum`` after it. Token by
        token: whether a token is split depends on the token alone."""
        # a block's characters are Han, ASCII letters and digits, and the joiners: a token without a
        # joiner (``isalnum``) is Han or one _HMM_SKIP match, whole either way. The tokens with one
        # are found by a loop in C (``filterfalse``); most blocks have none to split (an SMS skeleton's
        # joiners are the "#" of its numbers, tokens of their own), and the tokens are returned as cut
        joined = set(filterfalse(str.isalnum, words))
        split = {w for w in joined if len(w) > 1 and _HAN_CHAR.search(w) is None and not self._is_word(w)}
        if not split:
            return words, joined
        out: list[str] = []
        for w in words:
            if w in split:
                out.extend(p for p in _HMM_SKIP.split(w) if p)
            else:
                out.append(w)
        return out, set(filterfalse(str.isalnum, out))

    def lcut(self, text: str) -> list[str]:
        out: list[str] = []
        for i, block in enumerate(_HAN_BLOCK.split(text)):
            if not block:
                continue
            if i & 1:  # a block jieba segments
                out.extend(self._han(block)[0])
            else:  # as jieba: whitespace runs whole, every other character alone
                for x in _SPACE.split(block):
                    if not x:
                        continue
                    if _SPACE.match(x):
                        out.append(x)
                    else:
                        out.extend(x)
        return out

    def words(self, text: str, stopwords: frozenset[str]) -> list[str]:
        """The tokens of ``lcut`` that have a word character and are not stop words.

        A non-Han block's tokens are single characters or whitespace (its word characters are what
        is kept), and a Han block's tokens are all words unless the block holds a joiner
        (``+#&.%-``). Per token this leaves one set lookup; filtering ``lcut``'s output cost more
        than rjieba's segmentation itself.

        Most texts have no word character outside jieba's Han blocks (``_OTHER_WORD``: kana,
        CJK extensions, accented letters). Then the non-Han blocks give nothing, and the Han blocks
        go to rjieba in one call, joined by newlines: jieba-rs splits its input at the same
        newlines (not in its Han pattern, whose characters are a superset of jieba's), cuts each
        block as a call of its own would, and gives each newline back as a token, dropped here.
        One call instead of one a block (dozens in a news article) and no loop over the blocks in
        Python."""
        if _OTHER_WORD.search(text) is None:
            han = _HAN_BLOCK.findall(text)
            if not han:
                return []
            words = self._cut(_BLOCK_SEP.join(han))
            if _JOINERS.search(text) is not None:  # in a Han block: _JOINERS' characters are in its pattern
                words, joined = self._split_joined(words)
                # no word character: only joiners ("_" is one), or the newline between blocks
                drop = {w for w in joined if not w.strip(_NON_WORD_JOINERS) or w == _BLOCK_SEP}
                return [w for w in words if w not in drop and w not in stopwords]
            return list(filterfalse(stopwords.__contains__, filter(_BLOCK_SEP.__ne__, words)))
        return self._words_by_block(text, stopwords)

    def _words_by_block(self, text: str, stopwords: frozenset[str]) -> list[str]:
        """``words`` for a text with word characters outside the Han blocks: block by block, in order."""
        out: list[str] = []
        for i, block in enumerate(_HAN_BLOCK.split(text)):
            if not block:
                continue
            if i & 1:
                if _JOINERS.search(block) is None:
                    out.extend(self._cut(block))
                else:
                    ws, joined = self._han(block)
                    # no word character: only joiners ("_" is one); looked at once per distinct token
                    drop = {w for w in joined if not w.strip(_NON_WORD_JOINERS)}
                    out.extend(filterfalse(drop.__contains__, ws) if drop else ws)
            else:
                out.extend(_WORD_CHAR.findall(block))
        return list(filterfalse(stopwords.__contains__, out))


_loaded: dict[tuple[str | None, str], Segmenter] = {}


def load(user_dict: str | None, segmenter: str = "rjieba") -> Segmenter:
    """One segmenter per (user dictionary, kind) and process: loading a dictionary takes a while.

    Built under a lock and looked up again inside it, so threads that ask at once (a program that
    uses the ``Deduper`` from several threads) share one segmenter: the ``lru_cache`` this replaced
    built one per caller that raced it, a second load and a second dictionary each."""
    seg = _loaded.get((user_dict, segmenter))
    if seg is not None:
        return seg
    if segmenter not in SEGMENTERS:
        raise ValueError(f"unknown segmenter {segmenter!r}; one of {', '.join(SEGMENTERS)}")
    with _lock:
        seg = _loaded.get((user_dict, segmenter))
        if seg is None:
            seg = _loaded[(user_dict, segmenter)] = _build(user_dict, segmenter)
    return seg


def _build(user_dict: str | None, segmenter: str) -> Segmenter:
    if segmenter == "rjieba":
        return JiebaRs(user_dict)
    import jieba

    jieba.setLogLevel(logging.WARNING)
    tk = jieba.Tokenizer()
    tk.initialize()
    if user_dict:
        tk.load_userdict(user_dict)
    return tk
