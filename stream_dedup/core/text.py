"""Text normalization and sentence splitting, Chinese first.

Why this much folding: reposted news and spam variants differ mostly in presentation, not
content: full-width vs half-width forms, traditional vs simplified characters, Chinese vs
Western punctuation, inserted spaces and zero-width characters. Folding them before hashing
turns such copies into exact duplicates and keeps near-duplicate fingerprints close.

The normalized text is internal (digests, features); verdicts never show it.
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Callable

# Zero-width, bidi and other invisible format characters, C0/C1 controls except whitespace,
# and the Unicode tag block: removed outright (spam inserts them to dodge filters).
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\x00-\x08\x0e-\x1f\x7f-\x9f\U000e0000-\U000e007f"
    "\ud800-\udfff]")
_CJK = "\u2e80-\u2fff\u3040-\u30ff\u3100-\u312f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
# punctuation that survives NFKC, folded to one ASCII form (NFKC already folds ，；：？！（） etc.)
_PUNCT = {
    "。": ".", "｡": ".", "、": ",", "﹐": ",", "﹑": ",", "【": "[", "】": "]", "〔": "[", "〕": "]",
    "《": '"', "》": '"', "〈": '"', "〉": '"', "「": '"', "」": '"', "『": '"', "』": '"',
    "“": '"', "”": '"', "„": '"', "‟": '"', "″": '"', "‘": "'", "’": "'", "‚": "'", "′": "'",
    "—": "-", "–": "-", "―": "-", "‐": "-", "‑": "-", "‒": "-", "−": "-", "～": "~", "〜": "~",
    "•": "·", "・": "·", "‧": "·", "●": "·", "◆": "·", "★": "*", "☆": "*",
    # stroke forms that look like punctuation, put between characters by spam (NFKC maps the
    # Kangxi radicals to these), and the underscore: separators, not parts of words
    "丶": "·", "丿": "·", "乀": "·", "乁": "·", "亅": "·", "丨": "|", "_": " ",
} | {chr(c): "·" for c in range(0x31C0, 0x31F0)}


def _char_folder(table: dict[str, str], common: tuple[str, ...] = ()) -> Callable[[str], str]:
    """``str.translate`` with ``table``, by ``str.replace`` for the ``common`` characters and one
    regular expression over the others.

    Why: ``translate`` with a mapping looks every character of a non-ASCII string up in a Python
    dict, and the texts here are Chinese. The expression skips the characters that stay in C and
    calls back only for the few that change (the same output). A news article holds dozens of
    。、“”, each a callback, so those common ones go by ``replace`` (a scan in C, skipped where
    the character is absent) and the expression takes the rare ones."""
    if any(ch in table for c in common for ch in table[c]):  # str.translate folds each character once
        raise ValueError("a common character's replacement must not be folded again")
    pairs = [(c, table[c]) for c in common]
    rare = [c for c in table if c not in common]
    pattern = re.compile("[" + "".join(re.escape(c) for c in rare) + "]" if rare else "(?!)")
    get = table.__getitem__

    def fold(text: str) -> str:
        for c, r in pairs:
            if c in text:
                text = text.replace(c, r)
        return pattern.sub(lambda m: get(m.group()), text)  # no match: ``text`` itself, no copy

    return fold


_fold_punct = _char_folder(_PUNCT, common=("。", "、", "“", "”", "《", "》"))
# A space next to CJK or punctuation. It starts with the space itself, so the engine scans for
# spaces in C and tries the neighbours only there: ``" (?=[...])|(?<=[...]) "`` (the same matches)
# tried its look-behind at every character.
_SPACE_AROUND = re.compile(rf" (?:(?=[{_CJK}\W])|(?<=[{_CJK}\W] ))")
_DECIMAL_DOT = re.compile(r"(?<=\d)\.(?=\d)")
_SENTENCE = re.compile(r"[^.?!;\n]+(?:[.?!;]+[\"')\]]*|$)|[.?!;]+")
SENTENCE_END = frozenset(".?!;")


# Characters whose compatibility decomposition (NFKD) is ASCII, and that Chinese text is full of:
# the full-width forms of ASCII, the ideographic space, the no-break space and the ellipsis.
_COMPAT_ASCII = {chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)} | {
    "\u3000": " ", "\xa0": " ", "…": "..."}
_fold_compat = _char_folder(_COMPAT_ASCII, common=("，", "：", "！", "？", "；", "（", "）", "\xa0", "…", "\u3000"))


def nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, several times faster on Chinese text.

    Why it can skip the normalization: NFKC is the canonical composition of NFKD, so replacing a
    character by its own NFKD (here an ASCII string, ``_COMPAT_ASCII``) leaves the NFKC of the
    whole text as it was; what is left is usually NFKC already, which ``is_normalized`` answers
    from a quick check table. Full NFKC decomposed and recomposed every character of any text
    with one full-width comma in it, i.e. of nearly every Chinese article."""
    if unicodedata.is_normalized("NFKC", text):
        return text
    text = _fold_compat(text)
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


@lru_cache(maxsize=1)
def _t2s():
    import opencc

    return opencc.OpenCC("t2s")


def to_simplified(text: str) -> str:
    """Traditional to simplified Chinese with OpenCC's t2s tables (phrase-aware, not char-by-char)."""
    return _t2s().convert(text)


def normalize(text: str, *, t2s: bool = True) -> str:
    """The canonical form that digests and features are computed from.

    NFKC (full-width -> half-width, compatibility forms), invisible characters removed,
    traditional -> simplified, Cyrillic and Greek look-alikes of Latin letters as those letters
    (``_fold_confusables``), punctuation folded to one ASCII form, case folded, runs of whitespace
    collapsed, and spaces next to CJK characters or punctuation removed (Chinese does not use
    them, so they are layout or noise).
    """
    s = _INVISIBLE.sub("", nfkc(text))
    if t2s:
        s = to_simplified(s)
    if not s.isascii() and _CYRILLIC_GREEK.search(s) is not None:
        s = _fold_confusables(s)
    # runs of whitespace to one space, stripped: str.split's whitespace is re's \s (both
    # ``Py_UNICODE_ISSPACE``), and the split and join cost less than ``re.sub(r"\s+", " ", s)``
    s = " ".join(_fold_punct(s).casefold().split())
    return _SPACE_AROUND.sub("", s) if " " in s else s


# Cyrillic and Greek letters that look like a Latin letter, as that letter (before case folding:
# "Ν" is N, "ν" is v): spam writes "FREE" as "FRЕЕ" or a brand as "ѴіѴО" to dodge keyword filters
# (Unicode's confusables, UTS #39, for these two scripts).
_CONFUSABLE = dict(zip("АВЕЅІЈКМНОРСТХУаеіјорсхуԁԛԝѕһӏѴѵ", "ABESIJKMHOPCTXYaeijopcxydqwshlVv")) | dict(
    zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαιουνκρτχ", "ABEZHIKMNOPTYXaiouvkptx"))
_fold_confusable_letters = _char_folder(_CONFUSABLE)
_CYRILLIC_GREEK_RANGES = "\u0370-\u03ff\u0400-\u052f"
_CYRILLIC_GREEK = re.compile(f"[{_CYRILLIC_GREEK_RANGES}]")
# a word (a run of letters) with a Cyrillic or Greek letter, tried only where a word starts: from
# every letter of a long run it was quadratic (20,000 Han characters and "，μ": 3.9 s)
_CONFUSABLE_WORD = re.compile(f"(?<![^\\W\\d_])[^\\W\\d_]*[{_CYRILLIC_GREEK_RANGES}][^\\W\\d_]*")
_LATIN_LETTER = re.compile("[A-Za-z]")
_LATIN_OR_HAN = re.compile(f"[A-Za-z{_CJK}]")


def _fold_confusables(s: str) -> str:
    """``s`` with its Cyrillic and Greek look-alikes as Latin letters in a word that mixes them with
    Latin letters ("Yоu"), or that is all look-alikes in a text of Latin or Han script ("Μ" in a
    Chinese text). A Russian or Greek text keeps its letters, so its case still folds as one."""
    latin_text = _LATIN_OR_HAN.search(s) is not None

    def fold(m: re.Match[str]) -> str:
        w = m.group()
        if _LATIN_LETTER.search(w) or (latin_text and all(c in _CONFUSABLE for c in w)):
            return _fold_confusable_letters(w)
        return w

    return _CONFUSABLE_WORD.sub(fold, s)


# marks spammers put between the characters of a message ("元宵*的*夜", "建·设·银·行"): one that is at
# least every FILLER_SHARE-th character of a text, FILLER_MIN times or more, is a filler. Sentence
# dots, hyphens in dates and middle dots in names are far sparser.
_FILLER_MARKS = ("*", "·", "-", ".", "~", "^", "|", "/", "+")
FILLER_SHARE = 6
FILLER_MIN = 8


def drop_fillers(text: str) -> str:
    """A normalized text without the marks put between its characters: what the word and shingle
    detectors read. Fillers split every word and every character shingle they fall in, so a long
    copy with them shared few features with its original (the skeleton of short texts drops all
    punctuation anyway, and ``_drop_interleaved`` a letter put in the same way). The exact digest is
    taken before: such a copy is near, not exact."""
    n = len(text)
    for c in _FILLER_MARKS:
        k = text.count(c)
        if k >= FILLER_MIN and k * FILLER_SHARE >= n:
            text = text.replace(c, "")
    return text


def split_sentences(text: str) -> list[str]:
    """Split normalized text after . ? ! ; (not decimal points), keeping the end mark.

    Works on ``normalize``'s output, where 。！？； are already folded to . ! ? ;.
    """
    protected = _DECIMAL_DOT.sub("\x00", text)
    out = []
    for m in _SENTENCE.finditer(protected):
        sent = m.group(0).strip().replace("\x00", ".")
        if sent:
            out.append(sent)
    return out


_SKELETON_DROP = re.compile(r"[\W_]+")  # all but letters and digits, of any script
_DIGITS = re.compile(r"[0-9]+")
# a run of this many digits or more is a card or account number (``skeletons``)
LONG_DIGITS = 12
LONG_NUMBER = re.compile(f"[0-9]{{{LONG_DIGITS},}}")
# Spans that vary from one copy of a campaign to the next, masked before the skeleton is cut:
# links (with a scheme, www., or a bare host under a common top-level domain, as short links are)
# sender tags in brackets (normalize folds 【】 to []) of up to 12 characters, opt-out instructions,
# a WeChat or QQ contact with its id (as a phone number is one), and a feed post's repost marks
# ("//@name:") and reply mark ("@name:" first), whose names run to the colon (normalize drops the
# space that ends another mention, so its name has no end), and topic tags ("#topic#"), which
# reposts and campaigns vary.
_VARYING = re.compile(
    r"(?:https?://|www\.)[!-~]+"
    r"|(?<![a-z0-9])[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:cn|com|net|org|cc|me|ly|io|top|xyz|vip|co|info|la|gd|im)"
    r"(?:/[!-~]*)?(?![a-z0-9])"
    r"|\[[^\[\]]{1,12}\]"
    # the opt-out instruction that commercial SMS must carry, as a sender tag is: 回T退订, 退订回N,
    # 拒收请回复R, 回复TD退订, 不再接收请回T ...
    r"|(?:退订|拒收|不再接收)请?(?:回复?|发送?)\s*[a-z0-9]{1,6}|(?:回复?|发送?)\s*[a-z0-9]{1,6}\s*(?:退订|拒收)"
    r"|(?:添?加|\+)?(?<![a-z])(?:微信|v信|vx|qq|扣扣)号?:?\s*[a-z0-9_-]{5,20}(?![a-z0-9_-])"
    r"|//@[^@:/\n]{1,30}:|^@[^@:/\s]{1,30}:"
    r"|#(?=[^#\s]*[^#\s0-9])[^#\s]{1,20}#")
_DOT_LETTER = re.compile(r"\.[a-z]")
# look-alike characters that spam uses to dodge keyword filters, folded to one letter or digit
_CJK_NUMERALS = {"〇": "0", "零": "0", "壹": "1", "贰": "2", "叁": "3", "肆": "4", "伍": "5", "陆": "6", "柒": "7",
                 "捌": "8", "玖": "9"}
_fold_lookalike = _char_folder({"o": "0", "l": "1", "i": "1", "|": "1", "z": "2", "s": "5", "b": "8", **_CJK_NUMERALS})
_fold_cjk_numerals = _char_folder(_CJK_NUMERALS)
_HAS_LATIN = re.compile("[a-z]")


_NUMBER_RUN = re.compile("[a-z|]*[0-9][0-9a-z|]*")  # a run of Latin letters and digits with a digit


def _fold_runs(s: str) -> str:
    """Look-alikes folded: Chinese numerals everywhere, Latin letters only in a run that holds a
    digit ("l38OO138OOO"), so that a word ("busy", "vip") keeps its letters."""
    if not _HAS_LATIN.search(s):
        return _fold_lookalike(s)
    return _NUMBER_RUN.sub(lambda m: _fold_lookalike(m.group()), _fold_cjk_numerals(s))


def letters(normalized: str) -> str:
    """The text's letters and digits of any script, nothing between them: what MinHash shingles
    read, so that punctuation stripped, changed or spaced out does not change them."""
    return _SKELETON_DROP.sub("", normalized)


def skeleton(normalized: str) -> str:
    """Letters, digits and CJK only, look-alikes folded, numbers as ``#``: the short-text view.

    Spam campaigns insert dots, stars, spaces or other characters between characters, swap
    look-alike digits and letters, tag the sender, add an opt-out instruction, and change phone
    numbers, prices, codes and links from one message to the next; the skeleton removes all of
    these, so that variants keep long common grams and the same words.
    """
    return _DIGITS.sub("#", _unnumbered(normalized))


def skeletons(normalized: str) -> tuple[str, str]:
    """(``skeleton``, the same with its digits kept): the second is the first, the same object, when
    there are none. Verify reads the digits: a short text's numbers are a large part of what it says
    ("5朵玫瑰" / "3朵玫瑰"), and a long one names an account."""
    s = _unnumbered(normalized)
    plain = _DIGITS.sub("#", s)
    return (plain, plain) if plain == s else (plain, s)


def long_numbers_only(numbered: str) -> str:
    """A skeleton with its digits (``skeletons``) with every number shorter than ``LONG_DIGITS`` as ``#``."""
    return _DIGITS.sub(lambda m: m.group() if len(m.group()) >= LONG_DIGITS else "#", numbered)


_SMALL_NUMBER = re.compile(r"(?<![0-9])[0-9]{1,2}(?![0-9])")


def small_numbers(numbered: str) -> frozenset[str]:
    """The numbers of one or two digits (a count, a day, an hour, a part) of a skeleton with its
    digits (``skeletons``)."""
    return frozenset(_SMALL_NUMBER.findall(numbered))


def masked(numbered: str) -> str:
    """A skeleton with its digits (``skeletons``) with every number as ``#``: the skeleton."""
    return _DIGITS.sub("#", numbered)


def _unnumbered(normalized: str) -> str:
    """The skeleton before its numbers become ``#``."""
    if _may_vary(normalized):
        normalized = _VARYING.sub(" ", normalized)
    if _latin(normalized):
        return _latin_skeleton(normalized)
    return _fold_runs(_drop_interleaved(letters(normalized)))


# Alphabetic text (an English, Russian or Korean SMS): its letters as they are, punctuation and
# fillers dropped as in Chinese text, but no look-alike folding outside tokens that hold digits
# ("l38OO138OOO"): folded, o, i, l, s, b and z became digits masked as "#", and two different English
# sentences kept few letters apart.
LETTER = re.compile(rf"[^\W\d_{_CJK}]")  # a letter of an alphabet (Latin, Cyrillic, Hangul...), not CJK
_WORD = re.compile(rf"[^\W\d_{_CJK}]{{2,}}")
_HAN = re.compile(rf"[{_CJK}]")
_TOKEN = re.compile(r"[^\W_]+")


def _latin(s: str) -> bool:
    """Whether a normalized text has more alphabetic words (two letters or more) than CJK characters."""
    if _WORD.search(s) is None:  # most Chinese texts
        return False
    return len(_WORD.findall(s)) > len(_HAN.findall(s))


def _latin_skeleton(s: str) -> str:
    """An alphabetic text's skeleton: its letters, digits and CJK characters, SMS spellings as the
    words they stand for (``_SPEAK``), look-alikes folded only in an ASCII token that holds both
    letters and digits (``_fold_mixed``), l as i."""
    if "@" in s or "$" in s:
        s = _LEET_MARK.sub(lambda m: m.group().translate(_LEET_MARKS), s)
    sk = "".join(_spoken(m, s) or (_fold_mixed(t) if t.isascii() and not t.isalpha() and not t.isdigit() else t)
                 for m in _TOKEN.finditer(s) for t in (m.group(),))
    return sk.replace("l", "i")  # as in a word with digits for letters, where 1 is either


_WORD_MARKS = ("", " ", ",", "!", "?", ";", ":")
_SPELT = re.compile(r"(?:^|[ ,!?;:])([b-hj-z])(?=$|[ ,!?;:.])")  # a letter alone, not the word a or i


def _spoken(m: re.Match, s: str) -> str | None:
    """The word an SMS spelling stands for (``_SPEAK``). A letter alone only as a word of its own,
    between spaces or sentence marks, and not beside another letter alone that is no such word: between
    fillers ("sh.o.u.ld") it is a piece of a word, among others a name spelt out ("S C H L I E")."""
    word = _SPEAK.get(m.group())
    if word is None or len(m.group()) > 1:
        return word
    start, end = m.span()
    before, after = s[start - 1:start], s[end:end + 2]
    if before not in _WORD_MARKS or (after[:1] not in _WORD_MARKS and after not in (".", ". ")):
        return None
    near = s[max(0, start - 3):end + 3]
    if any(x not in _SPEAK for x in _SPELT.findall(near) if x != m.group()):
        return None
    return word


# SMS spellings of English words ("u r gr8", "c u 2nite"): a copy that writes the word out, or
# the other way round, is the same message. Digits alone ("2", "4") stay numbers: a time or a
# count says more than a "to" or a "for".
_SPEAK = {"u": "you", "ur": "your", "r": "are", "n": "and", "c": "see", "b": "be", "k": "ok", "kk": "ok",
          "okay": "ok", "pls": "please", "plz": "please", "thx": "thanks", "thanx": "thanks", "tks": "thanks",
          "tmr": "tomorrow", "tmrw": "tomorrow", "2moro": "tomorrow", "2morrow": "tomorrow", "2day": "today",
          "2nite": "tonight", "tonite": "tonight", "nite": "night", "gr8": "great", "b4": "before",
          "l8r": "later", "l8": "late", "wat": "what", "wot": "what", "coz": "because", "cuz": "because",
          "bcoz": "because", "bcos": "because", "luv": "love", "ppl": "people", "msg": "message",
          "txt": "text", "abt": "about", "wif": "with", "wid": "with", "da": "the", "dat": "that",
          "gd": "good", "hv": "have", "ya": "you", "yr": "your", "sry": "sorry", "jus": "just"}


# digits that spam writes for letters ("fr33", "c4ll", "wh0", "v1p"), and the marks it writes in a
# word ("c@ll", "$ale"); 1 is l as often as i, so l is i in a Latin skeleton
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b"})
# @ or $ for a letter: a run of them before digits and a letter ("$0m3", "p0$$1bl3"), or after a
# letter and not before a digit ("it'$"); "is$1500" (normalize's "is $ 1500") is an amount. Tried
# where a run starts and never given back (possessive): a long run of marks stays linear
_LEET_MARK = re.compile(r"(?<![@$])[@$]++(?=[0-9]*[a-z])|(?<=[a-z'])[@$]++(?![0-9])")
_LEET_MARKS = str.maketrans({"@": "a", "$": "s"})


def _fold_mixed(token: str) -> str:
    """A token of Latin letters and digits: a number with look-alike letters ("l38OO138OOO", all
    digits once they are folded) as that number; a word with digits for letters, as many letters
    as digits or more ("fr33", "wh0", "1t"), as that word; else with look-alike
    letters as digits ("100k", "4n9")."""
    number = _fold_lookalike(token)
    if number.isdigit():
        return number
    digits = sum(c.isdigit() for c in token)
    return token.translate(_LEET) if 2 * digits <= len(token) else number


def _may_vary(s: str) -> bool:
    """Whether ``_VARYING`` can match: a bracket, an opt-out word, a scheme, "www.", a dot before
    a letter (a host), or a contact's name. Most texts have none, and the pattern costs several
    times these tests (``normalize`` makes every 。 a dot, so a dot alone says little)."""
    return ("[" in s or "退订" in s or "拒收" in s or "接收" in s or "://" in s or "www." in s
            or "微信" in s or "v信" in s or "vx" in s or "qq" in s or "扣扣" in s or "@" in s or "#" in s
            or ("." in s and _DOT_LETTER.search(s) is not None))


def _drop_interleaved(s: str) -> str:
    """``s`` without a character that is put between the others: a Latin letter, kana or other non-Han
    character that makes up at least a sixth of a text of 12 or more characters, at least 4 times,
    and seldom next to itself (a run like "aaaa" is no filler; a filler meets itself only where
    punctuation between was dropped). No character of real Chinese text is that frequent and that
    spread out; a filler a spammer repeats between characters is. Han characters are not looked at
    (the stroke forms spam uses are punctuation after ``normalize``): counting every character cost
    more than the rest of the skeleton."""
    n = len(s)
    if n < 12:
        return s
    candidates = set(_FILLER_CANDIDATES.findall(s))
    if not candidates:
        return s
    c = max(candidates, key=s.count)
    k = s.count(c)
    if k < 4 or k * FILLER_SHARE < n or 4 * s.count(c + c) > k:
        return s
    return s.replace(c, "")


_FILLER_CANDIDATES = re.compile("[a-z\u2e80-\u2fff\u3040-\u30ff\u3100-\u312f]")
