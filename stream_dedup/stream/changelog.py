"""A Faust table partition as the core's ``MutableMapping[bytes, bytes]``, with its changelog sent in bulk.

Why not Faust's own write path: every ``table[key] = value`` becomes one changelog message on its
own (a ``FutureMessage`` through Faust's producer buffer, aiokafka's per-message ``send``, then a
delivery callback that writes the partition's persisted offset to RocksDB). An SMS makes about 8
table writes and a news article 37, and in a profile of a two-worker SMS burst that per-message path
was the largest part of a worker's CPU, five times what the core spends on the same SMS
(bench/RESULTS.md, "Targets: met, missed, and why").

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

With ``processing_guarantee = exactly_once`` the writes keep Faust's path (no ``producer``): there a
changelog record must belong to the transaction of the partition it was written for, which Faust's
per-message path arranges and the plain producer would not.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import MutableMapping
from functools import partial
from typing import Any, Callable, Iterator

from faust.streams import current_event
from faust.types import TP

log = logging.getLogger("stream_dedup.worker")


class TableMapping(MutableMapping):
    """bytes -> bytes view of a Faust table (raw serializers), for the partition of the current event.

    ``producer`` returns the running aiokafka producer (Faust's, so the consumer's commit flushes
    it); None keeps Faust's per-message changelog path.
    """

    def __init__(self, table: Any, producer: Callable[[], Any] | None = None):
        self.table = table
        self.producer = producer
        self.queued: dict[int, list[tuple[bytes, bytes | None]]] = {}  # table partition -> changelog records

    @staticmethod
    def _partition() -> int:
        event = current_event()
        if event is None:
            raise RuntimeError("a table is read or written only while processing an event of its partition")
        return event.message.partition

    def _db(self, partition: int) -> Any:
        return self.table.data._db_for_partition(partition)

    def __getitem__(self, key: bytes) -> bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: bytes, default: Any = None) -> Any:
        if self.producer is None:
            return self.table.get(key, default)
        value = self._db(self._partition()).get(key)
        return default if value is None else value

    def __setitem__(self, key: bytes, value: bytes) -> None:
        if self.producer is None:
            self.table[key] = value
            return
        part = self._partition()
        self._db(part).put(key, value)
        self.queued.setdefault(part, []).append((key, value))

    def __delitem__(self, key: bytes) -> None:
        if self.producer is None:
            del self.table[key]
            return
        part = self._partition()
        db = self._db(part)
        if db.get(key) is None:
            raise KeyError(key)
        db.delete(key)
        self.queued.setdefault(part, []).append((key, None))

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
        """Forget the queued records (the worker is stopping; the batch will be replayed elsewhere).

        The local writes stay: every write of the core is idempotent, so replaying the batch over
        them here after a restart leaves the same bytes."""
        self.queued.clear()

    async def send(self) -> int:
        """Hand the queued changelog records to the producer; returns how many.

        Each record is appended to the partition's open producer batch (aiokafka's ``send``, which
        waits only when that batch is full); delivery is awaited by the consumer's commit, which
        flushes the producer. One persisted-offset write per partition, when its last record is
        acknowledged."""
        if not self.queued:
            return 0
        queued, self.queued = self.queued, {}
        producer = self.producer()  # type: ignore[misc]
        topic = self.table.changelog_topic.get_topic_name()
        n = 0
        for part, records in queued.items():
            fut = None
            for key, value in records:
                fut = await producer.send(topic, value, key=key, partition=part)
            if fut is not None:
                fut.add_done_callback(partial(self._delivered, TP(topic, part)))
            n += len(records)
        return n

    def _delivered(self, tp: TP, fut: asyncio.Future) -> None:
        """Record the partition's last changelog offset in its database, as Faust's callback does:
        a restart then reads the changelog only from there on."""
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("changelog records to %s[%d] failed: %r", tp.topic, tp.partition, exc)
            return
        try:
            self.table.data.set_persisted_offset(tp, fut.result().offset)
        except Exception:  # noqa: BLE001 - the partition may have moved away meanwhile
            log.debug("persisted offset for %s[%d] not written", tp.topic, tp.partition, exc_info=True)
