"""Topics as code: read ``topics/topics.toml``, create what is missing, report drift.

``apply`` never deletes, re-partitions or re-configures an existing topic: a wrong partition
count changes which worker owns which bucket, and fixing it is an operator's decision (see the
README, "Scaling out"). Drift is reported so that the decision is informed.

One exception, asked for with ``grow_input``: the input topic may gain partitions up to its
spec. Documents are routed to their index and decide partitions by hash, so more pages
partitions let more workers share the prepare stage. The one state keyed by a pages partition is
the id check's (``stages.admit_id``): an id that moves to a new partition is not known there, so
a second content under it, sent after the growth, is judged instead of rejected.
It matters when a producer created the topic first, with the broker's default of 1 partition.
Nothing else is grown: the internal topics' and changelogs' partitions are where the state
lives, and the compacted outputs would hold two latest records per id.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]
    role: str = ""


@dataclass
class ApplyReport:
    created: list[str] = field(default_factory=list)
    ok: list[str] = field(default_factory=list)
    drift: dict[str, list[str]] = field(default_factory=dict)
    grown: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (partitions before, after)

    @property
    def clean(self) -> bool:
        return not self.drift

    def as_dict(self) -> dict[str, Any]:
        return {"created": self.created, "ok": self.ok, "drift": self.drift,
                "grown": {name: list(counts) for name, counts in self.grown.items()}}


def topic_names(settings: Settings) -> dict[str, str]:
    t = settings.topics
    return {"pages": t.pages, "dlq": t.dlq, "verdicts": t.verdicts, "unique": t.unique,
            "duplicate": t.duplicate, "clusters": t.clusters, "internal": t.internal_prefix}


def load_specs(settings: Settings) -> list[TopicSpec]:
    path = settings.topics.definitions_dir() / "topics.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    names = topic_names(settings)
    specs = []
    for entry in data.get("topic", []):
        parts = entry.get("partitions", "default")
        parts = settings.topics.partitions if parts == "default" else int(parts)
        config = {k: str(v).format(state_retention_ms=2 * settings.engine.window_ms)
                  for k, v in entry.get("config", {}).items()}
        config.setdefault("min.insync.replicas", str(settings.kafka.min_insync_replicas))
        specs.append(TopicSpec(entry["name"].format(**names), parts, config, entry.get("role", "")))
    return specs


MAX_PARTITIONS_PER_CREATE = 10_000


def create_batches(specs: list[TopicSpec], limit: int = MAX_PARTITIONS_PER_CREATE) -> list[list[TopicSpec]]:
    """``specs`` in order, cut into runs of at most ``limit`` partitions together.

    Why: a KRaft controller refuses a CreateTopics request whose topics hold more than 10,000
    partitions in all (POLICY_VIOLATION, "Excessively large number of partitions per request"),
    and the project's topics are a dozen with ``topics.partitions`` each: from about 830
    partitions up, one request for all of them would fail. A topic larger than ``limit`` goes
    alone, for the broker to refuse with its own reason."""
    batches: list[list[TopicSpec]] = []
    total = limit + 1
    for spec in specs:
        if total + spec.partitions > limit:
            batches.append([])
            total = 0
        batches[-1].append(spec)
        total += spec.partitions
    return batches


def apply(settings: Settings, timeout: float = 30.0, *, grow_input: bool = False) -> ApplyReport:
    """Create missing topics; compare existing ones with their spec; never destroy data.
    ``grow_input``: give the pages topic its spec's partitions when it has fewer (see above)."""
    from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

    from .kafka_io import admin

    client = admin(settings)
    specs = load_specs(settings)
    meta = client.list_topics(timeout=timeout)
    report = ApplyReport()
    missing = [s for s in specs if s.name not in meta.topics]
    for batch in create_batches(missing):
        futures = client.create_topics(
            [NewTopic(s.name, num_partitions=s.partitions, replication_factor=settings.kafka.replication_factor,
                      config=s.config) for s in batch], operation_timeout=timeout)
        for name, fut in futures.items():
            try:
                fut.result()
                report.created.append(name)
            except Exception as e:  # TOPIC_ALREADY_EXISTS from a concurrent apply is fine
                if "TOPIC_ALREADY_EXISTS" in str(e):
                    report.ok.append(name)
                else:
                    raise
    existing = [s for s in specs if s.name in meta.topics]
    if existing:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in existing]
        configs = client.describe_configs(resources, request_timeout=timeout)
        by_name = {r.name: f.result() for r, f in configs.items()}
        for s in existing:
            problems = []
            have = len(meta.topics[s.name].partitions)
            growable = s.name == settings.topics.pages and have < s.partitions
            if growable and grow_input:
                (fut,) = client.create_partitions([NewPartitions(s.name, s.partitions)],
                                                  operation_timeout=timeout).values()
                fut.result()
                report.grown[s.name] = (have, s.partitions)
            elif have != s.partitions:
                hint = " (`topics apply --grow-input` adds them)" if growable else ""
                problems.append(f"partitions: have {have}, want {s.partitions}{hint}")
            current = by_name[s.name]
            for key, want in s.config.items():
                entry = current.get(key)
                got = entry.value if entry is not None else None
                if got != want:
                    problems.append(f"{key}: have {got}, want {want}")
            if problems:
                report.drift[s.name] = problems
            else:
                report.ok.append(s.name)
    return report
