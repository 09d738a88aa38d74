"""The fetcher's fast ``wait_first`` (stream/drain.py) answers what mode's ``wait_first`` answers,
on a real mode Service with Faust's consumer call shape: a callback that finishes at once, one that
has to wait, one that fails, and a flow suspended while the callback waits."""
from __future__ import annotations

import asyncio

import pytest
from mode import Service

from stream_dedup.stream.drain import fast_wait_first


class Plain(Service):
    """mode's own wait_first."""

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()


class Fast(Plain):
    wait_first = fast_wait_first(Service.wait_first)


async def at_once(log: list, x: int) -> int:
    log.append(x)
    return x * 2


async def waits(log: list, gate: asyncio.Event, x: int) -> int:
    log.append(("start", x))
    await gate.wait()
    log.append(("end", x))
    return x * 3


async def fails(log: list) -> None:
    log.append("fails")
    raise ValueError("bad message")


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("cls", [Plain, Fast])
def test_a_callback_that_finishes_at_once(cls):
    async def main():
        s, log = cls(), []
        tasks = len(asyncio.all_tasks())
        got = [await s.wait_first(at_once(log, i), s.suspend_flow.wait()) for i in range(3)]
        await asyncio.sleep(0)  # the plain one cancels its extra tasks; let them go
        return got, log, len(asyncio.all_tasks()) - tasks

    got, log, extra = run(main())
    assert [(r.results, r.stopped) for r in got] == [([0], False), ([2], False), ([4], False)]
    assert log == [0, 1, 2] and extra == 0


@pytest.mark.parametrize("cls", [Plain, Fast])
def test_a_callback_that_waits_finishes_through_mode(cls):
    async def main():
        s, log, gate = cls(), [], asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, gate.set)
        r = await s.wait_first(waits(log, gate, 5), s.suspend_flow.wait())
        return r, log

    r, log = run(main())
    assert r.results == [15] and not r.stopped
    assert log == [("start", 5), ("end", 5)]


@pytest.mark.parametrize("cls", [Plain, Fast])
def test_a_suspended_flow_interrupts_a_waiting_callback(cls):
    async def main():
        s, log, gate = cls(), [], asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, s.suspend_flow.set)
        r = await s.wait_first(waits(log, gate, 7), s.suspend_flow.wait())
        await asyncio.sleep(0)
        return r, log

    r, log = run(main())
    assert r.results == [True] and not r.stopped  # the flow event won; the callback was cancelled
    assert log == [("start", 7)]


@pytest.mark.parametrize("cls", [Plain, Fast])
def test_a_failing_callback_raises(cls):
    async def main():
        s, log = cls(), []
        with pytest.raises(ValueError, match="bad message"):
            await s.wait_first(fails(log), s.suspend_flow.wait())
        return log

    assert run(main()) == ["fails"]


def test_other_calls_and_a_suspended_flow_take_modes_way():
    async def main():
        s, log = Fast(), []
        s.suspend_flow.set()  # flow suspended: mode decides (both are done at once)
        r = await s.wait_first(at_once(log, 1), s.suspend_flow.wait())
        other = asyncio.Event()
        other.set()
        r2 = await s.wait_first(at_once(log, 2), other.wait())  # not the flow event
        return r, r2

    r, r2 = run(main())
    assert len(r.results) == 2 and len(r2.results) == 2


def test_the_rare_sleep_yields_to_the_loop_only_every_nth_call():
    from stream_dedup.stream.drain import RareSleep

    async def main():
        turns = []

        async def other():
            while True:
                turns.append(len(calls))
                await asyncio.sleep(0)

        calls: list = []
        task = asyncio.ensure_future(other())
        await asyncio.sleep(0)  # the other task starts
        sleep = RareSleep(every=4)
        for i in range(12):
            calls.append(i)
            assert await sleep(0) is None
        task.cancel()
        return turns

    # the other task got a turn after the 4th, 8th and 12th call, not after every one
    assert run(main()) == [0, 4, 8, 12]


def test_the_rare_sleep_passes_a_real_delay_on():
    import time

    from stream_dedup.stream.drain import RareSleep

    async def main():
        sleep = RareSleep(every=1000)
        t = time.monotonic()
        got = await sleep(0.05, "done")
        return got, time.monotonic() - t

    got, took = run(main())
    assert got == "done" and took >= 0.045


def test_install_gives_fausts_stream_iterator_the_rare_sleep_once():
    cython_streams = pytest.importorskip("faust._cython.streams")
    from stream_dedup.stream import drain

    drain.install()
    first = cython_streams.sleep
    drain.install()
    assert isinstance(first, drain.RareSleep) and cython_streams.sleep is first
