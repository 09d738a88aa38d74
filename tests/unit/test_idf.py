"""IDF tables: the hashed, binary-searched form gives what the word -> value table says."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stream_dedup.core.idf import IdfTable, build_idf, load_idf

WORDS = {"新闻": 3.25, "频道": 5.5, "开播": 7.12, "无锡": 9.0, "综合": 4.01, "x.x": 12.34}


def test_weights_are_the_tables_values_and_the_default_for_unknown_words():
    t = IdfTable.from_words(WORDS, default=8.5)
    words = ["开播", "没见过的词", "新闻", "x.x", "新闻", ""]
    assert t.weights(words).tolist() == [7.12, 8.5, 3.25, 12.34, 3.25, 8.5]
    assert t.get("频道") == 5.5 and t.get("频") == 8.5
    assert len(t) == len(WORDS)


def test_an_empty_table_answers_the_default():
    t = IdfTable.from_words({}, default=2.0)
    assert t.weights(["a", "b"]).tolist() == [2.0, 2.0] and len(t) == 0


def test_save_and_load_round_trip_with_and_without_words(tmp_path):
    t = build_idf([["新闻", "频道"], ["新闻", "开播"], ["新闻"]])
    p = tmp_path / "idf.bin"
    t.save(p)
    fast = IdfTable.load(p)
    assert fast.words is None  # lookups never read the words
    ws = ["新闻", "频道", "开播", "无锡"]
    # the file keeps hundredths, as the text format did (the default: thousandths)
    assert fast.weights(ws).tolist() == [round(x, 2) for x in t.weights(ws[:3]).tolist()] + [round(t.default, 3)]
    assert fast.docs == 3 and fast.source == "corpus" and fast.default == round(t.default, 3)
    full = IdfTable.load(p, words=True)
    assert full.as_dict() == {w: round(v, 2) for w, v in t.as_dict().items()}
    with pytest.raises(ValueError, match="without its words"):
        fast.save(tmp_path / "again.bin")


def test_what_a_lookup_reads_is_stored_uncompressed_and_a_deflated_table_still_loads(tmp_path):
    """Inflating the lookup arrays was most of a table's load, on every start-up (``IdfTable.save``)."""
    import zipfile

    import numpy as np

    from stream_dedup.core.idf import DEFAULT_TABLE

    t = build_idf([["新闻", "频道"], ["新闻", "开播"]])
    p = tmp_path / "idf.bin"
    t.save(p)
    shipped = Path(__file__).resolve().parents[2] / "stream_dedup" / "data" / DEFAULT_TABLE
    for path in (p, shipped):
        methods = {i.filename: i.compress_type for i in zipfile.ZipFile(path).infolist()}
        assert methods == {"header.npy": zipfile.ZIP_DEFLATED, "hashes.npy": zipfile.ZIP_STORED,
                           "centi.npy": zipfile.ZIP_STORED, "words.npy": zipfile.ZIP_DEFLATED}
    old = tmp_path / "old.bin"  # the form of tables saved before: every member deflated
    with zipfile.ZipFile(p) as z:
        members = {n[:-4]: np.lib.format.read_array(z.open(n)) for n in z.namelist()}
    with open(old, "wb") as f:
        np.savez_compressed(f, **members)
    a, b = IdfTable.load(p, words=True), IdfTable.load(old, words=True)
    assert a.as_dict() == b.as_dict() and (a.default, a.docs) == (b.default, b.docs)


def test_version_1_text_tables_still_load(tmp_path):
    p = tmp_path / "v1.bin"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"format": "stream-dedup-idf", "version": 1, "docs": 7, "default": 6.0,
                            "source": "corpus:x"}) + "\n")
        for w in sorted(WORDS):
            f.write(f"{w}\t{WORDS[w]:.2f}\n")
    t = IdfTable.load(p)
    assert t.as_dict() == WORDS and t.docs == 7 and t.default == 6.0
    assert t.weights(list(WORDS) + ["?"]).tolist() == list(WORDS.values()) + [6.0]


@pytest.mark.parametrize("body", [b"not a table at all", b"PK\x03\x04broken zip"])
def test_a_file_that_is_not_a_table_is_a_clear_error(tmp_path, body):
    p = tmp_path / "bad.bin"
    p.write_bytes(body)
    with pytest.raises(ValueError, match="not an IDF table"):
        IdfTable.load(p)


def test_the_shipped_table_ranks_common_words_below_rare_ones():
    t = load_idf()
    assert len(t) > 200_000
    common, rare = t.weights(["的", "新闻"]).tolist(), t.weights(["饕餮"]).tolist()
    assert common[0] < common[1] < rare[0]
    assert bool((t.hashes[1:] > t.hashes[:-1]).all())  # sorted and distinct, exactly: binary search is valid
