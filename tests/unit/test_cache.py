"""The two-generation memo that keeps the hot-path caches' memory flat."""
from hypothesis import given, settings
from hypothesis import strategies as st

import mmh3

from stream_dedup.core.cache import GenerationalCache
from stream_dedup.core.hashing import _HASHES, hash64, hash64_list
from stream_dedup.core.tokenize import WordTokenizer, _keep_cache


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=4), max_size=300), st.integers(1, 60), st.lists(st.integers(1, 40), min_size=1))
def test_answers_equal_the_function_and_memory_stays_within_two_generations(keys, size, chunks):
    """``get`` and ``get_many`` (in chunks that fit the young generation or overfill it) answer
    what the function does, compute no key twice in a row, and keep both generations bounded."""
    calls: list[str] = []

    def compute(k: str) -> int:
        calls.append(k)
        return len(k) * 7 + 1

    c = GenerationalCache(compute, size)
    half = len(keys) // 2
    assert [c.get(k) for k in keys[:half]] == [len(k) * 7 + 1 for k in keys[:half]]
    assert len(c.young) <= size and len(c.old) <= size
    i = half
    for n in chunks * (len(keys) // max(1, sum(chunks)) + 1):
        part = keys[i:i + n]
        assert c.get_many(part) == [len(k) * 7 + 1 for k in part]
        assert len(c.young) <= size and len(c.old) <= size
        i += n
    assert len(calls) <= len(keys)
    assert c.get_many(keys[-1:]) == [len(k) * 7 + 1 for k in keys[-1:]]
    assert len(calls) <= len(keys)  # the last key was just used: not computed again


def test_a_key_used_within_the_last_generation_is_not_recomputed():
    calls: list[int] = []
    c = GenerationalCache(lambda k: calls.append(k) or k, 3)
    for k in (1, 2, 3):
        c.get(k)
    c.get(4)  # rotates: 1, 2, 3 become the old generation
    c.get(1)  # found in the old one and moved to the young one
    assert calls == [1, 2, 3, 4]
    for k in (5, 6):
        c.get(k)  # rotates again: old 1..3 dropped except 1, which is young
    c.get(1)
    assert calls == [1, 2, 3, 4, 5, 6]
    c.get(2)  # dropped two rotations ago: computed again
    assert calls == [1, 2, 3, 4, 5, 6, 2]
    assert len(c) <= 6


def test_the_feature_hash_cache_is_bounded_and_answers_mmh3():
    words = [f"词{i}" for i in range(3 * _HASHES.size)]
    assert hash64_list(words) == [mmh3.hash64(w, signed=False)[0] for w in words]
    assert len(_HASHES) <= 2 * _HASHES.size
    assert hash64(words[-1]) == mmh3.hash64(words[-1], signed=False)[0]


def test_the_word_filter_cache_is_bounded_and_filters_the_same():
    tok = WordTokenizer()
    keep = _keep_cache(tok.stopwords_path)
    text = "，".join(f"北京{i}号" for i in range(3 * keep.size // 2)) + "。的了"
    words = tok.words(text)
    assert "的" not in words and "，" not in words and "北京" in words
    assert len(keep) <= 2 * keep.size
    assert tok.words(text) == words  # the same answers after generations rotated


def test_token_cache_setting_bounds_the_word_and_hash_memos():
    import json
    from pathlib import Path

    from stream_dedup.config import Settings
    from stream_dedup.core import hashing, tokenize
    from stream_dedup.core.stages import Preparer

    sample = Path(__file__).resolve().parents[2] / "examples" / "sample.jsonl"
    texts = [json.loads(x)["text"] for x in sample.read_text("utf-8").splitlines()]
    s = Settings()
    s.text.token_cache = 64
    s.text.segmenter = "jieba"  # the word memo serves this path; rjieba's filters as it segments, with no memo
    try:
        p = Preparer(s)
        for i, t in enumerate(texts):
            p.prepare({"id": str(i), "text": t, "ts": 1})
        keep = tokenize._keep_cache(p.tokenizer.stopwords_path)
        assert keep.size == hashing._HASHES.size == 64
        distinct = len({w for t in texts for w in p.tokenizer.words(t)})
        assert distinct > 2 * 64  # enough words to overflow both generations
        assert 0 < len(keep) <= 2 * 64 and 0 < len(hashing._HASHES) <= 2 * 64
    finally:
        Preparer(Settings())  # the default size again for the other tests
    assert hashing._HASHES.size == 32_768
