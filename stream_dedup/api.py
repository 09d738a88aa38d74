"""The Python API: the same engine the workers run, for notebooks and services."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from .config import Settings, load_settings


class Deduper:
    """``Deduper(config).check(doc) -> Verdict``; ``check_many(docs)`` yields one verdict per doc.

    ``config`` is a Settings object, a path to a TOML file, or None for the defaults. Verdicts are
    the ones known at the time of the call; a later, earlier-dated document can revise them
    (``revisions()`` lists what changed).
    """

    def __init__(self, config: Settings | str | Path | None = None, state_dir: str | Path | None = None):
        from .core.engine import Engine

        settings = config if isinstance(config, Settings) else load_settings(config)
        self.engine = Engine(settings, state_dir)
        self._seq = 0
        self._revised: list = []

    def check(self, doc: dict | str | bytes):
        self._seq += 1
        verdicts = self.engine.process(doc, default_ts=self._seq)
        own = None
        for v in verdicts:
            if v.revision == 0 and own is None:
                own = v
            else:
                self._revised.append(v)
        if own is None:  # a replay of a known id: its current verdict
            ident = str(doc["id"]) if isinstance(doc, dict) else None
            own = self.engine.verdict(ident) if ident else None
        return own

    def check_many(self, docs: Iterable[dict | str | bytes]) -> Iterator:
        for d in docs:
            yield self.check(d)

    def revisions(self) -> list:
        out, self._revised = self._revised, []
        return out

    def verdict(self, ident: str):
        """The current verdict of a document already checked (revisions included), or None."""
        return self.engine.verdict(ident)

    def clusters(self) -> list:
        """Pages that have copies, largest first: ``Cluster(id, size, canonical, members, ts, text)``."""
        return sorted(self.engine.clusters(), key=lambda c: (-c.size, c.ts or 0, c.id))

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> "Deduper":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
