"""The embedded engine end to end on real Chinese text: verdict rule, revisions, order independence."""
import json
import random
from pathlib import Path

import pytest

from stream_dedup.config import load_settings
from stream_dedup.core.document import Rejected
from stream_dedup.core.engine import Engine
from stream_dedup.cli.evaluate import evaluate
from stream_dedup.scan import run_scan

from ..conftest import run_and_read_index

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample.jsonl"
LABELS = REPO / "examples" / "sample_labels.jsonl"


def events() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def final_verdicts(evs: list[dict]) -> dict[str, tuple]:
    with Engine(load_settings(environ={})) as e:
        for ev in evs:
            e.process(ev)
        return {v.id: (v.verdict, v.match, v.duplicate_of) for v in e.verdicts()}


def test_sample_verdicts_match_labels():
    labels = [json.loads(x) for x in LABELS.read_text().splitlines()]
    with Engine(load_settings(environ={})) as e:
        for ev in events():
            e.process(ev)
        rep = evaluate([v.to_dict() for v in e.verdicts()], labels)
    assert rep.overall.precision == 1.0 and rep.overall.recall == 1.0, rep.describe()


def test_order_independence_20_random_orders():
    evs = events()
    reference = final_verdicts(evs)
    assert sum(1 for v in reference.values() if v[0] == "duplicate") >= 8
    rng = random.Random(42)
    for _ in range(20):
        shuffled = evs[:]
        rng.shuffle(shuffled)
        assert final_verdicts(shuffled) == reference


def test_few_documents_in_memory_give_the_same_verdicts_revisions_and_clusters(tmp_path):
    """``engine.docs_in_memory``: with 1 to 3 documents' states and digests in memory and the rest
    in the run's RocksDB folder, every call returns what it returns with all in memory (revisions
    included, in random orders that make them), the id check still knows every id, and the folder
    is gone after the run."""
    evs = events()
    rng = random.Random(11)

    def run(evs: list[dict], most: int | None) -> tuple:
        env = {} if most is None else {"STREAM_DEDUP_ENGINE__DOCS_IN_MEMORY": str(most)}
        with Engine(load_settings(environ=env), tmp_path / f"state-{most}") as e:
            calls = [[v.to_dict() for v in e.process(ev)] for ev in evs]
            with pytest.raises(Rejected):  # a known id with other content, however long ago
                e.process({**evs[0], "text": evs[0]["text"] + "（更正）"})
            assert e.process(evs[0]) == []  # and a replay is still a replay
            states = e.decide.states
            assert states.spilled == (most is not None) and len(states.hot) <= (most or len(evs))
            assert (tmp_path / f"state-{most}" / "run").exists() == (most is not None)
            out = (calls, {v.id: v.to_dict() for v in e.verdicts()},
                   [(c.id, c.size, c.canonical, tuple(c.members)) for c in sorted(e.clusters(), key=lambda c: c.id)])
        assert not (tmp_path / f"state-{most}" / "run").exists()
        return out

    for most in (None, 1):  # a run without a --state folder leaves nothing behind, spilled or not
        env = {} if most is None else {"STREAM_DEDUP_ENGINE__DOCS_IN_MEMORY": str(most)}
        e = Engine(load_settings(environ=env))
        for ev in evs:
            e.process(ev)
        folder = e.state_dir
        assert (folder / "run").exists() == (most is not None)
        e.close()
        assert not folder.exists()
    revised = 0
    for _ in range(6):
        shuffled = evs[:]
        rng.shuffle(shuffled)
        want = run(shuffled, None)
        revised += sum(v["revision"] > 0 for call in want[0] for v in call)
        for most in (1, 2, 3):
            assert run(shuffled, most) == want
    assert revised >= 3  # the orders made revisions, so spilled states were revised


def test_late_earlier_document_revises_the_later_one():
    text = "本市今天上午召开新闻发布会，介绍今年夏季防汛工作安排，全市已完成主要河道清淤二百余公里，新建排水泵站十二座。"
    with Engine(load_settings(environ={})) as e:
        v1 = e.process({"id": "late", "text": text, "ts": 2000})
        assert [v.verdict for v in v1] == ["unique"]
        out = e.process({"id": "early", "text": text, "ts": 1000})
        by_id = {v.id: v for v in out}
        assert by_id["early"].verdict == "unique" and by_id["early"].revision == 0
        assert by_id["late"].verdict == "duplicate" and by_id["late"].duplicate_of == "early"
        assert by_id["late"].revision == 1 and by_id["late"].match == "exact"


def test_exact_beats_an_earlier_near_match():
    base = ("国内一家新能源车企发布了新款纯电动轿车，官方公布的续航里程达到七百公里。"
            "该车搭载自主研发的电池管理系统，充电十五分钟可补充四百公里续航。")
    with Engine(load_settings(environ={})) as e:
        e.process({"id": "near", "text": base.replace("七百", "六百"), "ts": 1})
        e.process({"id": "orig", "text": base, "ts": 2})
        e.process({"id": "copy", "text": base, "ts": 3})
        assert e.verdict("orig").duplicate_of == "near" and e.verdict("orig").match == "near"
        # whole clusters: the copy's match is orig (exact), its cluster's original "near"
        copy = e.verdict("copy")
        assert (copy.duplicate_of, copy.via, copy.match) == ("near", "orig", "exact")


@pytest.mark.parametrize("raw,reason", [
    (b"{not json", "not_json"), (b"\xff\xfe", "bad_utf8"), (b"[1,2]", "not_object"),
    (b'{"text": "x"}', "missing_id"), (b'{"id": true, "text": "x"}', "bad_id"),
    (b'{"id": "a\\ud800", "text": "x"}', "bad_id"),
    (b'{"id": "a"}', "missing_text"), (b'{"id": "a", "text": 5}', "bad_text"),
    (b'{"id": "a", "text": "x", "ts": "yesterday"}', "bad_ts"), (b'{"id": "a", "text": " \\u200b "}', "empty_text"),
])
def test_bad_events_are_rejected_with_a_reason(raw, reason):
    with Engine(load_settings(environ={})) as e:
        with pytest.raises(Rejected) as exc:
            e.process(raw, default_ts=1)
        assert exc.value.reason == reason


def test_same_id_different_content_is_rejected_and_replay_is_harmless():
    with Engine(load_settings(environ={})) as e:
        first = e.process({"id": "a", "text": "今天天气很好，我们去公园散步吧", "ts": 1})
        assert e.process({"id": "a", "text": "今天天气很好，我们去公园散步吧", "ts": 1}) == []
        assert e.verdict("a").to_dict() == first[0].to_dict()
        with pytest.raises(Rejected) as exc:
            e.process({"id": "a", "text": "完全不同的内容", "ts": 1})
        assert exc.value.reason == "id_conflict"


def test_scan_reports_bad_lines_and_keeps_going(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    good = [json.dumps(ev, ensure_ascii=False) for ev in events()[:5]]
    src.write_text("\n".join(good[:2] + ["{oops", '{"id": 3}'] + good[2:]) + "\n", encoding="utf-8")
    out = tmp_path / "v.jsonl"
    summary = run_scan(load_settings(environ={}), str(src), str(out))
    assert summary.docs == 5 and summary.rejected == 2
    assert summary.reasons == {"not_json": 1, "missing_text": 1}
    err = capsys.readouterr().err
    assert "line 3: not_json" in err and "line 4: missing_text" in err
    assert len(out.read_text().splitlines()) == 5


def test_scan_with_few_documents_in_memory_writes_the_same_files(tmp_path):
    """``scan`` keeps its ids in order on a spool of ``engine.docs_in_memory`` at a time: the same
    verdicts, in the same order, and the same clusters as with all of them in memory."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(ev, ensure_ascii=False) + "\n" for ev in reversed(events())), encoding="utf-8")
    outs = []
    for env in ({}, {"STREAM_DEDUP_ENGINE__DOCS_IN_MEMORY": "2"}):
        out, clusters = tmp_path / f"v{len(env)}.jsonl", tmp_path / f"c{len(env)}.jsonl"
        summary = run_scan(load_settings(environ=env), str(src), str(out), clusters_path=str(clusters), quiet=True)
        outs.append((summary.docs, summary.revisions, out.read_bytes(), clusters.read_bytes()))
    assert outs[0][0] == 24 and outs[0][1] > 0 and outs[0][3]
    assert outs[1] == outs[0]


def test_eval_counts_by_cluster():
    verdicts = [{"id": "a", "verdict": "unique", "ts": 1}, {"id": "b", "verdict": "duplicate", "duplicate_of": "a", "ts": 2},
                {"id": "c", "verdict": "duplicate", "duplicate_of": "a", "ts": 3}, {"id": "d", "verdict": "unique", "ts": 4}]
    labels = [{"id": "a", "cluster": 1}, {"id": "b", "cluster": 1}, {"id": "c", "cluster": 2}, {"id": "d", "cluster": 2}]
    r = evaluate(verdicts, labels)
    # relevant: b (cluster 1) and d (cluster 2); predicted b (right) and c (wrong)
    assert (r.overall.tp, r.overall.predicted, r.overall.relevant) == (1, 2, 2)
    assert r.overall.precision == 0.5 and r.overall.recall == 0.5


def clusters_of(evs: list[dict]) -> dict[str, tuple]:
    with Engine(load_settings(environ={})) as e:
        for ev in evs:
            e.process(ev)
        return {c.id: (c.size, c.canonical, tuple(c.members)) for c in e.clusters()}


def test_clusters_count_copies_pick_the_highest_rank_and_follow_revisions():
    text = "全省外贸进出口总额同比增长百分之八点五，其中出口增长百分之十点二，进口增长百分之六点三，贸易结构持续优化。"
    copies = [{"id": f"copy-{i}", "text": text + "（转载）" * (i % 2), "ts": 2000 + i, "rank": r}
              for i, r in enumerate([1, 7, 3])]
    original = {"id": "orig", "text": text, "ts": 1000, "rank": 2}
    # the original arrives last: every copy was first a member of copy-0's cluster or its own, and
    # the revisions move them all under "orig"
    got = clusters_of(copies + [original])
    assert got == {"orig": (4, "copy-1", ("copy-0", "copy-1", "copy-2"))}
    assert clusters_of([original] + copies) == got
    rng = random.Random(3)
    for _ in range(10):
        evs = copies + [original]
        rng.shuffle(evs)
        assert clusters_of(evs) == got
    # without ranks the canonical page is the original
    plain = [{k: v for k, v in ev.items() if k != "rank"} for ev in copies + [original]]
    assert clusters_of(plain)["orig"][:2] == (4, "orig")


def test_sample_clusters_and_order_independence():
    evs = events()
    reference = clusters_of(evs)
    assert len(reference) >= 8 and all(size >= 2 for size, _, _ in reference.values())
    rng = random.Random(7)
    for _ in range(5):
        shuffled = evs[:]
        rng.shuffle(shuffled)
        assert clusters_of(shuffled) == reference


def test_the_last_cluster_record_is_right_whatever_order_the_original_and_its_members_arrive_in():
    """An original's decide messages and its members' joins come from different agents, so a join
    can be applied before the original's own "expect" (which carries its rank and text). The last
    record published for the original must still name the highest-ranked page (ties: the earliest),
    as scan does: CI once saw the record name the member because the original's rank came later."""
    import itertools

    from stream_dedup.core.stages import DecideStage
    from stream_dedup.core.wire import ToDecide
    from stream_dedup.core.verdict import Cluster

    own = [ToDecide("expect", "orig", 1000, None, expected=1, rank=5, snippet="全省外贸"),
           ToDecide("answer", "orig", 1000, None, part=3)]
    joins = [ToDecide("join", "orig", None, member=["low", 2000, 1]),
             ToDecide("join", "orig", None, member=["tie", 3000, 5])]
    # "gone" named the original, then was revised to another one: a join, later its leave
    gone = [ToDecide("join", "orig", None, member=["gone", 4000, 9]),
            ToDecide("leave", "orig", None, member=["gone", 4000, 9])]
    want = Cluster("orig", 3, "orig", ["low", "tie"], 1000, "全省外贸")
    orders = [list(o) for o in itertools.permutations(own + joins)]
    orders += [o[:i] + gone + o[i:] for o in orders[:] for i in range(len(o) + 1)]
    for order in orders:
        d = DecideStage()
        last = None
        for m in order:
            d.apply(m)
            last = d.cluster or last
        assert last == want, ([(m.kind, m.member) for m in order], last)
    assert len(orders) == 24 + 24 * 5


def test_decide_state_behind_a_write_back_re_emits_after_a_crash_before_the_flush():
    """The worker stores decide state only after the verdict is delivered (a WriteBack flushed after
    delivery): a crash in between replays into the old state and the verdict goes out again (never
    "already emitted, so never sent")."""
    from stream_dedup.core.stages import DecideStage, DocStates
    from stream_dedup.core.wire import ToDecide
    from stream_dedup.core.store import WriteBack

    table: dict = {}  # bytes in a table, as in the workers: every read is a fresh copy
    pending = WriteBack(DocStates(table))
    d = DecideStage(pending)
    expect = ToDecide("expect", "doc", 1000, None, expected=1)
    answer = ToDecide("answer", "doc", 1000, None, part=0)
    assert d.apply(expect) is None
    pending.flush()
    v = d.apply(answer)
    assert v is not None and v.verdict == "unique"
    assert DocStates(table)["doc"].emitted is None  # not stored yet: the verdict is in flight
    # crash here: the pending writes die with the process; the answer is replayed against the table
    pending2 = WriteBack(DocStates(table))
    d2 = DecideStage(pending2)
    again = d2.apply(answer)
    assert again is not None and (again.verdict, again.revision) == ("unique", 0)
    pending2.flush()
    assert DocStates(table)["doc"].emitted is not None
    assert d2.apply(answer) is None  # a replay after the flush changes nothing


def test_expire_walks_the_stores_only_when_an_entry_can_be_older_than_the_window(tmp_path, monkeypatch):
    """``Engine.expire`` (every EXPIRE_EVERY documents in ``scan``): a copy beyond the window is not
    matched once its original is swept; nothing is walked until an entry can be half a window past
    the window (so not while the events span less than the window); a kept --state folder is swept
    at its first expire (its oldest entries are unknown)."""
    monkeypatch.setattr(Engine, "EXPIRE_EVERY", 2)
    text = "全省外贸进出口总额同比增长百分之八点五，其中出口增长百分之十点二，进口增长百分之六点三，贸易结构持续优化。"
    walks: list[int] = []
    settings = load_settings(environ={"STREAM_DEDUP_ENGINE__WINDOW_MS": "1000"})

    def counting(e: Engine) -> Engine:
        sweep = e.index.index.sweep
        monkeypatch.setattr(e.index.index, "sweep", lambda before: walks.append(before) or sweep(before))
        return e

    with counting(Engine(settings, tmp_path / "kept")) as e:
        e.process({"id": "a", "text": text, "ts": 0})
        e.process({"id": "b", "text": text + "（转载）", "ts": 500})  # 2 documents: an expire, within the window
        assert walks == [] and e.verdict("b").duplicate_of == "a"
        e.process({"id": "x", "text": "另一条无关的新闻，今天的天气晴朗。", "ts": 1400})
        e.process({"id": "y", "text": "再一条无关的新闻，明天可能有雨。", "ts": 1600})  # cutoff 600: a and b go
        assert walks == [600]
        v = e.process({"id": "c", "text": text, "ts": 1700})
        assert [x.verdict for x in v] == ["unique"]  # its original left the window
        e.process({"id": "z", "text": "第三条无关的新闻，后天降温。", "ts": 1800})  # cutoff 800, floor 600
        assert walks == [600]  # entries at most 200 past the window: the next walk waits for half of one
        e.process({"id": "w", "text": "第四条无关的新闻，球队赢得了比赛。", "ts": 2000})
        e.process({"id": "v", "text": "第五条无关的新闻，新馆下月开放。", "ts": 2200})  # cutoff 1200, floor 600
        assert walks == [600, 1200]
    walks.clear()
    with counting(Engine(settings, tmp_path / "kept")) as e:  # the stores from disk: their ages unknown
        e.process({"id": "p", "text": "一条新的新闻，今天的会议讨论了预算。", "ts": 1900})
        e.process({"id": "q", "text": "又一条新的新闻，会议通过了决议。", "ts": 1950})
        assert walks == [950]


def campaign(n: int = 40) -> list[dict]:
    """An SMS campaign after the sample: exact copies and copies with a number added, in order."""
    base = "【某某银行】尊敬的客户，您的信用卡积分即将清零，请于本周内登录网上银行兑换礼品，详询客服热线。"
    start = max(ev["ts"] for ev in events())
    return [{"id": f"c{i}", "text": base + f"编号{i}" * (i % 3), "ts": start + 1000 + i} for i in range(n)]


def buckets(items: dict) -> list[list]:
    """The decoded entries of each bucket among an index store's keys and values."""
    from stream_dedup.core.index import unpack_entries

    return [unpack_entries(b) for k, b in items.items() if k[:1] == b"L"]


def test_an_insert_skips_looking_for_its_id_only_where_every_indexed_id_is_known(tmp_path):
    """A fresh run knows every id its buckets hold, so an id new to its id check is new to them and
    an insert does not look for an old entry of it (a campaign's buckets hold hundreds of entries):
    the stores end byte for byte as when every insert looks. Over a kept --state folder the buckets
    hold an earlier run's ids that the new run's id check has not seen: the same pages crawled again
    under the same ids, later, must replace their old entries, not add second ones."""
    settings = load_settings(environ={})
    evs = events() + campaign()

    skipped, v1 = run_and_read_index(settings, tmp_path / "skips", evs)
    looked, v2 = run_and_read_index(settings, tmp_path / "looks", evs, looks=True)
    assert skipped == looked and v1 == v2
    assert sum(len(b) > 20 for b in buckets(skipped))

    later = [{**ev, "ts": ev["ts"] + 10_000} for ev in evs]  # the same ids crawled again
    after, _ = run_and_read_index(settings, tmp_path / "skips", later)
    twice = [b for b in buckets(after) if len({e[1] for e in b}) < len(b)]
    assert not twice, f"{len(twice)} buckets hold an id twice"
    assert sum(map(len, buckets(after))) == sum(map(len, buckets(skipped)))


def test_max_bucket_bounds_every_bucket_and_a_campaign_still_finds_its_original(tmp_path):
    """``engine.max_bucket``: no bucket keeps more entries, and the copies past it, left out of
    their full buckets, still find the campaign's first message there (the earliest entries stay),
    so every verdict is the one of the default, larger buckets."""
    evs = events() + campaign()
    items, capped = run_and_read_index(load_settings(environ={"STREAM_DEDUP_ENGINE__MAX_BUCKET": "8"}),
                                       tmp_path / "capped", evs)
    default_items, default = run_and_read_index(load_settings(environ={}), tmp_path / "default", evs)
    assert max(map(len, buckets(default_items))) > 8 and max(map(len, buckets(items))) == 8
    assert capped == default
    assert {default[f"c{i}"]["duplicate_of"] for i in range(1, 40)} == {"c0"}
