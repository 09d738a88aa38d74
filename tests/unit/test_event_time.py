"""Event time: a ts far in the future is rejected (bad_ts), and what is accepted is judged the same in
any arrival order, in scan, in shuffled scan and in the Deduper."""
import json
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from stream_dedup.api import Deduper
from stream_dedup.config import Settings, load_settings
from stream_dedup.core.document import Rejected
from stream_dedup.core.engine import Engine
from stream_dedup.core.stages import Preparer
from stream_dedup.scan import run_scan

REPO = Path(__file__).resolve().parents[2]
SAMPLE = [json.loads(x) for x in (REPO / "examples" / "sample.jsonl").read_text("utf-8").splitlines()]
DAY = 24 * 3600 * 1000
NOW = 1_780_000_000_000  # the tests' clock (2026-05-28), fixed so that every run judges alike


def test_a_ts_far_ahead_of_the_broker_timestamp_is_bad_ts_and_one_near_it_is_judged():
    prep = Preparer(Settings())  # a worker's: checked against the record's timestamp
    broker, text = NOW, "明天上午十点开会，请准时参加"
    with pytest.raises(Rejected) as e:
        prep.prepare({"id": "a", "text": text, "ts": broker + 2 * DAY}, broker)
    assert e.value.reason == "bad_ts" and "max_future_ms" in e.value.detail
    assert prep.prepare({"id": "a", "text": text, "ts": broker + DAY // 2}, broker).ts == broker + DAY // 2
    assert prep.prepare({"id": "a", "text": text, "ts": broker - 300 * DAY}, broker)


def test_scan_and_the_deduper_check_ts_against_their_clock(tmp_path):
    events = [{"id": "now", "text": "本店周年庆全场五折", "ts": int(time.time() * 1000)},
              {"id": "next-month", "text": "本店周年庆全场五折起", "ts": int(time.time() * 1000) + 30 * DAY}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    summary = run_scan(Settings(), str(src), str(tmp_path / "out.jsonl"), jobs=0, quiet=True)
    assert summary.rejected == 1
    assert [json.loads(x)["id"] for x in (tmp_path / "out.jsonl").read_text().splitlines()] == ["now"]
    with Deduper(clock=lambda: NOW / 1000) as d:
        with pytest.raises(Rejected, match="bad_ts"):
            d.check({"id": "x", "text": "本店周年庆全场五折", "ts": NOW + 2 * DAY})
        assert d.check({"id": "y", "text": "本店周年庆全场五折", "ts": NOW + DAY // 2}).verdict == "unique"
    s = load_settings(environ={"STREAM_DEDUP_ENGINE__MAX_FUTURE_MS": "0"})  # no bound
    with Engine(s, clock=lambda: NOW / 1000) as engine:
        assert engine.process({"id": "z", "text": "本店周年庆全场五折", "ts": NOW + 900 * DAY})


def judged(order: list[dict], how: str) -> dict:
    """id -> (verdict, duplicate_of) or the rejection reason, with the tests' clock."""
    out: dict = {}
    if how == "deduper":
        with Deduper(clock=lambda: NOW / 1000, forget_windows=None) as d:
            for e in order:
                try:
                    d.check(e)
                except Rejected as r:
                    out[e["id"]] = r.reason
            for e in order:
                v = d.verdict(e["id"])
                if v is not None:
                    out[e["id"]] = (v.verdict, v.duplicate_of)
        return out
    with Engine(Settings(), clock=lambda: NOW / 1000) as engine:
        for e in order:
            try:
                engine.process(e)
            except Rejected as r:
                out[e["id"]] = r.reason
        for v in engine.verdicts():
            out[v.id] = (v.verdict, v.duplicate_of)
    return out


# Offsets from NOW: within a few days either way (all inside one window of each other), far ahead
# (rejected), or far behind (accepted: years old, or just one window apart, on either side of it).
OFFSETS = st.one_of(st.integers(-3 * DAY, 3 * DAY), st.integers(2 * DAY, 5000 * DAY), st.sampled_from([DAY, DAY + 1]),
                    st.integers(-5000 * DAY, -8 * DAY), st.sampled_from([-7 * DAY, -7 * DAY - 1, -7 * DAY + 1]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OFFSETS, min_size=len(SAMPLE), max_size=len(SAMPLE)), st.randoms(use_true_random=False))
def test_verdicts_do_not_depend_on_arrival_order_with_far_future_or_far_past_ts(offsets, rnd):
    events = [{**e, "ts": NOW + off} for e, off in zip(SAMPLE, offsets)]
    in_order = judged(sorted(events, key=lambda e: (e["ts"], e["id"])), "scan")
    shuffled = list(events)
    rnd.shuffle(shuffled)
    assert judged(shuffled, "scan") == in_order
    assert judged(shuffled, "deduper") == in_order
    far = {e["id"] for e in events if e["ts"] > NOW + DAY}
    assert {i for i, v in in_order.items() if v == "bad_ts"} == far
    assert len(in_order) == len(events)


def test_the_sample_has_copies_for_the_order_test_to_judge():
    got = judged(random.Random(3).sample(SAMPLE, len(SAMPLE)), "scan")
    assert sum(1 for v in got.values() if v[0] == "duplicate") >= 5
