"""The short-text (n-gram) and MinHash detectors on real Chinese text (the project's sample)."""
import json
import random
from pathlib import Path

import numpy as np
import pytest

from stream_dedup.config import Settings
from stream_dedup.core.detectors.minhash import MinhashDetector
from stream_dedup.core.detectors.ngram import SHORT_TEXT, SMALL_BATCH, bottom, winnow, winnow_list, winnow_many
from stream_dedup.core.hashing import shingle_hashes, shingle_hashes_list, shingle_hashes_many
from stream_dedup.core.minhash_signature import MinHasher, jaccard_estimate
from stream_dedup.core.stages import Preparer
from stream_dedup.core.text import normalize, skeleton

REPO = Path(__file__).resolve().parents[2]
SAMPLE = {e["id"]: e for e in map(json.loads, (REPO / "examples" / "sample.jsonl").read_text("utf-8").splitlines())}


@pytest.fixture(scope="module")
def prep():
    return Preparer(Settings())


def det(prep, name):
    return next(d for d in prep.detectors if d.name == name)


def doc(prep, text, i="x"):
    return prep.document({"id": i, "text": text, "ts": 1})


def test_ngram_emits_a_handful_of_keys_and_survives_campaign_noise(prep):
    ng = det(prep, "ngram")
    sms = SAMPLE["sms-0"]["text"]
    s = ng.sketch(doc(prep, sms))
    grams = len(sms) - ng.m + 1
    assert 2 <= len(s.keys) <= 2 * grams / (ng.w + 1) + 2  # winnowing density, not one key per gram
    noisy = ng.sketch(doc(prep, SAMPLE["sms-0-noise"]["text"]))
    assert set(s.keys) & set(noisy.keys)
    assert ng.verify(s.payload, noisy.payload) is not None
    other = ng.sketch(doc(prep, SAMPLE["sms-2"]["text"]))
    assert ng.verify(s.payload, other.payload) is None


def test_ngram_keeps_reworded_questions_apart(prep):
    ng = det(prep, "ngram")
    a = ng.sketch(doc(prep, "老婆怀孕期间老公该怎么办？"))
    b = ng.sketch(doc(prep, "老婆在怀孕期间，老公该怎么做"))
    assert ng.verify(a.payload, b.payload) is None


def test_ngram_payload_carries_its_words_so_verify_never_segments_and_old_payloads_still_read(prep):
    """The stateful stage verifies; it must not need the segmenter: the words travel in the payload
    (sketching segments). A payload of the previous version (word count 0, then the skeleton) is
    still verified, by segmenting its skeleton, with the same answer."""
    import struct

    import mmh3

    ng = det(prep, "ngram")
    tokenizer, calls = ng.tokenizer, []

    class Counting:
        def words(self, text):
            calls.append(text)
            return tokenizer.words(text)

    ng.tokenizer = Counting()
    ng._words_of.cache_clear()
    try:
        a = ng.sketch(doc(prep, SAMPLE["sms-0"]["text"]))
        b = ng.sketch(doc(prep, SAMPLE["sms-0"]["text"].replace("五折", "六折")))
        short = ng.sketch(doc(prep, "今天天气不错"))
        assert len(calls) == 3  # one segmentation per sketch
        sk = ng._skeleton_of(a.payload)[0]
        (n,) = struct.unpack_from(">H", a.payload)
        assert n == len(set(tokenizer.words(sk))) > 3
        assert set(struct.unpack_from(f">{n}I", a.payload, 2)) == {mmh3.hash(w, signed=False) for w in tokenizer.words(sk)}
        calls.clear()
        assert ng.verify(a.payload, short.payload) is None  # lengths alone turn it down
        assert ng.verify(a.payload, b.payload) is not None and ng.verify(b.payload, a.payload) is not None
        other = ng.sketch(doc(prep, SAMPLE["sms-2"]["text"]))
        calls.clear()
        assert ng.verify(a.payload, other.payload) is None
        assert calls == []  # verifying never segments a payload that carries its words
        old = struct.pack(">H", 0) + sk.encode("utf-8")  # the previous version's payload
        assert ng._skeleton_of(old)[0] == sk
        assert ng.verify(old, b.payload) == ng.verify(a.payload, b.payload) and calls == [sk]
    finally:
        ng.tokenizer = tokenizer


def test_winnowing_guarantee_any_shared_window_shares_a_key():
    rng = np.random.default_rng(3)
    w = 8
    for _ in range(200):
        common = rng.integers(0, 2**40, size=w, dtype=np.uint64)  # w hashes = w + m - 1 shared characters
        a = np.concatenate([rng.integers(0, 2**40, size=rng.integers(0, 30), dtype=np.uint64), common,
                            rng.integers(0, 2**40, size=rng.integers(0, 30), dtype=np.uint64)])
        b = np.concatenate([rng.integers(0, 2**40, size=rng.integers(0, 30), dtype=np.uint64), common])
        assert set(winnow(a, w)) & set(winnow(b, w))


def _winnow_one_by_one(hashes: np.ndarray, w: int) -> list[int]:
    """Winnowing as the definition reads: the leftmost minimum of every window, each position once."""
    if hashes.size <= w:
        return [int(hashes.min())] if hashes.size else []
    pos = sorted({i + int(np.argmin(hashes[i:i + w])) for i in range(hashes.size - w + 1)})
    return [int(hashes[p]) for p in pos]


def test_batched_shingles_and_winnowing_equal_each_text_alone():
    """``prefetch`` hashes and winnows a batch of texts in one pass over their concatenation: each
    text must get what it gets alone (windows across two texts skipped, short texts, ties)."""
    rng = np.random.default_rng(5)
    texts = [SAMPLE[k]["text"] for k in SAMPLE if k.startswith("sms")] + ["", "短", "一二三", "一二三四"]
    for _ in range(300):
        batch = [texts[i] for i in rng.integers(0, len(texts), size=rng.integers(1, 9))]
        n, w = int(rng.integers(1, 6)), int(rng.integers(1, 14))
        many = shingle_hashes_many(batch, n)
        assert [a.tolist() for a in many] == [shingle_hashes(t, n).tolist() for t in batch]
        cat = np.concatenate(many) % np.uint64(int(rng.choice([5, 1 << 62])))  # few values: many ties
        sizes = [a.size for a in many]
        offsets = np.cumsum([0] + sizes)
        assert winnow_many(cat, sizes, w) == [_winnow_one_by_one(cat[o:o + s], w) for o, s in zip(offsets, sizes)]
    assert winnow_many(np.zeros(0, dtype=np.uint64), [], 4) == []


def test_plain_int_shingles_and_winnowing_equal_numpys():
    """A short text judged alone is hashed and winnowed in plain ints: the keys must be NumPy's bit
    for bit, or a document judged alone would miss its copies judged in a batch (and the stored
    buckets of every earlier version). Real SMS, every prefix length, astral and lone surrogates."""
    rng = np.random.default_rng(11)
    texts = [SAMPLE[k]["text"] for k in SAMPLE if k.startswith("sms")]
    texts += ["", "短", "一二", "一二三四", "\U0001F600表情\ud800孤立代理", "ＦＵＬＬ全角１２３"]
    texts += [t[:k] for t in texts[:3] for k in range(0, SHORT_TEXT + 2)]
    for text in texts:
        for n in (1, 2, 4, 5):
            assert shingle_hashes_list(text, n) == shingle_hashes(text, n).tolist(), (text, n)
    for _ in range(300):
        h = rng.integers(0, int(rng.choice([4, 1 << 62])), size=rng.integers(0, 40), dtype=np.uint64)  # ties too
        w = int(rng.integers(1, 14))
        assert winnow_list(h.tolist(), w) == _winnow_one_by_one(h, w) == winnow(h, w)


def test_ngram_keys_alone_take_the_plain_path_below_short_text_and_equal_the_batch(prep):
    ng = det(prep, "ngram")
    texts = [SAMPLE[k]["text"] for k in SAMPLE if k.startswith("sms")]
    docs = [doc(prep, t, f"s{i}") for i, t in enumerate(texts)]
    short = [d for d in docs if 0 < len(ng.skeleton(d)) <= SHORT_TEXT]
    assert 3 <= len(short) < len(docs)  # both the plain path and NumPy's are exercised
    alone = [ng.keys(d) for d in docs]
    assert len(texts) >= SMALL_BATCH  # one batch through winnow_many
    for size in (len(texts), SMALL_BATCH - 1, 1):  # and batches keyed text by text
        batch = [doc(prep, t, f"s{i}") for i, t in enumerate(texts)]
        for i in range(0, len(batch), size):
            ng.prefetch(batch[i:i + size])
        assert [ng.keys(d) for d in batch] == alone


def test_ngram_keys_of_a_batch_equal_keys_alone(prep):
    ng = det(prep, "ngram")
    docs = [doc(prep, e["text"], k) for k, e in SAMPLE.items() if "text" in e and len(e["text"]) < 300]
    alone = [ng.sketch(doc(prep, d.text, d.id)) for d in docs]
    ng.prefetch(docs)
    assert [ng.sketch(d) for d in docs] == alone and all(s is None or s.keys for s in alone)
    assert sum(1 for s in alone if s is not None) > 5


def test_minhash_estimates_jaccard_and_separates_reposts_from_other_articles(prep):
    mh = det(prep, "minhash")
    text = "".join(SAMPLE[f"news-{i}"]["text"] for i in range(4))
    sentences = text.split("。")
    dropped = "。".join(sentences[:3] + sentences[4:])
    a, b = mh.sketch(doc(prep, text)), mh.sketch(doc(prep, dropped))
    other = mh.sketch(doc(prep, "".join(SAMPLE[f"news-{i}"]["text"] for i in range(4, 8))))
    assert len(a.keys) == mh.bands
    assert set(a.keys) & set(b.keys)
    assert mh.verify(a.payload, b.payload) is not None
    assert mh.verify(a.payload, other.payload) is None
    # the estimate tracks the true shingle Jaccard
    h = MinHasher(256)
    rng = random.Random(1)
    for _ in range(5):
        cut = rng.randint(20, 200)
        t1, t2 = text, text[:cut] + text[cut + 40:]
        s1, s2 = set(mh.shingles(doc(prep, t1))), set(mh.shingles(doc(prep, t2)))
        true = len(s1 & s2) / len(s1 | s2)
        est = jaccard_estimate(h.signature_of_text(doc(prep, t1).text, 5), h.signature_of_text(doc(prep, t2).text, 5))
        assert abs(est - true) < 0.1


def test_minhash_finds_an_article_inside_a_repost_with_additions(prep):
    """A repost that appends another article's text (a related list, a leaked template) shares under
    0.7 of its shingles with the article, but holds all of the article's: containment. Two articles
    that only share such an addition are not copies. Thirty real articles: an estimate from 128
    permutations is one draw, and a single pair near a bound passes or fails by its hashes."""
    mh, strict = det(prep, "minhash"), MinhashDetector(threshold=0.7)
    jaccard_only = MinhashDetector(containment=0, threshold=0.7)
    arts = [t for t in _thucnews().values() if len(t) >= 400][:120]
    found = missed_by_jaccard = apart = 0
    for i in range(30):
        article, other = arts[i], arts[90 + i]
        extra = (arts[30 + i] + arts[60 + i])[: len(article) * 4 // 5]
        a, repost = mh.sketch(doc(prep, article)), mh.sketch(doc(prep, article + extra))
        m = strict.verify(a.payload, repost.payload)
        found += m is not None and m.similarity >= 0.9
        missed_by_jaccard += jaccard_only.verify(a.payload, repost.payload) is None
        apart += mh.verify(mh.sketch(doc(prep, other + extra)).payload, repost.payload) is None
        # a payload without its size (an older version's): Jaccard alone
        assert (strict.verify(a.payload[:512], repost.payload) is None) == (jaccard_only.verify(a.payload, repost.payload)
                                                                           is None)
    assert found >= 25 and missed_by_jaccard >= 25 and apart == 30, (found, missed_by_jaccard, apart)
    # the shorter text under contained_ratio of the longer: never contained
    article = arts[0]
    long = mh.sketch(doc(prep, article + "".join(arts[30:34])))
    assert mh.verify(mh.sketch(doc(prep, article)).payload, long.payload) is None


def test_ngram_bottom_keys_are_the_same_alone_and_in_a_batch_beyond_the_plain_path():
    """With a wider window, texts longer than ``SHORT_TEXT`` get bottom keys too (NumPy's path)."""
    settings = Settings()
    settings.ngram.w = 20
    ng = det(Preparer(settings), "ngram")
    sks = [s for s in (skeleton(normalize(e["text"])) for e in SAMPLE.values() if "text" in e)
           if SHORT_TEXT < len(s) <= ng.bottom_chars]
    sks += [sk[:n] for sk in sks[:2] for n in range(SHORT_TEXT, ng.bottom_chars + 1)]
    assert len(sks) >= SMALL_BATCH
    assert ng._keys_many(sks) == [ng._keys_alone(sk) for sk in sks]
    assert all(set(bottom(shingle_hashes_list(sk, ng.m, (1 << 62) - 1))) <= set(ng._keys_alone(sk)) for sk in sks)


def test_grams_with_a_masked_number_are_keys_only_where_a_window_has_no_other(prep):
    """Dates and amounts ("#月#日", "价值#元") recur on countless different messages: their grams
    are no keys while a window holds another gram; a text of nothing else still gets keys."""
    from stream_dedup.core.detectors.ngram import DEMOTED
    from stream_dedup.core.hashing import shingle_hashes_list

    ng = det(prep, "ngram")
    texts = {"a": "本店于3月8日至3月12日举行三八节回馈活动，全场八折，价值99元礼品免费送",
             "b": "我们学校4月2日至4月6日放假，请各位家长注意孩子安全，价值无法估量"}
    for ident, text in texts.items():
        d = doc(prep, text, ident)
        sk = ng.skeleton(d)
        numbered = {h for i, h in enumerate(shingle_hashes_list(sk, ng.m, DEMOTED - 1)) if "#" in sk[i:i + ng.m]}
        assert len(numbered) >= 5 and not numbered & {k & (DEMOTED - 1) for k in ng.keys(d)}
    only = doc(prep, "3月8日至3月12日", "c")
    assert ng.keys(only) and all(k >= DEMOTED for k in ng.keys(only))
    # copies still share keys, alone and in a batch
    a, a2 = doc(prep, texts["a"], "a"), doc(prep, texts["a"] + "回复TD退订", "a2")
    ng.prefetch([a2])
    assert set(ng.keys(a)) & set(ng.keys(a2))


def _thucnews() -> dict[int, str]:
    from tests.conftest import shared_data

    rows = map(json.loads, shared_data("news/thucnews_1000.jsonl").read_text("utf-8").splitlines())
    return {r["id"]: r["text"] for r in rows}


def test_an_edited_repost_of_a_real_article_is_found():
    """A repost as editors and scrapers make it: a tenth of the sentences left out, as many of
    another article's put in, and one Han character in a hundred changed. Its 5-character
    shingles share about 0.6 with the article's, under the old 0.7 threshold: 150 such reposts,
    so that the count does not hang on one draw of the hashes."""
    import re

    from stream_dedup.api import Deduper

    arts = [t for t in _thucnews().values() if len(t) >= 400][:170]
    rng = random.Random(3)

    def repost(t: str, other: str) -> str:
        s = re.findall(r"[^。！？]+[。！？]*", t)
        s = [x for x in s if rng.random() > 0.1]
        for x in re.findall(r"[^。！？]+[。！？]*", other)[:max(1, len(s) // 10)]:
            s.insert(rng.randrange(len(s) + 1), x)
        return "".join(rng.choice("的是在不了有和人") if "\u4e00" <= c <= "\u9fff" and rng.random() < 0.01 else c
                       for c in "".join(s))

    found = 0
    with Deduper() as d:
        for i, t in enumerate(arts[:150]):
            d.check({"id": f"a{i}", "text": t, "ts": i})
        for i, t in enumerate(arts[:150]):
            d.check({"id": f"r{i}", "text": repost(t, arts[150 + i % 20]), "ts": 1000 + i})
            found += d.verdict(f"r{i}").duplicate_of == f"a{i}"
    assert found >= 0.9 * 150, found


@pytest.mark.parametrize("mark", ["", " "], ids=["left out", "as spaces"])
def test_a_real_article_with_its_punctuation_stripped_is_found(mark):
    """A scraper's plain text: every punctuation mark left out or written as a space. A mark every
    ten characters or so took half of the shingles when they were cut from the text as it is;
    from its letters and digits they are the same."""
    import re

    from stream_dedup.api import Deduper

    arts = [t for t in _thucnews().values() if len(t) >= 300][:40]
    found = 0
    with Deduper() as d:
        for i, t in enumerate(arts):
            d.check({"id": f"a{i}", "text": t, "ts": i})
        for i, t in enumerate(arts):
            d.check({"id": f"p{i}", "text": re.sub(r"[，。！？：；、“”（）《》,.!?:;()]", mark, t), "ts": 100 + i})
            found += d.verdict(f"p{i}").duplicate_of == f"a{i}"
    assert found == len(arts), found


def test_two_reports_on_one_kind_of_fund_are_not_copies():
    """THUCNews 31 and 358: two finance reports on CSI 300 index funds, different articles whose
    shingles share about 0.43 (what a threshold of 0.4 would match)."""
    from stream_dedup.api import Deduper

    arts = _thucnews()
    with Deduper() as d:
        d.check({"id": "31", "text": arts[31], "ts": 1})
        d.check({"id": "358", "text": arts[358], "ts": 2})
        assert d.verdict("358").verdict == "unique"
