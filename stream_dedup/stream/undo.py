"""Exactly-once: a table write is undone after a crash unless its transaction committed.

Faust writes a table's RocksDB database at once and the write's changelog record inside the batch's
transaction. A worker killed before that transaction commits leaves local writes whose changelog
records (and the verdicts sent with them) were aborted, among them decide states that say a verdict
went out: kept, the replayed batch finds "already emitted" and the verdict never comes. Wiping the
tables after every crash (Kafka Streams' way before KIP-892) makes the restarted worker restore them
whole from the changelogs, and the group waits for it.

Here the first write of a key since its last commit saves the key's committed value beside it
(``UNDO`` + key, in the same RocksDB write batch as the write). When the transaction that carries the
key's changelog record commits, the saved value is dropped (or, when the key was written again since,
replaced by the value just committed), in one write batch with the partition's persisted changelog
offset. A database opened with saved values left (a crash, a partition that moved before its commit)
gets them back first: it is then as it was at a commit, and Faust's recovery reads the changelog on
from the offset stored with it. Without the write-ahead log (``rocks``) a crash keeps a prefix of the
write batches, each of which leaves that true.
"""
from __future__ import annotations

from typing import Any, Iterable

import rocksdict
from faust.stores.rocksdb import Store

#: saved values sort with Faust's own keys (``__faust\0offset__``), which ``partition_items`` skips
UNDO = b"__faust\0undo\0"
_ABSENT, _PRESENT = b"\0", b"\1"
OFFSET_KEY: bytes = Store.offset_key  # where Faust keeps a partition's persisted changelog offset


def _saved(value: bytes | None) -> bytes:
    return _ABSENT if value is None else _PRESENT + value


def saved_keys(db: Any) -> set[bytes]:
    """The keys of ``db`` that have a saved committed value."""
    out = set()
    for key in db.keys(from_key=UNDO):
        if not key.startswith(UNDO):
            break
        out.add(key[len(UNDO):])
    return out


def restore(db: Any) -> int:
    """Put every saved committed value back (and drop the saved copies); returns how many keys."""
    batch = rocksdict.WriteBatch(raw_mode=True)
    n = 0
    for key, value in db.items(from_key=UNDO):
        if not key.startswith(UNDO):
            break
        if value[:1] == _PRESENT:
            batch.put(key[len(UNDO):], value[1:])
        else:
            batch.delete(key[len(UNDO):])
        batch.delete(key)
        n += 1
    if n:
        db.write(batch)
    return n


def write(db: Any, items: list[tuple[bytes, bytes | None]], journal: "Journal | None" = None) -> None:
    """``items`` (key, value or None to delete) in one RocksDB batch; with ``journal`` (exactly-once)
    after the committed values they replace."""
    batch = rocksdict.WriteBatch(raw_mode=True)
    if journal is not None:
        journal.save(db, batch, (key for key, _ in items))
    for key, value in items:
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    db.write(batch)


class Journal:
    """The keys with a saved committed value in one opening of a table partition's database (empty
    at open: ``restore`` has run). It holds no reference to the database, which Faust closes by
    dropping its own."""

    def __init__(self, keys: Iterable[bytes] = ()):
        self.keys = set(keys)

    def save(self, db: Any, batch: Any, keys: Iterable[bytes]) -> None:
        """Add to ``batch`` the committed value of each of ``keys`` not saved yet (before its write)."""
        saved = self.keys
        for key in keys:
            if key not in saved:
                batch.put(UNDO + key, _saved(db.get(key)))
                saved.add(key)

    def committed(self, db: Any, values: dict[bytes, bytes | None], offset: int) -> None:
        """The changelog records ``values`` (key -> its last value in the transaction) committed, the
        last at changelog ``offset``: their saved values go, or become these where the key has
        been written again since."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in values.items():
            if db.get(key) == value:
                batch.delete(UNDO + key)
                self.keys.discard(key)
            else:
                batch.put(UNDO + key, _saved(value))
                self.keys.add(key)
        batch.put(OFFSET_KEY, str(offset).encode())
        db.write(batch)
