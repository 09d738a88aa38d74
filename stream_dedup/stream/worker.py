"""The Kafka worker: a Faust app whose three agents move messages between the core's stages.

    pages ─► prepare ─┬─► {internal}.probes ────────► index ──► {internal}.answers ─► decide ─► verdicts
    (by id)  table "ids" │    partition = band key      tables       partition = doc id   table     unique / duplicate
                         │    (probes), digest (the     "index",                          "decide"
                         │    exact check)              "exact"
                         └─► pages.dlq (bad input, id_conflict)

Each stateful agent owns RocksDB-backed Faust tables whose changelogs are the ``*-changelog``
topics of ``topics.toml``. A table partition is read and written only while processing an event
of the same partition number, which is how the messages are routed: by page id (ids), by digest
(exact), by band-key partition (index), by document id (decide). All deciding happens in the
core; the parts here move bytes, order work around rebalances and keep counts:

- ``agents``: what each agent does with a batch;
- ``rebalance``: compute, deliver and store a batch with no rebalance in between;
- ``agent_loop``: replay, restart and quarantine of a batch that is not done;
- ``batch_source``: batches with skipped messages put back, and the re-read timers;
- ``stall_watch``, ``reports``, ``pages``: watching, counting and serving;
- ``internals``: every private part of Faust, aiokafka and rocksdict used, and the patches.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import faust
from faust.streams import current_event
from faust.types import TP, StreamT

from .. import gc_tuning
from ..config import Settings
from ..core.index import BucketIndex
from ..core.stages import DecideStage, DocStates, IndexStage, Preparer
from ..core.store import WriteBack
from . import commits, heap, internals, rocks
from .agent_loop import AgentLoop
from .agents import DecideAgent, IndexAgent, PrepareAgent
from .batch_source import BatchSource
from .changelog import TableMapping
from .context import WorkerContext
from .credentials import faust_credentials
from .exact_filters import ExactFilters
from .output import Output, Topics
from .pages import add_pages
from .rebalance import RebalanceGuard
from .restore import BulkRestore
from .reports import Reporter
from .stall_watch import StallWatch
from .status import REPORT_EVERY_S
from .watchdog import ChangelogIdleFilter

log = logging.getLogger("stream_dedup.worker")


def faust_app(settings: Settings) -> faust.App:
    """The Faust app with the worker's settings (no agents yet)."""
    w = settings.worker
    return faust.App(
        w.app_id,
        broker=[f"kafka://{hp.strip()}" for hp in settings.kafka.bootstrap.split(",")],
        broker_credentials=faust_credentials(settings.kafka.client),
        store=f"{rocks.SCHEME}://",
        datadir=str(Path(w.state_dir).absolute()),
        topic_partitions=settings.topics.partitions,
        topic_replication_factor=settings.kafka.replication_factor,
        topic_allow_declare=True,
        processing_guarantee=w.processing_guarantee,
        consumer_auto_offset_reset="earliest",
        web_enabled=w.web_port > 0,
        web_port=w.web_port or 6066,
        web_bind=w.web_host,
        web_host=w.web_host,
        consumer_metadata_max_age_ms=int(w.metadata_max_age_s * 1000),
        broker_client_id=w.display_name(),  # the owner `status` shows for a partition
        broker_session_timeout=w.session_timeout_s,
        broker_heartbeat_interval=w.heartbeat_interval_s,
        consumer_group_instance_id=w.name if w.static_membership else None,
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        producer_linger=w.producer_linger_ms / 1000,
        producer_max_request_size=8 << 20,  # a state record can be up to the changelogs' 8 MiB
        producer_max_batch_size=w.producer_batch_bytes,
        producer_compression_type=None if w.producer_compression == "none" else w.producer_compression,
        stream_wait_empty=False,
        table_cleanup_interval=60.0,
        table_standby_replicas=w.standby_replicas,
        # no table contents or request routing over HTTP: the port serves metrics and status only
        web_tables_enabled=False,
        web_router_enabled=False,
    )


class Tables:
    """The worker's Faust tables, their changelog writers and the write-back layers over them.

    A batch's writes stay in its write-back layer until the batch is done, so that a batch held
    for replay leaves nothing behind, and each touched key makes one changelog record per batch."""

    def __init__(self, ctx: WorkerContext, topics: Topics, output: Output):
        settings, w = ctx.settings, ctx.settings.worker
        app, n = ctx.app, settings.topics.partitions
        # state ages out after two windows without a rewrite: RocksDB TTL here, retention on the changelog
        ttl_s = w.state_ttl_s or max(3600, 2 * settings.engine.window_ms // 1000)
        self.budget = rocks.Budget.of(w.rocksdb_memory_mb << 20)  # one memory budget for every database
        options = {"ttl": ttl_s, "write_buffer_size": w.rocksdb_write_buffer_mb << 20, "max_write_buffer_number": 2,
                   "budget": self.budget, "wal": w.rocksdb_wal}

        def table(name: str) -> Any:
            return app.Table(name, key_type=bytes, value_type=bytes, partitions=n, options=dict(options),
                             changelog_topic=topics.changelog(app, settings, name))

        self.exact, self.index, self.decide = table("exact"), table("index"), table("decide")
        self.ids = table("ids") if w.reject_id_conflicts else None  # the first content's digest of each id
        self.exact_map, self.index_map, self.decide_map = (TableMapping(t, output.sender)
                                                           for t in (self.exact, self.index, self.decide))
        self.ids_map = TableMapping(self.ids, output.sender) if self.ids is not None else None
        tag, scope = current_event, _event_partition
        self.exact_data = WriteBack(self.exact_map, tag=tag, scope=scope)
        self.index_data = WriteBack(self.index_map, tag=tag, scope=scope)
        # decide holds DocState objects: a state is decoded and encoded once per batch
        self.decide_data = WriteBack(DocStates(self.decide_map), tag=tag, scope=scope)

    def names(self) -> list[str]:
        return ["exact", "index", "decide"] + (["ids"] if self.ids is not None else [])

    def flush(self) -> int:
        """Turn memtables into SST files (RocksDB drops TTL-expired entries only from files);
        ``wait=False``: RocksDB's background threads do it. Returns how many databases."""
        flushed = 0
        for t in (self.exact, self.index, self.decide):
            for db in internals.table_databases(t):
                db.flush(wait=False)
                flushed += 1
        return flushed


def _event_partition(event: Any) -> int | None:
    return event.message.partition if event is not None else None


class Worker:
    """One stream-dedup worker: its Faust app, tables, agents, timers and pages."""

    def __init__(self, settings: Settings):
        internals.install()
        self.app = faust_app(settings)
        self.ctx = ctx = WorkerContext(self.app, settings)
        self.topics = Topics.of(self.app, settings)
        # no transactional producer writes these: a fetch that jumps there is a skip (commits.held_add_gap)
        self.app.stream_dedup_held_topics = {self.topics.probes.get_topic_name(),  # type: ignore[attr-defined]
                                             self.topics.answers.get_topic_name()}
        self.output = Output(ctx, self.topics)
        internals.attach(self.app, fetch_max_wait_ms=settings.worker.fetch_max_wait_ms,
                         fetch_min_bytes=settings.worker.fetch_min_bytes, delivery_guard=self.output.guard,
                         transaction_sender=self.output.sender if settings.worker.exactly_once else None,
                         restore=BulkRestore(settings, read_committed=settings.worker.exactly_once)
                         if settings.worker.bulk_restore else None)
        self.tables = tb = Tables(ctx, self.topics, self.output)
        self.preparer = Preparer(settings)
        log.info("segmenter and parsers loaded in %.1f s", self.preparer.warm())
        e = settings.engine
        self.filters = ExactFilters(self.app, tb.exact_data, tb.exact_map, window=e.window_ms,
                                    capacity=e.bloom_capacity, fp_rate=e.bloom_fp_rate,
                                    partitions=settings.topics.partitions)
        self.guard = RebalanceGuard(ctx)
        self.source = self.batch_source()
        self.loop = AgentLoop(ctx, self.output)
        index_stage = IndexStage(BucketIndex(tb.index_data, window=e.window_ms, max_bucket=e.max_bucket),
                                 self.preparer.detectors)
        index_stage.index.observe = ctx.metrics.bucket_bytes.observe
        self.prepare = PrepareAgent(ctx, self.output, self.preparer, self.guard, tb.ids_map)
        self.index = IndexAgent(ctx, self.output, index_stage, self.filters, (tb.exact_data, tb.exact_map),
                                (tb.index_data, tb.index_map))
        self.decide = DecideAgent(ctx, self.output, DecideStage(tb.decide_data), tb.decide_data, tb.decide_map)
        self.stalls = StallWatch(ctx, self.source)
        self.reporter = Reporter(ctx, self.filters, tb.budget, tb.names(), self.topics.status,
                                 self.topics.answers.get_topic_name())
        self.register()

    def batch_source(self) -> BatchSource:
        """Where the agents' batches come from (a test's worker may drop messages on purpose)."""
        return BatchSource(self.ctx, self.topics.stream_names())

    # -- what runs in the app
    def register(self) -> None:
        """Agents, signal handlers, timers and pages on the Faust app."""
        app, w = self.app, self.ctx.settings.worker
        app.agent(self.topics.pages, name="prepare")(self.prepare_agent)
        app.agent(self.topics.probes, name="index")(self.index_agent)
        app.agent(self.topics.answers, name="decide_agent")(self.decide_agent)
        app.on_before_shutdown.connect(self.quiesce)  # type: ignore[arg-type]
        app.on_partitions_revoked.connect(self.forget_revoked)  # type: ignore[arg-type]
        if self.source.inline:
            app.timer(interval=2.0, name="reread_skipped_tails")(self.source.reread_skipped_tails)
        app.timer(interval=2.0, name="read_commit_holes")(self.source.read_commit_holes)
        if w.state_flush_s > 0:
            app.timer(interval=w.state_flush_s, name="flush_state")(self.flush_state)
        if w.heap_trim_s > 0:
            app.timer(interval=w.heap_trim_s, name="trim_heap")(self.trim_heap)
        if w.gc_threshold:
            app.task(self.settle_collector)
        app.timer(interval=REPORT_EVERY_S, name="report")(self.report)
        add_pages(app, self.ctx, self.reporter)

    async def prepare_agent(self, stream: StreamT) -> None:
        await self.loop.run(self.source.batches(stream), "prepare", self.prepare_batch, self.prepare.discard)

    async def index_agent(self, stream: StreamT) -> None:
        """The exact check and the probes of the band keys, on the partitions they are routed to."""
        await self.loop.run(self.source.batches(stream), "index", self.index_batch, self.index.discard)

    async def decide_agent(self, stream: StreamT) -> None:
        await self.loop.run(self.source.batches(stream), "decide", self.decide_batch, self.decide.discard)

    async def prepare_batch(self, batch: list) -> bool:
        return await self.prepare.batch(batch)

    async def index_batch(self, batch: list) -> bool:
        return await self.guard.run("index", batch, self.index)

    async def decide_batch(self, batch: list) -> bool:
        return await self.guard.run("decide", batch, self.decide)

    async def quiesce(self, sender: Any, **kwargs: Any) -> None:
        """Stop writing once shutdown begins: Faust stops the consumer, flushes the producer, then the
        agents; a batch still in progress is held (its replay comes after the restart)."""
        self.ctx.stopping = True

    async def forget_revoked(self, sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        """Drop what belonged to partitions that leave this worker: Bloom filters, gap positions and
        commits in flight; they are rebuilt from the restored tables if the partitions come back."""
        commits.forget(internals.consumer(self.app), revoked)
        for tp in revoked:
            self.source.gaps.tracker.forget(tp.topic, tp.partition)
            if tp.topic == self.topics.probes.get_topic_name():
                self.filters.forget(tp.partition)

    async def flush_state(self) -> None:
        self.ctx.counts["state.flushes"] += self.tables.flush()

    async def trim_heap(self) -> None:
        """Return free heap pages to the system: RSS follows the memory in use."""
        self.ctx.counts["heap.trims"] += heap.trim()

    async def settle_collector(self) -> None:
        """Start-up is over (app tasks start once the tables are recovered): freeze what it made out of
        the garbage collector's walks."""
        w = self.ctx.settings.worker
        self.ctx.counts["gc.frozen"] = gc_tuning.settle(w.gc_threshold, collect=True)
        log.info("garbage collector: %d start-up objects frozen, a young pass every %d allocations",
                 self.ctx.counts["gc.frozen"], w.gc_threshold)

    async def report(self) -> None:
        try:
            await self.stalls.check()
        except Exception as e:  # noqa: BLE001 - a failed offsets request must not stop the reports
            log.warning("partition watch skipped: %r", e)
        await self.reporter.report()


def ensure_topics(settings: Settings) -> None:
    """Create the topics of ``topics.toml`` that are missing, as ``stream-dedup topics apply`` does,
    and warn about drift (which it never changes). A worker that may not create or describe topics
    (ACLs) logs why and goes on."""
    from .topics import apply

    try:
        report = apply(settings)
    except Exception as e:  # noqa: BLE001 - the worker still starts; Faust reports what is missing
        log.warning("topics not checked against topics.toml (%r); run `stream-dedup topics apply`", e)
        return
    for name in report.created:
        log.info("created topic %s as topics.toml defines it", name)
    for name, problems in report.drift.items():
        log.warning("topic %s differs from topics.toml: %s", name, "; ".join(problems))


def run_worker(settings: Settings, worker_class: type[Worker] = Worker) -> None:
    """Run a worker until it is stopped; exits with its restart code when it asked for one."""
    level = settings.worker.log_level
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ensure_topics(settings)
    heap.limit_arenas(settings.worker.malloc_arena_max)  # before RocksDB's and Kafka's threads start
    logging.getLogger("faust.transport.drivers.aiokafka").addFilter(ChangelogIdleFilter())
    worker = worker_class(settings)
    faust_level = {"WARNING": "warn", "CRITICAL": "crit"}.get(level, level.lower())
    runner = faust.Worker(worker.app, loglevel=faust_level, quiet=True)
    runner.spinner = None  # Faust's terminal spinner sets the root logger to DEBUG: no spinner
    try:
        runner.execute_from_commandline()
    except SystemExit as e:
        sys.exit(worker.ctx.exit_code or e.code)
