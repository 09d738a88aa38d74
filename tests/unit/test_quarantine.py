"""The poison-message journal and the dead-letter records of quarantined items (stream/quarantine.py).

The worker's part (each item of a suspect message on its own, the restarts) is tested on a real broker:
tests/integration/test_worker_ops.py::test_a_document_that_fails_every_time_is_quarantined_and_the_rest_goes_on.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import jsonschema
import pytest
from aiokafka.errors import KafkaTimeoutError, NotCoordinatorForGroupError
from confluent_kafka import KafkaError, KafkaException

from stream_dedup.config import Settings
from stream_dedup.core.stages import Preparer
from stream_dedup.core.wire import ToDecide, index_item, pack_batches, unpack_batch
from stream_dedup.core.routing import fan_out
from stream_dedup.stream.quarantine import (REASON, FailureJournal, counts_as_poison, dead_letter, item_ids,
                                            split_items)

SCHEMA = jsonschema.Draft202012Validator(json.loads(
    (Path(__file__).resolve().parents[2] / "topics" / "schemas" / "dlq_record.schema.json").read_text()))

TEXTS = ["【京东】您的订单已发货，快递单号1234567，请保持电话畅通。",
         "國務院新聞辦公室今天舉行發布會，介紹今年前三季度經濟運行情況。",
         "您好，您的验证码是886421，五分钟内有效，请勿泄露给他人。"]


@pytest.fixture(scope="module")
def probes_message() -> tuple[bytes, list[str]]:
    """One message of the probes topic as the prepare agent packs it: three documents' exact checks
    and probes, all for partition 0 of one."""
    prep = Preparer(Settings())
    items: list[bytes] = []
    ids = []
    for i, text in enumerate(TEXTS):
        p = prep.prepare({"id": f"doc-{i}", "text": text, "ts": 1_700_000_000_000 + i})
        exact, probes = fan_out(p, 1)
        items += [exact.to_bytes()] + [pr.to_bytes() for pr in probes]
        ids.append(p.id)
    [message] = pack_batches(items)
    return message, ids


def test_only_errors_that_may_be_the_datas_count():
    assert counts_as_poison(RuntimeError("bug"))
    assert counts_as_poison(KeyError("id"))
    assert counts_as_poison(ValueError("bad"))
    for infra in (OSError(28, "No space left on device"), ConnectionResetError(), TimeoutError(), MemoryError(),
                  KafkaTimeoutError(), NotCoordinatorForGroupError(),
                  KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))):
        assert not counts_as_poison(infra), infra


def test_the_journal_counts_attempts_across_restarts(tmp_path):
    path = tmp_path / "state" / "failures.json"
    j = FailureJournal.load(path, limit=3)
    a, b = ("pages", 0, 41), ("pages", 1, 7)
    assert not j.suspect(a)
    assert j.failed([a, b]) == 1  # a batch of two failed: both are suspects now
    assert j.suspect(a) and j.suspect(b)
    j.passed(b)  # alone, b went through: innocent
    j2 = FailureJournal.load(path, limit=3)  # the restarted worker
    assert j2.suspect(a) and not j2.suspect(b)
    assert j2.failed([a]) == 2
    assert FailureJournal.load(path, limit=3).failed([a]) == 3
    j3 = FailureJournal.load(path, limit=3)
    j3.passed(a)  # its failing items quarantined; a replay of it goes item by item again
    assert FailureJournal.load(path, limit=3).suspect(a)
    j3.forget_committed(lambda topic, part: {("pages", 0): 41}.get((topic, part)))  # not committed yet
    assert FailureJournal.load(path, limit=3).suspect(a)
    j3.forget_committed(lambda topic, part: {("pages", 0): 42}.get((topic, part)))  # committed: never replayed
    assert not FailureJournal.load(path, limit=3).attempts


def test_a_document_that_fails_alone_in_two_messages_counts_both(tmp_path):
    """A document's probes travel in one message per partition: its failures add up across them."""
    path = tmp_path / "failures.json"
    j = FailureJournal.load(path, limit=3)
    p0, p1 = ("probes", 0, 5), ("probes", 1, 9)
    assert j.failed([p1]) == 1  # a batch with p1 failed
    assert j.failed_alone(p0, ["spam-1"]) == 2  # p0's item about spam-1 failed on its own
    j = FailureJournal.load(path, limit=3)  # restarted
    assert j.failed_alone(p1, ["spam-1"]) == 3  # p1's second attempt, spam-1's third
    j.quarantined(["spam-1"])
    assert j.known(["spam-1"]) and "spam-1" not in FailureJournal.load(path, limit=3).failing
    assert j.failed_alone(("probes", 0, 6), ["other"]) == 2


def test_a_journal_that_cannot_be_written_still_counts(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    j = FailureJournal.load(blocker / "failures.json", limit=3)  # its folder cannot be made
    assert j.failed([("pages", 0, 1)]) == 1
    assert j.failed_alone(("pages", 0, 1), ["a"]) == 2
    assert j.suspect(("pages", 0, 1))


def test_quarantine_off_counts_nothing(tmp_path):
    j = FailureJournal.load(tmp_path / "failures.json", limit=0)
    assert j.failed([("pages", 0, 1)]) == 0
    assert j.failed_alone(("pages", 0, 1), ["a"]) == 0
    assert not j.suspect(("pages", 0, 1))
    assert not (tmp_path / "failures.json").exists()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"pages:0:1": "many"}'])
def test_an_unreadable_journal_starts_from_zero(tmp_path, content):
    path = tmp_path / "failures.json"
    path.write_text(content)
    j = FailureJournal.load(path, limit=3)
    assert j.attempts == {}
    assert j.failed([("pages", 0, 1)]) == 1
    assert json.loads(path.read_text())["attempts"] == {"pages:0:1": 1}


def test_the_journal_remembers_quarantined_documents(tmp_path):
    path = tmp_path / "failures.json"
    j = FailureJournal.load(path, limit=3)
    assert not j.known(["短信-7"])
    j.quarantined(["短信-7"])
    j2 = FailureJournal.load(path, limit=3)
    assert j2.known(["短信-7", "other"]) and not j2.known(["other"])
    j2.MAX_DOCUMENTS = 3
    j2.quarantined(["a", "b", "c"])  # the oldest goes first
    assert list(FailureJournal.load(path, limit=3).documents) == ["a", "b", "c"]


def test_an_index_message_splits_into_its_items(probes_message):
    message, ids = probes_message
    items = unpack_batch(message)
    singles = split_items("index", message)
    assert len(singles) == len(items) > len(ids)
    for single, item in zip(singles, items, strict=True):
        [back] = unpack_batch(single)
        assert index_item(back) == index_item(item)
    assert [i for s in singles for i in item_ids("index", s)] == [index_item(it).id for it in items]
    assert item_ids("index", message) == ids


def test_a_decide_message_splits_into_its_items():
    msgs = [ToDecide("expect", f"sms-{i}", 1_700_000_000_000 + i, expected=2) for i in range(3)]
    [message] = pack_batches([m.to_bytes() for m in msgs])
    singles = split_items("decide", message)
    assert [ToDecide.from_item(unpack_batch(s)[0]) for s in singles] == msgs
    assert item_ids("decide", message) == ["sms-0", "sms-1", "sms-2"]


def test_a_pages_message_is_one_item():
    raw = json.dumps({"id": "新闻-1", "text": TEXTS[1]}, ensure_ascii=False).encode()
    assert split_items("prepare", raw) == [raw]
    assert item_ids("prepare", raw) == ["新闻-1"]
    assert item_ids("prepare", b"\xff{garbage") == []
    assert item_ids("index", b"\x93garbage") == []


def test_the_dead_letter_record_keeps_the_item_and_says_why(probes_message):
    message, ids = probes_message
    single = split_items("index", message)[0]
    rec = json.loads(dead_letter("index", ("dedup.probes", 0, 123), 0, single, RuntimeError("boom"), 3))
    SCHEMA.validate(rec)
    assert rec["reason"] == REASON
    assert base64.b64decode(rec["original_b64"]) == single
    assert rec["ids"] == [ids[0]]
    assert rec["detail"] == "the index stage raised RuntimeError('boom') (attempt 3)"
    again = json.loads(dead_letter("index", ("dedup.probes", 1, 7), 4, single, RuntimeError("boom"), 1, known=True))
    SCHEMA.validate(again)
    assert "its document was quarantined before" in again["detail"] and again["attempts"] == 1
    assert (rec["topic"], rec["partition"], rec["offset"], rec["item"], rec["stage"]) == ("dedup.probes", 0, 123, 0,
                                                                                         "index")
