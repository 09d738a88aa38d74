"""Short-text detector (SMS, headlines): winnowed character m-grams as keys, word Jaccard to verify.

Why not SimHash here: a 30-character SMS has a handful of words, so one changed word flips many
fingerprint bits and k = 3 misses most variants (the benchmark shows by how much). Shared
substrings survive such edits.

Keys: the text's *skeleton* (letters, digits and CJK only, look-alikes folded, see
``text.skeleton``) is cut into m-grams; winnowing (Schleimer, Wilkerson, Aiken 2003) keeps the
minimum-hash gram of every window of w consecutive grams. Any common substring of at least
w + m - 1 characters yields a common key, and a text of n grams emits about 2n / (w + 1) keys
(a 70-character SMS: ~10 at w = 8, not 67). Texts shorter than m use the whole skeleton as one key.
A gram that holds a masked number is chosen only where a window has no other (``DEMOTED``).
w = 12 (a common 15-character run shares a key): on the development benchmark it finds the same SMS
copies as w = 8 with 4.6 keys per message instead of 6.6, and in the workers every key is a bucket
write and a changelog message.
Verify. A text under ``min_contained`` skeleton characters is a copy only with the same skeleton
or contained whole and in one piece in the other, with at most half as much again added around it
(under 8 characters: the same skeleton only), or with its clauses moved around (two or three
pieces of 4 characters or more, side by side in another order, a number's place counting as a
character): one changed or inserted character changes what a ten-character question asks ("左眼皮跳"
/ "右眼皮跳"; LCQMC's non-paraphrase pairs are full of them), while a spammer's tag or tail goes
around the text. Longer texts, two tests;
either makes a match:
* a copy: Jaccard similarity of the jieba word sets of the two skeletons >= threshold, and (unless
  ``edit_threshold`` is 0) normalized Levenshtein similarity of the skeletons >= edit_threshold: a
  reworded question shares its words with the original but not their order, a copy shares both.
  The cheap tests go first: lengths (edit similarity <= shorter / longer), then the edit
  similarity (C), then the word sets.
* a copy with additions (``containment``): what a campaign copy is, most of the original's text,
  in order, with a sender tag, a tail, inserted or changed characters. The share of the shorter
  skeleton (numbers left out) found in the longer as a common subsequence, or as character pairs for
  clauses moved around, or as pieces of ``CLAUSE`` characters or more each in a place of its own
  (many short clauses all moved); or one block shared that is ``BLOCK`` of the longer (its opening
  cut or swapped, a tail added).
Long numbers (``LONG_DIGITS`` digits or more: a card or account number) are ``#`` like every
number in the skeleton, but two texts that carry one are also keyed by it and compared with its
digits kept, as one longer text: a scam message "农行 6222… 唐子华" is mostly its number, and
without it a changed character of the name is a fifth of the text.
A number of one or two digits is a large part of what a short text says ("5朵玫瑰" / "3朵玫瑰", "see
you at 6" / "at 7"): under ``min_contained`` characters, the shorter text's such numbers must be in
the longer (``_same_numbers``); a campaign's changing prices, codes and phone numbers are longer.
Alphabetic text (an English, Russian or Korean SMS, ``_latin_copy``; "Latin" in the names below): an
alphabet is too small for a common subsequence or shared character pairs to tell a copy, as they do
among thousands of Han characters; its copies share most of their character 4-grams (Jaccard, or
containment for a copy with additions), and under ``LATIN_SHORT`` letters a copy must be the same
or contain it whole.
Keys stay winnowed: indexing every gram found few more of the campaign benchmark's copies
(``bench/spam_edits.py``) at several times the cost per message. A skeleton of 2 (w + m - 1)
characters or fewer adds its ``BOTTOM`` smallest gram hashes, which a copy shares whatever the order
of its pieces (a short message cut in two and put back the other way round); one of ``ALL_GRAMS``
grams or fewer, every gram.

Payload: the count of the skeleton's distinct words (2 bytes), their 32-bit mmh3 hashes, sorted,
then the skeleton with its digits (old payloads: those of its long numbers). The words are found when the text is
sketched, in the stateless stage that ``scan`` spreads over processes and the workers over
partitions, so that the stateful stage, which sees every document in turn, neither segments nor
loads a dictionary (segmenting at verify time made an SMS scan's judging process load the
dictionary and spend a good part of its judging there).
A count of 0 (payloads of the previous version, or a text of more than 65,535 words) means
"segment the skeleton": those are still read.
"""
from __future__ import annotations

import math
import re
import struct
from difflib import SequenceMatcher
from functools import lru_cache
from typing import TYPE_CHECKING, AbstractSet

import mmh3
import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.distance import LCSseq, Levenshtein

from ..hashing import shingle_hashes, shingle_hashes_list, shingle_hashes_many
from ..text import LETTER, LONG_DIGITS, LONG_NUMBER, long_numbers_only, masked, skeletons, small_numbers
from .base import Detector, Match, Sketch

if TYPE_CHECKING:
    from ..document import Doc
    from ..tokenize import WordTokenizer

_KEY_MASK = (1 << 62) - 1
# a text of nothing but numbers with fewer digits than this (a price, a time) matches only the
# same digits; a longer one (lottery numbers, an account) is a campaign's, whose digits vary
NUMBERS_ALONE = 7
# Latin-script skeletons (``_latin_copy``): a copy shares this share of their LATIN_GRAM-letter grams
# (Jaccard), or ``containment`` of the shorter's; under LATIN_SHORT letters (numbers left out, some
# six words) a copy is the same or holds the shorter whole, of LATIN_WHOLE letters or more, with at most
# half as much again around it
LATIN_GRAM = 4
LATIN_JACCARD = 0.5
LATIN_SHORT = 32
LATIN_WHOLE = 24
# Latin-script skeletons are keyed by grams of this many letters: English has few 4-letter grams
# ("what", "ingt"), and their buckets held thousands of texts that every probe verified
LATIN_KEY_GRAM = 8


def _is_latin(sk: str) -> bool:
    """Whether a skeleton is mostly Latin letters (an English text's, ``text.skeletons``)."""
    if sk.isascii():  # letters and #
        return len(sk) > sk.count("#")
    if LETTER.search(sk) is None:  # most Chinese ones
        return False
    return 2 * len(LETTER.findall(sk)) > len(sk) - sk.count("#")


def _latin_grams(bare: str) -> frozenset[str]:
    """The ``LATIN_GRAM``-letter grams of a Latin-script skeleton without its numbers."""
    m = LATIN_GRAM
    return frozenset(bare[i:i + m] for i in range(len(bare) - m + 1))


# up to this many characters a text alone is keyed in plain ints (``shingle_hashes_list``,
# ``winnow_list``) rather than by the dozen NumPy calls of ``shingle_hashes`` and ``winnow``: the
# two cost the same at 36-40 characters, and most SMS skeletons are shorter
SHORT_TEXT = 36
# fewer texts than this are keyed one by one (a small batch costs more per text than one alone,
# a large one less); a steady trickle of input brings batches of a few
SMALL_BATCH = 8
_COUNT = struct.Struct(">H")
# a shorter text under this many skeleton characters (numbers left out) is a copy only of the same
# skeleton ("好的", "收到")
WHOLE_CONTAINED = 8
_LATIN = re.compile("(?<=[\u4e00-\u9fff])[a-z]+(?=[\u4e00-\u9fff])")  # letters between Han characters
# a card or account number (``text.LONG_NUMBER``) names a scam message (the text around it is often
# a bank and a name, a few characters): its digits are kept in the payload's skeleton, keyed by its
# first and last LONG_DIGITS digits
# a short text whose clauses were moved around: in two or three pieces of PIECE characters or more
PIECE = 4
# ... and a longer one (``min_contained`` characters or more) whose clauses were all moved, in pieces
# of CLAUSE characters or more: a spam's clauses are often that short ("玻璃险，车船税，不计免赔")
CLAUSE = 3
# a text with its opening cut or replaced and a tag or tail of its own (a greeting swapped, a contact
# added): one block, in one place, of BLOCK of the longer's characters or more; set above what two
# different texts of one template share (a test holds a file-sharing notice's texts apart)
BLOCK = 0.75
# a skeleton of at most twice w + m - 1 characters is also keyed by its BOTTOM smallest gram hashes:
# winnowing shares a key only for a common run of w + m - 1 characters, which such a text cut in two
# and put back the other way round, or 12 characters with a tail added, does not have; the smallest
# hashes of two gram sets that are mostly the same coincide whatever the grams' order (bottom-k)
BOTTOM = 3
# ... and one of this many grams or fewer (9 characters) by every gram: put back in another order in
# pieces of a few characters ("银行降息泰康针对" / "泰康针对银行降息"), it shares no gram of the
# BOTTOM smallest with its original. Only the shortest texts: a key more or two each
ALL_GRAMS = 6


def winnow(hashes: np.ndarray, w: int) -> list[int]:
    """The hashes that winnowing selects (the minimum of every window of w), in order, deduplicated.
    One text (``winnow_many`` does a batch with fewer NumPy calls per text, more per call)."""
    if hashes.size == 0:
        return []
    if hashes.size <= w:
        return [int(hashes.min())]
    # the window view by its strides (``sliding_window_view``'s checks cost more than the arg-min
    # of a short text), and repeats dropped as neighbours (positions never move left) instead of
    # sorted away by ``np.unique``: several times cheaper for a text of a few hundred grams
    step = hashes.strides[0]
    pos = np.lib.stride_tricks.as_strided(hashes, (hashes.size - w + 1, w), (step, step)).argmin(axis=1)
    pos += np.arange(pos.size)
    keep = np.empty(pos.size, dtype=bool)
    keep[0] = True
    np.not_equal(pos[1:], pos[:-1], out=keep[1:])
    return hashes[pos[keep]].tolist()


def winnow_list(hashes: list[int], w: int) -> list[int]:
    """``winnow`` over plain ints (``hashing.shingle_hashes_list``): a short text's few windows
    cost less as list slices than as NumPy calls."""
    if len(hashes) <= w:
        return [min(hashes)] if hashes else []
    out, last = [], -1
    for i in range(len(hashes) - w + 1):
        window = hashes[i:i + w]
        pos = i + window.index(min(window))  # the leftmost minimum, as argmin
        if pos != last:  # positions never move left, so repeats are neighbours
            out.append(hashes[pos])
            last = pos
    return out


def winnow_many(hashes: np.ndarray, sizes: list[int], w: int) -> list[list[int]]:
    """``winnow`` of each run of ``sizes`` consecutive hashes, with one window minimum over all of them.

    Why one pass: an SMS has some 50 grams, and NumPy's fixed costs per call (the window view, the
    arg-min, the de-duplication) were most of its sketch. Windows that straddle two runs are
    skipped. The leftmost minimum's position never moves left as a window slides right, so the
    positions come out ordered and repeats are neighbours: no sort is needed to drop them."""
    out: list[list[int]] = [[] for _ in sizes]
    if not sizes:
        return out
    size = np.asarray(sizes, dtype=np.int64)
    offset = np.concatenate(([0], np.cumsum(size)[:-1]))
    long = np.flatnonzero(size > w)
    if long.size:
        nwin = size[long] - w + 1  # windows of each run longer than w
        first = np.cumsum(nwin) - nwin
        starts = np.repeat(offset[long] - first, nwin) + np.arange(int(nwin.sum()))
        pos = np.lib.stride_tricks.sliding_window_view(hashes, w).argmin(axis=1)[starts] + starts
        keep = np.ones(pos.size, dtype=bool)
        keep[1:] = pos[1:] != pos[:-1]
        pos = pos[keep]
        bounds = np.searchsorted(pos, np.append(offset[long], len(hashes))).tolist()
        picked = hashes[pos].tolist()
        for j, i in enumerate(long.tolist()):
            out[i] = picked[bounds[j]:bounds[j + 1]]
    for i, n in enumerate(sizes):
        if 0 < n <= w:
            o = int(offset[i])
            out[i] = [int(hashes[o:o + n].min())]
    return out


# a gram with a masked number (``#``) in it is chosen as a key only where a window holds no other:
# dates, amounts and counts ("#月#日", "价值#元") recur on countless different messages, and their
# buckets filled with entries that every probe verified in vain. Winnowing over these hashes is
# still winnowing (a window's choice depends on its grams alone), so a common run of w + m - 1
# characters still yields a common key.
DEMOTED = 1 << 62


def char_mask(bare: str) -> int:
    """A bit per distinct character outside ASCII (a bit may stand for several): the count of bits
    one text has and another lacks is at most how many of its characters the other lacks, which
    bounds every test of ``verify`` at no more than two integer operations."""
    mask = 0
    for ch in set(bare):
        code = ord(ch)
        if code > 127:
            mask |= 1 << (code % 251)
    return mask


def absent_most(edit_threshold: float, containment: float) -> float:
    """The largest share of a text's characters (numbers written out) that its copy may lack, by
    any test of ``verify``: the longest common subsequence, the pieces and the block leave at most
    1 - containment (or 1 - BLOCK) of the shorter out; the character pairs, 2 (1 - containment)
    (an absent character spoils two pairs); one place of the longer (``partial_ratio``),
    1 - c / (2 - c); the edit similarity, (1 - e) / e of either; a short text, none. Latin-script
    texts lose no non-ASCII character either. An edit threshold of 0 (words alone) bounds nothing: 1."""
    if edit_threshold <= 0:
        return 1.0
    c = containment or 1.0
    return min(1.0, max(2 * (1 - c), 1 - c / (2 - c), 1 - BLOCK, (1 - edit_threshold) / edit_threshold))


def gram_hashes(sk: str, m: int) -> list[int]:
    """The hashes of a skeleton's m-grams as keys are chosen from (plain ints, ``_KEY_MASK``)."""
    return shingle_hashes_list(sk, m, _KEY_MASK)


def numbered(sk: str, m: int, grams: int) -> list[int]:
    """The positions, among ``sk``'s ``grams`` m-grams (one for a text shorter than m), of those that
    hold a masked number (``#``)."""
    hit: set[int] = set()
    at = sk.find("#")
    while at >= 0:
        hit.update(range(max(0, at - m + 1), min(at + 1, grams)))
        at = sk.find("#", at + 1)
    return sorted(hit)


def demote(sk: str, hashes: list[int], m: int, common: AbstractSet[int] = frozenset()) -> list[int]:
    """``hashes`` of ``sk``'s m-grams with those that hold a ``#`` (``numbered``), and the ``common``
    ones (a template table's, ``core.template``), raised by ``DEMOTED``."""
    if common:
        hashes = [h | DEMOTED if h in common else h for h in hashes]
    if "#" in sk:
        hashes = list(hashes)
        for i in numbered(sk, m, len(hashes)):
            hashes[i] |= DEMOTED
    return hashes


def demote_array(sk: str, hashes: np.ndarray, m: int) -> np.ndarray:
    """``demote``'s numbered grams over a NumPy array of hashes (changed in place, and returned)."""
    if "#" in sk:
        hashes[numbered(sk, m, hashes.size)] |= np.uint64(DEMOTED)
    return hashes


def bottom(hashes: list[int]) -> list[int]:
    """The ``BOTTOM`` smallest distinct gram hashes of a short skeleton (see ``BOTTOM``); of a skeleton
    of ``ALL_GRAMS`` grams or fewer without a number, every one."""
    grams = sorted(set(hashes))
    if grams and len(grams) <= ALL_GRAMS and grams[-1] < DEMOTED:
        return grams
    return grams[:BOTTOM]


def _numbers(full: str) -> set[str]:
    """The first and the last ``LONG_DIGITS`` digits of every long number in a payload's skeleton."""
    return {r[i] for r in LONG_NUMBER.findall(full) for i in (slice(LONG_DIGITS), slice(-LONG_DIGITS, None))}


def _same_numbers(la: int, a: str, sa: AbstractSet[str], lb: int, b: str, sb: AbstractSet[str], short: int) -> bool:
    """Whether two texts of ``la`` and ``lb`` skeleton characters (numbers left out), ``a`` and ``b``
    with their digits, may match by their numbers: under ``short`` characters each number of one or
    two digits of the shorter must be in the longer (both ways at equal lengths). Such a number is a
    large part of what a short text says ("5朵玫瑰" / "3朵玫瑰", "see you at 6" / "at 7"); a
    campaign's changing prices, codes and phone numbers are longer or ride on longer texts. A text
    of numbers alone, fewer than ``NUMBERS_ALONE`` digits, matches only the same numbers."""
    if min(la, lb) >= short:
        return True
    if not la or not lb:  # nothing but numbers: a price or a time alone ("$ 300.", "2:30") is the message
        return a == b or min(len(a), len(b)) >= NUMBERS_ALONE
    return (la > lb or all(n in b for n in sa)) and (lb > la or all(n in a for n in sb))


def _in_pieces(short: str, long: str) -> bool:
    """``short`` cut into two or three pieces of ``PIECE`` characters or more that are in ``long``
    side by side in another order: clauses moved around, with nothing put between them.

    Every piece is in ``long``, so the first is a prefix of ``short`` found there and the last a
    suffix found there: the cuts are tried only within the longest such prefix and suffix."""
    n = len(short)
    if n < 2 * PIECE or short[:PIECE] not in long or short[-PIECE:] not in long:
        return False
    head = PIECE  # the longest prefix in ``long``
    while head < n and short[:head + 1] in long:
        head += 1
    tail = n - PIECE  # where the longest suffix in ``long`` starts
    while tail > 0 and short[tail - 1:] in long:
        tail -= 1
    for i in range(PIECE, min(head, n - PIECE) + 1):
        a = short[:i]
        if i >= tail and short[i:] + a in long:
            return True
        for j in range(max(i + PIECE, tail), n - PIECE + 1):
            b, c = short[i:j], short[j:]
            if b in long and any(s != short and s in long for s in (a + c + b, b + a + c, b + c + a, c + a + b,
                                                                      c + b + a)):
                return True
    return False


@lru_cache(maxsize=1 << 16)
def _bag(s: str) -> str:
    """A skeleton's characters sorted: the longest common subsequence of two bags is how many
    characters the two texts share, in whatever order."""
    return "".join(sorted(s))


def _in_any_order(a: str, b: str, need: float) -> bool:
    """Whether the two texts share ``need`` characters or more, in any order (the cheap test
    before character pairs, for a text whose clauses were all moved around)."""
    return LCSseq.similarity(_bag(a), _bag(b), score_cutoff=math.ceil(need)) > 0


def _in_pieces_share(short: str, long: str, piece: int = PIECE) -> float:
    """The share of ``short`` made of pieces of ``piece`` characters or more found in ``long``,
    each in a place of its own, taken greedily from the left (each as long as it is found): clauses
    moved around, however many. A place is used once: a phrase said twice is not two clauses."""
    n, i, covered = len(short), 0, 0
    while i <= n - piece:
        j = i + piece
        if short[i:j] not in long:
            i += 1
            continue
        while j < n and short[i:j + 1] in long:
            j += 1
        at = long.find(short[i:j])
        long = long[:at] + "\0" + long[at + j - i:]
        covered += j - i
        i = j
    return covered / n if n else 0.0


def _common_block(short: str, long: str) -> int:
    """The length of the longest run of characters the two texts share."""
    return SequenceMatcher(None, short, long, autojunk=False).find_longest_match(0, len(short), 0, len(long)).size


def _contained_whole(a: str, b: str) -> bool:
    """The shorter of two short texts is in the longer in one piece, with at most half as much again
    around it, and has ``WHOLE_CONTAINED`` characters or more."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= WHOLE_CONTAINED and 2 * len(long) <= 3 * len(short) and short in long


class NgramDetector(Detector):
    name = "ngram"
    code = 2

    def __init__(self, tokenizer: "WordTokenizer", *, common: AbstractSet[int] = frozenset(), m: int = 4, w: int = 12,
                 threshold: float = 0.7,
                 edit_threshold: float = 0.8, containment: float = 0.85, min_contained: int = 16,
                 contained_ratio: float = 0.5, max_chars: int | None = None):
        self.tokenizer = tokenizer
        self.m = m
        self.w = w
        self.threshold = threshold
        self.edit_threshold = edit_threshold
        self.containment = containment
        self.min_contained = min_contained
        self.contained_ratio = contained_ratio
        self.max_chars = max_chars
        self.bottom_chars = 2 * (w + m - 1)  # see BOTTOM
        self._absent_most = absent_most(edit_threshold, containment)
        # grams common on the stream (a template table's): keys only where a window has no other
        self.common = frozenset(common)
        self._common = np.fromiter(sorted(self.common), dtype=np.uint64, count=len(self.common))
        # cached: a probe verifies its own payload against every candidate, and a campaign's
        # original is verified against every later copy (a payload's words are decoded, or for a
        # count of 0 segmented, once while it is among the 1,024 most recent)
        self._words_of = lru_cache(maxsize=1024)(self._word_hashes)
        # decoded skeletons: a probe's own once, not per candidate, and the entries of hot buckets,
        # which probe after probe verifies, once while they are among the many most recent
        self._skeleton_cached = lru_cache(maxsize=1 << 16)(self._skeleton_of)
        self._latin_grams = lru_cache(maxsize=4096)(_latin_grams)
        self._cache_key = f"ngram#{id(self)}"  # this detector's prefetched keys in Doc.cache

    def applies(self, doc: "Doc") -> bool:
        return self.max_chars is None or len(doc.text) <= self.max_chars

    def skeleton(self, doc: "Doc") -> str:
        """The skeleton, every number as ``#`` (``digits`` keeps the long ones)."""
        s = doc.cache.get("skeleton")
        if s is None:
            s, doc.cache["skeleton_digits"] = skeletons(doc.text)
            doc.cache["skeleton"] = s
        return s

    def digits(self, doc: "Doc") -> str:
        """The skeleton with its digits kept (``text.skeletons``)."""
        s = doc.cache.get("skeleton_digits")
        if s is None:
            self.skeleton(doc)
            s = doc.cache["skeleton_digits"]
        return s

    def keys(self, doc: "Doc") -> tuple[int, ...]:
        keys = doc.cache.get(self._cache_key)
        if keys is None:  # not prefetched: one text alone
            keys = self._keys_alone(self.skeleton(doc)) + self._number_keys(doc)
        return keys

    def _number_keys(self, doc: "Doc") -> tuple[int, ...]:
        """A key per long number's first and last digits: the text around an account number is a
        bank and a name, too short to share a gram with a copy that changed one of its characters."""
        full = self.digits(doc)
        if full is self.skeleton(doc):
            return ()
        return tuple(mmh3.hash64("#" + n, signed=False)[0] & _KEY_MASK for n in sorted(_numbers(full)))

    def _keys_alone(self, sk: str, latin: bool | None = None) -> tuple[int, ...]:
        """One skeleton's keys; ``latin``: whether it is a Latin-script one, when already known."""
        m = LATIN_KEY_GRAM if (_is_latin(sk) if latin is None else latin) else self.m
        if len(sk) <= SHORT_TEXT:  # plain ints: NumPy's fixed cost per call is most of a short text's
            hashes = demote(sk, gram_hashes(sk, m), m, self.common)
            keys = winnow_list(hashes, self.w)
        else:
            array = self._demote_common(demote_array(sk, shingle_hashes(sk, m) & np.uint64(_KEY_MASK), m))
            keys = winnow(array, self.w)
            hashes = array.tolist() if len(sk) <= self.bottom_chars else []
        if len(sk) <= self.bottom_chars:
            keys += bottom(hashes)
        return tuple(dict.fromkeys(keys))

    def _keys_many(self, skeletons: list[str]) -> list[tuple[int, ...]]:
        latin = [i for i, sk in enumerate(skeletons) if _is_latin(sk)]
        if latin:  # keyed by longer grams, one by one (``LATIN_KEY_GRAM``)
            keyed = {i: self._keys_alone(skeletons[i], latin=True) for i in latin}
            rest = [i for i in range(len(skeletons)) if i not in keyed]
            keyed.update(zip(rest, self._keys_batch([skeletons[i] for i in rest])))
            return [keyed[i] for i in range(len(skeletons))]
        return self._keys_batch(skeletons)

    def _keys_batch(self, skeletons: list[str]) -> list[tuple[int, ...]]:
        """``_keys_many`` of skeletons none of which is a Latin-script one."""
        if len(skeletons) < SMALL_BATCH:
            return [self._keys_alone(sk, latin=False) for sk in skeletons]
        arrays = shingle_hashes_many(skeletons, self.m)
        sizes = [a.size for a in arrays]
        cat = np.concatenate(arrays) & np.uint64(_KEY_MASK)
        numbered_at, offs = [], 0  # ``demote_array`` of each text, at once
        for sk, n in zip(skeletons, sizes):
            if "#" in sk:
                numbered_at += [offs + i for i in numbered(sk, self.m, n)]
            offs += n
        if numbered_at:
            cat[numbered_at] |= np.uint64(DEMOTED)
        cat = self._demote_common(cat)
        out = winnow_many(cat, sizes, self.w)
        flat, offs = cat.tolist(), 0
        for i, n in enumerate(sizes):
            if len(skeletons[i]) <= self.bottom_chars:
                out[i] = out[i] + bottom(flat[offs:offs + n])
            offs += n
        return [tuple(dict.fromkeys(k)) for k in out]

    def _demote_common(self, hashes: np.ndarray) -> np.ndarray:
        """``demote``'s ``common`` over a NumPy array (changed in place, and returned)."""
        if self._common.size:
            hashes[np.isin(hashes, self._common)] |= np.uint64(DEMOTED)
        return hashes

    def prefetch(self, docs: "list[Doc]") -> None:
        """The keys of the whole batch in one pass (``winnow_many``): an SMS's keys cost several times
        less in a large batch than alone (a batch smaller than ``SMALL_BATCH`` is keyed text by text)."""
        for d, keys in zip(docs, self._keys_many([self.skeleton(d) for d in docs])):
            d.cache[self._cache_key] = keys + self._number_keys(d)

    def sketch(self, doc: "Doc") -> Sketch | None:
        sk = self.skeleton(doc)
        if not sk:
            return None
        hashes = sorted({mmh3.hash(w, signed=False) for w in self._segment(sk)})
        if len(hashes) > 0xFFFF:
            hashes = []  # count 0: verify segments the skeleton
        payload = struct.pack(f">H{len(hashes)}I", len(hashes), *hashes) + self.digits(doc).encode("utf-8")
        return Sketch(self.keys(doc), payload)

    @staticmethod
    def _skeleton_of(p: bytes) -> tuple[str, str, str, str, bool, frozenset[str], int]:
        """(the skeleton; it without numbers, as containment reads it; it with its long numbers'
        digits; it with every digit; whether it is mostly Latin letters; its numbers of one or two
        digits; ``char_mask`` of it) of a payload."""
        (n,) = _COUNT.unpack_from(p)
        full = p[2 + 4 * n:].decode("utf-8")
        sk = masked(full)
        bare = sk.replace("#", "")
        latin, mask = _is_latin(sk), char_mask(bare)
        if sk is full:
            return sk, bare, sk, sk, latin, frozenset(), mask
        long = long_numbers_only(full) if LONG_NUMBER.search(full) else sk
        return sk, bare, long, full, latin, small_numbers(full), mask

    def _segment(self, sk: str) -> frozenset[str]:
        return frozenset(self.tokenizer.words(sk)) or frozenset((sk,))

    def _word_hashes(self, p: bytes) -> frozenset[int]:
        (n,) = _COUNT.unpack_from(p)
        if n:
            return frozenset(struct.unpack_from(f">{n}I", p, 2))
        return frozenset(mmh3.hash(w, signed=False) for w in self._segment(p[2:].decode("utf-8")))

    def verify(self, a: bytes, b: bytes) -> Match | None:
        (ska, bare_a, fa, na, la, sa, ma), (skb, bare_b, fb, nb, lb, sb, mb) = self._skeleton_cached(a), self._skeleton_cached(b)
        most = self._absent_most
        if (not (la and lb) and (ma & ~mb).bit_count() > most * len(na)
                and (mb & ~ma).bit_count() > most * len(nb)):
            return None  # each has too many characters the other lacks to be its copy by any test below
        short = LATIN_SHORT if la and lb else self.min_contained
        if (na is not ska or nb is not skb) and not _same_numbers(len(bare_a), na, sa, len(bare_b), nb, sb, short):
            return None
        if la and lb:
            return self._latin_copy(bare_a, bare_b)
        if len(ska) < short or len(skb) < short:
            m = self._short_copy(ska, skb)
        else:
            m = None
            n = min(len(bare_a), len(bare_b))
            # a copy shares 0.8 of the longer in order, a copy with additions a third of the shorter
            # without its numbers at least: one subsequence test turns most candidates away
            cut = (n + 2) // 3
            if (n < short or self.edit_threshold * max(len(ska), len(skb)) < cut
                    or LCSseq.similarity(ska, skb, score_cutoff=cut)):
                m = self._copy(a, b, ska, skb)
                if m is None and self.containment:
                    m = self._contained(bare_a, bare_b)
            elif self.containment and _in_any_order(bare_a, bare_b, self.containment * n):
                m = self._contained(bare_a, bare_b)  # every clause moved: little in order, all there
        if m is None and fa != ska and fb != skb and self.containment and _numbers(fa) & _numbers(fb):
            # one account number: the texts with its digits, as longer ones
            m = self._contained(fa.replace("#", ""), fb.replace("#", ""))
        return m

    def _latin_copy(self, a: str, b: str) -> Match | None:
        """Two Latin-script skeletons without their numbers: the same, or the shorter whole in the
        longer (in one piece, or as its clauses moved around, ``_in_pieces``) when short; else most
        of their letter grams (``LATIN_GRAM``) shared, or most of the shorter's found in the longer
        (a copy with a tag or a tail) when it is ``contained_ratio`` of it, or whole in one place of
        it when it is less (``_in_one_place``)."""
        short, long = (a, b) if len(a) <= len(b) else (b, a)
        if len(short) < LATIN_SHORT:
            whole = len(short) >= LATIN_WHOLE and 2 * len(long) <= 3 * len(short)
            return Match(1.0) if short == long or (whole and (short in long or _in_pieces(short, long))) else None
        contained = self.containment and len(short) >= self.contained_ratio * len(long)
        # Jaccard <= about shorter / longer (unless the longer repeats a run of letters over and over)
        if not contained and len(short) < LATIN_JACCARD * len(long):
            return self._in_one_place(short, long) if self.containment else None
        ga, gb = self._latin_grams(short), self._latin_grams(long)
        inter = len(ga & gb)
        jaccard = inter / (len(ga) + len(gb) - inter)
        if jaccard >= LATIN_JACCARD:
            return Match(round(jaccard, 4))
        if contained and inter >= self.containment * len(ga):
            return Match(round(inter / len(ga), 4))
        return None

    def _short_copy(self, ska: str, skb: str) -> Match | None:
        """A text under ``min_contained`` skeleton characters: the same skeleton, or (numbers left
        out) contained whole and in one piece, or as its clauses moved around (``_in_pieces``), with
        at most half as much again added before or after it. One changed or inserted character
        inside a ten-character question changes what it asks ("左眼皮跳" / "右眼皮跳", "为什么打" /
        "为什么不打"); a spammer's tag or tail goes around it."""
        if ska == skb:
            return Match(1.0)
        numbered = (ska, skb)
        if "#" in ska or "#" in skb:  # numbers vary inside a campaign and say little about the text
            ska, skb = ska.replace("#", ""), skb.replace("#", "")
        if _contained_whole(ska, skb):
            return Match(1.0)
        # Latin letters between Han characters: the remnants of a link or letters spammers put
        # between words ("送#款www#c#m回t退订"); the Han text must still be contained whole
        latin_a, latin_b = _LATIN.sub("", ska), _LATIN.sub("", skb)
        if (latin_a, latin_b) != (ska, skb) and _contained_whole(latin_a, latin_b):
            return Match(1.0)
        # clauses moved around: every character, in a few pieces of several characters each
        # (numbers left out, or their places as characters of the pieces: "#折优惠" / "云云的清韵诗")
        flip = len(ska) > len(skb)
        short, long = (skb, ska) if flip else (ska, skb)
        if len(short) >= WHOLE_CONTAINED and 2 * len(long) <= 3 * len(short):
            if _in_pieces(short, long) or (numbered != (ska, skb) and _in_pieces(*numbered[::-1 if flip else 1])):
                return Match(1.0)
        return None

    def _copy(self, a: bytes, b: bytes, ska: str, skb: str) -> Match | None:
        """Copies of one text: the same words (Jaccard) in about the same order (edit similarity)."""
        la, lb = len(ska), len(skb)
        if self.edit_threshold:
            # edit distance >= the length difference, so similarity <= shorter / longer
            if min(la, lb) + 1e-9 < self.edit_threshold * max(la, lb):
                return None
            if Levenshtein.normalized_similarity(ska, skb) < self.edit_threshold:
                return None
        sa, sb = self._words_of(a), self._words_of(b)
        inter = len(sa & sb)
        jac = inter / (len(sa) + len(sb) - inter)
        if jac < self.threshold:
            return None
        return Match(jac)

    def _in_one_place(self, short: str, long: str) -> Match | None:
        """A text with more added than it has (hash-busting: other messages' or random sentences
        put before or after a spam): the shorter whole in one place of the longer, its best window
        ``containment`` alike or more (rapidfuzz's ``partial_ratio``). Characters in order spread
        over a long text say little; a block in one place is the text. The windows at the longer's
        ends are shorter: there most of the shorter's beginning or end is enough (a copy cut short)."""
        score = fuzz.partial_ratio(short, long, score_cutoff=100 * self.containment)
        return Match(round(score / 100, 4)) if score else None

    def _contained(self, ska: str, skb: str) -> Match | None:
        """A copy with additions (a sender tag, an opt-out or contact tail, inserted or changed
        characters): most of the shorter skeleton's characters in the longer in order (their longest
        common subsequence), or, for clauses moved around, most of its character pairs found in the
        longer, or, its opening cut or swapped and a tail added, one block of ``BLOCK`` of the longer
        shared, or, cut short, most of it in one place of the longer (``_in_one_place``).
        Only for a shorter text of ``min_contained`` characters or more, so that a short phrase
        ("好的", a greeting) is never a copy of every text that contains it; under
        ``contained_ratio`` of the longer's length only in one place of it (``_in_one_place``).
        The skeletons come without their numbers (``#``): numbers vary inside a campaign and say
        little about the text."""
        short, long = (ska, skb) if len(ska) <= len(skb) else (skb, ska)
        n = len(short)
        if n < self.min_contained:  # numbers left out it is short: whole, in one piece
            return self._short_copy(short, long)
        if n < self.contained_ratio * len(long):
            return self._in_one_place(short, long)
        need = self.containment * n
        # a third in order at least (of three clauses moved around, the longest stays), or else
        # most of its characters in any order (more clauses moved: ``_in_any_order``)
        lcs = LCSseq.similarity(short, long, score_cutoff=(n + 2) // 3)
        if lcs >= need:
            return Match(round(lcs / n, 4))
        if not lcs and not _in_any_order(short, long, need):
            return None
        grams = {short[i:i + 2] for i in range(n - 1)}
        found = sum(1 for g in grams if g in long)
        if found >= self.containment * len(grams):
            return Match(round(found / len(grams), 4))
        if found >= 0.5 * len(grams) and (share := _in_pieces_share(short, long, CLAUSE)) >= self.containment:
            return Match(round(share, 4))  # many clauses moved: every seam a pair not in the longer
        if lcs >= BLOCK * len(long) and (block := _common_block(short, long)) >= BLOCK * len(long):
            return Match(round(block / len(long), 4))  # its opening swapped, a tail added: one block
        # cut short and more text put after it (a gateway's split, then hash-busting); of lengths
        # within ``edit_threshold`` the two are versions of one text, which the tests above judge
        if lcs and n < self.edit_threshold * len(long):
            return self._in_one_place(short, long)
        return None
