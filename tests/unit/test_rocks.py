"""The worker's RocksDB databases share one memory budget (stream/rocks.py), on real RocksDB files."""
from __future__ import annotations

import os
import subprocess
import sys

import rocksdict
from faust import stores

from stream_dedup.stream import rocks
from stream_dedup.stream.rocks import SCHEME, BoundedOptions, BoundedStore, Budget

MB = 1 << 20


def test_memtables_are_charged_to_the_shared_cache_and_flushed_at_the_budget(tmp_path):
    budget = Budget.of(8 * MB)  # half of it, 4 MiB, for the memtables of all databases together
    opts = BoundedOptions(write_buffer_size=16 * MB, max_write_buffer_number=2, ttl=3600, budget=budget)
    dbs = [opts.open(tmp_path / f"t-{i}.db") for i in range(12)]
    written = {}
    for round_ in range(64):  # 1 MiB per database: none of them fills its own 16 MiB memtable
        for i, db in enumerate(dbs):
            key, value = f"{round_}".encode(), os.urandom(16 << 10)
            db[key] = value
            written[(i, key)] = value
    # the write buffers count against the block cache (no reads happened, so that is all it holds) ...
    assert budget.usage() >= budget.write_buffers.get_usage() > MB
    # ... and the 12 MiB written together passed the 4 MiB budget, so RocksDB flushed memtables early
    assert list(tmp_path.rglob("*.sst")), "no memtable was flushed: the write-buffer manager is not shared"
    for (i, key), value in list(written.items())[::37]:
        assert dbs[i][key] == value
    for db in dbs:
        db.close()


def test_reads_fill_the_shared_cache_only_up_to_its_capacity(tmp_path):
    budget = Budget.of(8 * MB)
    opts = BoundedOptions(write_buffer_size=4 * MB, max_write_buffer_number=2, budget=budget)
    dbs = [opts.open(tmp_path / f"t-{i}.db") for i in range(6)]
    for i, db in enumerate(dbs):
        for k in range(400):
            db[k.to_bytes(4, "big")] = bytes([i]) * (8 << 10)
        db.flush()
    for _ in range(2):
        for i, db in enumerate(dbs):
            for k in range(400):
                assert db[k.to_bytes(4, "big")][:1] == bytes([i])
    # 6 x 400 x 8 KiB = 19 MiB read through one 8 MiB cache (six caches of their own would hold all of it)
    assert MB < budget.usage() <= 9 * MB
    for db in dbs:
        db.close()


def test_the_store_scheme_names_the_bounded_store():
    rocks.register()
    assert stores.by_url(f"{SCHEME}://") is BoundedStore


def info_log_bytes(db_dir) -> int:
    return sum(f.stat().st_size for f in db_dir.iterdir() if f.name.startswith("LOG"))


def test_rocksdbs_info_log_stays_small_however_often_memtables_are_flushed(tmp_path):
    """The worker flushes every database every minute; RocksDB logs each flush to its info LOG,
    which, left alone, grows for ever (10 MB in a 10-minute soak). Rolled at 256 KiB, two kept."""
    from stream_dedup.stream.rocks import INFO_LOG_BYTES, INFO_LOGS_KEPT

    opts = BoundedOptions(write_buffer_size=4 * MB, max_write_buffer_number=2, ttl=3600, budget=Budget.of(16 * MB))
    db = opts.open(tmp_path / "t.db")
    for i in range(600):
        db[i.to_bytes(4, "big")] = b"v" * 100
        db.flush()
    grown = info_log_bytes(tmp_path / "t.db")
    db.close()
    assert grown <= (INFO_LOGS_KEPT + 1) * INFO_LOG_BYTES + (64 << 10), grown
    # the same flushes with RocksDB's default log settings: the bound above is what keeps it small
    plain = rocksdict.Rdict(str(tmp_path / "plain.db"))
    for i in range(600):
        plain[i.to_bytes(4, "big")] = b"v" * 100
        plain.flush()
    plain.close()
    assert info_log_bytes(tmp_path / "plain.db") > grown


def test_a_small_budget_does_not_make_many_near_empty_memtables_flush_each_other(tmp_path):
    """18 databases (3 tables x 6 partitions), a few KB each in their memtables, under a 16 MiB
    budget (8 MiB for memtables): with RocksDB's default 1 MiB arena blocks each memtable reserved
    more than its share and the write-buffer manager flushed them nonstop."""
    budget = Budget.of(16 * MB)
    opts = BoundedOptions(write_buffer_size=8 * MB, max_write_buffer_number=2, ttl=3600, budget=budget)
    dbs = [opts.open(tmp_path / f"t-{i}.db") for i in range(18)]
    for round_ in range(50):
        for db in dbs:
            db[round_.to_bytes(4, "big")] = os.urandom(200)
    ssts = list(tmp_path.rglob("*.sst"))
    for db in dbs:
        db.close()
    assert ssts == [], f"{len(ssts)} flushes of 180 KB written in all"


CRASH = """
import os, sys
import rocksdict
from stream_dedup.stream.rocks import BoundedOptions, Budget
MB = 1 << 20
opts = BoundedOptions(write_buffer_size=4 * MB, max_write_buffer_number=2, ttl=3600, budget=Budget.of(16 * MB),
                      wal=sys.argv[2] == "1")
db = opts.open(sys.argv[1])
for i in range(200):
    db[b"a%d" % i] = b"v" * 50
db.flush()
batch = rocksdict.WriteBatch(raw_mode=True)
for i in range(300):
    batch.put(b"b%d" % i, b"w" * 50)
db.write(batch)
db[b"last"] = b"x"
os._exit(0)  # closes nothing, as a killed worker
"""


def crash_after_writes(path, wal: bool) -> None:
    """In a child process: 200 writes, a memtable flush, 301 more writes, then an exit that closes
    nothing."""
    subprocess.run([sys.executable, "-c", CRASH, str(path), "1" if wal else "0"], check=True, timeout=120)


def test_without_the_wal_a_crashed_database_comes_back_as_it_was_at_its_last_flush(tmp_path):
    """The worker's default (``worker.rocksdb_wal`` off): what follows the last flush is gone after
    a crash, everything before it is there (Faust then replays the changelog from the offset stored
    in that flushed state). With the WAL, the writes after the flush survive too."""
    for wal in (False, True):
        opts = BoundedOptions(write_buffer_size=4 * MB, max_write_buffer_number=2, ttl=3600,
                              budget=Budget.of(16 * MB), wal=wal)
        path = tmp_path / f"wal-{wal}.db"
        crash_after_writes(path, wal)
        db = opts.open(path)
        before = [db.get(b"a%d" % i) for i in range(200)]
        after = [db.get(b"b%d" % i) for i in range(300)] + [db.get(b"last")]
        db.close()
        assert before == [b"v" * 50] * 200, wal
        if wal:
            assert after == [b"w" * 50] * 300 + [b"x"]
        else:
            assert after == [None] * 301


def test_without_the_wal_writes_append_nothing_to_a_log_file_and_a_clean_close_keeps_them(tmp_path):
    for wal in (False, True):
        opts = BoundedOptions(write_buffer_size=4 * MB, max_write_buffer_number=2, budget=Budget.of(16 * MB), wal=wal)
        path = tmp_path / f"wal-{wal}.db"
        db = opts.open(path)
        for i in range(500):
            db[b"k%d" % i] = os.urandom(100)
        logged = sum(f.stat().st_size for f in path.iterdir() if f.suffix == ".log")
        db.close()
        assert (logged > 500 * 100) if wal else logged == 0, (wal, logged)
        db = opts.open(path)
        assert sum(db.get(b"k%d" % i) is not None for i in range(500)) == 500
        db.close()


def test_a_machine_with_no_open_files_limit_still_opens_the_databases(tmp_path):
    # Faust sets max_open_files to None where the platform reports no limit (RLIM_INFINITY), and
    # rocksdict refuses None: the store would not open at all there
    opts = BoundedOptions(write_buffer_size=4 * MB, budget=Budget.of(16 * MB))
    opts.max_open_files = None  # what the class default is on such a machine (a None argument keeps the default)
    db = opts.open(tmp_path / "t.db")
    db[b"k"] = b"v"
    assert db[b"k"] == b"v"
    db.close()


def test_a_reopened_ttl_database_keeps_every_entry_through_compaction(tmp_path):
    """A table partition is reopened at every rebalance and restart. rocksdict reloads a database's
    saved options, whose TTL filter a reopen with a TTL wrapped again: the next compaction then
    dropped entries at random (most of them here, without ``forget_saved_options``)."""
    opts = BoundedOptions(write_buffer_size=MB, max_write_buffer_number=2, ttl=14 * 86400, budget=Budget.of(8 * MB))
    path = tmp_path / "index-1.db"
    db = opts.open(path)
    written = {f"k{i}".encode(): os.urandom(30) for i in range(1000)}
    for k, v in written.items():
        db[k] = v
    db.close()
    for _ in range(2):  # the partition comes back twice
        db = opts.open(path)
        db.close()
    db = opts.open(path)
    try:
        db.flush()
        db.compact_range(None, None)
        assert {k: db[k] for k in db.keys()} == written
    finally:
        db.close()
