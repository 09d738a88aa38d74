"""The deployment files agree with the code: commands, ports, paths, env vars, topics and metric names.

No container engine runs here, so instead of starting them, every reference they make is checked
against the package: a renamed setting, CLI command, HTTP route or metric fails this test.
"""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from stream_dedup.cli import main as cli
from stream_dedup.config import Settings, load_settings
from stream_dedup.stream.worker import Worker
from stream_dedup.stream.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"


@pytest.fixture(scope="module")
def routes() -> set[str]:
    return set(Worker(Settings()).app.web.views)


def metric_names() -> set[str]:
    return {fam.name for fam in Metrics().registry.collect()}


def check_env(env: dict[str, str]) -> Settings:
    """Every STREAM_DEDUP_* variable names a real setting (load_settings raises on unknown ones)."""
    env = {k: v for k, v in env.items() if k.startswith("STREAM_DEDUP_") or k == "KAFKA_BOOTSTRAP"}
    env.pop("STREAM_DEDUP_CONFIG", None)
    env.pop("STREAM_DEDUP_TOPICS_DIR", None)
    return load_settings(environ=env)


def check_command(args: list[str]) -> None:
    cmd = cli
    for a in args:
        if a.startswith("-"):
            break
        assert a in cmd.commands, f"{a!r} is not a command of {cmd.name}: {sorted(cmd.commands)}"
        cmd = cmd.commands[a]
        if not hasattr(cmd, "commands"):
            break


def test_unknown_settings_are_caught_by_this_check():
    with pytest.raises(Exception):
        check_env({"STREAM_DEDUP_WORKER__NO_SUCH_THING": "1"})
    with pytest.raises(AssertionError):
        check_command(["no-such-command"])


def test_dockerfile():
    text = (REPO / "Dockerfile").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))
    assert entry == ["stream-dedup"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "stream-dedup" in scripts
    check_command(json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1)))
    for src in re.findall(r"^COPY (\S+)", text, re.M):
        assert (REPO / src).exists(), src
    env = dict(re.findall(r"(STREAM_DEDUP_\w+)=(\S+)", text))
    s = check_env(env)
    assert str(s.worker.state_dir) == "/state"
    assert int(re.search(r"^EXPOSE (\d+)", text, re.M).group(1)) == Settings().worker.web_port


def test_docker_compose_and_prometheus(routes):
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    workers = [n for n, s in services.items() if s.get("command") == ["worker"]]
    assert len(workers) == 2
    for name, svc in services.items():
        if svc.get("build"):
            check_command(svc["command"])
            check_env({k: str(v) for k, v in svc.get("environment", {}).items()})
            assert svc["environment"]["KAFKA_BOOTSTRAP"] == "kafka:9092"
    for name in workers:
        svc = services[name]
        s = check_env({k: str(v) for k, v in svc["environment"].items()})
        assert svc["restart"] == "unless-stopped"
        assert any(p.endswith(f":{s.worker.web_port}") for p in svc["ports"])
        assert "/healthz" in " ".join(svc["healthcheck"]["test"]) and "/healthz" in routes
    kafka_env = services["kafka"]["environment"]
    assert "PLAINTEXT://kafka:9092" in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
    prom = services["prometheus"]
    conf_path = prom["volumes"][0].split(":")[0]
    conf = yaml.safe_load((REPO / conf_path).read_text())
    job = conf["scrape_configs"][0]
    assert job["metrics_path"] == "/metrics" and "/metrics" in routes
    targets = job["static_configs"][0]["targets"]
    assert sorted(t.split(":")[0] for t in targets) == sorted(workers)
    assert all(t.endswith(f":{Settings().worker.web_port}") for t in targets)


def k8s_docs() -> dict[str, dict]:
    out = {}
    for p in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(p.read_text()):
            out[doc.get("kind", p.name)] = doc
    return out


def test_kubernetes_manifests(routes, tmp_path):
    docs = k8s_docs()
    kust = docs.pop("kustomization.yaml", None) or yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for res in kust["resources"]:
        assert (K8S / res).exists(), res
    cm = docs["ConfigMap"]
    (tmp_path / "config.toml").write_text(cm["data"]["config.toml"])
    s = load_settings(str(tmp_path / "config.toml"), environ={})
    assert s.worker.web_host == "0.0.0.0" and s.kafka.replication_factor == 3

    sts = docs["StatefulSet"]
    pod = sts["spec"]["template"]
    c = pod["spec"]["containers"][0]
    check_command(c["args"])
    env = {e["name"]: e.get("value", "x") for e in c["env"]}
    assert env.pop("STREAM_DEDUP_CONFIG") == "/etc/stream-dedup/config.toml"
    check_env(env)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["state"] == str(s.worker.state_dir) == env["STREAM_DEDUP_WORKER__STATE_DIR"]
    assert mounts["config"] == "/etc/stream-dedup"
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
    assert port == s.worker.web_port
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] in routes and get["port"] == "http"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/path"] in routes and int(ann["prometheus.io/port"]) == port
    assert sts["spec"]["serviceName"] == docs["Service"]["metadata"]["name"]
    assert docs["Service"]["spec"]["clusterIP"] == "None"  # headless
    labels = pod["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    pm = docs["PodMonitor"]["spec"]
    assert pm["selector"]["matchLabels"].items() <= labels.items()
    assert pm["podMetricsEndpoints"][0]["port"] == "http" and pm["podMetricsEndpoints"][0]["path"] in routes
    job = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    check_command(job["args"])
    assert job["args"] == ["topics", "apply"]


def test_grafana_dashboard_uses_only_metrics_the_workers_export():
    dash = json.loads((REPO / "deploy" / "grafana" / "stream-dedup.json").read_text())
    known = metric_names()
    used = set()
    for panel in dash["panels"]:
        for t in panel["targets"]:
            for name in re.findall(r"\b(stream_dedup_[a-z_]+)", t["expr"]):
                base = re.sub(r"_(total|bucket|count|sum)$", "", name)
                assert base in known, f"{panel['title']}: {name} is not exported (known: {sorted(known)})"
                used.add(base)
    # every metric the issue asks for is on the dashboard
    assert {"stream_dedup_events_in", "stream_dedup_verdicts", "stream_dedup_dlq", "stream_dedup_revisions",
            "stream_dedup_stage_seconds", "stream_dedup_bucket_bytes", "stream_dedup_state_bytes",
            "stream_dedup_bloom_fill_ratio", "stream_dedup_bloom_fp_rate_estimate",
            "stream_dedup_consumer_lag", "stream_dedup_verdict_latency_seconds"} <= used
    exprs = " ".join(t["expr"] for panel in dash["panels"] for t in panel["targets"])
    assert "process_cpu_seconds_total" in exprs and "process_resident_memory_bytes" in exprs


def test_readme_metrics_reference_lists_every_metric():
    readme = (REPO / "README.md").read_text()
    for name in metric_names():
        assert name in readme, f"{name} missing from the README's metrics reference"
