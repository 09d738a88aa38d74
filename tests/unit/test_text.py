import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.core.text import _CJK, _SPACE_AROUND, nfkc, normalize, skeleton, split_sentences
from stream_dedup.core.tokenize import WordTokenizer, char_ngrams

from ..conftest import shared_data

# Characters where the fast paths could go wrong: full-width forms and the spaces and ellipsis
# that ``nfkc`` replaces before its check, ASCII they turn into, combining marks that compose with
# that ASCII (A + U+0301 is Á), other compatibility forms (ligatures, circled digits, half-width
# katakana, Hangul jamo that compose), punctuation that ``_PUNCT`` folds, CJK and whitespace.
_TRICKY = st.text(st.sampled_from(
    "，：！？；（）\u3000\xa0…．－％ＡＺａｚ０９＂＇＼～"
    "AaZz09.,:;!?()'\" -~\u0301\u0308\u0327\u20dd\u3099\u309a"
    "ﬁ①㈱ｶﾞｰ\u1100\u1161\u11a8\u2126\u212b"
    "。、“”《》【】—「」‘’•★"
    "北京時間新浪体育讯カ\U00020000 \t\n"), max_size=40)


def test_width_traditional_punctuation_and_invisibles_fold_to_one_form():
    a = normalize("新浪體育訊　北京時間４月１２日，湖人隊擊敗國王。")
    b = normalize("新浪体育讯北京时间4月12日,湖人队击败国王.")
    assert a == b == "新浪体育讯北京时间4月12日,湖人队击败国王."
    assert normalize("价\u200b格\u200d优惠\ufeff") == "价格优惠"
    assert normalize("《红楼梦》“很好”【推荐】") == '"红楼梦""很好"[推荐]'
    assert normalize("Hello   World\n\tAGAIN") == "hello world again"


def test_spaces_next_to_cjk_are_layout():
    assert normalize("北京 时间 ，上午 10 点") == "北京时间,上午10点"
    assert normalize("use the API now") == "use the api now"


def test_sentence_split_keeps_decimals_and_marks():
    s = normalize("价格上涨3.5%。市场反应平淡！下周会怎样？专家说：难说；再看。")
    assert split_sentences(s) == ["价格上涨3.5%.", "市场反应平淡!", "下周会怎样?", "专家说:难说;", "再看."]


def test_skeleton_strips_spam_noise_and_folds_numbers():
    a = skeleton(normalize("加.微*信 领 取 优惠，电话 138-0013-8000"))
    b = skeleton(normalize("加微信领取优惠，电话13911112222"))
    assert a == b == "加微信领取优惠电话#"


@pytest.mark.parametrize("tail", ["回T退订", "，退订回N", " 拒收请回复R", "回复TD退订", "不再接收请回T", "退订请回复0000"])
def test_an_opt_out_instruction_is_masked_as_a_sender_tag_is(tail):
    """Commercial SMS must carry one; it says nothing about the message (and on a ten-character
    message it would be a third of its grams)."""
    assert skeleton(normalize("华为是如何做其转型的源动力" + tail)) == "华为是如何做其转型的源动力"


def test_opt_out_words_in_ordinary_text_stay():
    assert skeleton(normalize("他们退订了我的机票，回家收拾东西")) == "他们退订了我的机票回家收拾东西"


@pytest.mark.parametrize("common", [(), ("。", "、", "“", "”", "《", "》"), ("。", "o")])
def test_folding_by_expression_gives_what_translate_gives(common):
    """``_char_folder`` replaces ``str.translate`` (a dict lookup per character) for speed only,
    with or without its ``str.replace`` of the common characters."""
    from stream_dedup.core.text import _PUNCT, _char_folder

    table = dict(_PUNCT, **{"o": "0", "零": "0"})
    fold = _char_folder(table, common)
    text = "【特价】“零”元购！—— 立即 o 领取：《活动》‘限时’～ 。、a.b[c]-d*e?f\\g^h 壹" + "".join(table)
    assert fold(text) == text.translate(str.maketrans(table))
    assert fold("没有要换的字") == "没有要换的字"
    assert fold(text[::-1]) == text[::-1].translate(str.maketrans(table))


def test_a_common_character_must_not_be_folded_twice():
    from stream_dedup.core.text import _char_folder

    with pytest.raises(ValueError, match="folded again"):
        _char_folder({"a": "b", "b": "c"}, common=("a",))
    with pytest.raises(ValueError, match="folded again"):
        _char_folder({"a": "xyb", "b": "c"}, common=("a",))
    assert _char_folder({"a": "xy", "b": "c"}, common=("a",))("ab") == "xyc"


def test_compatibility_folds_are_the_characters_own_decompositions():
    """What ``nfkc``'s correctness rests on: each replacement is the character's full NFKD."""
    from stream_dedup.core.text import _COMPAT_ASCII

    assert len(_COMPAT_ASCII) == 97
    for c, r in _COMPAT_ASCII.items():
        assert unicodedata.normalize("NFKD", c) == r, hex(ord(c))


@settings(max_examples=3000, deadline=None)
@given(_TRICKY)
def test_nfkc_is_unicodedata_nfkc(text):
    assert nfkc(text) == unicodedata.normalize("NFKC", text)


@settings(max_examples=2000, deadline=None)
@given(_TRICKY)
def test_space_pattern_matches_a_space_beside_cjk_or_punctuation(text):
    """The pattern is written for speed; this is what it must mean, position by position."""
    side = re.compile(rf"[{_CJK}\W]")
    want = "".join(ch for i, ch in enumerate(text) if not (
        ch == " " and ((i + 1 < len(text) and side.match(text[i + 1])) or (i > 0 and side.match(text[i - 1])))))
    assert _SPACE_AROUND.sub("", text) == want


def test_nfkc_on_the_sample_corpora():
    """Every text of the shared corpora (news, headlines, SMS) normalizes as full NFKC would."""
    files = [shared_data("news/thucnews_1000.jsonl"), shared_data("news/thucnews_titles_20k.jsonl"),
             shared_data("sms/sms_spam_zh.jsonl")]
    n = changed = 0
    for f in files:
        with open(f, encoding="utf-8") as lines:
            for line in lines:
                text = json.loads(line).get("text") or ""
                want = unicodedata.normalize("NFKC", text)
                assert nfkc(text) == want
                n += 1
                changed += want != text
    assert n > 100_000 and changed > 1000  # the corpora were read, and NFKC had work in them


def test_jieba_words_drop_stopwords_and_punctuation_and_user_dict(tmp_path):
    tok = WordTokenizer()
    words = tok.words(normalize("我们今天在北京召开了新闻发布会。"))
    assert "北京" in words and "新闻" in words
    assert "的" not in words and "." not in words and "我们" not in words
    user = tmp_path / "user.txt"
    user.write_text("凯伦诗服装 10 nz\n", encoding="utf-8")
    assert "凯伦诗服装" in WordTokenizer(user_dict=str(user)).words("凯伦诗服装打折")


def test_char_ngrams():
    assert char_ngrams("abcde", 3) == ["abc", "bcd", "cde"]
    assert char_ngrams("ab", 3) == ["ab"]
    assert char_ngrams("", 3) == []


def test_preparer_warm_loads_the_segmenter_and_converter_before_the_first_document(tmp_path):
    """A worker warms before joining its group; afterwards no document pays for a dictionary load."""
    from stream_dedup.config import Settings
    from stream_dedup.core import segment, text
    from stream_dedup.core.stages import Preparer

    user = tmp_path / "warm_user.txt"  # a dictionary no other test loads: its segmenter is surely cold
    user.write_text("预热专用词 10 n\n", encoding="utf-8")
    s = Settings()
    s.text.user_dict = str(user)
    p = Preparer(s)
    key = (str(user), s.text.segmenter)
    t2s_loads = text._t2s.cache_info().misses
    assert key not in segment._loaded
    assert p.warm() > 0
    loaded = segment._loaded[key]
    assert text._t2s.cache_info().misses <= t2s_loads + 1 and text._t2s.cache_info().currsize == 1
    p.prepare({"id": "a", "text": "预热专用词之后的第一条短信", "ts": 1})
    assert segment._loaded[key] is loaded  # built once, by warm
    assert "预热专用词" in p.tokenizer.words("预热专用词之后")


def test_str_split_whitespace_is_the_whitespace_of_regular_expressions():
    """``normalize`` collapses whitespace with ``str.split`` where it used ``re.sub(r"\\s+", " ")``."""
    import sys

    split = {c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()}
    pattern = re.compile(r"\s")
    assert split == {c for c in map(chr, range(sys.maxunicode + 1)) if pattern.match(c)}
    assert normalize(" a\u2028b\u1680c\x0b\x0cd\u3000e\u205ff \t\r\n g\u2029") == "a b c d e f g"
