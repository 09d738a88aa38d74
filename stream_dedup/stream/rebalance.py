"""Batches and rebalances: state is read and written only over tables Faust has finished restoring.

Faust (``stream_wait_empty`` off) lets an agent go on with a batch it took before a rebalance, and
its restore writes the changelog's records into the same RocksDB files the agents use. A batch that
read or wrote a table across a rebalance could lose an entry, and a batch whose partition moved
away could publish after its new owner. ``RebalanceGuard.run`` is the one place that handles both,
for the index and decide agents alike.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Protocol, TypeVar

from .context import WorkerContext, hold

log = logging.getLogger("stream_dedup.worker")
R = TypeVar("R")


class StatefulStep(Protocol[R]):
    """What a stateful agent does with a batch, in three steps the guard orders around rebalances."""

    async def compute(self, batch: list) -> R | None:
        """Read state and work out the output (nothing written or sent); None when stopping."""

    async def deliver(self, result: R) -> bool:
        """Send the output; False when the worker is stopping (the batch is then held)."""

    async def store(self) -> None:
        """Write the state the batch staged (and send its changelog records)."""

    def discard(self) -> None:
        """Drop the state writes the batch staged."""


class RebalanceGuard:
    """Runs stateful batches between rebalances, undoing and redoing what a rebalance overtook."""

    def __init__(self, ctx: WorkerContext):
        self.ctx = ctx
        self.app = ctx.app

    async def settled(self) -> None:
        """Wait until no rebalance is under way (its assignment known and Faust's restore of the
        tables done). No time limit: a rebalance that does not end is the stall watch's."""
        while self.app.rebalancing and not self.ctx.stopping:
            await asyncio.sleep(0.05)

    def since(self, count: int) -> bool:
        """Whether a rebalance began after ``app.rebalancing_count`` was ``count`` (or is under way)."""
        return bool(self.app.rebalancing) or self.app.rebalancing_count != count

    async def owned(self, batch: list) -> list:
        """``batch`` less the messages of partitions this worker no longer owns, once any rebalance
        is over; those are held for their new owner, which replays them from the committed offset."""
        await self.settled()
        mine = {(tp.topic, tp.partition) for tp in self.app.consumer.assignment()}
        if {(m.topic, m.partition) for _, m in batch} <= mine:
            return batch
        kept = [(ev, m) for ev, m in batch if (m.topic, m.partition) in mine]
        moved = [(ev, m) for ev, m in batch if (m.topic, m.partition) not in mine]
        hold(moved)
        self.ctx.counts["moved_away"] += len(moved)
        log.info("%d message(s) of %s left unpublished: a rebalance moved their partitions away while the "
                 "batch was in hand; the new owner replays them", len(moved), _names(moved))
        return kept

    def overtaken(self, stage: str, batch: list, then: str) -> None:
        """Log that a rebalance began while ``batch`` was in hand, and what becomes of it."""
        self.ctx.counts["overtaken"] += 1
        log.info("%s: a rebalance began while the batch was in hand (%d message(s) of %s); %s", stage,
                 len(batch), _names(batch), then)

    async def run(self, stage: str, batch: list, step: StatefulStep) -> bool:
        """Compute, deliver and store ``batch`` with no rebalance in between; False when stopping.

        Overtaken before its output went out, the batch is computed again once the rebalance is
        over; overtaken while its output went out, its state writes are dropped and it is held for
        replay (a replay answers the same, or better over the restored tables)."""
        while True:
            batch = await self.owned(batch)
            count = self.app.rebalancing_count
            result = await step.compute(batch)
            if result is None:
                return False
            if not self.since(count):
                break
            step.discard()
            self.overtaken(stage, batch, "it is done again once the rebalance is over")
        if not await step.deliver(result):
            return False
        if self.since(count):
            step.discard()
            hold(batch)
            self.overtaken(stage, batch, "its output went out; its state writes are left out and it is replayed")
            return True
        await step.store()
        return True


def _names(batch: list) -> list[str]:
    return sorted({f"{m.topic}[{m.partition}]" for _, m in batch})


