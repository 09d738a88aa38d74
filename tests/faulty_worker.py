"""A worker with faults injected on purpose, for the fault tests (test-only; never shipped).

    python -m tests.faulty_worker     (settings from the environment, as ``stream-dedup worker``)

Faults come from these variables, each off when unset:
- ``FAULT_DELAY=stage:seconds:for_s``: in the first for_s seconds after start, the stage (prepare,
  exact, index or decide) sleeps ``seconds`` per item before each batch (a slow consumer);
- ``FAULT_FAILURE=stage:n``: the stage raises in its n-th batch, its work done and its output not yet
  sent (decide: delivered, its states not yet stored);
- ``FAULT_HANG=stage:n``: the stage hangs in its n-th batch where ``FAULT_FAILURE`` raises, until the
  worker stops (a batch in hand at a stop or a crash);
- ``FAULT_POISON=stage:id``: the stage raises whenever a batch holds the document id, in every
  process (a bug one document trips, which no restart cures);
- ``FAULT_SKIP=stage:n``: the n-th message of the stage's stream is dropped unprocessed, unacked and
  unseen by the gap tracking (a skip the gap filler misses);
- ``FAULT_STALL=1``: after its first batch of page events the worker pauses its pages partitions
  (a partition assigned and never fetched again);
- ``FAULT_FORGET_COMMITTED=1``: once, when its pages partitions have committed offsets, the consumer
  forgets them (as when Faust's seek at an assignment gets no answer from the group coordinator).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from typing import Any, Sequence

from stream_dedup.config import load_settings
from stream_dedup.core.wire import Prepared, ToDecide, index_item, unpack_batch
from stream_dedup.stream import internals
from stream_dedup.stream.batch_source import BatchSource
from stream_dedup.stream.worker import Worker, run_worker

log = logging.getLogger("stream_dedup.faults")


def _fault(name: str) -> tuple[str, str]:
    stage, _, arg = os.environ.get(name, "").partition(":")
    return stage, arg


def _ids(stage: str, batch: list) -> list[str]:
    """The document ids of a batch's items, as the stage reads them."""
    if stage == "prepare":
        import json
        out = []
        for _, msg in batch:
            try:
                out.append(str(json.loads(msg.value).get("id")))
            except Exception:  # noqa: BLE001 - not an event: no id
                pass
        return out
    read = index_item if stage == "index" else ToDecide.from_item
    return [read(item).id for _, msg in batch for item in unpack_batch(msg.value)]


def _items(stage: str, batch: list) -> int:
    """How many items of ``stage`` (exact: the exact checks among the index stage's) a batch holds."""
    if stage == "prepare":
        return len(batch)
    items = [item for _, msg in batch for item in unpack_batch(msg.value)]
    if stage in ("exact", "index"):  # the index stage's items are exact checks and probes
        return sum(isinstance(index_item(i), Prepared) == (stage == "exact") for i in items)
    return len(items)


class SkippingSource(BatchSource):
    """A batch source that drops one message of one stream unseen (``FAULT_SKIP``)."""

    def __init__(self, *args: Any, topic: str, at: int, counts: Counter, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.skip_topic, self.skip_at, self.seen, self.counts = topic, at, 0, counts

    async def with_gaps(self, events: Sequence[Any]) -> list:
        """The batch less the dropped message, each message's gap check in order as the worker's."""
        out: list = []
        for ev in events:
            if not self.skipped(ev.message):
                out += await super().with_gaps([ev])
        return out

    def skipped(self, msg: Any) -> bool:
        if msg.topic != self.skip_topic:
            return False
        self.seen += 1
        if self.seen != self.skip_at:
            return False
        self.counts["injected_skips"] += 1
        msg.acked = True
        self.gaps.tracker.last[(msg.topic, msg.partition)] = msg.offset
        log.info("injected skip: %s[%d]@%d dropped unseen", msg.topic, msg.partition, msg.offset)
        return True


class ForgettingSource(BatchSource):
    """A batch source whose consumer forgets its pages partitions' committed offsets once
    (``FAULT_FORGET_COMMITTED``), just before a look for commit holes."""

    def __init__(self, *args: Any, topic: str, counts: Counter, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.forget_topic, self.counts = topic, counts

    async def read_commit_holes(self) -> None:
        consumer = internals.consumer(self.ctx.app)
        known = {tp: consumer._committed_offset.get(tp) for tp in consumer.assignment() if tp.topic == self.forget_topic}
        if not self.counts["injected_forgets"] and known and all(known.values()):
            for tp, offset in known.items():
                consumer._committed_offset[tp] = None
                log.info("injected: %s[%d] committed offset %d forgotten", tp.topic, tp.partition, offset)
            self.counts["injected_forgets"] += 1
        await super().read_commit_holes()


class FaultyWorker(Worker):
    """``Worker`` with the environment's faults wrapped around its batch steps."""

    def __init__(self, settings: Any):
        super().__init__(settings)
        self.delay_stage, delay = _fault("FAULT_DELAY")
        self.delay_s, self.delay_for = (delay.split(":") + ["0", "0"])[:2]
        self.fail_stage, self.fail_at = _fault("FAULT_FAILURE")
        self.hang_stage, self.hang_at = _fault("FAULT_HANG")
        self.poison_stage, self.poison_id = _fault("FAULT_POISON")
        self.batches: Counter[str] = Counter()
        self.stall = os.environ.get("FAULT_STALL", "") not in ("", "0", "false")
        self.wrap_steps()

    def batch_source(self) -> BatchSource:
        """The skipping source when ``FAULT_SKIP`` says so (before the timers are registered on it)."""
        skip_stage, skip_at = _fault("FAULT_SKIP")
        if os.environ.get("FAULT_FORGET_COMMITTED"):
            return ForgettingSource(self.ctx, self.topics.stream_names(), topic=self.topics.pages.get_topic_name(),
                                    counts=self.ctx.counts)
        if not skip_stage:
            return super().batch_source()
        topic = {"prepare": self.topics.pages, "index": self.topics.probes,
                 "decide": self.topics.answers}[skip_stage].get_topic_name()
        return SkippingSource(self.ctx, self.topics.stream_names(), topic=topic, at=int(skip_at),
                              counts=self.ctx.counts)

    def wrap_steps(self) -> None:
        """Fail a stage's batch where ``FAULT_FAILURE`` says: its work done, before its output goes out
        (decide: after, before its states are stored); and slow the index and decide agents' work
        down where ``FAULT_DELAY`` says, inside the step a rebalance can overtake."""
        for stage, agent, step in (("prepare", self.prepare, "send"), ("index", self.index, "deliver"),
                                   ("decide", self.decide, "store")):
            original = getattr(agent, step)

            async def failing(*args: Any, _stage: str = stage, _original: Any = original) -> Any:
                await self.maybe_hang(_stage)
                self.maybe_fail(_stage)
                return await _original(*args)
            setattr(agent, step, failing)
        for stage, agent in (("index", self.index), ("decide", self.decide)):
            compute = agent.compute

            async def slow(batch: list, _stage: str = stage, _compute: Any = compute) -> Any:
                await self.delay(_stage, batch)
                return await _compute(batch)
            agent.compute = slow  # type: ignore[method-assign]

    def maybe_fail(self, stage: str) -> None:
        if stage == self.fail_stage:
            self.batches[stage] += 1
            if self.batches[stage] == int(self.fail_at):
                self.ctx.counts["injected_failures"] += 1
                raise RuntimeError(f"injected failure in the {stage} stage's batch {self.fail_at}")

    async def maybe_hang(self, stage: str) -> None:
        if stage == self.hang_stage:
            self.batches[f"hang {stage}"] += 1
            if self.batches[f"hang {stage}"] == int(self.hang_at):
                self.ctx.counts["injected_hangs"] += 1
                log.warning("injected hang in the %s stage's batch %s", stage, self.hang_at)
                await asyncio.sleep(3600)

    async def delay(self, stage: str, batch: list) -> None:
        """``FAULT_DELAY``: sleep for the batch's items of ``stage`` (index: its exact checks too)."""
        for s in (stage, "exact") if stage == "index" else (stage,):
            if s == self.delay_stage and time.time() - self.ctx.started < float(self.delay_for):
                items = _items(s, batch)
                parts = {(m.topic, m.partition) for _, m in batch}
                for _ in range(items):  # per item, the batch's partitions kept "working" for the stall watch
                    self.ctx.counts["injected_delays"] += 1
                    self.ctx.worked.update(parts)
                    await asyncio.sleep(float(self.delay_s))

    def poison(self, stage: str, batch: list) -> None:
        """``FAULT_POISON``: raise when the batch holds the document."""
        if stage == self.poison_stage and self.poison_id in _ids(stage, batch):
            self.ctx.counts["injected_poison"] += 1
            raise RuntimeError(f"injected poison: the {stage} stage fails on document {self.poison_id}")

    async def prepare_batch(self, batch: list) -> bool:
        self.poison("prepare", batch)
        await self.delay("prepare", batch)
        done = await super().prepare_batch(batch)
        if done and self.stall and not self.ctx.counts["injected_stalls"]:
            self.ctx.counts["injected_stalls"] += 1
            consumer = internals.consumer(self.app)
            consumer.pause_partitions({tp for tp in consumer.assignment()
                                       if tp.topic == self.topics.pages.get_topic_name()})
        return done

    async def index_batch(self, batch: list) -> bool:
        self.poison("index", batch)
        return await super().index_batch(batch)

    async def decide_batch(self, batch: list) -> bool:
        self.poison("decide", batch)
        return await super().decide_batch(batch)


if __name__ == "__main__":
    run_worker(load_settings(), FaultyWorker)
