"""Where ``stream-dedup redrive`` sends a dead-letter record back to (the broker part is in
``tests/integration/test_worker_ops.py``)."""
import base64
import json
import re

import pytest

from stream_dedup.cli.redrive import NotRedrivable, Target, record_ids, target
from stream_dedup.stream.quarantine import dead_letter

SIZES = {"pages": 4, "sd-index": 2}.get


def test_a_quarantined_item_goes_back_to_its_topic_and_partition_with_its_key_and_bytes():
    item = b"\x91\x92\xa1x"  # any bytes: the stage reads them, not redrive
    record = dead_letter("index", ("sd-index", 1, 77), 0, item, RuntimeError("boom"), 3, timestamp=1764288000123)
    assert target(json.loads(record), b"k", "pages", SIZES) == Target("sd-index", 1, b"k", item,
                                                                                 1764288000123)


def test_a_rejected_event_goes_back_to_the_pages_partition_it_was_read_from():
    raw = json.dumps({"id": "a1", "text": "今天天气很好"}, ensure_ascii=False).encode()
    record = {"reason": "internal_error", "detail": "x", "original_b64": base64.b64encode(raw).decode(),
              "topic": "pages", "partition": 3, "offset": 9}
    assert target(record, None, "pages", SIZES) == Target("pages", 3, None, raw)
    assert record_ids(record) == ["a1"]


def test_a_record_without_a_source_goes_to_the_pages_topic_by_key_at_the_time_of_sending():
    record = {"reason": "internal_error", "detail": "", "original_b64": base64.b64encode(b"{}").decode()}
    assert target(record, b"a1", "pages", SIZES) == Target("pages", None, b"a1", b"{}", None)
    for bad in (-1, "1764288000123", True, 1.5):  # not a time in ms: the broker's clock decides
        assert target(dict(record, timestamp=bad), b"a1", "pages", SIZES).timestamp is None


@pytest.mark.parametrize("record, why", [
    ("not a dict", "not a JSON object"),
    ({"reason": "quarantined"}, "no original bytes"),
    ({"reason": "quarantined", "original_b64": "***"}, "no original bytes"),
    ({"original_b64": "", "topic": "gone", "partition": 0}, "does not exist"),
    ({"original_b64": "", "topic": "sd-index", "partition": 2}, "sd-index[2] does not exist (2 partitions)"),
    ({"original_b64": "", "topic": "pages", "partition": -1}, "not a partition number"),
    ({"original_b64": "", "topic": "pages", "partition": True}, "not a partition number"),
    ({"original_b64": "", "topic": 5}, "not a name"),
])
def test_a_record_that_cannot_go_back_says_why(record, why):
    with pytest.raises(NotRedrivable, match=re.escape(why)):
        target(record, None, "pages", SIZES)


def test_record_ids_name_the_documents_of_a_quarantined_item_or_of_an_event():
    q = json.loads(dead_letter("prepare", ("pages", 0, 1), 0, json.dumps({"id": 7, "text": "x"}).encode(), ValueError(), 3))
    assert record_ids(q) == ["7"]
    assert record_ids({"ids": ["a", "b"], "original_b64": ""}) == ["a", "b"]
    assert record_ids({"original_b64": base64.b64encode(b"not json").decode()}) == []
    assert record_ids(None) == []
