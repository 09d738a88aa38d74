"""`make demo`, the README's first command, as a user runs it: it starts its own broker from the
project's jars, prints its workers' status page addresses, its two workers answer every event of
the shipped sample, their latest verdicts are the ones `scan` gives the same file; with DEMO_KEEP=1
everything keeps running (the pages answer) until Ctrl-C, which stops the broker it started."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..conftest import free_port
from .pipeline import REPO, key_of, latest

pytestmark = pytest.mark.kafka
SAMPLE = REPO / "examples" / "sample.jsonl"


def judged(records: list[dict]) -> dict[str, tuple]:
    """id -> (verdict, match, duplicate_of) of each id's latest revision."""
    return {i: key_of(v) for i, v in latest(records).items()}


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_pair() -> int:
    """A port P with P + 1 free too: the demo's two status pages."""
    for _ in range(50):
        p = free_port()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", p + 1)) != 0:
                return p
    raise RuntimeError("no two free ports in a row")


def kept_then_interrupted(env: dict, tmp: Path) -> subprocess.CompletedProcess:
    """Run the demo with DEMO_KEEP=1; once it says it keeps running, read each worker's page (its
    ``served_by``, as ``served``), then Ctrl-C it (SIGINT) and wait for it to stop."""
    err = tmp / "demo.err"
    with open(err, "w") as e:
        p = subprocess.Popen(["bash", str(REPO / "deploy" / "demo.sh")], env=env, stdout=subprocess.PIPE, stderr=e,
                             text=True)
    out, served = [], set()
    deadline = time.time() + 900
    for line in p.stdout:
        out.append(line)
        if "DEMO_KEEP=1" in line or time.time() > deadline:
            break
    for url in re.findall(r"status page (http://\S+)/status", "".join(out)):
        with urllib.request.urlopen(url + "/status.json", timeout=120) as r:
            served.add(json.loads(r.read())["served_by"])
    p.send_signal(signal.SIGINT)
    rest, _ = p.communicate(timeout=180)
    r = subprocess.CompletedProcess(p.args, p.returncode, "".join(out) + rest, err.read_text())
    r.served = served
    return r


def test_demo_answers_every_sample_event_as_scan_does(tmp_path):
    if not (REPO / ".venv" / "bin" / "stream-dedup").exists():
        pytest.skip("deploy/demo.sh runs the repository's .venv, which `make` creates")
    if not (shutil.which("java") and shutil.which("mvn")):
        pytest.skip("the demo's broker needs Java 17 and Maven (deploy/kafka/kafka.sh)")
    port, controller, web = free_port(), free_port(), free_pair()
    # no broker named: it starts its own, as `make demo` does on 9092, here on free ports
    named = ("KAFKA_BOOTSTRAP", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "KAFKA_SASL_SCRAM", "KAFKA_SSL_KEYSTORE")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DEDUP_") and k not in named}
    env.update(DEMO_PORT=str(port), KAFKA_CONTROLLER_PORT=str(controller), DEMO_WEB_PORT=str(web), DEMO_KEEP="1")
    run_dir = Path(env.get("KAFKA_HOME", REPO / ".cache" / "kafka")) / f"run-{port}"
    try:
        r = kept_then_interrupted(env, tmp_path)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        pages = re.findall(r"worker (demo-w\d): status page (http://\S+/status)", r.stdout)
        assert [n for n, _ in pages] == ["demo-w1", "demo-w2"], r.stdout[:2000]
        assert r.served == {"demo-w1", "demo-w2"}, r.served  # each page names the worker serving it
        assert not listening(port), "the demo left its broker running"
        assert not (run_dir / "kafka.pid").exists()
    finally:
        pid = run_dir / "kafka.pid"
        if pid.exists():  # stop what a failed demo left behind
            subprocess.run(["bash", str(REPO / "deploy" / "kafka" / "kafka.sh"), "stop"],
                           env=dict(env, KAFKA_PORT=str(port)), timeout=60)
        shutil.rmtree(run_dir, ignore_errors=True)
    n = sum(1 for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip())
    assert f"summary: {n} of {n} events have verdicts" in r.stdout
    path = re.search(r"revisions included: (\S+\.jsonl)\)", r.stdout)
    assert path, r.stdout
    verdicts = REPO / path.group(1)
    demo = judged([json.loads(line) for line in verdicts.read_text(encoding="utf-8").splitlines()])
    prefix = verdicts.name.removesuffix(".verdicts.jsonl")
    assert not list(verdicts.parent.glob(f"{prefix}-w?")), "the demo left its workers' state folders"
    for f in verdicts.parent.glob(f"{prefix}*"):  # its logs and verdicts: this test's own
        f.unlink()

    out = tmp_path / "scan.jsonl"
    s = subprocess.run([sys.executable, "-m", "stream_dedup.cli", "scan", str(SAMPLE), "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert s.returncode == 0, s.stderr
    expected = judged([json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()])
    assert len(expected) == n
    assert demo == expected
    assert sum(v[0] == "duplicate" for v in expected.values()) >= 8  # the sample's copies are found
