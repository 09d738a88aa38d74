import os

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.core.bloom import BloomShape, DecayingBloom

WINDOW = 3_600_000  # one hour in ms


def digest() -> bytes:
    return os.urandom(16)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10 * WINDOW), st.integers(0, WINDOW)), min_size=1, max_size=300))
def test_no_false_negatives_inside_the_window(events):
    """An item inserted at t is found by any query at t' with |t' - t| <= window, in any order."""
    f = DecayingBloom.for_capacity(1000, 0.01, WINDOW)
    items = [(digest(), t) for t, _ in events]
    for d, t in items:
        f.add(d, t)
    for (d, t), (_, lag) in zip(items, events):
        assert f.maybe_contains(d, t + lag)
        assert f.maybe_contains(d, max(0, t - lag))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 4 * WINDOW)), min_size=1, max_size=200))
def test_add_answers_what_maybe_contains_said_just_before(events):
    """The exact stage asks ``add`` alone: it must answer as ``maybe_contains`` would have, for repeated
    and new digests, in and out of the window, in any time order (a tiny filter: many collisions)."""
    f = DecayingBloom(BloomShape(64, 7), WINDOW)
    twin = DecayingBloom(BloomShape(64, 7), WINDOW)
    pool = [digest() for _ in range(8)]
    answers = []
    for i, t in events:
        answers.append(twin.maybe_contains(pool[i], t))
        twin.add(pool[i], t)
        assert f.add(pool[i], t) == answers[-1]
    assert (f.cells == twin.cells).all()


def test_add_says_whether_the_digest_was_maybe_there():
    f, d = DecayingBloom.for_capacity(100, 0.01, WINDOW), digest()
    assert f.add(d, 5) is False and f.add(d, 6) is True
    assert f.add(d, 6 + 3 * WINDOW) is False  # out of the window: as if new


def test_measured_false_positive_rate_within_the_configured_bound():
    n, p = 20_000, 0.01
    f = DecayingBloom.for_capacity(n, p, WINDOW)
    for i in range(n):
        f.add(digest(), 1_000 + i)
    trials = 50_000
    fp = sum(f.maybe_contains(digest(), 1_000 + n) for _ in range(trials))
    measured = fp / trials
    assert measured <= p * 1.5, measured
    assert abs(f.estimated_fp_rate(1_000 + n) - measured) < 0.01


def test_items_decay_after_the_window():
    f = DecayingBloom.for_capacity(10_000, 0.01, WINDOW)
    old = [digest() for _ in range(2000)]
    for d in old:
        f.add(d, 0)
    later = 3 * WINDOW
    assert sum(f.maybe_contains(d, later) for d in old) == 0
    assert f.live_fraction(later) == 0.0


def test_count_window_clock():
    f = DecayingBloom.for_capacity(1000, 0.01, window=500, resolution=50)
    d = digest()
    f.add(d, 10)
    assert f.maybe_contains(d, 500)
    assert not f.maybe_contains(d, 10 + 500 + 2 * f.tick_len + 1)


def test_serialization_round_trip():
    f = DecayingBloom.for_capacity(5000, 0.02, WINDOW)
    ds = [digest() for _ in range(500)]
    for i, d in enumerate(ds):
        f.add(d, i * 1000)
    g = DecayingBloom.from_bytes(f.to_bytes())
    assert (g.cells == f.cells).all() and g.base == f.base and g.shape == f.shape
    assert all(g.maybe_contains(d, 500_000) for d in ds)


def test_memory_statement():
    shape = BloomShape.for_capacity(1_000_000, 0.01)
    assert shape.cells == 9_585_059 and shape.hashes == 7
    assert 38_000_000 < shape.memory_bytes() < 39_000_000
