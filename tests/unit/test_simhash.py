import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import load_settings
from stream_dedup.core.hashing import hash64_list
from stream_dedup.core.simhash_fingerprint import BandScheme, hamming, simhash, simhash_many, split_blocks
from stream_dedup.core.stages import Preparer

ARTICLE = ("国家统计局今天发布数据显示，今年前三季度国内生产总值同比增长百分之五点二，增速比上半年加快零点一个百分点。"
           "分产业看，第一产业增加值增长百分之四，第二产业增长百分之四点四，第三产业增长百分之六。"
           "消费对经济增长的贡献率达到百分之八十三，比上半年提高一点五个百分点。专家认为，"
           "随着各项稳增长政策落地见效，四季度经济有望保持回升向好态势，全年目标有望顺利实现。")
OTHER = ("第十五届全国运动会男子一百米决赛昨晚结束，来自广东队的选手以九秒九八的成绩夺得冠军，打破赛会纪录。"
         "赛后他表示，冬训期间重点改进了起跑技术，下一步将备战世界田径锦标赛，争取站上领奖台。"
         "亚军和季军分别由上海队和浙江队选手获得，三人成绩均进入十秒大关。")


def fp(text: str) -> int:
    p = Preparer(load_settings(environ={}))
    det = next(d for d in p.detectors if d.name == "simhash")
    return det.fingerprint(p.document({"id": "x", "text": text}, 1))


def test_near_copies_are_close_and_different_articles_far():
    base = fp(ARTICLE)
    assert fp(ARTICLE) == base
    assert hamming(base, fp("来源：新华网 " + ARTICLE)) <= 6
    assert hamming(base, fp(ARTICLE.replace("专家", "学者"))) <= 3
    assert hamming(base, fp(OTHER)) >= 12


def test_weights_decide_bits():
    words = ["北京", "上海"]
    a = simhash(words, np.array([10.0, 0.1]))
    b = simhash(words, np.array([0.1, 10.0]))
    # the heavier word wins every bit where the two hashes disagree
    from stream_dedup.core.hashing import hash64
    h1, h2 = hash64("北京"), hash64("上海")
    assert a == h1 and b == h2
    assert hamming(a, b) == hamming(h1, h2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=6), st.floats(0.01, 100)), min_size=1, max_size=100,
                unique_by=lambda t: t[0]))
def test_numpy_simhash_equals_charikars_definition(pairs):
    """Bit j is set when the words whose hash has bit j outweigh the others (ties clear it),
    with the weights in fixed point (whole multiples of 2^-16), summed in Python's exact ints."""
    from stream_dedup.core.hashing import hash64
    words = [w for w, _ in pairs]
    weights = np.array([x for _, x in pairs])
    units = [round(x * 65536) for x in weights.tolist()]  # round half to even, as np.rint
    total = sum(units)
    expected = 0
    for j in range(64):
        ones = sum(u for w, u in zip(words, units) if (hash64(w) >> j) & 1)
        expected |= (2 * ones > total) << j
    assert simhash(words, weights) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=6), st.floats(0.01, 1000)), min_size=1, max_size=100,
                unique_by=lambda t: t[0]), st.randoms(use_true_random=False))
def test_word_order_does_not_change_a_fingerprint(pairs, rnd):
    """Fixed-point sums are exact: any order of a document's words gives the same bits, in the
    one-document path (BLAS) and in a batch (blocks of short texts)."""
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    fps = set()
    for ps in (pairs, shuffled):
        words, weights = [w for w, _ in ps], np.array([x for _, x in ps])
        fps.add(simhash(words, weights))
        fps.update(simhash_many([words] * 8, [weights] * 8))
    assert len(fps) == 1


def test_exact_ties_clear_the_bit():
    """Two words of equal weight: where their hashes differ, neither outweighs the other."""
    from stream_dedup.core.hashing import hash64
    words = ["北京", "上海"]
    h1, h2 = hash64("北京"), hash64("上海")
    for weights in (np.array([0.3, 0.3]), np.array([7.1, 7.1])):
        assert simhash(words, weights) == h1 & h2
        assert simhash_many([words] * 9, [weights] * 9) == [h1 & h2] * 9


doc_lists = st.lists(st.lists(st.tuples(st.text(min_size=1, max_size=4), st.floats(0.01, 100)), max_size=70,
                              unique_by=lambda t: t[0]), max_size=30)


@settings(max_examples=200, deadline=None)
@given(doc_lists, st.integers(1, 40))
def test_a_batch_gives_each_document_the_fingerprint_it_gets_alone(docs, per_pass):
    """The workers fingerprint per stream batch, ``scan`` per document: the two must agree bit for bit,
    whatever the batch and however it is split into numpy passes."""
    import stream_dedup.core.simhash_fingerprint as sh
    words = [[w for w, _ in d] for d in docs]
    weights = [np.array([x for _, x in d], dtype=np.float64) for d in docs]
    alone = [simhash(w, x) for w, x in zip(words, weights)]
    saved = sh._DOCS
    sh._DOCS = per_pass  # small passes too
    try:
        assert simhash_many(words, weights) == alone
    finally:
        sh._DOCS = saved
    assert simhash_many(words, weights) == alone
    # the detector hands over its words' hashes (hashed once for the IDF lookup too): the same bits
    hashed = [np.array(hash64_list(w), dtype=np.uint64) for w in words]
    assert [simhash(h, x) for h, x in zip(hashed, weights)] == alone
    assert simhash_many(hashed, weights) == alone


def test_blocks_cover_64_bits():
    for n in range(2, 9):
        blocks = split_blocks(n)
        assert sum(w for _, w in blocks) == 64
        assert blocks[0][0] == 0 and all(blocks[i][0] + blocks[i][1] == blocks[i + 1][0] for i in range(n - 1))
    assert [w for _, w in split_blocks(5)] == [13, 13, 13, 13, 12]


def test_scheme_sizes_match_the_literature():
    assert len(BandScheme.make(3, "4x16").keys(12345)) == 4
    assert len(BandScheme.make(3, "5c2").keys(12345)) == 10


@settings(max_examples=400, deadline=None)
@given(fp_=st.integers(0, 2**64 - 1), k=st.integers(1, 5), style=st.sampled_from(["4x16", "5c2"]),
       seed=st.integers(0, 2**32), flips=st.integers(0, 5))
def test_pigeonhole_any_pair_within_k_shares_a_key(fp_, k, style, seed, flips):
    """Two fingerprints within Hamming distance k always share at least one band key."""
    scheme = BandScheme.make(k, style)
    rng = random.Random(seed)
    other = fp_
    for bit in rng.sample(range(64), min(flips, k)):
        other ^= 1 << bit
    assert hamming(fp_, other) <= k
    assert set(scheme.keys(fp_)) & set(scheme.keys(other))


def test_pigeonhole_is_tight_for_4x16():
    """k+1 flips, one per block, can defeat k+1 blocks: the guarantee is exactly k."""
    scheme = BandScheme.make(3, "4x16")
    a = 0
    b = a ^ (1 << 0) ^ (1 << 16) ^ (1 << 32) ^ (1 << 48)
    assert not set(scheme.keys(a)) & set(scheme.keys(b))
