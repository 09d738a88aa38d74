"""At least once for every record a worker sends: an offset is committed only after its output is delivered.

Why: under at-least-once a stage does not wait for most of what it sends (probes, answers, the
tables' changelog records, the dead letters of rejected events): the next batch starts while they
are on their way, and Faust's commit flushes the producer before it commits the consumed offsets.
But a flush waits for deliveries to end, not to succeed. A record that the broker refused for good
(a non-retriable error: a record over the topic's size limit, a lost authorization, a batch that
expired after ``producer_request_timeout``) was dropped while the offsets of the messages that made
it were committed: its document lost an answer, an offer or its dead letter, and no replay would
bring it back.

The ``DeliveryGuard`` watches every delivery of the worker's ``BulkSender``. A commit first waits
for the deliveries still on their way (all the output of the offsets it commits was sent before
they were acked), and does not go through once one of them has failed; the failure stops the
worker for a restart (``EXIT_FAILED``), which replays every message since the last commit, as
after a crash (the stages are idempotent). A failure that repeats on every replay (a record that
will never fit) then shows as a worker that keeps restarting and logs why, not as silent loss.
Under exactly-once a transaction with a failed send does not commit; but Faust takes the offsets
of a commit that raised as committed, and the next transaction would commit past them with their
output lost, so a transaction commit that fails stops the worker too (``install``): the restart
begins from the offsets the broker has, with the tables as its last commit left them (``undo``).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping

log = logging.getLogger("stream_dedup.worker")


class DeliveryGuard:
    """The deliveries on their way, and the first one that failed."""

    def __init__(self, on_failure: Callable[[str, BaseException], None]):
        self.on_failure = on_failure  # called once, with what was being sent and why it failed
        self.pending: set[asyncio.Future] = set()
        self.failure: BaseException | None = None
        self.refused = 0  # commits not made since the failure

    def watch(self, fut: asyncio.Future, what: str) -> None:
        """Follow the delivery ``fut`` of records to ``what`` (a topic and partition, for the log)."""
        if fut.done():
            self._done(what, fut)
            return
        self.pending.add(fut)
        fut.add_done_callback(lambda f: self._done(what, f))

    def _done(self, what: str, fut: asyncio.Future) -> None:
        self.pending.discard(fut)
        exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if exc is not None:
            self.failed(exc, what)

    def failed(self, exc: BaseException, what: str) -> None:
        """Sending to ``what`` failed: no commit from now on (the first failure is reported)."""
        if self.failure is not None:
            return
        self.failure = exc
        self.on_failure(what, exc)

    async def may_commit(self) -> bool:
        """Wait for the deliveries on their way; whether all of them, and all before, succeeded."""
        if self.pending:
            await asyncio.wait(set(self.pending))
        if self.failure is None:
            return True
        self.refused += 1
        return False


def install() -> None:
    """Make Faust's aiokafka consumer ask the app's guard (``internals.delivery_guard``)
    before each commit. ``Consumer._commit`` is the one call that commits offsets, after Faust's
    flush of the producer; an app without a guard (exactly-once) commits as before."""
    from faust.transport.drivers.aiokafka import Consumer

    from . import internals

    commit = Consumer._commit
    if getattr(commit, "stream_dedup", False):
        return

    async def guarded_commit(self: Any, offsets: Mapping[Any, int]) -> bool:
        guard: DeliveryGuard | None = internals.delivery_guard(self.app)
        if guard is not None and not await guard.may_commit():
            if guard.refused == 1:
                log.warning("offsets not committed: a delivery failed (%r); every message since the last "
                            "commit is replayed after the restart", guard.failure)
            return False
        return await commit(self, offsets)

    guarded_commit.stream_dedup = True  # type: ignore[attr-defined]
    Consumer._commit = guarded_commit  # type: ignore[method-assign]
    _install_transactions()


# aiokafka's transaction_timeout_ms, which Faust's producers keep: the brokers abort a transaction
# open longer, so a commit not done by then can no longer succeed
COMMIT_TIMEOUT_S = 60.0


class CommitTimeout(Exception):
    """A transaction commit that did not end within ``COMMIT_TIMEOUT_S``."""


def _install_transactions() -> None:
    """Make a transaction commit that raises stop the worker (see the module's docstring), and one
    that succeeds tell the ``TransactionSender`` (``undo``)."""
    from faust.transport.consumer import TransactionManager
    from faust.transport.drivers.aiokafka import Producer

    commit = TransactionManager.commit
    if getattr(commit, "stream_dedup", False):
        return
    TransactionManager.commit = checked(commit)  # type: ignore[method-assign]
    Producer.stop_transaction = locked_stop(Producer.stop_transaction)  # type: ignore[method-assign]


def locked_stop(stop: Callable[..., Any]) -> Callable[..., Any]:
    """Faust's ``stop_transaction`` (a rebalance stops the producers of revoked partitions) that waits
    for the transaction's lock, which Faust's commit holds while it sends offsets and commits: a
    producer stopped in the middle of that commit never answers it (aiokafka leaves the futures of
    a stopped sender unresolved), and the commit waited for good (a three-broker fault run: the
    commit began a second before the rebalance stopped three producers)."""

    async def stop_transaction(self: Any, transactional_id: str) -> None:
        lock = self._trn_locks.get(transactional_id)
        if lock is None:
            await stop(self, transactional_id)
            return
        async with lock:
            await stop(self, transactional_id)

    stop_transaction.stream_dedup = True  # type: ignore[attr-defined]
    stop_transaction.original = stop  # type: ignore[attr-defined]
    return stop_transaction


def checked(commit: Callable[..., Any], timeout_s: float = COMMIT_TIMEOUT_S) -> Callable[..., Any]:
    """Faust's transaction commit that stops the worker when it raises or does not end within
    ``timeout_s``. A commit seen waiting for aiokafka's ``commit_transaction`` for good after a
    rebalance (three brokers, a worker killed) held every stage of its worker until the stall
    watch's restart; past the transaction timeout nothing is lost by restarting."""
    from . import internals

    async def checked_commit(self: Any, offsets: Mapping[Any, int], start_new_transaction: bool = True) -> bool:
        sender = internals.transaction_sender(self.app)
        done = sender.committing({internals.transactional_id(self.app, tp.topic, tp.partition) for tp in offsets}
                                 ) if sender is not None else None
        try:
            try:
                committed = await asyncio.wait_for(commit(self, offsets, start_new_transaction), timeout_s)
            except asyncio.TimeoutError:
                raise CommitTimeout(f"a transaction commit did not end in {timeout_s:g} s") from None
        except Exception as e:
            guard: DeliveryGuard | None = internals.delivery_guard(self.app)
            if guard is not None:
                guard.failed(e, "a transaction commit")
            raise
        if done is not None and committed and not self.app.crashed:  # crashed: fenced, Faust said True
            done()
        return committed

    checked_commit.stream_dedup = True  # type: ignore[attr-defined]
    return checked_commit
