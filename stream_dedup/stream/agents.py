"""What each agent does with a batch: prepare page events, index probes, decide answers.

Each calls the core's stage functions (``core.stages``) and leaves Kafka to ``Output``; the index
and decide agents run through ``RebalanceGuard.run`` as compute, deliver and store steps.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..core.document import Rejected
from ..core.routing import digest_partition, fan_out
from ..core.stages import DecideStage, IndexStage, Preparer, admit_id, exact_stage
from ..core.store import WriteBack
from ..core.verdict import json_record
from ..core.wire import Prepared, Probe, ToDecide, byte_slices, index_item, unpack_batch
from .changelog import TableMapping
from .context import WorkerContext, timestamp_ms
from .dead_letters import dead_letter_record
from .exact_filters import ExactFilters
from .output import Output, Queued
from .rebalance import RebalanceGuard

log = logging.getLogger("stream_dedup.worker")


class PrepareAgent:
    """Page events -> probes and exact checks on the probes topic; bad input to the DLQ."""

    def __init__(self, ctx: WorkerContext, output: Output, preparer: Preparer, guard: RebalanceGuard,
                 ids: TableMapping | None):
        self.ctx = ctx
        self.output = output
        self.preparer = preparer
        self.guard = guard
        self.ids = ids
        self.seconds = ctx.metrics.stage("prepare")

    def discard(self) -> None:
        if self.ids is not None:
            self.ids.discard()

    async def batch(self, whole: list) -> bool:
        """Prepare a batch, a slice of at most ``worker.prepare_slice_bytes`` at a time so that the
        worker's other agents go on in between; False when the worker is stopping."""
        raws = [(msg.value if msg.value is not None else b"", timestamp_ms(msg)) for _, msg in whole]
        for part in byte_slices([len(raw) for raw, _ in raws], self.ctx.settings.worker.prepare_slice_bytes):
            if self.ctx.stopping:
                return False
            if part.start:
                await asyncio.sleep(0)
            if not await self.slice(whole[part.start:part.stop], raws[part.start:part.stop]):
                return False
        return True

    async def slice(self, batch: list, raws: list) -> bool:
        """Prepare page events and send what they make; False when the worker is stopping."""
        ctx, out = self.ctx, Queued()
        if self.ids is not None:
            await self.guard.settled()  # the ids table is read and written over a finished restore
        t0 = time.perf_counter()
        results: list[Prepared | Exception] = self.preparer.prepare_many(raws)
        per_event = (time.perf_counter() - t0) / max(1, len(batch))
        if self.ids is not None:  # in one go, from settled() on: no restore can begin in between
            results = [p if isinstance(p, Exception) else self.admitted(ev, p) for (ev, _), p in zip(batch, results)]
        for (ev, msg), (raw, _), p in zip(batch, raws, results):
            if ctx.stopping:
                return False
            ctx.worked.add((msg.topic, msg.partition))
            ctx.counts["in"] += 1
            if isinstance(p, Exception):  # bad input never stops the worker
                await self.dead_letter(msg, raw, p)
                continue
            ctx.counts["prepared"] += 1
            self.seconds.observe(per_event)
            p.seen = timestamp_ms(msg)  # the page record's time: where the verdict latency starts
            self.queue(out, p)
        return await self.send(out, len(batch))

    def queue(self, out: Queued, p: Prepared) -> None:
        """The document's exact check to its digest's partition, its probes to their band keys'."""
        n = self.ctx.settings.topics.partitions
        fingerprint, probe_list = fan_out(p, n)
        out.setdefault((self.output.topics.probes, digest_partition(p.digest, n)), []).append(fingerprint.to_bytes())
        self.output.to_index(out, probe_list)

    async def send(self, out: Queued, events: int) -> bool:
        if await self.output.send_batches(out) is None:
            return False
        if self.ids is not None:
            await self.ids.send()
        self.ctx.metrics.events_in.inc(events)
        return True

    async def dead_letter(self, msg: Any, raw: bytes, e: Exception) -> None:
        """A page event that cannot be judged, to the DLQ with its reason."""
        ctx = self.ctx
        reason, detail = (e.reason, e.detail) if isinstance(e, Rejected) else ("internal_error", repr(e))
        if reason == "internal_error":
            log.error("prepare failed on %s[%d]@%d", msg.topic, msg.partition, msg.offset, exc_info=e)
        ctx.counts[f"dlq.{reason}"] += 1
        ctx.counts["dlq"] += 1
        ctx.metrics.dlq.labels(reason).inc()
        await self.output.publish(self.output.topics.dlq, [(msg.key, dead_letter_record(
            reason, detail, raw, topic=msg.topic, partition=msg.partition, offset=msg.offset,
            timestamp=timestamp_ms(msg)))])

    def admitted(self, ev: Any, p: Prepared) -> Prepared | Rejected:
        """``p``, or its rejection when its id came before with other content (``admit_id``). The
        table is written every time, so that a replay sends the changelog record again."""
        assert self.ids is not None
        key = p.id.encode("utf-8", "surrogatepass")
        with self.ctx.under(ev):
            try:
                admit_id(self.ids.get(key), p)
            except Rejected as e:
                return e
            self.ids[key] = p.digest
        return p


class IndexAgent:
    """Exact checks and probes -> answers for decide, over the exact and index tables."""

    def __init__(self, ctx: WorkerContext, output: Output, stage: IndexStage, filters: ExactFilters,
                 exact: tuple[WriteBack, TableMapping], index: tuple[WriteBack, TableMapping]):
        self.ctx = ctx
        self.output = output
        self.stage = stage
        self.filters = filters
        self.exact_data, self.exact_map = exact
        self.index_data, self.index_map = index
        self.verified = 0
        self.exact_s, self.index_s = ctx.metrics.stage("exact"), ctx.metrics.stage("index")

    def discard(self) -> None:
        """Drop the batch's table writes (it is held for replay)."""
        self.exact_data.discard()
        self.exact_map.discard()
        self.index_data.discard()
        self.index_map.discard()

    async def compute(self, batch: list) -> Queued | None:
        """The exact checks first, then the probes in (ts, id) order; None when stopping."""
        ctx, out = self.ctx, Queued()
        self.filters.drop_stale()
        self.verified = self.stage.candidates
        in_batch: list[tuple[Any, Probe]] = []
        for ev, msg in batch:
            if ctx.stopping:
                return None
            with ctx.under(ev):
                for item in unpack_batch(msg.value):
                    it = index_item(item)
                    if isinstance(it, Prepared):
                        self.exact(out, msg.partition, it)
                        continue
                    if it.partition != msg.partition:
                        log.error("probe for partition %d arrived on %d: partition counts differ",
                                  it.partition, msg.partition)
                    in_batch.append((ev, it))
        for ev, it in self.stage.in_order(in_batch):
            if ctx.stopping:
                return None
            with ctx.under(ev):
                ctx.counts["index.probes"] += 1
                t0 = time.perf_counter()
                self.output.to_decide(out, self.stage.process(it))
                self.index_s.observe(time.perf_counter() - t0)
        return out

    def exact(self, out: Queued, partition: int, p: Prepared) -> None:
        t0 = time.perf_counter()
        msgs = exact_stage(self.filters.store(partition), p)
        self.exact_s.observe(time.perf_counter() - t0)
        self.ctx.counts["exact.in"] += 1
        self.ctx.counts["exact.copies"] += msgs[0].cand is not None
        self.output.to_decide(out, msgs)

    async def deliver(self, out: Queued) -> bool:
        return await self.output.send_batches(out) is not None

    async def store(self) -> None:
        self.ctx.counts["index.writes"] += self.index_data.flush(self.ctx.under) + self.exact_data.flush(self.ctx.under)
        self.ctx.metrics.candidates.inc(self.stage.candidates - self.verified)
        await self.exact_map.send()
        await self.index_map.send()


@dataclass
class Decided:
    """A decide batch's output, counted only once it goes out."""

    out: Queued = field(default_factory=dict)
    records: dict[Any, list] = field(default_factory=dict)  # topic -> [(key, value)]
    tally: Counter[str] = field(default_factory=Counter)
    shown: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # verdicts by metric labels
    seen: list[int] = field(default_factory=list)  # page record times (ms) of the batch's first verdicts


class DecideAgent:
    """Answers -> verdicts and cluster records, over the decide table."""

    def __init__(self, ctx: WorkerContext, output: Output, stage: DecideStage, data: WriteBack, table: TableMapping):
        self.ctx = ctx
        self.output = output
        self.stage = stage
        self.data = data
        self.table = table
        self.seconds = ctx.metrics.stage("decide")

    def discard(self) -> None:
        self.data.discard()

    async def compute(self, batch: list) -> Decided | None:
        """Apply every answer of the batch; None when stopping."""
        d = Decided()
        for ev, msg in batch:
            if self.ctx.stopping:
                return None
            with self.ctx.under(ev):
                for item in unpack_batch(msg.value):
                    self.apply(d, ToDecide.from_item(item), msg.partition)
        return d

    def apply(self, d: Decided, m: ToDecide, partition: int) -> None:
        """One message: its verdict (if any), its cluster record (if any), its follow-ups."""
        topics = self.output.topics
        d.tally[f"decide.{m.kind}"] += 1
        t0 = time.perf_counter()
        v = self.stage.apply(m)
        self.seconds.observe(time.perf_counter() - t0)
        if self.stage.first_seen is not None:
            d.seen.append(self.stage.first_seen)
        self.output.to_decide(d.out, self.stage.outbox)  # cluster and chain messages to their documents' partitions
        c = self.stage.cluster
        if c is not None:
            d.tally["clusters"] += 1
            d.records.setdefault(topics.clusters, []).append(
                (c.id.encode("utf-8", "surrogatepass"), json_record(c.to_dict())))
        if v is not None:
            key, body = v.id.encode("utf-8", "surrogatepass"), json_record(v.to_dict())
            d.tally["verdicts"] += 1
            d.tally["revisions"] += v.revision > 0
            d.tally[f"verdict.{v.verdict}" + (f".{v.match}" if v.match else "")] += 1
            d.shown[(v.verdict, v.match or "", v.detector or "")] += 1
            d.records.setdefault(topics.verdicts, []).append((key, body))
            d.records.setdefault(topics.unique if v.verdict == "unique" else topics.duplicate, []).append((key, body))
        if m.kind in ("join", "leave", "link", "unlink"):  # about the original, not its own verdict
            return
        st = self.stage.last
        if st is not None and not st.complete:
            self.ctx.pending.setdefault(m.id, (time.monotonic(), partition))
        else:
            self.ctx.pending.pop(m.id, None)

    async def deliver(self, d: Decided) -> bool:
        """Count the batch, send its output and wait for the broker's acks; False when stopping."""
        ctx, metrics = self.ctx, self.ctx.metrics
        ctx.counts.update(d.tally)
        metrics.clusters.inc(d.tally["clusters"])
        metrics.revisions.inc(d.tally["revisions"])
        for labels, k in d.shown.items():
            metrics.verdict(*labels).inc(k)
        futs = await self.output.send_batches(d.out, d.records)
        if futs:
            # wait, not gather: a cancelled agent must not cancel the producer's batch futures
            await asyncio.wait(set(futs))
            for f in futs:
                f.result()  # a failed delivery fails the batch
        now_ms = time.time() * 1000
        for seen in d.seen:  # delivered: from the page record to its first verdict on the topic
            metrics.verdict_latency.observe(max(0.0, now_ms - seen) / 1000)
        return futs is not None and not ctx.stopping

    async def store(self) -> None:
        """The states that say "emitted", stored only now that the verdicts are delivered."""
        self.ctx.counts["decide.writes"] += self.data.flush(self.ctx.under)
        await self.table.send()
