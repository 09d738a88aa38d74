"""A byte-keyed state store on RocksDB (rocksdict), with an optional write listener.

Why a listener: in the Kafka workers every write to a partition's store must also reach that
partition's changelog topic, so that another worker can rebuild the store when the partition
moves. The core calls ``put``/``delete``; the stream driver installs a listener that produces
the same (key, value) pairs to the changelog. In ``scan`` nothing listens.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterator

from rocksdict import Options, Rdict, WriteBatch

WriteListener = Callable[[bytes, bytes | None], None]


class KVStore:
    """Raw-bytes RocksDB; keys sort bytewise, so big-endian numbers in keys sort numerically."""

    def __init__(self, path: str | Path, *, listener: WriteListener | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_max_background_jobs(2)
        opts.increase_parallelism(2)
        self._db = Rdict(str(self.path), opts)
        self._listener = listener
        self._batch: WriteBatch | None = None

    # --- reads
    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        return self._db.get(keys) if keys else []

    def prefix(self, prefix: bytes, limit: int | None = None, start: bytes | None = None
               ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs whose key starts with prefix, in key order, from ``start`` if given."""
        it = self._db.iter()
        it.seek(start if start is not None else prefix)
        n = 0
        while it.valid():
            k = it.key()
            if not k.startswith(prefix):
                break
            yield k, it.value()
            n += 1
            if limit is not None and n >= limit:
                break
            it.next()

    def range(self, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with start <= key < stop."""
        it = self._db.iter()
        it.seek(start)
        while it.valid():
            k = it.key()
            if k >= stop:
                break
            yield k, it.value()
            it.next()

    # --- writes (batched between begin() and commit(), so one event's writes land atomically)
    def begin(self) -> None:
        if self._batch is None:
            self._batch = WriteBatch(raw_mode=True)

    def commit(self) -> None:
        if self._batch is not None:
            if not self._batch.is_empty():
                self._db.write(self._batch)
            self._batch = None

    def put(self, key: bytes, value: bytes) -> None:
        (self._batch or self._db).put(key, value)
        if self._listener is not None:
            self._listener(key, value)

    def delete(self, key: bytes) -> None:
        (self._batch or self._db).delete(key)
        if self._listener is not None:
            self._listener(key, None)

    def apply_changelog(self, key: bytes, value: bytes | None) -> None:
        """Restore path: write without notifying the listener (the change is already logged)."""
        if value is None:
            self._db.delete(key)
        else:
            self._db.put(key, value)

    def count(self, prefix: bytes = b"") -> int:
        return sum(1 for _ in self.prefix(prefix))

    def approximate_size(self) -> int:
        try:
            return int(self._db.property_int_value("rocksdb.estimate-live-data-size") or 0)
        except Exception:  # noqa: BLE001 - property not available on every build
            return 0

    def flush(self) -> None:
        self.commit()
        self._db.flush()

    def close(self) -> None:
        self.commit()
        self._db.close()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
