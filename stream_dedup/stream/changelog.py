"""A Faust table partition as the core's ``MutableMapping[bytes, bytes]``, with its changelog sent in bulk.

Why not Faust's own write path: every ``table[key] = value`` becomes one changelog message on its
own (a ``FutureMessage`` through Faust's producer buffer, aiokafka's per-message ``send``, then a
delivery callback that writes the partition's persisted offset to RocksDB). An SMS makes about 8
table writes and a news article dozens, and that per-message path was the largest part of a
worker's CPU, several times what the core spends on the same SMS.

Here a write goes to the partition's local RocksDB database at once (as Faust's does, so a read
later in the batch sees it) and the changelog records wait in memory until the agent calls
``send()`` once per batch. Then each record is appended straight to aiokafka's open producer batch
for its partition (no Faust message, buffer or callback per record), and the persisted offset is
written once per partition, when its last record is acknowledged. Not ``send_batch`` with a
prepared record batch: that waits until the partition's previous batch has left, and aiokafka keeps
one request in flight per broker, so the agent would wait for the broker on every batch.

The records are the ones Faust would send (the table's changelog topic, the table partition,
the key, the value or a tombstone for a delete), so Faust's recovery and standby replicas read them
unchanged. The consumer's commit flushes the producer first (``Consumer.commit``), so a batch is
never committed before its changelog records are on the broker.

With ``processing_guarantee = exactly_once`` the records go out through ``TransactionSender``
instead: there a changelog record must belong to the transaction that commits the offsets of the
batch that wrote it.

``BulkSender`` does the appending, for these records and for the agents' other output: one
delivery future per producer batch, not per record (see its docstring).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import MutableMapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Iterator

from faust.streams import current_event
from faust.types import TP

from . import internals
from .context import SOURCE
from . import undo
from .undo import Journal
from .partitioner import KeyHashes, is_default

log = logging.getLogger("stream_dedup.worker")


Record = tuple[bytes | None, bytes | None]  # key, value (None: a tombstone)
Write = tuple[bytes, bytes | None]  # a table's key and its new value (None: deleted)


@dataclass(frozen=True)
class Delivery:
    """Where records went: ``future`` resolves with aiokafka's ``RecordMetadata`` of a producer
    batch (offset = the batch's base offset) or of one record (``last`` 0); the last of the
    records in it is at ``offset + last``."""

    future: asyncio.Future
    last: int

    def offset(self) -> int:
        return self.future.result().offset + self.last


class BulkSender:
    """Records appended straight to aiokafka's open producer batches, one delivery future per batch.

    Why: aiokafka's ``send`` runs much Python per record (the metadata wait, the
    partitioner's sets, a ``TopicPartition``, a debug log call, a future per record resolved on
    delivery), and a worker sends about ten records per SMS (seven changelog records, verdicts,
    unique or duplicate). Here a record is appended to the partition's open ``MessageBatch`` by its
    ``BatchBuilder`` (the same call aiokafka makes; a partition without one gets a new batch, as
    ``add_message`` opens it), and the caller waits on the batch's own future, which aiokafka
    resolves (or fails) with every record in it. When the open batch is full or closed, the
    record takes aiokafka's ``add_message``, which waits for room: until the one request in flight
    to the broker is answered and the full batch has left in the next. ``worker.producer_batch_bytes``
    keeps that rare; with Faust's default the index agent waited so for most of its batches.
    Records land in the same batches, in the same order, with the same partitioning (``partition``
    None: aiokafka's partitioner on the key, murmur2 as Java's) as through ``send``.
    The accumulator's private layout is checked once; where it differs (another aiokafka), every
    record goes through the public ``send``.
    """

    def __init__(self, producer: Callable[[], Any], watch: Callable[[asyncio.Future, str], None] | None = None):
        self.producer = producer
        self.watch = watch  # told of every delivery future, with its topic and partition (``delivery``)
        self._fast: bool | None = None
        self._hashes = KeyHashes()  # a verdict's key goes to two topics: murmur2 once (see partitioner)

    @staticmethod
    def _fast_path_fits(producer: Any) -> bool:
        acc = getattr(producer, "_message_accumulator", None)
        return (acc is not None and isinstance(getattr(acc, "_batches", None), dict)
                and all(hasattr(acc, a) for a in ("add_message", "_append_batch", "create_builder", "_closed",
                                                  "_exception"))
                and hasattr(producer, "_partitioner") and hasattr(producer, "_request_timeout_ms")
                and hasattr(getattr(producer, "client", None), "_wait_on_metadata"))

    async def send(self, topic: str, partition: int | None, records: Iterable[Record]) -> list[Delivery]:
        """Append ``records`` (in order) to ``topic``; returns their deliveries, the last record's last."""
        producer = self.producer()
        if self._fast is None:
            self._fast = self._fast_path_fits(producer)
            if not self._fast:
                log.warning("aiokafka's producer internals differ from what BulkSender knows: "
                            "records go through its public send(), one future each")
        if not self._fast:
            sent = [Delivery(await producer.send(topic, v, key=k, partition=partition), 0) for k, v in records]
            return self._watched(topic, partition, sent)
        from aiokafka.structs import TopicPartition

        parts = await producer.client._wait_on_metadata(topic)
        if partition is None:
            everyone = sorted(parts)
            by_part: dict[int, list[Record]] = {}
            pick = self._hashes if is_default(producer._partitioner) else producer._partitioner
            for rec in records:
                by_part.setdefault(pick(rec[0], everyone, everyone), []).append(rec)
            groups: Iterable[tuple[int, Iterable[Record]]] = by_part.items()
        else:
            if partition not in parts:
                raise ValueError(f"{topic} has no partition {partition}")
            groups = ((partition, records),)
        acc = producer._message_accumulator
        timeout = producer._request_timeout_ms / 1000
        out: list[Delivery] = []
        for part, recs in groups:
            tp = TopicPartition(topic, part)
            batch, last, first = None, -1, len(out)
            for key, value in recs:
                queue: Any = None  # the accumulator's open batches of tp
                if not acc._closed and acc._exception is None:
                    # an open batch, or a new one as add_message would open it
                    queue = acc._batches.get(tp) or (acc._append_batch(acc.create_builder(), tp),)
                meta = queue[-1]._builder.append(timestamp=None, key=key, value=value) if queue else None
                if meta is not None:
                    if queue[-1] is not batch:
                        if batch is not None:
                            out.append(Delivery(batch.future, last))
                        batch = queue[-1]
                    last = meta.offset
                    continue
                if batch is not None:  # the open batch is full (or gone): aiokafka's own way on
                    out.append(Delivery(batch.future, last))
                    batch, last = None, -1
                out.append(Delivery(await acc.add_message(tp, key, value, timeout), 0))
            if batch is not None:
                out.append(Delivery(batch.future, last))
            self._watched(topic, part, out[first:])
        return out

    def _watched(self, topic: str, partition: int | None, sent: list[Delivery]) -> list[Delivery]:
        """``sent``, each distinct future of it shown to ``watch``."""
        if self.watch is not None:
            seen = None
            for d in sent:
                if d.future is not seen:
                    self.watch(d.future, topic if partition is None else f"{topic}[{partition}]")
                    seen = d.future
        return sent


class TransactionSender:
    """``BulkSender``'s part under exactly-once: each record sent within the transaction of the
    source partition of the batch that made it (``context.SOURCE``), the one its offsets commit in,
    whatever partition the record goes to; one delivery per record. Through Faust's own path a
    table write went out later from its producer buffer, after the batch's offsets had committed
    if a commit came between: a crash then lost the write."""

    watch = None

    def __init__(self, app: Any):
        self.app = app
        self.after: dict[str, list[Callable[[], None]]] = {}  # transactional id -> what its commit runs

    def _tid(self) -> str | None:
        source = SOURCE.get()
        return internals.transactional_id(self.app, *source) if source is not None else None

    async def send(self, topic: str, partition: int | None, records: Iterable[Record]) -> list[Delivery]:
        """Send ``records`` (in order) to ``topic``; returns their deliveries."""
        tid = self._tid()
        return [Delivery(await internals.send_in(self.app, tid, topic, k, v, partition), 0) for k, v in records]

    def when_committed(self, then: Callable[[], None]) -> None:
        """Run ``then`` once the transaction of the current batch's records has committed: at the
        end of the first commit of its partition that starts after this call."""
        tid = self._tid()
        if tid is not None:
            self.after.setdefault(tid, []).append(then)

    def committing(self, tids: Iterable[str]) -> Callable[[], None]:
        """At the start of a commit of ``tids``: what to run once it has succeeded. Taken now, so
        that nothing sent while it is under way is taken for committed."""
        taken = [then for tid in tids for then in self.after.pop(tid, ())]

        def done() -> None:
            for then in taken:
                then()
        return done


class TableMapping(MutableMapping):
    """bytes -> bytes view of a Faust table (raw serializers), for the partition of the current event.

    ``sender`` sends the changelog records (one ``BulkSender`` or ``TransactionSender`` may serve
    every table and output of a worker). Under exactly-once each write saves the committed value it
    replaces, until its transaction commits (``undo``).
    """

    def __init__(self, table: Any, sender: BulkSender | TransactionSender):
        self.table = table
        self.sender = sender
        self.queued: dict[int, list[Write]] = {}  # table partition -> changelog records
        self.journaled = isinstance(sender, TransactionSender)

    @staticmethod
    def _partition() -> int:
        event = current_event()
        if event is None:
            raise RuntimeError("a table is read or written only while processing an event of its partition")
        return event.message.partition

    def _db(self, partition: int) -> Any:
        return self.table.data._db_for_partition(partition)

    def _journal(self, partition: int) -> Journal | None:
        """The saved values of the partition's open database (``rocks.BoundedStore``)."""
        return self.table.data.journals.get(partition)

    def _write(self, partition: int, items: list[Write]) -> None:
        """``items`` (key, value or None to delete) in one RocksDB batch, after the committed values
        they replace under exactly-once."""
        db = self._db(partition)
        undo.write(db, items, self.table.data.journals[partition] if self.journaled else None)
        self.queued.setdefault(partition, []).extend(items)

    def __getitem__(self, key: bytes) -> bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: bytes, default: Any = None) -> Any:
        value = self._db(self._partition()).get(key)
        return default if value is None else value

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self._write(self._partition(), [(key, value)])

    def write_many(self, partition: int, items: list[Write]) -> None:
        """``store.WriteBack.flush``'s bulk write: a partition's (key, value or None to delete) in one
        RocksDB batch, and their changelog records (a tombstone per delete) queued in the same order."""
        self._write(partition, items)

    def __delitem__(self, key: bytes) -> None:
        part = self._partition()
        if self._db(part).get(key) is None:
            raise KeyError(key)
        self._write(part, [(key, None)])

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.table.keys())

    def __len__(self) -> int:
        return len(self.table)

    def partition_items(self, partition: int):
        """Every (key, value) of one local partition (for rebuilding in-memory caches after a move).

        Uses the rocksdict store's per-partition database; Faust's own bookkeeping keys are skipped.
        """
        for k, v in self._db(partition).items():
            if not k.startswith(b"__faust"):
                yield k, v

    def discard(self) -> None:
        """Forget the queued records: the batch is not done (the worker is stopping, or a
        rebalance overtook it) and will be replayed.

        The local writes stay (the agents' write-back layers hold the exact, index and decide
        writes until the batch is done, so only the ids table has any): every write of the core is
        idempotent, so replaying the batch over them here after a restart leaves the same bytes,
        and a partition restored here later reads its changelog over them (the same keys, written
        again by the replay: ``admitted`` writes an id's digest even when it is there)."""
        self.queued.clear()

    async def send(self) -> int:
        """Hand the queued changelog records to the producer; returns how many.

        The records join the partitions' open producer batches (``BulkSender``, which waits only
        when a batch is full); delivery is awaited by the consumer's commit, which flushes the
        producer. One persisted-offset write per partition, when its last record is acknowledged
        (under exactly-once: when their transaction commits)."""
        if not self.queued:
            return 0
        queued, self.queued = self.queued, {}
        topic = self.table.changelog_topic.get_topic_name()
        n = 0
        for part, records in queued.items():
            sent = await self.sender.send(topic, part, records)
            if not sent:
                continue
            if isinstance(self.sender, TransactionSender) and (journal := self._journal(part)) is not None:
                self.sender.when_committed(partial(self._committed, part, journal, dict(records), sent[-1]))
            sent[-1].future.add_done_callback(partial(self._delivered, TP(topic, part), sent[-1]))
            for d in sent[:-1]:  # consume a failure: the last batch's callback logs what matters
                d.future.add_done_callback(_quiet)
            n += len(records)
        return n

    def _committed(self, partition: int, journal: Journal, values: dict[bytes, bytes | None], sent: Delivery) -> None:
        """Exactly-once: the transaction of ``values`` committed; their saved values go, and the
        partition's changelog offset is stored with that (``undo.Journal.committed``)."""
        db = self.table.data._dbs.get(partition)
        if db is None or self._journal(partition) is not journal:  # closed since: restored when opened
            return
        try:
            journal.committed(db, values, sent.offset())
        except Exception:  # noqa: BLE001 - the saved values stay: restored, and the changelog read again
            log.debug("%s[%d]: committed writes not recorded", self.table.name, partition, exc_info=True)

    def _delivered(self, tp: TP, sent: Delivery, fut: asyncio.Future) -> None:
        """Record the partition's last changelog offset in its database, as Faust's callback does:
        a restart then reads the changelog only from there on. Under exactly-once the offset is
        stored when the transaction commits (``_committed``): before, it is past the end a
        read-committed restore sees, and recovery stops on it (ConsistencyError)."""
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:  # a watching sender's guard reports it and stops the worker: said once
            watched = self.sender.watch is not None
            log.log(logging.DEBUG if watched else logging.ERROR, "changelog records to %s[%d] failed: %r",
                    tp.topic, tp.partition, exc)
            return
        if self.journaled:
            return
        try:
            self.table.data.set_persisted_offset(tp, sent.offset())
        except Exception:  # noqa: BLE001 - the partition may have moved away meanwhile
            log.debug("persisted offset for %s[%d] not written", tp.topic, tp.partition, exc_info=True)


def _quiet(fut: asyncio.Future) -> None:
    """Retrieve a delivery's exception so asyncio does not warn that nobody did."""
    if not fut.cancelled():
        fut.exception()
