"""What one worker process holds on its host: its web port and its state folder.

Two workers on one host must each have their own: a second worker on a busy port failed with a
long traceback from the web server, and one on a state folder another worker holds would have
written the same RocksDB files. ``claim`` checks both before the worker starts and holds the
folder's lock for as long as the process lives.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from ..config import Settings

LOCK_NAME = "worker.lock"


class Claimed(RuntimeError):
    """Another process holds what this worker needs; the message names the setting to change."""


def check_port(host: str, port: int) -> None:
    """Raise ``Claimed`` when ``port`` on ``host`` is taken (bound as the web server binds it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            raise Claimed(f"worker.web_port {port} on {host} is in use (another worker?): give each worker its own "
                          "(STREAM_DEDUP_WORKER__WEB_PORT; 0 for none)") from None


def lock_state(folder: Path) -> IO[str]:
    """Lock ``folder`` for this process (released when the process ends, however it ends); raise
    ``Claimed`` when another running worker holds it. Keep the returned file open."""
    folder.mkdir(parents=True, exist_ok=True)
    f = open(folder / LOCK_NAME, "a+", encoding="utf-8")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise Claimed(f"worker.state_dir {folder} is used by another running worker (pid {holder}): give each "
                      "worker its own (STREAM_DEDUP_WORKER__STATE_DIR)") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def claim(settings: Settings) -> IO[str]:
    """Check the web port and lock the state folder; returns the lock to keep."""
    w = settings.worker
    if w.web_port:
        check_port(w.web_host, w.web_port)
    return lock_state(Path(w.state_dir))
