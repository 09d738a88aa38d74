"""The agents' batches, with every message the stream skipped put back in its place.

Faust's stream can skip a fetched message, or leave a partition's tail read but never delivered; a
skipped offset would also hold the partition's commit back for good. ``BatchSource`` fills such
gaps (``gaps.GapFiller``) as batches are taken, and its two timers read tails and commit holes
again. Under exactly-once only commit holes are read again: there transaction markers and aborted
records occupy offsets no consumer is given, so nearly every batch would begin after a gap; a hole
that holds the commit back is read committed, its markers marked processed, its records read again.
"""
from __future__ import annotations

import logging
import time
from typing import AbstractSet, Any, AsyncIterator, Mapping, Sequence, cast

from faust.streams import Stream
from faust.types import TP, EventT, StreamT

from . import commits, internals
from .context import WorkerContext
from .gaps import GapFiller, Msg, confluent_committed, confluent_fetch
from .kafka_io import client_config

log = logging.getLogger("stream_dedup.worker")
Batch = list[tuple[EventT, Any]]


class BatchSource:
    """Batches of (event, message) for the agents, and the timers that re-read what was skipped."""

    def __init__(self, ctx: WorkerContext, stream_topics: set[str]):
        self.ctx = ctx
        self.stream_topics = stream_topics
        settings = ctx.settings
        self.inline = not settings.worker.exactly_once  # fill gaps as batches are taken
        # under exactly-once every commit marker is a hole: read at once, not after a few checks
        self.holes = commits.HoleWatch() if self.inline else commits.HoleWatch(checks=1)
        self.gaps = GapFiller(confluent_fetch(client_config(settings), markers=not self.inline), on_fill=self.filled,
                              committed=confluent_committed(client_config(settings), settings.worker.app_id))

    def filled(self, topic_name: str, k: int) -> None:
        self.ctx.counts["gap.refetched"] += k
        self.ctx.metrics.gaps.labels(topic_name).inc(k)

    def take_events(self, stream: StreamT) -> AsyncIterator[Sequence[EventT]]:
        """Faust's batches of events."""
        w = self.ctx.settings.worker
        return cast(Stream, stream).take_events(w.batch_max, within=w.batch_within_s)

    async def batches(self, stream: StreamT) -> AsyncIterator[Batch]:
        """The stream in batches, each message preceded by any the stream skipped. A batch is acked
        (and later committed) only after the agent's loop body is done with it."""
        ctx = self.ctx
        async for events in self.take_events(stream):
            topic = events[0].message.topic if events else ""
            ctx.busy.add(topic)
            try:
                out = await self.with_gaps(events)
            except Exception as e:  # noqa: BLE001 - the gap filler gave up (see gaps._retried)
                ctx.failed(f"{topic} gap filling", [(ev, ev.message) for ev in events], e)
                return
            out = self.unprocessed(out)
            if not out:
                ctx.busy.discard(topic)
                continue
            for _, m in out:
                key = (m.topic, m.partition)
                ctx.in_hand[key] = min(ctx.in_hand.get(key, m.offset), m.offset)
            yield out
            for _, m in out:
                ctx.in_hand.pop((m.topic, m.partition), None)
            ctx.busy.discard(topic)  # the agent's body is done with the batch
            ctx.batch_done[topic] = time.monotonic()

    def unprocessed(self, batch: Batch) -> Batch:
        """The batch without the messages this worker already processed since it was given their
        partition (the module's ``unprocessed``): a seek to the committed offsets after an
        assignment can deliver the last message read once more, and its work was done (under
        exactly-once, inside the open transaction): a malformed event's second dead letter would be
        committed beside the first."""
        kept = unprocessed(batch, internals.consumer(self.ctx.app)._acked_index)
        if len(kept) < len(batch):
            self.ctx.counts["redelivered.dropped"] += len(batch) - len(kept)
        return kept

    async def with_gaps(self, events: Sequence[EventT]) -> Batch:
        """(event, message) for each event, preceded by the messages the stream skipped before it."""
        if not self.inline:
            return [(ev, ev.message) for ev in events]
        out: Batch = []
        for ev in events:
            msg = ev.message
            start = internals.committed_offset(self.ctx.app, TP(msg.topic, msg.partition))
            missed = await self.gaps.missing(msg.topic, msg.partition, msg.offset, start=start)
            if missed.span is not None:
                # the commit may pass these offsets once the batch that processes them is done; an
                # offset without a message holds a marker (Faust's own ``_add_gap`` marks nothing here)
                commits.mark_processed(self.ctx.app.consumer, TP(msg.topic, msg.partition),
                                       missed.span[0], missed.span[1] - 1)
            out.extend((ev, m) for m in missed.msgs)
            out.append((ev, msg))
        return out

    def quiet(self) -> bool:
        """Whether a rebalance or shutdown is under way (the timers then start over)."""
        return bool(self.ctx.app.rebalancing) or self.ctx.stopping

    async def reread_skipped_tails(self) -> None:
        """Seek back where the consumer read the end of a partition that never reached the stream
        (``gaps.TailWatch``): else those documents wait for the partition's next event."""
        if self.quiet():
            self.gaps.tails.reset()
            return
        ctx, consumer = self.ctx, internals.consumer(self.ctx.app)
        now = time.monotonic()
        idle = {t for t in self.stream_topics if t not in ctx.busy and now - ctx.batch_done.get(t, 0.0) >= 1.0}
        reads = {(tp.topic, tp.partition): (consumer._read_offset.get(tp), consumer._committed_offset.get(tp),
                                            internals.highwater(consumer, tp))
                 for tp in consumer.assignment() if tp.topic in self.stream_topics}
        for topic, part, offset in self.gaps.tails.check(self.gaps.tracker, reads, idle):
            if self.quiet():  # a rebalance began while an earlier seek waited
                return
            log.warning("%s[%d]: offsets from %d on were read but never reached the stream; reading them "
                        "again", topic, part, offset)
            ctx.counts["gap.tail_rereads"] += 1
            await consumer.seek(TP(topic, part), offset)

    async def read_commit_holes(self) -> None:
        """Read a partition again from an offset that holds its commit back because no agent ever
        processed it (``commits.HoleWatch``): a message the stream skipped unseen. Under exactly-once
        every hole up to the highest acked offset is read at once (``commits.open_span``)."""
        if self.quiet():
            self.holes.reset()
            return
        consumer = internals.consumer(self.ctx.app)
        await self.learn_committed(consumer)
        span = commits.head_hole if self.inline else commits.open_span
        max_fill = self.gaps.tracker.max_fill  # a longer hole is read a part at a time
        found = {(tp.topic, tp.partition): span(
                     commits.commit_base(consumer, tp), consumer._acked.get(tp) or (),
                     [(iv.begin, iv.end) for iv in consumer._gap.get(tp) or ()])
                 for tp in consumer.assignment() if tp.topic in self.stream_topics}
        for (topic, part), first, end in self.holes.check(found, self.ctx.in_hand):
            await self.read_hole(TP(topic, part), first, min(end, first + max_fill))

    async def learn_committed(self, consumer: Any) -> None:
        """Ask the broker for the committed offset of each partition whose offset the consumer lost
        (``commits.unknown_bases``) and keep it where Faust does, unless a rebalance came meanwhile."""
        assigned = [tp for tp in consumer.assignment() if tp.topic in self.stream_topics]
        for tp in commits.unknown_bases(consumer, assigned):
            offset = await self.gaps.broker_committed(tp.topic, tp.partition, wait_s=5.0)
            if (offset and not self.quiet() and tp in consumer.assignment()
                    and consumer._committed_offset.get(tp) is None):
                consumer._committed_offset[tp] = offset
                log.warning("%s[%d]: the consumer did not know its committed offset; the broker's, %d, is "
                            "its commit base again", tp.topic, tp.partition, offset)
                self.ctx.counts["commit.base_relearned"] += 1

    async def read_hole(self, tp: TP, first: int, end: int) -> None:
        """Mark the offsets of ``first..end`` that hold no record and were not acked as processed,
        and seek to the first record that was not."""
        consumer = internals.consumer(self.ctx.app)
        try:
            msgs: list[Msg] = await self.gaps.read(tp.topic, tp.partition, first, end)
        except Exception as e:  # noqa: BLE001 - the hole stays, and is looked at again later
            log.warning("%s[%d]: offsets %d..%d hold the commit back and could not be read: %r",
                        tp.topic, tp.partition, first, end - 1, e)
            return
        if self.quiet() or tp not in consumer.assignment():  # a rebalance came during the read: it starts over
            return
        acked = set(consumer._acked.get(tp) or ())
        present = {m.offset for m in msgs}
        for lo, hi in commits.runs(sorted(set(range(first, end)) - present - acked)):
            commits.mark_processed(consumer, tp, lo, hi)  # no record there: a transaction marker
        skipped = sorted(present - acked)
        if skipped:
            log.warning("%s[%d]: offsets %d..%d hold the commit back: never processed here (%d record(s)); "
                        "reading the partition again from %d", tp.topic, tp.partition, first, end - 1,
                        len(skipped), skipped[0])
            self.ctx.counts["commit.hole_rereads"] += 1
            self.ctx.metrics.holes.labels(tp.topic).inc()
            await consumer.seek(tp, skipped[0])


def unprocessed(batch: Batch, acked: Mapping[TP, AbstractSet[int]]) -> Batch:
    """The (event, message) pairs whose offset is not among the acked ones of its partition. Faust
    acks an offset once its batch is done and forgets a partition's acked offsets when it is
    revoked or committed past, so an acked offset is work this worker did in its current hold of
    the partition (a held batch is never acked: it is replayed whole)."""
    out: Batch = []
    for ev, m in batch:
        done = acked.get(TP(m.topic, m.partition))
        if not done or m.offset not in done:
            out.append((ev, m))
    return out
