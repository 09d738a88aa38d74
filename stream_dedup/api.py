"""The Python API: the same engine the workers run, for notebooks and services."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .config import Settings, load_settings


class Deduper:
    """``Deduper(config).check(doc) -> Verdict``; ``check_many(docs)`` yields one verdict per doc.

    ``config`` is a Settings object, a path to a TOML file, or None for the defaults. Verdicts are
    the ones known at the time of the call; a later, earlier-dated document can revise them
    (``revisions()`` lists what changed).

    A document without ``ts`` is dated by the clock at ``check`` (epoch ms), as the workers date one
    by its Kafka message's timestamp: so the window (``engine.window_ms``) means time for such
    documents too. A document's state, once it has left memory (``engine.docs_in_memory``), is
    forgotten ``forget_windows`` to 1.5 x ``forget_windows`` windows of event time after it left or
    last changed, as the workers' tables forget theirs: a ``Deduper`` that runs for months keeps a
    bounded folder. ``verdict(id)`` then says None for it. ``forget_windows=None`` keeps every
    state until ``close``.
    """

    def __init__(self, config: Settings | str | Path | None = None, state_dir: str | Path | None = None,
                 *, forget_windows: float | None = 2, clock: Callable[[], float] = time.time):
        from .core.engine import Engine

        settings = config if isinstance(config, Settings) else load_settings(config)
        forget = None if forget_windows is None else max(1, int(forget_windows * settings.engine.window_ms))
        self.engine = Engine(settings, state_dir, forget_after=forget, clock=clock)
        self._clock = clock
        self._last_ts = 0
        self._revised: list = []

    def check(self, doc: dict | str | bytes):
        # never backwards: a clock set back must not make a later document look earlier
        self._last_ts = max(self._last_ts, int(self._clock() * 1000))
        verdicts = self.engine.process(doc, default_ts=self._last_ts)
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
