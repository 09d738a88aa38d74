"""An original's cluster record, kept up to date join by join, against the rule computed afresh."""
import random

import pytest

from stream_dedup.core.verdict import MAX_MEMBERS, SAMPLE, Candidate, Cluster, DocState


def afresh(st: DocState) -> Cluster:
    """The rule as written before ``join`` and ``leave`` kept it: every member looked at each time."""
    everyone = dict(st.members)
    if st.ts is not None:
        everyone[st.id] = [st.ts, st.rank]
    canonical = min(everyone, key=lambda i: (-(everyone[i][1] if everyone[i][1] is not None else float("-inf")),
                                             everyone[i][0], i)) if everyone else st.id
    sample = sorted(st.members, key=lambda i: (st.members[i][0], i))[:SAMPLE]
    return Cluster(st.id, 1 + len(st.members) + st.extra, canonical, sample, st.ts, st.snippet)


@pytest.mark.parametrize("seed", range(6))
def test_joins_and_leaves_keep_the_cluster_record_the_rule_gives(seed):
    """Random joins (some replayed, some past MAX_MEMBERS), leaves (often of the canonical page or of
    a sampled member), ranks with ties, and the state read back from its wire form in between."""
    rng = random.Random(seed)
    st = DocState("orig", ts=rng.choice([None, 500]), rank=rng.choice([None, 2.0]))
    joined: list[str] = []
    full = canonical_left = 0  # how often the cases that need care came up
    for step in range(1500):
        r = rng.random()
        if r < 0.75 or not joined:
            mid = f"m{rng.randrange(1000)}"
            rank = rng.choice([None, None, 1.0, 2.0, 3.0])
            st.join(mid, rng.randrange(400, 600), rank)
            joined.append(mid)
        elif r < 0.88:  # the canonical page or a sampled member leaves: what the kept summary must notice
            cur = st.cluster()
            gone = rng.choice([cur.canonical, *cur.members] if cur.members else joined)
            canonical_left += gone == cur.canonical != st.id and gone in st.members
            st.leave(gone)
        elif r < 0.97:
            st.leave(rng.choice(joined))
        else:
            st = DocState.from_wire(st.to_wire())  # a state read back knows nothing of its summary
        if step % 7 == 0 and st.ts is None:
            st.ts, st.rank = 450, rng.choice([None, 2.0])
        assert st.cluster() == afresh(st), f"step {step}"
        full += st.extra > 0
    assert full and canonical_left


def test_a_campaign_past_the_member_limit_is_counted_and_its_sample_stays_the_earliest():
    st = DocState("orig", ts=0)
    for i in range(MAX_MEMBERS + 50):
        st.join(f"c{i:04d}", 1000 - i, None)  # each copy earlier than the last (arrival order is not ts order)
    c = st.cluster()
    assert c.size == 1 + MAX_MEMBERS + 50 and c.canonical == "orig"
    assert c.members == [f"c{i:04d}" for i in range(MAX_MEMBERS - 1, MAX_MEMBERS - 1 - SAMPLE, -1)]
    st.leave("c9999")  # not kept: one of the 50 counted only
    assert st.cluster().size == MAX_MEMBERS + 50
    st.leave(c.members[0])
    assert st.cluster() == afresh(st) and st.cluster().members[0] == c.members[1]


def test_a_first_verdict_reports_its_page_record_time_once_and_the_time_crosses_the_wire():
    """The workers' verdict latency: the page record's timestamp rides prepare -> exact -> decide and
    leaves the decide state with the document's first verdict (revisions are not measured)."""
    from stream_dedup.core.stages import DecideStage, exact_stage
    from stream_dedup.core.exact import ExactStore
    from stream_dedup.core.routing import fan_out
    from stream_dedup.core.wire import Prepared, ToDecide

    p = Prepared("a", 1000, b"d" * 16, "text", [], None, "样本", None, seen=1_780_000_000_123)
    fp, _ = fan_out(p, 4)
    assert Prepared.from_item(fp.to_bytes()).seen == p.seen
    (expect,) = exact_stage(ExactStore({}, window=10**9), fp)
    assert ToDecide.from_item(expect.to_bytes()).seen == p.seen
    stage = DecideStage()
    expect.expected = 1
    assert stage.apply(expect) is None and stage.first_seen is None  # its answer is still out
    assert DocState.from_wire(stage.states["a"].to_wire()).seen == p.seen
    assert DocState.from_json(stage.states["a"].to_json()).seen == p.seen
    v = stage.apply(ToDecide("answer", "a", 1000, None, part=0))
    assert v is not None and v.revision == 0 and stage.first_seen == p.seen
    assert stage.states["a"].seen is None  # not kept once measured


def test_a_cluster_shows_the_start_of_its_original_as_sent():
    from stream_dedup.config import Settings
    from stream_dedup.core.engine import Engine

    text = "【某银行】尊敬的客户：您的信用卡额度已提升至５００００元，详询ＡＢＣ客服。"
    with Engine(Settings()) as e:
        e.process({"id": "a", "text": text, "ts": 1})
        e.process({"id": "b", "text": text, "ts": 2})
        (c,) = e.clusters()
    assert c.text == text and "，" in c.text and "５" in c.text  # not the normalized "," and "5"


def test_a_note_crosses_every_hop_and_the_exact_store_never_holds_the_noted_page():
    """A page without article text: its note rides prepare -> exact -> decide (MessagePack and JSON,
    and the stored state) into a unique verdict; the exact store never learns its digest, so a later
    page of the same text is not its copy."""
    from stream_dedup.core.exact import ExactStore
    from stream_dedup.core.routing import fan_out
    from stream_dedup.core.stages import DecideStage, exact_stage
    from stream_dedup.core.wire import Prepared, ToDecide

    store = ExactStore({}, window=10**9)
    p = Prepared("a", 1000, b"d" * 16, "html", [], None, "首页 新闻", None, note="no_article_text")
    fp, probes = fan_out(p, 4)
    assert probes == [] and fp.probes == 0
    for wire in (fp.to_bytes(), fp._json()):
        assert Prepared.from_item(wire).note == "no_article_text"
    (expect,) = exact_stage(store, fp)
    assert ToDecide.from_item(expect.to_bytes()).note == ToDecide.from_item(expect._json()).note == "no_article_text"
    stage = DecideStage()
    v = stage.apply(ToDecide.from_item(expect.to_bytes()))
    assert v is not None and v.verdict == "unique" and v.to_dict()["note"] == "no_article_text"
    st = stage.states["a"]
    assert DocState.from_wire(st.to_wire()).note == DocState.from_json(st.to_json()).note == "no_article_text"
    later, _ = fan_out(Prepared("b", 2000, b"d" * 16, "html", [], None, "首页 新闻", None), 4)
    (expect_b,) = exact_stage(store, later)
    assert expect_b.cand is None  # the noted page is nobody's original


@pytest.mark.parametrize("state", [
    DocState("u", 5, 0, note="no_article_text"),
    DocState("u", 5, 0),
    DocState("d", 9, 1, {0}, near=Candidate(3, "m", "near", "ngram", 0.8, None, 2)),
    DocState("d", 9, 1, {0}, exact=Candidate(3, "m", "exact"), root=[1, "o"]),
])
def test_step_compares_the_key_the_verdict_it_builds_has(state):
    """``step`` decides on ``_key`` before it builds a verdict: the two must say the same."""
    v = state.step()
    assert v is not None and v.key() == state.emitted and v.revision == 0
    assert state.step() is None and state.verdict().key() == state.emitted


@pytest.mark.parametrize("exact", [False, True])
def test_an_expect_taken_in_with_its_answers_decides_as_the_messages_one_by_one(exact):
    """``Engine.judge`` hands decide a document's expect and its answers in one step: the verdict, the
    messages out and the stored state must be those of the messages applied one after the other."""
    from stream_dedup.core.stages import DecideStage
    from stream_dedup.core.wire import ToDecide

    orig = Candidate(1, "a", "exact", "exact", 1.0, 0, -1) if exact else None
    near = [Candidate(2, "b", "near", "ngram", 0.9, None, 2), Candidate(3, "c", "near", "minhash", 0.95, None, 1)]
    expect = ToDecide("expect", "d", 10, orig, expected=2, rank=None, snippet="x")
    answers = [ToDecide("answer", "d", 10, c, part=i) for i, c in enumerate(near)]
    apart, fused = DecideStage(), DecideStage()
    outs, verdicts = [], []
    for m in [expect, *answers]:
        verdicts.append(apart.apply(m))
        outs += apart.outbox
    (v,) = [v for v in verdicts if v is not None]  # one verdict: an exact copy's at its expect
    assert v.duplicate_of == ("a" if exact else "b")
    assert fused.apply(expect, answers) == v and fused.outbox == outs
    assert fused.states["d"].to_json() == apart.states["d"].to_json()
    with pytest.raises(ValueError):
        DecideStage().apply(expect, [ToDecide("answer", "e", 10, near[0], part=0)])
