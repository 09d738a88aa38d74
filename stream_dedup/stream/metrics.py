"""Prometheus metrics of one worker, served at ``/metrics`` on the worker's web port.

One registry per app (not the process-global default) so that tests can build several apps in one
process. Names follow Prometheus conventions: ``_total`` counters, ``_seconds`` histograms, base
units. The README's metrics reference lists them; ``tests/integration/test_ops.py`` checks names and
values after a real run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BUCKET_BYTES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self._children: dict[tuple, Any] = {}
        self.events_in = Counter("stream_dedup_events_in", "page events read from the input topic", registry=r)
        self.verdicts = Counter("stream_dedup_verdicts", "verdicts emitted (revisions included)",
                                ["verdict", "match", "detector"], registry=r)
        self.revisions = Counter("stream_dedup_revisions", "verdicts re-issued because an earlier page arrived late",
                                 registry=r)
        self.dlq = Counter("stream_dedup_dlq", "events sent to the dead-letter topic", ["reason"], registry=r)
        self.clusters = Counter("stream_dedup_cluster_updates", "cluster records published", registry=r)
        self.gaps = Counter("stream_dedup_gap_refetched", "messages the stream skipped and the worker re-read",
                            ["topic"], registry=r)
        self.stage_seconds = Histogram("stream_dedup_stage_seconds", "processing time of one message per stage",
                                       ["stage"], buckets=_LATENCY_BUCKETS, registry=r)
        self.bucket_bytes = Histogram("stream_dedup_bucket_bytes", "size of a bucket after a write",
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

    def verdict(self, verdict: str, match: str, detector: str) -> Any:
        """The counter of one kind of verdict."""
        return self._child(self.verdicts, verdict, match, detector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
