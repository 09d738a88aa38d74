"""The stall rule: lag with no progress for the timeout; progress, no lag or a rebalance clear it."""
from stream_dedup.stream.watchdog import ChangelogIdleFilter, MarkerLag, StallDetector, nudge_target


def test_stalled_only_after_timeout_with_lag_and_no_progress():
    d = StallDetector(timeout_s=60)
    assert d.observe(0, {"a": (10, 50), "b": (5, 5)}) == []
    assert d.observe(59, {"a": (10, 50), "b": (5, 5)}) == []
    stalled = d.observe(61, {"a": (10, 50), "b": (5, 5)})
    assert [(tp, lag) for tp, lag, _ in stalled] == [("a", 40)]
    assert stalled[0][2] >= 60


def test_progress_restarts_the_clock():
    d = StallDetector(timeout_s=60)
    d.observe(0, {"a": (10, 50)})
    d.observe(50, {"a": (11, 50)})  # one message read
    assert d.observe(100, {"a": (11, 50)}) == []
    assert d.observe(111, {"a": (11, 50)}) != []


def test_a_slow_batch_is_progress_not_a_stall():
    d = StallDetector(timeout_s=60)
    d.observe(0, {"a": (10, 500), "b": (7, 90)})
    # the read offset stands still while the agent works through a long batch of partition a
    assert d.observe(50, {"a": (10, 500), "b": (7, 90)}, worked={"a"}) == []
    stalled = d.observe(105, {"a": (10, 500), "b": (7, 90)}, worked={"a"})
    assert [tp for tp, *_ in stalled] == ["b"]  # b had neither reads nor work for 105 s
    assert [tp for tp, *_ in d.observe(170, {"a": (10, 500)})] == ["a"]  # work stopped at 105


def test_caught_up_partition_is_never_stalled():
    d = StallDetector(timeout_s=10)
    d.observe(0, {"a": (50, 50)})
    assert d.observe(100, {"a": (50, 50)}) == []
    # new messages arrive: the grace period starts when lag appears, not when the offset last moved
    assert d.observe(101, {"a": (50, 60)}) == []
    assert d.observe(112, {"a": (50, 60)}) != []


def test_a_partition_that_lags_by_its_commit_marker_only_is_caught_up_until_it_moves():
    """Exactly-once: the read position stops before the marker that ends a partition. A partition
    without progress is read once; found empty, it is not stalled while (position, end) stay; a new
    end (a record came) is read again, and a partition read as holding records stays lagging."""
    d, marks = StallDetector(timeout_s=10), MarkerLag()
    reads: list[dict] = []

    def check(now: float, positions: dict, empty: set) -> list:
        todo = marks.to_check(positions, d.unmoved)
        reads.append(todo)
        if todo:
            marks.learn(positions, empty & set(todo))
        return [tp for tp, *_ in d.observe(now, marks.caught_up(positions))]

    assert check(0, {"a": (40, 41), "b": (7, 9)}, {"a"}) == []
    assert reads[-1] == {}  # nothing is read before a partition has been seen without progress
    assert check(5, {"a": (40, 41), "b": (7, 9)}, {"a"}) == []
    assert reads[-1] == {"a": 40, "b": 7}  # no progress: both read; "a" holds only its marker
    assert check(20, {"a": (40, 41), "b": (7, 9)}, {"a"}) == ["b"]  # "b" holds records and stalls
    assert reads[-1] == {"b": 7}  # "a" is not read again while its position and end stay
    assert check(25, {"a": (40, 44), "b": (7, 9)}, set()) == ["b"]
    assert reads[-1] == {"a": 40, "b": 7}  # records came after the marker: read again, now lagging
    assert check(40, {"a": (40, 44), "b": (9, 9)}, set()) == ["a"]


def test_reset_and_unassigned_partitions():
    d = StallDetector(timeout_s=10)
    d.observe(0, {"a": (1, 9), "b": (1, 9)})
    d.reset(8)  # rebalance at t=8
    assert d.observe(15, {"a": (1, 9)}) == []
    assert "b" not in d.seen
    assert [tp for tp, *_ in d.observe(19, {"a": (1, 9)})] == ["a"]
    # unknown positions (nothing read or committed yet) count from zero
    d2 = StallDetector(timeout_s=1)
    d2.observe(0, {"x": (None, 3)})
    assert d2.observe(2, {"x": (None, 3)})[0][1] == 3


def test_gap_tracker_reports_skipped_ranges_not_replays_or_ownership_changes():
    from stream_dedup.stream.gaps import GapTracker

    g = GapTracker(max_fill=100)
    assert [g.gap("t", 4, o) for o in (0, 1, 2, 3)] == [None] * 4
    assert g.gap("t", 4, 5) == (4, 5)  # offset 4 never came
    assert g.gap("t", 4, 6) is None
    assert g.gap("t", 5, 10) is None  # first offset seen on a partition: nothing to compare
    assert g.gap("t", 4, 2) is None  # a replay after a rebalance goes backwards: new position
    assert g.gap("t", 4, 3) is None
    assert g.gap("t", 4, 500) is None  # far ahead: another worker owned it meanwhile


def test_gap_tracker_sees_messages_skipped_at_the_start_of_an_assignment():
    """Faust can skip the first messages after an assignment too: the committed offset the
    consumer began at is the baseline for a partition's first message."""
    from stream_dedup.stream.gaps import GapTracker

    g = GapTracker(max_fill=100)
    assert g.gap("probes", 2, 40, start=37) == (37, 40)  # 37, 38, 39 never came
    assert g.gap("probes", 2, 41, start=37) is None  # later messages compare with the last one
    assert g.gap("probes", 3, 12, start=12) is None  # began where it was committed
    assert g.gap("probes", 4, 0, start=0) is None
    g.forget("probes", 2)  # revoked; assigned again later, committed at 60 meanwhile
    assert g.gap("probes", 2, 60, start=60) is None
    g.forget("probes", 2)
    assert g.gap("probes", 2, 75, start=70) == (70, 75)


def test_gap_filler_processes_the_missing_messages_first():
    import asyncio

    from stream_dedup.stream.gaps import GapFiller, Msg

    log = []

    def fetch(topic, partition, first, end):
        log.append((topic, partition, first, end))
        return [Msg(topic, partition, o, None, b"x", None) for o in range(first - 1, end + 1)]  # extra: dropped

    filled = []
    f = GapFiller(fetch, on_fill=lambda t, k: filled.append((t, k)))

    async def run():
        out = []
        for o in (7, 8, 12):
            out.append([m.offset for m in (await f.missing("pages", 1, o)).msgs])
        return out

    assert asyncio.run(run()) == [[], [], [9, 10, 11]]
    assert log == [("pages", 1, 9, 12)] and filled == [("pages", 3)]


def test_gap_filler_returns_the_whole_span_it_read_markers_included(caplog):
    """A jump over offsets that hold no message (a transactional producer's commit markers) is read
    and returned as read, so that the batch marks it processed (Faust's own rule no longer does);
    it is not a skip, so nothing is logged or counted."""
    import asyncio

    from stream_dedup.stream.gaps import GapFiller, Msg, Refill

    def fetch(topic, partition, first, end):
        return [Msg(topic, partition, o, None, b"x", None) for o in range(first, end) if o % 5 != 0]

    filled = []
    f = GapFiller(fetch, on_fill=lambda t, k: filled.append((t, k)))

    async def run():
        return [await f.missing("pages", 0, o, start=4) for o in (4, 6, 11)]

    with caplog.at_level("WARNING", logger="stream_dedup.worker"):
        got = asyncio.run(run())
    assert got[:2] == [Refill(None, []), Refill((5, 6), [])] and "offsets 5..5" not in caplog.text
    assert got[2].span == (7, 11) and [m.offset for m in got[2].msgs] == [7, 8, 9]
    assert filled == [("pages", 3)] and "the stream skipped offsets 7..10; re-read 3" in caplog.text


def test_gap_filler_asks_for_the_committed_offset_only_when_a_partition_starts_without_one():
    import asyncio

    from stream_dedup.stream.gaps import GapFiller, Msg

    asked, fetched = [], []

    def committed(topic, partition):
        asked.append((topic, partition))
        return {0: 40, 1: 0}[partition]

    def fetch(topic, partition, first, end):
        fetched.append((partition, first, end))
        return [Msg(topic, partition, o, None, b"x", None) for o in range(first, end)]

    f = GapFiller(fetch, committed=committed)

    async def run():
        return [len((await f.missing("pages", p, o, start)).msgs) for p, o, start in
                [(0, 40, None), (0, 41, None), (1, 3, None), (2, 5, 5)]]

    # partition 0 began at its committed 40: nothing skipped, and asked once only; partition 1 has
    # nothing committed, so offsets 0-2 were skipped; partition 2 came with Faust's own baseline
    assert asyncio.run(run()) == [0, 0, 3, 0]
    assert asked == [("pages", 0), ("pages", 1)] and fetched == [(1, 0, 3)]


def test_a_held_batch_is_not_acked_when_faust_acks_its_buffer():
    """Faust's ``take_events`` acks every buffered event in a ``finally``, also when the agent
    stops in the middle of the batch; the consumer's last commit would then commit a batch whose
    output was dropped. ``hold`` makes those acks no-ops, so the commit stops before the batch."""
    from types import SimpleNamespace

    from faust.types.tuples import ConsumerMessage

    from stream_dedup.stream.context import hold

    def message(offset: int) -> ConsumerMessage:
        return ConsumerMessage(topic="probes", partition=3, offset=offset, timestamp=0.0, timestamp_type=0,
                               headers=[], key=b"k", value=b"v", checksum=None)

    acked: list[int] = []
    consumer = SimpleNamespace(ack=lambda m: acked.append(m.offset) or True)  # receives the final acks
    done = [(SimpleNamespace(message=message(o)), None) for o in (5, 6)]
    stopped = [(SimpleNamespace(message=message(o)), None) for o in (7, 8)]
    hold(stopped)
    for ev, _ in done + stopped:  # what take_events' finally does, through Event.ack
        ev.message.ack(consumer)
    assert acked == [5, 6]


def test_faust_idle_stream_errors_are_dropped_for_changelog_partitions_only():
    import logging

    from faust.transport.drivers import aiokafka as driver
    from faust.types import TP
    from mode.utils.logging import CompositeLogger

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record):
            self.records.append(record)

    logger = logging.getLogger(driver.__name__)  # the logger Faust's consumer thread logs to
    keep, filt = Keep(), ChangelogIdleFilter()
    logger.addHandler(keep)
    logger.addFilter(filt)
    try:
        log = CompositeLogger(logger, lambda severity, msg, *a, **k: f"[^---AIOKafkaConsumerThread]: {msg}")
        for template in (driver.SLOW_PROCESSING_STREAM_IDLE_SINCE_START, driver.SLOW_PROCESSING_STREAM_IDLE):
            log.error(template + driver.SLOW_PROCESSING_EXPLAINED % {"setting": "x", "current_value": 1},
                      TP("sd.index-changelog", 3), "5 minutes ago")
            log.error(template, TP("sd.probes", 3), "5 minutes ago")  # a stream topic: a real stall
        log.error(driver.SLOW_PROCESSING_NO_RECENT_FETCH, TP("sd.index-changelog", 3), "5 minutes ago")
    finally:
        logger.removeFilter(filt)
        logger.removeHandler(keep)
    assert [(r.args[0].topic, r.getMessage().split(": ", 1)[1].split(" TP(")[0]) for r in keep.records] == [
        ("sd.probes", "Stream has not started processing"),
        ("sd.probes", "Stream stopped processing, or is slow for"),
        ("sd.index-changelog", "Aiokafka stopped fetching from"),
    ]


def test_gap_tracker_says_which_partitions_it_has_a_position_for():
    from stream_dedup.stream.gaps import GapTracker

    t = GapTracker()
    assert not t.seen("pages", 0)
    t.gap("pages", 0, 7, start=7)
    assert t.seen("pages", 0) and not t.seen("pages", 1)
    t.forget("pages", 0)
    assert not t.seen("pages", 0)


def test_tail_watch_asks_to_reread_a_partition_end_that_never_reached_an_idle_agent():
    from stream_dedup.stream.gaps import GapTracker, TailWatch

    tr, tw = GapTracker(), TailWatch(retry_after=2)
    for off in range(3):  # offsets 0..2 processed; the consumer then read 3..11, which were dropped
        tr.gap("pages", 4, off)
    reads = {("pages", 4): (11, 0, 12), ("pages", 5): (7, 0, 8)}
    tr.gap("pages", 5, 7)  # caught up: processed what was read
    assert tw.check(tr, reads, idle={"pages"}) == []  # once is a suspicion: the message may be on its way
    assert tw.check(tr, reads, idle={"pages"}) == [("pages", 4, 3)]  # unchanged a check later
    # Faust's seek sets its read offset to the offset sought: a re-read in flight is not asked for again ...
    reads[("pages", 4)] = (3, 0, 12)
    assert tw.check(tr, reads, idle={"pages"}) == []
    assert tw.check(tr, reads, idle={"pages"}) == []
    # ... unless it never shows: after ``retry_after`` checks it is asked for once more
    assert tw.check(tr, reads, idle={"pages"}) == []
    assert tw.check(tr, reads, idle={"pages"}) == [("pages", 4, 3)]
    for off in range(3, 12):  # the re-read messages come through the stream
        tr.gap("pages", 4, off)
    reads[("pages", 4)] = (11, 0, 12)
    assert tw.check(tr, reads, idle={"pages"}) == [] and tw.check(tr, reads, idle={"pages"}) == []


def test_tail_watch_leaves_busy_agents_moving_reads_and_unseen_partitions_alone():
    from stream_dedup.stream.gaps import GapTracker, TailWatch

    tr, tw = GapTracker(), TailWatch()
    tr.gap("probes", 0, 10)
    for _ in range(3):  # the agent has a batch in hand: read-ahead is its buffer, not a loss
        assert tw.check(tr, {("probes", 0): (40, 0, 50)}, idle=set()) == []
    assert tw.check(tr, {("probes", 0): (41, 0, 50)}, idle={"probes"}) == []
    assert tw.check(tr, {("probes", 0): (42, 0, 50)}, idle={"probes"}) == []  # still reading: not the same twice
    # a partition never processed here since its assignment: measured from its committed offset
    assert tw.check(tr, {("answers", 2): (5, 6, 9)}, idle={"answers"}) == []  # read nothing past the commit
    assert tw.check(tr, {("answers", 2): (5, 6, 9)}, idle={"answers"}) == []
    assert tw.check(tr, {("answers", 2): (8, 6, 9)}, idle={"answers"}) == []
    assert tw.check(tr, {("answers", 2): (8, 6, 9)}, idle={"answers"}) == [("answers", 2, 6)]
    assert tw.check(tr, {("answers", 3): (8, None, 9)}, idle={"answers"}) == []  # no baseline: no guess
    tw.check(tr, {("probes", 0): (40, 0, 50)}, idle={"probes"})
    tw.reset()  # a rebalance forgets suspicions
    assert tw.check(tr, {("probes", 0): (40, 0, 50)}, idle={"probes"}) == []


def test_tail_watch_ignores_a_read_offset_set_by_a_seek_when_nothing_is_there_to_read():
    """After Faust's seek on assignment its read offset is the next offset, not the last one read:
    an idle partition then looks one behind, unless the high watermark shows nothing is there."""
    from stream_dedup.stream.gaps import GapTracker, TailWatch

    tr, tw = GapTracker(), TailWatch()
    for _ in range(4):
        assert tw.check(tr, {("pages", 1): (6, 6, 6)}, idle={"pages"}) == []  # seek to 6; end 6: empty
        assert tw.check(tr, {("pages", 2): (6, 6, None)}, idle={"pages"}) == []  # end unknown yet
    tr.gap("pages", 3, 9)
    assert tw.check(tr, {("pages", 3): (10, 6, 11)}, idle={"pages"}) == []
    assert tw.check(tr, {("pages", 3): (10, 6, 11)}, idle={"pages"}) == [("pages", 3, 10)]  # one dropped


def test_a_stalled_partition_is_nudged_once_before_the_restart():
    d = StallDetector(timeout_s=120, nudge_s=20)
    d.observe(0, {"a": (10, 50), "b": (5, 5), "c": (3, 9)})
    d.observe(10, {"a": (10, 50), "b": (5, 5), "c": (4, 9)})  # c reads on
    assert d.to_nudge(10) == []
    d.observe(21, {"a": (10, 50), "b": (5, 5), "c": (5, 9)})
    assert d.to_nudge(21) == ["a"]  # lag, no progress for 21 s; b has no lag, c progresses
    d.observe(31, {"a": (10, 50), "b": (5, 5), "c": (6, 9)})
    assert d.to_nudge(31) == []  # once per stall
    d.observe(41, {"a": (12, 50), "b": (5, 5), "c": (7, 9)})  # the nudge worked: a new episode
    d.observe(62, {"a": (12, 50), "b": (5, 5), "c": (8, 9)})
    assert d.to_nudge(62) == ["a"]
    assert d.observe(200, {"a": (12, 50)}) != []  # a nudge that did not help still ends in the restart
    assert d.to_nudge(200) == []  # past the timeout: the restart, not another nudge


def test_nudges_without_restarts():
    d = StallDetector(timeout_s=0, nudge_s=20)
    assert d.observe(0, {"a": (10, 50)}) == []
    assert d.observe(500, {"a": (10, 50)}) == []  # restarts turned off
    assert d.to_nudge(500) == ["a"]


def test_no_nudge_when_turned_off_or_after_a_rebalance():
    d = StallDetector(timeout_s=120)
    d.observe(0, {"a": (10, 50)})
    d.observe(60, {"a": (10, 50)})
    assert d.to_nudge(60) == []
    d = StallDetector(timeout_s=120, nudge_s=20)
    d.observe(0, {"a": (10, 50)})
    d.reset(15)
    d.observe(30, {"a": (10, 50)})
    assert d.to_nudge(30) == []  # 15 s since the rebalance
    d.observe(36, {"a": (10, 50)})
    assert d.to_nudge(36) == ["a"]


def test_a_nudge_seeks_to_the_earliest_known_position_without_asking_the_broker():
    asked = []
    assert nudge_target((12, None, 9), lambda: asked.append(1) or 0) == (9, "its position")
    assert asked == []  # a known position needs no broker round trip


def test_a_partition_never_read_is_sought_to_the_committed_offset_the_broker_gives():
    """The start-up stall: no read offset, no committed offset recorded; resuming alone left it unfetched."""
    target, source = nudge_target((None, None, None), lambda: 41)
    assert target == 41 and "broker" in source
    assert nudge_target((None, None, None), None) == (None, "no position known")


def test_a_broker_that_does_not_answer_leaves_the_restart_as_the_remedy():
    def down() -> int:
        raise TimeoutError("no answer")

    target, source = nudge_target((None, None, None), down)
    assert target is None and "did not answer" in source


def test_gap_filler_waits_out_a_loading_coordinator_and_never_crashes_the_agent_for_a_baseline():
    """After a broker restart the committed-offset lookup fails for a while (NOT_COORDINATOR):
    the filler asks again, and when the broker never answers it goes on without a baseline;
    before, the exception reached the agent, which crashed with its batch acked unprocessed."""
    import asyncio

    from stream_dedup.stream.gaps import GapFiller, Msg

    calls = []

    def flaky(topic, partition):
        calls.append(partition)
        if partition == 0 and len(calls) < 3:
            raise RuntimeError("KafkaError{code=NOT_COORDINATOR}")
        if partition == 1:
            raise RuntimeError("KafkaError{code=COORDINATOR_LOAD_IN_PROGRESS}")
        return 40

    fetched = []

    def fetch(topic, partition, first, end):
        fetched.append((partition, first, end))
        return [Msg(topic, partition, o, None, b"x", None) for o in range(first, end)]

    f = GapFiller(fetch, committed=flaky, committed_wait_s=1.0)  # tries at 0, 0.2 and 0.6 s

    async def run():
        return [len((await f.missing("probes", p, o)).msgs) for p, o in [(0, 43), (1, 7), (1, 8)]]

    # partition 0: the third lookup answers 40, so 40-42 were skipped and are re-read; partition 1
    # never answers: no baseline, nothing re-read, and no exception
    assert asyncio.run(run()) == [3, 0, 0]
    assert calls[:3] == [0, 0, 0] and set(calls[3:]) == {1} and len(calls) > 4
    assert fetched == [(0, 40, 43)]


def test_gap_filler_retries_a_failed_fetch_and_fails_only_after_its_wait():
    import asyncio

    import pytest

    from stream_dedup.stream.gaps import GapFiller, Msg

    tries = []

    def fetch(topic, partition, first, end):
        tries.append(first)
        if len(tries) == 1:
            raise RuntimeError("broker gone")
        return [Msg(topic, partition, o, None, b"x", None) for o in range(first, end)]

    f = GapFiller(fetch, fetch_wait_s=0.5)

    async def run(p, offsets):
        return [len((await f.missing("pages", p, o)).msgs) for o in offsets]

    assert asyncio.run(run(0, (1, 4))) == [0, 2] and tries == [2, 2]

    def down(topic, partition, first, end):
        raise RuntimeError("broker gone")

    f = GapFiller(down, fetch_wait_s=0.3)
    with pytest.raises(RuntimeError):  # skipped messages are never dropped silently
        asyncio.run(run(0, (1, 4)))


def test_a_re_read_with_no_answer_from_the_broker_is_an_error_not_an_empty_range():
    """The gap filler's fetch against a broker that does not answer (a closed port): it raises,
    so that ``_retried`` asks again and the worker restarts if the broker stays away, instead of
    returning no messages, which the caller took as the skipped range processed (the
    broker-restart fault test lost 684 documents so)."""
    import pytest

    from stream_dedup.stream.gaps import confluent_fetch

    from ..conftest import free_port

    fetch = confluent_fetch({"bootstrap.servers": f"127.0.0.1:{free_port()}", "log_level": 0})
    with pytest.raises(TimeoutError, match=r"t\[0\] offsets 4..7: no answer"):
        fetch("t", 0, 4, 8)


class _FakeMessage:
    """What confluent-kafka's Message gives ``_read_range``: a record, or an error event."""

    def __init__(self, topic, partition, offset, code=None):
        self._t, self._p, self._o, self._code = topic, partition, offset, code

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def error(self):
        if self._code is None:
            return None
        code = self._code

        class E:
            def code(self):
                return code

        return E()

    def key(self):
        return None

    def value(self):
        return f"{self._t}[{self._p}]@{self._o}".encode()

    def timestamp(self):
        return (1, 1_700_000_000_000)


class _FakeConsumer:
    def __init__(self, events):
        self.events = list(events)

    def poll(self, timeout):
        return self.events.pop(0) if self.events else None


def test_a_re_read_takes_only_its_partitions_messages_and_never_ends_short():
    """The gap filler's read of a skipped range (``gaps._read_range``) over its shared consumer:
    another partition's message or end event (a range read before, still queued) is passed over,
    not taken as this range's; a hole (a transaction marker) is allowed; an end of the partition
    before the range's end is an error, since the caller takes what comes back as the whole range
    and lets the commit pass it."""
    import pytest

    from stream_dedup.stream.gaps import _read_range

    EOF = -191
    other = [_FakeMessage("t", 1, 5), _FakeMessage("t", 1, 6, EOF), _FakeMessage("u", 0, 6)]
    mine = [_FakeMessage("t", 0, 3), _FakeMessage("t", 0, 4), _FakeMessage("t", 0, 6), _FakeMessage("t", 0, 7)]
    got = _read_range(_FakeConsumer(other + mine), "t", 0, 4, 8)
    assert [(m.topic, m.partition, m.offset) for m in got] == [("t", 0, 4), ("t", 0, 6), ("t", 0, 7)]
    # the partition's end at or past the range's end: what was read is the range
    assert [m.offset for m in _read_range(_FakeConsumer(mine[:3] + [_FakeMessage("t", 0, 8, EOF)]), "t", 0, 4, 8)] \
        == [4, 6]
    with pytest.raises(RuntimeError, match=r"t\[0\] offsets 4..7: the broker says the partition ends at 5"):
        _read_range(_FakeConsumer([mine[1], _FakeMessage("t", 0, 5, EOF), mine[2], mine[3]]), "t", 0, 4, 8)


def test_a_stalled_workers_tasks_are_listed_by_the_innermost_await_they_wait_on():
    import asyncio

    from stream_dedup.stream.stall_watch import task_waits

    async def held_by_the_broker(gate: asyncio.Event) -> None:
        await gate.wait()

    async def agent(gate: asyncio.Event) -> None:
        await held_by_the_broker(gate)

    async def main() -> list[str]:
        gate = asyncio.Event()
        tasks = [asyncio.create_task(agent(gate)) for _ in range(3)]
        await asyncio.sleep(0)
        waits = task_waits()
        gate.set()
        await asyncio.gather(*tasks)
        return waits

    waits = asyncio.run(main())
    top = waits[0]
    assert top.startswith("  3 x ") and "held_by_the_broker" in top and top.index("wait") < top.index("agent")
