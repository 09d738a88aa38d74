"""Table restore in bulk: the changelog records a recovery has to read, read with confluent-kafka and
written to RocksDB in write batches, before Faust's own recovery reads anything.

Why: Faust's recovery hands each changelog record through its conductor, a queue and its loop
(several event-loop turns, a task, and a count over every partition, per record), and a worker that
took over a dead one's partitions held every stream for as long (the largest part of the stall
after a SIGKILL in ``bench/faults.py``; the timing is in docs/operations.md). librdkafka reads the
same records in batches, and a RocksDB write batch applies many at once.

What Faust then sees: each partition's persisted offset at the end of what was read, stored in the
write batch with the records, so its recovery seeks past them and finds nothing left. When the bulk
read stops early (a new rebalance began, the broker did not answer in time) Faust reads the rest
as before, from the offset stored with the last batch written.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, MutableMapping

import rocksdict
from faust.types import TP

from ..config import Settings
from . import kafka_io
from .undo import OFFSET_KEY

log = logging.getLogger("stream_dedup.worker")

#: records asked of librdkafka per call, and how long a call waits for them
READ_BATCH = 20_000
READ_WAIT_S = 0.2
#: the longest a bulk restore runs before it leaves the rest to Faust's recovery (which has a
#: broker-request timeout of its own around the step this runs in)
MAX_S = 45.0


def plan(tps: Any, offsets: MutableMapping[TP, int | None], highwaters: MutableMapping[TP, int | None]
         ) -> dict[TP, tuple[int, int]]:
    """The partitions with records to read: tp -> (last offset applied, last offset to apply)."""
    out = {}
    for tp in tps:
        done, end = offsets.get(tp), highwaters.get(tp)
        if end is not None and end >= 0 and (done is None or done < end):
            out[tp] = (-1 if done is None else done, end)
    return out


def on_rocksdb(recovery: Any, tp: TP) -> bool:
    """Whether the changelog partition's table keeps its data in RocksDB databases per partition (an
    empty table is falsy: a Faust table is a mapping)."""
    table = recovery.tp_to_table.get(tp)
    return table is not None and hasattr(table.data, "_db_for_partition")


def overtaken(recovery: Any, count: int) -> bool:
    """Whether the worker stops or another rebalance began since ``app.rebalancing_count`` was
    ``count`` (its revoke closes the databases of partitions that leave)."""
    return bool(recovery.should_stop or recovery.signal_recovery_start.is_set()
                or recovery.app.rebalancing_count != count)


class BulkRestore:
    """Reads changelog partitions from an offset to their highwater and writes them to the tables'
    RocksDB databases (``run``), one librdkafka consumer per worker, assigned per recovery."""

    def __init__(self, settings: Settings, *, read_committed: bool):
        self.conf = kafka_io.client_config(settings, **{
            "group.id": f"{settings.worker.app_id}-restore",  # never joins nor commits: assign only
            "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 10,
            "auto.offset.reset": "earliest",  # an offset before the log's start: from its start
            "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
        self.consumer: Any = None

    def _consumer(self) -> Any:
        if self.consumer is None:
            from confluent_kafka import Consumer

            self.consumer = Consumer(self.conf)
        return self.consumer

    async def run(self, recovery: Any, tps: Any, offsets: MutableMapping[TP, int | None],
                  highwaters: MutableMapping[TP, int | None]) -> int:
        """Restore the active partitions ``tps`` of ``recovery`` (Faust's ``Recovery``) from
        ``offsets`` to ``highwaters``, moving ``offsets`` along; returns how many records."""
        todo = {tp: span for tp, span in plan(tps, offsets, highwaters).items() if on_rocksdb(recovery, tp)}
        if not todo:
            return 0
        t0, n, parts = time.monotonic(), 0, len(todo)
        try:
            n = await self._read(recovery, todo, offsets)
        except Exception as e:  # noqa: BLE001 - Faust's recovery reads what is left
            log.warning("bulk restore stopped (%r); Faust's recovery reads the rest", e)
        log.info("bulk restore: %d changelog records of %d partitions in %.2f s", n, parts,
                 time.monotonic() - t0)
        return n

    async def _read(self, recovery: Any, todo: dict[TP, tuple[int, int]],
                    offsets: MutableMapping[TP, int | None]) -> int:
        from confluent_kafka import KafkaError, TopicPartition

        c = self._consumer()
        loop = asyncio.get_running_loop()
        c.assign([TopicPartition(tp.topic, tp.partition, start + 1) for tp, (start, _) in todo.items()])
        deadline, n = time.monotonic() + MAX_S, 0
        count = recovery.app.rebalancing_count
        try:
            while todo and time.monotonic() < deadline:
                msgs = await loop.run_in_executor(None, c.consume, READ_BATCH, READ_WAIT_S)
                if overtaken(recovery, count):
                    break  # the partitions may have moved: Faust's next recovery starts from what is stored
                batches: dict[TP, Any] = {}
                last: dict[TP, int] = {}
                for m in msgs:
                    tp = TP(m.topic(), m.partition())
                    span = todo.get(tp)
                    if span is None:
                        continue
                    err = m.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(err.str())
                        if m.offset() > span[1]:  # at the end: what is past the records is markers
                            last[tp] = max(last.get(tp, -1), span[1])
                        continue
                    off = m.offset()
                    if off > span[1]:
                        last[tp] = max(last.get(tp, -1), span[1])
                        continue
                    batch = batches.get(tp)
                    if batch is None:
                        batch = batches[tp] = rocksdict.WriteBatch(raw_mode=True)
                    value = m.value()
                    if value is None:
                        batch.delete(m.key())
                    else:
                        batch.put(m.key(), value)
                    last[tp] = off
                    n += 1
                for tp, off in last.items():
                    batch = batches.get(tp) or rocksdict.WriteBatch(raw_mode=True)
                    batch.put(OFFSET_KEY, str(off).encode())
                    recovery.tp_to_table[tp].data._db_for_partition(tp.partition).write(batch)
                    offsets[tp] = off
                    if off >= todo[tp][1]:
                        del todo[tp]
        finally:
            c.unassign()
        return n
