"""The Kafka worker: a Faust app whose agents move messages between the core's stage functions.

    pages ─► prepare ─┬─► {internal}.probes ────────► index ──► {internal}.answers ─► decide ─► verdicts
    (by id)  table "ids" │    partition = band key      tables       partition = doc id   table     unique / duplicate
                         │    (probes), digest (the     "index",                          "decide"
                         │    exact check)              "exact"
                         └─► pages.dlq (bad input, id_conflict)

prepare sends a document's probes to the index partitions and its digest to the partition that
owns it, on one topic (``stages.fan_out``, ``stages.index_item``): two hops from page to verdict.

Each stateful agent owns RocksDB-backed Faust tables (rocksdict) whose changelogs are the
``*-changelog`` topics in ``topics/topics.toml``; Faust restores a partition's table from it when the
partition moves. A table partition is only read and written while processing an event of the same
partition number, which is exactly how the messages are routed: by page id (ids: the producer keys
pages by id), by digest (exact) and by band-key partition (index: ``stages.key_partition``), by
document id (decide). All deciding happens in
``core.stages``; this module only moves bytes and keeps counts.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import socket
import sys
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, MutableMapping, Protocol, cast

import faust
from faust.streams import Stream, _current_event, current_event
from faust.types import TP, EventT, Message, StreamT

from .. import collector
from ..config import Settings
from ..core.document import Rejected
from ..core.exact import ExactStore
from ..core.index import BucketIndex
from ..core.stages import (DecideStage, IndexStage, DocStates, Prepared, Preparer, Probe, ToDecide, admit_id,
                           byte_slices, digest_partition, exact_stage, fan_out, id_partition, index_item,
                           pack_batches, unpack_batch)
from ..core.store import WriteBack
from ..core.verdict import json_record
from ..kafka_io import client_config
from .changelog import BulkSender, Record, TableMapping
from .credentials import faust_credentials
from .dead_letters import dead_letter_record
from .gaps import GapFiller, Msg, confluent_committed, confluent_fetch
from .quarantine import (FILE_NAME, REASON, FailureJournal, counts_as_poison, dead_letter, item_ids,
                         quarantine_detail, split_items)
from . import commits, delivery, drain, heap, rocks
from .metrics import Metrics
from .watchdog import EXIT_FAILED, EXIT_STALLED, ChangelogIdleFilter, StallDetector, nudge_target

log = logging.getLogger("stream_dedup.worker")




def hold(batch: list) -> None:
    """Keep a batch that was not done (the worker is stopping) out of every later commit.

    Faust's ``take_events`` acks its buffered events in a ``finally``, so also when an agent
    leaves in the middle of a batch, and the consumer's last commit on shutdown then commits
    it: its output dropped, its messages never replayed (the rebalance test lost five
    documents' probe answers this way when one worker got SIGTERM mid-stream). A message
    marked acked here is skipped by that ack (``Message.ack`` does nothing for an acked
    message), so the partition's commit stops before it and its next owner replays it.
    """
    for ev, _ in batch:
        ev.message.acked = True


class ConsumerInternals(Protocol):
    """What the worker uses of Faust's consumer (faust-streaming 0.15) beyond its declared type:
    the private offsets and fetch sets that gap filling, the stall watchdog and its nudge read.
    Named here, in one place, so that a Faust upgrade's review knows what to check."""

    _read_offset: MutableMapping[TP, int | None]
    _committed_offset: MutableMapping[TP, int | None]
    _acked: MutableMapping[TP, list[int]]
    _gap: MutableMapping[TP, Any]  # intervaltree.IntervalTree
    _paused_partitions: set[TP]
    _buffered_partitions: set[TP]
    flow_active: bool

    def _get_active_partitions(self) -> set[TP]: ...
    def assignment(self) -> set[TP]: ...
    async def highwaters(self, *partitions: TP) -> MutableMapping[TP, int]: ...
    def highwater(self, tp: TP) -> int: ...
    async def seek(self, partition: TP, offset: int) -> None: ...
    def on_buffer_drop(self, tp: TP) -> None: ...
    def resume_partitions(self, partitions: set[TP]) -> None: ...


def internals(consumer: Any) -> ConsumerInternals:
    return cast(ConsumerInternals, consumer)


def highwater(consumer: ConsumerInternals, tp: TP) -> int | None:
    """The partition's end offset as of the consumer's last fetch (no request), None if unknown."""
    try:
        return consumer.highwater(tp)
    except Exception:  # noqa: BLE001 - aiokafka asserts the partition is assigned; a rebalance may race
        return None


def event_partition(event: Any) -> int | None:
    return event.message.partition if event is not None else None


def timestamp_ms(msg: Message | Msg) -> int | None:
    """A message's timestamp in milliseconds (Faust gives seconds), None when it has none."""
    return int(msg.timestamp * 1000) if msg.timestamp is not None else None


def _fetch_wait_from_settings() -> None:
    """Let the worker choose aiokafka's ``fetch_max_wait_ms``, which Faust fixes at 1,500 ms.

    Why: aiokafka keeps one fetch request in flight per broker, and a partition that still had
    records waiting to be consumed when that request was made is not in it. When the request is a
    long poll on partitions with nothing new (the broker holds it until data arrives there or the
    wait ends), a stage whose partition has just been written to waits for the poll to end, up to
    1.5 s per hop; an SMS crosses four. In the SMS benchmark with 2 workers about half the runs fell
    into that (about 1,100 instead of about 2,000 events/s, both workers half idle); with 100 ms
    none of ten did. The cost is an empty fetch per 100 ms per idle worker.
    ``app.stream_dedup_fetch_max_wait_ms`` is read when the worker's consumer is created."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    create = AIOKafkaConsumerThread._create_worker_consumer
    if getattr(create, "stream_dedup", False):
        return

    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = create(self, transport)
        wait_ms = getattr(self.app, "stream_dedup_fetch_max_wait_ms", None)
        if wait_ms is not None:
            consumer._fetch_max_wait_ms = int(wait_ms)  # read by aiokafka when it starts its fetcher
        min_bytes = getattr(self.app, "stream_dedup_fetch_min_bytes", None)
        if min_bytes is not None:
            consumer._fetch_min_bytes = int(min_bytes)  # likewise
        return consumer

    create_worker_consumer.stream_dedup = True  # type: ignore[attr-defined]
    AIOKafkaConsumerThread._create_worker_consumer = create_worker_consumer  # type: ignore[method-assign]


_fetch_wait_from_settings()
delivery.install()  # a commit waits for the deliveries of what it commits, and stops after a failure
drain.install()  # the fetcher hands messages to the streams without four tasks each (stream/drain.py)
commits.install()  # a commit never passes an offset that was not processed (stream/commits.py)


class _Under:
    """The context of ``under(event)`` in ``build_app``. A class rather than a
    ``contextlib.contextmanager`` generator: it is entered for every message and for every table
    write of a batch, and the generator's set-up took about 2 % of a worker's CPU in the SMS
    profile."""

    __slots__ = ("event", "worked", "token")

    def __init__(self, event: Any, worked: set):
        self.event = event
        self.worked = worked
        self.token: Any = None

    def __enter__(self) -> None:
        msg = self.event.message
        self.worked.add((msg.topic, msg.partition))
        self.token = _current_event.set(weakref.ref(self.event))

    def __exit__(self, *exc: Any) -> None:
        _current_event.reset(self.token)


def build_app(settings: Settings) -> faust.App:
    t = settings.topics
    n = t.partitions
    w = settings.worker
    app = faust.App(
        w.app_id,
        broker=[f"kafka://{hp.strip()}" for hp in settings.kafka.bootstrap.split(",")],
        broker_credentials=faust_credentials(settings.kafka.client),
        store=f"{rocks.SCHEME}://",
        datadir=str(Path(w.state_dir).absolute()),
        topic_partitions=n,
        topic_replication_factor=settings.kafka.replication_factor,
        topic_allow_declare=True,
        processing_guarantee=w.processing_guarantee,
        consumer_auto_offset_reset="earliest",
        web_enabled=w.web_port > 0,
        web_port=w.web_port or 6066,
        web_bind=w.web_host,
        web_host=w.web_host,
        consumer_metadata_max_age_ms=int(w.metadata_max_age_s * 1000),
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        producer_linger=w.producer_linger_ms / 1000,
        # a state record can be up to 4.4 MB (topics.toml: the changelogs take 8 MiB); the bulk path
        # never checked this limit, aiokafka's send() does
        producer_max_request_size=8 << 20,
        producer_max_batch_size=w.producer_batch_bytes,
        producer_compression_type=None if w.producer_compression == "none" else w.producer_compression,
        stream_wait_empty=False,
        table_cleanup_interval=60.0,
        table_standby_replicas=w.standby_replicas,
        # no table contents or request routing over HTTP: the port serves metrics and status only
        web_tables_enabled=False,
        web_router_enabled=False,
    )
    app.stream_dedup_fetch_max_wait_ms = w.fetch_max_wait_ms  # type: ignore[attr-defined]
    app.stream_dedup_fetch_min_bytes = w.fetch_min_bytes  # type: ignore[attr-defined]

    def topic(name: str, partitions: int | None = n, compacted: bool = False) -> faust.TopicT:
        return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
                         partitions=partitions, compacting=compacted or None)

    pages = topic(t.pages)
    dlq = topic(t.dlq, partitions=1)
    verdicts, unique, duplicate = topic(t.verdicts, compacted=True), topic(t.unique), topic(t.duplicate)
    clusters = topic(t.clusters, compacted=True)
    probes = topic(f"{t.internal_prefix}.probes")
    answers = topic(f"{t.internal_prefix}.answers")
    status_topic = topic(f"{t.internal_prefix}.status", partitions=1, compacted=True)
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    started = time.time()

    # State ages out after two windows of wall-clock time without a rewrite: RocksDB TTL locally (a
    # bucket is rewritten whenever a document touches it), and retention on the changelog (topics.toml).
    ttl_s = w.state_ttl_s or max(3600, 2 * settings.engine.window_ms // 1000)
    # Faust's RocksDB defaults (3 x 64 MiB memtables and a 2 GiB block cache per database) are sized for
    # one big table; here every table partition is a database (4 tables x partitions), so the worker's
    # memory would grow towards gigabytes, and a memtable that never fills is never flushed, so
    # TTL compaction never drops the expired entries (the soak test measures both).
    # One memory budget for all of them (stream/rocks.py).
    budget = rocks.Budget.of(w.rocksdb_memory_mb << 20)
    rocksdb = {"ttl": ttl_s, "write_buffer_size": w.rocksdb_write_buffer_mb << 20, "max_write_buffer_number": 2,
               "budget": budget, "wal": w.rocksdb_wal}

    def table(name: str):
        return app.Table(name, key_type=bytes, value_type=bytes,  # bytes types: raw serializers
                         partitions=n, options=dict(rocksdb),  # Faust pops keys from it
                         changelog_topic=topic(f"{t.internal_prefix}.{name}-changelog", compacted=True))

    exact_t, index_t, decide_t = table("exact"), table("index"), table("decide")
    # the first content's digest of each page id, on the id's pages partition (``admit_id``)
    ids_t = table("ids") if w.reject_id_conflicts else None

    preparer = Preparer(settings)
    log.info("segmenter and parsers loaded in %.1f s", preparer.warm())
    window = settings.engine.window_ms
    # the tables' changelog records go out in one record batch per partition per agent batch
    # (stream/changelog.py); under exactly-once, Faust's per-message path keeps them in its transactions
    # aiokafka's producer under Faust's (private: Faust's producer type does not declare it)
    bulk = (lambda: cast(Any, app.producer)._ensure_producer()) if w.processing_guarantee == "at_least_once" else None
    # every delivery of what the worker sends is watched: after a failure no offset is committed, and
    # the worker stops for a restart that replays them (stream/delivery.py)
    guard: delivery.DeliveryGuard | None = None
    sender: BulkSender | None = None
    if bulk is not None:
        guard = delivery.DeliveryGuard(lambda what, e: delivery_failed(what, e))
        sender = BulkSender(bulk, guard.watch)
    app.stream_dedup_delivery_guard = guard  # type: ignore[attr-defined]
    exact_map, index_map, decide_map = (TableMapping(t_, bulk, sender) for t_ in (exact_t, index_t, decide_t))
    ids_map = TableMapping(ids_t, bulk, sender) if ids_t is not None else None
    exact_by_part: dict[int, ExactStore] = {}
    # the rebalance (app.rebalancing_count) each partition's filter was built in; None: built while one
    # was under way, from a table Faust may still have been restoring (see ``fresh_filters``)
    exact_built: dict[int, int | None] = {}
    # exact, index and decide write through a per-batch write-back layer (see WriteBack): one
    # changelog record per touched key per batch, decide states only after the batch's output is
    # delivered, and a batch that is not done (held for replay) leaves no write behind, so that its
    # replay here writes, and sends, the same records again
    exact_data = WriteBack(exact_map, tag=current_event, scope=event_partition)
    index_data = WriteBack(index_map, tag=current_event, scope=event_partition)
    # decide: the write-back holds DocState objects, so a document's state is decoded and encoded
    # once per batch however many of its answers the batch brings
    decide_data = WriteBack(DocStates(decide_map), tag=current_event, scope=event_partition)
    index_stage = IndexStage(BucketIndex(index_data, window=window, max_bucket=settings.engine.max_bucket),
                             preparer.detectors)
    decide = DecideStage(decide_data)
    counts: Counter[str] = Counter()
    metrics = Metrics()
    index_stage.index.observe = metrics.bucket_bytes.observe
    prepare_s, exact_s, index_s, decide_s = (metrics.stage(x) for x in ("prepare", "exact", "index", "decide"))
    stall_state: dict[str, Any] = {"stalled": None}
    pending: dict[str, tuple[float, int]] = {}  # doc id -> (first seen, answers partition)
    stalls: StallDetector[TP] = StallDetector(w.stall_timeout_s, nudge_s=w.stall_nudge_s)

    def filled(topic_name: str, k: int) -> None:
        counts["gap.refetched"] += k
        metrics.gaps.labels(topic_name).inc(k)

    gaps = (GapFiller(confluent_fetch(client_config(settings)), on_fill=filled,
                      committed=confluent_committed(client_config(settings), w.app_id))
            if w.processing_guarantee == "at_least_once" else None)
    stream_topics = {pages.get_topic_name(), probes.get_topic_name(), answers.get_topic_name()}
    rebalancing_since: list[float] = []
    worked: set[tuple[str, int]] = set()  # (topic, partition) processed since the last stall check
    slow_stage, slow_s, slow_for = (w.inject_delay.split(":") + ["", "0", "0"])[:3]

    fail_stage, _, fail_at = w.inject_failure.partition(":")
    stage_batches: Counter[str] = Counter()

    def injected_failure(stage: str) -> None:
        """``worker.inject_failure``: an agent that raises in the middle of its ``fail_at``-th batch
        (its work done, its output not yet sent); off by default."""
        if stage == fail_stage:
            stage_batches[stage] += 1
            if stage_batches[stage] == int(fail_at):
                counts["injected_failures"] += 1
                raise RuntimeError(f"injected failure in the {stage} stage's batch {fail_at}")

    poison_stage, _, poison_id = w.inject_poison.partition(":")
    skip_stage, _, skip_at = w.inject_skip.partition(":")
    skip_topic = {"prepare": pages, "index": probes, "decide": answers}[skip_stage].get_topic_name() if skip_stage else ""

    def injected_poison(stage: str, doc_id: str) -> None:
        """``worker.inject_poison``: a stage that raises whenever it works on one document, in every
        process (a bug that one document trips, which no restart cures); off by default."""
        if stage == poison_stage and doc_id == poison_id:
            counts["injected_poison"] += 1
            raise RuntimeError(f"injected poison: the {stage} stage fails on document {doc_id}")

    journal = FailureJournal.load(Path(w.state_dir) / FILE_NAME, w.quarantine_after)

    async def injected_delay(stage: str) -> None:
        """``worker.inject_delay``: a slow consumer on purpose (the back-pressure test); off by default."""
        if stage == slow_stage and time.time() - started < float(slow_for):
            counts["injected_delays"] += 1
            if (ev := current_event()) is not None:
                worked.add((ev.message.topic, ev.message.partition))
            await asyncio.sleep(float(slow_s))

    def exact_store(partition: int) -> ExactStore:
        st = exact_by_part.get(partition)
        if st is None:  # first event of a partition in this process: warm its filter from the table
            # digests spread evenly over the exact stage's partitions: each partition's filter is
            # sized for its share of the stream's capacity, not for all of it
            st = exact_by_part[partition] = ExactStore(exact_data, window,
                                                       bloom_capacity=-(-settings.engine.bloom_capacity // n),
                                                       bloom_fp_rate=settings.engine.bloom_fp_rate)
            exact_built[partition] = None if app.rebalancing else app.rebalancing_count
            rebuilt = st.rebuild_bloom(exact_map.partition_items(partition))
            log.info("exact partition %d: Bloom filter rebuilt from %d stored digests", partition, rebuilt)
        return st

    def fresh_filters() -> None:
        """Drop the Bloom filters not built in the current assignment, once its restore is done.

        A filter answers "certainly new" for a digest it lacks, so it must hold every digest of its
        table. One built in another rebalance's assignment misses what the partition's owner wrote
        meanwhile (the revocation drops it too, ``forget_revoked``); one built while a rebalance
        was under way may have read the table in the middle of Faust's restore of it (a batch that
        a rebalance overtook, which ``index_batch`` does again)."""
        for part in [p for p, built in exact_built.items() if built != app.rebalancing_count]:
            exact_built.pop(part, None)
            exact_by_part.pop(part, None)

    stopping: list[bool] = []  # set once the app begins to stop (the consumer has stopped)

    # (mode's signal handler type matches no function, not even one of its own signature)
    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def quiesce(sender: Any, **kwargs: Any) -> None:
        """Stop writing once shutdown begins.

        Faust stops the consumer, flushes the producer, then stops the agents: a batch still in
        progress would write tables (changelog messages) into a producer that is going away, and
        the crash turns a clean SIGTERM into an error exit. The agents leave such a batch held
        (``hold``): the consumer's last commit stops before it, and it is replayed after the restart.
        """
        stopping.append(True)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def forget_revoked(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        """Drop the Bloom filters of exact partitions that leave this worker, their gap positions and
        any commit of theirs in flight (``commits.forget``).

        While a partition is away, its new owner adds digests to the table; a filter kept from
        before would answer "certainly new" for them. When the partition comes back, the first
        event rebuilds the filter from the (restored) table, and gap tracking starts again from
        the committed offset.
        """
        commits.forget(internals(app.consumer), revoked)
        for tp in revoked:
            if gaps is not None:
                gaps.tracker.forget(tp.topic, tp.partition)
            if tp.topic == probes.get_topic_name() and exact_by_part.pop(tp.partition, None) is not None:
                exact_built.pop(tp.partition, None)
                log.info("exact partition %d revoked: its Bloom filter is dropped", tp.partition)

    async def guarded(stream: StreamT, stage: str, work: Callable[[list], Awaitable[bool]],
                      discard: Callable[[], None] = lambda: None) -> None:
        """An agent's loop: ``work`` on each batch of the stream, until a batch is not done.

        A batch that is not done is held for replay (``hold``), its staged table writes are
        dropped, and the agent ends: when the worker is stopping (``work`` returned False), and
        when ``work`` raised. Why the second: Faust restarts a crashed agent in the same process
        with its batch acked, so the batch is committed unprocessed (the gap filler's
        NOT_COORDINATOR after a broker restart lost 2,039 of 20,000 verdicts so in the CI of
        10ff71b). Now any exception stops the worker for its supervisor to restart (``failed``):
        the new process replays the batch with fresh in-memory state (Bloom filters, caches), as
        after a SIGKILL. A message that failed before is replayed on its own and item by item, and
        an item that keeps failing is quarantined (``one_by_one``, ``quarantine.py``).
        """
        def names_known(msg: Message | Msg) -> bool:
            return journal.known(item_ids(stage, msg.value))

        sizes, times = metrics.batch(stage)
        async for batch in batches(stream):
            sizes.observe(len(batch))
            t0 = time.perf_counter()
            if journal.attempts:
                journal.forget_committed(committed_offset)
            if journal.attempts and any(journal.suspect(where(msg)) for _, msg in batch):
                if await one_by_one(stage, batch, work, discard, lambda msg: journal.suspect(where(msg))):
                    continue
                return
            try:
                if await work(batch):
                    times.observe(time.perf_counter() - t0)
                    continue
            except Exception as e:  # noqa: BLE001 - whatever it was, the batch must not be acked
                discard()
                if journal.documents and counts_as_poison(e) and any(names_known(msg) for _, msg in batch):
                    log.warning("%s agent: %r in a batch that names a quarantined document; the batch is "
                                "replayed message by message in this process", stage, e)
                    if await one_by_one(stage, batch, work, discard, names_known):
                        continue
                    return
                if counts_as_poison(e):
                    journal.failed([where(msg) for _, msg in batch])
                failed(stage, batch, e)
                return
            discard()
            hold(batch)
            return

    def where(msg: Message | Msg) -> tuple[str, int, int]:
        return msg.topic, msg.partition, msg.offset

    async def one_by_one(stage: str, batch: list, work: Callable[[list], Awaitable[bool]],
                         discard: Callable[[], None], split: Callable[[Message | Msg], bool]) -> bool:
        """A batch with a message that failed before or that names a quarantined document
        (``quarantine``): each message on its own, those that ``split`` names (and any that fails
        on its own) item by item, so that only the failing item is retried, and dead-lettered on
        the ``worker.quarantine_after``-th attempt of its message or its document, or at once when
        its document was quarantined before. False when the batch is not done (held from the failing message on, as in
        ``guarded``)."""
        for i, (ev, msg) in enumerate(batch):
            m = where(msg)
            values: list[bytes | None] = list(items_of(stage, msg)) if split(msg) else [None]  # None: whole
            j = 0
            while j < len(values):
                value = values[j]
                one = msg if value is None else Msg(msg.topic, msg.partition, msg.offset, msg.key, value,
                                                    msg.timestamp)
                try:
                    if await work([(ev, one)]):
                        j += 1
                        continue
                except Exception as e:  # noqa: BLE001 - as in guarded
                    discard()
                    if value is None:
                        if counts_as_poison(e) and journal.failed([m]):  # it fails on its own: find the item now
                            log.warning("%s agent: %r in %s[%d]@%d on its own; it is replayed item by item",
                                        stage, e, *m)
                            values, j = list(items_of(stage, msg)), 0
                            continue
                        failed(stage, batch[i:], e)
                        return False
                    ids = item_ids(stage, value)
                    attempts = journal.failed_alone(m, ids) if counts_as_poison(e) else 0
                    known = journal.known(ids)
                    if not attempts or (attempts < journal.limit and not known):
                        failed(stage, batch[i:], e)
                        return False
                    try:
                        await quarantine(stage, m, j, msg, value, e, attempts, known, ids)
                        j += 1
                        continue
                    except Exception as e2:  # noqa: BLE001 - the dead letter did not go out: replay
                        failed(stage, batch[i:], e2)
                        return False
                discard()
                hold(batch[i:])
                return False
            journal.passed(m)
        return True

    def items_of(stage: str, msg: Message | Msg) -> list[bytes]:
        """A message as messages of one item each (``split_items``); an unreadable one is one item."""
        try:
            return split_items(stage, msg.value)
        except Exception:  # noqa: BLE001 - the stage will fail on it as a whole, and quarantine it so
            return [msg.value or b""]

    async def quarantine(stage: str, m: tuple[str, int, int], item: int, msg: Message | Msg, value: bytes,
                         e: BaseException, attempts: int, known: bool, ids: list[str]) -> None:
        """Send a poison item to the dead-letter topic and wait for the broker's ack: only then may
        its message be committed."""
        if stopping:
            raise RuntimeError("the worker is stopping")
        futs = await publish(dlq, [(msg.key, dead_letter(stage, m, item, value, e, attempts, known,
                                                         timestamp_ms(msg), ids))])
        await asyncio.wait(set(futs))
        for f in futs:
            f.result()
        log.error("%s agent: item %d of %s[%d]@%d (documents %s): %s; it is quarantined to %s", stage, item, *m,
                  ids, quarantine_detail(stage, e, attempts, known), dlq.get_topic_name())
        journal.quarantined(ids)
        counts["quarantined"] += 1
        counts["dlq"] += 1
        metrics.dlq.labels(REASON).inc()

    def failed(stage: str, batch: list, e: BaseException) -> None:
        """Hold a batch whose agent raised, and stop the worker for a restart (see ``guarded``)."""
        hold(batch)
        counts["agent.failures"] += 1
        first = batch[0][1] if batch else None
        where = f"{first.topic}[{first.partition}]@{first.offset}" if first is not None else "?"
        if stopping:  # shutting down already: the exit code stays what the stop set
            log.warning("%s agent: %r in a batch of %d from %s while stopping; the batch is held for replay",
                        stage, e, len(batch), where)
            return
        log.error("%s agent failed on a batch of %d messages from %s; the batch is held for replay", stage,
                  len(batch), where, exc_info=e)
        exit_for_restart(EXIT_FAILED, f"the {stage} agent failed: {e!r}")

    def delivery_failed(what: str, e: BaseException) -> None:
        """A record the broker did not take: no commit from now on (``DeliveryGuard``), and a restart."""
        counts["delivery.failures"] += 1
        log.error("records to %s were not delivered: %r; no offset is committed from now on", what, e)
        if not stopping:
            exit_for_restart(EXIT_FAILED, f"a delivery to {what} failed: {e!r}")

    def exit_for_restart(code: int, why: str) -> None:
        """Stop cleanly with ``code`` for the supervisor to restart the worker: it rejoins the group and
        resumes from the committed offsets, which stop before every held batch, so nothing is lost."""
        if app.stream_dedup_exit_code:  # type: ignore[attr-defined]  # one stop is under way
            return
        log.error("%s. Stopping with exit code %d so that the supervisor restarts this worker.", why, code)
        app.stream_dedup_exit_code = code  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGTERM)

    async def send_batches(out: dict[tuple[Any, int], list[bytes]],
                           records: dict[Any, list[Record]] | None = None) -> list | None:
        """Send the items gathered per (topic, partition), packed, and the keyed ``records`` per
        topic; returns the delivery futures.

        None when the worker is stopping, before or during the sends: the output may not reach
        the broker, so the caller holds its batch for replay (see ``hold`` and ``quiesce``)."""
        if stopping:
            return None
        futs: list = []
        for (tp, part), items in out.items():
            futs += await publish(tp, [(None, body) for body in pack_batches(items)], part)
        out.clear()
        for tp, recs in (records or {}).items():
            futs += await publish(tp, recs)
        return None if stopping else futs

    async def publish(topic: faust.TopicT, records: list[Record], partition: int | None = None) -> list:
        """Send records (key, value) in order; returns their delivery futures.

        At least once, straight into the running aiokafka producer's batches, as the tables'
        changelog records go (``BulkSender``): through Faust's ``Topic.send`` every record was a
        ``FutureMessage`` with callbacks, and the verdict records (verdicts plus unique or
        duplicate, two per document) were 9 % of a worker's CPU in the SMS profile. The partition,
        when not given, is the producer's default (murmur2 of the key), as Faust's. Exactly once
        keeps Faust's path: there a record belongs to the transaction of its source partition."""
        if sender is None:
            return [await topic.send(key=k, value=v, partition=partition) for k, v in records]
        return [d.future for d in await sender.send(topic.get_topic_name(), partition, records)]

    def to_decide(out: dict, msgs: list[ToDecide]) -> None:
        """Queue for the decide stage, on the partition that owns the document id."""
        for m in msgs:
            out.setdefault((answers, id_partition(m.id, n)), []).append(m.to_bytes())

    def to_index(out: dict, probe_list: list[Probe]) -> None:
        """Queue for the index stage, on each probe's band-key partition."""
        for pr in probe_list:
            out.setdefault((probes, pr.partition), []).append(pr.to_bytes())

    busy: set[str] = set()  # stream topics whose agent has a batch in hand
    in_hand: dict[tuple[str, int], int] = {}  # (topic, partition) -> lowest offset of a batch in hand
    holes = commits.HoleWatch()
    batch_done: dict[str, float] = {}  # stream topic -> when its agent last finished a batch

    if gaps is not None:
        @app.timer(interval=2.0)
        async def reread_skipped_tails() -> None:
            """Seek back where the consumer read the end of a partition that never reached the stream
            (see ``gaps.TailWatch``): else those documents wait for the partition's next event."""
            if app.rebalancing or stopping:
                gaps.tails.reset()
                return
            consumer = internals(app.consumer)
            now = time.monotonic()
            idle = {t for t in stream_topics if t not in busy and now - batch_done.get(t, 0.0) >= 1.0}
            reads = {(tp.topic, tp.partition): (consumer._read_offset.get(tp), consumer._committed_offset.get(tp),
                                                highwater(consumer, tp))
                     for tp in consumer.assignment() if tp.topic in stream_topics}
            for topic, part, offset in gaps.tails.check(gaps.tracker, reads, idle):
                log.warning("%s[%d]: offsets from %d on were read but never reached the stream; reading them "
                            "again", topic, part, offset)
                counts["gap.tail_rereads"] += 1
                await consumer.seek(TP(topic, part), offset)

        @app.timer(interval=2.0)
        async def read_commit_holes() -> None:
            """Read a partition again from an offset that holds its commit back because no agent ever
            processed it (``commits.HoleWatch``): a message the stream skipped unseen."""
            if app.rebalancing or stopping:
                holes.reset()
                return
            assert gaps is not None
            consumer = internals(app.consumer)
            found = {(tp.topic, tp.partition): commits.head_hole(
                         commits.commit_base(consumer, tp), consumer._acked.get(tp) or (),
                         [(iv.begin, iv.end) for iv in consumer._gap.get(tp) or ()])
                     for tp in consumer.assignment() if tp.topic in stream_topics}
            for (topic, part), first, end in holes.check(found, in_hand):
                tp = TP(topic, part)
                if end - first > gaps.tracker.max_fill:
                    log.warning("%s[%d]: offsets %d..%d hold the commit back; too many to read again here",
                                topic, part, first, end - 1)
                    continue
                try:
                    msgs = await gaps.read(topic, part, first, end)
                except Exception as e:  # noqa: BLE001 - the hole stays, and is looked at again later
                    log.warning("%s[%d]: offsets %d..%d hold the commit back and could not be read: %r",
                                topic, part, first, end - 1, e)
                    continue
                present = sorted(m.offset for m in msgs)
                for lo, hi in commits.runs(sorted(set(range(first, end)) - set(present))):
                    commits.mark_processed(consumer, tp, lo, hi)  # no record there: a transaction marker
                if present:
                    log.warning("%s[%d]: offsets %d..%d hold the commit back: never processed here (%d "
                                "record(s)); reading the partition again from %d", topic, part, first, end - 1,
                                len(present), present[0])
                    counts["commit.hole_rereads"] += 1
                    metrics.holes.labels(topic).inc()
                    await consumer.seek(tp, present[0])

    async def batches(stream: StreamT) -> AsyncIterator[list[tuple[EventT, Message | Msg]]]:
        """The stream in batches of (event, message), each message preceded by any the stream skipped.

        A batch is acked (and later committed) only after the agent's loop body is done with it.
        """
        # (Faust's Stream: the abstract StreamT that agents are typed with does not declare take_events)
        async for events in cast(Stream, stream).take_events(w.batch_max, within=w.batch_within_s):
            topic = events[0].message.topic if events else ""
            busy.add(topic)
            out: list[tuple[EventT, Message | Msg]] = []
            try:
                for ev in events:
                    msg = ev.message
                    if msg.topic == skip_topic and injected_skip(msg):
                        continue
                    if gaps is not None:
                        missed = await gaps.missing(msg.topic, msg.partition, msg.offset,
                                                    start=committed_offset(msg.topic, msg.partition))
                        if missed:
                            skipped_offsets_done(msg.topic, msg.partition, min(m.offset for m in missed),
                                                 msg.offset - 1)
                        out.extend((ev, m) for m in missed)
                    out.append((ev, msg))
            except Exception as e:  # noqa: BLE001 - the gap filler gave up (see gaps._retried)
                failed(f"{topic} gap filling", [(ev, ev.message) for ev in events], e)
                return
            for _, m in out:
                key = (m.topic, m.partition)
                in_hand[key] = min(in_hand.get(key, m.offset), m.offset)
            yield out
            for _, m in out:
                in_hand.pop((m.topic, m.partition), None)
            busy.discard(topic)  # the agent's body is done with the batch
            batch_done[topic] = time.monotonic()

    def injected_skip(msg: Message) -> bool:
        """``worker.inject_skip``: whether to drop this message as a skip the gap filler misses: not
        processed, not acked (as ``hold`` does), and the gap tracking told it was seen; off by default."""
        stage_batches["skip"] += 1
        if stage_batches["skip"] != int(skip_at):
            return False
        counts["injected_skips"] += 1
        msg.acked = True
        if gaps is not None:
            gaps.tracker.last[(msg.topic, msg.partition)] = msg.offset
        log.info("injected skip: %s[%d]@%d dropped unseen", msg.topic, msg.partition, msg.offset)
        return True

    def committed_offset(topic: str, partition: int) -> int | None:
        """Where this worker's consumer began the partition: its committed offset at assignment.

        Faust keeps it in ``_committed_offset`` (private; set by its seek on assignment, 0 stored as
        None, dropped on revocation). Its recovery resumes the streams before that seek, so the first
        messages can come before the value: None then, and the gap filler asks the broker."""
        return getattr(app.consumer, "_committed_offset", {}).get(TP(topic, partition))

    def skipped_offsets_done(topic: str, partition: int, first: int, last: int) -> None:
        """Let the commit move past offsets the stream skipped and the gap filler processed.

        A commit passes only offsets that an event acked (``commits.strict_new_offset``); skipped
        messages never pass through the stream, so without this the partition's committed offset
        stays before the gap for good (seen in the slow-consumer test: three probes partitions
        stuck at offset 1 while everything was processed; a restart would replay them all). The
        range goes into the consumer's gaps (``_gap``, where Faust puts offsets with no message,
        such as transaction markers); it joins the acked offsets only once a later offset is acked,
        that is after the batch that processes the skipped messages is done."""
        commits.mark_processed(app.consumer, TP(topic, partition), first, last)

    def under(event) -> _Under:
        """``with under(event):`` makes ``event`` Faust's current event: a table write goes to the
        current event's partition.

        Inside a batch, Faust's own current event is just the last one buffered; the agents set
        the event of the message they are working on.
        """
        return _Under(event, worked)

    async def settled() -> None:
        """Wait until no rebalance is under way: its assignment known and Faust's restore of the
        tables from their changelogs done (``app.rebalancing`` turns False only after that).

        Why: Faust (``stream_wait_empty`` off) lets an agent go on with a batch it took before a
        rebalance, and its restore writes the changelog's records into the same RocksDB files the
        agents read and write. A batch that read a bucket in the middle of the restore read an
        older value; one that wrote a bucket before the restore wrote an older record over it had
        its write undone. Either way a document's entry went missing and its later copies were
        judged unique (the broker-restart fault test: 6 and 7 of 20,000 verdicts, in the CIs of
        98ef2c8 and c14d0e6, all near or exact copies of documents being indexed as the group
        rebalanced). No time limit here: a rebalance that does not end is the stall watchdog's
        (``watch_partitions`` exits after twice ``worker.stall_timeout_s``)."""
        while app.rebalancing and not stopping:
            await asyncio.sleep(0.05)

    async def split_moved(batch: list) -> tuple[list, list]:
        """``batch`` as (its messages of partitions this worker owns, those of partitions it no longer
        owns), once any rebalance under way is over (``settled``); the second are held (``hold``)
        for the new owner, which replays them from the committed offset.

        Why: Faust (``stream_wait_empty`` off) lets an agent finish a batch it took before a
        rebalance moved the batch's partitions away, so a worker went on publishing for a partition
        that another worker had begun to replay. A cluster join sent from here could then reach the
        original after the leave that the new owner sent after it, and the original's record keep a
        member it no longer had (the likely cause of the one wrong cluster record in the 3-worker
        convergence test, in the CI of 167d114); a state written from here could reach the
        changelog after the new owner's."""
        await settled()
        mine = {(tp.topic, tp.partition) for tp in app.consumer.assignment()}
        if {(m.topic, m.partition) for _, m in batch} <= mine:
            return batch, []
        kept = [(ev, m) for ev, m in batch if (m.topic, m.partition) in mine]
        moved = [(ev, m) for ev, m in batch if (m.topic, m.partition) not in mine]
        hold(moved)
        counts["moved_away"] += len(moved)
        log.info("%d message(s) of %s left unpublished: a rebalance moved their partitions away while the "
                 "batch was in hand; the new owner replays them", len(moved),
                 sorted({f"{m.topic}[{m.partition}]" for _, m in moved}))
        return kept, moved

    def rebalanced_since(count: int) -> bool:
        """Whether a rebalance began after ``app.rebalancing_count`` was ``count`` (or is under way)."""
        return app.rebalancing or app.rebalancing_count != count

    def overtaken(stage: str, batch: list, then: str) -> None:
        """Log that a rebalance began while ``batch`` was in hand, and what becomes of the batch.

        Its reads of the tables may predate the restore of a partition that went to another
        worker and came back with that worker's writes, or fall in the middle of a restore; what
        it computed from them is not written (see ``settled``)."""
        counts["overtaken"] += 1
        log.info("%s: a rebalance began while the batch was in hand (%d message(s) of %s); %s", stage,
                 len(batch), sorted({f"{m.topic}[{m.partition}]" for _, m in batch}), then)

    @app.agent(pages)
    async def prepare(stream: StreamT) -> None:
        await guarded(stream, "prepare", prepare_batch, ids_map.discard if ids_map is not None else lambda: None)

    async def prepare_batch(whole: list) -> bool:
        """Prepares a batch of page events; False when the worker is stopping."""
        raws = [(msg.value if msg.value is not None else b"", timestamp_ms(msg)) for _, msg in whole]
        # a batch of 1,024 SMS is prepared at once; one of long pages in slices (see byte_slices)
        for part in byte_slices([len(raw) for raw, _ in raws], w.prepare_slice_bytes):
            if stopping:
                return False
            if part.start:
                await asyncio.sleep(0)  # the worker's other agents go on between slices
            if not await prepare_slice(whole[part.start:part.stop], raws[part.start:part.stop]):
                return False
        return True

    async def prepare_slice(batch: list, raws: list) -> bool:
        """Prepares page events and sends what they make; False when the worker is stopping (the
        caller then holds its whole batch for replay)."""
        out: dict = {}
        if ids_map is not None:
            await settled()  # the ids table is read and written over a finished restore (see settled)
        t0 = time.perf_counter()
        # the whole slice at once: detectors do their numpy work per batch (Detector.prefetch)
        results: list[Prepared | Exception] = preparer.prepare_many(raws)
        per_event = (time.perf_counter() - t0) / max(1, len(batch))
        if ids_map is not None:  # in one go, from settled() on: no restore can begin in between
            results = [p if isinstance(p, Exception) else admitted(ev, p) for (ev, _), p in zip(batch, results)]
        for (ev, msg), (raw, _), p in zip(batch, raws, results):
            if stopping:
                return False
            worked.add((msg.topic, msg.partition))
            if slow_stage:
                await injected_delay("prepare")
            counts["in"] += 1
            if isinstance(p, Exception):  # bad input never stops the worker
                reason, detail = (p.reason, p.detail) if isinstance(p, Rejected) else ("internal_error", repr(p))
                if reason == "internal_error":
                    log.error("prepare failed on %s[%d]@%d", msg.topic, msg.partition, msg.offset, exc_info=p)
                counts[f"dlq.{reason}"] += 1
                counts["dlq"] += 1
                metrics.dlq.labels(reason).inc()
                await publish(dlq, [(msg.key, dead_letter_record(
                    reason, detail, raw, topic=msg.topic, partition=msg.partition, offset=msg.offset,
                    timestamp=timestamp_ms(msg)))])
                continue
            if poison_stage:
                injected_poison("prepare", p.id)
            counts["prepared"] += 1
            prepare_s.observe(per_event)
            fingerprint, probe_list = fan_out(p, n)
            out.setdefault((probes, digest_partition(p.digest, n)), []).append(fingerprint.to_bytes())
            to_index(out, probe_list)
        injected_failure("prepare")
        if await send_batches(out) is None:
            return False
        if ids_map is not None:
            await ids_map.send()
        metrics.events_in.inc(len(batch))
        if w.inject_stall and not counts["injected_stalls"]:
            # a partition assigned and never fetched again (faust-streaming #175), on purpose
            counts["injected_stalls"] += 1
            app.consumer.pause_partitions({tp for tp in app.consumer.assignment()
                                           if tp.topic == pages.get_topic_name()})
        return True

    def admitted(ev: EventT, p: Prepared) -> Prepared | Rejected:
        """``p``, or its rejection when its id came before with other content (``admit_id``).

        The table is written at once (a replay, here or on the partition's next owner, then finds
        the same digest and goes through) and its changelog records go with the batch's output.
        Written again when the digest is already there: a batch held at shutdown keeps its local
        writes and drops their changelog records (``TableMapping.discard``), and its replay must
        send them, or a partition restored elsewhere would not know the id."""
        assert ids_map is not None
        key = p.id.encode("utf-8", "surrogatepass")
        with under(ev):
            try:
                admit_id(ids_map.get(key), p)
            except Rejected as e:
                return e
            ids_map[key] = p.digest
        return p

    def drop_index_batch() -> None:
        """The index agent's table writes of a batch it holds for replay (see ``hold``)."""
        exact_data.discard()
        exact_map.discard()
        index_data.discard()
        index_map.discard()

    @app.agent(probes)
    async def index(stream: StreamT) -> None:
        """The exact check and the probes of the band keys, on the partitions they are routed to."""
        await guarded(stream, "index", index_batch, drop_index_batch)

    async def index_batch(batch: list) -> bool:
        """Checks and probes a batch, sends the answers, then writes the tables; False when the
        worker is stopping (see quiesce).

        The tables are read and written only between rebalances, over tables that Faust has
        finished restoring (``settled``): a batch that a rebalance overtook before its answers went
        out is done again once the rebalance is over, and one overtaken while they went out is held
        for replay without its table writes (Faust's seek at the end of the rebalance reads its
        messages again, here or at their partition's new owner)."""
        batch, _ = await split_moved(batch)
        fresh_filters()
        rebalances = app.rebalancing_count
        out: dict = {}
        verified = index_stage.candidates
        in_batch: list[tuple[Any, Probe]] = []
        for ev, msg in batch:
            if stopping:
                return False
            with under(ev):
                for item in unpack_batch(msg.value):
                    it = index_item(item)
                    if poison_stage:
                        injected_poison("index", it.id)
                    if isinstance(it, Prepared):
                        t0 = time.perf_counter()
                        if slow_stage:
                            await injected_delay("exact")
                        msgs, probe_list = exact_stage(exact_store(msg.partition), it, n)
                        exact_s.observe(time.perf_counter() - t0)
                        counts["exact.in"] += 1
                        counts["exact.copies"] += msgs[0].cand is not None
                        to_index(out, probe_list)  # only for a message from a version before fan_out
                        to_decide(out, msgs)
                        continue
                    if it.partition != msg.partition:
                        log.error("probe for partition %d arrived on %d: partition counts differ",
                                  it.partition, msg.partition)
                    in_batch.append((ev, it))
        for ev, it in index_stage.in_order(in_batch):  # (ts, id) order: see there why
            if stopping:
                return False
            with under(ev):
                if slow_stage:
                    await injected_delay("index")
                counts["index.probes"] += 1
                t0 = time.perf_counter()
                to_decide(out, index_stage.process(it))
                index_s.observe(time.perf_counter() - t0)
        injected_failure("index")
        if rebalanced_since(rebalances):  # nothing has gone out: the whole batch again, afterwards
            drop_index_batch()
            overtaken("index", batch, "it is done again once the rebalance is over")
            return await index_batch(batch)
        if await send_batches(out) is None:
            return False
        # The answers went out (a replay answers the same or, over the restored tables, better),
        # the table writes do not: sent from here after the writes of a worker that owned one of
        # these partitions meanwhile, a bucket's older value would end its changelog, and a later
        # restore would lose the entries written in between.
        if rebalanced_since(rebalances):
            drop_index_batch()
            hold(batch)
            overtaken("index", batch, "answered; its table writes are left out and it is replayed")
            return True
        counts["index.writes"] += index_data.flush(under) + exact_data.flush(under)
        metrics.candidates.inc(index_stage.candidates - verified)
        await exact_map.send()
        await index_map.send()
        return True

    @app.agent(answers)
    async def decide_agent(stream: StreamT) -> None:
        await guarded(stream, "decide", decide_batch, decide_data.discard)

    async def decide_batch(batch: list) -> bool:
        """Decides a batch, delivers its verdicts, then stores the documents' states; False when
        the worker is stopping.

        As in ``index_batch``, the states are read and written only between rebalances: a batch
        that a rebalance overtook before its output went out is decided again once it is over, one
        overtaken while its verdicts went out is held for replay without storing its states."""
        batch, _ = await split_moved(batch)
        rebalances = app.rebalancing_count
        out: dict = {}
        records: dict = {}  # topic -> [(key, value)]: verdicts, unique / duplicate, clusters
        # counted once the batch's output goes out: a batch decided again without its moved
        # messages (below) does not count the first pass
        tally: Counter[str] = Counter()
        shown: Counter[tuple[str, str, str]] = Counter()  # verdicts by metric labels
        for ev, msg in batch:
            if stopping:
                return False
            with under(ev):
                for item in unpack_batch(msg.value):
                    if slow_stage:
                        await injected_delay("decide")
                    m = ToDecide.from_item(item)
                    if poison_stage:
                        injected_poison("decide", m.id)
                    tally[f"decide.{m.kind}"] += 1
                    t0 = time.perf_counter()
                    v = decide.apply(m)
                    decide_s.observe(time.perf_counter() - t0)
                    # cluster joins/leaves go to the original's id partition
                    to_decide(out, decide.outbox)
                    if decide.cluster is not None:
                        c = decide.cluster
                        tally["clusters"] += 1
                        records.setdefault(clusters, []).append(
                            (c.id.encode("utf-8", "surrogatepass"), json_record(c.to_dict())))
                    if v is not None:
                        key = v.id.encode("utf-8", "surrogatepass")
                        body = json_record(v.to_dict())
                        tally["verdicts"] += 1
                        tally["revisions"] += v.revision > 0
                        tally[f"verdict.{v.verdict}" + (f".{v.match}" if v.match else "")] += 1
                        shown[(v.verdict, v.match or "", v.detector or "")] += 1
                        records.setdefault(verdicts, []).append((key, body))
                        records.setdefault(unique if v.verdict == "unique" else duplicate, []).append((key, body))
                    if m.kind in ("join", "leave"):
                        continue
                    st = decide.last
                    if st is not None and not st.complete:
                        pending.setdefault(m.id, (time.monotonic(), msg.partition))
                    else:
                        pending.pop(m.id, None)
        if rebalanced_since(rebalances):  # one began while deciding: nothing of this pass went out
            decide_data.discard()
            overtaken("decide", batch, "it is decided again once the rebalance is over")
            return await decide_batch(batch)
        counts.update(tally)
        metrics.clusters.inc(tally["clusters"])
        metrics.revisions.inc(tally["revisions"])
        for labels, k in shown.items():
            metrics.verdict(*labels).inc(k)
        futs = await send_batches(out, records)
        if futs:
            # wait, not gather: a cancelled agent must not cancel the producer's batch futures
            await asyncio.wait(set(futs))
            for f in futs:
                f.result()  # a failed delivery fails the batch (see guarded)
        injected_failure("decide")
        if futs is None or stopping:  # also after delivery: the states can no longer be written; replay
            return False
        # the states that say "emitted" are stored only now that the verdicts are delivered: after
        # a crash before this line the batch is replayed into the old states and emits again.
        # After a rebalance began they are not stored here: a partition that moved away is
        # replayed by its new owner into the state it restored, after this output, and one that
        # stays may have been restored with another owner's states meanwhile.
        if rebalanced_since(rebalances):
            decide_data.discard()
            hold(batch)
            overtaken("decide", batch, "its verdicts went out; its states are left out and it is replayed")
            return True
        counts["decide.writes"] += decide_data.flush(under)
        await decide_map.send()
        return True

    async def watch_partitions() -> None:
        """Exit for a restart when an assigned partition stalls (see ``watchdog``)."""
        now = time.monotonic()
        if app.rebalancing:
            stalls.reset(now)
            rebalancing_since[:] = rebalancing_since or [now]
            if w.stall_timeout_s and now - rebalancing_since[0] > 2 * w.stall_timeout_s:
                stall_exit(f"rebalance/recovery has not finished in {now - rebalancing_since[0]:.0f} s")
            return
        rebalancing_since.clear()
        consumer = internals(app.consumer)
        tps = [tp for tp in consumer.assignment() if tp.topic in stream_topics]
        if not tps or not (w.stall_timeout_s or w.stall_nudge_s):
            return
        ends = await consumer.highwaters(*tps)
        positions: dict[TP, tuple[int | None, int | None]] = {}
        for tp in tps:
            read = consumer._read_offset.get(tp)
            positions[tp] = (read + 1 if read is not None else consumer._committed_offset.get(tp), ends.get(tp))
        metrics.lag.clear()
        for tp, (pos, end) in positions.items():
            metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, (end or 0) - (pos or 0)))
        metrics.assigned.set(len(tps))
        stalled = stalls.observe(now, positions, {tp for tp in tps if (tp.topic, tp.partition) in worked})
        worked.clear()
        for tp in stalls.to_nudge(now):
            await nudge(tp, positions[tp][0])
        if stalled:
            stall_exit("; ".join(f"{tp.topic}[{tp.partition}] lag {lag}, no progress for {idle:.0f} s"
                                 for tp, lag, idle in stalled))

    async def nudge(tp: TP, pos: int | None) -> None:
        """The first remedy for a stalled partition (see ``watchdog``): put it back in Faust's fetch
        set and seek it to the first offset not yet processed here. Idempotent stages make a
        re-read harmless; the log line records which of Faust's sets held the partition."""
        consumer = internals(app.consumer)
        last = gaps.tracker.last.get((tp.topic, tp.partition)) if gaps is not None else None
        known = (pos, None if last is None else last + 1, committed_offset(tp.topic, tp.partition))
        committed = gaps.committed if gaps is not None else None
        ask = functools.partial(committed, tp.topic, tp.partition) if committed is not None else None
        target, source = await asyncio.get_running_loop().run_in_executor(None, nudge_target, known, ask)
        view = {"active": tp in consumer._get_active_partitions(), "paused": tp in consumer._paused_partitions,
                "buffer_full": tp in consumer._buffered_partitions, "flow": consumer.flow_active,
                "read": consumer._read_offset.get(tp)}
        log.warning("%s[%d]: lag and no progress for over %.0f s (consumer: %s); resuming it and seeking to %s (%s)",
                    tp.topic, tp.partition, w.stall_nudge_s, view, target, source)
        counts["stall.nudges"] += 1
        consumer.on_buffer_drop(tp)  # Faust's own way back from its buffer-full set
        consumer.resume_partitions({tp})
        if target is not None:
            await consumer.seek(tp, target)

    def stall_exit(why: str) -> None:
        stall_state["stalled"] = why
        exit_for_restart(EXIT_STALLED, f"stalled: {why}")

    if w.state_flush_s > 0:
        @app.timer(interval=w.state_flush_s)
        async def flush_state() -> None:
            """Turn memtables into SST files on a clock, not only when they fill.

            RocksDB drops TTL-expired entries only when it compacts, and compacts only files: at a
            low input rate a memtable would fill (and its WAL grow) for hours before the first
            entry could expire. Flushing also keeps one version of each rewritten bucket instead of
            every one (the WAL holds them all). ``wait=False``: RocksDB's background threads do the
            flushes, so the event loop (and the verdict latency) does not wait for 18 of them."""
            flushed = 0
            for t in (exact_t, index_t, decide_t):
                for db in list(getattr(t.data, "_dbs", {}).values()):
                    db.flush(wait=False)
                    flushed += 1
            counts["state.flushes"] += flushed

    if w.heap_trim_s > 0:
        @app.timer(interval=w.heap_trim_s)
        async def trim_heap() -> None:
            """Return free heap pages to the system (see ``heap``): RSS follows the memory in use."""
            counts["heap.trims"] += heap.trim()

    if w.gc_threshold:
        @app.task
        async def settle_collector() -> None:
            """Start-up is over (Faust starts app tasks once the tables are recovered): freeze what it
            made out of the garbage collector's walks (see ``collector``)."""
            counts["gc.frozen"] = collector.settle(w.gc_threshold, collect=True)
            log.info("garbage collector: %d start-up objects frozen, a young pass every %d allocations",
                     counts["gc.frozen"], w.gc_threshold)

    @app.timer(interval=10.0)
    async def report() -> None:
        try:
            await watch_partitions()
        except Exception as e:  # a failed offsets request must not stop the reports
            log.warning("partition watch skipped: %r", e)
        owned = {tp.partition for tp in app.consumer.assignment() if tp.topic == answers.get_topic_name()}
        for i in [i for i, (_, part) in pending.items() if part not in owned]:
            del pending[i]  # its partition moved: the new owner waits for it now
        stale = [i for i, (t0, _) in pending.items() if time.monotonic() - t0 > 60]
        memory = gauges()
        if stale:
            log.warning("%d documents wait for probe answers for over 60 s (e.g. %s)", len(stale), stale[:5])
        counts["pending"] = len(pending)
        counts["pending_over_60s"] = len(stale)
        snapshot = dict(sorted(counts.items()))
        log.info("counts %s", json.dumps(snapshot))
        assigned = sorted(f"{tp.topic}[{tp.partition}]" for tp in app.consumer.assignment())
        await status_topic.send(key=worker_id.encode(), value=json.dumps(
            {"worker": worker_id, "at": time.time(), "uptime_s": round(time.time() - started, 1),
             "counts": snapshot, "assigned": assigned, "memory": memory}).encode())

    def gauges() -> dict[str, int]:
        """Set the gauges read at each scrape; returns the heap figures (the status report sends them too)."""
        metrics.pending.set(len(pending))
        metrics.up.set(0 if app.rebalancing else 1)
        clock = max((st.watermark or 0 for st in exact_by_part.values()), default=0)
        metrics.bloom_fill.clear()
        metrics.bloom_fp.clear()
        for part, st in exact_by_part.items():
            metrics.bloom_fill.labels(str(part)).set(st.bloom.live_fraction(clock))
            metrics.bloom_fp.labels(str(part)).set(st.bloom.estimated_fp_rate(clock))
        metrics.bloom_false_hits.set(sum(st.bloom_fp for st in exact_by_part.values()))
        in_heap, in_rocksdb = heap.usage(), budget.usage()
        metrics.rocksdb_memory.set(in_rocksdb)
        for kind, value in in_heap.items():
            metrics.heap.labels(kind).set(value)
        tables = Path(app.conf.tabledir)
        for name in ("exact", "index", "decide") + (("ids",) if ids_t is not None else ()):
            metrics.state_bytes.labels(name).set(sum(f.stat().st_size for d in tables.glob(f"{name}-*.db")
                                                     for f in d.rglob("*") if f.is_file()))
        return dict(in_heap, rocksdb=in_rocksdb)

    @app.page("/metrics")
    async def metrics_page(web, request):
        gauges()
        return web.bytes(metrics.render(), content_type="text/plain")  # Prometheus text format 0.0.4

    web_dir = Path(__file__).parent / "web"
    static = {"uPlot.iife.min.js": "application/javascript", "uPlot.min.css": "text/css"}
    page_cache: dict[str, Any] = {"at": 0.0, "body": None}

    @app.page("/status")
    async def status_page(web, request):
        return web.html((web_dir / "status.html").read_text(encoding="utf-8"))

    @app.page("/static/{name}")
    async def static_file(web, request, name: str):
        if name not in static:  # a fixed list: request paths never reach the file system
            return web.text("not found", status=404)
        return web.bytes((web_dir / "vendor" / name).read_bytes(), content_type=static[name])

    @app.page("/status.json")
    async def status_json(web, request):
        """The group's status from Kafka (lag, owners, worker reports, history, clusters); cached 5 s."""
        from ..status import page_status

        if page_cache["body"] is None or time.monotonic() - page_cache["at"] > 5:
            body = await asyncio.get_running_loop().run_in_executor(None, page_status, settings)
            page_cache.update(at=time.monotonic(), body=body)
        return web.json(page_cache["body"])

    @app.page("/healthz")
    async def healthz(web, request):
        """Liveness: fails once the stall watchdog fired (the process is on its way out)."""
        stalled = stall_state["stalled"]
        return web.json({"ok": stalled is None, "stalled": stalled}, status=200 if stalled is None else 503)

    @app.page("/ready")
    async def ready(web, request):
        """Readiness: not rebalancing or restoring tables."""
        rebalancing = bool(app.rebalancing)
        return web.json({"ready": not rebalancing}, status=503 if rebalancing else 200)

    app.stream_dedup_metrics = metrics  # type: ignore[attr-defined]
    app.stream_dedup_exit_code = 0  # type: ignore[attr-defined]
    app.stream_dedup_counts = counts  # type: ignore[attr-defined]
    app.stream_dedup_pending = pending  # type: ignore[attr-defined]
    return app


def ensure_topics(settings: Settings) -> None:
    """Create the topics of ``topics/topics.toml`` that are missing, as ``stream-dedup topics apply``
    does, and warn about drift (which, like ``apply``, it never changes).

    Why: a worker started before ``apply`` ran found no probes or answers topic (Faust creates only
    the tables' changelogs; it waits for a topic it subscribes to, and the outputs go through
    aiokafka directly), and the broker's auto-creation gave a topic it first wrote to one partition:
    the prepare agent failed on ``probes has no partition 1`` at every restart. A worker that may not
    create or describe topics (ACLs), or cannot read the definitions, logs why and goes on as before."""
    from ..topics import apply

    try:
        report = apply(settings)
    except Exception as e:  # noqa: BLE001 - the worker still starts; Faust reports what is missing
        log.warning("topics not checked against topics/topics.toml (%r); run `stream-dedup topics apply`", e)
        return
    for name in report.created:
        log.info("created topic %s as topics/topics.toml defines it", name)
    for name, problems in report.drift.items():
        log.warning("topic %s differs from topics/topics.toml: %s", name, "; ".join(problems))


def run_worker(settings: Settings) -> None:
    level = settings.worker.log_level
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ensure_topics(settings)
    heap.limit_arenas(settings.worker.malloc_arena_max)  # before RocksDB's and Kafka's threads start
    logging.getLogger("faust.transport.drivers.aiokafka").addFilter(ChangelogIdleFilter())
    app = build_app(settings)
    faust_level = {"WARNING": "warn", "CRITICAL": "crit"}.get(level, level.lower())
    worker = faust.Worker(app, loglevel=faust_level, quiet=True)
    # Faust's terminal spinner sets the root logger to DEBUG (at WARN and above) so that every debug
    # record turns it: that formats a record per message sent. Workers log to files; no spinner.
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as e:
        code = app.stream_dedup_exit_code  # type: ignore[attr-defined]
        sys.exit(code or e.code)
