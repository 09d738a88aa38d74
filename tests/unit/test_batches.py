"""Batched stages, as the Kafka workers run them, without a broker.

The workers take a batch of messages per agent, pack the items for one destination partition
into one message, and write table state through a per-batch ``WriteBack``. These tests run the
stage functions the same way over partitioned in-memory tables that behave like Faust's (reads
and writes go to the partition of the current event) and check the latest verdicts against
``scan``'s for random batch sizes and agent interleavings.
"""
from __future__ import annotations

import contextlib
import json
import random
from collections import Counter, deque

import pytest

from stream_dedup.config import load_settings
from stream_dedup.core.engine import Engine
from stream_dedup.core.exact import ExactStore
from stream_dedup.core.index import BucketIndex
from stream_dedup.core.stages import (BATCH_MAX_BYTES, DecideStage, IndexStage, JsonStates, Preparer, Prepared,
                                      Probe, ToDecide, digest_partition, exact_stage, id_partition, pack_batches,
                                      unpack_batch)
from stream_dedup.core.store import WriteBack

from ..conftest import shared_data


def test_pack_batches_round_trips_and_respects_the_size_cap():
    items = [json.dumps({"i": i, "t": "x" * (i % 50)}).encode() for i in range(2000)]
    msgs = pack_batches(items, max_bytes=4096)
    assert len(msgs) > 1 and all(len(m) <= 4096 for m in msgs)
    assert [x for m in msgs for x in unpack_batch(m)] == items
    big = b'{"big":"' + b"y" * 10_000 + b'"}'
    assert pack_batches([b"{}", big, b"{}"], max_bytes=4096) == [b"{}", big, b"{}"]
    assert pack_batches([]) == [] and unpack_batch(b"") == []
    assert BATCH_MAX_BYTES < 1_000_000  # under Kafka's default message size limit


class Partitioned(dict):
    """A Faust-like table: one dict per partition, chosen by the current event (here a partition number)."""

    def __init__(self):
        super().__init__()
        self.current: int | None = None
        self.parts: dict[int, dict] = {}
        self.writes = 0

    def _part(self) -> dict:
        assert self.current is not None, "table access outside of an event"
        return self.parts.setdefault(self.current, {})

    def __getitem__(self, k):
        return self._part()[k]

    def get(self, k, default=None):
        return self._part().get(k, default)

    def __setitem__(self, k, v):
        self.writes += 1
        self._part()[k] = v

    def __delitem__(self, k):
        del self._part()[k]

    def pop(self, k, default=None):
        return self._part().pop(k, default)

    def __contains__(self, k):
        return k in self._part()

    def __iter__(self):
        return iter(self._part())

    @contextlib.contextmanager
    def under(self, partition):
        before, self.current = self.current, partition
        try:
            yield
        finally:
            self.current = before


def test_write_back_reads_its_writes_and_writes_each_key_once_per_partition():
    t = Partitioned()
    wb = WriteBack(t, tag=lambda: t.current, scope=lambda tag: tag)
    with t.under(1):
        wb[b"k"] = b"1"
        wb[b"k"] = b"2"
        assert wb[b"k"] == b"2" and wb.get(b"k") == b"2" and b"k" in wb
    with t.under(2):
        assert wb.get(b"k") is None  # another partition's pending write is not visible here
        wb[b"k"] = b"other"
        wb[b"gone"] = b"x"
        del wb[b"gone"]
        assert b"gone" not in wb and wb.get(b"gone", b"default") == b"default"
        with pytest.raises(KeyError):
            wb[b"gone"]
    assert t.writes == 0  # nothing reaches the table before flush
    wb.flush(around=t.under)
    assert t.parts[1] == {b"k": b"2"} and t.parts[2] == {b"k": b"other"}
    assert t.writes == 2
    with t.under(1):
        assert wb[b"k"] == b"2"  # read through to the table now
        wb[b"k"] = b"3"
    wb.discard()
    with t.under(1):
        assert wb[b"k"] == b"2"


def run_batched(events: list[dict], settings, partitions: int, rng: random.Random) -> tuple[dict, dict, Counter]:
    """The worker's agents over in-memory partitioned tables and queues, in random batches and order.
    Returns the latest verdict per document, the latest cluster record per original, and counts."""
    prep = Preparer(settings)
    window = settings.engine.window_ms
    q = {t: [deque() for _ in range(partitions)] for t in ("fingerprints", "probes", "answers")}
    exact_t, index_t, decide_t = Partitioned(), Partitioned(), Partitioned()
    exact = {p: ExactStore(exact_t, window) for p in range(partitions)}
    index_wb = WriteBack(index_t, tag=lambda: index_t.current, scope=lambda tag: tag)
    decide_wb = WriteBack(JsonStates(decide_t), tag=lambda: decide_t.current, scope=lambda tag: tag)
    index = IndexStage(BucketIndex(index_wb, window=window), prep.detectors)
    decide = DecideStage(decide_wb)
    latest: dict = {}
    clusters: dict = {}
    pages = deque(events)
    counts: Counter = Counter()

    def send(topic: str, out: dict) -> None:  # one packed message per destination partition
        for part, items in out.items():
            q[topic][part].extend(pack_batches(items))
            counts[f"{topic}.messages"] += 1
        out.clear()

    def to_decide(out: dict, msgs: list[ToDecide]) -> None:
        for m in msgs:
            out.setdefault(id_partition(m.id, partitions), []).append(m.to_bytes())

    def take(topic: str) -> list[tuple[int, bytes]]:
        size = rng.choice([1, 3, 17, 256])
        return [(p, q[topic][p].popleft()) for p in rng.sample(range(partitions), partitions)
                for _ in range(min(size, len(q[topic][p])))]

    while pages or any(d for qs in q.values() for d in qs):
        stage = rng.choice(["pages", "fingerprints", "probes", "answers"])
        out: dict = {}
        if stage == "pages":
            raws = [(json.dumps(pages.popleft(), ensure_ascii=False), None)
                    for _ in range(min(rng.choice([1, 50, 256]), len(pages)))]
            for p in prep.prepare_many(raws):  # as the prepare agent: one call per stream batch
                assert isinstance(p, Prepared), p
                out.setdefault(digest_partition(p.digest, partitions), []).append(p.to_bytes())
            send("fingerprints", out)
        elif stage == "fingerprints":
            for part, msg in take("fingerprints"):
                with exact_t.under(part):
                    for item in unpack_batch(msg):
                        msgs, probes = exact_stage(exact[part], Prepared.from_bytes(item), partitions)
                        to_decide(out, msgs)
                        probe_out = {pr.partition: [pr.to_bytes()] for pr in probes}
                        send("probes", probe_out)
            send("answers", out)
        elif stage == "probes":
            for part, msg in take("probes"):
                with index_t.under(part):
                    for item in unpack_batch(msg):
                        pr = Probe.from_bytes(item)
                        assert pr.partition == part
                        to_decide(out, index.process(pr))
            send("answers", out)
            counts["index.writes"] += index_wb.flush(around=index_t.under)
        else:
            for part, msg in take("answers"):
                with decide_t.under(part):
                    for item in unpack_batch(msg):
                        counts["answers.items"] += 1
                        v = decide.apply(ToDecide.from_bytes(item))
                        to_decide(out, decide.outbox)
                        if v is not None:
                            latest[v.id] = v
                        if decide.cluster is not None:
                            clusters[decide.cluster.id] = decide.cluster
            send("answers", out)
            decide_wb.flush(around=decide_t.under)
    return latest, clusters, counts


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_stages_over_partitioned_tables_converge_on_scan(tmp_path, seed):
    shared_data("news/thucnews_1000.jsonl")
    from ..integration.pipeline import labelled_stream

    events = labelled_stream(tmp_path, n_news=150, n_sms=1200, seed=seed)
    settings = load_settings(environ={})
    got, clusters, counts = run_batched(events, settings, partitions=6, rng=random.Random(seed))
    engine = Engine(settings)
    expected = {}
    for e in events:  # arrival order, like the test of the workers
        for v in engine.process(json.dumps(e, ensure_ascii=False)):
            expected[v.id] = v
    key = lambda v: (v.verdict, v.match, v.duplicate_of)  # noqa: E731
    assert set(got) == set(expected) == {e["id"] for e in events}
    diverged = {i: (key(got[i]), key(expected[i])) for i in expected if key(got[i]) != key(expected[i])}
    assert not diverged, f"{len(diverged)} verdicts differ, e.g. {list(diverged.items())[:3]}"
    # the latest cluster record of each original (what the clusters topic keeps) is scan's cluster,
    # whatever order its original's own messages and its members' joins arrived in
    want = {c.id: (c.size, c.canonical, c.ts) for c in engine.clusters()}
    have = {i: (c.size, c.canonical, c.ts) for i, c in clusters.items() if c.size > 1}
    differ = {i: (have.get(i), want.get(i)) for i in set(want) | set(have) if have.get(i) != want.get(i)}
    assert want and not differ, f"{len(differ)} clusters differ, e.g. {list(differ.items())[:3]}"
    assert sum(1 for v in got.values() if v.verdict == "duplicate") > 0.02 * len(events)
    # batching is what it is for: fewer messages than items
    assert counts["answers.messages"] < counts["answers.items"] / 2


def test_a_prepared_batch_equals_each_event_prepared_alone():
    """The prepare agent calls ``prepare_many`` per stream batch (detectors' batch work, e.g. one
    SimHash pass); ``scan`` calls ``prepare`` per event. Same sketches, same rejections, in order."""
    shared_data("news/thucnews_1000.jsonl")
    from ..nasty import nasty_events
    from ..integration.pipeline import labelled_stream

    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        events = labelled_stream(Path(tmp), n_news=60, n_sms=200, seed=3)
    raws = [json.dumps(e, ensure_ascii=False) for e in events] + [raw for _, raw in nasty_events()]
    random.Random(3).shuffle(raws)
    prep = Preparer(load_settings(environ={}))

    def alone(raw):
        try:
            return prep.prepare(raw, 1_700_000_000_000).to_bytes()
        except Exception as e:  # noqa: BLE001
            return getattr(e, "reason", "internal_error")

    batched = [p.to_bytes() if isinstance(p, Prepared) else getattr(p, "reason", "internal_error")
               for p in prep.prepare_many([(r, 1_700_000_000_000) for r in raws])]
    assert batched == [alone(r) for r in raws]
    simhashed = sum(1 for b in batched if isinstance(b, bytes) and json.loads(b)["s"] and
                    any(s[0] == 1 for s in json.loads(b)["s"]))
    ngrammed = sum(1 for b in batched if isinstance(b, bytes) and any(s[0] == 2 for s in json.loads(b)["s"]))
    assert simhashed > 30 and ngrammed > 100 and sum(1 for b in batched if isinstance(b, str)) > 10


def test_internal_messages_and_states_are_utf8_json_and_read_old_ascii_records():
    """The snippet of a Chinese text is UTF-8 on the internal topics and in decide's state (3 bytes a
    character, not the 6 of ``\\uXXXX``); a lone surrogate in a text survives; records written by
    earlier versions (ASCII escapes) read the same."""
    import json as _json

    from stream_dedup.core.verdict import DocState

    snippet = "国务院新闻办公室今天举行新闻发布会，介绍前三季度国民经济运行情况。统计局新闻发言人表示" + "\ud800"
    p = Prepared("doc-1", 1000, b"\x01" * 16, "text", [(1, (5, 6), b"\x00\xff")], 2.0, snippet)
    raw = p.to_bytes()
    assert Prepared.from_bytes(raw) == p
    assert snippet[:10].encode("utf-8") in raw and b"\\u" not in raw
    m = ToDecide("expect", "doc-1", 1000, None, expected=2, rank=2.0, snippet=snippet)
    assert ToDecide.from_bytes(m.to_bytes()) == m
    pr = Probe("文档-1", 1000, 3, [(1, (5,), b"\x00")])
    assert Probe.from_bytes(pr.to_bytes()) == pr
    table: dict = {}
    states = JsonStates(table)
    st = DocState("doc-1", 1000, 2, {0, 3}, rank=2.0, snippet=snippet)
    states["doc-1"] = st
    assert states["doc-1"] == st
    assert len(table[b"doc-1"]) < len(_json.dumps(st.to_json()))  # the ASCII-escaped form is longer
    table[b"doc-1"] = _json.dumps(st.to_json()).encode()  # as earlier versions wrote it
    assert states["doc-1"] == st
    assert ToDecide.from_bytes(_json.dumps({"t": "expect", "id": "doc-1", "ts": 1000, "c": None, "n": 2, "p": None,
                                            "r": 2.0, "x": snippet}).encode()) == m
