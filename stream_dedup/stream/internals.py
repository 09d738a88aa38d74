"""Every private part of Faust, aiokafka and rocksdict that the worker touches, in one place.

The worker relies on internals where the libraries offer no public way: the consumer's offsets for
gap filling, commits and the stall watch; aiokafka's producer batches for bulk sends; Faust's
per-partition RocksDB handles. ``PRIVATE`` lists each name with the module that uses it, and
``CHECKED`` the exact versions the list was checked against (pyproject.toml pins them);
``tests/unit/test_internals.py`` fails when an installed version lacks one of them.

Patches are installed by ``install()``, which ``Worker`` calls when it starts: importing the package
changes nothing in those libraries.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import weakref
from importlib import metadata
from typing import Any, MutableMapping, Protocol, cast

from faust.streams import _current_event as current_event_var  # noqa: F401 - the agents' current event
from faust.types import TP

log = logging.getLogger("stream_dedup.worker")

CHECKED = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0", "rocksdict": "0.3.29"}

# (object, private attribute, where this project uses it)
PRIVATE: list[tuple[str, str, str]] = [
    ("faust.streams", "_current_event", "context.Under: the event a table write belongs to"),
    ("faust.transport.consumer.Consumer", "_read_offset", "stall watch, gap tails"),
    ("faust.transport.consumer.Consumer", "_committed_offset", "gap filling, commits, stall watch"),
    ("faust.transport.consumer.Consumer", "_acked", "commits.strict_new_offset, commit holes"),
    ("faust.transport.consumer.Consumer", "_acked_index", "commits.strict_new_offset, batch_source.unprocessed"),
    ("faust.transport.consumer.Consumer", "_gap", "commits.mark_processed, commit holes"),
    ("faust.transport.consumer.Consumer", "_paused_partitions", "stall watch nudge (logged)"),
    ("faust.transport.consumer.Consumer", "_buffered_partitions", "stall watch nudge (logged)"),
    ("faust.transport.consumer.Consumer", "_get_active_partitions", "stall watch nudge (logged)"),
    ("faust.transport.consumer.Consumer", "_new_offset", "patched: commits.strict_new_offset"),
    ("faust.transport.consumer.Consumer", "_add_gap", "patched: commits.held_add_gap"),
    ("faust.transport.consumer.Consumer", "_commit_offsets", "commits.in_flight (read)"),
    ("faust.transport.consumer.Consumer", "wait_first", "patched: drain.fast_wait_first"),
    ("faust.transport.drivers.aiokafka.Consumer", "_commit", "patched: delivery guard before a commit"),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "_create_worker_consumer",
     "patched: fetch_max_wait_ms / fetch_min_bytes from the settings"),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "_highwaters",
     "patched: committed_highwaters (exactly-once recovery)"),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "_ensure_consumer", "committed_highwaters"),
    ("aiokafka.AIOKafkaConsumer", "_fetch_max_wait_ms", "set by the fetch patch"),
    ("aiokafka.AIOKafkaConsumer", "_fetch_min_bytes", "set by the fetch patch"),
    ("faust.transport.drivers.aiokafka.Producer", "_ensure_producer", "output: aiokafka's producer"),
    ("aiokafka.AIOKafkaProducer", "_message_accumulator", "changelog.BulkSender"),
    ("aiokafka.AIOKafkaProducer", "_partitioner", "changelog.BulkSender"),
    ("aiokafka.AIOKafkaProducer", "_request_timeout_ms", "changelog.BulkSender"),
    ("aiokafka.client.AIOKafkaClient", "_wait_on_metadata", "changelog.BulkSender"),
    ("aiokafka.producer.message_accumulator.MessageAccumulator", "_batches", "changelog.BulkSender"),
    ("aiokafka.producer.message_accumulator.MessageAccumulator", "_append_batch", "changelog.BulkSender"),
    ("aiokafka.producer.message_accumulator.MessageAccumulator", "_closed", "changelog.BulkSender"),
    ("aiokafka.producer.message_accumulator.MessageAccumulator", "_exception", "changelog.BulkSender"),
    ("aiokafka.producer.message_accumulator.MessageBatch", "_builder", "changelog.BulkSender"),
    ("faust.transport.consumer.TransactionManager", "commit",
     "transactional_id: the transaction id format it commits a partition's offsets in; patched: delivery"),
    ("faust.transport.drivers.aiokafka.Producer", "stop_transaction", "patched: delivery.locked_stop"),
    ("faust.transport.drivers.aiokafka.Producer", "_trn_locks", "delivery.locked_stop: the lock its commits hold"),
    ("faust.stores.rocksdb.Store", "_db_for_partition", "changelog.TableMapping, restore.BulkRestore"),
    ("faust.stores.rocksdb.Store", "_dbs", "worker: flush of every table database; changelog.TableMapping"),
    ("faust.stores.rocksdb.Store", "_open_for_partition", "rocks.BoundedStore: saved values back (undo)"),
    ("faust.stores.rocksdb.Store", "offset_key", "undo.OFFSET_KEY: stored with the saved values' removal"),
    ("faust._cython.streams", "sleep", "patched: drain.RareSleep"),
    ("faust.tables.recovery", "asyncio", "patched: recovery's wait for a changelog record (RECOVERY_QUIET_S)"),
    ("faust.tables.recovery.Recovery", "_build_highwaters", "patched: markers_landed (exactly-once recovery)"),
    ("faust.tables.recovery.Recovery", "active_offsets", "markers_landed: the persisted offsets"),
    ("faust.tables.recovery.Recovery", "_build_offsets", "patched: restore.BulkRestore before the record-by-record read"),
    ("faust.tables.recovery.Recovery", "tp_to_table", "restore.BulkRestore: the table of a changelog partition"),
    ("faust.tables.recovery.Recovery", "signal_recovery_start", "restore.overtaken: a new rebalance"),
    ("aiokafka.consumer.fetcher.Fetcher", "__init__", "patched: its fetched records kept in SeekSafeRecords"),
    ("aiokafka.consumer.fetcher.Fetcher", "_records", "SeekSafeRecords: replaced"),
]
# Behaviours relied on or worked around, checked at the versions of ``CHECKED``:
# - rocksdict reopens a database with its saved OPTIONS, so a TTL database's compaction filter is
#   wrapped again at every reopen: ``rocks.forget_saved_options`` removes them first
#   (tests/unit/test_rocks.py::test_a_reopened_ttl_database_keeps_every_entry_through_compaction).


class ConsumerInternals(Protocol):
    """What the worker reads of Faust's consumer beyond its declared type."""

    _read_offset: MutableMapping[TP, int | None]
    _committed_offset: MutableMapping[TP, int | None]
    _acked: MutableMapping[TP, list[int]]
    _acked_index: MutableMapping[TP, set[int]]
    _gap: MutableMapping[TP, Any]  # intervaltree.IntervalTree
    _paused_partitions: set[TP]
    _buffered_partitions: set[TP]
    flow_active: bool

    def _get_active_partitions(self) -> set[TP]: ...
    def assignment(self) -> set[TP]: ...
    async def highwaters(self, *partitions: TP) -> MutableMapping[TP, int]: ...
    def highwater(self, tp: TP) -> int: ...
    async def seek(self, partition: TP, offset: int) -> None: ...
    def on_buffer_drop(self, tp: TP) -> None: ...
    def resume_partitions(self, partitions: set[TP]) -> None: ...
    def pause_partitions(self, partitions: set[TP]) -> None: ...


def consumer(app: Any) -> ConsumerInternals:
    """The app's consumer, typed with the private parts the worker reads."""
    return cast(ConsumerInternals, app.consumer)


def highwater(c: ConsumerInternals, tp: TP) -> int | None:
    """The partition's end offset as of the consumer's last fetch (no request), None if unknown."""
    try:
        return c.highwater(tp)
    except Exception:  # noqa: BLE001 - aiokafka asserts the partition is assigned; a rebalance may race
        return None


def committed_offset(app: Any, tp: TP) -> int | None:
    """Where the consumer began the partition (its committed offset at assignment; Faust stores a
    committed 0 as None), None while unknown."""
    return getattr(app.consumer, "_committed_offset", {}).get(tp)


def aiokafka_producer(app: Any) -> Any:
    """aiokafka's running producer under Faust's (started if it is not yet)."""
    return app.producer._ensure_producer()


def transactional_id(app: Any, topic: str, partition: int) -> str:
    """The transaction in which Faust commits the offsets of ``topic[partition]`` under exactly-once
    (``TransactionManager.commit``); its producer exists while this worker holds that partition."""
    return f"{app.conf.id}-{app.assignor.group_for_topic(topic)}-{partition}"


async def send_in(app: Any, tid: str | None, topic: str, key: bytes | None, value: bytes | None,
                  partition: int | None) -> Any:
    """Send one record within transaction ``tid`` (None: with the plain producer, outside every
    transaction); returns its delivery future. Faust's ``Topic.send`` would pick the transaction
    of the record's destination partition, which only that partition's owner holds."""
    return await app.producer.send(topic, key, value, partition, None, None, transactional_id=tid)


def table_databases(table: Any) -> list[Any]:
    """The open RocksDB databases (one per partition) of a Faust table on the rocksdict store."""
    return list(getattr(table.data, "_dbs", {}).values())


# the settings the fetch patch reads, per app (weak: a test may build many apps)
_fetch_settings: "weakref.WeakKeyDictionary[Any, tuple[int, int]]" = weakref.WeakKeyDictionary()
_delivery_guards: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_transaction_senders: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_restores: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def attach(app: Any, *, fetch_max_wait_ms: int, fetch_min_bytes: int, delivery_guard: Any,
           transaction_sender: Any = None, restore: Any = None) -> None:
    """Tell the patches what this app wants: its fetch settings, its delivery guard (or None),
    under exactly-once the sender told of each transaction commit, and its bulk restore (or None)."""
    _fetch_settings[app] = (fetch_max_wait_ms, fetch_min_bytes)
    if delivery_guard is not None:
        _delivery_guards[app] = delivery_guard
    if transaction_sender is not None:
        _transaction_senders[app] = transaction_sender
    if restore is not None:
        _restores[app] = restore


def transaction_sender(app: Any) -> Any:
    """The app's ``changelog.TransactionSender``, None when it has none (at-least-once)."""
    return _transaction_senders.get(app)


def delivery_guard(app: Any) -> Any:
    """The app's delivery guard, None when it has none (exactly-once)."""
    return _delivery_guards.get(app)


def _install_fetch_settings() -> None:
    """Let the worker choose aiokafka's ``fetch_max_wait_ms`` and ``fetch_min_bytes``, which Faust
    fixes: a long poll on idle partitions delays a partition just written to by up to 1.5 s a hop."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    create = AIOKafkaConsumerThread._create_worker_consumer
    if getattr(create, "stream_dedup", False):
        return

    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = create(self, transport)
        wanted = _fetch_settings.get(self.app)
        if wanted is not None:
            consumer._fetch_max_wait_ms, consumer._fetch_min_bytes = int(wanted[0]), int(wanted[1])
        return consumer

    create_worker_consumer.stream_dedup = True  # type: ignore[attr-defined]
    AIOKafkaConsumerThread._create_worker_consumer = create_worker_consumer  # type: ignore[method-assign]


def _install_committed_highwaters() -> None:
    """Changelog highwaters from a ListOffsets request. Under exactly-once Faust asks aiokafka for
    each partition's last stable offset, which aiokafka knows only once it has fetched from the
    partition: for a partition just assigned it is None, taken as -1, and recovery then found every
    persisted offset "higher than the highwater" (ConsistencyError) and the worker crash-looped
    after any restart. The request answers at the consumer's isolation level: read_committed, the
    last stable offset, without a fetch (what Faust does without transactions)."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if getattr(AIOKafkaConsumerThread._highwaters, "stream_dedup", False):
        return

    async def _highwaters(self: Any, partitions: Any) -> Any:
        return await self._ensure_consumer().end_offsets(partitions)

    _highwaters.stream_dedup = True  # type: ignore[attr-defined]
    AIOKafkaConsumerThread._highwaters = _highwaters  # type: ignore[method-assign]


#: how long recovery waits for the changelogs' highwaters to reach the offsets persisted with a commit
MARKERS_WAIT_S = 20.0
MARKERS_POLL_S = 0.5


def ahead_of_highwater(persisted: MutableMapping[TP, int | None], highwaters: MutableMapping[TP, int]) -> list[TP]:
    """The partitions whose persisted changelog offset is past their highwater (Faust's recovery
    stops on them with a ConsistencyError)."""
    return sorted(tp for tp, offset in persisted.items()
                  if offset is not None and tp in highwaters and offset > highwaters[tp])


def _install_markers_landed() -> None:
    """Under exactly-once a partition's persisted changelog offset is stored once its transaction
    has committed, but the broker writes the commit markers that move the last stable offset (the
    highwater a read_committed restore sees) after it has answered the commit. A rebalance right
    after a commit then found a persisted offset past the highwater, Faust's recovery crashed with
    a ConsistencyError, and the restarted worker's start cost the group another rebalance. The
    highwaters are asked again until they reach the persisted offsets, for up to ``MARKERS_WAIT_S``;
    past that the offset is truly ahead (the topic lost data) and Faust's check reports it."""
    from faust.tables.recovery import Recovery

    original = Recovery._build_highwaters
    if getattr(original, "stream_dedup", False):
        return

    async def _build_highwaters(self: Any, consumer: Any, tps: Any, destination: Any, title: str) -> None:
        await original(self, consumer, tps, destination, title)
        if title != "active" or not self.app.in_transaction:
            return
        ahead = ahead_of_highwater(self.active_offsets, destination)
        if not ahead:
            return
        log.info("changelog highwaters behind the committed offsets of %s: waiting for the commit markers",
                 [f"{tp.topic}[{tp.partition}]" for tp in ahead])
        deadline = asyncio.get_running_loop().time() + MARKERS_WAIT_S
        while ahead and not self.should_stop and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(MARKERS_POLL_S)
            await original(self, consumer, tps, destination, title)
            ahead = ahead_of_highwater(self.active_offsets, destination)

    _build_highwaters.stream_dedup = True  # type: ignore[attr-defined]
    Recovery._build_highwaters = _build_highwaters  # type: ignore[method-assign]


def _install_bulk_restore() -> None:
    """Before Faust's recovery reads the active changelog partitions record by record, the app's
    ``restore.BulkRestore`` reads them in bulk and moves their offsets to where it got (see there)."""
    from faust.tables.recovery import Recovery

    original = Recovery._build_offsets
    if getattr(original, "stream_dedup", False):
        return

    async def _build_offsets(self: Any, consumer: Any, tps: Any, destination: Any, title: str) -> None:
        await original(self, consumer, tps, destination, title)
        restore = _restores.get(self.app)
        if restore is not None and title == "active":
            await restore.run(self, tps, destination, self.active_highwaters)

    _build_offsets.stream_dedup = True  # type: ignore[attr-defined]
    Recovery._build_offsets = _build_offsets  # type: ignore[method-assign]


#: how long Faust's recovery waits for a changelog record before it checks whether it is done
RECOVERY_QUIET_S = 0.5


class _RecoveryAsyncio:
    """``asyncio`` as ``faust.tables.recovery`` sees it: its one ``wait_for`` (the recovery loop's
    wait for the next changelog record) capped at ``RECOVERY_QUIET_S``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def wait_for(aw: Any, timeout: float | None) -> Any:
        return await asyncio.wait_for(aw, RECOVERY_QUIET_S if timeout is None else min(timeout, RECOVERY_QUIET_S))


def _install_recovery_quiet_wait() -> None:
    """Under exactly-once each changelog ends with a commit marker, which Faust's recovery never
    reads as a record: it takes a partition for restored only after two of its waits for a record
    have timed out (its ``detect_aborted_tx``), so every recovery, even of nothing, held the
    worker's streams for those two waits. Each is cut to ``RECOVERY_QUIET_S``."""
    from faust.tables import recovery

    if not isinstance(recovery.asyncio, _RecoveryAsyncio):
        recovery.asyncio = _RecoveryAsyncio()  # type: ignore[assignment]


class _NoRecords:
    """What ``SeekSafeRecords`` hands out for a partition a seek just removed: nothing to return,
    no error to raise, no fetch backoff."""

    def check_raise(self) -> None:
        return None

    def calculate_backoff(self) -> float:
        return 0.0


class SeekSafeRecords(collections.OrderedDict):  # type: ignore[type-arg]
    """aiokafka's fetched records by partition, which its fetcher walks in the consumer's thread
    while Faust seeks from the worker's (``ThreadDelegateConsumer._seek``), deleting the sought
    partition's entry: a walk that listed the partition then failed with KeyError and the fetcher
    crashed, restarting the worker. A missing entry now reads as nothing fetched and a second delete
    is a no-op; the seek itself stays where Faust makes it, before it moves the read offset."""

    def __missing__(self, tp: Any) -> _NoRecords:
        return _NO_RECORDS

    def __delitem__(self, tp: Any) -> None:
        self.pop(tp, None)


_NO_RECORDS = _NoRecords()


def _install_seek_safe_records() -> None:
    """Every aiokafka fetcher keeps its fetched records in a ``SeekSafeRecords``."""
    from aiokafka.consumer.fetcher import Fetcher

    original = Fetcher.__init__
    if getattr(original, "stream_dedup", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._records = SeekSafeRecords(self._records)

    __init__.stream_dedup = True  # type: ignore[attr-defined]
    Fetcher.__init__ = __init__  # type: ignore[method-assign]


def check_versions() -> list[str]:
    """The libraries whose installed version is not the one ``PRIVATE`` was checked against."""
    out = []
    for name, version in CHECKED.items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = "absent"
        if have != version:
            out.append(f"{name} {have} (checked against {version})")
    return out


def install() -> None:
    """Install every patch (idempotent): the fetch settings, committed highwaters (and the wait for
    their commit markers), the bulk restore, fetched records safe from seeks, recovery's short
    wait for a changelog record, the delivery guard on commits (and, under exactly-once, bounded
    transaction commits and producers stopped only after them), the fast hand-over of fetched
    messages, strict commits (no fetch jump taken as processed), and the bounded RocksDB store."""
    from . import commits, delivery, drain, rocks

    for problem in check_versions():
        log.warning("stream-dedup's worker was checked against other library versions: %s", problem)
    _install_fetch_settings()
    _install_committed_highwaters()
    _install_markers_landed()
    _install_bulk_restore()
    _install_seek_safe_records()
    _install_recovery_quiet_wait()
    delivery.install()
    drain.install()
    commits.install()
    rocks.register()
