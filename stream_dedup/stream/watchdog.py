"""Stall detection for stream partitions: lag that does not move while the worker claims to be ready.

Why this exists: Faust (faust-streaming 0.15 on aiokafka) can come out of a rebalance with a
partition assigned, the worker "ready", and no fetch ever issued for that partition again
(faust-streaming issues #175 and #629). Nothing is lost, since the committed offset stays put,
but every document routed there waits forever. The cure that always works is the one every
supervisor already offers: stop cleanly and start again, which rejoins the group and seeks to the
committed offsets. So the worker watches its own partitions and, when one has had lag and no
progress for ``stall_timeout_s``, it logs why and exits with ``EXIT_STALLED`` so that Kubernetes,
docker compose (``restart: unless-stopped``) or the test harness restarts it.

A restart costs the whole group a rebalance and that partition two minutes, so a cheaper step
comes first: after ``nudge_s`` without progress the worker resumes the partition in Faust's fetch
set (where it may have been left paused or marked as buffer-full) and seeks it to its position,
or, when the worker never read it (the form seen at start-up: no read offset, none committed
recorded), to the group's committed offset asked of the broker; once per stall, logging the
consumer's view of the partition. The restart stays the last resort.

The detector is pure (no Faust import) so that its rule is unit-tested on its own.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterable, TypeVar

EXIT_STALLED = 75  # EX_TEMPFAIL: "try again", which is what a restart does
EXIT_FAILED = 70  # EX_SOFTWARE: an agent raised; its batch is held and a restart replays it

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)  # a partition: Faust's TP in the worker, anything hashable in tests


def nudge_target(known: Iterable[int | None], ask: Callable[[], int] | None) -> tuple[int | None, str]:
    """Where a nudge seeks a stalled partition, and where that offset came from.

    ``known``: the positions the worker has (its read position, the gap tracker's, the committed
    offset Faust recorded); the earliest wins, so nothing between them is skipped. When it has
    none, ``ask`` (blocking: the group's committed offset asked of the broker, 0 when nothing is
    committed) gives one. That is the stall's start-up form in the benchmark logs (a partition
    active, not paused, never read, nothing committed yet), where a nudge that only resumed the
    partition left it unfetched until the restart."""
    offsets = [x for x in known if x is not None]
    if offsets:
        return min(offsets), "its position"
    if ask is None:
        return None, "no position known"
    try:
        return ask(), "the group's committed offset, asked of the broker"
    except Exception as e:  # the restart stays the remedy
        log.warning("could not ask the broker for the committed offset: %r", e)
        return None, "no position known; the broker did not answer"


@dataclass
class _Seen:
    offset: int | None
    since: float
    nudged: bool = False


@dataclass
class StallDetector(Generic[K]):
    """Per partition: the read offset and when it last changed; stalled = lag > 0 and no change for long."""

    timeout_s: float
    nudge_s: float = 0.0  # 0: no nudge, only the restart
    seen: dict[K, _Seen] = field(default_factory=dict)

    def reset(self, now: float) -> None:
        """Forget progress history (after a rebalance: every partition gets a fresh grace period)."""
        for s in self.seen.values():
            s.since, s.nudged = now, False

    def observe(self, now: float, positions: dict[K, tuple[int | None, int | None]],
                worked: frozenset[K] | set[K] = frozenset()) -> list[tuple[K, int, float]]:
        """``positions``: tp -> (next offset to read or None, log end offset or None); ``worked``: the
        partitions whose messages the agents processed since the last call.

        Returns the stalled partitions as (tp, lag, seconds without progress). A slow batch is not a
        stall: the read offset stands still while the agent works through what it has read.
        """
        for tp in list(self.seen):
            if tp not in positions:
                del self.seen[tp]
        stalled: list[tuple[K, int, float]] = []
        for tp, (pos, end) in positions.items():
            s = self.seen.get(tp)
            if s is None or s.offset != pos or tp in worked:
                self.seen[tp] = _Seen(pos, now)
                continue
            lag = (end or 0) - (pos or 0)
            if lag <= 0:
                s.since, s.nudged = now, False
                continue
            idle = now - s.since
            if self.timeout_s and idle >= self.timeout_s:
                stalled.append((tp, lag, idle))
        return stalled

    def unmoved(self, tp: K, pos: int | None) -> bool:
        """Whether ``tp`` was at ``pos`` at the last ``observe`` too (no progress since)."""
        s = self.seen.get(tp)
        return s is not None and s.offset == pos

    def to_nudge(self, now: float) -> list[K]:
        """Partitions that have had lag and no progress for ``nudge_s`` (as of the last ``observe``),
        each once per stall: a nudge that works shows as progress, which starts a new episode."""
        if not self.nudge_s:
            return []
        out: list[K] = []
        for tp, s in self.seen.items():
            idle = now - s.since
            if not s.nudged and idle >= self.nudge_s and (not self.timeout_s or idle < self.timeout_s):
                s.nudged = True
                out.append(tp)
        return out


Position = tuple[int | None, int | None]  # (next offset to read, end offset) of a partition


@dataclass
class MarkerLag(Generic[K]):
    """Partitions whose lag, under exactly-once, is only commit markers or aborted records: their
    (position, end) as last found so by reading them (``kafka_io.no_record_from``). Such a partition
    lags for good once its last transaction is committed; taken for stalled, it would be nudged
    and then restarted, over and over."""

    known: dict[K, Position] = field(default_factory=dict)

    def to_check(self, positions: dict[K, Position], unmoved: Callable[[K, int | None], bool]) -> dict[K, int]:
        """The partitions to read from their position: lagging, no progress since the last look
        (``StallDetector.unmoved``), and not known to hold no record there."""
        idle = {tp: pos for tp, (pos, end) in positions.items()
                if pos is not None and end is not None and end > pos and unmoved(tp, pos)}
        self.known = {tp: v for tp, v in self.known.items() if tp in idle and positions[tp] == v}
        return {tp: pos for tp, pos in idle.items() if tp not in self.known}

    def learn(self, positions: dict[K, Position], empty: Iterable[K]) -> None:
        """``empty``: the partitions read and found to hold no record from their position."""
        self.known.update({tp: positions[tp] for tp in empty})

    def caught_up(self, positions: dict[K, Position]) -> dict[K, Position]:
        """``positions`` with the end of each partition known to lag by markers only set to its position."""
        return {tp: (v[0], v[0]) if self.known.get(tp) == v else v for tp, v in positions.items()}


# Faust's own check (verify_event_path) of the partitions it consumes, in the two forms that name
# a stream that processes nothing.
_FAUST_STREAM_IDLE = ("Stream has not started processing", "Stream stopped processing, or is slow for")


class ChangelogIdleFilter:
    """Drops Faust's "stream idle" errors about changelog partitions.

    Why: a worker writes its tables' changelogs and, once it has recovered them, no stream reads
    the partitions of its active tables; Faust's check still finds their end offset moving past a
    position that never moves, and logs a multi-line error for each such partition every few
    seconds, megabytes of log per worker in a soak. It is no fault, and
    the stream topics, where a stall would be one, are watched by ``StallDetector``. Faust's other
    checks, and this one for every topic that is not a changelog, are kept.
    """

    def filter(self, record) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        tp = args[0] if args else None
        topic = getattr(tp, "topic", None)
        if isinstance(topic, str) and topic.endswith("-changelog"):
            msg = str(record.msg)
            return not any(m in msg for m in _FAUST_STREAM_IDLE)
        return True
