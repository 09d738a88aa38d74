"""Two workers on one host: a busy web port and a state folder another live worker holds are each
one clear line naming the setting, exit code 2, before the worker starts."""
import fcntl
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def worker(tmp_path, **env: str) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "STREAM_DEDUP_WORKER__STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "stream_dedup.cli", "-b", f"127.0.0.1:{free_port()}", "worker"],
                          cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=120)


def one_line(r: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == code and len(lines) == 1 and all(n in lines[0] for n in needles), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr


def test_a_busy_web_port_is_one_line_naming_the_setting(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        one_line(worker(tmp_path, STREAM_DEDUP_WORKER__WEB_PORT=str(port)), 2, "worker.web_port", str(port),
                 "in use")


def test_a_state_folder_another_worker_holds_is_one_line_naming_the_setting(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir()
    with open(folder / "worker.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242")
        held.flush()
        one_line(worker(tmp_path, STREAM_DEDUP_WORKER__WEB_PORT="0"), 2, "worker.state_dir", "pid 4242")
    # released: the worker gets past its claims to the broker check (no broker here)
    one_line(worker(tmp_path, STREAM_DEDUP_WORKER__WEB_PORT="0"), 3, "cannot reach Kafka")
