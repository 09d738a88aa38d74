"""`stream-dedup status`: per-partition lag and ownership of the workers' consumer group."""
from __future__ import annotations

from typing import Any

from .config import Settings
from .kafka_io import admin, consumer


def group_status(settings: Settings, timeout: float = 10.0) -> dict[str, Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    group = settings.worker.app_id
    client = admin(settings)
    owners: dict[tuple[str, int], str] = {}
    state = "unknown"
    try:
        desc = client.describe_consumer_groups([group])[group].result(timeout)
        state = str(desc.state).split(".")[-1]
        for m in desc.members:
            for tp in (m.assignment.topic_partitions if m.assignment else []):
                owners[(tp.topic, tp.partition)] = f"{m.client_id}@{m.host}"
    except Exception as e:  # noqa: BLE001 - a group that never ran has no description
        state = f"unavailable ({e.__class__.__name__})"
    committed: dict[tuple[str, int], int] = {}
    try:
        res = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout)
        for tp in res.topic_partitions:
            committed[(tp.topic, tp.partition)] = tp.offset
    except Exception:  # noqa: BLE001
        pass
    probe = consumer(settings, f"{group}-status-probe")
    rows = []
    try:
        for (topic, part), off in sorted(committed.items()):
            lo, hi = probe.get_watermark_offsets(TopicPartition(topic, part), timeout=timeout)
            lag = hi - off if off >= 0 else hi - lo
            rows.append({"topic": topic, "partition": part, "committed": off, "end": hi, "lag": lag,
                         "owner": owners.get((topic, part))})
    finally:
        probe.close()
    total = sum(r["lag"] for r in rows)
    lines = [f"group {group}: {state}, total lag {total}"]
    lines += [f"  {r['topic']}[{r['partition']}] committed={r['committed']} end={r['end']} "
              f"lag={r['lag']} owner={r['owner'] or '-'}" for r in rows]
    return {"group": group, "state": state, "total_lag": total, "partitions": rows, "text": "\n".join(lines)}
