"""SASL/SCRAM passes through to every Kafka client (confluent admin/producer/consumer and the Faust
workers' aiokafka), on a local broker with a SASL_PLAINTEXT listener; credentials never show up in
logs, `status` or `config` output; a wrong password fails clearly; the HTTP port stays on loopback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from .pipeline import REPO, Workers, latest, produce_events, read_all, settings_env

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
PASSWORD = "s3cret-Pa55w0rd-do-not-log"
SCRIPT = REPO / "deploy" / "kafka" / "kafka.sh"


@pytest.fixture(scope="module")
def sasl_bootstrap():
    port = int(os.environ.get("STREAM_DEDUP_TEST_SASL_PORT", "19292"))
    env = dict(os.environ, KAFKA_PORT=str(port), KAFKA_SASL_SCRAM=f"dedup:{PASSWORD}")
    env.pop("KAFKA_BOOTSTRAP", None)  # kafka.sh must start its own broker here, whatever the suite uses
    r = subprocess.run([str(SCRIPT), "start", "--fresh"], env=env, capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        pytest.fail(f"could not start the SASL broker: {r.stderr[-2000:]}")
    try:
        yield f"127.0.0.1:{port + 2}"
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def sasl_env(password: str = PASSWORD) -> dict[str, str]:
    return {"STREAM_DEDUP_KAFKA__CLIENT__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "STREAM_DEDUP_KAFKA__CLIENT__SASL_MECHANISM": "SCRAM-SHA-512",
            "STREAM_DEDUP_KAFKA__CLIENT__SASL_USERNAME": "dedup",
            "STREAM_DEDUP_KAFKA__CLIENT__SASL_PASSWORD": password}


def cli(settings, *args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "stream_dedup.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=settings_env(settings, **(env or sasl_env())))


def test_sasl_scram_reaches_every_client_and_secrets_stay_out_of_output(kafka_settings, tmp_path, sasl_bootstrap):
    s = kafka_settings
    s.kafka.bootstrap = sasl_bootstrap
    s.kafka.client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                      "sasl.username": "dedup", "sasl.password": PASSWORD}
    s.topics.partitions = 2
    r = cli(s, "topics", "apply")
    assert r.returncode == 0, r.stderr
    events = [{"id": f"m{i}", "text": f"第{i}条：本市今天上午召开新闻发布会，介绍今年夏季防汛工作安排。", "ts": 1000 + i}
              for i in range(30)]
    workers = Workers(s, tmp_path, supervise=False)
    try:
        workers.start("w0", **sasl_env())
        produce_events(s, events)  # confluent producer with the SASL settings
        got = latest(read_all(s, s.topics.verdicts, until=lambda ms: len(latest(ms)) >= len(events), timeout=300))
        assert len(got) == len(events), workers.logs()
        time.sleep(11)
        status = cli(s, "status", "--json")
        config = cli(s, "config")
    finally:
        workers.stop_all()
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["workers"], status.stdout
    for out in (status.stdout, status.stderr, config.stdout, config.stderr,
                *(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))):
        assert PASSWORD not in out
    assert "***" in config.stdout  # the password is there, redacted

    # the wrong password: a clear failure, not a hang, and still no secret in the output
    bad = cli(s, "topics", "apply", env=sasl_env("wrong-password"), timeout=180)
    assert bad.returncode != 0
    assert "wrong-password" not in bad.stdout + bad.stderr
    assert any(w in (bad.stdout + bad.stderr).lower() for w in ("authentication", "broker", "reach", "timed out"))


def test_http_port_binds_to_loopback_unless_configured():
    from stream_dedup.config import Settings, load_settings
    from stream_dedup.stream.app import build_app

    app = build_app(Settings())
    assert app.conf.web_bind == "127.0.0.1" and app.conf.web_host == "127.0.0.1"
    assert not app.conf.web_tables_enabled and not app.conf.web_router_enabled  # no table contents over HTTP
    opened = build_app(load_settings(environ={"STREAM_DEDUP_WORKER__WEB_HOST": "0.0.0.0"}))
    assert opened.conf.web_bind == "0.0.0.0"
