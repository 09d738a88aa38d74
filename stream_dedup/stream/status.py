"""`stream-dedup status`: per-partition lag and ownership of the workers' consumer group."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..config import Settings
from .kafka_io import (admin, assign_up_to_ends, consumer, coordinated, end_reader, no_record_from, reached_end,
                       topic_partitions, watermarks)
from .topics import load_specs


def group_status(settings: Settings, timeout: float = 10.0, *, reports: bool = True) -> dict[str, Any]:
    """The group's state, and per source partition its committed offset, end, lag, owner and
    ``work_left``: whether a record the workers have yet to process lies in its lag
    (``records_behind``); with each worker's latest count report unless ``reports`` is False.

    Why ``work_left`` beside the lag: under exactly-once a partition the workers are done with
    keeps a lag of its last commit marker, so "lag 1" alone reads as work that never gets done."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    group = settings.worker.app_id
    client = admin(settings)
    owners: dict[tuple[str, int], str] = {}
    state = "unknown"
    members: int | None = None
    names: set[str] | None = None  # the members' worker names, when the group could be described
    try:
        desc = coordinated(lambda: client.describe_consumer_groups([group])[group].result(timeout),
                           f"description of group {group!r}", wait_s=timeout)
        state = str(desc.state).split(".")[-1]
        members = len(desc.members)
        names = {m.client_id for m in desc.members}
        for m in desc.members:
            for tp in (m.assignment.topic_partitions if m.assignment else []):
                owners[(tp.topic, tp.partition)] = m.client_id  # the worker's name (worker.name, or host:pid)
    except Exception as e:  # noqa: BLE001 - a group that never ran has no description
        state = f"unavailable ({e.__class__.__name__})"
    committed: dict[tuple[str, int], int] = {}
    try:
        res = coordinated(lambda: client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
                          .result(timeout), f"committed offsets of group {group!r}", wait_s=timeout)
        for tp in res.topic_partitions:
            committed[(tp.topic, tp.partition)] = tp.offset
    except Exception:  # noqa: BLE001
        pass
    probe = consumer(settings, f"{group}-status-probe")
    rows: list[dict[str, Any]] = []
    try:
        for topic in source_topics(settings):  # a partition with records and no commit yet lags too
            for part in topic_partitions(probe, topic, timeout) or ():
                committed.setdefault((topic, part), -1)
        offsets = watermarks(probe, sorted(committed), timeout)
        for (topic, part), off in sorted(committed.items()):
            lo, hi = offsets[(topic, part)]
            lag = hi - off if off >= 0 else hi - lo
            rows.append({"topic": topic, "partition": part, "committed": off, "end": hi, "lag": lag,
                         "owner": owners.get((topic, part))})
    finally:
        probe.close()
    left = {(r["topic"], r["partition"]) for r in records_behind(settings, rows, timeout)}
    for r in rows:
        r["work_left"] = (r["topic"], r["partition"]) in left
    st = {"group": group, "state": state, "members": members, "member_names": sorted(names or ()),
          "total_lag": sum(r["lag"] for r in rows), "partitions_with_work": len(left), "partitions": rows,
          "workers": []}
    st["work_said"] = work_said(st)
    if reports:
        st["workers"] = current_workers(worker_reports(settings, timeout), names)
    st["text"] = status_text(st)
    return st


def work_said(st: dict[str, Any]) -> str:
    """What the total lag of ``group_status`` holds, in words: ``status`` prints it after the lag,
    and the status page shows it (``work_said`` in its JSON), so both say the same."""
    work = st["partitions_with_work"]
    return (f"{work} partition{'s' * (work != 1)} with events to process" if work else
            "nothing to process" + (": the lag left is transaction markers or aborted records" if st["total_lag"] else ""))


REPORT_EVERY_S = 10.0  # how often a worker reports its counts (the `report` timer of ``worker.Worker``)


def current_workers(reports: list[dict[str, Any]], members: set[str] | None) -> list[dict[str, Any]]:
    """The workers' reports with ``age_s`` and ``state``: "ok"; "stale" (a member whose last report is
    over three intervals old: hung or cut off from the status topic); "left" (not a member of the
    group any more, reported lately). A worker that left and has not reported for over 1.5 intervals
    is dropped: a killed worker no longer shows for two minutes with its old partitions. ``members``
    None (the group could not be described) keeps every report."""
    now, out = time.time(), []
    for r in reports:
        age = max(0.0, now - r["at"])
        gone = members is not None and r["worker"] not in members
        if gone and age > 1.5 * REPORT_EVERY_S:
            continue
        state = "left" if gone else "stale" if age > 3 * REPORT_EVERY_S else "ok"
        out.append({**r, "age_s": round(age, 1), "state": state})
    return out


def status_text(st: dict[str, Any]) -> str:
    """``group_status`` as ``stream-dedup status`` prints it."""
    rows = st["partitions"]
    lines = [f"group {st['group']}: {st['state']}, total lag {st['total_lag']} ({st['work_said']})"]
    lines += [f"  {r['topic']}[{r['partition']}] committed={r['committed']} end={r['end']} "
              f"lag={r['lag']}{'' if r['work_left'] or not r['lag'] else ' (nothing to process)'} "
              f"owner={r['owner'] or '-'}" for r in rows]
    for w in st["workers"]:
        c = w["counts"]
        said = "" if w.get("state", "ok") == "ok" else f", {w['state'].upper()}"
        lines.append(f"worker {w['worker']} (report {time.time() - w['at']:.0f}s ago{said}, up {w['uptime_s']:.0f}s): "
                     f"in {c.get('in', 0)} dlq {c.get('dlq', 0)} probes {c.get('index.probes', 0)} "
                     f"verdicts {c.get('verdicts', 0)} revisions {c.get('revisions', 0)} pending {c.get('pending', 0)}")
    return "\n".join(lines)


def source_topics(settings: Settings) -> list[str]:
    """The topics the workers' group consumes: the input and the internal repartition topics
    (their roles in ``topics/topics.toml``); the changelogs are read by assignment, not by the group."""
    return [t.name for t in load_specs(settings) if t.role.startswith(("input", "internal repartition"))]


def records_behind(settings: Settings, rows: list[dict[str, Any]], timeout: float = 10.0) -> list[dict[str, Any]]:
    """The rows of ``group_status`` whose lag holds a record the group has yet to process.

    Why not ``lag > 0``: under exactly-once a transaction's commit marker takes the offset after
    its records, and the group's committed offset stops before it, so a partition the workers are
    done with can lag by its markers for good. A lagging partition is read from its committed
    offset (committed records only, as the workers read): a record before its end means work is
    left; the end of the partition reached first means only markers or aborted records are. An
    open transaction's records are not counted (the end offsets, read committed, stop before
    them), and need not be: their writer has not committed the input they came from, which lags."""
    lagging = {(r["topic"], r["partition"]): r for r in rows if r["lag"] > 0}
    from confluent_kafka import OFFSET_BEGINNING

    starts = {k: r["committed"] if r["committed"] >= 0 else OFFSET_BEGINNING for k, r in lagging.items()}
    done = no_record_from(settings, starts, timeout, {k: r["end"] for k, r in lagging.items()})
    return [r for k, r in lagging.items() if k not in done]


def wait_drained(settings: Settings, timeout_s: float, every_s: float = 1.0, *,
                 echo: Callable[[str], None] | None = None, hint_after_s: float = 10.0) -> tuple[bool, dict[str, Any]]:
    """Poll ``group_status`` until no source partition has a record left to process (True), or
    ``timeout_s`` passed (False); with the last status.

    ``echo`` gets one line when the group has had no member for ``hint_after_s`` while work is
    left (again after a worker came and went). Why a word and not an early exit: a script often
    starts its workers and its wait together, and a worker takes seconds to join; but a wait with
    no worker at all would otherwise say nothing until its timeout, 300 s by default.

    Why this tells "every verdict is out", revisions included: a worker commits an offset only
    after the output of what it consumed is delivered (``stream/delivery.py``), and the committed
    offsets are read before the end offsets. So when no partition of the input and repartition
    topics holds an unprocessed record, everything on them when the offsets were read has been
    processed and its output, the verdicts and the probes and answers of other stages alike, was
    on its topics, where it would show as lag if it were not done yet."""
    deadline = time.monotonic() + timeout_s
    alone_since: float | None = None  # since when the group has had no member (None: it has one)
    hinted = False
    while True:
        looked = time.monotonic()
        st = group_status(settings, reports=False)  # the workers' reports once, for the answer
        drained = not st["partitions_with_work"]
        now = time.monotonic()
        if drained or now >= deadline:
            st["workers"] = current_workers(worker_reports(settings), set(st["member_names"]) if st["members"] else None)
            st["text"] = status_text(st)
            return drained, st
        if st["members"]:
            alone_since, hinted = None, False  # a worker joined: say it again if the group empties
        elif alone_since is None:
            alone_since = looked
        if alone_since is not None and not hinted and now - alone_since >= hint_after_s and echo is not None:
            echo(f"still waiting: group {st['group']} has no worker ({st['state']}) and {st['work_said']}; "
                 "is `stream-dedup worker` running with this configuration?")
            hinted = True
        time.sleep(every_s)


def worker_reports(settings: Settings, timeout: float = 10.0, max_age_s: float = 120.0) -> list[dict[str, Any]]:
    """The latest count report of each worker that reported in the last ``max_age_s`` seconds."""
    import json

    from confluent_kafka import TopicPartition

    topic = f"{settings.topics.internal_prefix}.status"
    c = consumer(settings, f"{settings.worker.app_id}-status-reader")
    latest: dict[str, dict[str, Any]] = {}
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        if hi <= lo:
            return []
        c.assign([TopicPartition(topic, 0, lo)])
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            r = json.loads(m.value())
            latest[r["worker"]] = r
            if m.offset() >= hi - 1:
                break
    except Exception:  # noqa: BLE001 - no status topic yet
        return []
    finally:
        c.close()
    return sorted((r for r in latest.values() if time.time() - r["at"] < max_age_s), key=lambda r: r["worker"])


def _read_tail(settings: Settings, topic: str, per_partition: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The last ``per_partition`` JSON messages of every partition of a topic, in offset order per partition."""
    import json

    c = end_reader(settings, f"{settings.worker.app_id}-status-page")
    out: list[dict[str, Any]] = []
    try:
        ends = assign_up_to_ends(c, topic, last=per_partition, timeout=timeout)
        deadline = time.time() + timeout
        while ends and time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if reached_end(m, ends):
                del ends[m.partition()]
            if m.error():
                continue
            try:
                out.append(json.loads(m.value()))
            except ValueError:
                pass
    finally:
        c.close()
    return out


def throughput_history(reports: list[dict[str, Any]], step_s: float = 10.0) -> list[dict[str, float]]:
    """Group-wide rates over time from the workers' cumulative count reports.

    Each worker reports its counts every 10 s; the rate between two consecutive reports of one worker
    is summed with the other workers' rates in the same time step. A restarted worker (counts going
    down) contributes nothing for that step.
    """
    last: dict[str, dict[str, Any]] = {}
    steps: dict[int, dict[str, float]] = {}
    for r in sorted(reports, key=lambda r: r["at"]):
        prev = last.get(r["worker"])
        last[r["worker"]] = r
        if prev is None or r["at"] <= prev["at"]:
            continue
        dt = r["at"] - prev["at"]
        c, p = r["counts"], prev["counts"]
        d_in = c.get("in", 0) - p.get("in", 0)
        if d_in < 0:
            continue
        dup = sum(v for k, v in c.items() if k.startswith("verdict.duplicate")) - \
            sum(v for k, v in p.items() if k.startswith("verdict.duplicate"))
        ver = c.get("verdicts", 0) - p.get("verdicts", 0)
        s = steps.setdefault(int(r["at"] // step_s), {"in": 0.0, "verdicts": 0.0, "duplicates": 0.0})
        s["in"] += d_in / dt
        s["verdicts"] += max(0, ver) / dt
        s["duplicates"] += max(0, dup) / dt
    return [{"t": k * step_s, "in_per_s": round(v["in"], 2), "verdicts_per_s": round(v["verdicts"], 2),
             "duplicate_rate": round(v["duplicates"] / v["verdicts"], 4) if v["verdicts"] else 0.0}
            for k, v in sorted(steps.items())]


def largest_clusters(records: list[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        latest[r["id"]] = r
    return sorted((r for r in latest.values() if r.get("size", 1) > 1), key=lambda r: (-r["size"], r["id"]))[:n]


def page_status(settings: Settings, timeout: float = 10.0, served_by: str = "") -> dict[str, Any]:
    """Everything the status page shows, from Kafka alone, so any worker can serve it for the group;
    ``served_by`` names the worker whose port serves it."""
    group = group_status(settings, timeout)
    reports = _read_tail(settings, f"{settings.topics.internal_prefix}.status", 2000, timeout)
    clusters = _read_tail(settings, settings.topics.clusters, 5000, timeout)
    dlq: dict[str, int] = {}
    for w in group["workers"]:
        for k, v in w["counts"].items():
            if k.startswith("dlq."):
                dlq[k[4:]] = dlq.get(k[4:], 0) + v
    group.pop("text", None)
    return {**group, "served_by": served_by, "history": throughput_history(reports),
            "clusters": largest_clusters(clusters),
            "dlq_reasons": dict(sorted(dlq.items(), key=lambda kv: -kv[1])), "generated_at": time.time()}
