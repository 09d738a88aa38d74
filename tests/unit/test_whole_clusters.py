"""Whole clusters: a duplicate names its cluster's original through a chain of matches, in any order."""
from itertools import permutations

from stream_dedup.config import Settings
from stream_dedup.core.engine import Engine

# Real campaign texts: B is A with C appended, so B matches both, and A and C share nothing.
A = "尊敬的客户您好，本店周年庆全场商品五折起，会员再享九折，活动时间本周六至周日"
C = "恭喜您获得本期幸运大奖，奖金五万元，请点击链接领取并填写银行卡信息，逾期作废"
B = A + C


def judge(events: list[dict]) -> tuple[dict, dict]:
    """(id -> (verdict, duplicate_of, via, revision)), (original -> cluster size)."""
    with Engine(Settings()) as engine:
        for e in events:
            engine.process(e)
        verdicts = {v.id: (v.verdict, v.duplicate_of, v.via, v.revision) for v in engine.verdicts()}
        return verdicts, {c.id: c.size for c in engine.clusters()}


def in_every_order(events: list[dict], sizes: dict) -> set[tuple]:
    """The (id, (verdict, duplicate_of, via)) sets of every arrival order of ``events``, each of
    which must give these cluster ``sizes``."""
    seen = set()
    for order in permutations(events):
        verdicts, got = judge(list(order))
        seen.add(tuple((i, v[:3]) for i, v in sorted(verdicts.items())))
        assert got == sizes, (order, got)
    return seen


def test_a_chain_is_one_cluster_named_by_its_earliest_member_in_every_order():
    events = [{"id": "a", "text": A, "ts": 1}, {"id": "b", "text": B, "ts": 2}, {"id": "c", "text": C, "ts": 3}]
    assert in_every_order(events, {"a": 3}) == {
        (("a", ("unique", None, None)), ("b", ("duplicate", "a", None)), ("c", ("duplicate", "a", "b")))}


def test_a_late_document_that_bridges_two_clusters_merges_them_and_revises_their_verdicts():
    copies = [{"id": "a", "text": A, "ts": 10}, {"id": "a2", "text": A + "，回T退订", "ts": 11},
              {"id": "c", "text": C, "ts": 20}, {"id": "c2", "text": "【幸运抽奖】" + C, "ts": 21}]
    before, sizes = judge(copies)
    assert sizes == {"a": 2, "c": 2}
    bridge = {"id": "bridge", "text": B, "ts": 5}  # earlier than both, arriving last
    after, sizes = judge(copies + [bridge])
    assert sizes == {"bridge": 5}
    assert {i: v[1] for i, v in after.items() if v[0] == "duplicate"} == {i: "bridge" for i in ("a", "a2", "c", "c2")}
    assert all(after[i][3] > before[i][3] for i in ("a", "a2", "c", "c2"))  # revised
    in_time, _ = judge(sorted(copies + [bridge], key=lambda e: e["ts"]))
    assert {i: v[:3] for i, v in in_time.items()} == {i: v[:3] for i, v in after.items()}


def test_a_later_document_that_matches_two_unrelated_ones_joins_them_in_every_order():
    """A ≈ B and B ≈ C with A ≉ C, B the latest: one cluster of three named by A. C matched nothing
    earlier, so it is a duplicate of A through its later match (no direct match to describe)."""
    events = [{"id": "a", "text": A, "ts": 1}, {"id": "c", "text": C, "ts": 2}, {"id": "b", "text": B, "ts": 3}]
    assert in_every_order(events, {"a": 3}) == {
        (("a", ("unique", None, None)), ("b", ("duplicate", "a", None)), ("c", ("duplicate", "a", None)))}
    with Engine(Settings()) as engine:
        for e in events:
            engine.process(e)
        c = next(v for v in engine.verdicts() if v.id == "c")
    assert (c.match, c.detector, c.similarity, c.revision) == ("near", None, None, 1)  # unique at first, then revised


def test_a_later_bridge_merges_two_clusters_and_revises_the_later_ones_verdicts():
    copies = [{"id": "a", "text": A, "ts": 10}, {"id": "a2", "text": A + "，回T退订", "ts": 11},
              {"id": "c", "text": C, "ts": 20}, {"id": "c2", "text": "【幸运抽奖】" + C, "ts": 21}]
    before, _ = judge(copies)
    bridge = {"id": "bridge", "text": B, "ts": 30}  # later than both
    for events in (copies + [bridge], [bridge] + copies):
        after, sizes = judge(events)
        assert sizes == {"a": 5}, sizes
        assert {i: v[1] for i, v in after.items() if v[0] == "duplicate"} == {i: "a" for i in ("a2", "c", "c2", "bridge")}
        assert {i: v[2] for i, v in after.items()} == {"a": None, "a2": None, "c": None, "c2": "c", "bridge": None}
    after, _ = judge(copies + [bridge])
    assert after["c"][3] > before["c"][3] and after["c2"][3] > before["c2"][3]  # revised
    assert after["a2"][3] == before["a2"][3]  # not changed
