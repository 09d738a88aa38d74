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
from stream_dedup.core.wire import BATCH_MAX_BYTES, Prepared, Probe, ToDecide, byte_slices, index_item, pack_batches, unpack_batch
from stream_dedup.core.stages import DecideStage, IndexStage, DocStates, Preparer, exact_stage
from stream_dedup.core.routing import digest_partition, fan_out, id_partition
from stream_dedup.core.store import WriteBack

from ..conftest import shared_data


def test_pack_batches_round_trips_and_respects_the_size_cap():
    items = [ToDecide("answer", f"doc-{i}", i, None, part=i % 7, snippet="x" * (i % 50)).to_bytes()
             for i in range(2000)]
    msgs = pack_batches(items, max_bytes=4096)
    assert len(msgs) > 1 and all(len(m) <= 4096 for m in msgs)
    assert [ToDecide.from_item(x) for m in msgs for x in unpack_batch(m)] == [ToDecide.from_bytes(b) for b in items]
    big = Probe("big", 1, 0, [(2, (1,), b"y" * 10_000)]).to_bytes()
    small = Probe("small", 1, 0, [(2, (1,), b"")]).to_bytes()
    packed = pack_batches([small, big, small], max_bytes=4096)
    assert len(packed) == 3 and len(packed[1]) > 4096  # the big one travels alone
    assert [Probe.from_item(x) for m in packed for x in unpack_batch(m)] == [Probe.from_bytes(b) for b in
                                                                            (small, big, small)]
    assert pack_batches([]) == [] and unpack_batch(b"") == []
    assert BATCH_MAX_BYTES < 1_000_000  # under Kafka's default message size limit


@pytest.mark.parametrize("seed", range(5))
def test_byte_slices_cover_every_item_once_in_order_within_the_budget(seed):
    """The prepare agent's slices of a batch: every page exactly once, in order, no slice over the
    budget unless one page alone is, and no slice that could have taken its next page."""
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 150, 3_000, 40_000, 300_000]) for _ in range(rng.randint(0, 400))]
    budget = rng.choice([1, 4_096, 262_144])
    parts = byte_slices(sizes, budget)
    assert [i for r in parts for i in r] == list(range(len(sizes)))
    assert all(len(r) > 0 for r in parts)
    for r, nxt in zip(parts, parts[1:] + [None]):
        total = sum(sizes[i] for i in r)
        assert total <= budget or len(r) == 1
        if nxt is not None:
            assert total + sizes[nxt.start] > budget  # a greedy cut: the next page did not fit
    assert byte_slices([], 10) == [] and byte_slices([5, 5, 5], 10) == [range(0, 2), range(2, 3)]


def test_batches_carry_json_items():
    """A message MessagePack cannot carry (a lone surrogate in its id) travels as JSON inside a
    MessagePack batch."""
    odd = ToDecide("expect", "doc-\ud800", 5, None, expected=1)
    plain = ToDecide("answer", "doc-2", 6, None, part=3)
    assert odd.to_bytes()[:1] == b"{" and plain.to_bytes()[:1] != b"{"
    for size in (10, 300, 70_000):  # JSON items of each MessagePack binary length class
        wide = ToDecide("expect", "doc-\ud800", 5, None, expected=1, snippet="长" * size)
        (msg,) = pack_batches([plain.to_bytes(), wide.to_bytes(), odd.to_bytes()], max_bytes=1 << 20)
        assert [ToDecide.from_item(x) for x in unpack_batch(msg)] == [plain, wide, odd]


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


class BulkPartitioned(Partitioned):
    """A table that also takes a partition's writes at once (``write_many``), as the workers' do."""

    def write_many(self, partition, items):
        part = self.parts.setdefault(partition, {})
        for k, v in items:
            self.writes += 1
            if v is None:
                part.pop(k, None)
            else:
                part[k] = v


def test_write_back_hands_a_bulk_mapping_each_partitions_writes_in_order():
    t = BulkPartitioned()
    calls = []
    t.write_many = lambda scope, items: calls.append((scope, list(items)))  # type: ignore[method-assign]
    wb = WriteBack(t, tag=lambda: t.current, scope=lambda tag: tag)
    with t.under(1):
        wb[b"a"] = b"1"
        wb[b"b"] = b"2"
    with t.under(2):
        wb[b"a"] = b"x"
    with t.under(1):
        wb[b"a"] = b"3"  # rewritten: one write, at its first place
        t.parts[1] = {b"gone": b"old"}
        del wb[b"gone"]
    assert wb.flush() == 4
    assert calls == [(1, [(b"a", b"3"), (b"b", b"2"), (b"gone", None)]), (2, [(b"a", b"x")])]
    assert not wb.pending


def run_batched(events: list[dict], settings, partitions: int, rng: random.Random,
                table=Partitioned, in_order: bool = True) -> tuple[dict, dict, Counter]:
    """The worker's agents over in-memory partitioned tables and queues, in random batches and order.
    Returns the latest verdict per document, the latest cluster record per original, and counts.
    ``in_order``: the index agent takes each batch's probes in (ts, id) order, as the workers do
    (``IndexStage.in_order``); else in the order their messages brought them."""
    prep = Preparer(settings)
    window = settings.engine.window_ms
    q = {t: [deque() for _ in range(partitions)] for t in ("probes", "answers")}
    exact_t, index_t, decide_t = Partitioned(), table(), table()
    exact = {p: ExactStore(exact_t, window) for p in range(partitions)}
    index_wb = WriteBack(index_t, tag=lambda: index_t.current, scope=lambda tag: tag)
    decide_wb = WriteBack(DocStates(decide_t), tag=lambda: decide_t.current, scope=lambda tag: tag)
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
        stage = rng.choice(["pages", "probes", "answers"])
        out: dict = {}
        if stage == "pages":
            raws = [(json.dumps(pages.popleft(), ensure_ascii=False), None)
                    for _ in range(min(rng.choice([1, 50, 256]), len(pages)))]
            for p in prep.prepare_many(raws):  # as the prepare agent: one call per stream batch
                assert isinstance(p, Prepared), p
                fingerprint, probes = fan_out(p, partitions)  # both to the probes topic
                out.setdefault(digest_partition(p.digest, partitions), []).append(fingerprint.to_bytes())
                for pr in probes:
                    out.setdefault(pr.partition, []).append(pr.to_bytes())
            send("probes", out)
        elif stage == "probes":  # as the index agent: the exact checks, then the probes
            batch: list[tuple[int, Probe]] = []
            for part, msg in take("probes"):
                with exact_t.under(part):
                    for item in unpack_batch(msg):
                        it = index_item(item)
                        if isinstance(it, Prepared):
                            assert digest_partition(it.digest, partitions) == part
                            msgs = exact_stage(exact[part], it)
                            counts["exact.items"] += 1
                            to_decide(out, msgs)
                        else:
                            assert it.partition == part
                            batch.append((part, it))
            for part, it in index.in_order(batch) if in_order else batch:
                with index_t.under(part):
                    msgs = index.process(it)
                counts["index.offers"] += sum(m.kind == "offer" for m in msgs)
                to_decide(out, msgs)
            counts["index.candidates"] = index.candidates
            send("answers", out)
            counts["index.writes"] += index_wb.flush(around=index_t.under)
        else:
            for part, msg in take("answers"):
                with decide_t.under(part):
                    for item in unpack_batch(msg):
                        counts["answers.items"] += 1
                        v = decide.apply(ToDecide.from_item(item))
                        to_decide(out, decide.outbox)
                        if v is not None:
                            latest[v.id] = v
                        if decide.cluster is not None:
                            clusters[decide.cluster.id] = decide.cluster
            send("answers", out)
            decide_wb.flush(around=decide_t.under)
    return latest, clusters, counts


@pytest.mark.parametrize("seed,table", [(1, Partitioned), (2, BulkPartitioned)])
def test_batched_stages_over_partitioned_tables_converge_on_scan(tmp_path, seed, table):
    shared_data("news/thucnews_1000.jsonl")
    from ..integration.pipeline import labelled_stream

    events = labelled_stream(tmp_path, n_news=150, n_sms=1200, seed=seed)
    settings = load_settings(environ={})
    got, clusters, counts = run_batched(events, settings, partitions=6, rng=random.Random(seed), table=table)
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
    # every document's exact check rode the probes topic, once
    assert counts["exact.items"] == len(events)


def test_a_campaign_out_of_order_takes_less_index_work_in_ts_order_for_the_same_verdicts():
    """A spam campaign (real spam SMS, each sent over and over with a mark, as ``bench/campaign.py``
    sends it) arriving out of event-time order, through the batched stages twice: the index taking
    each batch's probes as their messages brought them, and in (ts, id) order as the workers do
    (``IndexStage.in_order``). The verdicts must be the same (and ``scan``'s over the same arrival
    order), and the ordered run must verify fewer candidates and send fewer offers."""
    rows = [json.loads(line) for line in open(shared_data("sms/sms_spam_zh.jsonl"), encoding="utf-8")]
    spam = [r["text"] for r in rows if r.get("label") == 1 and len(r["text"]) >= 20][:6]
    events = [{"id": f"t{t}-r{r}", "text": f"{text} 第{r}版", "ts": 1000 + 6 * r + t}
              for r in range(60) for t, text in enumerate(spam)]
    rng = random.Random(3)
    for s in range(0, len(events), 120):  # out of order within blocks of 120
        block = events[s:s + 120]
        rng.shuffle(block)
        events[s:s + 120] = block
    settings = load_settings(environ={})
    runs = {flag: run_batched(events, settings, partitions=3, rng=random.Random(9), in_order=flag)
            for flag in (False, True)}
    engine = Engine(settings)
    expected = {v.id: v for e in events for v in engine.process(json.dumps(e, ensure_ascii=False))}
    key = lambda v: (v.verdict, v.match, v.duplicate_of)  # noqa: E731
    for got, _, _ in runs.values():
        assert {i: key(v) for i, v in got.items()} == {i: key(v) for i, v in expected.items()}
    assert sum(v.verdict == "duplicate" for v in expected.values()) >= len(events) - 12
    (_, _, arrival), (_, _, ordered) = runs[False], runs[True]
    assert ordered["index.candidates"] < arrival["index.candidates"]
    assert ordered["index.offers"] < arrival["index.offers"]


def test_the_probes_topic_tells_a_probe_from_an_exact_check_in_every_form():
    """The index agent reads probes and the ``fan_out`` Prepared from one topic (``index_item``):
    in MessagePack, and in the JSON form a lone surrogate forces."""
    prep = Preparer(load_settings(environ={}))
    ps = [prep.prepare(json.dumps({"id": i, "text": t, "ts": 5}, ensure_ascii=False))
          for i, t in (("a", "周末读书分享会在市图书馆三楼举行，欢迎参加"), ("b", "孤立代理项的短信文本也要能判断清楚"))]
    items = []
    for p in ps:
        fingerprint, probes = fan_out(p, 6)
        assert probes
        items += [fingerprint] + probes
    fingerprint.snippet += "\ud800"  # normalizing drops it from a text; here it forces the JSON form
    raw = [x.to_bytes() for x in items]
    assert sum(b[:1] == b"{" for b in raw) == 1  # the Prepared whose snippet holds the surrogate went as JSON
    got = [index_item(x) for x in unpack_batch(pack_batches(raw)[0])]
    assert got == items
    assert [type(x) for x in got] == [type(x) for x in items]


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
    codes = [{c for c, _, _ in Prepared.from_bytes(b).sketches} for b in batched if isinstance(b, bytes)]
    simhashed = sum(1 for c in codes if 1 in c)
    ngrammed = sum(1 for c in codes if 2 in c)
    assert simhashed > 30 and ngrammed > 100 and sum(1 for b in batched if isinstance(b, str)) > 10


def test_internal_messages_and_states_are_compact_and_read_old_json_records():
    """Messages and decide states are MessagePack: the snippet of a Chinese text is UTF-8 (3 bytes a
    character), digests and payloads raw bytes, no base64 or JSON escapes. A lone surrogate in a text
    survives (the JSON form carries it); records written by earlier versions (JSON, ASCII escapes
    or not) read the same."""
    import json as _json

    from stream_dedup.core.verdict import Candidate, DocState

    snippet = "国务院新闻办公室今天举行新闻发布会，介绍前三季度国民经济运行情况。统计局新闻发言人表示"
    for text in (snippet, snippet + "\ud800"):
        p = Prepared("doc-1", 1000, b"\x01" * 16, "text", [(1, (5, 6), b"\x00\xff")], 2.0, text)
        raw = p.to_bytes()
        assert Prepared.from_bytes(raw) == p
        assert snippet[:10].encode("utf-8") in raw and b"\\u" not in raw
        assert Prepared.from_bytes(p._json()) == p
        m = ToDecide("expect", "doc-1", 1000, Candidate(900, "doc-0", "exact", "exact", 1.0, 0, -1), expected=2,
                     rank=2.0, snippet=text)
        assert ToDecide.from_bytes(m.to_bytes()) == m
        pr = Probe("文档-1", 1000, 3, [(1, (5, 1 << 63), b"\x00")])
        assert Probe.from_bytes(pr.to_bytes()) == pr and Probe.from_bytes(pr._json()) == pr
        table: dict = {}
        states = DocStates(table)
        st = DocState("doc-1", 1000, 2, {0, 3}, near=Candidate(900, "doc-0", "near", "ngram", 0.8, 2, 1),
                      revision=0, emitted=("duplicate", "near", "doc-0", "ngram", 0.8, 2), rank=2.0,
                      members={"doc-9": [1200, None]}, extra=1, snippet=text)
        states["doc-1"] = st
        assert states["doc-1"] == st
        assert len(table[b"doc-1"]) < len(_json.dumps(st.to_json()))  # the ASCII-escaped form is longer
        table[b"doc-1"] = _json.dumps(st.to_json()).encode()  # as earlier versions wrote it
        assert states["doc-1"] == st
        assert ToDecide.from_bytes(_json.dumps({"t": "expect", "id": "doc-1", "ts": 1000, "c": m.cand.to_list(),
                                                "n": 2, "p": None, "r": 2.0, "x": text}).encode()) == m
    plain = Prepared("doc-1", 1000, b"\x01" * 16, "text", [(2, (5, 6), b"\x00" * 110)], None, snippet)
    assert len(plain.to_bytes()) < 0.75 * len(plain._json())


def test_a_late_bridge_whose_shared_buckets_fall_one_to_a_partition_merges_as_in_scan():
    """Two real spam messages (``sms/sms_spam_zh.jsonl`` rows 36014 and 36091, x read as 7), a copy
    of each, and their concatenation last. The bridge shares four buckets with c, each in another
    of four partitions, each of which also holds a bucket of a: every partition's walk meets c past
    its earliest match (a), in one bucket. scan meets c in four; the workers must join c's cluster
    to a's as scan does."""
    from stream_dedup.core.routing import key_partition

    s1 = "【天猫】@蜜丝佛陀官方旗舰店，7.7女王节，小蜜送钜惠！全场7.7折起，满777减77再送777，手机下单历史最低，7月7日心动开抢！"
    s2 = "感谢致电武汉三环锁业经营部，本店主营五金装饰销售，价格适中，质量一流，诚信经营，客户至上"
    t = 1_700_000_000_000
    events = [{"id": "a", "text": s1, "ts": t + 10}, {"id": "a2", "text": s1 + "，回T退订", "ts": t + 11},
              {"id": "c", "text": s2, "ts": t + 20}, {"id": "c2", "text": "【抽奖】" + s2, "ts": t + 21},
              {"id": "bridge", "text": s1 + s2, "ts": t + 30}]
    settings = load_settings(environ={})
    prep = Preparer(settings)
    keys = {e["id"]: {(code, k) for code, ks, _ in prep.prepare(e).sketches for k in ks} for e in events}
    with_a = {key_partition(code, k, 4) for code, k in keys["bridge"] & keys["a"]}
    with_c = [key_partition(code, k, 4) for code, k in keys["bridge"] & keys["c"]]
    # the case: c's shared buckets one to a partition, each partition with one of a's too
    assert len(with_c) >= 2 and len(set(with_c)) == len(with_c) and set(with_c) <= with_a
    engine = Engine(settings)
    expected = {v.id: (v.verdict, v.duplicate_of) for e in events for v in engine.process(e)}
    assert expected == {"a": ("unique", None), **{i: ("duplicate", "a") for i in ("a2", "c", "c2", "bridge")}}
    for seed in range(3):
        got, clusters, _ = run_batched(events, settings, partitions=4, rng=random.Random(seed))
        assert {i: (v.verdict, v.duplicate_of) for i, v in got.items()} == expected
        assert clusters["a"].size == 5
