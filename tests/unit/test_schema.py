"""The hand-written validator agrees with topics/schemas/page_event.schema.json; verdicts match theirs."""
import json
from pathlib import Path

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import load_settings
from stream_dedup.core.document import Rejected, validate
from stream_dedup.core.engine import Engine

SCHEMAS = Path(__file__).resolve().parents[2] / "topics" / "schemas"
PAGE = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "page_event.schema.json").read_text()))
VERDICT = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "verdict.schema.json").read_text()))
CLUSTER = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "cluster.schema.json").read_text()))

values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.integers(),
                   st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=20), st.lists(st.integers(), max_size=2))
events = st.dictionaries(st.sampled_from(["id", "text", "html", "title", "url", "ts", "source", "rank", "extra"]),
                         values, max_size=7)


@settings(max_examples=600, deadline=None)
@given(events)
def test_validator_accepts_exactly_what_the_schema_accepts(ev):
    try:
        validate(ev, default_ts=1)
        ours = True
    except Rejected:
        ours = False
    # the schema cannot express "id non-empty after str()" or the size limits; both agree elsewhere
    theirs = PAGE.is_valid(ev)
    if "id" in ev and ev["id"] == "":
        return
    assert ours == theirs, ev


def test_every_verdict_matches_the_verdict_schema():
    with Engine(load_settings(environ={})) as e:
        out = []
        for line in (SCHEMAS.parents[1] / "examples" / "sample.jsonl").read_text(encoding="utf-8").splitlines():
            out += e.process(line)
        clusters = [c.to_dict() for c in e.clusters()]
    assert out and clusters
    for v in out:
        VERDICT.validate(v.to_dict())
    for c in clusters:
        CLUSTER.validate(c)
