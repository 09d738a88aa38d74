"""The state code over real RocksDB files: bucket index and exact digest store."""
import os

import pytest

from stream_dedup.core.detectors.base import Match
from stream_dedup.core.exact import ExactStore
from stream_dedup.core.index import INLINE_MAX, LABEL, BucketIndex, pack_entries, unpack_entries
from stream_dedup.core.store import KVStore

W = 1_000_000


def same(a: bytes, b: bytes):
    return Match(1.0, 0) if a == b else None


def test_packed_entries_round_trip():
    from stream_dedup.core.index import all_before, iter_entries, pack_entry

    e = [(-5, "a", b""), (0, "文档", b"xyz"), (2**40, "b" * 300, bytes(64))]
    assert unpack_entries(pack_entries(e)) == list(iter_entries(pack_entries(e))) == e
    # whether every entry is earlier, from the last one: by ts, then by id
    packed = pack_entries(e)
    assert all_before(packed, (2**40 + 1, "")) and all_before(packed, (2**40, "b" * 301))
    assert not all_before(packed, (2**40, "b" * 300)) and not all_before(packed, (2**40 - 1, "z"))
    assert all_before(pack_entries(e[:2]), (0, "文档x")) and not all_before(pack_entries(e[:2]), (0, "文"))
    # one entry has no header; a bucket written before the header existed reads the same, and the
    # shortcut that needs the header says no
    assert pack_entries(e[:1]) == pack_entry(e[0]) and not all_before(pack_entry(e[0]), (2**50, ""))
    legacy = b"".join(pack_entry(x) for x in e)
    assert unpack_entries(legacy) == e and not all_before(legacy, (2**50, ""))
    assert packed[:1] == b"\x80"
    assert all(pack_entry(x)[:1] != b"\x80" for x in [(-(2**62), "a", b""), (2**62, "a", b""), (-1, "a", b"")])


def test_an_entry_labelled_with_its_own_id_hash_leaves_the_label_out_and_reads_back_whole():
    """Most entries are their cluster's first (label = their id's hash): stored 4 bytes shorter,
    decoded with it, and a probe reads the same labels and payloads from either form."""
    from stream_dedup.core.index import _BUCKET_HEAD, _HEAD, OWN, iter_entries, label_of, pack_entry

    own = [(1, "短信-1", label_of("短信-1") + b"payload"), (2, "b", label_of("b"))]
    other = [(3, "c", label_of("a") + b"payload")]
    for e in own:
        assert len(pack_entry(e)) == len(pack_entry((e[0], e[1], b"\0" * LABEL + e[2][LABEL:]))) - LABEL
        assert _HEAD.unpack_from(pack_entry(e))[2] & OWN
    assert not _HEAD.unpack_from(pack_entry(other[0]))[2] & OWN
    assert unpack_entries(pack_entries(own + other)) == list(iter_entries(pack_entries(own + other))) == own + other

    def index_with(entries_form: str) -> BucketIndex:
        idx = BucketIndex({}, window=W)
        for i, ident in enumerate(["a", "b", "c", "d"]):
            idx.insert(1, ident, i, b"s" + ident.encode(), [7, 8], label=label_of("a") if ident != "b" else None)
        if entries_form == "explicit":  # as written before labels could be left out
            for k, v in list(idx.data.items()):
                parts = [_HEAD.pack(ts, len(i.encode()), len(p)) + i.encode() + p for ts, i, p in unpack_entries(v)]
                head = _BUCKET_HEAD.pack(b"\x80", len(parts), sum(map(len, parts[:-1]))) if len(parts) > 1 else b""
                idx.data[k] = head + b"".join(parts)
        return idx

    compact, explicit = index_with("compact"), index_with("explicit")
    assert sum(map(len, compact.data.values())) < sum(map(len, explicit.data.values()))
    for idx in (compact, explicit):
        res = idx.probe(1, "e", 10, b"se", [7, 8], lambda x, y: Match(1.0, 0) if x[:1] == y[:1] else None)
        assert (res.earliest.id, res.label, [f.id for f in res.bridges]) == ("a", label_of("a"), ["b"])


def test_merge_entry_appends_in_place_exactly_as_the_full_merge_would(monkeypatch):
    """The append and splice shortcuts must give the same bytes as filter + sort + cap, or replays diverge."""
    import random

    from stream_dedup.core import index as index_mod
    from stream_dedup.core.index import merge_entry, pack_entry

    spliced = []
    real_insert_at = index_mod._insert_at
    monkeypatch.setattr(index_mod, "_insert_at", lambda *a: spliced.append(real_insert_at(*a)) or spliced[-1])

    def full(raw: bytes | None, entry, cutoff: int, cap: int) -> bytes:
        es = [e for e in unpack_entries(raw) if e[0] >= cutoff and e[1] != entry[1]] if raw else []
        return pack_entries(sorted(es + [entry], key=lambda e: (e[0], e[1]))[:cap])

    rng = random.Random(3)
    appended = kept = 0
    for _ in range(3000):
        raw = None
        cutoff, cap = rng.randrange(0, 50), rng.choice([3, 5, 1000])
        for _ in range(rng.randrange(1, 8)):
            e = (rng.randrange(0, 100), rng.choice("abcdefg"), rng.choice([b"", b"p", b"xyz"]))
            got = merge_entry(raw, e, cutoff, cap)
            assert got == full(raw, e, cutoff, cap), (raw, e, cutoff, cap)
            appended += raw is not None and raw[:1] == b"\x80" and got[9:] == raw[9:] + pack_entry(e)
            kept += got is raw  # a full bucket, the newest entry: kept as it is
            raw = got
    assert appended > 400 and kept > 50  # the shortcuts were taken often enough to be tested
    within = sum(1 for at in spliced if at is not None)
    assert within > 300 and len(spliced) - within > 50  # spliced in; and an entry of the id found


def test_an_insert_looks_for_its_id_only_in_a_bucket_that_holds_it_though_ids_are_prefixes_of_others(monkeypatch):
    """Ids that number documents are prefixes of one another ("t0-r1" of "t0-r10"): the look for
    an id's old entry (``holds_id``) must not take one for the other, or every insert of a
    campaign's copy decodes its whole bucket; and never miss one that is there, or a replay adds
    its entry twice. Where a payload's bytes look like an entry of the id, the look is made and the
    bytes are still those of the full merge."""
    import random

    from stream_dedup.core import index as index_mod
    from stream_dedup.core.index import holds_id, merge_entry

    looked = []
    real_insert_at = index_mod._insert_at
    monkeypatch.setattr(index_mod, "_insert_at", lambda raw, ts, ident, look: looked.append(look) or
                        real_insert_at(raw, ts, ident, look))
    ids = ["t0-r1", "t0-r10", "t0-r11", "t0-r100", "t0-r19", "r1", "1", "t1-r1", "t0-r1\u4e00"]
    sneaky = b"\x00\x05\x00\x00t0-r1"  # the bytes of an entry of "t0-r1" inside a payload
    rng = random.Random(5)
    exact = 0
    for _ in range(2000):
        raw, held = None, set()
        for _ in range(rng.randrange(1, 12)):
            e = (rng.randrange(0, 30), rng.choice(ids), rng.choice([b"", b"p", b"t0-r1", sneaky]))
            got = merge_entry(raw, e, 0, 1000)
            want = pack_entries(sorted([x for x in (unpack_entries(raw) if raw else []) if x[1] != e[1]] + [e],
                                       key=lambda x: (x[0], x[1])))
            assert got == want, (raw, e)
            raw = got
            held = {x[1] for x in unpack_entries(raw)}
            for ident in ids:
                ib = ident.encode()
                there = holds_id(raw, ib)
                assert there or ident not in held  # never missed
                if ident not in held and there:  # only where a payload's bytes hold the id's
                    assert any(ib in x[2] for x in unpack_entries(raw)), (raw, ident)
                if all(x[2] in (b"", b"p") for x in unpack_entries(raw)):
                    exact += 1
                    assert there == (ident in held), (raw, ident)
    assert looked.count(False) > 2000 and looked.count(True) > 500 and exact > 10000
    bucket = pack_entries([(1, f"t0-r{i}", b"") for i in range(10, 200)])
    assert not holds_id(bucket, b"t0-r1") and holds_id(bucket, b"t0-r100") and not holds_id(bucket, b"t0-r10000")


def test_the_shortcuts_for_a_stream_in_time_order_answer_and_store_what_decoding_every_bucket_does(monkeypatch):
    """A probe or an exact check newer than every entry of a bucket decodes it only up to its first
    match, and an insert reads the header, not the entries. Both must answer and write exactly what
    decoding the whole bucket does: the same stream, the same answers, the same bytes, with the
    shortcuts and without them (every bucket read without its header, so decoded whole, and
    merged by decoding, sorting and packing). So must the walks for a document that is not the
    newest in its bucket (a late arrival, or one that shares its millisecond: the probe reads the
    entries' heads, the insert splices its entry in), and every probe of every run must answer
    what a brute-force look at all its buckets' entries does. The
    stream is mostly in time order, with late arrivals, revisions (an id again, later), replays, long
    buckets over a small cap and a window that expires entries. The third run starts over buckets
    rewritten without headers, as stored before the header existed: the same answers. The fourth
    tells each insert whether its id is new to the stream (``new_id``, as ``scan`` does): the same
    answers and bytes, though those inserts no longer look for the id in their buckets."""
    import random

    from stream_dedup.core import exact as exact_mod
    from stream_dedup.core import index as index_mod

    rng = random.Random(11)
    stream, ts, keys_of = [], 0, {}
    for i in range(3_000):
        ts += rng.randrange(0, 4)
        when = ts - rng.randrange(0, 400) if rng.random() < 0.08 else ts  # a late arrival
        ident = f"d{rng.randrange(i)}" if i and rng.random() < 0.05 else f"d{i}"  # a revision
        payload = rng.choice([b"P", b"P", b"Q", b"R" * 40, bytes(INLINE_MAX + 20)])
        if ident not in keys_of or rng.random() < 0.5:  # half the revisions keep their buckets
            keys_of[ident] = tuple(rng.sample(range(40), 3))
        stream.append((ident, when, payload, keys_of[ident]))
        if rng.random() < 0.03:
            stream.append(stream[rng.randrange(len(stream))])  # a replay
    shortcuts = []
    covers = 0
    real_all_before, real_merge = index_mod.all_before, index_mod.merge_entry

    def full_merge(raw, entry, cutoff, cap, packed=None, new_id=False, at=None):  # merge_entry without its shortcuts
        es = [e for e in unpack_entries(raw) if e[0] >= cutoff and e[1] != entry[1]] if raw else []
        return index_mod.pack_entries(sorted(es + [entry], key=lambda e: (e[0], e[1]))[:cap])

    class Headerless(dict):
        """Every bucket read as stored before the header existed: probes and exact checks decode it whole."""

        def get(self, key, default=None):
            v = super().get(key, default)
            if isinstance(v, bytes) and v[:1] == b"\x80" and key[:1] in b"LX":
                return b"".join(index_mod.pack_entry(e) for e in unpack_entries(v))
            return v

    def reference(data, ident, ts, payload, keys):
        """What a probe must answer, by brute force: the earliest earlier match and every later one
        within the window, over every entry of the document's buckets (before its insert)."""
        cands, buckets = {}, []
        for k in keys:
            raw = data.get(BucketIndex.bucket_key(1, k))
            buckets.append({(cts, cid) for cts, cid, _ in unpack_entries(raw)} if raw else set())
            for cts, cid, inline in unpack_entries(raw) if raw else []:
                if cid != ident and abs(cts - ts) <= 1_500:
                    cands[(cts, cid)] = inline[LABEL:] or data.get(BucketIndex.payload_key(1, cid))
        matched = sorted(c for c, other in cands.items() if other and same(payload, other))
        earlier = [c for c in matched if c < (ts, ident)]
        later = [c for c in matched if c > (ts, ident)]
        # covered: a later match that shares a bucket with the earliest, within the window of it, and
        # matches it (BucketIndex.covered)
        covered = {y for y in later if earlier and any(earlier[0] in b and y in b for b in buckets)
                   and y[0] - earlier[0][0] <= 1_500 and same(cands[y], cands[earlier[0]])}
        return (earlier[0] if earlier else None), later, covered

    def run(legacy: bool = False, with_shortcuts: bool = True, hint: bool = False):
        nonlocal covers
        for mod in (index_mod, exact_mod):
            monkeypatch.setattr(mod, "all_before", real_all_before if with_shortcuts else lambda raw, me: False)
            monkeypatch.setattr(mod, "merge_entry", real_merge if with_shortcuts else full_merge)
        store = dict if with_shortcuts else Headerless
        idx = BucketIndex(store(), window=1_500, max_bucket=25)
        ex = ExactStore(store(), window=1_500, max_members=25, bloom_capacity=10_000)
        answers, seen = [], set()
        for n, (ident, when, payload, keys) in enumerate(stream):
            if legacy and n == len(stream) // 2:  # strip every header
                for store in (idx.data, ex.data):
                    for k, v in list(store.items()):
                        if v[:1] == b"\x80":
                            store[k] = b"".join(index_mod.pack_entry(e) for e in unpack_entries(v))
            expected = reference(idx.data, ident, when, payload, keys)
            r = idx.probe_insert(1, ident, when, payload, keys, same, new_id=hint and ident not in seen)
            assert (r.earliest and (r.earliest.ts, r.earliest.id), [(f.ts, f.id) for f in r.later], r.covered) == expected
            covers += len(r.covered)
            seen.add(ident)
            o = ex.process(payload[:1].ljust(16, b"."), when, ident)
            answers.append((r.earliest and (r.earliest.ts, r.earliest.id), [(f.ts, f.id) for f in r.later],
                            r.covered, r.candidates, o.first, o.original, o.revise))
            if with_shortcuts and not legacy:
                shortcuts.append(sum(v[:1] == b"\x80" for v in idx.data.values()))
        contents = {k: unpack_entries(v) if k[:1] in b"LX" else v for k, v in {**idx.data, **ex.data}.items()}
        return answers, {**idx.data, **ex.data}, contents

    fast, fast_bytes, fast_contents = run()
    slow, slow_bytes, _ = run(with_shortcuts=False)
    assert fast == slow and fast_bytes == slow_bytes
    old, _, old_contents = run(legacy=True)
    assert old == fast and old_contents == fast_contents
    told, told_bytes, _ = run(hint=True)
    assert told == fast and told_bytes == fast_bytes
    assert max(shortcuts) > 20  # buckets with headers were there to take the shortcuts
    assert sum(a[0] is not None for a in fast) > 500 and sum(bool(a[1]) for a in fast) > 20
    assert sum(a[5] is not None for a in fast) > 500 and sum(bool(a[6]) for a in fast) > 20
    assert covers > 20 and sum(bool(a[2]) and len(a[2]) < len(a[1]) for a in fast) > 5  # some later matches, not all


def test_index_finds_the_earliest_match_and_late_matches(tmp_path):
    idx = BucketIndex(KVStore(tmp_path / "i"), window=W)
    idx.insert(1, "c", 300, b"P", (7,))
    idx.insert(1, "a", 100, b"P", (7, 8))
    idx.insert(1, "x", 50, b"Q", (7,))  # same bucket, does not verify
    r = idx.probe(1, "b", 200, b"P", (7, 8), same)
    assert r.earliest is not None and (r.earliest.ts, r.earliest.id) == (100, "a")
    assert [(f.ts, f.id) for f in r.later] == [(300, "c")]
    assert idx.probe(1, "z", 10, b"P", (9,), same).earliest is None


def test_a_long_bucket_is_not_verified_past_the_earliest_match_yet_late_matches_are_found():
    """A campaign's bucket: once the earliest match is known, the entries of its cluster up to the
    probing document are skipped (not verified), and those after it are still verified for late
    matches."""
    idx = BucketIndex({}, window=W)
    for i in range(300):  # the campaign P from e005 on, five other messages before it
        idx.probe_insert(1, f"e{i:03d}", 1000 + i, b"P" if i >= 5 else b"Q%d" % i, (7, 8), same)
    for i in range(20):
        idx.insert(1, f"l{i:02d}", 5000 + i, b"P" if i in (3, 11) else b"Q", (8,))
    calls = []

    def counting(a, b):
        calls.append(b)
        return same(a, b)

    r = idx.probe(1, "me", 2000, b"P", (7, 8), counting)
    assert (r.earliest.ts, r.earliest.id) == (1005, "e005")
    assert [(f.ts, f.id) for f in r.later] == [(5003, "l03"), (5011, "l11")]
    # e000..e005 once (bucket 8 skips them: seen or no better), then l00..l19, then the two late
    # matches against e005, which shares bucket 8 with them: both match it, so neither needs this
    # document's offer (BucketIndex.covered)
    assert len(calls) == 6 + 20 + 2
    assert r.covered == {(5003, "l03"), (5011, "l11")}
    assert idx.probe(1, "me", 2000, b"P", (7, 8), same, late=False).later == []


def test_a_campaigns_buckets_of_the_same_bytes_are_walked_and_merged_once(monkeypatch):
    """A campaign out of order: every copy falls in the same six buckets, which therefore hold the
    same bytes. A probe walks one of them and takes the others' spot from it, and an insert merges
    one and writes its bytes to the others: each answer and each stored bucket must be what an
    index of one such bucket gives, and the work must be that of about one bucket, not six."""
    import random

    from stream_dedup.core import index as index_mod

    rng = random.Random(5)
    copies = [(f"c{i:03d}", 1000 + i, b"P" if i % 7 else b"Q") for i in range(240)]
    for s in range(0, len(copies), 40):  # out of order within blocks of 40
        block = copies[s:s + 40]
        rng.shuffle(block)
        copies[s:s + 40] = block
    heads, merges = [0], [0]
    real_head, real_merge = index_mod._HEAD, index_mod.merge_entry

    class CountingHead:
        size, pack = real_head.size, real_head.pack

        @staticmethod
        def unpack_from(buf, pos=0):
            heads[0] += 1
            return real_head.unpack_from(buf, pos)

    def counting_merge(*a, **kw):
        merges[0] += 1
        return real_merge(*a, **kw)

    monkeypatch.setattr(index_mod, "_HEAD", CountingHead)
    monkeypatch.setattr(index_mod, "merge_entry", counting_merge)
    six, one = BucketIndex({}, window=W), BucketIndex({}, window=W)
    work = {}
    for ident, ts, payload in copies:
        got, before = [], len(one.data.get(one.bucket_key(1, 1), b""))
        for idx, keys in ((six, (1, 2, 3, 4, 5, 6)), (one, (1,))):
            heads[0] = merges[0] = 0
            r = idx.probe_insert(1, ident, ts, payload, keys, same)
            got.append((r.earliest, r.later, r.covered, r.bridges))
            work[len(keys)] = (heads[0], merges[0])
        assert got[0] == got[1]
        assert all(six.data[six.bucket_key(1, k)] == one.data[one.bucket_key(1, 1)] for k in range(1, 7))
        if before >= index_mod._TWIN_FROM:  # long enough for the insert to look for twins
            assert work[6][1] == work[1][1] == 1
        # the twins' late walks read no entry head; a copy newer than every entry reads a few heads
        # a bucket, up to its first match, in each of the six
        assert work[6][0] <= work[1][0] + 12
    assert len(unpack_entries(one.data[one.bucket_key(1, 1)])) == 240
    late = [i for i, (_, ts, _) in enumerate(copies) if any(t > ts for _, t, _ in copies[:i])]
    assert len(late) > 100  # most copies arrived after later ones: the walks this is about


def test_index_large_payloads_are_stored_once(tmp_path):
    kv = KVStore(tmp_path / "i")
    idx = BucketIndex(kv, window=W)
    big = bytes(i % 256 for i in range(INLINE_MAX + 8))
    idx.insert(3, "a", 1, big, (1, 2, 3))
    assert kv.count(b"P") == 1 and kv.count(b"L") == 3
    assert all(len(v) < 40 for k, v in kv.items() if k[:1] == b"L")
    assert idx.probe(3, "b", 2, big, (2,), same).earliest.id == "a"


def test_index_a_campaigns_long_bucket_keeps_payloads_inline_only_in_its_first_entries(tmp_path):
    """A spam campaign's copies share buckets: from the INLINE_ENTRIES-th entry on, an SMS-sized
    payload goes under P once and the entry refers to it, so the bucket grows by an id and a head
    per copy, not by a payload. Probes answer the same either way, a full bucket takes nothing
    (no P either), short payloads stay inline, and a sweep keeps exactly the referenced payloads."""
    from stream_dedup.core.index import INLINE_ENTRIES, REF_FROM

    kv = KVStore(tmp_path / "i")
    idx = BucketIndex(kv, window=1_000, max_bucket=INLINE_ENTRIES + 20)
    sms = ("【某某银行】尊敬的客户，您的积分即将清零，请点击链接兑换礼品，回复TD退订" * 2).encode()
    assert REF_FROM < len(sms) <= INLINE_MAX
    for i in range(INLINE_ENTRIES + 30):  # copies: key 1 shared by all, key 2 by every tenth
        payload = sms if i % 2 == 0 else sms + b" v%d" % i  # exact and near copies
        r = idx.probe_insert(4, f"c{i}", 100 + i, payload, (1, 2) if i % 10 == 0 else (1,),
                             lambda a, b: Match(1.0, 0) if a[:len(sms)] == b[:len(sms)] else None)
        assert i == 0 or r.earliest.id == "c0"
    entries = unpack_entries(kv[idx.bucket_key(4, 1)])
    assert len(entries) == INLINE_ENTRIES + 20  # full: c52 on were turned away
    assert [len(e[2]) > LABEL for e in entries] == [True] * INLINE_ENTRIES + [False] * 20
    by_ref = {e[1] for e in entries if len(e[2]) <= LABEL}
    assert {k[2:].decode() for k in kv if k[:1] == b"P"} == by_ref  # no P for those turned away
    assert all(kv[idx.payload_key(4, e[1])] == (sms if int(e[1][1:]) % 2 == 0 else sms + b" v" + e[1][1:].encode())
               for e in entries if len(e[2]) <= LABEL)
    assert all(len(e[2]) > LABEL for e in unpack_entries(kv[idx.bucket_key(4, 2)]))  # 7 entries: all inline
    assert len(kv[idx.bucket_key(4, 1)]) < INLINE_ENTRIES * (len(sms) + 30) + 20 * 30
    # a late document before them all matches entries past the first 32 through their payloads
    late = idx.probe(4, "late", 50, sms + b" v45", (1,), same)
    assert [f.id for f in late.later] == ["c45"] and late.earliest is None
    # short payloads (SimHash's 8 bytes) gain nothing by reference: they stay in the bucket
    for i in range(INLINE_ENTRIES + 5):
        idx.insert(1, f"s{i}", 100 + i, b"x" * REF_FROM, (9,))
    assert all(len(e[2]) > LABEL for e in unpack_entries(kv[idx.bucket_key(1, 9)]))
    # the sweep drops the payloads of the entries it drops, keeps the others
    assert idx.sweep(100 + INLINE_ENTRIES + 10) > 0
    left = {e[1] for e in unpack_entries(kv[idx.bucket_key(4, 1)]) if len(e[2]) <= LABEL}
    assert left == {i for i in by_ref if int(i[1:]) >= INLINE_ENTRIES + 10} and left
    assert {k[2:].decode() for k in kv if k[:1] == b"P"} == left


class CountingDict(dict):
    """A mapping that counts the reads of payloads under P."""
    payload_reads = 0

    def get(self, key, default=None):
        self.payload_reads += key[:1] == b"P"
        return super().get(key, default)


def test_index_reads_a_payload_under_p_once_while_cached_and_again_after_a_revision():
    """``ref_cache``: a crowded bucket is walked by every probe sharing it, so a payload under P is
    read from the store once while it stays among the last read; a revision of the document
    (its id again, another payload) is what later probes verify against, not the cached one."""
    data = CountingDict()
    idx = BucketIndex(data, window=W, ref_cache=3)
    big = {n: bytes([n]) * (INLINE_MAX + 8) for n in range(5)}
    for n in range(3):
        idx.insert(3, f"d{n}", 1 + n, big[n], (7,))
    for _ in range(3):  # the walk looks at d0, d1, d2 (no match) on every probe
        assert idx.probe(3, "p", 10, big[4], (7,), same).earliest is None
    assert data.payload_reads == 3
    small = BucketIndex(data, window=W, ref_cache=2)  # a walk over more than it holds reads them all
    for _ in range(3):
        assert small.probe(3, "p", 10, big[4], (7,), same).earliest is None
    assert data.payload_reads == 3 + 3 * 3
    before = data.payload_reads
    assert idx.probe(3, "q", 10, big[1], (7,), same).earliest.id == "d1"
    assert data.payload_reads == before  # d1 still cached
    idx.insert(3, "d1", 2, big[3], (7,))  # a revision: d1's payload is now big[3]
    assert idx.probe(3, "r", 10, big[1], (7,), same).earliest is None
    assert idx.probe(3, "s", 10, big[3], (7,), same).earliest.id == "d1"
    uncached = BucketIndex(data, window=W)  # ref_cache=0, as in the workers
    assert uncached.probe(3, "s", 10, big[3], (7,), same).earliest.id == "d1"


def test_index_prunes_on_write_and_sweeps(tmp_path):
    kv = KVStore(tmp_path / "i")
    idx = BucketIndex(kv, window=500)
    for i in range(100):
        idx.insert(1, f"d{i}", i * 10, bytes(INLINE_MAX + 100), (i % 7, 1000 + i))
    # every write pruned its buckets to the window behind the newest event (990 - 500)
    for key in range(7):
        last_write = max(i for i in range(100) if i % 7 == key) * 10
        entries = unpack_entries(kv[idx.bucket_key(1, key)])
        assert min(e[0] for e in entries) >= last_write - 500 and len(entries) < 100 // 7
    assert idx.sweep(800) > 0
    assert all(e[0] >= 800 for k, v in kv.items() if k[:1] == b"L" for e in unpack_entries(v))
    assert kv.count(b"P") == 20  # payloads of swept documents are gone too
    assert idx.probe(1, "q", 1000, bytes(INLINE_MAX + 100), (1000,), same).earliest is None  # d0 expired
    assert idx.probe(1, "q", 1000, bytes(INLINE_MAX + 100), (1099,), same).earliest.id == "d99"


def test_index_window_limits_matches(tmp_path):
    idx = BucketIndex(KVStore(tmp_path / "i"), window=5_000)
    idx.insert(1, "old", 0, b"P", (5,))
    assert idx.probe(1, "new", 10_000, b"P", (5,), same).earliest is None
    idx.window = 20_000
    assert idx.probe(1, "new", 10_000, b"P", (5,), same).earliest.id == "old"


def test_index_insert_is_idempotent_and_buckets_are_bounded(tmp_path):
    kv = KVStore(tmp_path / "i")
    idx = BucketIndex(kv, window=W, max_bucket=10)
    for _ in range(3):
        idx.insert(1, "a", 1, b"P", (1, 2))
    snapshot = dict(kv.items())
    idx.insert(1, "a", 1, b"P", (1, 2))
    assert dict(kv.items()) == snapshot and len(unpack_entries(kv[idx.bucket_key(1, 1)])) == 1
    for i in range(50):
        idx.insert(1, f"s{i}", 100 + i, b"P", (1,))
    kept = unpack_entries(kv[idx.bucket_key(1, 1)])
    assert len(kept) == 10 and kept[0][1] == "a"  # the earliest entries stay


def test_probe_insert_equals_probe_then_insert_over_rocksdb_and_a_dict(tmp_path):
    """One read per bucket must answer and store exactly what a probe then an insert do, with
    RocksDB's multi-get (KVStore.get_many) and with a plain mapping (the workers' tables)."""
    import random

    rng = random.Random(8)
    docs = [(f"d{i}", rng.randrange(0, 10_000), rng.choice([b"P", b"Q", b"R", bytes(INLINE_MAX + 50)]),
             tuple(rng.sample(range(12), 3))) for i in range(400)]
    docs.append(docs[5])  # a replay
    for one_read in (KVStore(tmp_path / "a"), {}):
        two = KVStore(tmp_path / f"two-{type(one_read).__name__}")
        a, b = BucketIndex(one_read, window=3_000, max_bucket=6), BucketIndex(two, window=3_000, max_bucket=6)
        found = 0
        for ident, ts, payload, keys in docs:
            ra = a.probe_insert(2, ident, ts, payload, keys, same)
            rb = b.probe(2, ident, ts, payload, keys, same)
            b.insert(2, ident, ts, payload, keys, rb.label)
            assert (ra.earliest, ra.later, ra.candidates, ra.bridges) == (rb.earliest, rb.later, rb.candidates, rb.bridges)
            found += ra.earliest is not None
        assert dict(one_read.items()) == dict(two.items())
        assert found > 50 and any(k[:1] == b"P" for k in two)


def test_exact_store_answers_the_earliest_whatever_the_order(tmp_path):
    ex = ExactStore(KVStore(tmp_path / "e"), W, bloom_capacity=1000)
    d = b"\x01" * 16
    first = ex.process(d, 300, "c")
    assert first.first and first.original is None
    r = ex.process(d, 500, "e")
    assert not r.first and r.original == (300, "c")
    r = ex.process(d, 100, "a")  # an earlier copy arrives late: it becomes the original
    assert r.first and sorted(r.revise) == [(300, "c"), (500, "e")]
    assert ex.process(d, 400, "d").original == (100, "a")
    again = ex.process(d, 100, "a")  # a replay changes nothing
    assert again.first and sorted(again.revise) == [(300, "c"), (400, "d"), (500, "e")]


def test_bloom_false_positive_never_makes_a_unique_page_duplicate(tmp_path):
    # a filter far too small for the load: nearly every query is a false positive
    ex = ExactStore(KVStore(tmp_path / "e"), W, bloom_capacity=10, bloom_fp_rate=0.5)
    for i in range(2000):
        out = ex.process(os.urandom(16), i, f"d{i}")
        assert out.first and out.original is None
    assert ex.bloom_fp > 1000


def test_exact_store_rebuilds_its_filter_after_restart(tmp_path):
    d = b"\x02" * 16
    kv = KVStore(tmp_path / "e")
    ExactStore(kv, W).process(d, 10, "a")
    kv.close()
    ex = ExactStore(KVStore(tmp_path / "e"), W)
    assert not ex.bloom.maybe_contains(d, 20)
    assert ex.rebuild_bloom() == 1 and ex.bloom.maybe_contains(d, 20)
    assert ex.process(d, 20, "b").original == (10, "a")


def test_exact_sweep(tmp_path):
    kv = KVStore(tmp_path / "e")
    ex = ExactStore(kv, W)
    ex.process(b"\x03" * 16, 10, "a")
    ex.process(b"\x04" * 16, 5000, "b")
    assert ex.sweep(100) == 1
    assert kv.count(b"X") == 1


def test_buffered_store_reads_and_writes_like_the_store_across_its_batches(tmp_path):
    """``Buffered`` (the embedded engine's stores): the same answers as a dict under random puts,
    deletes and multi-gets, while its batches move the data into RocksDB (a batch every 50 keys)."""
    import random

    from stream_dedup.core.store import Buffered

    rng = random.Random(3)
    kv = KVStore(tmp_path / "b")
    buf = Buffered(kv, max_entries=50, max_bytes=1 << 20)
    ref: dict[bytes, bytes] = {}
    assert not buf.on_disk
    for step in range(3_000):
        k = b"k%d" % rng.randrange(200)
        op = rng.random()
        if op < 0.6:
            buf[k] = ref[k] = b"v%d" % step
        elif op < 0.7:
            if k in ref:
                del buf[k], ref[k]
            else:
                try:
                    del buf[k]
                    raise AssertionError("deleted a missing key")
                except KeyError:
                    pass
        else:
            keys = [b"k%d" % rng.randrange(200) for _ in range(5)]
            assert buf.get_many(keys) == [ref.get(x) for x in keys]
            assert buf.get(k) == ref.get(k)
        assert buf.size == sum(len(x) + len(v or b"") for x, v in buf.buf.items())  # what it holds
    assert buf.on_disk and 0 < len(buf.buf) <= 50  # batches went to RocksDB, the latest writes wait
    assert dict(buf.items()) == ref and not buf.buf  # iterating writes the rest first
    assert {k: kv[k] for k in kv} == ref


def test_buffered_store_bounds_its_memory_by_bytes_and_flushes_into_a_kept_folder(tmp_path):
    from stream_dedup.core.store import Buffered

    kv = KVStore(tmp_path / "b")
    buf = Buffered(kv, max_entries=1 << 20, max_bytes=10_000)
    for i in range(30):
        buf[b"x%d" % i] = bytes(1_000)
    assert buf.on_disk and len(buf.buf) < 10  # about every 10 writes of 1 KB went out in a batch
    buf.flush()
    kv.close()
    again = Buffered(KVStore(tmp_path / "b"))
    assert again.on_disk and again.get(b"x29") == bytes(1_000) and again[b"x0"] == bytes(1_000)


def test_buffered_store_counts_what_it_holds_so_rewritten_keys_stay_in_memory(tmp_path):
    """A spam campaign's copies rewrite the same buckets, each rewrite a little longer: the buffer
    bounds the bytes it holds, not the bytes written to it, so rewrites of a few keys far beyond
    ``max_bytes`` in all send nothing to RocksDB, and only new keys' bytes fill it."""
    from stream_dedup.core.store import Buffered

    buf = Buffered(KVStore(tmp_path / "b"), max_entries=1 << 20, max_bytes=10_000)
    for i in range(200):  # 200 rewrites of 3 keys, up to 2 KB each: 600 KB written
        for k in (b"a", b"b", b"c"):
            buf[k] = bytes(i * 10)
    buf.delete_blind(b"c")
    assert not buf.on_disk and buf.size == 2 * (1 + 1990) + 1
    for i in range(7):  # 7 new keys of 1 KB with the 4 KB held: over 10,000 bytes
        buf[b"n%d" % i] = bytes(1_000)
    assert buf.on_disk and buf.get(b"a") == bytes(1990) and buf.get(b"c") is None


def test_tiered_answers_like_a_dict_while_its_oldest_values_move_to_rocksdb(tmp_path):
    """``Tiered`` (the embedded engine's per-document records): the same answers as a dict under
    random writes, reads and deletes, with at most ``hot_max`` values in memory and the rest encoded
    in a RocksDB folder under a prefix, opened at the first spill; a read leaves a cold value cold,
    a write brings it back."""
    import json
    import random

    from stream_dedup.core.store import Buffered, Keyed, Tiered

    rng = random.Random(5)
    opened: list[Keyed] = []
    kv = Buffered(KVStore(tmp_path / "run"), max_entries=30, max_bytes=1 << 20)
    kv[b"Dother"] = b"a record of another kind"  # another prefix in the same folder: never seen

    def open_cold() -> Keyed:
        opened.append(Keyed(kv, b"S", lambda v: json.dumps(v).encode(), json.loads))
        return opened[-1]

    t = Tiered(open_cold, hot_max=20)
    ref: dict[str, list] = {}
    for step in range(50):  # fewer than hot_max + 1 distinct keys: nothing leaves memory
        k = f"早{step % 15}"
        t[k] = ref[k] = [step, k]
    assert not opened and not t.spilled and dict(t.items()) == ref
    for step in range(4_000):
        k = f"文档-{rng.randrange(300)}"
        op = rng.random()
        if op < 0.55:
            t[k] = ref[k] = [step, k]
            assert k in t.hot
        elif op < 0.65:
            if k in ref:
                del t[k], ref[k]
            else:
                with pytest.raises(KeyError):
                    del t[k]
        else:
            was_hot = k in t.hot
            assert t.get(k) == ref.get(k)
            assert (k in t.hot) == was_hot  # reads do not move values
        assert len(t.hot) <= 20
    assert len(opened) == 1 and t.spilled
    assert dict(t.items()) == ref and len(t) == len(ref)
    cold_only = [k for k in ref if k not in t.hot]
    assert cold_only and all(t[k] == ref[k] for k in cold_only)
    assert set(opened[0]) >= set(cold_only) and "other" not in set(opened[0])
    with pytest.raises(KeyError):
        t["never written"]


def test_keyed_views_share_a_folder_apart(tmp_path):
    from stream_dedup.core.store import Buffered, Keyed

    kv = Buffered(KVStore(tmp_path / "run"))
    states, digests = Keyed(kv, b"S"), Keyed(kv, b"D")
    states["新闻-1"] = b"state"
    digests["新闻-1"] = b"digest"
    digests["a\udc80"] = b"x"  # a lone surrogate, as JSON allows in an id
    assert (states["新闻-1"], digests["新闻-1"], states.get("a\udc80")) == (b"state", b"digest", None)
    assert sorted(digests) == sorted(["新闻-1", "a\udc80"]) and list(states) == ["新闻-1"]
    del states["新闻-1"]
    assert "新闻-1" not in states and digests["新闻-1"] == b"digest" and len(digests) == 2


def test_generations_forget_a_record_a_span_count_after_its_last_write_by_deleting_folders(tmp_path):
    """``Generations`` (a long-lived ``Deduper``'s records that left memory): answers like a dict
    over what was written within ``keep - 1`` spans of the clock; a record unwritten for ``keep``
    spans is gone, with the folder that held it; a rewrite keeps a record; a clock jump of many
    spans leaves one fresh folder."""
    import random

    from stream_dedup.core.store import Buffered, Generations

    folders: list = []

    def open_gen(n: int) -> Buffered:
        folders.append(tmp_path / f"g{n}")
        return Buffered(KVStore(folders[-1]), max_entries=7)  # small batches: most records in RocksDB

    g = Generations(open_gen, span=100, keep=3, now=1_000)
    rng = random.Random(3)
    written: dict[bytes, tuple[bytes, int]] = {}  # key -> (value, clock at its last write)
    now = 1_000
    for step in range(3_000):
        now += rng.randrange(3)  # about 3 spans every 200 steps
        g.advance(now)
        k = f"文档-{rng.randrange(120)}".encode()
        if rng.random() < 0.1:
            if g.get(k) is not None:
                del g[k]
                written.pop(k, None)
                assert g.get(k) is None
            else:
                with pytest.raises(KeyError):
                    del g[k]
            continue
        v = f"{step}".encode()
        g[k] = v
        written[k] = (v, now)
        for key, (value, at) in list(written.items()):
            got = g.get(key)
            if now - at < 200:  # (keep - 1) spans: always kept
                assert got == value
            elif now - at >= 300:  # keep spans: always gone
                assert got is None
                del written[key]
            else:
                assert got in (value, None)
                if got is None:
                    del written[key]
        if step % 500 == 0:
            assert sorted(g) == sorted(k for k in written if g.get(k) is not None) and len(set(g)) == len(g)
    assert len(g.gens) == 3 and g.dropped == len(folders) - 3 > 10
    assert [f.exists() for f in folders] == [False] * (len(folders) - 3) + [True] * 3
    g.advance(now + 10 * 100)  # ten spans at once: every record forgotten, one fresh folder among three
    assert len(g.gens) == 3 and g.get(next(iter(written))) is None and len(g) == 0
    g.destroy()
    assert not any(f.exists() for f in folders)


def test_a_sweep_over_rocksdb_writes_while_it_walks_and_leaves_what_a_dict_sweep_leaves(tmp_path):
    """``sweep`` over a RocksDB store writes its changes in batches as it walks (its iterator walks
    a snapshot, and the payloads under P after every bucket), over a dict after the walk: the same
    keys and bytes remain either way, in the index (buckets, inline entries and payloads under P)
    and the exact store."""
    import random

    from stream_dedup.core.store import Buffered

    rng = random.Random(4)
    stores = {"dict": ({}, {}), "rocksdb": (Buffered(KVStore(tmp_path / "i"), max_entries=500),
                                            Buffered(KVStore(tmp_path / "x"), max_entries=500))}
    dropped = {}
    for name, (idx_data, ex_data) in stores.items():
        idx, ex = BucketIndex(idx_data, window=10**9), ExactStore(ex_data, 10**9, bloom_capacity=50_000)
        rng.seed(4)
        for i in range(12_000):
            payload = bytes(INLINE_MAX + 1) if i % 2 == 0 else b"inline"  # 6,000 under P: two batches
            idx.insert(1, f"文档{i}", i, payload, (rng.randrange(9_000), rng.randrange(9_000)))
            ex.process(rng.randrange(6_000).to_bytes(16, "big"), i, f"文档{i}")
        dropped[name] = (idx.sweep(7_000), ex.sweep(7_000))
        assert sum(1 for k in idx_data if k[:1] == b"P") == len(range(7_000, 12_000, 2))  # payloads of kept ones
    (di, dx), (ri, rx) = stores["dict"], stores["rocksdb"]
    assert dropped["dict"] == dropped["rocksdb"] and dropped["dict"][0] > 4_096  # several batches written
    assert dict(ri.items()) == di and dict(rx.items()) == dx


def test_a_hash_set_answers_membership_across_merges_of_its_buffer():
    """``HashSet`` (a sweep's set of the payloads kept entries refer to) merges its buffer into a
    sorted array as it grows: every reference added is found, before and after merges, repeats
    included, and references never added are not; a payload key's reference is its (det, id)'s."""
    import numpy as np

    from stream_dedup.core.index import BucketIndex, HashSet, ref_hash

    hs = HashSet(buffer=100)
    assert not hs.contains(np.array([ref_hash(2, "a")], np.int64)).any()  # empty
    added = [ref_hash(2, f"文档{i}") for i in range(0, 2_000, 2)]
    for at in range(0, 1_300, 50):  # 1,300 adds in updates of 50: several merges, and repeats
        hs.update((added + added[:300])[at:at + 50])
    assert len(hs) == len(added) and len(hs.sorted) == len(added)
    probe = np.array([ref_hash(2, f"文档{i}") for i in range(2_000)] + [ref_hash(3, "文档0")], np.int64)
    assert hs.contains(probe).tolist() == [i % 2 == 0 for i in range(2_000)] + [False]
    assert BucketIndex.payload_ref(BucketIndex.payload_key(2, "文档0")) == added[0]  # as a sweep reads P keys


def test_a_sweeps_deletes_read_nothing_and_write_out_like_writes(tmp_path):
    """``apply_writes`` deletes through the stores' ``delete_blind``: no read of a key a sweep has just
    walked (``pop`` read it twice), and a ``Buffered`` store writes its tombstones out at its limit
    as it does its writes (before, a sweep's deletes stayed in its buffer to the end)."""
    from stream_dedup.core.index import apply_writes
    from stream_dedup.core.store import Buffered

    kv = Buffered(KVStore(tmp_path / "b"), max_entries=100)
    for i in range(1_000):
        kv[f"键{i}".encode()] = b"v"
    kv.flush()
    reads: list = []
    get, get_many = kv.store.get, kv.store.get_many
    kv.store.get = lambda *a: reads.append(a) or get(*a)  # type: ignore[method-assign]
    kv.store.get_many = lambda *a: reads.append(a) or get_many(*a)  # type: ignore[method-assign]
    biggest = 0
    for i in range(1_000):
        apply_writes(kv, [(f"键{i}".encode(), None)])
        biggest = max(biggest, len(kv.buf))
    assert not reads and biggest <= 101
    assert kv.store.count() < 1_000  # written out along the way
    kv.flush()
    assert kv.store.count() == 0
    with pytest.raises(KeyError):  # del still says when a key is not there
        del kv["键0".encode()]


def test_past_its_earliest_match_a_probe_verifies_one_entry_of_each_other_cluster_it_shares_buckets_with():
    """Labels: c2 matched c when indexed, so it carries c's label; a probe that matches a first
    then verifies c (another label: a bridge) and not c2 (c's cluster is met), and d, met in one
    bucket only (the workers may walk that bucket apart from the others)."""
    idx = BucketIndex({}, window=W)
    for ident, ts, payload, keys in [("a", 1, b"A", (1, 2)), ("c", 2, b"C", (1, 2)), ("c2", 3, b"C", (1, 2)),
                                     ("d", 4, b"D", (3,))]:
        idx.probe_insert(1, ident, ts, payload, keys, same)
    calls = []

    def either(p, other):  # the probing text holds A, C and D
        calls.append(other)
        return Match(1.0, 0) if other in (b"A", b"C", b"D") else None

    r = idx.probe(1, "b", 10, b"ACD", (1, 2, 3), either)
    assert (r.earliest.id, [f.id for f in r.bridges], calls) == ("a", ["c", "d"], [b"A", b"C", b"D"])
    # inserted, b takes a's label: a copy of b verifies a, then c (its label was not changed by the
    # merge: a verify more, never a bridge missed), and neither b (a's label) nor c2 (c's)
    idx.probe_insert(1, "b", 10, b"ACD", (1, 2, 3), either)
    calls.clear()
    r = idx.probe(1, "b2", 11, b"ACD", (1, 2), lambda p, o: either(p, o) or (Match(1.0, 0) if o == b"ACD" else None))
    assert (r.earliest.id, [f.id for f in r.bridges], calls) == ("a", ["c"], [b"A", b"C"])
    # a probe with its earliest match's own payload (an exact copy) reads nothing past that match:
    # whatever matches it matches that one, whose own probe met it
    idx = BucketIndex({}, window=W)
    for ident, ts, payload in [("x", 1, b"P"), ("y", 2, b"Q")]:
        idx.probe_insert(1, ident, ts, payload, (1, 2), same)
    calls.clear()
    r = idx.probe(1, "x2", 3, b"P", (1, 2), lambda p, o: calls.append(o) or Match(1.0, 0))
    assert (r.earliest.id, r.bridges, calls) == ("x", [], [b"P"])
    r = idx.probe(1, "x3", 3, b"PQ", (1, 2), lambda p, o: calls.append(o) or Match(1.0, 0))
    assert (r.earliest.id, [f.id for f in r.bridges]) == ("x", ["y"])
