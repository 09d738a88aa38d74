"""Commits that never pass an unprocessed offset (``stream/commits.py``), on Faust's consumer
bookkeeping (its private ``_acked``, ``_gap`` and ``_committed_offset``, as faust-streaming 0.15 keeps them)."""
from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace

from faust.transport.consumer import Consumer
from faust.types import TP
from intervaltree import IntervalTree

from stream_dedup.stream.commits import (HoleWatch, commit_base, forget, head_hole, mark_processed, open_span, runs,
                                         strict_new_offset)

TP3 = TP("probes", 3)
FAUST = getattr(Consumer._new_offset, "original", Consumer._new_offset)  # Faust's own rule
STRICT = strict_new_offset(FAUST)


def consumer(committed: int | None, in_transaction: bool = False) -> SimpleNamespace:
    return SimpleNamespace(_acked=defaultdict(list), _acked_index=defaultdict(set), _gap=defaultdict(IntervalTree),
                           _committed_offset=defaultdict(lambda: None, {TP3: committed}),
                           in_transaction=in_transaction)


def ack(c: SimpleNamespace, *offsets: int) -> None:
    for o in offsets:
        c._acked[TP3].append(o)
        c._acked_index[TP3].add(o)


def test_faust_commits_past_offsets_no_event_acked_and_the_strict_rule_does_not():
    """The loss: with nothing committed yet (kept as None), Faust commits the first run of acked
    offsets wherever it begins; later, one missing offset at the committed position passes too."""
    for committed, skipped, processed in [(None, range(0, 4), (4, 5)), (10, range(10, 11), (11, 12))]:
        faust, strict = consumer(committed), consumer(committed)
        ack(faust, *processed)
        ack(strict, *processed)
        assert FAUST(faust, TP3) == processed[-1] + 1, "Faust's rule changed: review stream/commits.py"
        assert STRICT(strict, TP3) is None, f"committed past {list(skipped)}"
        # once the skipped offsets are processed (re-read and acked), the commit moves past all of them
        ack(strict, *skipped)
        assert STRICT(strict, TP3) == processed[-1] + 1


def test_offsets_the_gap_filler_processed_let_the_commit_pass_once_a_later_offset_is_acked():
    """Offsets the gap filler re-read and processed are marked (``mark_processed``), the committed
    position itself included, which Faust's own ``_add_gap`` leaves out (it starts at committed + 1)."""
    via_faust = consumer(committed=2)
    asyncio.run(Consumer._add_gap(via_faust, TP3, 2, 5))
    ack(via_faust, 6, 7, 8)
    assert STRICT(via_faust, TP3) is None  # offset 2 was never marked

    c = consumer(committed=2)
    mark_processed(c, TP3, 2, 5)
    assert STRICT(c, TP3) is None  # nothing acked after the gap yet: no commit
    ack(c, 6, 7, 8)
    assert STRICT(c, TP3) == 9
    assert not c._acked[TP3] and not c._acked_index[TP3] and not c._gap[TP3]


def test_the_strict_rule_drops_acks_below_the_committed_offset_and_keeps_what_follows_a_hole():
    c = consumer(committed=20)
    ack(c, 12, 13, 20, 21, 21, 22, 25, 26)  # 12-13: acked after another owner committed 20
    assert STRICT(c, TP3) == 23
    assert c._acked[TP3] == [25, 26] and c._acked_index[TP3] == {25, 26}
    c._committed_offset[TP3] = 23
    assert STRICT(c, TP3) is None  # 23-24 never processed
    ack(c, 23, 24)
    assert STRICT(c, TP3) == 27


def test_under_a_transaction_a_marker_holds_the_commit_until_read_as_no_record():
    """Exactly once: a transaction marker occupies an offset no event acks. Faust's rule commits
    past one missing offset, which may as well be a message the stream skipped; here it holds the
    commit until the hole is read (``BatchSource.read_hole``) and found to hold no record."""
    c = consumer(committed=10, in_transaction=True)
    ack(c, 11, 12)
    assert STRICT(c, TP3) is None
    assert head_hole(commit_base(c, TP3), c._acked[TP3], []) == (10, 11)
    mark_processed(c, TP3, 10, 10)  # read committed: nothing at offset 10
    assert STRICT(c, TP3) == 13


def test_head_hole_is_what_holds_the_commit_back():
    assert head_hole(10, [], []) is None
    assert head_hole(10, [3, 4], []) is None  # only below the committed offset
    assert head_hole(10, [10, 11, 15], []) is None
    assert head_hole(10, [15, 16], []) == (10, 15)
    assert head_hole(10, [15, 16], [(10, 12)]) == (12, 15)
    assert head_hole(10, [15, 16], [(8, 11), (11, 15)]) is None
    assert runs([3, 4, 5, 8, 10, 11]) == [(3, 5), (8, 8), (10, 11)]


def test_open_span_holds_every_hole_up_to_the_highest_acked_offset():
    """Exactly-once: commit markers at 12 and 15, records 17..19 skipped; one read of 12..21 finds
    them all, where the head hole (12, 13) alone would leave the commit at 13 until the next check."""
    acked = [10, 11, 13, 14, 16, 20, 21]
    assert head_hole(10, acked, []) is None  # 10..11 commit first; the head hole shows after that
    assert open_span(10, acked, []) == (12, 21)
    acked = acked[2:]  # 10 and 11 committed
    assert head_hole(12, acked, []) == (12, 13)
    assert open_span(12, acked, []) == (12, 21)
    assert open_span(12, acked, [(12, 13)]) == (15, 21)
    assert open_span(12, [], []) is None and open_span(12, [3], []) is None


def test_hole_watch_asks_for_a_re_read_only_of_a_hole_that_lasts_and_is_not_in_hand():
    w = HoleWatch(checks=3, retry_after=2)
    key = ("probes", 3)
    assert w.check({key: (10, 15)}, {}) == []
    assert w.check({key: (10, 15)}, {}) == []
    assert w.check({key: (10, 15)}, {}) == [(key, 10, 15)]
    assert w.check({key: (10, 15)}, {}) == []  # a re-read on its way
    assert w.check({key: (10, 15)}, {}) == [(key, 10, 15)]  # still there: ask again
    w.reset()
    # a batch in hand that holds offsets of the hole: they are being processed
    for _ in range(5):
        assert w.check({key: (10, 15)}, {key: 12}) == []
    # a changed hole (the commit moved on) starts its count again; a closed one is forgotten
    assert w.check({key: (10, 15)}, {key: 30}) == []
    assert w.check({key: (11, 15)}, {}) == []
    assert w.check({key: None}, {}) == []
    assert w.seen == {}


def test_a_commit_in_flight_is_no_hole():
    """Faust takes a commit's offsets out of ``_acked`` before its producer flush, which waits out a
    broker outage, and moves ``_committed_offset`` only after it: meanwhile, offsets acked later
    must not make the offsets being committed look never processed."""
    c = consumer(committed=1)
    ack(c, 1, 2)
    assert STRICT(c, TP3) == 3  # the commit to 3 starts; the broker is away
    ack(c, 3, 4)
    assert head_hole(c._committed_offset[TP3] or 0, c._acked[TP3], []) == (1, 3)  # the false alarm
    assert commit_base(c, TP3) == 3
    assert head_hole(commit_base(c, TP3), c._acked[TP3], []) is None
    assert STRICT(c, TP3) is None  # the next commit waits for this one (offset 3 is not the committed 1)
    c._committed_offset[TP3] = 3  # the commit is done
    assert commit_base(c, TP3) == 3 and STRICT(c, TP3) == 5
    # a partition revoked mid-commit: Faust discards that commit, and the next owner starts from the broker's
    forget(c, [TP3])
    c._committed_offset[TP3] = None
    assert commit_base(c, TP3) == 0
    ack(c, 2)
    assert head_hole(commit_base(c, TP3), c._acked[TP3], []) == (0, 2)


def test_a_fetch_jump_holds_the_commit_on_every_topic_and_is_logged_on_internal_ones(caplog):
    """Faust takes the offsets a fetch jumped over, and the offset it jumped to, as processed: with the
    offsets before the jump acked, its commit passed records no agent had seen, and a rebalance
    before the agent saw the jump lost them (a fault run: 243 -> 402 on the input topic, 158
    offsets committed unread). ``held_add_gap`` marks nothing, so the strict commit stops at the
    jump on the input topic as on the internal ones, where a jump outside a transaction is always
    a skip and is logged."""
    from stream_dedup.stream.commits import held_add_gap

    add_gap = held_add_gap(getattr(Consumer._add_gap, "original", Consumer._add_gap))
    pages = TP("pages", 0)
    for tp in (pages, TP3):
        c = consumer(committed=222)
        c._committed_offset[pages] = 222
        c.app = SimpleNamespace(stream_dedup_held_topics={"probes", "answers"})
        for o in range(222, 244):
            c._acked[tp].append(o)
            c._acked_index[tp].add(o)
        caplog.clear()
        with caplog.at_level("WARNING", logger="stream_dedup.worker"):
            asyncio.run(add_gap(c, tp, 244, 402))
        assert not c._gap[tp]
        assert STRICT(c, tp) == 244, f"{tp.topic}: committed past offsets no agent processed"
        assert ("the fetcher went past offsets 244..401 unread" in caplog.text) == (tp is TP3)
        c.in_transaction = True  # exactly once: a jump is markers or a skip, told apart by reading them
        caplog.clear()
        with caplog.at_level("WARNING", logger="stream_dedup.worker"):
            asyncio.run(add_gap(c, tp, 410, 411))
        assert not c._gap[tp] and not caplog.text


def test_a_message_delivered_again_after_its_batch_was_acked_is_not_worked_on_twice():
    """After an assignment the seek to the committed offsets can deliver the last message read once
    more: its offset is acked (its batch was done), so ``unprocessed`` drops it; the offsets after
    it, another partition's, and all of a partition Faust forgot (revoked) are kept."""
    from stream_dedup.stream.batch_source import unprocessed
    from stream_dedup.stream.gaps import Msg

    c = consumer(committed=4)
    ack(c, 4, 5)
    batch = [(None, Msg("probes", 3, o, None, b"{}", None)) for o in (5, 6)]
    assert [m.offset for _, m in unprocessed(batch, c._acked_index)] == [6]
    other = [(None, Msg("probes", 2, 5, None, b"{}", None))]
    assert unprocessed(other, c._acked_index) == other
    assert STRICT(c, TP3) == 6  # committed: Faust forgets the acked offsets below
    c._acked_index.pop(TP3)  # as on_partitions_revoked does
    assert unprocessed(batch, c._acked_index) == batch


def test_a_partition_whose_committed_offset_the_consumer_lost_is_found():
    """``unknown_bases``: no committed offset known (Faust keeps a committed 0 as None too) while the
    offsets processed here begin above 0; a partition processed from its start, one with a known
    offset, and one with nothing processed are left alone."""
    from stream_dedup.stream.commits import unknown_bases

    lost, fresh, known, idle = TP("pages", 0), TP("pages", 1), TP("pages", 2), TP("pages", 3)
    c = consumer(committed=None)
    c._committed_offset.update({lost: None, fresh: None, known: 40, idle: None})
    for tp, offsets in ((lost, (57, 58)), (fresh, (0, 1)), (known, (41,))):
        c._acked[tp].extend(offsets)
    assert unknown_bases(c, [lost, fresh, known, idle]) == [lost]
    assert head_hole(commit_base(c, lost), c._acked[lost], []) == (0, 57)  # what the hole watch would read
