"""Every Kafka command with no broker at its address: one line that names the address, exit code 3,
no traceback and no librdkafka log line, within seconds."""
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
COMMANDS = [["status"], ["topics", "apply"], ["produce", "examples/sample.jsonl"], ["tail", "--max", "1"],
            ["redrive", "--dry-run"], ["worker"]]


def test_every_kafka_command_fails_fast_and_clearly_without_a_broker(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    env = {"PATH": "/usr/bin:/bin", "STREAM_DEDUP_WORKER__STATE_DIR": str(tmp_path / "state"),
           "STREAM_DEDUP_WORKER__WEB_PORT": "0"}
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "stream_dedup.cli", "-b", address, *cmd], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in COMMANDS]
    for cmd, p in zip(COMMANDS, procs):
        out, err = p.communicate(timeout=120)
        lines = [x for x in err.splitlines() if x.strip()]
        assert p.returncode == 3, (cmd, p.returncode, err[-2000:])
        assert lines == [lines[0]] and lines[0].startswith(f"stream-dedup: cannot reach Kafka at {address} ("), \
            (cmd, err[-2000:])
        assert "Traceback" not in err and "rdkafka" not in err.lower() and "FAIL|" not in err, (cmd, err[-2000:])
    assert time.monotonic() - t0 < 60
