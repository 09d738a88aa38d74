"""The worker's use of other libraries' internals: listed in one place, present in the pinned
versions, and patched only when a worker starts, never on import."""
import importlib
import subprocess
import sys

import pytest

from stream_dedup.stream import internals


def _owner(path: str):
    """The module or class a dotted path names."""
    module, _, rest = path.partition(".")
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


@pytest.mark.parametrize("owner,name,used_by", internals.PRIVATE)
def test_every_listed_private_name_exists(owner, name, used_by):
    obj = _owner(owner)
    if isinstance(obj, type) and name not in dir(obj):
        # instance attributes set in __init__: look for them in the class's source
        import inspect
        assert f"self.{name}" in inspect.getsource(obj), f"{owner}.{name} ({used_by})"
    else:
        assert hasattr(obj, name), f"{owner}.{name} ({used_by})"


def test_the_installed_versions_are_the_checked_ones():
    assert internals.check_versions() == []


CHECK = """
import faust.transport.consumer as c, faust.transport.drivers.aiokafka as a
from faust import stores
before = (c.Consumer._new_offset, c.Consumer.wait_first, a.Consumer._commit,
          a.AIOKafkaConsumerThread._create_worker_consumer, dict(stores.STORES.aliases))
import stream_dedup, stream_dedup.stream.worker, stream_dedup.cli
after = (c.Consumer._new_offset, c.Consumer.wait_first, a.Consumer._commit,
         a.AIOKafkaConsumerThread._create_worker_consumer, dict(stores.STORES.aliases))
assert before == after, "importing the package patched something"
from stream_dedup.stream import internals
internals.install()
patched = (c.Consumer._new_offset, c.Consumer.wait_first, a.Consumer._commit,
           a.AIOKafkaConsumerThread._create_worker_consumer)
assert all(getattr(f, "stream_dedup", False) for f in patched), patched
assert "rocksdb-bounded" in stores.STORES.aliases
from faust.tables.recovery import Recovery
assert getattr(Recovery._build_highwaters, "stream_dedup", False)
assert getattr(Recovery._build_offsets, "stream_dedup", False)
from aiokafka.consumer.fetcher import Fetcher
assert getattr(Fetcher.__init__, "stream_dedup", False)
print("ok")
"""


def test_importing_the_package_patches_nothing_and_install_patches_all():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_recoverys_wait_for_a_changelog_record_is_short_and_the_rest_of_asyncio_unchanged():
    """Faust's recovery waited 5 s for a record, twice, before it took a changelog that ends with a
    commit marker for restored (every exactly-once recovery): the wait is capped."""
    import asyncio
    import time

    from faust.tables import recovery

    internals.install()

    async def wait() -> float:
        t0 = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await recovery.asyncio.wait_for(asyncio.Event().wait(), timeout=5.0)
        assert await recovery.asyncio.wait_for(asyncio.sleep(0, "done"), timeout=5.0) == "done"
        return time.monotonic() - t0

    assert asyncio.run(wait()) < 2.0
    assert recovery.asyncio.sleep is asyncio.sleep and recovery.asyncio.TimeoutError is asyncio.TimeoutError


def test_a_persisted_offset_past_the_highwater_is_found():
    from faust.types import TP

    a, b, c = TP("t-changelog", 0), TP("t-changelog", 1), TP("t-changelog", 2)
    assert internals.ahead_of_highwater({a: 51, b: 52, c: None}, {a: -1, b: 53, c: -1}) == [a]
    assert internals.ahead_of_highwater({a: 51}, {a: 51}) == []


class Broker:
    """The last stable offsets a broker reports while a commit's markers are being written: behind
    for the first ``late`` requests."""

    def __init__(self, late: int, end: int):
        self.late, self.end, self.asked = late, end, 0

    async def highwaters(self, *tps):
        self.asked += 1
        return {tp: (0 if self.asked <= self.late else self.end) for tp in tps}


@pytest.mark.parametrize("late,raises", [(2, False), (10_000, True)])
def test_exactly_once_recovery_waits_for_commit_markers_and_still_reports_lost_data(late, raises, monkeypatch):
    """A rebalance right after a commit: the persisted changelog offset is past the last stable
    offset until the broker has written the commit markers. Recovery asks again instead of crashing
    (the crash cost an exactly-once fault run a restart and another rebalance); an offset that stays
    ahead (the topic lost data) still ends in Faust's ConsistencyError."""
    import asyncio

    import faust
    from faust.exceptions import ConsistencyError
    from faust.types import TP

    internals.install()
    monkeypatch.setattr(internals, "MARKERS_WAIT_S", 1.5)
    monkeypatch.setattr(internals, "MARKERS_POLL_S", 0.05)
    app = faust.App("markers", broker="kafka://127.0.0.1:1", processing_guarantee="exactly_once")
    app.__dict__["in_transaction"] = True  # a cached property: a worker's app
    rec = app.tables.recovery
    tp = TP("markers-t-changelog", 4)
    rec.active_offsets[tp] = 51  # stored with the commit of the record at offset 51
    broker = Broker(late, end=52)

    async def build() -> None:
        await rec._build_highwaters(broker, {tp}, rec.active_highwaters, "active")
        if rec.active_offsets[tp] > rec.active_highwaters[tp]:  # Faust's check after it
            raise ConsistencyError(tp)

    if raises:
        with pytest.raises(ConsistencyError):
            asyncio.run(build())
    else:
        asyncio.run(build())
        assert rec.active_highwaters[tp] == 51 and broker.asked == late + 1


def test_the_bulk_restore_reads_each_partition_from_its_offset_to_its_highwater():
    from faust.types import TP

    from stream_dedup.stream.restore import plan

    a, b, c, d = (TP("t-changelog", i) for i in range(4))
    offsets = {a: 51, b: None, c: 9, d: -1}
    highwaters = {a: 80, b: 7, c: 9, d: -1}  # c: up to date; d: an empty changelog
    assert plan([a, b, c, d], offsets, highwaters) == {a: (51, 80), b: (-1, 7)}


def _seek_during_walk(base: type) -> type:
    """A records map that loses every entry right after the fetcher lists them: Faust's seek,
    made from the worker's thread while aiokafka's fetcher walks the map in its own."""
    class Racing(base):  # type: ignore[misc, valid-type]
        def keys(self):
            listed = list(base.keys(self))
            for tp in listed:
                base.__delitem__(self, tp)
            return listed
    return Racing


@pytest.mark.parametrize("base,crashes", [(dict, True), (internals.SeekSafeRecords, False)])
def test_a_seek_in_the_middle_of_aiokafkas_fetch_walk_does_not_crash_it(base, crashes):
    import asyncio
    from types import SimpleNamespace

    from aiokafka.consumer.fetcher import Fetcher, FetchError
    from aiokafka.errors import KafkaError
    from aiokafka.structs import TopicPartition

    tp = TopicPartition("pages", 0)
    records = _seek_during_walk(base)()
    records[tp] = FetchError(error=KafkaError("stale"), backoff=0)
    fetcher = SimpleNamespace(_records=records, _subscriptions=SimpleNamespace(reassignment_in_progress=False),
                              _notify=lambda fut: None, _wait_consume_future=None, _closed=False)
    walk = Fetcher.fetched_records(fetcher, [tp], timeout=0)
    if crashes:
        with pytest.raises(KeyError):
            asyncio.run(walk)
    else:
        assert asyncio.run(walk) == {}
        assert tp not in records
