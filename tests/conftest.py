"""Test fixtures: which Kafka broker the suite talks to, chosen by configuration, and said.

Order of choice:
1. ``KAFKA_BOOTSTRAP=host:port``: an existing broker (``make test`` starts the local one and sets it).
2. ``STREAM_DEDUP_TEST_BROKER=testcontainers``: a Kafka container, where a Docker engine runs.
3. otherwise the project's local broker from Apache Kafka's jars (``deploy/kafka/kafka.sh``),
   started on a test port for the session and stopped after it.
"""
from __future__ import annotations

import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
_broker_info: dict[str, str] = {}


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shared_data(rel: str) -> Path:
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"sample corpus {p} is absent (the team's ../shared/data folder)")
    return p


def pytest_report_header(config):
    mode = ("external KAFKA_BOOTSTRAP=" + os.environ["KAFKA_BOOTSTRAP"] if os.environ.get("KAFKA_BOOTSTRAP")
            else os.environ.get("STREAM_DEDUP_TEST_BROKER", "local-jars (deploy/kafka/kafka.sh, started on demand)"))
    return f"kafka broker: {mode}"


def pytest_terminal_summary(terminalreporter):
    if _broker_info:
        terminalreporter.write_line(f"kafka broker used: {_broker_info['mode']} at {_broker_info['bootstrap']}")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    if os.environ.get("KAFKA_BOOTSTRAP"):
        _broker_info.update(mode="external (KAFKA_BOOTSTRAP)", bootstrap=os.environ["KAFKA_BOOTSTRAP"])
        yield os.environ["KAFKA_BOOTSTRAP"]
        return
    if os.environ.get("STREAM_DEDUP_TEST_BROKER") == "testcontainers":
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("confluentinc/cp-kafka:7.7.1").with_kraft() as kc:
            bs = kc.get_bootstrap_server()
            _broker_info.update(mode="testcontainers", bootstrap=bs)
            yield bs
        return
    port = os.environ.get("STREAM_DEDUP_TEST_KAFKA_PORT", "19092")
    env = dict(os.environ, KAFKA_PORT=port)
    env.pop("KAFKA_BOOTSTRAP", None)
    script = REPO / "deploy" / "kafka" / "kafka.sh"
    subprocess.run([str(script), "start", "--fresh"], check=True, env=env)
    bs = f"127.0.0.1:{port}"
    _broker_info.update(mode="local-jars (deploy/kafka/kafka.sh)", bootstrap=bs)
    os.environ["KAFKA_BOOTSTRAP"] = bs  # subprocesses (workers, CLI) use the same broker
    try:
        yield bs
    finally:
        os.environ.pop("KAFKA_BOOTSTRAP", None)
        subprocess.run([str(script), "stop"], env=env)


@pytest.fixture
def unique_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kafka_settings(kafka_bootstrap, unique_name):
    """Settings whose topic names are private to one test."""
    from stream_dedup.config import load_settings

    s = load_settings(environ={"KAFKA_BOOTSTRAP": kafka_bootstrap})
    s.kafka.bootstrap = kafka_bootstrap
    t = s.topics
    t.pages, t.dlq, t.verdicts = f"{unique_name}.pages", f"{unique_name}.pages.dlq", f"{unique_name}.verdicts"
    t.unique, t.duplicate, t.internal_prefix = f"{unique_name}.unique", f"{unique_name}.duplicate", unique_name
    t.clusters = f"{unique_name}.clusters"
    s.worker.app_id = unique_name
    return s


def run_and_read_index(settings, folder: Path, evs: list[dict], *, looks: bool = False) -> tuple[dict, dict]:
    """The final verdicts of ``evs`` through an Engine over ``folder``, and then every key and value
    of its index store, read back from the RocksDB files (``looks``: every insert searches its
    buckets for an old entry of its id, as where the engine cannot know the id is new)."""
    from stream_dedup.core.engine import Engine
    from stream_dedup.core.store import KVStore

    with Engine(settings, folder) as e:
        if looks:
            e._all_ids_known = False
        verdicts = {v.id: v.to_dict() for ev in evs for v in e.process(ev)}
    kv = KVStore(folder / "index")
    try:
        return dict(kv.items()), verdicts
    finally:
        kv.close()
