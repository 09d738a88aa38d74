"""Prometheus metrics of one worker, served at ``/metrics`` on the worker's web port.

One registry per app (not the process-global default) so that tests can build several apps in one
process. Names follow Prometheus conventions: ``_total`` counters, ``_seconds`` histograms, base
units. The README's metrics reference lists them; ``tests/integration/test_ops.py`` checks names and
values after a real run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, disable_created_metrics, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BUCKET_BYTES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
_BATCH_MESSAGES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_VERDICT_LATENCY = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# Pending observations of one series are counted into its buckets at a scrape or when this many
# wait. Small: a pending value is a Python float in a list (32 bytes), and a worker nobody scrapes
# observes hundreds a second, and a large bound held megabytes between folds in the soak test.
_FOLD_AT = 1 << 10


class _Series:
    """One label set of a ``BatchedHistogram``: its pending observations, bucket counts and sum."""

    __slots__ = ("bounds", "pending", "counts", "sum")

    def __init__(self, bounds: np.ndarray):
        self.bounds = bounds
        self.pending: list[float] = []
        self.counts = np.zeros(len(bounds), dtype=np.int64)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        pending = self.pending
        pending.append(value)
        if len(pending) >= _FOLD_AT:
            self.fold()

    def fold(self) -> None:
        values, self.pending = self.pending, []
        if values:
            a = np.asarray(values, dtype=np.float64)
            # Prometheus buckets are "less than or equal": a value goes to the first bound >= it
            self.counts += np.bincount(np.searchsorted(self.bounds, a, side="left"), minlength=len(self.counts))
            self.sum += float(a.sum())


class BatchedHistogram:
    """A Prometheus histogram whose observations are counted into buckets at a scrape, not per call.

    Why: prometheus_client's ``Histogram.observe`` takes a lock and walks the bucket list in Python
    and the workers observe once per message per stage and once per bucket write: a visible
    share of the workers' CPU in a profile. Here ``observe`` appends to a
    list; ``collect`` (each scrape, or every ``_FOLD_AT`` values, which bounds the memory when
    nobody scrapes) counts them with one NumPy call per series. The exposition is the library's own
    (``HistogramMetricFamily``, registered as a custom collector), so scrapes read the same names,
    labels and ``le`` bounds as before. Observations and scrapes happen on the worker's event loop
    thread (agents and the web page), so no lock is needed.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...] = (),
                 buckets: tuple[float, ...] = (), registry: CollectorRegistry | None = None):
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = np.array([*buckets, float("inf")], dtype=np.float64)
        self.series: dict[tuple[str, ...], _Series] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> _Series:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        s = self.series.get(values)
        if s is None:
            s = self.series[values] = _Series(self.bounds)
        return s

    def observe(self, value: float) -> None:
        """For a histogram without labels."""
        self.labels().observe(value)

    def describe(self) -> list:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        les = [floatToGoString(b) for b in self.bounds]
        for values, s in self.series.items():
            s.fold()
            fam.add_metric(list(values), list(zip(les, np.cumsum(s.counts).tolist())), s.sum)
        yield fam


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self._children: dict[tuple, Any] = {}
        disable_created_metrics()  # no `*_created` series beside each counter: noise on every scrape
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, open fds
        self.verdict_latency = BatchedHistogram("stream_dedup_verdict_latency_seconds", "from a page record's "
                                                "broker timestamp until its first verdict is delivered",
                                                buckets=_VERDICT_LATENCY, registry=r)
        self.events_in = Counter("stream_dedup_events_in", "page events read from the input topic", registry=r)
        self.verdicts = Counter("stream_dedup_verdicts", "verdicts emitted (revisions included)",
                                ["verdict", "match", "detector"], registry=r)
        self.revisions = Counter("stream_dedup_revisions", "verdicts re-issued because an earlier page arrived late",
                                 registry=r)
        self.dlq = Counter("stream_dedup_dlq", "events sent to the dead-letter topic", ["reason"], registry=r)
        self.clusters = Counter("stream_dedup_cluster_updates", "cluster records published", registry=r)
        self.gaps = Counter("stream_dedup_gap_refetched", "messages the stream skipped and the worker re-read",
                            ["topic"], registry=r)
        self.holes = Counter("stream_dedup_commit_hole_rereads", "partitions read again from an offset that held "
                             "the commit back, never processed (stream/commits.py)", ["topic"], registry=r)
        self.stage_seconds = BatchedHistogram("stream_dedup_stage_seconds", "processing time of one message per stage",
                                              ("stage",), buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_messages = BatchedHistogram("stream_dedup_batch_messages", "messages in one agent batch per stage "
                                               "(small batches at a steady rate cost more CPU per event)",
                                               ("stage",), buckets=_BATCH_MESSAGES, registry=r)
        self.batch_seconds = BatchedHistogram("stream_dedup_batch_seconds", "wall time of one agent batch per "
                                              "stage, sends and table writes included (the other agents of the "
                                              "worker wait for the CPU parts of it)",
                                              ("stage",), buckets=_LATENCY_BUCKETS, registry=r)
        self.bucket_bytes = BatchedHistogram("stream_dedup_bucket_bytes", "size of a bucket after a write",
                                             buckets=_BUCKET_BYTES, registry=r)
        self.candidates = Counter("stream_dedup_candidates_verified", "bucket entries verified by detectors",
                                  registry=r)
        self.state_bytes = Gauge("stream_dedup_state_bytes", "RocksDB files of a table on this worker",
                                 ["table"], registry=r)
        self.rocksdb_memory = Gauge("stream_dedup_rocksdb_memory_bytes", "RocksDB's shared block cache in use "
                                    "(memtables, index and filter blocks included)", registry=r)
        self.heap = Gauge("stream_dedup_heap", "python_blocks: objects CPython's allocator holds; malloc_in_use, "
                          "malloc_free: bytes glibc hands out / keeps free (a leak grows the first two, "
                          "fragmentation the last)", ["kind"], registry=r)
        self.bloom_fill = Gauge("stream_dedup_bloom_fill_ratio", "live cells of the exact stage's Bloom filter",
                                ["partition"], registry=r)
        self.bloom_fp = Gauge("stream_dedup_bloom_fp_rate_estimate", "estimated false-positive rate of the filter",
                              ["partition"], registry=r)
        self.bloom_false_hits = Gauge("stream_dedup_bloom_false_positives",
                                      "filter hits the digest store did not confirm, since the worker started",
                                      registry=r)
        self.lag = Gauge("stream_dedup_consumer_lag", "log end offset minus next offset to read",
                         ["topic", "partition"], registry=r)
        self.pending = Gauge("stream_dedup_pending_documents", "documents waiting for probe answers", registry=r)
        self.assigned = Gauge("stream_dedup_assigned_partitions", "partitions of stream topics this worker owns",
                              registry=r)
        self.up = Gauge("stream_dedup_worker_ready", "1 when the worker processes (not rebalancing)", registry=r)

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once: ``labels()`` takes a lock and builds its key
        on every call, and the agents call these once per message."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def stage(self, name: str) -> Any:
        """The processing-time histogram of one stage."""
        return self._child(self.stage_seconds, name)

    def batch(self, name: str) -> tuple[Any, Any]:
        """The batch-size and batch-time histograms of one stage's agent."""
        return self._child(self.batch_messages, name), self._child(self.batch_seconds, name)

    def verdict(self, verdict: str, match: str, detector: str) -> Any:
        """The counter of one kind of verdict."""
        return self._child(self.verdicts, verdict, match, detector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
