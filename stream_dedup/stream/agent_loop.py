"""An agent's loop over its batches: work, and what happens to a batch that is not done.

A batch that is not done is held for replay (``hold``), its staged writes are dropped and the agent
ends: when the worker is stopping, and when the work raised. In the second case the worker stops
for its supervisor to restart it (Faust would restart the agent in the same process with the batch
acked, committing it unprocessed). A message that failed before is replayed on its own and item by
item, and an item that keeps failing is quarantined to the dead-letter topic (``quarantine.py``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from faust.types import TP

from .context import SOURCE, WorkerContext, hold, timestamp_ms, where
from .gaps import Msg
from .internals import committed_offset
from .output import Output
from .quarantine import (FILE_NAME, REASON, FailureJournal, counts_as_poison, dead_letter, item_ids,
                         quarantine_detail, split_items)

log = logging.getLogger("stream_dedup.worker")
Work = Callable[[list], Awaitable[bool]]


def by_source(batch: list) -> list[list]:
    """A batch of (event, message) cut into one batch per source partition, each in its order."""
    parts: dict[tuple[str, int], list] = {}
    for item in batch:
        m = item[1]
        parts.setdefault((m.topic, m.partition), []).append(item)
    return list(parts.values())


class AgentLoop:
    """Runs each agent's batches through its work, with replay, restart and quarantine."""

    def __init__(self, ctx: WorkerContext, output: Output):
        self.ctx = ctx
        self.output = output
        w = ctx.settings.worker
        self.journal = FailureJournal.load(Path(w.state_dir) / FILE_NAME, w.quarantine_after)

    def committed(self, topic: str, partition: int) -> int | None:
        return committed_offset(self.ctx.app, TP(topic, partition))

    async def run(self, batches: AsyncIterator[list], stage: str, work: Work,
                  discard: Callable[[], None] = lambda: None) -> None:
        """``work`` on each batch until one is not done (see the module's docstring). Under
        exactly-once a batch is worked on per source partition (``by_source``), each part inside
        that partition's transaction; the parts after one that is not done are held with it."""
        async for batch in batches:
            parts = by_source(batch) if self.ctx.settings.worker.exactly_once else [batch]
            for i, part in enumerate(parts):
                m = part[0][1]
                token = SOURCE.set((m.topic, m.partition))
                try:
                    done = await self.one(part, stage, work, discard)
                except BaseException:  # cancelled mid-batch: the worker stops (see ``left``)
                    self.left(parts[i:], discard)
                    raise
                finally:
                    SOURCE.reset(token)
                if not done:
                    for rest in parts[i + 1:]:
                        hold(rest)
                    return

    @staticmethod
    def left(parts: list[list], discard: Callable[[], None]) -> None:
        """The agent was cancelled in the middle of a batch (a stop, a crash): its staged writes are
        dropped and the batch is held. Faust's ``take_events`` acks a batch in a ``finally``, and the
        consumer's last commit comes after the agents stop: a batch left half sent was committed, and
        the documents whose answers it had not sent yet waited for them for good."""
        discard()
        for part in parts:
            hold(part)

    async def one(self, batch: list, stage: str, work: Work, discard: Callable[[], None]) -> bool:
        """``work`` on one batch, replayed or quarantined as the module's docstring says; False when
        it is not done (held: the agent ends)."""
        sizes, times = self.ctx.metrics.batch(stage)
        journal = self.journal
        sizes.observe(len(batch))
        t0 = time.perf_counter()
        if journal.attempts:
            journal.forget_committed(self.committed)
        if journal.attempts and any(journal.suspect(where(msg)) for _, msg in batch):
            return await self.one_by_one(stage, batch, work, discard, lambda msg: journal.suspect(where(msg)))
        try:
            if await work(batch):
                times.observe(time.perf_counter() - t0)
                return True
        except Exception as e:  # noqa: BLE001 - whatever it was, the batch must not be acked
            discard()
            if self.revoked(batch):
                return True
            return await self.after_failure(stage, batch, work, discard, e)
        discard()
        hold(batch)
        return False

    def revoked(self, batch: list) -> bool:
        """Under exactly-once: whether the batch's source partition left this worker while it was
        worked on (then the sends of its transaction fail). The batch is held and dropped: the
        partition's new owner aborts that transaction and reads the batch again from the offset
        committed with it."""
        m = batch[0][1]
        tp = TP(m.topic, m.partition)
        if not self.ctx.settings.worker.exactly_once or tp in self.ctx.app.consumer.assignment():
            return False
        hold(batch)
        log.info("%s[%d]: revoked while its batch at %d was worked on; the batch is left to the new owner",
                 m.topic, m.partition, m.offset)
        return True

    async def after_failure(self, stage: str, batch: list, work: Work, discard: Callable[[], None],
                            e: BaseException) -> bool:
        """A batch whose work raised: replayed here message by message when it names a quarantined
        document (True when that got it done), else counted against its messages and held, and the
        worker stops for a restart (False)."""
        journal = self.journal
        names_known = lambda msg: journal.known(item_ids(stage, msg.value))  # noqa: E731
        if journal.documents and counts_as_poison(e) and any(names_known(msg) for _, msg in batch):
            log.warning("%s agent: %r in a batch that names a quarantined document; the batch is replayed "
                        "message by message in this process", stage, e)
            return await self.one_by_one(stage, batch, work, discard, names_known)
        if counts_as_poison(e):
            journal.failed([where(msg) for _, msg in batch])
        self.ctx.failed(stage, batch, e)
        return False

    async def one_by_one(self, stage: str, batch: list, work: Work, discard: Callable[[], None],
                         split: Callable[[Any], bool]) -> bool:
        """Each message on its own, those that ``split`` names (and any that fails on its own) item by
        item, so that only the failing item is retried and, on the ``worker.quarantine_after``-th
        attempt of its message or document, dead-lettered. False when the batch is not done (held
        from the failing message on)."""
        for i, (ev, msg) in enumerate(batch):
            values: list[bytes | None] = list(self.items_of(stage, msg)) if split(msg) else [None]  # None: whole
            j = 0
            while j < len(values):
                value = values[j]
                one = msg if value is None else Msg(msg.topic, msg.partition, msg.offset, msg.key, value,
                                                    msg.timestamp)
                try:
                    if await work([(ev, one)]):
                        j += 1
                        continue
                except Exception as e:  # noqa: BLE001 - as in run
                    discard()
                    step = await self.item_failed(stage, batch[i:], msg, j, value, e)
                    if step is None:
                        return False
                    if step == "split":
                        values, j = list(self.items_of(stage, msg)), 0
                    else:
                        j += 1
                    continue
                discard()
                hold(batch[i:])
                return False
            self.journal.passed(where(msg))
        return True

    async def item_failed(self, stage: str, rest: list, msg: Any, j: int, value: bytes | None,
                          e: BaseException) -> str | None:
        """What follows a failure in ``one_by_one``: "split" (the whole message failed on its own: try
        its items), "next" (the item was quarantined), None (held; the worker stops for a restart)."""
        m = where(msg)
        if value is None:
            if counts_as_poison(e) and self.journal.failed([m]):
                log.warning("%s agent: %r in %s[%d]@%d on its own; it is replayed item by item", stage, e, *m)
                return "split"
            self.ctx.failed(stage, rest, e)
            return None
        ids = item_ids(stage, value)
        attempts = self.journal.failed_alone(m, ids) if counts_as_poison(e) else 0
        known = self.journal.known(ids)
        if not attempts or (attempts < self.journal.limit and not known):
            self.ctx.failed(stage, rest, e)
            return None
        try:
            await self.quarantine(stage, m, j, msg, value, e, attempts, known, ids)
        except Exception as e2:  # noqa: BLE001 - the dead letter did not go out: replay
            self.ctx.failed(stage, rest, e2)
            return None
        return "next"

    @staticmethod
    def items_of(stage: str, msg: Any) -> list[bytes]:
        """A message as messages of one item each (``split_items``); an unreadable one is one item."""
        try:
            return split_items(stage, msg.value)
        except Exception:  # noqa: BLE001 - the stage will fail on it as a whole, and quarantine it so
            return [msg.value or b""]

    async def quarantine(self, stage: str, m: tuple[str, int, int], item: int, msg: Any, value: bytes,
                         e: BaseException, attempts: int, known: bool, ids: list[str]) -> None:
        """Send a poison item to the dead-letter topic and wait for the broker's ack: only then may its
        message be committed."""
        if self.ctx.stopping:
            raise RuntimeError("the worker is stopping")
        dlq = self.output.topics.dlq
        futs = await self.output.publish(dlq, [(msg.key, dead_letter(stage, m, item, value, e, attempts, known,
                                                                      timestamp_ms(msg), ids))])
        await asyncio.wait(set(futs))
        for f in futs:
            f.result()
        log.error("%s agent: item %d of %s[%d]@%d (documents %s): %s; it is quarantined to %s", stage, item, *m,
                  ids, quarantine_detail(stage, e, attempts, known), dlq.get_topic_name())
        self.journal.quarantined(ids)
        self.ctx.counts["quarantined"] += 1
        self.ctx.counts["dlq"] += 1
        self.ctx.metrics.dlq.labels(REASON).inc()
