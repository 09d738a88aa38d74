"""Bad input, fuzzed and from a corpus of nasty cases: a verdict or a reason, never a crash."""
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest
from stream_dedup.config import Settings
from stream_dedup.core.document import REASONS, Rejected
from stream_dedup.core.engine import Engine
from stream_dedup.core.stages import Preparer

from ..nasty import nasty_events

PREP = Preparer(Settings())

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)
events = st.fixed_dictionaries({}, optional={"id": json_values | st.text(min_size=1, max_size=30),
                                             "text": json_values | st.text(max_size=300),
                                             "html": st.text(max_size=300).map(lambda t: f"<p>{t}</p>"),
                                             "ts": json_values, "rank": json_values, "title": json_values})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(events.map(lambda e: json.dumps(e).encode()), st.binary(max_size=200)))
def test_fuzzed_events_prepare_or_reject_with_a_reason(raw):
    try:
        p = PREP.prepare(raw, default_ts=1)
    except Rejected as e:
        assert e.reason in REASONS, e.reason
        return
    assert p.id and p.digest and isinstance(p.sketches, list)


def test_nasty_corpus_every_event_gets_a_verdict_or_a_reason():
    s = Settings()
    outcomes = {}
    with Engine(s) as e:
        for name, raw in nasty_events():
            try:
                vs = e.process(raw, default_ts=1)
                outcomes[name] = "verdict" if vs else "no verdict"
            except Rejected as r:
                outcomes[name] = r.reason
    assert "no verdict" not in outcomes.values(), outcomes
    assert all(o == "verdict" or o in REASONS for o in outcomes.values()), outcomes
    assert outcomes["not-json"] == "not_json" and outcomes["bad-utf8"] == "bad_utf8"
    assert outcomes["deep-json"] == "not_json"
    assert outcomes["html-bomb-depth"] == "html_too_deep"
    assert outcomes["big-text"] == "oversized"
    assert outcomes["lone-surrogate-id"] == "bad_id" and outcomes["null-id"] == "missing_id"
    assert outcomes["zero-width-only"] == "empty_text" and outcomes["spaces-only"] == "empty_text"
    assert outcomes["ts-nan"] == "not_json" or outcomes["ts-nan"] == "bad_ts"
    assert outcomes["dup-id-b"] == "id_conflict"
    assert outcomes["float-id"] == "bad_id" and outcomes["rank-string"] == "bad_rank"
    assert outcomes["ts-next-year"] == "bad_ts" and outcomes["id-5000-digits"] == "bad_id"
    for name in ("every-plane", "control-chars", "zero-width-inside", "bidi", "html-giant-attr", "html-unclosed",
                 "extra-fields", "ts-negative"):
        assert outcomes[name] == "verdict", (name, outcomes[name])


def test_a_50_mb_document_is_rejected_as_oversized_before_parsing():
    """Kafka's defaults refuse a 50 MB message at the broker; a cluster configured to take one must
    not make the worker parse it: the size check comes before JSON, normalization and jieba."""

    prep = Preparer(Settings())
    raw = b'{"id": "huge", "text": "' + "大".encode() * (50 * 1024 * 1024 // 3) + b'"}'
    assert len(raw) >= 50 * 1024 * 1024 - 16
    with pytest.raises(Rejected) as e:
        prep.prepare(raw, default_ts=1)
    assert e.value.reason == "oversized" and str(len(raw)) in e.value.detail
    s = Settings()
    s.text.max_chars = 20_000_000  # raised limits take it (max bytes = 4 x max chars)
    assert Preparer(s).document(raw, default_ts=1).id == "huge"


def test_produce_keys_every_nasty_line_by_its_id_or_not_at_all():
    """``stream-dedup produce`` keys a line by its id (the workers' id_conflict check is per
    pages partition); a line it cannot read goes unkeyed to the worker, which dead-letters it. JSON
    nested 100,000 deep made ``json.loads`` raise RecursionError, which stopped the command."""
    from stream_dedup.cli.produce import event_key

    keys = {name: event_key(raw) for name, raw in nasty_events()}
    assert keys["deep-json"] is None and keys["not-json"] is None and keys["bad-utf8"] is None
    assert keys["lone-surrogate-id"] is None and keys["null-id"] is None and keys["bool-id"] is None
    assert keys["dup-id-b"] == b"nasty-dup-id-a"
    assert keys["long-id"] == b"x" * 5000
    assert event_key(json.dumps({"id": 42, "text": "数字编号"}).encode()) == b"42"


def _stdlib_parse(raw: bytes) -> dict | tuple[str, str]:
    """The events ``json.loads`` accepts and the reason for the others, as ``parse_event`` gave them
    before msgspec decoded first: the answer it must still give (an integer too long for ``int``
    is parsed, as ``HugeInt``, for the field holding it to be rejected)."""
    from stream_dedup.core.document import _parse_int

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ("rejected", "bad_utf8")
    try:
        obj = json.loads(text, parse_int=_parse_int)
    except (RecursionError, ValueError):
        return ("rejected", "not_json")
    return obj if isinstance(obj, dict) else ("rejected", "not_object")


def _parsed(raw: bytes) -> dict | tuple[str, str]:
    from stream_dedup.core.document import parse_event

    try:
        return parse_event(raw)
    except Rejected as e:
        return ("rejected", e.reason)


JSON_EDGES = [b'{"id":"\\ud800","text":"x"}', b'{"x":"\\udc80\\ud800"}', b'{"x":"\\ud83d\\ude00"}', b'{"a":1,"b":2,"a":3}',
              b'{"x":1e400}', b'{"x":-1e400}', b'{"x":1e-400}', b'{"x":NaN}', b'{"x":Infinity}', b'{"x":-0.0}',
              b'{"x":123456789012345678901234567890}', b'{"x":' + b"9" * 5000 + b"}", b'{"x":18446744073709551616}',
              b'\xef\xbb\xbf{"a":1}', b'{"x":"a\tb"}', b'{"x":"a\x01b"}', b'{"x":"\x7f"}', b'{"x":"\xed\xa0\x80"}',
              b'{"x":"\xc0\x80"}', b'{"x":1}{"y":2}', b'{"x":1,}', b"{'x':1}", b"[1]", b'"s"', b"null", b" {\"a\":1} ",
              b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000, b"", b"{}"]


@pytest.mark.parametrize("raw", JSON_EDGES, ids=range(len(JSON_EDGES)))
def test_parse_event_accepts_and_rejects_as_json_loads_does(raw):
    """msgspec decodes an event first, and the standard library decides whatever msgspec refuses:
    every object, and every reason, is the one ``json.loads`` alone gave."""
    got, want = _parsed(raw), _stdlib_parse(raw)
    assert got == want and repr(got) == repr(want)  # repr: -0.0 and 0.0, 1 and 1.0 and True told apart


@settings(max_examples=300, deadline=None)
@given(st.one_of(events.map(lambda e: json.dumps(e, ensure_ascii=False).encode()),
                 st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                              lambda kids: st.dictionaries(st.text(max_size=6), kids, max_size=4), max_leaves=12)
                 .map(lambda v: json.dumps(v).encode()),
                 st.binary(max_size=120), st.text(max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_parse_event_agrees_with_json_loads_on_fuzzed_input(raw):
    got, want = _parsed(raw), _stdlib_parse(raw)
    assert repr(got) == repr(want)  # not ==: a NaN inside is not equal to itself


@pytest.mark.parametrize("field,reason", [("id", "bad_id"), ("ts", "bad_ts"), ("text", "bad_text"), ("rank", "bad_rank")])
def test_an_integer_of_5000_digits_is_rejected_for_its_field_not_as_not_json(field, reason):
    event = {"id": "a", "text": "短信内容", "ts": 1, field: 0}
    raw = json.dumps(event).replace(f'"{field}": 0', f'"{field}": {"9" * 5000}').encode()
    with pytest.raises(Rejected) as e:
        Preparer(Settings()).prepare(raw, None)
    assert e.value.reason == reason
    if field == "id":
        assert "5000 digits" in e.value.detail
