"""Where a worker's records go: the internal topics (packed per partition) and the output topics."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust

from ..config import Settings
from ..core.routing import id_partition
from ..core.wire import Probe, ToDecide, pack_batches
from . import delivery, internals
from .changelog import BulkSender, Record, TransactionSender
from .context import WorkerContext

Queued = dict[tuple[Any, int], list[bytes]]  # (topic, partition) -> encoded items


def raw_topic(app: faust.App, name: str, partitions: int | None, compacted: bool = False) -> faust.TopicT:
    """A topic of raw bytes keys and values, compacted or not."""
    return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
                     partitions=partitions, compacting=compacted or None)


@dataclass
class Topics:
    """The worker's topics, as Faust topic objects with raw bytes keys and values."""

    pages: faust.TopicT
    dlq: faust.TopicT
    verdicts: faust.TopicT
    unique: faust.TopicT
    duplicate: faust.TopicT
    clusters: faust.TopicT
    probes: faust.TopicT
    answers: faust.TopicT
    status: faust.TopicT

    @classmethod
    def of(cls, app: faust.App, settings: Settings) -> Topics:
        t, n = settings.topics, settings.topics.partitions

        def topic(name: str, partitions: int | None = n, compacted: bool = False) -> faust.TopicT:
            return raw_topic(app, name, partitions, compacted)

        return cls(pages=topic(t.pages), dlq=topic(t.dlq, partitions=1),
                   verdicts=topic(t.verdicts, compacted=True), unique=topic(t.unique), duplicate=topic(t.duplicate),
                   clusters=topic(t.clusters, compacted=True), probes=topic(f"{t.internal_prefix}.probes"),
                   answers=topic(f"{t.internal_prefix}.answers"),
                   status=topic(f"{t.internal_prefix}.status", partitions=1, compacted=True))

    @staticmethod
    def changelog(app: faust.App, settings: Settings, table: str) -> faust.TopicT:
        """A table's compacted changelog topic."""
        return raw_topic(app, f"{settings.topics.internal_prefix}.{table}-changelog", settings.topics.partitions,
                         compacted=True)

    def stream_names(self) -> set[str]:
        """The topics the agents read."""
        return {self.pages.get_topic_name(), self.probes.get_topic_name(), self.answers.get_topic_name()}


class Output:
    """Sends records: at least once straight into aiokafka's producer batches (``BulkSender``),
    exactly once each within the transaction of the partition whose batch made it (``SOURCE``),
    the one Faust commits that partition's offsets in, wherever the record goes (Kafka Streams'
    per-task transactions). At least once every delivery is watched, exactly once every transaction
    commit: after a failure no offset is committed and the worker restarts."""

    def __init__(self, ctx: WorkerContext, topics: Topics):
        self.ctx = ctx
        self.topics = topics
        self.partitions = ctx.settings.topics.partitions
        self.guard = delivery.DeliveryGuard(ctx.delivery_failed)
        self.sender: BulkSender | TransactionSender = (
            TransactionSender(ctx.app) if ctx.settings.worker.exactly_once
            else BulkSender(self.bulk_producer, self.guard.watch))

    def bulk_producer(self) -> Any:
        """aiokafka's producer, for the bulk sends (at least once)."""
        return internals.aiokafka_producer(self.ctx.app)

    async def publish(self, topic: faust.TopicT, records: list[Record], partition: int | None = None) -> list:
        """Send records (key, value) in order; returns their delivery futures. The partition, when
        not given, is the producer's default (murmur2 of the key), as Faust's."""
        return [d.future for d in await self.sender.send(topic.get_topic_name(), partition, records)]

    async def send_batches(self, out: Queued, records: dict[Any, list[Record]] | None = None) -> list | None:
        """Send the items queued per (topic, partition), packed, and the keyed ``records`` per topic;
        returns the delivery futures, or None when the worker is stopping before or during the
        sends (the output may not reach the broker: the caller holds its batch for replay)."""
        if self.ctx.stopping:
            return None
        futs: list = []
        for (tp, part), items in out.items():
            futs += await self.publish(tp, [(None, body) for body in pack_batches(items)], part)
        out.clear()
        for tp, recs in (records or {}).items():
            futs += await self.publish(tp, recs)
        return None if self.ctx.stopping else futs

    def to_decide(self, out: Queued, msgs: list[ToDecide]) -> None:
        """Queue for the decide stage, on the partition that owns the document id."""
        for m in msgs:
            out.setdefault((self.topics.answers, id_partition(m.id, self.partitions)), []).append(m.to_bytes())

    def to_index(self, out: Queued, probe_list: list[Probe]) -> None:
        """Queue for the index stage, on each probe's band-key partition."""
        for pr in probe_list:
            out.setdefault((self.topics.probes, pr.partition), []).append(pr.to_bytes())
