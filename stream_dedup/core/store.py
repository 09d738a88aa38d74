"""A bytes -> bytes mapping on RocksDB (rocksdict): the state store of the embedded engine.

The index, the digest store and the decide stage take any ``MutableMapping[bytes, bytes]``; in the
Kafka workers that mapping is a RocksDB-backed Faust table partition (with its changelog), here it
is a local RocksDB folder, so both drivers run the same state code over the same on-disk format.
"""
from __future__ import annotations

import shutil
from collections.abc import MutableMapping
from pathlib import Path
from typing import Iterator

from rocksdict import Options, Rdict


class KVStore(MutableMapping):
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.increase_parallelism(2)
        self._db = Rdict(str(self.path), opts)

    def __getitem__(self, key: bytes) -> bytes:
        v = self._db.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def get(self, key: bytes, default=None):
        v = self._db.get(key)
        return default if v is None else v

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        self._db.delete(key)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._db.keys())

    def items(self):  # type: ignore[override]
        return self._db.items()

    def __len__(self) -> int:
        return sum(1 for _ in self._db.keys())

    def count(self, prefix: bytes = b"") -> int:
        return sum(1 for k in self._db.keys() if k.startswith(prefix))

    def approximate_size(self) -> int:
        try:
            return int(self._db.property_int_value("rocksdb.estimate-live-data-size") or 0)
        except Exception:  # noqa: BLE001 - property not available on every build
            return 0

    def close(self) -> None:
        self._db.close()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
