"""Exactly-once after a crash: local tables that may hold aborted writes are restored from the changelogs.

Faust writes a table's RocksDB database at once and its changelog record inside the batch's
transaction. A worker killed in the middle of a transaction leaves local writes whose changelog
records (and the verdicts sent with them) were aborted, among them decide states that say a verdict
went out: restored as they are, the replayed batch finds "already emitted" and that verdict never
comes. Kafka Streams wipes an exactly-once task's local state after an unclean shutdown; so does the
worker: a marker is written when it stops cleanly, and read and removed when it starts.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

log = logging.getLogger("stream_dedup.worker")

MARKER = "stopped-cleanly"


def settle(state_dir: Path, tabledir: Path, exactly_once: bool) -> bool:
    """At start: remove the marker; under exactly-once without it, delete the local tables (they are
    restored from the changelogs). Returns whether they were deleted."""
    marker = state_dir / MARKER
    clean = marker.exists()
    marker.unlink(missing_ok=True)
    if not exactly_once or clean or not tabledir.exists():
        return False
    shutil.rmtree(tabledir)
    log.warning("exactly-once: the last run did not stop cleanly; local tables deleted, to be restored "
                "from the changelogs (%s)", tabledir)
    return True


def mark(state_dir: Path) -> None:
    """At a clean stop: the local tables hold only what the changelogs hold."""
    if state_dir.is_dir():
        (state_dir / MARKER).write_text("the worker stopped cleanly; removed when it starts\n", encoding="utf-8")
