"""The streaming worker on a real broker: convergence with `scan`, completeness, rebalances."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from rocksdict import AccessType, Options, Rdict

from stream_dedup.config import Settings
from stream_dedup.core.engine import Engine
from stream_dedup.stream.kafka_io import consumer
from stream_dedup.stream.rocks import forget_saved_options
from stream_dedup.stream.status import wait_drained
from stream_dedup.stream.topics import apply

from ..conftest import run_and_read_index, shared_data
from .pipeline import Workers, campaign_stream, key_of, labelled_stream, latest, produce_events, read_all, whereabouts

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

BAD = [b"{not json", b"\xff\xfe\xfa", b'{"text": "no id"}', b'{"id": "bad-1"}', b'{"id": "bad-2", "text": 42}',
       b'[1, 2, 3]', b'{"id": "bad-3", "text": "x", "ts": "noon"}']


BAD_REASONS = {"not_json", "bad_utf8", "missing_id", "missing_text", "bad_text", "not_object", "bad_ts"}



def open_table_db(path: Path) -> Rdict:
    """A worker's table database, opened as the worker opens it (with a TTL, which strips each value's
    timestamp; its saved options forgotten first, see ``rocks.forget_saved_options``)."""
    forget_saved_options(path)
    return Rdict(str(path), options=Options(raw_mode=True), access_type=AccessType.with_ttl(3600))

def conflicting(events: list[dict]) -> bytes:
    """A page event with the id of one of ``events`` and other content, produced after it: `scan`
    rejects it (``id_conflict``) and keeps the first content's verdict, and so must the workers."""
    first = events[len(events) // 2]
    return json.dumps({"id": first["id"], "text": "这条短信借用了另一篇文档的编号，内容却完全不同，应当被拒收。"},
                      ensure_ascii=False).encode()


def scan_verdicts(settings: Settings, events: list[dict]) -> dict[str, tuple]:
    return scan_all(settings, events)[0]


_scans: dict[str, tuple] = {}


def scan_all(settings: Settings, events: list[dict]) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """scan's verdicts and clusters (size, canonical) for the same events.

    Remembered per (engine settings, events): the fault tests compare 20,000-event streams, each
    twice, and several tests share a stream. Each call gets its own copies: a caller may change them
    (a test drops the document it expects no verdict for)."""
    engine_settings = {k: v for k, v in settings.as_dict().items() if k not in ("kafka", "topics", "worker")}
    key = hashlib.sha256((json.dumps(engine_settings, sort_keys=True)
                          + json.dumps(events, sort_keys=True, ensure_ascii=False)).encode()).hexdigest()
    if key not in _scans:
        with Engine(settings) as e:
            for ev in events:
                e.process(ev)
            if len(_scans) >= 4:
                _scans.clear()
            _scans[key] = ({v.id: key_of(v.to_dict()) for v in e.verdicts()},
                           {c.id: (c.size, c.canonical) for c in e.clusters()})
    verdicts, clusters = _scans[key]
    return dict(verdicts), dict(clusters)


def check_clusters(settings: Settings, events: list[dict], workers: Workers | None = None) -> None:
    """The clusters topic (latest record per original) says what scan's clusters say.

    On a difference the message carries what tracing it needs: each differing original's records
    in topic order and every verdict (revisions included) of the documents they name."""
    _, expected = scan_all(settings, events)
    records = read_all(settings, settings.topics.clusters, until=lambda ms: False, timeout=60, idle=5)
    got: dict[str, tuple] = {}
    for r in records:  # one partition per key: topic order is the order they were written
        got[r["id"]] = (r["size"], r["canonical"])
    got = {i: c for i, c in got.items() if c[0] > 1}
    assert expected, "the stream has duplicates, so it has clusters"
    diverged = {i: (got.get(i), expected.get(i)) for i in set(got) | set(expected) if got.get(i) != expected.get(i)}
    if diverged:
        some = list(diverged)[:3]
        history = [(r["id"], r["size"], r["members"]) for r in records if r["id"] in some]
        named = set(some) | {m for _, _, ms in history for m in ms}
        verdicts = [(v["id"], v["revision"], v["verdict"], v.get("duplicate_of"))
                    for v in read_all(settings, settings.topics.verdicts, until=lambda ms: False, timeout=30, idle=2)
                    if v["id"] in named or v.get("duplicate_of") in some]
        raise AssertionError(f"{len(diverged)} clusters differ from scan, e.g. {list(diverged.items())[:5]}\n"
                             f"their records: {history}\nverdicts naming them: {verdicts}\n"
                             f"{workers.notable() if workers else ''}")


def run_and_collect(settings: Settings, events: list[dict], timeout: float, during=None,
                    total: int | None = None, extra: list[bytes] = BAD) -> tuple[dict, list]:
    """Produce the events (and ``extra``, after them), then read verdicts until ``total`` ids (default:
    these events) have one."""
    n = total or len(events)
    produce_events(settings, events, extra_raw=extra)
    if during:
        during()
    verdicts = read_all(settings, settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= n, timeout=timeout)
    # revisions, and the cluster joins and leaves that go with them, can still be on their way: the
    # clusters topic says what scan says only once the group has processed every record (a test that
    # stopped its workers 8 s after the last first verdict could leave a leave unread)
    drained, st = wait_drained(settings, 120, every_s=2)
    assert drained, st["text"]
    verdicts = read_all(settings, settings.topics.verdicts, until=lambda ms: False, timeout=30, idle=2)
    dlq = read_all(settings, settings.topics.dlq, until=lambda ms: len(ms) >= len(extra), timeout=60)
    return latest(verdicts), dlq


def check(settings, events, got, dlq, workers, extra: list[bytes] = BAD):
    # a replay after a crash may dead-letter an event twice: one record per source offset counts
    dlq = list({(d["topic"], d["partition"], d["offset"]): d for d in dlq}.values())
    expected = scan_verdicts(settings, events)
    lost = {e["id"] for e in events} - set(got)
    assert not lost, (f"{len(lost)} events have no verdict: {whereabouts(settings, lost)}\n{workers.notable()}\n"
                      f"{workers.logs(tail=3)}")
    assert len(got) + len(dlq) == len(events) + len(extra), workers.logs()
    assert set(got) == {e["id"] for e in events}
    diverged = {i: (key_of(got[i]), expected[i]) for i in expected if key_of(got[i]) != expected[i]}
    # the whole verdict (revision, detector, similarity, ts) of each example: what a rare divergence needs to be traced
    assert not diverged, (f"{len(diverged)} verdicts differ from scan, e.g. (id, latest verdict, scan's key): "
                          f"{[(i, got[i], expected[i]) for i in list(diverged)[:8]]}\n{workers.notable()}")
    conflicts = len(extra) - len(BAD)
    assert {d["reason"] for d in dlq} == BAD_REASONS | ({"id_conflict"} if conflicts else set())
    assert sum(d["reason"] == "id_conflict" for d in dlq) == conflicts
    assert all(d["original_b64"] and d["offset"] is not None for d in dlq)
    dups = sum(1 for v in got.values() if v["verdict"] == "duplicate")
    assert dups > 0.05 * len(events)


def judged_as_scan_judges(settings: Settings, tmp_path: Path, events: list[dict], names: list[str],
                          timeout: float) -> None:
    """Workers ``names`` judge ``events`` (and ``BAD``): their verdicts and clusters are scan's."""
    workers = Workers(settings, tmp_path)
    try:
        for name in names:
            workers.start(name)
        got, dlq = run_and_collect(settings, events, timeout=timeout)
    finally:
        workers.stop_all()
    check(settings, events, got, dlq, workers)
    check_clusters(settings, events, workers)


@pytest.fixture
def stream_events(tmp_path):
    shared_data("news/thucnews_1000.jsonl")
    return labelled_stream(tmp_path, n_news=1800, n_sms=3400)


@pytest.mark.parametrize("n_workers", [pytest.param(1, marks=pytest.mark.long), 3])
def test_convergence_with_scan(kafka_settings, tmp_path, stream_events, n_workers):
    kafka_settings.topics.partitions = 6
    apply(kafka_settings)
    workers = Workers(kafka_settings, tmp_path)
    try:
        for i in range(n_workers):
            workers.start(f"w{i}")
        # and one event that reuses an earlier one's id with other content
        extra = BAD + [conflicting(stream_events)]
        got, dlq = run_and_collect(kafka_settings, stream_events, timeout=900, extra=extra)
    finally:
        workers.stop_all()
    check(kafka_settings, stream_events, got, dlq, workers, extra)
    check_clusters(kafka_settings, stream_events, workers)
    if n_workers == 1:  # one worker held every partition the whole run: its state is all of the state
        check_changelogs_hold_the_local_state(kafka_settings, tmp_path / "state-w0")


# the undo-and-retry is one implementation for both stages (RebalanceGuard): `make test` runs one,
# `make test-long` both
@pytest.mark.parametrize("stage", ["decide", pytest.param("index", marks=pytest.mark.long)])
def test_a_batch_in_hand_when_its_partitions_move_is_left_to_their_new_owner(kafka_settings, tmp_path, stage):
    """w0's ``stage`` sleeps per item (``tests/faulty_worker.py``), so it holds each batch for seconds,
    and w1 joins while it does: w0 must publish nothing of decide's for the answers partitions that
    moved to w1, and no table writes of index's for the probes partitions (``split_moved``; their
    new owner replays them; the batch is done again without them, or held whole when the
    rebalance began as its output went out), and the outcome must be scan's, clusters included.
    Without the check w0 went on sending for them after w1 had begun: a late cluster join could
    follow the leave that w1 sent after it, or a bucket's older value end its changelog."""
    kafka_settings.topics.partitions = 6
    apply(kafka_settings)
    shared_data("news/thucnews_1000.jsonl")
    events = labelled_stream(tmp_path, n_news=80, n_sms=320, clustered=True)
    workers = Workers(kafka_settings, tmp_path)

    def join_while_busy() -> None:
        # w0's first batch of the stage takes tens of seconds at 50 ms an item (and its output goes
        # out at its end): a few seconds after w0 is ready, it has one in hand
        deadline = time.monotonic() + 120
        while "Worker ready" not in (tmp_path / "w0.log").read_text(errors="replace"):
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.5)
        time.sleep(5)
        workers.start("w1")

    try:
        workers.start("w0", FAULT_DELAY=f"{stage}:0.05:60")
        got, dlq = run_and_collect(kafka_settings, events, timeout=600, during=join_while_busy)
        time.sleep(12)  # a counts line (every 10 s) after the last verdict
    finally:
        workers.stop_all()
    w0_log = (tmp_path / "w0.log").read_text(errors="replace")
    assert f"{stage}: a rebalance began while the batch was in hand" in w0_log, workers.notable()
    # a batch decided again without its moved messages counts only the pass whose verdicts went out
    # (a worker that restarted starts its counts afresh: then only "not more than published")
    published = read_all(kafka_settings, kafka_settings.topics.verdicts, until=lambda ms: False, timeout=30, idle=2)
    counted = [json.loads(re.findall(r"\[INFO\] counts (\{.*\})", log)[-1]).get("verdicts", 0)
               for log in (w0_log, (tmp_path / "w1.log").read_text(errors="replace"))]
    assert sum(counted) <= len(published), (counted, len(published), workers.notable())
    assert workers.restarts or sum(counted) == len(published), (counted, len(published), workers.notable())
    check(kafka_settings, events, got, dlq, workers)
    check_clusters(kafka_settings, events, workers)


@pytest.mark.parametrize("stage", ["index", pytest.param("decide", marks=pytest.mark.long)])
def test_partitions_that_move_away_and_back_while_a_batch_is_in_hand_keep_the_other_owners_writes(
        kafka_settings, tmp_path, stage):
    """w0's ``stage`` sleeps per item, so it holds its first batch of the stream's first part for
    tens of seconds. Meanwhile w1 joins, takes half the partitions, works through them and through
    the stream's second part, and stops, so its partitions come back to w0, restored with w1's
    writes; then the third part comes. The batch in hand read the tables before w1's writes: what
    it computed from them must not land over them (the third part's copies of the second part's
    documents would miss them), and no batch may read a table while Faust restores it.
    At the end w0 owns every partition: its RocksDB files must hold what the changelogs restore,
    and every verdict must be scan's.
    Without the wait for the restore and the replay of a batch that a rebalance overtook, w0's
    index batch wrote its buckets as it had read them before w1 came."""
    kafka_settings.topics.partitions = 6
    apply(kafka_settings)
    shared_data("news/thucnews_1000.jsonl")
    events = labelled_stream(tmp_path, n_news=80, n_sms=320, clustered=True)
    first, second, third = events[:160], events[160:280], events[280:]
    workers = Workers(kafka_settings, tmp_path)

    def ready(name: str, times: int = 1) -> None:
        deadline = time.monotonic() + 120
        while (tmp_path / f"{name}.log").read_text(errors="replace").count("Worker ready") < times:
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.5)

    def come_and_go() -> None:
        time.sleep(5)  # w0 has its first slow batch of the stage in hand
        workers.start("w1")
        ready("w1")
        produce_events(kafka_settings, second)
        time.sleep(10)  # w1 works through its partitions (no delay there)
        workers.stop("w1")
        ready("w0", times=3)  # the partitions are back on w0, restored
        produce_events(kafka_settings, third)

    try:
        workers.start("w0", FAULT_DELAY=f"{stage}:0.05:90")
        ready("w0")
        got, dlq = run_and_collect(kafka_settings, first, timeout=600, during=come_and_go, total=len(events))
    finally:
        workers.stop_all()
    check(kafka_settings, events, got, dlq, workers)
    check_clusters(kafka_settings, events, workers)
    check_changelogs_hold_the_local_state(kafka_settings, tmp_path / "state-w0")
    check_buckets_hold_the_engines_entries(kafka_settings, events, tmp_path / "state-w0", tmp_path / "engine")
    w0_log = (tmp_path / "w0.log").read_text(errors="replace")
    assert f"{stage}: a rebalance began while the batch was in hand" in w0_log, workers.notable()


def check_buckets_hold_the_engines_entries(settings: Settings, events: list[dict], state: Path, folder: Path) -> None:
    """The worker's index tables (all of its partitions) hold the same (bucket, document) entries as
    the embedded engine's index after the same events: the verdicts alone do not show an entry lost
    from some of a document's buckets, since its other keys still find it (the move-and-back test
    lost 75 of 5,931 entries with every verdict right)."""
    from stream_dedup.core.index import unpack_entries

    def entries(items) -> set[tuple[bytes, str]]:
        return {(k, ident) for k, v in items if k[:1] == b"L" for _, ident, _ in unpack_entries(v)}

    want = entries(run_and_read_index(settings, folder, events)[0].items())
    got: set[tuple[bytes, str]] = set()
    for path in sorted(state.rglob("index-*.db")):
        db = open_table_db(path)
        try:
            got |= entries((k, v) for k, v in db.items() if not k.startswith(b"__faust"))
        finally:
            db.close()
    missing, extra = want - got, got - want
    assert len(want) > 1000 and not missing and not extra, (
        len(want), len(missing), sorted({i for _, i in missing})[:10], len(extra), sorted({i for _, i in extra})[:10])


def changelog_contents(settings: Settings, topic: str) -> dict[int, dict[bytes, bytes]]:
    """What a restore from the changelog topic rebuilds: per partition, the last value of each key."""
    c = consumer(settings, f"changelog-reader-{time.time_ns()}")
    c.subscribe([topic])
    out: dict[int, dict[bytes, bytes]] = {}
    last = time.time()
    try:
        while time.time() - last < 5:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            last = time.time()
            part = out.setdefault(m.partition(), {})
            if m.value() is None:
                part.pop(m.key(), None)
            else:
                part[m.key()] = m.value()
    finally:
        c.close()
    return out


def check_changelogs_hold_the_local_state(settings: Settings, state: Path) -> None:
    """The workers write their tables locally and send the changelog records in bulk, once per batch
    (stream/changelog.py): replaying the changelog must give what the worker's RocksDB files hold, or a
    partition that moves would be restored with less (or other) state than its owner had."""
    compared = 0
    for name in ("exact", "index", "decide", "ids"):
        topic = f"{settings.topics.internal_prefix}.{name}-changelog"
        restored = changelog_contents(settings, topic)
        dbs = sorted(state.rglob(f"{name}-*.db"))
        assert len(dbs) == settings.topics.partitions, (name, dbs)
        for path in dbs:
            part = int(path.name[len(name) + 1:-3])
            # the workers open their tables with a TTL (RocksDB's DBWithTTL keeps a timestamp after
            # each value): opened the same way, reads give the values without it
            db = open_table_db(path)
            try:
                local = {k: v for k, v in db.items() if not k.startswith(b"__faust")}
            finally:
                db.close()
            want = restored.get(part, {})
            assert local.keys() == want.keys(), (name, part, len(local), len(want))
            differ = [k for k in local if local[k] != want[k]]
            assert not differ, (name, part, differ[:3])
            compared += len(local)
    assert compared > 1000, compared


def table_contents(state: Path) -> dict[str, dict[bytes, bytes]]:
    """Every table database of a worker's state folder: name -> its keys and values (Faust's own
    bookkeeping keys left out)."""
    out = {}
    for path in sorted(state.rglob("*-*.db")):
        db = open_table_db(path)
        try:
            out[path.name] = {k: v for k, v in db.items() if not k.startswith(b"__faust")}
        finally:
            db.close()
    return out


def test_a_worker_that_lost_its_state_restores_its_tables_in_bulk(kafka_settings, tmp_path):
    """A worker whose state folder is gone restores every table partition from its changelog, read
    in bulk with librdkafka and written in RocksDB write batches (``stream/restore.py``) before
    Faust's recovery, which then has nothing left to read. The restored tables must hold what the
    lost ones held, byte for byte, and the events that come after must get ``scan``'s verdicts."""
    kafka_settings.topics.partitions = 6
    apply(kafka_settings)
    shared_data("news/thucnews_1000.jsonl")
    events = labelled_stream(tmp_path, n_news=80, n_sms=320, clustered=True)
    first, rest = events[:300], events[300:]
    workers = Workers(kafka_settings, tmp_path)
    try:
        workers.start("w0")
        produce_events(kafka_settings, first)
        read_all(kafka_settings, kafka_settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= len(first),
                 timeout=300)
        drained, st = wait_drained(kafka_settings, 120, every_s=2)
        assert drained, st["text"]
        assert workers.stop("w0") == 0, workers.logs()
        lost = tmp_path / "lost-w0"
        shutil.move(tmp_path / "state-w0", lost)
        log_file = tmp_path / "w0.log"
        seen = log_file.stat().st_size
        workers.start("w0")  # restores, and is stopped once ready: its tables are then the restored ones
        deadline = time.monotonic() + 180
        while "Worker ready" not in log_file.read_bytes()[seen:].decode(errors="replace"):
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.5)
        assert workers.stop("w0") == 0, workers.logs()
        log = log_file.read_bytes()[seen:].decode(errors="replace")
        restored = [int(n) for n in re.findall(r"bulk restore: (\d+) changelog records", log)]
        assert restored and restored[-1] > 1000, (restored, workers.logs())
        before, after = table_contents(lost), table_contents(tmp_path / "state-w0")
        assert sum(map(len, before.values())) > 1000 and before.keys() == after.keys()
        for name, content in before.items():
            differ = [k for k in content.keys() | after[name].keys() if content.get(k) != after[name].get(k)]
            assert not differ, (name, len(content), len(after[name]), differ[:3])
        workers.start("w0")
        got, dlq = run_and_collect(kafka_settings, rest, timeout=300, total=len(events))
    finally:
        workers.stop_all()
    check(kafka_settings, events, got, dlq, workers)


def test_a_campaign_fills_buckets_past_their_inline_entries_and_the_worker_stores_them_as_scan_does(
        kafka_settings, tmp_path):
    """A spam campaign (20 messages sent 60 times, exact and marked copies, some late) fills its
    buckets past ``INLINE_ENTRIES``: from there the entries refer to payloads stored once under P,
    written through the index table and its changelog like every other key. One worker: its
    verdicts and clusters are scan's, its changelogs restore what its files hold, and its buckets
    hold the embedded engine's entries, SMS-sized payloads under P among them."""
    from stream_dedup.core.index import INLINE_ENTRIES, INLINE_MAX, unpack_entries

    kafka_settings.topics.partitions = 6
    apply(kafka_settings)
    shared_data("sms/sms_spam_zh.jsonl")
    events = campaign_stream(templates=20, rounds=60)
    judged_as_scan_judges(kafka_settings, tmp_path, events, ["w0"], timeout=600)
    state = tmp_path / "state-w0"
    check_changelogs_hold_the_local_state(kafka_settings, state)
    check_buckets_hold_the_engines_entries(kafka_settings, events, state, tmp_path / "engine")
    # payloads small enough to go inline that are stored under P: those of entries past the 32nd
    # (MinHash signatures, always under P, are larger)
    longest, small_payloads = 0, 0
    for path in sorted(state.rglob("index-*.db")):
        db = open_table_db(path)
        try:
            for k, v in db.items():
                if k[:1] == b"L":
                    longest = max(longest, len(unpack_entries(v)))
                elif k[:1] == b"P":
                    small_payloads += len(v) <= INLINE_MAX
        finally:
            db.close()
    assert longest >= 60 and small_payloads >= 20 * (60 - INLINE_ENTRIES), (longest, small_payloads)


def test_rebalance_add_a_worker_then_stop_one(kafka_settings, tmp_path, stream_events):
    kafka_settings.topics.partitions = 6
    apply(kafka_settings)
    workers = Workers(kafka_settings, tmp_path)
    half = len(stream_events) // 2

    def during():
        pass

    try:
        workers.start("w0")
        workers.start("w1")
        produce_events(kafka_settings, stream_events[:half])
        read_all(kafka_settings, kafka_settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= half // 3,
                 timeout=600)
        workers.start("w2")  # joins mid-stream: partitions move to it
        got, dlq = run_and_collect(kafka_settings, stream_events[half:], timeout=900,
                                   during=lambda: (time.sleep(10), workers.stop("w0")),
                                   total=len(stream_events))  # the topic holds the first half's verdicts too
        # the first half's verdicts are on the topic too
        everything = latest(read_all(kafka_settings, kafka_settings.topics.verdicts, until=lambda ms: False,
                                     timeout=60, idle=5))
    finally:
        workers.stop_all()
    check(kafka_settings, stream_events, everything, dlq, workers)



def chains_and_bridges(groups: int, seed: int = 3) -> list[dict]:
    """Real spam messages in groups of five: a (s1), a2 (a with an opt-out tail), c (s2), c2 (c with a
    sender tag), and bridge (s1 + s2), which matches both halves: one cluster, whatever order the
    five come in, named by the bridge in even groups (the earliest of its group) and by a in odd
    ones (the bridge the latest). s1 and s2 have skeletons of one length, so that each is half of
    the bridge."""
    import random

    from stream_dedup.core.text import normalize, skeleton

    by_len: dict[int, list[str]] = {}
    for line in shared_data("sms/sms_spam_zh.jsonl").open(encoding="utf-8"):
        r = json.loads(line)
        text = r["text"].strip().replace("x", "7")
        n = len(skeleton(normalize(text)).replace("#", ""))
        if r["label"] == 1 and 24 <= n <= 40 and text not in by_len.get(n, []):
            by_len.setdefault(n, []).append(text)
    pairs = [(g[i], g[i + 1]) for g in by_len.values() for i in range(0, len(g) - 1, 2)][:groups]
    events = []
    for k, (s1, s2) in enumerate(pairs):
        t = 1_700_000_000_000 + k * 100_000
        events += [{"id": f"g{k}-a", "text": s1, "ts": t + 10}, {"id": f"g{k}-a2", "text": s1 + "，回T退订", "ts": t + 11},
                   {"id": f"g{k}-c", "text": s2, "ts": t + 20}, {"id": f"g{k}-c2", "text": "【抽奖】" + s2, "ts": t + 21},
                   {"id": f"g{k}-bridge", "text": s1 + s2, "ts": t + (5 if k % 2 == 0 else 30)}]
    random.Random(seed).shuffle(events)
    return events


def test_whole_clusters_through_two_workers_are_scans(kafka_settings, tmp_path):
    """Bridges arrive in any order among their halves: the workers revise the halves' verdicts to
    name the cluster's original (the bridge when it is the earliest; else a, c and c2 joining a's
    cluster through a later bridge) and publish the merged cluster, as scan does."""
    events = chains_and_bridges(40)
    expected = scan_verdicts(kafka_settings, events)
    named = sum(1 for i, k in expected.items()
                if i.endswith(("-a", "-a2", "-c", "-c2")) and int(i[1:].split("-")[0]) % 2 == 0
                and k[2] == i.split("-")[0] + "-bridge")
    joined = sum(1 for i, k in expected.items()
                 if i.endswith(("-a2", "-c", "-c2", "-bridge")) and int(i[1:].split("-")[0]) % 2 == 1
                 and k[2] == i.split("-")[0] + "-a")
    # the stream is what it says: most halves are in their bridge's cluster
    assert named >= 0.9 * 4 * 20 and joined >= 0.9 * 4 * 20, (named, joined)
    kafka_settings.topics.partitions = 4
    apply(kafka_settings)
    judged_as_scan_judges(kafka_settings, tmp_path, events, ["w0", "w1"], timeout=300)


def test_workers_leave_a_template_tables_units_out_as_scan_does(kafka_settings, tmp_path):
    """A template table learned from the stream (an SMS gateway's signature) is loaded by every
    worker's prepare stage as by scan's: the same verdicts, the signature no longer a match."""
    from stream_dedup.cli.template_build import build_template
    from tests.unit.test_template import sms_sample

    events = sms_sample(1200)
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    table = build_template(kafka_settings, str(sample), min_docs=5)
    assert set(table.sources) == {"gw1"}
    table.save(tmp_path / "template.json")
    plain = scan_verdicts(kafka_settings, events)
    kafka_settings.text.template = tmp_path / "template.json"
    expected = scan_verdicts(kafka_settings, events)
    signed = [e["id"] for e in events if e["source"] == "gw1"]
    # the table is in effect (so workers that judge as this scan loaded it)
    assert sum(plain[i][0] == "duplicate" for i in signed) > sum(expected[i][0] == "duplicate" for i in signed) + 3
    kafka_settings.topics.partitions = 4
    apply(kafka_settings)
    workers = Workers(kafka_settings, tmp_path)
    try:
        for name in ("w0", "w1"):
            workers.start(name, STREAM_DEDUP_TEXT__TEMPLATE=str(tmp_path / "template.json"))
        got, _ = run_and_collect(kafka_settings, events, timeout=300)
    finally:
        workers.stop_all()
    assert set(got) == set(expected)
    diverged = {i: (got[i], expected[i]) for i in expected if key_of(got[i]) != expected[i]}
    assert not diverged, (len(diverged), list(diverged.items())[:5], workers.notable())
