"""The stall rule: lag with no progress for the timeout; progress, no lag or a rebalance clear it."""
from stream_dedup.stream.watchdog import StallDetector


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


def test_caught_up_partition_is_never_stalled():
    d = StallDetector(timeout_s=10)
    d.observe(0, {"a": (50, 50)})
    assert d.observe(100, {"a": (50, 50)}) == []
    # new messages arrive: the grace period starts when lag appears, not when the offset last moved
    assert d.observe(101, {"a": (50, 60)}) == []
    assert d.observe(112, {"a": (50, 60)}) != []


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
