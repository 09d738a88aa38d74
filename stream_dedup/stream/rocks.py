"""One memory budget for all of a worker's RocksDB databases (Faust store ``rocksdb-bounded://``).

Faust opens one RocksDB database per table partition (4 tables x partitions, 24 at the default 6),
each with its own block cache and its own memtables. Their memory then grows with the number of
partitions a worker holds and with how long it has run (caches fill, index and filter blocks of every
SST file stay on the heap), which the soak test saw as RSS that kept rising after warm-up. Here every
database of the process shares one LRU block cache; memtables are charged to that same cache through
one write-buffer manager, and index and filter blocks live in it too, so RocksDB's memory is one
number (``worker.rocksdb_memory_mb``) whatever the partition count. This is the layout Kafka Streams
recommends for the same problem (its ``BoundedMemoryRocksDBConfig``).

RocksDB's write-ahead log is off by default (``worker.rocksdb_wal``), as Kafka Streams turns it off
for its state stores: a table's log is its changelog topic. Every write of a WAL-logged database is
also an append to its log file (a ``write`` system call per put or write batch; an SMS makes about
eight), and what that log would restore after a crash is restored anyway: a database without it
comes back as it was at its last memtable flush (the worker flushes every ``worker.state_flush_s``,
and RocksDB on close), a prefix of its writes that includes the changelog offset stored with them,
and Faust replays the changelog from that offset on.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rocksdict
from faust import stores
from faust.stores import rocksdb as faust_rocksdb

from . import undo

log = logging.getLogger("stream_dedup.worker")


@dataclass(frozen=True)
class Budget:
    """The shared objects: created once per worker, handed to every table's options."""

    cache: rocksdict.Cache
    write_buffers: rocksdict.WriteBufferManager

    @classmethod
    def of(cls, memory_bytes: int, write_buffer_share: float = 0.5) -> "Budget":
        cache = rocksdict.Cache(memory_bytes)
        # allow_stall=False: past the limit RocksDB flushes the largest memtable instead of blocking writers
        wbm = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            int(memory_bytes * write_buffer_share), False, cache)
        return cls(cache, wbm)

    def usage(self) -> int:
        return self.cache.get_usage()


ARENA_BLOCK = 64 << 10
INFO_LOG_BYTES = 256 << 10
INFO_LOGS_KEPT = 2


def forget_saved_options(path: Path) -> None:
    """Remove a database's saved OPTIONS files before it is opened with a TTL.

    Why: rocksdict (checked at 0.3.29, ``internals.PRIVATE``) loads the saved options of an existing
    database, TTL compaction filter included, and opening it with a TTL wraps that filter in another.
    The outer filter strips the timestamp and the inner one reads the value's last bytes as one, so
    the next compaction drops entries at random: every reopened table partition (a rebalance, a
    restart) lost a share of its state. RocksDB writes the files again on open."""
    for saved in path.glob("OPTIONS-*"):
        saved.unlink(missing_ok=True)


class BoundedOptions(faust_rocksdb.RocksDBOptions):
    def __init__(self, *args: Any, budget: Budget, wal: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = budget
        self.wal = wal

    def as_options(self) -> rocksdict.Options:
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        # None: Faust found no limit on open files (RLIM_INFINITY); -1 is RocksDB's "no limit"
        opts.set_max_open_files(-1 if self.max_open_files is None else self.max_open_files)
        opts.set_write_buffer_size(self.write_buffer_size)
        opts.set_max_write_buffer_number(self.max_write_buffer_number)
        opts.set_target_file_size_base(self.target_file_size_base)
        opts.set_write_buffer_manager(self.budget.write_buffers)
        # a memtable reserves arena blocks of write_buffer_size / 8 (1 MiB) by default: 18 nearly
        # empty ones would already exceed a small budget's memtable half and flush each other
        # nonstop
        opts.set_arena_block_size(ARENA_BLOCK)
        # RocksDB's own info log: one file per database that grows by every flush and compaction
        # line forever; kept small and rolled, no periodic stats dumps
        opts.set_max_log_file_size(INFO_LOG_BYTES)
        opts.set_keep_log_file_num(INFO_LOGS_KEPT)
        opts.set_stats_dump_period_sec(0)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, True)
        table.set_block_cache(self.budget.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        opts.set_block_based_table_factory(table)
        return opts

    def open(self, path: Path, *, read_only: bool = False) -> rocksdict.Rdict:
        if self.ttl is None:
            access = rocksdict.AccessType.read_write()
        else:
            access = rocksdict.AccessType.with_ttl(self.ttl)
            forget_saved_options(Path(path))

        db = rocksdict.Rdict(str(path), options=self.as_options(), access_type=access)
        db.set_read_options(rocksdict.ReadOptions())
        if not self.wal:
            writes = rocksdict.WriteOptions()
            writes.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub says method
            db.set_write_options(writes)
        return db


class BoundedStore(faust_rocksdb.Store):
    """Faust's RocksDB store, opening its databases with :class:`BoundedOptions`.

    The table's ``options`` must carry ``budget`` (and may carry ``wal``); Faust passes the remaining
    keys through."""

    def __init__(self, *args: Any, options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        options = dict(options or {})
        budget = options.pop("budget")
        wal = bool(options.pop("wal", False))
        super().__init__(*args, options=options, driver="rocksdict", **kwargs)
        self.rocksdb_options = BoundedOptions(**options, budget=budget, wal=wal)
        self.journals: dict[int, undo.Journal] = {}  # partition -> its open database's (exactly-once)

    def _open_for_partition(self, partition: int) -> Any:
        """A partition's database, with the committed values that writes of unfinished transactions
        replaced put back (``undo``): Faust's recovery then reads the changelog on from its offset."""
        db = super()._open_for_partition(partition)
        restored = undo.restore(db)
        if restored:
            log.warning("%s: %d key(s) written by transactions that never committed set back", self.basename, restored)
        self.journals[partition] = undo.Journal()
        return db


SCHEME = "rocksdb-bounded"


def register() -> None:
    """Make ``rocksdb-bounded://`` a Faust store URL (called by ``internals.install``)."""
    stores.STORES.aliases.setdefault(SCHEME, f"{__name__}:BoundedStore")
