"""What `stream-dedup status` costs as the partitions grow, on a real local broker.

For each ``topics.partitions`` asked for, the project's topics are created (`topics apply`), every
source partition (pages and the internal repartition topics) gets one transactional record, and the
workers' group is committed up to it. That is the worst case for `status`: every partition lags by
its commit marker, so every one is read to its end to tell the marker from an event. The table
gives the median time of `status` (``group_status``, as the status page calls it every 10 s) and,
measured in the same run on the same partitions, the partitions' offsets read in one batch
(``kafka_io.watermarks``) against one ``get_watermark_offsets`` round trip per partition (what
`status` did before).

    python bench/status_scale.py [--partitions 6 64 256 1024] [--repeat 5]

Starts its own broker on port 19194 unless KAFKA_BOOTSTRAP names one.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, median_time, save, settings_for, table  # noqa: E402

from confluent_kafka import KafkaException, Producer, TopicPartition  # noqa: E402

from stream_dedup.config import Settings  # noqa: E402
from stream_dedup.stream.kafka_io import client_config, consumer, watermarks  # noqa: E402
from stream_dedup.stream.status import group_status, source_topics  # noqa: E402
from stream_dedup.stream.topics import apply  # noqa: E402


def fill(s: Settings) -> list[tuple[str, int]]:
    """One committed transactional record on every source partition, the group committed up to it;
    the source partitions. Long timeouts: a single broker takes a while to elect leaders for
    thousands of new partitions."""
    parts = [(topic, p) for topic in source_topics(s) for p in range(s.topics.partitions)]
    tp = Producer(client_config(s, **{"transactional.id": s.worker.app_id, "message.timeout.ms": 240_000,
                                      "transaction.timeout.ms": 300_000}))
    for attempt in range(6):
        try:
            tp.init_transactions(30)
            break
        except KafkaException as e:  # retriable: the transaction coordinator is still loading
            if attempt == 5 or not e.args[0].retriable():
                raise
    tp.begin_transaction()
    for topic, p in parts:
        tp.produce(topic, b"x", partition=p)
    tp.commit_transaction(300)
    c = consumer(s, s.worker.app_id)
    try:
        c.commit(offsets=[TopicPartition(topic, p, 1) for topic, p in parts], asynchronous=False)
    finally:
        c.close()
    return parts


def measure(bootstrap: str, partitions: int, repeat: int) -> dict:
    s = settings_for(f"status-scale-{uuid.uuid4().hex[:8]}", partitions, bootstrap)
    apply(s, timeout=120)
    parts = fill(s)
    st = group_status(s)
    assert st["partitions_with_work"] == 0 and st["total_lag"] == len(parts) == len(st["partitions"]), st["text"][:500]
    status_med = median_time(lambda: group_status(s), repeat)
    c = consumer(s, f"{s.worker.app_id}-probe")
    try:
        batched = watermarks(c, parts)
        one_by_one = {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10) for t, p in parts}
        assert batched == one_by_one  # the same offsets either way
        batch_med = median_time(lambda: watermarks(c, parts), repeat)
        single_med = median_time(lambda: [c.get_watermark_offsets(TopicPartition(t, p), timeout=10) for t, p in parts],
                                 repeat)
    finally:
        c.close()
    return {"partitions": partitions, "source_partitions": len(parts), "status_median_s": round(status_med, 3),
            "offsets_batched_s": round(batch_med, 4),
            "offsets_one_by_one_s": round(single_med, 4), "one_by_one_over_batched": round(single_med / batch_med, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, nargs="+", default=[6, 64, 256, 1024], metavar="N",
                    help="topics.partitions values to measure (each creates the project's topics anew)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per measurement (the median is reported)")
    a = ap.parse_args()
    broker_env = dict(os.environ, KAFKA_PORT="19194", KAFKA_CONTROLLER_PORT="19195")
    started = not os.environ.get("KAFKA_BOOTSTRAP")
    if started:
        subprocess.run([str(REPO / "deploy/kafka/kafka.sh"), "start", "--fresh"], check=True, env=broker_env)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP") or "127.0.0.1:19194"
    results = []
    try:
        for n in a.partitions:
            results.append(measure(bootstrap, n, a.repeat))
            print(results[-1], flush=True)
    finally:
        if started:
            subprocess.run([str(REPO / "deploy/kafka/kafka.sh"), "stop"], env=broker_env)
    rows = [[r["partitions"], r["source_partitions"], r["status_median_s"], r["offsets_batched_s"],
             r["offsets_one_by_one_s"], r["one_by_one_over_batched"]] for r in results]
    text = table(["topics.partitions", "source partitions (all lagging by a marker)", "status s (median)",
                  "offsets: batched s", "offsets: one by one s", "one by one / batched"], rows)
    save("status_scale", {"args": {"partitions": a.partitions, "repeat": a.repeat}, "results": results}, text)


if __name__ == "__main__":
    main()
