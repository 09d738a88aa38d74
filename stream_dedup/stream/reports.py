"""What a worker tells about itself: the gauges read at each scrape, and the report it logs and sends
to the status topic every 10 s."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import faust

from . import heap, internals
from .context import WorkerContext
from .exact_filters import ExactFilters
from .rocks import Budget

log = logging.getLogger("stream_dedup.worker")
PENDING_WARN_S = 60  # a document waiting this long for its probe answers is logged


class Reporter:
    """The gauges and the periodic report of one worker."""

    def __init__(self, ctx: WorkerContext, filters: ExactFilters, budget: Budget, tables: list[str],
                 status_topic: faust.TopicT, answers_topic: str):
        self.ctx = ctx
        self.filters = filters
        self.budget = budget
        self.tables = tables
        self.status_topic = status_topic
        self.answers_topic = answers_topic
        self.worker_id = ctx.settings.worker.display_name()

    def gauges(self) -> dict[str, int]:
        """Set the gauges read at each scrape; returns the heap figures (the report sends them too)."""
        ctx, metrics = self.ctx, self.ctx.metrics
        stores = self.filters.stores
        metrics.pending.set(len(ctx.pending))
        metrics.up.set(0 if ctx.app.rebalancing else 1)
        clock = max((st.watermark or 0 for st in stores.values()), default=0)
        metrics.bloom_fill.clear()
        metrics.bloom_fp.clear()
        for part, st in stores.items():
            metrics.bloom_fill.labels(str(part)).set(st.bloom.live_fraction(clock))
            metrics.bloom_fp.labels(str(part)).set(st.bloom.estimated_fp_rate(clock))
        metrics.bloom_false_hits.set(sum(st.bloom_fp for st in stores.values()))
        in_heap, in_rocksdb = heap.usage(), self.budget.usage()
        metrics.rocksdb_memory.set(in_rocksdb)
        for kind, value in in_heap.items():
            metrics.heap.labels(kind).set(value)
        folder = Path(ctx.app.conf.tabledir)
        for name in self.tables:
            metrics.state_bytes.labels(name).set(sum(f.stat().st_size for d in folder.glob(f"{name}-*.db")
                                                     for f in d.rglob("*") if f.is_file()))
        return dict(in_heap, rocksdb=in_rocksdb)

    def forget_moved(self) -> list[str]:
        """Stop waiting for documents whose answers partition moved away; returns the ids waiting
        longer than ``PENDING_WARN_S``."""
        ctx = self.ctx
        owned = {tp.partition for tp in ctx.app.consumer.assignment() if tp.topic == self.answers_topic}
        for i in [i for i, (_, part) in ctx.pending.items() if part not in owned]:
            del ctx.pending[i]  # the new owner waits for it now
        now = time.monotonic()
        return [i for i, (t0, _) in ctx.pending.items() if now - t0 > PENDING_WARN_S]

    async def report(self) -> None:
        """Log the counts and send them, with the assignment and memory, to the status topic."""
        ctx = self.ctx
        stale = self.forget_moved()
        memory = self.gauges()
        if stale:
            log.warning("%d documents wait for probe answers for over %d s (e.g. %s)", len(stale), PENDING_WARN_S,
                        stale[:5])
        ctx.counts["pending"] = len(ctx.pending)
        ctx.counts["pending_over_60s"] = len(stale)
        snapshot = dict(sorted(ctx.counts.items()))
        log.info("counts %s", json.dumps(snapshot))
        assigned = sorted(f"{tp.topic}[{tp.partition}]" for tp in ctx.app.consumer.assignment())
        body: dict[str, Any] = {"worker": self.worker_id, "at": time.time(),
                                "uptime_s": round(time.time() - ctx.started, 1), "counts": snapshot,
                                "assigned": assigned, "memory": memory}
        # outside every transaction: under exactly-once Faust's send would pick the status partition's,
        # which only one worker holds
        await internals.send_in(ctx.app, None, self.status_topic.get_topic_name(), self.worker_id.encode(),
                                json.dumps(body).encode(), None)
