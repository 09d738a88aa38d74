"""Exactly-once: table writes of a transaction that never committed are set back (stream/undo.py),
on real RocksDB databases opened as the worker opens them (TTL, shared budget)."""
from __future__ import annotations

import subprocess
import sys


from stream_dedup.stream import undo
from stream_dedup.stream.rocks import BoundedOptions, Budget

MB = 1 << 20


def _open(path, wal=False):
    opts = BoundedOptions(write_buffer_size=4 * MB, max_write_buffer_number=2, ttl=3600, budget=Budget.of(16 * MB), wal=wal)
    return opts.open(path)


def _write(db, journal, items):
    """What ``TableMapping`` does under exactly-once: saved values first, in the write's batch."""
    undo.write(db, items, journal)


def _visible(db):
    return {k: v for k, v in db.items() if not k.startswith(b"__faust")}


def _committed_start(db):
    """A partition whose last commit left a=1, b=2 and changelog offset 10."""
    db[b"a"], db[b"b"] = b"1", b"2"
    db[undo.OFFSET_KEY] = b"10"


def test_writes_of_a_transaction_that_never_committed_are_set_back_and_the_offset_stays(tmp_path):
    db = _open(tmp_path / "t-0.db")
    _committed_start(db)
    j = undo.Journal()
    _write(db, j, [(b"a", b"9"), (b"b", None), (b"c", b"3")])
    _write(db, j, [(b"a", b"10")])  # written again in the same transaction: the committed 1 stays saved
    assert _visible(db) == {b"a": b"10", b"c": b"3"}
    assert undo.saved_keys(db) == {b"a", b"b", b"c"}
    assert undo.restore(db) == 3
    assert _visible(db) == {b"a": b"1", b"b": b"2"}
    assert db[undo.OFFSET_KEY] == b"10" and undo.saved_keys(db) == set()
    assert undo.restore(db) == 0
    db.close()


def test_a_commit_drops_the_saved_values_and_stores_its_changelog_offset(tmp_path):
    db = _open(tmp_path / "t-0.db")
    _committed_start(db)
    j = undo.Journal()
    _write(db, j, [(b"a", b"9"), (b"c", b"3")])  # transaction 1
    j.committed(db, {b"a": b"9", b"c": b"3"}, 12)
    assert undo.saved_keys(db) == set() and db[undo.OFFSET_KEY] == b"12"
    _write(db, j, [(b"b", b"7")])  # transaction 2 never commits
    assert undo.restore(db) == 1
    assert _visible(db) == {b"a": b"9", b"b": b"2", b"c": b"3"}
    db.close()


def test_a_key_written_again_before_its_first_transaction_commits_goes_back_to_the_committed_value(tmp_path):
    """a=9 is sent in transaction 1; a=11 is written before that commits and sent in transaction 2,
    which never commits: a goes back to 9, not to 1 and not to 11."""
    db = _open(tmp_path / "t-0.db")
    _committed_start(db)
    j = undo.Journal()
    _write(db, j, [(b"a", b"9")])
    _write(db, j, [(b"a", b"11")])
    j.committed(db, {b"a": b"9"}, 11)
    assert undo.saved_keys(db) == {b"a"} and db[undo.OFFSET_KEY] == b"11"
    assert undo.restore(db) == 1
    assert _visible(db) == {b"a": b"9", b"b": b"2"}
    db.close()


def test_a_journal_of_keys_already_saved_does_not_save_over_them(tmp_path):
    """A value saved once is the committed one: saved again, an uncommitted value would take its place."""
    db = _open(tmp_path / "t-0.db")
    _committed_start(db)
    _write(db, undo.Journal(), [(b"a", b"9")])
    j = undo.Journal(undo.saved_keys(db))
    assert j.keys == {b"a"}
    _write(db, j, [(b"a", b"13")])
    undo.restore(db)
    assert db[b"a"] == b"1"
    db.close()


CRASH = """
import os, sys
sys.path.insert(0, {root!r})
from tests.unit.test_undo import _open, _write, _committed_start
from stream_dedup.stream import undo
db = _open(sys.argv[1], wal=True)
_committed_start(db)
j = undo.Journal()
for i in range(50):
    _write(db, j, [(b"k%d" % i, b"x"), (b"a", b"%d" % i)])
j.committed(db, {{**{{b"k%d" % i: b"x" for i in range(50)}}, b"a": b"49"}}, 60)
for i in range(50, 80):
    _write(db, j, [(b"k%d" % i, b"y"), (b"a", b"%d" % i), (b"b", None)])
os._exit(0)
"""


def test_after_a_crash_the_database_is_as_its_last_commit_left_it(tmp_path):
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    path = tmp_path / "t-0.db"
    subprocess.run([sys.executable, "-c", CRASH.format(root=root), str(path)], check=True, timeout=120, cwd=root)
    db = _open(path)
    assert undo.restore(db) == 32  # k50..k79, a, b
    want = {b"a": b"49", b"b": b"2", **{b"k%d" % i: b"x" for i in range(50)}}
    assert _visible(db) == want and db[undo.OFFSET_KEY] == b"60"
    db.close()
