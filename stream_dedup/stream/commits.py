"""Commit only offsets that were processed, and read again any that never were.

Why: Faust's consumer commits a partition up to the end of the first run of consecutive acked
offsets (``Consumer._new_offset``, faust-streaming 0.15). Its only check that the run begins where
the last commit ended is ``min(acked) - committed > 1``, and that check is skipped while the
committed offset is 0 (stored as None), which it is for every partition when a stream starts, and
it lets one missing offset through (``min(acked) == committed + 1``, there for a transaction
marker). So a message that never reached the stream, and that the gap filler (``gaps.py``) did not
see, was committed past, and its document never got a verdict.

``strict_new_offset`` commits only a run that begins at the committed offset, so such a message
holds its partition's commit back instead of being lost; ``HoleWatch`` sees a hole held that way
for a few checks, and the worker reads the partition again from it (``batch_source.py``,
``read_commit_holes``): the stages are idempotent, so what the re-read repeats costs only work.
A hole is measured from the commit in flight, if there is one (``commit_base``), not only from the
last one done.
An offset jump of the fetcher is never taken as processed (``held_add_gap``): it holds the commit
until it is read, by the gap filler as its batch is taken (at-least-once) or as a commit hole, its
markers and aborted records marked processed and its records processed.
"""
from __future__ import annotations

import bisect
import logging
from typing import Any, Callable, Iterable, Optional

from faust.types import TP
from faust.utils.functional import consecutive_numbers

log = logging.getLogger("stream_dedup.worker")


def head_hole(base: int, acked: Iterable[int], gaps: Iterable[tuple[int, int]]) -> tuple[int, int] | None:
    """The offsets [first, end) from the committed offset ``base`` up to the lowest acked offset
    above it that are neither acked nor in one of the ``gaps`` ([begin, end) ranges): what holds the
    partition's commit back. None when nothing above ``base`` is acked, or no offset is missing."""
    above = [o for o in acked if o >= base]
    if not above:
        return None
    top = min(above)
    first = base
    for begin, end in sorted(gaps):
        if begin <= first < end:
            first = end
    return (first, top) if first < top else None


def open_span(base: int, acked: Iterable[int], gaps: Iterable[tuple[int, int]]) -> tuple[int, int] | None:
    """Exactly-once: the offsets [first, end) from the head hole (``head_hole``) up to the highest
    acked offset, which hold every hole behind it too. Each transaction's commit marker is one,
    several a second on an internal partition: taken one head hole per check, the commit fell
    further and further behind, and a run of records the stream skipped waited that long to be
    found."""
    done = {o for o in acked if o >= base}
    if not done:
        return None
    top, spans, offset = max(done), sorted(gaps), base
    while offset < top:
        gap_end = next((end for begin, end in spans if begin <= offset < end), None)
        if gap_end is not None:
            offset = gap_end
        elif offset in done:
            offset += 1
        else:
            return (offset, top)
    return None


def runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as (first, last) runs of consecutive ones."""
    return [(run[0], run[-1]) for run in consecutive_numbers(offsets)]


def strict_new_offset(original: Callable[[Any, TP], Optional[int]]) -> Callable[[Any, TP], Optional[int]]:
    """Faust's ``_new_offset`` that commits only a run of processed offsets beginning at the committed
    offset (see the module's docstring), under either guarantee; ``original`` is kept on it (tests
    compare with Faust's rule)."""

    def _new_offset(self: Any, tp: TP) -> Optional[int]:
        acked: list[int] = self._acked[tp]
        if not acked:
            return None
        gap_for_tp = self._gap[tp]
        if gap_for_tp:  # as Faust: the gaps up to the highest acked offset join the acked offsets
            top = max(acked)
            ranges = sorted(gap_for_tp.overlap(0, top + 1), key=lambda iv: iv.begin)
            if ranges:
                for iv in ranges:
                    acked.extend(range(iv.begin, iv.end))
                gap_for_tp.chop(0, max(ranges[-1].end, top + 1))
        acked[:] = sorted(set(acked))
        base = self._committed_offset[tp] or 0  # Faust keeps a committed 0 as None
        below = bisect.bisect_left(acked, base)
        if below:  # committed already (by this worker before a rebalance, or by another owner)
            self._acked_index[tp].difference_update(acked[:below])
            del acked[:below]
        if not acked or acked[0] != base:
            return None  # the offset at ``base`` was never processed: no commit past it
        run = next(consecutive_numbers(acked))  # as Faust: the first run of consecutive offsets
        del acked[:len(run)]
        self._acked_index[tp].difference_update(run)
        in_flight(self)[tp] = run[-1] + 1
        return run[-1] + 1

    _new_offset.stream_dedup = True  # type: ignore[attr-defined]
    _new_offset.original = original  # type: ignore[attr-defined]
    return _new_offset


def in_flight(consumer: Any) -> dict[TP, int]:
    """Per partition, the offset of the last commit ``_new_offset`` gave out: the acked offsets below
    it have left ``_acked``, but ``_committed_offset`` moves only once Faust's commit is done, after
    a producer flush that waits out a broker outage (``Consumer._commit_offsets``)."""
    pending: dict[TP, int] = consumer.__dict__.setdefault("_stream_dedup_in_flight", {})
    return pending


def commit_base(consumer: Any, tp: TP) -> int:
    """Where the partition's commit stands, counting a commit still in flight: what a hole at the head
    of the acked offsets (``head_hole``) is measured from. Measured from ``_committed_offset`` alone,
    the offsets of an in-flight commit looked never processed (the broker-restart fault test: the
    hole watch re-read offsets 1..2 of two answers partitions while their commit waited for the
    broker, a false alarm that costs only repeated work)."""
    return max(consumer._committed_offset.get(tp) or 0, in_flight(consumer).get(tp, 0))


def unknown_bases(consumer: Any, tps: Iterable[TP]) -> list[TP]:
    """The partitions whose committed offset the consumer does not know while the offsets processed
    here begin above 0. Faust learns it at an assignment, from the group coordinator; when that
    answer goes missing (seen in the coordinator's failover), the commit base reads as 0, so the
    strict commit passes nothing, and the hole watch takes everything before the processed offsets
    for a hole and reads the partition again from offset 0."""
    return [tp for tp in tps if consumer._committed_offset.get(tp) is None
            and (acked := consumer._acked.get(tp)) and min(acked) > 0]


def forget(consumer: Any, tps: Iterable[TP]) -> None:
    """Partitions revoked: a commit Faust had in flight for them is discarded (``_commit_offsets``
    commits only assigned partitions), so the next owner's position is the broker's."""
    pending = in_flight(consumer)
    for tp in tps:
        pending.pop(tp, None)


def held_add_gap(original: Callable[..., Any]) -> Callable[..., Any]:
    """Faust's ``_add_gap`` (the fetcher delivered an offset beyond the last one read) takes the offsets
    between, and the new one, as processed, so a commit can pass them before any agent has seen the
    jump: when a rebalance then came, the gap filler's baseline was the new commit and the skipped
    records were lost (a fault run, at-least-once, on the input topic). Here no jump is marked. It
    may hold transaction markers, aborted records or records the stream skipped: the gap filler
    reads it as its batch is taken (at-least-once), or ``HoleWatch`` once it holds the commit back.
    On ``app.stream_dedup_held_topics`` (the internal topics, which no transactional producer writes)
    a jump outside a transaction is always a skip, and is logged."""

    async def _add_gap(self: Any, tp: TP, offset_from: int, offset_to: int) -> None:
        if not self.in_transaction and tp.topic in getattr(self.app, "stream_dedup_held_topics", ()):
            log.warning("%s[%d]: the fetcher went past offsets %d..%d unread; they hold the commit until "
                        "they are read", tp.topic, tp.partition, offset_from, offset_to - 1)

    _add_gap.stream_dedup = True  # type: ignore[attr-defined]
    _add_gap.original = original  # type: ignore[attr-defined]
    return _add_gap


def install() -> None:
    """Give Faust's consumer class the strict ``_new_offset`` and the held ``_add_gap`` (once)."""
    from faust.transport.consumer import Consumer

    if not getattr(Consumer._new_offset, "stream_dedup", False):
        Consumer._new_offset = strict_new_offset(Consumer._new_offset)  # type: ignore[method-assign,assignment]
    if not getattr(Consumer._add_gap, "stream_dedup", False):
        Consumer._add_gap = held_add_gap(Consumer._add_gap)  # type: ignore[method-assign]


def mark_processed(consumer: Any, tp: TP, first: int, last: int) -> None:
    """Offsets first..last were processed without being acked (re-read by the gap filler), or hold
    no record: Faust's commit may pass them once a later offset is acked. Not Faust's ``_add_gap``,
    which starts the range at the committed offset + 1 at the earliest, so that the offset at the
    committed position itself, when the stream skipped it, was never marked and held the commit
    back for good under ``strict_new_offset``."""
    gap_for_tp = consumer._gap[tp]
    gap_for_tp.addi(first, last + 1)
    gap_for_tp.merge_overlaps()


class HoleWatch:
    """Holes at the head of partitions' acked offsets (``head_hole``) that stay the same for
    ``checks`` checks in a row, and whose offsets no batch has in hand: messages the stream never
    delivered. A hole can also last a while legitimately (the messages were delivered again after a
    rebalance and wait behind a batch of later ones taken before it), so a re-read is only asked
    after a few checks, and again only if the hole is still there ``retry_after`` checks later."""

    def __init__(self, checks: int = 3, retry_after: int = 10):
        self.checks = checks
        self.retry_after = retry_after
        self.seen: dict[Any, tuple[tuple[int, int], int]] = {}  # key -> (hole, checks it has lasted)

    def check(self, holes: dict[Any, tuple[int, int] | None], in_hand: dict[Any, int]) -> list[tuple[Any, int, int]]:
        """``holes``: per assigned partition, its head hole or None; ``in_hand``: per partition, the
        lowest offset of a batch an agent is working on. Returns (key, first, end) to read again."""
        out: list[tuple[Any, int, int]] = []
        seen: dict[Any, tuple[tuple[int, int], int]] = {}
        for key, hole in holes.items():
            if hole is None or in_hand.get(key, hole[1]) < hole[1]:
                continue
            before = self.seen.get(key)
            n = before[1] + 1 if before is not None and before[0] == hole else 1
            if n == self.checks or (n > self.checks and (n - self.checks) % self.retry_after == 0):
                out.append((key, hole[0], hole[1]))
            seen[key] = (hole, n)
        self.seen = seen
        return out

    def reset(self) -> None:
        """A rebalance: acked offsets and committed positions start over."""
        self.seen.clear()
