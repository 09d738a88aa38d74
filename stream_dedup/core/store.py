"""A bytes -> bytes mapping on RocksDB (rocksdict): the state store of the embedded engine.

The index, the digest store and the decide stage take any ``MutableMapping[bytes, bytes]``; in the
Kafka workers that mapping is a RocksDB-backed Faust table partition (with its changelog), here it
is a local RocksDB folder, so both drivers run the same state code over the same on-disk format.
"""
from __future__ import annotations

import itertools
import shutil
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch, WriteOptions


MEMTABLE_BLOOM_RATIO = 0.1


def filter_memtable_misses(opts: Options) -> Options:
    """A whole-key Bloom filter on the memtable, sized at a tenth of the write buffer.

    Why: most index reads ask for a bucket that does not exist (5c2 keys: nearly every key of a new
    document), and the SST files' Bloom filters answer those cheaply, but a miss still searched the
    memtable's skip list, up to a million keys deep, with a cache miss per level. At 1M indexed
    documents that search was most of a read (``bench/index_scale.py``). Not in the workers'
    bounded stores (``stream/rocks.py``): the filter is
    allocated with each memtable and charged to the write-buffer budget, and 18 small partitions'
    filters would take most of a small budget and flush each other."""
    opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
    opts.set_memtable_whole_key_filtering(True)
    return opts


class KVStore(MutableMapping):
    iterates_a_snapshot = True  # a RocksDB iterator does not see writes made after it was opened
    iterates_in_key_order = True  # bytewise, RocksDB's default comparator

    def __init__(self, path: str | Path, *, cache_mb: int = 64, write_buffer_mb: int | None = None):
        """``cache_mb``: the block cache; ``write_buffer_mb``: a memtable's size (None: RocksDB's 64 MB)."""
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.increase_parallelism(2)
        if write_buffer_mb is not None:
            opts.set_write_buffer_size(write_buffer_mb << 20)
        # most probes ask for a bucket that does not exist (5c2 keys at 1M documents): a Bloom
        # filter answers those without reading a block; a block cache keeps hot buckets in memory
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        table.set_block_cache(Cache(cache_mb << 20))
        opts.set_block_based_table_factory(table)
        filter_memtable_misses(opts)
        # Any: rocksdict's stubs type keys and values as its default mode's union; raw mode is bytes only
        self._db: Any = Rdict(str(self.path), opts)
        # No write-ahead log. Why: it more than doubled a write's cost, and a news article makes
        # about 30 (its band buckets), so the log was about half of `scan`'s judge stage. It
        # buys nothing here: the decide state of an embedded run is the run's own (in memory, or
        # spilled to a folder deleted at close), so a run that dies leaves a state folder that
        # cannot be resumed with or without the log, and a clean ``close`` flushes the memtables
        # (RocksDB does that when the log is off), so a kept ``--state`` folder is complete after
        # a run. The workers' stores keep their log.
        unlogged = WriteOptions()
        unlogged.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub says method
        self._db.set_write_options(unlogged)

    def __getitem__(self, key: bytes) -> bytes:
        v = self._db.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def get(self, key: bytes, default=None):
        v = self._db.get(key)
        return default if v is None else v

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """One RocksDB MultiGet (see ``BucketIndex.read``)."""
        return self._db.get(keys)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        self._db.delete(key)

    def delete_blind(self, key: bytes) -> None:
        """Delete ``key`` if it is there, without a read (``Buffered.delete_blind`` says why)."""
        self._db.delete(key)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._db.keys())

    def items(self):  # type: ignore[override]
        return self._db.items()

    def __len__(self) -> int:
        return sum(1 for _ in self._db.keys())

    def count(self, prefix: bytes = b"") -> int:
        return sum(1 for k in self._db.keys() if k.startswith(prefix))

    def is_empty(self) -> bool:
        return next(iter(self._db.keys()), None) is None

    def write(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Puts (and deletes, where the value is None) in one WriteBatch."""
        batch = WriteBatch(raw_mode=True)
        for k, v in items:
            if v is None:
                batch.delete(k)
            else:
                batch.put(k, v)
        self._db.write(batch)

    def approximate_size(self) -> int:
        try:
            return int(self._db.property_int_value("rocksdb.estimate-live-data-size") or 0)
        except Exception:  # noqa: BLE001 - property not available on every build
            return 0

    def flush(self, wait: bool = True) -> None:
        """Write the memtables to files (and free them): a folder that takes no more writes.
        ``wait=False``: RocksDB's background threads do it."""
        self._db.flush(wait)

    def close(self) -> None:
        self._db.close()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


_MISSING = object()


class Buffered(MutableMapping):
    """A ``KVStore`` behind a dict of the latest writes, written to it in one batch when the dict
    holds ``max_entries`` keys or ``max_bytes`` of keys and values, and by ``flush``.

    Why (``scan``, the embedded engine): each RocksDB call through Python costs far more than a
    dict's, and an SMS makes about six writes (its n-gram buckets, its digest) and a read per
    detector: a good part of judging an SMS (``bench/stages.py``). The batch
    bounds the memory; a run whose folder is kept is written out by ``flush`` on close, and a
    temporary one is deleted unwritten. Reads of keys the dict does not hold go to RocksDB, unless
    nothing was ever written there (``on_disk``): a fresh run reads only the dict until its first
    batch.
    """

    iterates_a_snapshot = True  # ``items`` writes the buffer out, then walks the store's iterator
    iterates_in_key_order = True

    def __init__(self, store: KVStore, *, max_entries: int = 1 << 18, max_bytes: int = 32 << 20):
        self.store = store
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.buf: dict[bytes, bytes | None] = {}  # None: deleted
        # bytes of the keys and values ``buf`` holds. Why not every byte written since the last
        # batch, as at first (rewrites counted again): a spam campaign rewrites the same few
        # hundred buckets on every copy, so the buffer went out to RocksDB every ~350 writes, and
        # RocksDB's writes and the reads after them dominated ``scan`` on ``bench/campaign.py``
        self.size = 0
        self.on_disk = not store.is_empty()

    def get(self, key: bytes, default=None):
        v = self.buf.get(key, _MISSING)
        if v is _MISSING:
            return self.store.get(key, default) if self.on_disk else default
        return default if v is None else v

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        buf = self.buf
        if not self.on_disk:
            return [buf.get(k) for k in keys]
        got: list[Any] = [buf.get(k, _MISSING) for k in keys]
        miss = [k for k, v in zip(keys, got) if v is _MISSING]
        if not miss:
            return got
        read = iter(self.store.get_many(miss))
        return [next(read) if v is _MISSING else v for v in got]

    def __getitem__(self, key: bytes) -> bytes:
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self._put(key, value)

    def _put(self, key: bytes, value: bytes | None) -> None:
        """Buffer a write (None: a tombstone) and write the buffer out once it is over its limits.
        ``size`` counts each buffered key once and its value's bytes (0 for a tombstone)."""
        buf = self.buf
        old: Any = buf.get(key, _MISSING)
        held = -len(key) if old is _MISSING else len(old) if old is not None else 0
        self.size += (len(value) if value is not None else 0) - held
        buf[key] = value
        if self.size > self.max_bytes or len(buf) > self.max_entries:
            self.flush()

    def __delitem__(self, key: bytes) -> None:
        if self.get(key) is None:
            raise KeyError(key)
        self.delete_blind(key)

    def delete_blind(self, key: bytes) -> None:
        """Delete ``key`` if it is there, without the read that ``del`` and ``pop`` need to raise
        KeyError: a tombstone in the buffer, counted against its limits like a write.

        Why: a sweep deletes keys it has just walked, millions in a large store. ``pop(key, None)``
        read each one twice (``MutableMapping.pop``, then ``del``), and a delete never wrote the
        buffer out, so a sweep of the news index held every deleted key in it to the end."""
        self._put(key, None)

    def flush(self) -> None:
        if self.buf:
            self.store.write(self.buf.items())
            self.on_disk = True
            self.buf.clear()
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        self.flush()
        return iter(self.store)

    def items(self):  # type: ignore[override]
        self.flush()
        return self.store.items()

    def __len__(self) -> int:
        self.flush()
        return len(self.store)


_DELETED = object()


class Keyed(MutableMapping):
    """A str-keyed view of a bytes mapping: keys under ``prefix``, values through ``encode`` and
    ``decode``. Why: several kinds of per-document record share one RocksDB folder (``Engine``)."""

    def __init__(self, data: MutableMapping, prefix: bytes, encode: Callable[[Any], bytes] = bytes,
                 decode: Callable[[bytes], Any] = bytes):
        self.data = data
        self.prefix = prefix
        self.encode = encode
        self.decode = decode

    def _key(self, key: str) -> bytes:
        return self.prefix + key.encode("utf-8", "surrogatepass")

    def get(self, key: str, default=None):
        raw = self.data.get(self._key(key))
        return default if raw is None else self.decode(raw)

    def __getitem__(self, key: str):
        raw = self.data.get(self._key(key))
        if raw is None:
            raise KeyError(key)
        return self.decode(raw)

    def __setitem__(self, key: str, value) -> None:
        self.data[self._key(key)] = self.encode(value)

    def __delitem__(self, key: str) -> None:
        del self.data[self._key(key)]

    def __iter__(self) -> Iterator[str]:
        n = len(self.prefix)
        return (k[n:].decode("utf-8", "surrogatepass") for k in self.data if k.startswith(self.prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Tiered(MutableMapping):
    """The ``hot_max`` most recently written values as objects in a dict; older ones in ``cold``, a
    mapping that encodes them (a ``Keyed`` view of a ``Buffered`` RocksDB folder), made by
    ``open_cold()`` at the first spill.

    Why (the embedded engine's per-document records): ``scan`` and the ``Deduper`` keep a state per
    document, for its final verdict, its revisions and its cluster, and its first content's digest
    for the id check: with ``scan``'s list of ids, about 1 KB a document as Python objects. All in
    dicts, the memory grew with the input without end. The workers keep theirs in Faust tables, on disk.

    A write goes to the dict, at its newest end. When the dict holds more than ``hot_max``, its
    oldest quarter goes to ``cold`` at once. A read that misses the dict decodes from ``cold`` and
    leaves the value there: a value comes back into the dict when it is written, and callers write
    what they change (the decide stage does, as the workers' tables decode on every read too).
    Until the first spill the dict is all there is, so a run of fewer than ``hot_max`` documents
    opens no store (a RocksDB open, and its memory, in every short ``scan``)."""

    def __init__(self, open_cold: Callable[[], MutableMapping], hot_max: int):
        if hot_max < 1:
            raise ValueError("hot_max must be >= 1")
        self.open_cold = open_cold
        self.cold: MutableMapping | None = None
        self.hot_max = hot_max
        self.hot: dict = {}

    @property
    def spilled(self) -> bool:
        return self.cold is not None

    def get(self, key, default=None):
        v = self.hot.get(key, _MISSING)
        if v is not _MISSING:
            return v
        return self.cold.get(key, default) if self.cold is not None else default

    def __getitem__(self, key):
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def __setitem__(self, key, value) -> None:
        hot = self.hot
        if key in hot:
            del hot[key]  # to the newest end: a campaign's original, rewritten by every copy, stays hot
        hot[key] = value
        if len(hot) > self.hot_max:
            self._spill(max(1, self.hot_max // 4))

    def _spill(self, n: int) -> None:
        if self.cold is None:
            self.cold = self.open_cold()
        cold, hot = self.cold, self.hot
        for key in list(itertools.islice(hot, n)):
            cold[key] = hot.pop(key)

    def __delitem__(self, key) -> None:
        found = self.hot.pop(key, _MISSING) is not _MISSING
        if self.cold is not None and self.cold.get(key) is not None:
            del self.cold[key]
            found = True
        if not found:
            raise KeyError(key)

    def __iter__(self) -> Iterator:
        yield from self.hot
        if self.cold is not None:
            yield from (k for k in self.cold if k not in self.hot)

    def __len__(self) -> int:
        return len(self.hot) if self.cold is None else sum(1 for _ in self)


class Generations(MutableMapping):
    """A bytes mapping over ``keep`` RocksDB folders (generations) of ``span`` each, on a clock the
    caller moves with ``advance(now)``: writes go to the newest, reads look newest first, and when
    the clock passes a span the oldest folder is deleted whole and a new one opened.

    Why (a long-lived ``Deduper``): its per-document records that left memory went to one folder that
    grew with every document checked until ``close``, without bound. The workers' tables forget a
    record two windows after its last write (RocksDB TTL). Here a record last written at ``t`` is
    gone by ``t + keep * span`` and kept at least until ``t + (keep - 1) * span``, and forgetting
    costs a folder deletion: no walk over the records, no per-record timestamps, no compaction to
    wait for. A record rewritten (a cluster's original, with every copy that joins) moves to the
    newest folder and stays while it is."""

    def __init__(self, open_gen: Callable[[int], "Buffered"], span: int, keep: int = 3, now: int = 0):
        if keep < 2 or span < 1:
            raise ValueError("Generations needs keep >= 2 and span >= 1")
        self.open_gen = open_gen
        self.span = span
        self.keep = keep
        self.start = now  # the clock value at which the newest generation began
        self.serial = 0
        self.gens: list[Buffered] = [open_gen(0)]  # newest first
        self.dropped = 0  # generations deleted so far

    def advance(self, now: int) -> int:
        """Move the clock to ``now`` (a smaller value is ignored); returns the generations deleted."""
        passed = (now - self.start) // self.span
        if passed <= 0:
            return 0
        self.start += passed * self.span
        dropped = 0
        for _ in range(min(passed, self.keep)):  # a jump of many spans leaves only a fresh folder
            done = self.gens[0]
            done.flush()  # read-only from now on: its buffer and memtable to files
            done.store.flush(wait=False)
            self.serial += 1
            self.gens.insert(0, self.open_gen(self.serial))
            if len(self.gens) > self.keep:
                self.gens.pop().store.destroy()
                dropped += 1
        self.dropped += dropped
        return dropped

    def get(self, key: bytes, default=None):
        for g in self.gens:
            v = g.get(key)
            if v is not None:
                return v
        return default

    def __getitem__(self, key: bytes) -> bytes:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.gens[0][key] = value

    def __delitem__(self, key: bytes) -> None:
        found = False
        for g in self.gens:
            if g.get(key) is not None:
                del g[key]
                found = True
        if not found:
            raise KeyError(key)

    def __iter__(self) -> Iterator[bytes]:
        for i, g in enumerate(self.gens):
            newer = self.gens[:i]
            yield from (k for k in g if all(n.get(k) is None for n in newer))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def destroy(self) -> None:
        for g in self.gens:
            g.store.destroy()
        self.gens = []


class WriteBack(MutableMapping):
    """A write-back layer over a mapping: writes wait in memory until ``flush``.

    Why (Kafka workers): every write to a Faust table is a changelog message. An agent that takes
    a batch of messages writes each touched key once per batch instead of once per message (a spam
    campaign rewrites the same buckets many times), and it writes the decide stage's state only
    after the batch's verdicts are delivered (see ``DecideStage``).

    ``tag()`` is taken at each write and handed back to ``flush``'s ``around``: the workers tag a
    write with the Faust event it was made under, because a table partition is chosen by the
    current event. ``scope(tag)`` keeps writes of different partitions apart: the index stores a
    document's payload under the same key in every partition its keys fall in.
    """

    def __init__(self, data: MutableMapping, tag: Callable[[], Any] = lambda: None,
                 scope: Callable[[Any], Any] = lambda tag: None):
        self.data = data
        self.tag = tag
        self.scope = scope
        self.pending: dict[tuple[Any, Any], tuple[Any, Any]] = {}  # (scope, key) -> (value or _DELETED, tag)

    def _hit(self, key):
        return self.pending.get((self.scope(self.tag()), key))

    def __getitem__(self, key):
        hit = self._hit(key)
        if hit is None:
            return self.data[key]
        if hit[0] is _DELETED:
            raise KeyError(key)
        return hit[0]

    def get(self, key, default=None):
        hit = self._hit(key)
        if hit is None:
            return self.data.get(key, default)
        return default if hit[0] is _DELETED else hit[0]

    def __setitem__(self, key, value) -> None:
        tag = self.tag()
        self.pending[(self.scope(tag), key)] = (value, tag)

    def __delitem__(self, key) -> None:
        if key not in self:
            raise KeyError(key)
        tag = self.tag()
        self.pending[(self.scope(tag), key)] = (_DELETED, tag)

    def __contains__(self, key) -> bool:
        hit = self._hit(key)
        return key in self.data if hit is None else hit[0] is not _DELETED

    def __iter__(self):
        here = self.scope(self.tag())
        mine = {k: v for (sc, k), (v, _) in self.pending.items() if sc == here}
        for k in self.data:
            if k not in mine:
                yield k
        yield from (k for k, v in mine.items() if v is not _DELETED)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def flush(self, around: Callable[[Any], Any] | None = None) -> int:
        """Write the pending writes in order; ``around(tag)`` (if given) is entered around each one.

        A mapping with a ``write_many(scope, items)`` (not None) gets each scope's writes at once
        instead, ``items`` (key, value) in order with None for a delete: the workers' tables write a
        partition's keys in one RocksDB batch, and no event context is entered per key."""
        n = len(self.pending)
        write_many = getattr(self.data, "write_many", None)
        if write_many is not None:
            by_scope: dict[Any, list] = {}
            for (scope, key), (value, _) in self.pending.items():
                by_scope.setdefault(scope, []).append((key, None if value is _DELETED else value))
            for scope, items in by_scope.items():
                write_many(scope, items)
            self.pending.clear()
            return n
        for (_, key), (value, tag) in self.pending.items():
            if around is not None:
                with around(tag):
                    self._write(key, value)
            else:
                self._write(key, value)
        self.pending.clear()
        return n

    def discard(self) -> None:
        """Drop the pending writes (the workers' batch that is not done: it is replayed)."""
        self.pending.clear()

    def _write(self, key, value) -> None:
        if value is _DELETED:
            self.data.pop(key, None)
        else:
            self.data[key] = value
