"""Dead-letter records that always fit in a Kafka message (stream/dead_letters.py), and the guard that
stops the commits after a failed delivery (stream/delivery.py).

On a real broker: tests/integration/test_worker_ops.py::test_nasty_input_through_a_worker_ends_in_verdicts_or_dead_letters
(an 800 KB rejected event) and ::test_a_record_the_broker_refuses_stops_the_commits_and_the_restart_replays_it.
"""
from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path

import jsonschema
import pytest
from aiokafka.errors import MessageSizeTooLargeError

from stream_dedup.cli.redrive import NotRedrivable, target
from stream_dedup.stream.dead_letters import MAX_RECORD_BYTES, dead_letter_record
from stream_dedup.stream.delivery import DeliveryGuard

SCHEMA = jsonschema.Draft202012Validator(json.loads(
    (Path(__file__).resolve().parents[2] / "topics" / "schemas" / "dlq_record.schema.json").read_text()))
EVENT = json.dumps({"id": "新闻-1", "text": "國務院新聞辦公室今天舉行發布會。" * 4}, ensure_ascii=False).encode()


def record(original: bytes, **kw) -> dict:
    return json.loads(dead_letter_record("internal_error", "RuntimeError('boom')", original, topic="pages",
                                         partition=2, offset=41, timestamp=1764288000123, **kw))


def test_an_original_that_fits_is_kept_whole():
    r = record(EVENT)
    SCHEMA.validate(r)
    assert base64.b64decode(r["original_b64"]) == EVENT
    assert (r["original_bytes"], r["original_truncated"]) == (len(EVENT), False)
    assert (r["topic"], r["partition"], r["offset"], r["timestamp"]) == ("pages", 2, 41, 1764288000123)


@pytest.mark.parametrize("size", [674_000, 700_000, 800_000, 1_048_000, 8 << 20])
def test_a_record_is_never_over_the_bound_and_says_when_its_original_is_cut(size):
    """An original of 800 KB made a 1.07 MB record, which the broker refused (its limit is 1 MB)."""
    original = bytes(range(256)) * (size // 256) + EVENT[: size % 256]
    value = dead_letter_record("bad_utf8", "x" * 5000, original, topic="pages", partition=0, offset=7,
                               timestamp=None, ids=["a" * 100] * 50)
    assert len(value) <= MAX_RECORD_BYTES
    r = json.loads(value)
    SCHEMA.validate(r)
    kept = base64.b64decode(r["original_b64"])
    assert r["original_truncated"] is (kept != original) and r["original_bytes"] == size
    assert original.startswith(kept) and len(value) > MAX_RECORD_BYTES - 8  # as much kept as fits
    assert len(r["detail"]) == 1000


def test_a_cut_original_is_redriven_whole_from_its_source_message_and_only_from_it():
    r = record(EVENT, max_bytes=400)  # a tighter bound cuts sooner
    kept = base64.b64decode(r["original_b64"])
    assert r["original_truncated"] and 0 < len(kept) < len(EVENT) and EVENT.startswith(kept)
    topics = {("pages", 2, 41): EVENT, ("pages", 2, 42): b"!" + EVENT[1:], ("pages", 2, 43): EVENT + b" "}

    def send_back(rec: dict):
        return target(rec, b"k", "pages", lambda topic: 4, lambda *at: topics.get(at))

    assert send_back(r).value == EVENT and send_back(r).partition == 2
    for offset, why in [(7, "pages[2]@7 no longer holds the whole of it"),
                        (42, f"the message at pages[2]@42 is not the record's original ({len(EVENT)} bytes"),
                        (43, f"the message at pages[2]@43 is not the record's original ({len(EVENT) + 1} bytes")]:
        with pytest.raises(NotRedrivable, match=re.escape(why)):
            send_back(dict(r, offset=offset))
    for gap in ({"offset": None}, {"partition": None}, {"original_bytes": "many"}):
        with pytest.raises(NotRedrivable, match="does not say where the whole of it is"):
            send_back(dict(r, **gap))
    assert target(record(EVENT), None, "pages", lambda topic: 4).value == EVENT  # whole: nothing fetched


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_the_guard_lets_commits_through_once_the_deliveries_on_their_way_succeed():
    failures: list = []

    async def go():
        guard = DeliveryGuard(lambda what, e: failures.append((what, e)))
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(3)]
        for i, f in enumerate(futs):
            guard.watch(f, f"pages.answers[{i}]")
        for i, f in enumerate(futs):
            loop.call_later(0.01 * (i + 1), f.set_result, None)
        ok = await guard.may_commit()  # waits for all three
        return ok, all(f.done() for f in futs), len(guard.pending)

    assert run(go()) == (True, True, 0)
    assert failures == []


def test_one_failed_delivery_stops_every_later_commit_and_is_reported_once():
    failures: list = []

    async def go():
        guard = DeliveryGuard(lambda what, e: failures.append((what, e)))
        loop = asyncio.get_running_loop()
        good, bad, later = loop.create_future(), loop.create_future(), loop.create_future()
        guard.watch(good, "t[0]")
        guard.watch(bad, "t[1]")
        loop.call_later(0.01, good.set_result, None)
        loop.call_later(0.02, bad.set_exception, MessageSizeTooLargeError())
        first = await guard.may_commit()
        guard.watch(later, "t[2]")
        later.set_exception(MessageSizeTooLargeError())  # a second failure: no second report
        await asyncio.sleep(0)
        return first, await guard.may_commit(), guard.refused

    assert run(go()) == (False, False, 2)
    assert [(what, type(e)) for what, e in failures] == [("t[1]", MessageSizeTooLargeError)]


def test_a_cancelled_or_already_failed_delivery_counts_as_failed():
    for settle in (lambda f: f.cancel(), lambda f: f.set_exception(MessageSizeTooLargeError())):
        failures: list = []

        async def go():
            guard = DeliveryGuard(lambda what, e: failures.append(e))
            f = asyncio.get_running_loop().create_future()
            settle(f)
            await asyncio.sleep(0)
            guard.watch(f, "t[0]")  # done before it is watched
            return await guard.may_commit()

        assert run(go()) is False and len(failures) == 1


def test_the_largest_state_record_a_worker_can_write_fits_its_changelog_topic():
    """With the guard, a changelog record the broker refuses stops the worker at every replay, so each
    must fit: the largest bucket (``max_bucket`` entries of 1,024-character ids of 4-byte characters
    and the largest inline payloads) and the largest decide state (``MAX_MEMBERS`` such members) are
    over Kafka's default 1 MB limit, and under the changelog topics' ``max.message.bytes``."""
    from stream_dedup.config import Settings
    from stream_dedup.core.index import INLINE_MAX, BucketIndex, pack_entries
    from stream_dedup.core.stages import DocStates
    from stream_dedup.core.verdict import MAX_MEMBERS, DocState
    from stream_dedup.stream.topics import load_specs

    settings = Settings()
    limits = {s.name: int(s.config.get("max.message.bytes", 1_048_588)) for s in load_specs(settings)}
    prefix = settings.topics.internal_prefix
    long_id = "\U0001f600" * 1024
    bucket = pack_entries([(1764288000123 + i, long_id[:-4] + f"{i:04d}", b"\xff" * INLINE_MAX)
                           for i in range(BucketIndex({}, window=1).max_bucket)])
    states: dict = {}
    DocStates(states)[long_id] = DocState(long_id, 1, members={long_id[:-4] + f"{i:04d}": [1764288000123, 1.5]
                                                               for i in range(MAX_MEMBERS)}, snippet="新" * 200)
    state = next(iter(states.values()))
    assert len(bucket) > 1_048_588 and len(state) > 1_048_588
    assert len(bucket) + 4 * 1024 < limits[f"{prefix}.index-changelog"]
    assert len(state) + 4 * 1024 < limits[f"{prefix}.decide-changelog"]


def test_a_transaction_commit_that_never_ends_stops_the_worker_and_one_that_ends_goes_through():
    """``delivery.checked``: a transaction commit still waiting after the timeout (seen: aiokafka's
    ``commit_transaction`` waiting for good after a rebalance) fails through the guard, which stops
    the worker for a restart, and raises; a commit that ends in time returns as Faust's."""
    from types import SimpleNamespace

    from stream_dedup.stream import internals
    from stream_dedup.stream.delivery import CommitTimeout, checked

    async def hangs(self, offsets, start_new_transaction=True):
        await asyncio.Event().wait()

    async def ends(self, offsets, start_new_transaction=True):
        await asyncio.sleep(0.01)
        return True

    class App:  # weakly referenced by the patches' registry, as Faust's app is
        crashed = False

    failures = []
    app = App()
    internals.attach(app, fetch_max_wait_ms=100, fetch_min_bytes=1,
                     delivery_guard=DeliveryGuard(lambda what, e: failures.append((what, e))))
    manager = SimpleNamespace(app=app)
    assert asyncio.run(checked(ends, timeout_s=5)(manager, {})) is True and not failures
    with pytest.raises(CommitTimeout, match="did not end in 0.2 s"):
        asyncio.run(checked(hangs, timeout_s=0.2)(manager, {}))
    assert [(what, type(e)) for what, e in failures] == [("a transaction commit", CommitTimeout)]


def test_a_producer_is_stopped_only_after_the_commit_that_holds_its_transaction_lock():
    """``delivery.locked_stop``: Faust's commit holds the transaction's lock while it sends offsets and
    commits; Faust's own ``stop_transaction`` stops the producer under it (its futures are then never
    answered, and the commit waited for good), the locked one waits for the commit to end. A
    transaction without a lock is stopped at once."""
    from types import SimpleNamespace

    from faust.transport.drivers.aiokafka import Producer

    from stream_dedup.stream.delivery import locked_stop

    faust_stop = getattr(Producer.stop_transaction, "original", Producer.stop_transaction)

    async def scenario(stop) -> list[str]:
        events: list[str] = []
        owner = SimpleNamespace(_trn_locks={"app-1-3": asyncio.Lock()})

        async def fake_stop(self, tid):
            events.append(f"stop {tid}")

        async def commit():
            async with owner._trn_locks["app-1-3"]:
                events.append("commit begins")
                await asyncio.sleep(0.05)
                events.append("commit ends")

        task = asyncio.ensure_future(commit())
        await asyncio.sleep(0.01)
        await stop(fake_stop)(owner, "app-1-3")
        await stop(fake_stop)(owner, "app-9-9")
        await task
        return events

    assert asyncio.run(scenario(locked_stop)) == ["commit begins", "commit ends", "stop app-1-3", "stop app-9-9"]
    assert asyncio.run(scenario(lambda s: s)) == ["commit begins", "stop app-1-3", "stop app-9-9", "commit ends"]
    assert "_trn_locks" not in faust_stop.__code__.co_names  # Faust's own stop takes no lock: the patch is needed
