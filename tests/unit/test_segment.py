"""The Rust segmenter behind jieba's block split gives Python jieba's tokens (core/segment.py)."""
from __future__ import annotations

import json
import re

import pytest

from stream_dedup.core import segment
from stream_dedup.core.text import normalize
from stream_dedup.core.tokenize import _SENTENCE_DOT, WordTokenizer
from tests.conftest import REPO, shared_data

# Where bare jieba-rs departs from jieba 0.42.1: non-Han runs inside an unknown stretch, CJK
# extension characters, and text around them (real headlines and SMS from the sample corpora).
DEPARTURES = [
    "it7t.com]对于笔记本用户而言",
    "全场x.x折起,希望亲们喜欢",
    "70-119平米2-3居均价7000元",
    "2009.12.xx通往异界之门即将震撼开启",
    "i.b.m公司发布k-9新品,a_b中",
    "㐀㐁中国人民站起来了",
]
ORDINARY = [
    "我们今天在北京召开了新闻发布会。",
    "价格上涨3.5%。市场反应平淡!100%的人 都 说好",
    "我用c++写代码,我爱.net和b2b\r\n下一行\t制表",
]


@pytest.fixture(scope="module")
def jieba_ref():
    return segment.load(None, "jieba")


def _prepared(text: str) -> str:
    return _SENTENCE_DOT.sub("。", normalize(text))


def test_bare_rjieba_departs_from_jieba_on_these_texts(jieba_ref):
    """Why the adapter exists: without it these tokens differ (if jieba-rs ever agrees, drop the adapter)."""
    import rjieba

    bare = rjieba.Jieba()
    differing = [t for t in DEPARTURES if bare.cut(t) != jieba_ref.lcut(t)]
    assert len(differing) == len(DEPARTURES)


def test_adapter_gives_jiebas_tokens_on_departures_and_ordinary_text(jieba_ref):
    rs = segment.load(None, "rjieba")
    for t in DEPARTURES + ORDINARY:
        assert rs.lcut(t) == jieba_ref.lcut(t), t


def test_adapter_gives_jiebas_tokens_on_the_shipped_sample(jieba_ref):
    rs = segment.load(None, "rjieba")
    lines = (REPO / "examples" / "sample.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [_prepared(json.loads(x)["text"]) for x in lines if x.strip()]
    assert len(texts) >= 20
    for t in texts:
        assert rs.lcut(t) == jieba_ref.lcut(t), t


def test_adapter_agrees_with_jieba_on_thousands_of_real_sms(jieba_ref):
    """A corpus-scale check: at most a handful of HMM near-ties among 20,000 SMS (5 in the full 96,982)."""
    rs = segment.load(None, "rjieba")
    texts = []
    with open(shared_data("sms/sms_spam_zh.jsonl"), encoding="utf-8") as f:
        for line in f:
            texts.append(_prepared(json.loads(line)["text"]))
            if len(texts) == 20_000:
                break
    differing = [t for t in texts if rs.lcut(t) != jieba_ref.lcut(t)]
    assert len(differing) <= 3, differing[:5]
    stop = WordTokenizer().stopwords
    filtered = [t for t in texts if rs.words(t, stop) != _filtered_reference(jieba_ref, t, stop)]
    assert len(filtered) <= len(differing)


def _filtered_reference(jieba_ref, text: str, stop: frozenset[str]) -> list[str]:
    """What ``WordTokenizer.words`` keeps of Python jieba's tokens (its generic path)."""
    return [w for w in jieba_ref.lcut(text) if w not in stop and not w.isspace() and re.search(r"\w", w)]


def test_words_filtered_while_segmenting_equal_the_filter_over_jiebas_tokens(jieba_ref):
    rs = segment.load(None, "rjieba")
    stop = WordTokenizer().stopwords
    lines = (REPO / "examples" / "sample.jsonl").read_text(encoding="utf-8").splitlines()
    texts = DEPARTURES + ORDINARY + [_prepared(json.loads(x)["text"]) for x in lines if x.strip()]
    texts += ["a_b-c.d 中文+#&%-混排 ,.!? 。。 ㄅㄆ ひらがな", "   \r\n\t ", "-.-", "上升+5%"]
    for t in texts:
        assert rs.words(t, stop) == _filtered_reference(jieba_ref, t, stop), t
    # and through the tokenizer, which takes this path by default
    t = _prepared("本市今天上午召开新闻发布会，介绍今年夏季防汛工作安排。x.x折起")
    assert WordTokenizer().words(t) == WordTokenizer(segmenter="jieba").words(t)


def test_words_in_one_call_equal_the_words_block_by_block():
    """``JiebaRs.words`` hands rjieba all Han blocks joined by newlines where the text allows; on
    real news (long texts, decimals, ranges, URLs) and SMS the words are those of one call a block."""
    rs = segment.load(None, "rjieba")
    stop = WordTokenizer().stopwords
    texts = []
    for rel, n in (("news/thucnews_1000.jsonl", 1000), ("sms/sms_spam_zh.jsonl", 5000)):
        with open(shared_data(rel), encoding="utf-8") as f:
            texts += [_prepared(json.loads(line)["text"]) for _, line in zip(range(n), f)]
    fast = [t for t in texts if segment._OTHER_WORD.search(t) is None]
    assert len(fast) > 0.9 * len(texts)
    assert sum(segment._JOINERS.search(t) is not None for t in fast) > 500  # the path that splits tokens
    for t in fast:
        assert rs.words(t, stop) == rs._words_by_block(t, stop), t


def test_user_dictionary_is_read_as_jieba_reads_it(tmp_path):
    user = tmp_path / "user.txt"
    user.write_text("\ufeff凯伦诗服装 10 nz\n云计算平台\nx.x折 5\n\n北京时间报道 3 n\n", encoding="utf-8")
    ref = segment.load(str(user), "jieba")
    rs = segment.load(str(user), "rjieba")
    texts = ["凯伦诗服装打折,云计算平台上线", "全场x.x折起", "北京时间报道:今天"] + DEPARTURES
    for t in texts:
        assert rs.lcut(t) == ref.lcut(t), t
    assert "凯伦诗服装" in WordTokenizer(user_dict=str(user)).words("凯伦诗服装打折")
    assert "云计算平台" in rs.lcut("云计算平台上线")


def test_user_dictionary_must_be_utf8(tmp_path):
    bad = tmp_path / "gbk.txt"
    bad.write_bytes("凯伦诗服装 10\n".encode("gbk"))
    with pytest.raises(ValueError, match="utf-8"):
        segment.JiebaRs(str(bad))


def test_unknown_segmenter_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown segmenter"):
        segment.load(None, "nope")


def test_a_segmenter_asked_for_by_several_threads_at_once_is_built_once(tmp_path):
    """``scan`` may ask for the segmenter from two threads; a user dictionary must load once."""
    import threading

    user = tmp_path / "threads_user.txt"  # a dictionary no other test loads
    user.write_text("并发专用词 10 n\n", encoding="utf-8")
    got: list = []
    start = threading.Barrier(4)

    def ask():
        start.wait()
        got.append(segment.load(str(user), "rjieba"))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(g is got[0] for g in got)
    assert "并发专用词" in got[0].lcut("这是并发专用词测试")
