"""The local three-broker cluster (``KAFKA_NODES=3 deploy/kafka/kafka.sh``): topics replicated three
times with min.insync.replicas 2 take writes and serve reads with one broker down."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.long]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "kafka" / "kafka.sh"


def test_a_cluster_of_three_keeps_working_with_one_broker_down(tmp_path):
    env = dict(os.environ, KAFKA_NODES="3", KAFKA_PORT=str(free_port()), STREAM_DEDUP_KAFKA__REPLICATION_FACTOR="3",
               STREAM_DEDUP_KAFKA__MIN_INSYNC_REPLICAS="2", STREAM_DEDUP_TOPICS__PAGES="c3.pages")
    env.pop("KAFKA_BOOTSTRAP", None)
    subprocess.run([str(SCRIPT), "start", "--fresh"], env=env, check=True, capture_output=True, timeout=240)
    try:
        bootstrap = subprocess.run([str(SCRIPT), "bootstrap"], env=env, check=True, capture_output=True,
                                   text=True).stdout.strip()
        assert bootstrap.count(",") == 2, bootstrap

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "stream_dedup.cli", "-b", bootstrap, *args], env=env,
                                  cwd=REPO, capture_output=True, text=True, timeout=180)

        assert cli("topics", "apply").returncode == 0
        assert cli("produce", "examples/sample.jsonl", "--no-progress").returncode == 0
        subprocess.run([str(SCRIPT), "stop-node", "2"], env=env, check=True, capture_output=True, timeout=120)
        assert cli("produce", "examples/sample.jsonl", "--no-progress").returncode == 0
        t = cli("tail", "--topic", "c3.pages", "--to-end", "--summary")
        lines = (REPO / "examples" / "sample.jsonl").read_text(encoding="utf-8").splitlines()
        assert t.returncode == 0 and json.loads(t.stdout)["messages"] == 2 * len([x for x in lines if x.strip()]), \
            t.stdout + t.stderr
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
