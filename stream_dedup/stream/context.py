"""The state a worker's parts share: one object, handed to each part, instead of closure locals."""
from __future__ import annotations

import logging
import os
import signal
import time
import weakref
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import faust

from ..config import Settings
from .gaps import Msg
from .internals import current_event_var
from .metrics import Metrics
from .watchdog import EXIT_FAILED, EXIT_STALLED

log = logging.getLogger("stream_dedup.worker")

#: (topic, partition) of the batch the running agent works on (``AgentLoop.run``): under exactly-once
#: what the batch makes is sent within that partition's transaction (``Output.publish``), which
#: commits or aborts with the partition's offsets wherever the records go
SOURCE: ContextVar[tuple[str, int] | None] = ContextVar("stream_dedup_source", default=None)


def hold(batch: list) -> None:
    """Keep a batch that was not done out of every later commit, so that it is replayed.

    Faust acks the events of ``take_events`` in a ``finally``, also when an agent leaves in the
    middle of a batch; a message already marked acked is skipped by that ack, so the partition's
    commit stops before it and its next owner replays it."""
    for ev, _ in batch:
        ev.message.acked = True


def timestamp_ms(msg: Any) -> int | None:
    """A message's timestamp in milliseconds (Faust gives seconds), None when it has none."""
    return int(msg.timestamp * 1000) if msg.timestamp is not None else None


def where(msg: Any) -> tuple[str, int, int]:
    """(topic, partition, offset) of a message."""
    return msg.topic, msg.partition, msg.offset


class Under:
    """``with Under(event, worked):`` makes ``event`` Faust's current event, so that a table write
    goes to that event's partition; inside a batch Faust's own current event is the last one
    buffered. A class, not a generator context manager: it is entered for every message."""

    __slots__ = ("event", "worked", "token")

    def __init__(self, event: Any, worked: set):
        self.event = event
        self.worked = worked
        self.token: Any = None

    def __enter__(self) -> None:
        msg = self.event.message
        self.worked.add((msg.topic, msg.partition))
        self.token = current_event_var.set(weakref.ref(self.event))

    def __exit__(self, *exc: Any) -> None:
        current_event_var.reset(self.token)


@dataclass
class WorkerContext:
    """What every part of one worker reads or updates: the app, the settings, counts, metrics and
    the per-partition bookkeeping the agents and the timers share."""

    app: faust.App
    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    counts: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.time)
    stopping: bool = False  # set once shutdown begins: nothing more is written
    exit_code: int = 0  # the code the worker exits with, once a restart was asked for
    stalled: str | None = None  # why the stall watch asked for a restart
    worked: set[tuple[str, int]] = field(default_factory=set)  # (topic, partition) processed since the last stall check
    busy: set[str] = field(default_factory=set)  # stream topics whose agent has a batch in hand
    in_hand: dict[tuple[str, int], int] = field(default_factory=dict)  # lowest offset of a batch in hand
    batch_done: dict[str, float] = field(default_factory=dict)  # stream topic -> when its agent last finished
    pending: dict[str, tuple[float, int]] = field(default_factory=dict)  # doc id -> (first seen, answers partition)

    def under(self, event: Any) -> Under:
        return Under(event, self.worked)

    def exit_for_restart(self, code: int, why: str) -> None:
        """Stop cleanly with ``code`` for the supervisor to restart the worker: it rejoins the group
        and resumes from the committed offsets, which stop before every held batch."""
        if self.exit_code:  # one stop is under way
            return
        log.error("%s. Stopping with exit code %d so that the supervisor restarts this worker.", why, code)
        self.exit_code = code
        os.kill(os.getpid(), signal.SIGTERM)

    def failed(self, stage: str, batch: list, e: BaseException) -> None:
        """Hold a batch whose agent raised, and stop the worker for a restart that replays it."""
        hold(batch)
        self.counts["agent.failures"] += 1
        first = batch[0][1] if batch else None
        at = f"{first.topic}[{first.partition}]@{first.offset}" if first is not None else "?"
        if self.stopping:  # shutting down already: the exit code stays what the stop set
            log.warning("%s agent: %r in a batch of %d from %s while stopping; the batch is held for replay",
                        stage, e, len(batch), at)
            return
        log.error("%s agent failed on a batch of %d messages from %s; the batch is held for replay", stage,
                  len(batch), at, exc_info=e)
        self.exit_for_restart(EXIT_FAILED, f"the {stage} agent failed: {e!r}")

    def delivery_failed(self, what: str, e: BaseException) -> None:
        """A record the broker did not take: no commit from now on (``DeliveryGuard``), and a restart."""
        self.counts["delivery.failures"] += 1
        log.error("records to %s were not delivered: %r; no offset is committed from now on", what, e)
        if not self.stopping:
            self.exit_for_restart(EXIT_FAILED, f"a delivery to {what} failed: {e!r}")


__all__ = ["EXIT_FAILED", "EXIT_STALLED", "Msg", "SOURCE", "Under", "WorkerContext", "hold", "timestamp_ms", "where"]
