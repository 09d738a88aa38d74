"""Hand a fetched message to Faust's streams without four asyncio tasks per message, and let a
stream take it without a turn of the event loop per message.

Faust's fetcher loop (``Consumer._drain_messages``) hands every fetched message to its streams with
``await self.wait_first(callback(message), self.suspend_flow.wait())``: mode's ``wait_first`` wraps
the callback, the flow event and the service's stopped and crashed events in four tasks, waits for
the first, and cancels the other three. The callback (``Conductor.on_message``: look up the
partition's channels, put the message in their queues) nearly always finishes without waiting,
so the tasks are pure overhead, a noticeable share of a worker's CPU on SMS, where every page
event is one message.

``wait_first`` below runs that callback's first step at once. When it finishes there (the queues
had room) the result is returned as mode would have returned it, and no task is made. When it has
to wait (a full stream buffer), the rest of the callback continues under mode's own
``wait_first``, with the flow event and the service's events, exactly as before. Every other call
(other arguments, a suspended flow, a stopping or crashed service) goes to mode's ``wait_first``
unchanged. Installed once, on Faust's consumer class, by ``install()``.

On the taking side, Faust's stream iterator (``faust._cython.streams.StreamIterator.next``, and its
pure-Python twin ``Stream._py_aiter``) begins every message with ``await asyncio.sleep(0)``, so
that one busy stream cannot starve the others: a whole turn of the event loop per message
(``_run_once``, an ``epoll_wait`` and the task's resumption; counted in an SMS run of two workers,
1.0 turn of the loop per page event, 5,148 of 5,339). The agents take their messages in batches of
up to ``worker.batch_max``, and the other tasks (the producer's sender, the other stages, the
consumer's commits, the web page) only need a turn now and then. ``install()`` gives the Cython
iterator (the one Faust uses where its extension is built, as in the wheels) a ``sleep`` that
yields to the loop on every ``YIELD_EVERY``-th call and otherwise returns at once.
"""
from __future__ import annotations

import asyncio
import types
from typing import Any, Coroutine

from mode.services import WaitResults

_EVENT_WAIT = asyncio.Event.wait.__code__


class _Started:
    """An awaitable that goes on driving a coroutine from where its first ``send`` left it
    (``pending``: what it yielded, the future it waits on). The task that awaits this sees the same
    futures the coroutine's own task would have seen, and its sends, throws and cancellation reach
    the coroutine unchanged."""

    __slots__ = ("coro", "pending")

    def __init__(self, coro: Coroutine, pending: Any):
        self.coro, self.pending = coro, pending

    def __await__(self):
        coro, pending = self.coro, self.pending
        while True:
            try:
                value = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # noqa: BLE001 - a task's throw (cancellation included) goes in
                try:
                    pending = coro.throw(e)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    pending = coro.send(value)
                except StopIteration as stop:
                    return stop.value


def _is_event_wait(obj: Any, event: asyncio.Event) -> bool:
    """``obj`` is the coroutine of ``event.wait()``."""
    return (isinstance(obj, types.CoroutineType) and obj.cr_code is _EVENT_WAIT
            and obj.cr_frame is not None and obj.cr_frame.f_locals.get("self") is event)


def fast_wait_first(original):
    async def wait_first(self: Any, *coros: Any, timeout: Any = None) -> Any:
        flow = getattr(self, "suspend_flow", None)
        if (timeout is not None or len(coros) != 2 or flow is None or flow.is_set()
                or self._stopped.is_set() or self._crashed.is_set()
                or not isinstance(coros[0], types.CoroutineType) or not _is_event_wait(coros[1], flow)):
            return await original(self, *coros, timeout=timeout)
        callback, flow_wait = coros
        try:
            pending = callback.send(None)
        except StopIteration as stop:
            flow_wait.close()
            return WaitResults([callback], [stop.value], False)
        except BaseException:
            flow_wait.close()
            raise
        return await original(self, _Started(callback, pending), flow_wait, timeout=timeout)

    wait_first.stream_dedup = True  # type: ignore[attr-defined]
    return wait_first


YIELD_EVERY = 64


class _NoWait:
    """``await`` of it returns None without suspending."""

    __slots__ = ()

    def __await__(self):
        return iter(())


_NO_WAIT = _NoWait()


class RareSleep:
    """Stands in for ``asyncio.sleep`` in Faust's stream iterator, which calls ``sleep(0)`` per message:
    a real ``asyncio.sleep(0)`` on every ``every``-th call, an await that does not suspend otherwise.
    Any other delay is passed to ``asyncio.sleep`` unchanged."""

    stream_dedup = True

    def __init__(self, every: int = YIELD_EVERY):
        self.every = every
        self.calls = 0

    def __call__(self, delay: float = 0, result: Any = None) -> Any:
        if delay or result is not None:
            return asyncio.sleep(delay, result)
        self.calls += 1
        if self.calls >= self.every:
            self.calls = 0
            return asyncio.sleep(0)
        return _NO_WAIT


def install() -> None:
    """Give Faust's consumer class the fast ``wait_first``, and its Cython stream iterator the rare
    ``sleep`` (once each; a Faust without the extension keeps its pure-Python iterator as it is)."""
    from faust.transport.consumer import Consumer

    if not getattr(Consumer.wait_first, "stream_dedup", False):
        Consumer.wait_first = fast_wait_first(Consumer.wait_first)  # type: ignore[method-assign]
    try:
        from faust._cython import streams as cython_streams
    except ImportError:
        return
    if not getattr(getattr(cython_streams, "sleep", None), "stream_dedup", False):
        cython_streams.sleep = RareSleep()
