"""Foundation: a real broker round trip, both Kafka clients, a Faust table across restarts, topics."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stream_dedup.stream.kafka_io import admin, consumer, producer
from stream_dedup.stream.topics import apply, load_specs

from .pipeline import partition_counts, settings_env, wait_for_partitions

pytestmark = pytest.mark.kafka
HERE = Path(__file__).resolve().parent


def _create(settings, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(settings)  # keep the client alive until the future resolves
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def _transactional(settings, tid: str):
    """A producer with ``transactional.id`` ``tid``, its transactions initialized."""
    from confluent_kafka import Producer

    from stream_dedup.stream.kafka_io import client_config

    tp = Producer(client_config(settings, **{"transactional.id": tid}))
    tp.init_transactions(30)
    return tp


def _commit(settings, group: str, topic: str, partition: int, offset: int) -> None:
    """Commit ``offset`` of ``topic[partition]`` for ``group``, as a member of it would, without
    joining it."""
    from confluent_kafka import TopicPartition

    c = consumer(settings, group)
    try:
        c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        c.close()


def test_round_trip_consumer_group_of_two(kafka_settings, unique_name):
    """N events produced with confluent-kafka arrive exactly once across a group of two consumers."""
    topic, n = f"{unique_name}.rt", 2000
    _create(kafka_settings, topic, 4)
    got: list[list[str]] = [[], []]
    assigned = [threading.Event(), threading.Event()]
    stop = threading.Event()

    def run(slot: int) -> None:
        c = consumer(kafka_settings, f"{unique_name}-g", **{"enable.auto.commit": True})
        c.subscribe([topic], on_assign=lambda _c, parts: parts and assigned[slot].set())
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and not m.error():
                    got[slot].append(json.loads(m.value())["id"])
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.time() + 60
    while not all(e.is_set() for e in assigned) and time.time() < deadline:
        time.sleep(0.1)  # both members own partitions before anything is produced
    assert all(e.is_set() for e in assigned), "the group did not give both members partitions"
    p = producer(kafka_settings)
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=json.dumps({"id": str(i)}).encode())
    assert p.flush(30) == 0
    deadline = time.time() + 60
    while len(got[0]) + len(got[1]) < n and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # anything extra (a duplicate delivery) would arrive now
    stop.set()
    for t in threads:
        t.join()
    everything = got[0] + got[1]
    assert len(everything) == n
    assert set(everything) == {str(i) for i in range(n)}
    assert got[0] and got[1], "both group members should have consumed"


def test_aiokafka_speaks_to_the_pinned_broker(kafka_settings, unique_name):
    """faust's client (aiokafka) produces and consumes on the pinned Kafka version."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = f"{unique_name}.aio"
    _create(kafka_settings, topic, 2)

    async def main() -> list[bytes]:
        prod = AIOKafkaProducer(bootstrap_servers=kafka_settings.kafka.bootstrap)
        await prod.start()
        try:
            for i in range(50):
                await prod.send_and_wait(topic, f"m{i}".encode(), key=str(i).encode())
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(topic, bootstrap_servers=kafka_settings.kafka.bootstrap,
                                group_id=f"{unique_name}-aio", auto_offset_reset="earliest")
        await cons.start()
        out: list[bytes] = []
        try:
            deadline = time.time() + 30
            while len(out) < 50 and time.time() < deadline:
                batch = await cons.getmany(timeout_ms=500)
                for msgs in batch.values():
                    out += [m.value for m in msgs]
            await cons.commit()
        finally:
            await cons.stop()
        return out

    values = asyncio.run(main())
    assert sorted(values) == sorted(f"m{i}".encode() for i in range(50))


def _start_faust(env: dict[str, str], log: Path) -> subprocess.Popen:
    # --without-web: Faust's `worker` command turns the web server on whatever the app's web_enabled
    # says, and a second process on port 6066 (a stream-dedup worker of another test, or a parallel
    # run) then stops this worker at start-up, after its table recovery
    return subprocess.Popen([sys.executable, str(HERE / "faust_counter_app.py"), "worker", "--without-web",
                             "-l", "info"], env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def _wait_ready(worker: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    """Until the Faust worker says it is ready (its partitions assigned, recovery done, streams
    seeked). The test's input goes in only then: faust-streaming can drop messages it fetched just
    before a rebalance (the skip this project's gap filler exists for, stream/gaps.py), and this
    plain Faust app has no gap filler, so input waiting on the topic at start-up made the test fail
    now and then without saying anything about the table's restore."""
    deadline = time.time() + timeout
    while time.time() < deadline and worker.poll() is None:
        if "[^Worker]: Ready" in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"the Faust worker did not get ready (exit code {worker.poll()}):\n"
                         + log.read_text(errors="replace")[-3000:])


def _read_counts(settings, topic: str, want: int, worker: subprocess.Popen, log: Path,
                 timeout: float = 90) -> dict[str, int]:
    c = consumer(settings, f"reader-{time.time_ns()}")
    c.subscribe([topic])
    latest: dict[str, int] = {}
    seen = 0
    deadline = time.time() + timeout
    try:
        while seen < want and time.time() < deadline:
            if worker.poll() is not None:  # it died: what it wrote has come within a few seconds
                deadline = min(deadline, time.time() + 5)
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            seen += 1
            v = json.loads(m.value())
            latest[v["key"]] = max(latest.get(v["key"], 0), v["count"])
    finally:
        c.close()
    assert seen >= want, (f"only {seen} of {want} outputs arrived (worker exit code {worker.poll()}):\n"
                          + log.read_text(errors="replace")[-3000:])
    return latest


def test_faust_rocksdict_table_survives_restart_from_changelog(kafka_settings, unique_name, tmp_path):
    """A Faust table in RocksDB (rocksdict) comes back from its changelog after the disk is wiped."""
    data = tmp_path / "faust-data"
    env = dict(os.environ, APP_ID=unique_name, KAFKA_BOOTSTRAP=kafka_settings.kafka.bootstrap, DATA_DIR=str(data))
    _create(kafka_settings, f"{unique_name}-in", 2)
    _create(kafka_settings, f"{unique_name}-out", 1)
    p = producer(kafka_settings)
    plan = {"a": 5, "b": 3, "c": 7}
    w = _start_faust(env, tmp_path / "w1.log")
    try:
        _wait_ready(w, tmp_path / "w1.log")
        for k, n in plan.items():
            for _ in range(n):
                p.produce(f"{unique_name}-in", key=k.encode(), value=b"x")
        assert p.flush(30) == 0
        first = _read_counts(kafka_settings, f"{unique_name}-out", sum(plan.values()), w, tmp_path / "w1.log")
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(60)
    assert first == plan
    assert any(data.rglob("*.sst")) or any(data.rglob("CURRENT")), "the table should live in RocksDB files"

    shutil.rmtree(data)  # the worker's disk is gone: the table must come back from the changelog
    w = _start_faust(env, tmp_path / "w2.log")
    try:
        _wait_ready(w, tmp_path / "w2.log")
        for k in plan:
            p.produce(f"{unique_name}-in", key=k.encode(), value=b"x")
        assert p.flush(30) == 0
        after = _read_counts(kafka_settings, f"{unique_name}-out", sum(plan.values()) + len(plan), w,
                             tmp_path / "w2.log")
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(60)
    assert after == {k: n + 1 for k, n in plan.items()}, (tmp_path / "w2.log").read_text()[-3000:]


def test_topics_apply_is_idempotent_and_reports_drift(kafka_settings):
    specs = load_specs(kafka_settings)
    names = {s.name for s in specs}
    assert {kafka_settings.topics.pages, kafka_settings.topics.verdicts, kafka_settings.topics.dlq} <= names

    first = apply(kafka_settings)
    assert sorted(first.created) == sorted(names) and first.clean
    second = apply(kafka_settings)
    assert second.created == [] and sorted(second.ok) == sorted(names) and second.clean

    # the same definitions with another partition count: drift is reported, nothing is changed
    kafka_settings.topics.partitions = kafka_settings.topics.partitions + 2
    third = apply(kafka_settings)
    assert third.created == []
    assert kafka_settings.topics.pages in third.drift
    assert any("partitions" in p for p in third.drift[kafka_settings.topics.pages])
    assert kafka_settings.topics.dlq not in third.drift  # fixed at 1 partition in topics.toml
    client = admin(kafka_settings)
    meta = client.list_topics(timeout=10)
    assert len(meta.topics[kafka_settings.topics.pages].partitions) == kafka_settings.topics.partitions - 2

    # asked to, apply grows the input topic, and only it: the internal topics keep their partitions
    probes = f"{kafka_settings.topics.internal_prefix}.probes"
    fourth = apply(kafka_settings, grow_input=True)
    want = kafka_settings.topics.partitions
    assert fourth.grown == {kafka_settings.topics.pages: (want - 2, want)}
    assert kafka_settings.topics.pages not in fourth.drift and probes in fourth.drift
    wait_for_partitions(kafka_settings, kafka_settings.topics.pages, want)
    assert partition_counts(kafka_settings)[probes] == want - 2
    # never shrunk: with fewer partitions defined than it has, the input topic is drift again
    kafka_settings.topics.partitions = want - 1
    fifth = apply(kafka_settings, grow_input=True)
    assert fifth.grown == {} and kafka_settings.topics.pages in fifth.drift


def test_cli_produce_then_tail_round_trip(kafka_settings, unique_name, tmp_path):
    """`stream-dedup produce` puts a JSONL file on a topic and `tail` reads every line back."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": f"文本{i}"}, ensure_ascii=False) + "\n"
                           for i in range(300)), encoding="utf-8")
    topic = f"{unique_name}.cli"
    _create(kafka_settings, topic, 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DEDUP_TEST_")}  # not settings
    env["KAFKA_BOOTSTRAP"] = kafka_settings.kafka.bootstrap
    exe = [sys.executable, "-m", "stream_dedup.cli"]
    r = subprocess.run(exe + ["produce", str(src), "--topic", topic, "--no-progress"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "produced 300 events" in r.stderr
    r = subprocess.run(exe + ["tail", "--topic", topic, "--max", "300", "--idle", "20"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ids = [json.loads(line)["id"] for line in r.stdout.splitlines()]
    assert sorted(ids) == sorted(f"d{i}" for i in range(300))


def test_cli_tail_ids_stops_once_every_document_has_a_record(kafka_settings, unique_name):
    """`tail --ids N` stops at the first record of the N-th distinct document, revisions of earlier
    ones counted as records but not as documents (`make demo` waits for its events' verdicts so);
    `--max N` would stop N records in, before every document had one."""
    topic = f"{unique_name}.tailids"
    _create(kafka_settings, topic, 1)  # one partition: the order read is the order written
    records: list[dict] = []
    for i in range(50):
        records.append({"id": f"d{i}", "verdict": "unique", "revision": 0})
        if i % 5 == 4:  # a revision of an earlier document, as a late original causes
            records.append({"id": f"d{i - 2}", "verdict": "duplicate", "match": "near", "revision": 1})
    records += [{"id": f"d{i}", "verdict": "duplicate", "match": "exact", "revision": 2} for i in range(5)]
    p = producer(kafka_settings)
    for r in records:
        p.produce(topic, json.dumps(r).encode(), key=r["id"].encode())
    assert p.flush(30) == 0
    env = settings_env(kafka_settings)
    exe = [sys.executable, "-m", "stream_dedup.cli", "tail", "--topic", topic, "--idle", "300"]
    # with --idle 300 and nothing more coming, only --ids can end it within the timeout
    r = subprocess.run(exe + ["--ids", "50"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    upto = next(i for i, rec in enumerate(records) if rec["id"] == "d49") + 1
    assert upto == 59 and got == records[:upto]
    r = subprocess.run(exe + ["--ids", "3", "--summary"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"ids": 3, "messages": 3, "unique": 3, "documents": 3}


def test_cli_tail_to_end_reads_what_the_topic_holds_then_stops(kafka_settings, unique_name):
    """`tail --to-end` returns every record written before it began, in each partition's order, and
    stops without a quiet window (no --idle): one partition plain, one whose last offset is a
    transaction's commit marker (no record reaches it: the consumer's end-of-partition word must
    end it), one empty. An empty topic ends at once; a missing one is a clear error."""
    topic, empty = f"{unique_name}.toend", f"{unique_name}.toend-empty"
    _create(kafka_settings, topic, 3)
    _create(kafka_settings, empty, 2)
    plain = [{"id": f"p{i}", "verdict": "unique"} for i in range(30)]
    p = producer(kafka_settings)
    for r in plain:
        p.produce(topic, json.dumps(r).encode(), partition=0)
    assert p.flush(30) == 0
    txn = [{"id": f"t{i}", "verdict": "duplicate", "match": "exact"} for i in range(7)]
    tp = _transactional(kafka_settings, f"{unique_name}-tx")
    tp.begin_transaction()
    for r in txn:
        tp.produce(topic, json.dumps(r).encode(), partition=1)
    tp.commit_transaction(30)
    env = settings_env(kafka_settings)
    exe = [sys.executable, "-m", "stream_dedup.cli", "tail", "--to-end"]
    r = subprocess.run(exe + ["--topic", topic], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert [g for g in got if g["id"].startswith("p")] == plain
    assert [g for g in got if g["id"].startswith("t")] == txn
    assert len(got) == len(plain) + len(txn)
    r = subprocess.run(exe + ["--topic", empty, "--summary"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"messages": 0, "documents": 0}
    r = subprocess.run(exe + ["--topic", f"{unique_name}.absent"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and f"topic {unique_name}.absent cannot be read" in r.stderr, r.stderr
    r = subprocess.run(exe + ["--topic", topic, "--from-end"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "exclude each other" in r.stderr, r.stderr


def test_cli_tail_follows_by_assignment_without_a_group_join(kafka_settings, unique_name):
    """`tail` reads its partitions by assignment: while it follows a topic no `stream-dedup-tail-*`
    group has members (a join, 3 s on a broker with the default initial rebalance delay, would come
    out of `--idle`). `--from-end` prints only what was written after it began, a partition added
    meanwhile included; `--idle S` alone reads everything, then stops; a missing topic exits 3."""
    from confluent_kafka.admin import NewPartitions

    topic = f"{unique_name}.follow"
    _create(kafka_settings, topic, 2)
    p = producer(kafka_settings)
    for i in range(10):
        p.produce(topic, json.dumps({"id": f"old{i}"}).encode(), partition=i % 2)
    assert p.flush(30) == 0
    env = settings_env(kafka_settings)
    exe = [sys.executable, "-m", "stream_dedup.cli", "tail", "--topic", topic]
    # Ctrl-C ends it; SIGINT's default handling restored, since a test run in the background (CI)
    # has it ignored, and a child inherits that
    follow = subprocess.Popen(exe + ["--from-end", "--idle", "120"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follow.stdout), daemon=True)
    reader.start()
    new = 0
    try:
        deadline = time.monotonic() + 60
        while not lines and time.monotonic() < deadline:  # until the follower has a position
            p.produce(topic, json.dumps({"id": f"new{new}"}).encode(), partition=new % 2)
            assert p.flush(30) == 0
            new += 1
            time.sleep(0.2)
        assert lines, "tail --from-end printed nothing of what was written after it began"
        _commit(kafka_settings, f"{unique_name}-known", topic, 0, 1)  # a group the listing must show
        client = admin(kafka_settings)  # kept alive until the future resolves
        groups = client.list_consumer_groups().result(30).valid
        assert f"{unique_name}-known" in {g.group_id for g in groups}
        joined = [(g.group_id, str(g.state)) for g in groups if g.group_id.startswith("stream-dedup-tail-")
                  and str(g.state).split(".")[-1] not in ("EMPTY", "DEAD")]
        assert joined == [], "tail joined a consumer group"
        client.create_partitions([NewPartitions(topic, 3)])[topic].result(30)  # `topics apply --grow-input`
        grown = producer(kafka_settings)  # metadata that knows the new partition
        grown.list_topics(topic, timeout=10)
        grown.produce(topic, json.dumps({"id": "new-partition"}).encode(), partition=2)
        assert grown.flush(30) == 0
        new += 1
        deadline = time.monotonic() + 30  # tail looks for new partitions every 5 s
        while not any("new-partition" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert any("new-partition" in line for line in lines), "tail did not read a partition added while it followed"
    finally:
        follow.send_signal(signal.SIGINT)
        try:
            rc = follow.wait(60)
        except subprocess.TimeoutExpired:
            follow.kill()
            raise
        reader.join(10)
    assert rc == 0, follow.stderr.read()
    assert lines and all(json.loads(line)["id"].startswith("new") for line in lines)
    r = subprocess.run(exe + ["--idle", "2", "--summary"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"messages": 10 + new, "?": 10 + new, "documents": 10 + new}
    r = subprocess.run([*exe[:-1], f"{unique_name}.absent", "--idle", "5"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 3 and f"topic {unique_name}.absent cannot be read" in r.stderr, r.stderr


def test_wait_drained_counts_records_left_not_transaction_markers(kafka_settings):
    """`status --wait-drained`'s test, against the workers' group as a worker leaves it: records on
    a source topic with no commit are work left; committed up to a transaction's marker is done
    (the raw lag stays 1); an open transaction's records count once it commits; aborted ones never."""
    from stream_dedup.stream.status import group_status, records_behind, wait_drained

    s = kafka_settings
    apply(s)
    pages, probes = s.topics.pages, f"{s.topics.internal_prefix}.probes"

    def commit(topic: str, part: int, offset: int) -> None:
        _commit(s, s.worker.app_id, topic, part, offset)

    def behind() -> list[tuple[str, int]]:
        drained, st = wait_drained(s, 0)
        left = [(r["topic"], r["partition"]) for r in records_behind(s, st["partitions"])]
        assert drained == (not left)
        assert sorted(left) == sorted((r["topic"], r["partition"]) for r in st["partitions"] if r["work_left"])
        assert st["partitions_with_work"] == len(left)
        return left

    assert behind() == []  # nothing sent yet
    p = producer(s)
    for i in range(5):
        p.produce(pages, json.dumps({"id": f"d{i}"}).encode(), partition=0)
    assert p.flush(30) == 0
    assert behind() == [(pages, 0)]  # five records, no commit: status counts them as lag now
    assert "total lag 5 (1 partition with events to process)" in group_status(s)["text"].splitlines()[0]
    said: list[str] = []  # a wait with no worker in the group says so once, long before its timeout
    drained, st = wait_drained(s, 2.0, every_s=0.2, echo=said.append, hint_after_s=0.5)
    assert not drained and st["members"] == 0
    assert said == [f"still waiting: group {s.worker.app_id} has no worker ({st['state']}) and 1 partition with "
                    "events to process; is `stream-dedup worker` running with this configuration?"], said
    commit(pages, 0, 5)
    assert behind() == []
    tp = _transactional(s, f"{s.worker.app_id}-tx")
    tp.begin_transaction()
    for i in range(3):
        tp.produce(probes, b"probe", partition=0)
    tp.commit_transaction(30)  # offsets 0-2 records, 3 the commit marker
    commit(probes, 0, 3)
    st = group_status(s)  # what plain `status` prints: the lag of 1 is a marker, not an event
    assert [(r["lag"], r["work_left"]) for r in st["partitions"] if (r["topic"], r["partition"]) == (probes, 0)] \
        == [(1, False)]
    assert f"{probes}[0] committed=3 end=4 lag=1 (nothing to process)" in st["text"]
    assert "(nothing to process: the lag left is transaction markers or aborted records)" in st["text"].splitlines()[0]
    assert behind() == []
    tp.begin_transaction()
    for i in range(2):
        tp.produce(probes, b"probe", partition=1)
    tp.flush(30)  # on the broker, not committed: the workers (read committed) cannot see them yet,
    assert behind() == []  # and their writer has not committed its own input: that lag shows there
    tp.commit_transaction(30)
    assert behind() == [(probes, 1)]
    commit(probes, 1, 2)
    assert behind() == []
    tp.begin_transaction()
    tp.produce(probes, b"probe", partition=1)
    tp.abort_transaction(30)
    assert behind() == []  # an aborted record is nobody's work
    env = settings_env(s)
    p.produce(pages, b"{}", partition=1)
    assert p.flush(30) == 0
    exe = [sys.executable, "-m", "stream_dedup.cli", "status", "--wait-drained", "--json"]
    r = subprocess.run(exe + ["--timeout", "15"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "still had events to process after 15 s" in r.stderr, r.stderr
    assert r.stderr.count("stream-dedup: still waiting: group ") == 1, r.stderr  # after 10 s with no worker
    assert f"(group {s.worker.app_id}: EMPTY, 0 workers reporting)" in r.stderr, r.stderr  # no worker ran
    assert json.loads(r.stdout)["drained"] is False
    commit(pages, 1, 1)
    r = subprocess.run(exe, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["drained"] is True


def test_gap_filler_reads_a_groups_committed_offsets_without_joining_it(kafka_settings, unique_name):
    """The baseline a worker's gap tracking starts from after an assignment (``gaps.confluent_committed``)."""
    from stream_dedup.stream.kafka_io import client_config
    from stream_dedup.stream.gaps import confluent_committed

    topic, group = f"{unique_name}.committed", f"{unique_name}-g"
    _create(kafka_settings, topic, 2)
    _commit(kafka_settings, group, topic, 0, 42)
    committed = confluent_committed(client_config(kafka_settings), group)
    assert committed(topic, 0) == 42
    assert committed(topic, 1) == 0  # nothing committed: the partition's start
    assert confluent_committed(client_config(kafka_settings), f"{group}-other")(topic, 0) == 0
