"""Fault injection on a real broker: crashes, a wiped state folder, a broker restart. Nothing may be lost.

Each test runs a labelled stream (news + SMS, shuffled against event time, plus malformed events)
through three workers, injects its fault mid-stream, then checks completeness (every id has a
verdict, every malformed event a dead-letter record) and convergence (the latest verdicts equal the
embedded engine's). Stream size: ``STREAM_DEDUP_TEST_FAULT_EVENTS`` (default 20,000: beyond the
development benchmark's ~13,000 events the stream is topped up with real SMS from the shared
corpus; about 4 minutes per test here). Each test appends a row to
``test-artifacts/faults.md``: fault, events, lost, divergent verdicts, seconds from the fault until every
verdict was out.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from stream_dedup.stream.topics import apply

from ..conftest import shared_data
from .pipeline import REPO, Producing, Workers, key_of, labelled_stream, latest, produce_events, read_all
from .test_pipeline import BAD, check, scan_verdicts

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ARTIFACTS = REPO / "test-artifacts"
N = int(os.environ.get("STREAM_DEDUP_TEST_FAULT_EVENTS", "20000"))


@pytest.fixture
def events(tmp_path):
    shared_data("news/thucnews_1000.jsonl")
    n_news = max(100, N * 35 // 100)
    return labelled_stream(tmp_path, n_news=n_news, n_sms=N - n_news, seed=23)


def record(fault: str, settings, events: list[dict], got: dict, recovered_s: float) -> None:
    expected = scan_verdicts(settings, events)
    lost = sum(1 for e in events if e["id"] not in got)
    divergent = sum(1 for i, k in expected.items() if i in got and key_of(got[i]) != k)
    ARTIFACTS.mkdir(exist_ok=True)
    table = ARTIFACTS / "faults.md"
    if not table.exists():
        table.write_text("| fault | events | lost | divergent verdicts | recovery s |\n|---|---|---|---|---|\n")
    with table.open("a") as f:
        f.write(f"| {fault} | {len(events)} | {lost} | {divergent} | {recovered_s:.0f} |\n")


def run(settings, tmp_path, events, fault, fault_name: str, restart_after=None, **env: str) -> None:
    """Start 3 workers (``env``: their settings), produce, inject ``fault(workers)`` once a third of
    the verdicts are out, collect, check."""
    settings.topics.partitions = 6
    apply(settings)
    workers = Workers(settings, tmp_path)
    try:
        for i in range(3):
            workers.start(f"w{i}", **env)
        produce_events(settings, events, extra_raw=BAD)
        read_all(settings, settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= len(events) // 3,
                 timeout=600)
        t0 = time.time()
        fault(workers)
        read_all(settings, settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= len(events), timeout=900)
        recovered = time.time() - t0
        # then until the verdicts converge on scan's: revisions a restarted worker sends may come later
        expected = scan_verdicts(settings, events)
        got = latest(read_all(settings, settings.topics.verdicts, timeout=120, idle=30,
                              until=lambda ms: {i: key_of(v) for i, v in latest(ms).items()} == expected))
        dlq = read_all(settings, settings.topics.dlq, until=lambda ms: False, timeout=60, idle=5)
    finally:
        workers.stop_all()
    record(fault_name, settings, events, got, recovered)
    check(settings, events, got, dlq, workers)


def test_sigkill_one_of_three_workers_mid_stream_then_restart_it(kafka_settings, tmp_path, events):
    """No graceful shutdown: uncommitted offsets are replayed and the killed worker's RocksDB state is
    whatever reached disk."""
    def fault(w: Workers) -> None:
        w.stop("w1", sig=signal.SIGKILL)
        time.sleep(10)
        w.start("w1")

    run(kafka_settings, tmp_path, events, fault, "SIGKILL 1 of 3 workers, restart after 10 s")


def test_exactly_once_sigkill_one_of_three_workers_then_restart_it(kafka_settings, tmp_path):
    """Exactly-once: the killed worker's tables keep writes of transactions that never committed
    until they are set back when it opens them again (``stream/undo.py``); kept, decide states
    would say verdicts went out that were aborted, and those documents would never get one."""
    shared_data("news/thucnews_1000.jsonl")
    events = labelled_stream(tmp_path, n_news=600, n_sms=2400, seed=29)
    eos = {"STREAM_DEDUP_WORKER__PROCESSING_GUARANTEE": "exactly_once"}

    def fault(w: Workers) -> None:
        w.stop("w1", sig=signal.SIGKILL)
        time.sleep(10)
        w.start("w1", **eos)

    run(kafka_settings, tmp_path, events, fault, "exactly-once: SIGKILL 1 of 3 workers, restart after 10 s", **eos)


def test_sigkill_one_worker_without_restart(kafka_settings, tmp_path, events):
    """Its partitions move to the other two, which restore its tables from the changelogs."""
    run(kafka_settings, tmp_path, events, lambda w: w.stop("w1", sig=signal.SIGKILL),
        "SIGKILL 1 of 3 workers, no restart")


@pytest.mark.long  # make test covers a SIGKILL with the kills of one worker
def test_sigkill_every_worker_at_once_then_restart(kafka_settings, tmp_path, events):
    def fault(w: Workers) -> None:
        for name in ("w0", "w1", "w2"):
            w.stop(name, sig=signal.SIGKILL)
        time.sleep(5)
        for name in ("w0", "w1", "w2"):
            w.start(name)

    run(kafka_settings, tmp_path, events, fault, "SIGKILL all 3 workers, restart")


@pytest.mark.long  # make test covers restores from the changelog in the rebalance tests
def test_worker_loses_its_state_folder(kafka_settings, tmp_path, events):
    """Disk wiped: the worker comes back with no RocksDB files and rebuilds them from the changelogs."""
    def fault(w: Workers) -> None:
        w.stop("w2", sig=signal.SIGKILL)
        shutil.rmtree(tmp_path / "state-w2")
        w.start("w2")

    run(kafka_settings, tmp_path, events, fault, "state folder of 1 worker wiped")


def test_broker_restart_mid_stream(kafka_settings, tmp_path, events):
    """The broker stops and comes back (same data); workers reconnect by themselves."""
    port = int(os.environ.get("STREAM_DEDUP_TEST_RESTART_PORT", "19392"))
    script = REPO / "deploy" / "kafka" / "kafka.sh"
    env = dict(os.environ, KAFKA_PORT=str(port))
    env.pop("KAFKA_BOOTSTRAP", None)
    subprocess.run([str(script), "start", "--fresh"], env=env, check=True, capture_output=True, timeout=240)
    kafka_settings.kafka.bootstrap = f"127.0.0.1:{port}"

    def fault(w: Workers) -> None:
        subprocess.run([str(script), "stop"], env=env, check=True, capture_output=True, timeout=120)
        time.sleep(5)
        subprocess.run([str(script), "start"], env=env, check=True, capture_output=True, timeout=240)

    try:
        run(kafka_settings, tmp_path, events, fault, "broker stopped 5 s and restarted")
    finally:
        subprocess.run([str(script), "stop"], env=env, capture_output=True, timeout=120)


def test_slow_index_stage_under_sustained_load_builds_lag_then_catches_up(kafka_settings, tmp_path, events):
    """A slow consumer: the index stage sleeps per probe (``tests/faulty_worker.py``) for the first
    ``slow_for`` seconds while events arrive at a steady rate. Lag on the probes topic must grow,
    nothing may be lost, and once the delay ends the workers catch up (lag back to 0)."""
    from stream_dedup.stream.status import group_status, wait_drained

    settings = kafka_settings
    settings.topics.partitions = 6
    apply(settings)
    # 20,000 events: 200 s of sending, the first 75 s against the delay (make test's 4,000: 40 s, 30 s)
    rate, slow_for = 100.0, 75 if N >= 20_000 else 30
    workers = Workers(settings, tmp_path)
    samples: list[tuple[float, int]] = []  # (seconds since start, lag of the probes topic)
    try:
        t_start = time.time()
        for i in range(2):
            workers.start(f"w{i}", FAULT_DELAY=f"index:0.03:{slow_for}")
        producer = Producing(settings, events, extra_raw=BAD, rate=rate)
        producer.start()
        while time.time() - t_start < slow_for + 10 or producer.is_alive():
            st = group_status(settings)
            lag = sum(r["lag"] for r in st["partitions"] if r["topic"].endswith(".probes"))
            samples.append((time.time() - t_start, lag))
            time.sleep(5)
        producer.finish(timeout=600)
        got_msgs = read_all(settings, settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= len(events),
                            timeout=900)
        # from the end of the delay until the probes lag is back under one second of input (while
        # sending goes on), or else until every verdict is out
        back = [t for t, lag in samples if t > slow_for and lag <= rate]
        caught_up = (back[0] if back else time.time() - t_start) - slow_for
        time.sleep(3)
        got = latest(read_all(settings, settings.topics.verdicts, until=lambda ms: False, timeout=30, idle=5))
        dlq = read_all(settings, settings.topics.dlq, until=lambda ms: False, timeout=60, idle=5)
        _, final = wait_drained(settings, 120, every_s=2)  # committed offsets follow within a commit interval
        delays = sum(w["counts"].get("injected_delays", 0) for w in final["workers"])
    finally:
        workers.stop_all()
    assert got_msgs
    peak = max(lag for _, lag in samples)
    record(f"slow index stage (30 ms per probe for {slow_for} s) at {rate:.0f} events/s, 2 workers; "
           f"peak probes lag {peak} messages; recovery: lag back under {rate:.0f}", settings, events, got,
           caught_up)
    assert delays > 0, "the delay was never injected"
    assert peak >= 10, f"lag on the probes topic never grew: {samples}"
    assert final["total_lag"] == 0, f"did not catch up: {final['text']}"
    check(settings, events, got, dlq, workers)


@pytest.mark.long  # its own broker and ~3 minutes; make test covers crashes with the SIGKILL tests above
def test_the_fault_harness_short_version_loses_nothing(tmp_path):
    """``bench/faults.py`` as a user runs it, shortened: its own broker, two workers, SIGKILL of each
    worker and a broker crash while 3,000 SMS are sent; nothing lost, nothing different from scan,
    every malformed event dead-lettered (the script exits non-zero otherwise), three faults timed."""
    shared_data("sms/sms_spam_zh.jsonl")
    results = tmp_path / "results"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "faults.py"), "--events", "3000", "--brokers", "1",
                        "--guarantees", "at_least_once", "--name", "faults_quick"], cwd=REPO, capture_output=True,
                       text=True, timeout=1200, env=dict(os.environ, STREAM_DEDUP_BENCH_RESULTS=str(results)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    (row,) = json.loads((results / "faults_quick.json").read_text(encoding="utf-8"))["rows"]
    assert (row["events"], row["lost"], row["divergent"]) == (3000, 0, 0), row
    assert row["dead_letters"] >= row["bad_sent"] > 0, row
    assert [f["fault"].split(",")[0] for f in row["faults"]] == ["SIGKILL w0", "broker killed", "SIGKILL w1"], row
    assert all(f["stall_s"] >= 0 for f in row["faults"]), row
