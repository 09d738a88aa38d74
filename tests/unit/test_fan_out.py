"""Prepare fans a document out to the exact stage and the index at once (``stages.fan_out``).

What must hold: the exact stage counts the probes that prepare sent, an exact copy's verdict needs
no probe answer, messages of the version before (sketches to the exact stage) are still judged, and
the one change of meaning (a copy is now in the buckets) is the documented one."""

from stream_dedup.config import load_settings
from stream_dedup.core.engine import Engine
from stream_dedup.core.exact import ExactStore
from stream_dedup.core.stages import DecideStage, Preparer, exact_stage
from stream_dedup.core.wire import Prepared, ToDecide
from stream_dedup.core.routing import fan_out, route_probes
from stream_dedup.core.verdict import Candidate

SMS = "【顺丰速运】您的快件已到达小区驿站，请凭取件码8461于今日18点前领取，逾期将退回寄件人，详询95338。"
NEWS = ("国内一家新能源车企发布了新款纯电动轿车，官方公布的续航里程达到七百公里。"
        "该车搭载自主研发的电池管理系统，充电十五分钟可补充四百公里续航。")
PARTITIONS = 6


def prepared(preparer: Preparer, ident: str, text: str, ts: int) -> Prepared:
    return preparer.prepare({"id": ident, "text": text, "ts": ts})


def test_prepare_sends_the_probes_and_the_exact_stage_only_counts_them():
    prep = Preparer(load_settings(environ={}))
    store = ExactStore({}, 10_000)
    orig = prepared(prep, "a", SMS, 1)
    fingerprint, probes = fan_out(orig, PARTITIONS)
    assert probes == route_probes(orig, PARTITIONS) and len(probes) >= 2
    assert fingerprint.sketches == [] and fingerprint.probes == len(probes)
    assert (fingerprint.id, fingerprint.ts, fingerprint.digest, fingerprint.snippet) == \
        (orig.id, orig.ts, orig.digest, orig.snippet)
    assert Prepared.from_bytes(fingerprint.to_bytes()) == fingerprint
    assert Prepared.from_bytes(fingerprint._json()) == fingerprint
    # a fingerprint without sketches is a fraction of the document's bytes on the fingerprints topic
    assert len(fingerprint.to_bytes()) < 0.6 * len(orig.to_bytes())

    msgs = exact_stage(store, fingerprint)
    assert [(m.kind, m.cand, m.expected) for m in msgs] == [("expect", None, len(probes))]

    copy_fp, copy_probes = fan_out(prepared(prep, "b", SMS, 2), PARTITIONS)
    assert len(copy_probes) == len(probes)  # a copy is probed too
    msgs = exact_stage(store, copy_fp)
    assert msgs[0].expected == len(probes)
    assert (msgs[0].cand.match, msgs[0].cand.id) == ("exact", "a")


def test_an_exact_copy_is_decided_without_waiting_for_its_probe_answers():
    decide = DecideStage()
    exact = Candidate(1, "orig", "exact", "exact", 1.0, 0, -1)
    v = decide.apply(ToDecide("expect", "copy", 2, exact, expected=3))
    assert v is not None and (v.verdict, v.match, v.duplicate_of) == ("duplicate", "exact", "orig")
    near = Candidate(1, "orig", "near", "ngram", 1.0, 0, 0)
    for part in (0, 4, 5):  # its answers come later and change nothing
        assert decide.apply(ToDecide("answer", "copy", 2, near, part=part)) is None
    assert decide.states["copy"].revision == 0 and decide.states["copy"].complete
    # a document that is not a copy waits for every answer
    assert decide.apply(ToDecide("answer", "new", 3, None, part=1)) is None
    assert decide.apply(ToDecide("expect", "new", 3, None, expected=2)) is None
    assert not decide.states["new"].complete
    v = decide.apply(ToDecide("answer", "new", 3, near, part=2))
    assert v is not None and (v.verdict, v.duplicate_of) == ("duplicate", "orig")


def test_a_copy_in_the_window_is_matched_when_its_original_has_left_it():
    """The one change of meaning: a copy is in the buckets. A near duplicate more than a window
    after the original, but within one of the copy, matches the copy (when copies were not indexed
    it matched the later near duplicate, ``near-early``), and so joins the original's cluster; while
    the original is in the window, a near duplicate matches the original."""
    edited = NEWS.replace("七百", "六百")
    with Engine(load_settings(environ={"STREAM_DEDUP_ENGINE__WINDOW_MS": "1000"})) as e:
        e.process({"id": "orig", "text": NEWS, "ts": 0})
        e.process({"id": "copy", "text": NEWS, "ts": 600})
        e.process({"id": "near-early", "text": edited, "ts": 900})
        e.process({"id": "near-late", "text": edited + "记者", "ts": 1500})
        assert (e.verdict("copy").match, e.verdict("copy").duplicate_of) == ("exact", "orig")
        assert (e.verdict("near-early").match, e.verdict("near-early").duplicate_of) == ("near", "orig")
        late = e.verdict("near-late")
        # it matched the copy; its cluster's original is the copy's, orig (whole clusters)
        assert (late.verdict, late.via, late.duplicate_of) == ("duplicate", "copy", "orig"), late
