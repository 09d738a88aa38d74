"""SASL/SCRAM and TLS pass through to every Kafka client (confluent admin/producer/consumer and the
Faust workers' aiokafka), on a local broker with a SASL_PLAINTEXT and an SSL listener; credentials
never show up in logs, `status` or `config` output; a wrong password or an untrusted certificate fails
clearly; the HTTP port stays on loopback."""
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
def secure_broker(tmp_path_factory):
    """A broker with a SCRAM-SHA-512 user on SASL_PLAINTEXT (port+2) and TLS on SSL (port+3), its
    certificate issued for 127.0.0.1 by a throwaway CA (trustme)."""
    import trustme
    from cryptography.hazmat.primitives import serialization as ser

    certs = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    key = ser.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    with open(certs / "broker.pem", "wb") as f:  # Kafka's PEM keystore: a PKCS#8 private key, then the chain
        f.write(key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()))
        for blob in server.cert_chain_pems:
            f.write(blob.bytes())
    trustme.CA().cert_pem.write_to_path(str(certs / "other-ca.pem"))  # trusts nothing the broker has
    port = int(os.environ.get("STREAM_DEDUP_TEST_SASL_PORT", "19292"))
    env = dict(os.environ, KAFKA_PORT=str(port), KAFKA_SASL_SCRAM=f"dedup:{PASSWORD}",
               KAFKA_SSL_KEYSTORE=str(certs / "broker.pem"))
    env.pop("KAFKA_BOOTSTRAP", None)  # kafka.sh must start its own broker here, whatever the suite uses
    r = subprocess.run([str(SCRIPT), "start", "--fresh"], env=env, capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        pytest.fail(f"could not start the secured broker: {r.stderr[-2000:]}")
    try:
        yield {"SASL_PLAINTEXT": f"127.0.0.1:{port + 2}", "SSL": f"127.0.0.1:{port + 3}", "certs": certs}
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def client_settings(protocol: str, certs, *, password: str = PASSWORD, ca: str = "ca.pem") -> dict[str, str]:
    if protocol == "SSL":
        return {"security.protocol": "SSL", "ssl.ca.location": str(certs / ca)}
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "dedup", "sasl.password": password}


def as_env(client: dict[str, str]) -> dict[str, str]:
    """The settings as a deployment passes them: STREAM_DEDUP_KAFKA__CLIENT__SASL_PASSWORD etc."""
    return {"STREAM_DEDUP_KAFKA__CLIENT__" + k.replace(".", "_").upper(): v for k, v in client.items()}


def cli(settings, *args, env, timeout=120):
    return subprocess.run([sys.executable, "-m", "stream_dedup.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=settings_env(settings, **env))


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SSL"])
def test_security_settings_reach_every_client_and_secrets_stay_out_of_output(kafka_settings, tmp_path,
                                                                            secure_broker, protocol):
    s = kafka_settings
    certs = secure_broker["certs"]
    s.kafka.bootstrap = secure_broker[protocol]
    s.kafka.client = client_settings(protocol, certs)
    env = as_env(s.kafka.client)
    s.topics.partitions = 2
    r = cli(s, "topics", "apply", env=env)  # confluent admin client
    assert r.returncode == 0, r.stderr
    events = [{"id": f"m{i}", "text": f"第{i}条：本市今天上午召开新闻发布会，介绍今年夏季防汛工作安排。", "ts": 1000 + i}
              for i in range(30)]
    workers = Workers(s, tmp_path, supervise=False)
    try:
        workers.start("w0", **env)  # Faust (aiokafka) consumer, producer and changelogs
        produce_events(s, events)  # confluent producer
        got = latest(read_all(s, s.topics.verdicts, until=lambda ms: len(latest(ms)) >= len(events), timeout=300))
        assert len(got) == len(events), workers.logs()
        assert sum(1 for v in got.values() if v["verdict"] == "duplicate") >= 1
        time.sleep(11)
        status = cli(s, "status", "--json", env=env)  # confluent consumer of the status topic
        config = cli(s, "config", env=env)
    finally:
        workers.stop_all()
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["workers"], status.stdout
    for out in (status.stdout, status.stderr, config.stdout, config.stderr,
                *(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))):
        assert PASSWORD not in out
    if protocol == "SASL_PLAINTEXT":
        assert "***" in config.stdout  # the password is there, redacted

    # the wrong password / a CA that did not sign the broker's certificate: a clear failure, not a
    # hang, and still no secret in the output
    wrong = (client_settings(protocol, certs, password="wrong-password") if protocol == "SASL_PLAINTEXT"
             else client_settings(protocol, certs, ca="other-ca.pem"))
    bad = cli(s, "topics", "apply", env=as_env(wrong), timeout=180)
    assert bad.returncode != 0
    assert "wrong-password" not in bad.stdout + bad.stderr
    assert any(w in (bad.stdout + bad.stderr).lower() for w in ("authentication", "certificate", "ssl", "broker",
                                                                 "reach", "timed out"))


def test_http_port_binds_to_loopback_unless_configured():
    from stream_dedup.config import Settings, load_settings
    from stream_dedup.stream.worker import Worker

    app = Worker(Settings()).app
    assert app.conf.web_bind == "127.0.0.1" and app.conf.web_host == "127.0.0.1"
    assert not app.conf.web_tables_enabled and not app.conf.web_router_enabled  # no table contents over HTTP
    opened = Worker(load_settings(environ={"STREAM_DEDUP_WORKER__WEB_HOST": "0.0.0.0"})).app
    assert opened.conf.web_bind == "0.0.0.0"
