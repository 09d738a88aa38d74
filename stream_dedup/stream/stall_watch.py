"""The worker's own partitions, watched: lag that does not move is nudged, then restarted (``watchdog``)."""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from pathlib import Path

from faust.types import TP

from . import internals, kafka_io
from .batch_source import BatchSource
from .context import WorkerContext
from .watchdog import EXIT_STALLED, MarkerLag, Position, StallDetector, nudge_target

log = logging.getLogger("stream_dedup.worker")


def await_chain(coro: object) -> list[str]:
    """Where a suspended coroutine waits: each awaited coroutine's function, file and line, outermost
    first (``Task.get_stack`` shows the outermost alone), then what the last awaits."""
    out: list[str] = []
    while coro is not None and len(out) < 40:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            out.append(type(coro).__name__)
            break
        out.append(f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out


def task_waits(depth: int = 4) -> list[str]:
    """The running loop's tasks by where they wait (the innermost ``depth`` steps), the most common
    first: a stalled worker's log then says which await holds it."""
    chains = Counter(" <- ".join(reversed(await_chain(t.get_coro())[-depth:])) for t in asyncio.all_tasks())
    return [f"  {n} x {chain}" for chain, n in chains.most_common()]


class StallWatch:
    """Checks the assigned stream partitions every report; sets the lag gauges on the way."""

    def __init__(self, ctx: WorkerContext, source: BatchSource):
        w = ctx.settings.worker
        self.ctx = ctx
        self.source = source
        self.detector: StallDetector[TP] = StallDetector(w.stall_timeout_s, nudge_s=w.stall_nudge_s)
        self.rebalancing_since: float | None = None
        self.marker_lag: MarkerLag[TP] = MarkerLag()

    async def check(self) -> None:
        """Exit for a restart when an assigned partition stalls, or a rebalance never ends."""
        ctx, w = self.ctx, self.ctx.settings.worker
        now = time.monotonic()
        if ctx.app.rebalancing:
            self.detector.reset(now)
            self.rebalancing_since = self.rebalancing_since or now
            if w.stall_timeout_s and now - self.rebalancing_since > 2 * w.stall_timeout_s:
                self.stall_exit(f"rebalance/recovery has not finished in {now - self.rebalancing_since:.0f} s")
            return
        self.rebalancing_since = None
        consumer = internals.consumer(ctx.app)
        tps = [tp for tp in consumer.assignment() if tp.topic in self.source.stream_topics]
        if not tps or not (w.stall_timeout_s or w.stall_nudge_s):
            return
        ends = await consumer.highwaters(*tps)
        positions: dict[TP, Position] = {}
        for tp in tps:
            read = consumer._read_offset.get(tp)
            positions[tp] = (read + 1 if read is not None else consumer._committed_offset.get(tp), ends.get(tp))
        if w.exactly_once:
            positions = await self.past_markers(positions)
        metrics = ctx.metrics
        metrics.lag.clear()
        for tp, (pos, end) in positions.items():
            metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, (end or 0) - (pos or 0)))
        metrics.assigned.set(len(tps))
        stalled = self.detector.observe(now, positions, {tp for tp in tps if (tp.topic, tp.partition) in ctx.worked})
        ctx.worked.clear()
        nudged = self.detector.to_nudge(now)
        if nudged:
            log.warning("stalled; what the worker's tasks wait on:\n%s", "\n".join(task_waits()))
        for tp in nudged:
            await self.nudge(tp, positions[tp][0])
        if stalled:
            self.stall_exit("; ".join(f"{tp.topic}[{tp.partition}] lag {lag}, no progress for {idle:.0f} s"
                                      for tp, lag, idle in stalled))

    async def past_markers(self, positions: dict[TP, Position]) -> dict[TP, Position]:
        """Under exactly-once: ``positions`` with each partition that lags by its commit markers
        only taken as caught up (``watchdog.MarkerLag``)."""
        check = self.marker_lag.to_check(positions, self.detector.unmoved)
        if check:
            loop = asyncio.get_running_loop()
            self.marker_lag.learn(positions, await loop.run_in_executor(None, kafka_io.no_record_from,
                                                                        self.ctx.settings, check))
        return self.marker_lag.caught_up(positions)

    async def nudge(self, tp: TP, pos: int | None) -> None:
        """The first remedy for a stalled partition: put it back in Faust's fetch set and seek it to
        the first offset not yet processed here (idempotent stages make a re-read harmless)."""
        consumer = internals.consumer(self.ctx.app)
        gaps = self.source.gaps
        last = gaps.tracker.last.get((tp.topic, tp.partition))
        known = (pos, None if last is None else last + 1, internals.committed_offset(self.ctx.app, tp))
        committed = gaps.committed
        ask = functools.partial(committed, tp.topic, tp.partition) if committed is not None else None
        target, source = await asyncio.get_running_loop().run_in_executor(None, nudge_target, known, ask)
        view = {"active": tp in consumer._get_active_partitions(), "paused": tp in consumer._paused_partitions,
                "buffer_full": tp in consumer._buffered_partitions, "flow": consumer.flow_active,
                "read": consumer._read_offset.get(tp)}
        log.warning("%s[%d]: lag and no progress for over %.0f s (consumer: %s); resuming it and seeking to %s (%s)",
                    tp.topic, tp.partition, self.ctx.settings.worker.stall_nudge_s, view, target, source)
        self.ctx.counts["stall.nudges"] += 1
        consumer.on_buffer_drop(tp)  # Faust's own way back from its buffer-full set
        consumer.resume_partitions({tp})
        if target is not None:
            await consumer.seek(tp, target)

    def stall_exit(self, why: str) -> None:
        self.ctx.stalled = why
        self.ctx.exit_for_restart(EXIT_STALLED, f"stalled: {why}")
