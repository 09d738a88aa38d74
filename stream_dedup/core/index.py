"""The bucket index: near-duplicate candidates by (detector, band key), over a key-value mapping.

Layout (any ``MutableMapping[bytes, bytes]``: a RocksDB store in ``scan``, a RocksDB-backed Faust
table partition in the workers, so both drivers run this same code):

    L | det(1) | key(8)   ->  packed bucket: entries (ts, id, label(4) + payload) sorted by (ts, id),
                              the label left out where it is the id's own (``OWN``); from two
                              entries on, after a header: 0x80 | entries(4) | offset of the last(4)
    P | det(1) | id       ->  payload of a document, when larger than INLINE_MAX bytes, or when it
                              goes into a bucket that already holds INLINE_ENTRIES (stored once)

Why packed buckets rather than one key per entry: a Faust table (with its changelog, restore on
rebalance and standby replicas) offers get/set/delete only, no prefix scan, and only reads the
partition of the current event. One value per bucket needs nothing more, and a probe costs one
read per key. The price is a read-modify-write per key on insert, bounded by ``max_bucket``.

Entries are sorted by (ts, id), so a probe verifies each bucket from its earliest entry up to the
first match: the earliest match. Past it (BRIDGE_READ entries a bucket), only one entry of each
other cluster is verified, the earliest met: each entry carries a label, the label of its own
earliest match when it was indexed (else its id's hash), so one label means one cluster; clusters
only ever merge, so an old label costs a verify, never a wrong skip. A match of another label is a
bridge: the probing document joins that cluster to its own (``DecideStage``). Entries later than
the probing document are all verified: those are late matches, answered so that the later
document's verdict is revised (except those that match the probe's earliest match in a bucket they
share: their verdicts name that or an earlier one already, ``BucketIndex.covered``).

Windows: every write prunes the bucket of entries older than ``watermark - window`` (event time),
so live buckets stay bounded; buckets no document touches again are dropped by ``sweep`` (scan)
or by the store's TTL and the changelog's retention (workers). A bucket over ``max_bucket``
entries keeps its earliest ones: later documents still find the earliest match.

Every write is idempotent: replaying a probe leaves the same bytes.

Why the header: in a live stream a document is newer than every entry of its buckets, so a probe
needs only the entries up to the earliest match, and an insert only the first and last entries and
the count; neither decodes a long bucket (a campaign's or a wire story's holds up to ``max_bucket``
entries). Past its first ``INLINE_ENTRIES`` entries a bucket grows by an id and a head per
document, not a payload. A bucket of one entry has no header (an SMS's bucket mostly holds one):
its first byte is a ts's, and no ts within 2^62 of zero, which ``document.validate`` allows,
starts with 0x80.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import AbstractSet, Callable, Iterable, Iterator, MutableMapping

import mmh3
import numpy as np

from .detectors.base import Match

# Payloads up to this size live in the bucket entries: an SMS's n-gram payload (word hashes and
# skeleton: ~110 bytes, 270 at the 90th percentile of the SMS benchmark) then costs no separate P
# write per partition, which in the workers is a changelog message each, and no extra read per
# verified candidate. MinHash signatures (512 bytes) stay under P: a document has 32 band keys and
# its signature is stored once per partition.
INLINE_MAX = 320
# ... but only in a bucket's first entries: from the INLINE_ENTRIES-th entry of a bucket on, a
# payload of more than REF_FROM bytes goes under P too, and the entry refers to it. Why: a spam
# campaign's copies fill their buckets with hundreds of entries, each carrying the same ~150-byte
# payload, and every insert rewrites the whole bucket (in the workers, a changelog record): hundreds
# of copies made buckets of a hundred kilobytes, and writing them took most of ``scan``'s time on
# ``bench/campaign.py``. By reference a late entry costs its head and id, not its payload, and a probe,
# which verifies from a bucket's earliest entry, reads a payload under P only past the first 32.
INLINE_ENTRIES = 32
REF_FROM = 48
_HEAD = struct.Struct(">qHH")  # ts, id length, inline payload length (OWN: plus the flag)
# the flag, in an entry's payload length, of a label left out because it is the id's own hash
# (``label_of``): most entries are their cluster's first, and their label then costs nothing
OWN = 0x8000
_SMALLEST = INLINE_ENTRIES * _HEAD.size  # bytes of INLINE_ENTRIES entries at the least (their heads)
_BUCKET_KEY = struct.Struct(">cBQ")  # b"L" | det(1) | key(8)
BUCKET = b"L"  # labelled buckets; buckets of earlier versions ("B", no labels) are not read
# bytes of an entry's label, before its payload (two clusters whose labels collide, about one pair
# in 4 billion, only lose a bridge between them)
LABEL = 4
# Past its earliest match a probe verifies the earliest entry of each other label that it meets,
# reading up to BRIDGE_READ entries a bucket. Why not every entry: bridges are rare, and a
# campaign's buckets hold hundreds of entries (walked whole on every copy, they made
# ``bench/campaign.py``'s scan several times slower). Why not only labels met in two or more
# buckets, which verified less: the workers walk a document's buckets partition by partition, and a
# bridge whose shared buckets fell one to a partition was found by scan and missed by the workers.
BRIDGE_READ = 8
Verify = Callable[[bytes, bytes], Match | None]
Entry = tuple[int, str, bytes]  # ts, id, inline payload (b"" when stored under P)


_MAGIC = b"\x80"
_TWIN_FROM = 1024  # bytes of a bucket from which an insert looks for one of the same bytes merged already
_BUCKET_HEAD = struct.Struct(">cII")  # _MAGIC, entries, offset of the last entry after this header
_HEAD_AND_FIRST_TS = struct.Struct(">cIIq")  # the header and the first entry's ts
_TS_IL = struct.Struct(">qH")  # an entry's ts and id length


def label_of(ident: str) -> bytes:
    """The label of a document that matched nothing earlier in its buckets: its id's hash."""
    return _label(ident.encode("utf-8", "surrogatepass"))


def pack_entry(entry: Entry) -> bytes:
    """An entry's bytes; a payload that begins with its id's own label (``label_of``) is stored
    without it, under the ``OWN`` flag, and ``unpack_entries`` puts it back."""
    ts, ident, payload = entry
    ib = ident.encode("utf-8", "surrogatepass")
    if len(payload) >= LABEL and payload[:LABEL] == _label(ib):
        return _HEAD.pack(ts, len(ib), OWN | (len(payload) - LABEL)) + ib + payload[LABEL:]
    return _HEAD.pack(ts, len(ib), len(payload)) + ib + payload


def _label(ib: bytes) -> bytes:
    return _LABEL.pack(mmh3.hash(ib, signed=False))


def _entry_label(raw: bytes, id_end: int, il: int, body: int) -> bytes:
    """The label of the entry whose id ends at ``id_end`` and whose inline payload starts at
    ``body``: the bytes between them, or, left out (``OWN``), its id's own hash."""
    return raw[id_end:body] if body > id_end else _label(raw[id_end - il:id_end])


_LABEL = struct.Struct(">I")


def pack_entries(entries: list[Entry]) -> bytes:
    return join_packed([pack_entry(e) for e in entries])


def join_packed(parts: list[bytes]) -> bytes:
    """A bucket of packed entries, in order: with its header from two entries on."""
    if len(parts) < 2:
        return b"".join(parts)
    return _BUCKET_HEAD.pack(_MAGIC, len(parts), sum(map(len, parts[:-1]))) + b"".join(parts)


Span = tuple[int, str, bytes]  # an entry's ts, id, and bytes as packed


def entry_spans(data: bytes) -> list[Span]:
    """A bucket's entries as their packed bytes: what merges and prunes move, never re-encoded
    (a label left out stays out, with no hash to compute)."""
    out: list[Span] = []
    pos, n = _start(data), len(data)
    while pos < n:
        ts, il, pl = _HEAD.unpack_from(data, pos)
        start = pos + _HEAD.size
        end = start + il + (pl & ~OWN)
        out.append((ts, data[start:start + il].decode("utf-8", "surrogatepass"), data[pos:end]))
        pos = end
    return out


def inline_size(span: bytes) -> int:
    """The bytes of a packed index entry's payload after its label: 0 for an entry that refers
    to its payload under P."""
    pl = _HEAD.unpack_from(span)[2]
    return pl ^ OWN if pl & OWN else pl - LABEL


def _start(data: bytes) -> int:
    """Where the entries begin: after the header, if there is one."""
    return _BUCKET_HEAD.size if data[:1] == _MAGIC else 0


def iter_entries(data: bytes) -> Iterator[Entry]:
    """Decoded one at a time, for a walk that stops early."""
    pos, n = _start(data), len(data)
    while pos < n:
        ts, il, pl = _HEAD.unpack_from(data, pos)
        own, pl = pl & OWN, pl & ~OWN
        pos += _HEAD.size + il + pl
        ib = data[pos - il - pl:pos - pl]
        yield ts, ib.decode("utf-8", "surrogatepass"), _label(ib) + data[pos - pl:pos] if own else data[pos - pl:pos]


def all_before(data: bytes, me: tuple[int, str]) -> bool:
    """Whether every entry of a bucket is earlier than ``me`` (ts, id), from its last entry alone;
    False for a bucket with no header, whose last entry is not known without decoding it all."""
    if data[:1] != _MAGIC:
        return False
    pos = _BUCKET_HEAD.size + _BUCKET_HEAD.unpack_from(data)[2]
    ts, il = _TS_IL.unpack_from(data, pos)
    if ts != me[0]:
        return ts < me[0]
    pos += _HEAD.size
    return data[pos:pos + il].decode("utf-8", "surrogatepass") < me[1]


_IL = struct.Struct(">H")  # an entry's id length, 4 bytes before its id (then the payload's length)


def holds_id(raw: bytes, ib: bytes) -> bool:
    """Whether a bucket may hold an entry of the id whose bytes are ``ib``: they occur in it
    after an id length equal to theirs. Never False for a bucket that holds one; True for one that
    does not only where a payload's bytes happen to look so (then ``_insert_at`` decodes the ids).

    Why not ``ib in raw``, as before: ids that number their documents are prefixes of one
    another ("t0-r1" of "t0-r10" to "t0-r19" and "t0-r100" on), so past the tenth copy of a
    campaign message nearly every insert of the workers (which, unlike ``scan``, do not know
    every id they have indexed: ``merge_entry``'s ``new_id``) decoded every id of its bucket."""
    il = _IL.pack(len(ib))
    at = raw.find(ib, _HEAD.size)
    while at >= 0:
        if raw[at - 4:at - 2] == il:
            return True
        at = raw.find(ib, at + 1)
    return False


def _insert_at(raw: bytes, ts: int, ident: str, look: bool) -> int | None:
    """The byte offset in a bucket with a header where the entry (ts, ident) goes in (ts, id)
    order; None when ``look`` finds an entry of ``ident`` there. Only the entries' heads are
    read, and an id is decoded only at the same ts (or, with ``look``, everywhere)."""
    pos, end, at = _BUCKET_HEAD.size, len(raw), -1
    while pos < end:
        cts, il, pl = _HEAD.unpack_from(raw, pos)
        pl &= ~OWN
        if look or (at < 0 and cts == ts):
            start = pos + _HEAD.size
            cid = raw[start:start + il].decode("utf-8", "surrogatepass")
            if look and cid == ident:
                return None
            if at < 0 and (cts, cid) > (ts, ident):
                at = pos
        elif at < 0 and cts > ts:
            at = pos
        if at >= 0 and not look:
            return at
        pos += _HEAD.size + il + pl
    return end if at < 0 else at


def twin_key(raw: bytes) -> tuple[int, bytes]:
    """A key under which buckets of the same bytes meet, cheaper than their hash (a campaign's
    buckets are tens of KB); a match is confirmed by comparing the bytes."""
    return len(raw), raw[-16:]


def unpack_entries(data: bytes) -> list[Entry]:
    """Every entry of a bucket, decoded (``iter_entries`` to the end)."""
    return list(iter_entries(data))


def count_entries(data: bytes) -> int:
    """How many entries a packed bucket holds: from the header, or (no header: one entry) by
    decoding it, as the probe before has."""
    return _BUCKET_HEAD.unpack_from(data)[1] if data[:1] == _MAGIC else len(_spans(data))


@lru_cache(maxsize=512)
def _spans(data: bytes) -> tuple[Span, ...]:
    """Cut once, where a bucket is taken apart whole: the merge into a bucket with no header (one
    entry) and a full merge (entries expired, an id's entry
    replaced, a full bucket), after ``count_entries`` of the same bucket in the same insert.
    Probes walk the entries' heads instead (``_probe``), as does an insert that splices
    (``_insert_at``)."""
    return tuple(entry_spans(data))


def merge_entry(raw: bytes | None, entry: Entry, cutoff: int, cap: int, packed: bytes | None = None,
                new_id: bool = False, at: int | None = None) -> bytes:
    """A packed list with ``entry`` in (ts, id) order, replacing its id's old entry, without entries
    older than ``cutoff``, and at most ``cap`` entries (the earliest).

    ``packed``: ``pack_entry(entry)``, when the caller has it (an insert merges one entry into
    every bucket of the document: 30-odd for a news article, most of them new).
    ``new_id``: the caller knows that no bucket holds an entry of this id, so none is looked for.
    Why: the look is a search of the bucket's bytes, most of an insert's cost in a campaign's
    bucket of hundreds of SMS; ``scan`` knows every id it has indexed.
    ``at``: where the entry goes in ``raw`` (a bucket with a header), when the caller's walk over
    it has found that (``BucketIndex._probe``'s ``spots``); used only where no entry of the id is
    looked for, and otherwise found by walking the entries' heads again (``_insert_at``)."""
    if packed is None:
        packed = pack_entry(entry)
    if not raw:
        return packed if cap > 0 else b""
    # the common case in a live stream: the newest entry, nothing expired, a new id; appending
    # gives the same bytes as the full merge below, and a full bucket (a campaign's copies) keeps
    # its earliest entries as they are
    if raw[:1] == _MAGIC:  # the header gives the count, the first ts and the last entry: no decoding
        _, count, last, first_ts = _HEAD_AND_FIRST_TS.unpack_from(raw)
        ident = entry[1]
        newer = False
        if first_ts >= cutoff:  # nothing expired (else the full merge below)
            me = (entry[0], ident)
            # maybe an entry of this id (a revision or a replay replaces it)
            look = not new_id and holds_id(raw, ident.encode("utf-8", "surrogatepass"))
            if not look and all_before(raw, me):
                newer = True
            elif count < cap:
                # not the newest entry (a burst's copies share a millisecond, or it arrived late), or
                # maybe its id is there: spliced in where the full merge below would sort it, the
                # other entries' bytes kept as they are (the same bytes as the merge, without
                # decoding, sorting and packing the whole bucket: a campaign's buckets of hundreds of
                # copies made that most of the workers' cost)
                if look or at is None:
                    at = _insert_at(raw, entry[0], ident, look)
                if at is not None:  # before the last entry, which moves by the new one's length, or after it
                    at_body = at - _BUCKET_HEAD.size
                    head = _BUCKET_HEAD.pack(_MAGIC, count + 1, last + len(packed) if at_body <= last else at_body)
                    return b"".join((head, memoryview(raw)[_BUCKET_HEAD.size:at], packed, memoryview(raw)[at:]))
            elif all_before(raw, me):  # a full bucket, the newest entry, maybe its id (look)
                newer = _insert_at(raw, entry[0], ident, True) is not None
        if newer:  # a long bucket's body is not copied twice
            body: bytes | memoryview = raw[_BUCKET_HEAD.size:]
            if len(raw) > 4096:
                body = memoryview(raw)[_BUCKET_HEAD.size:]
    else:  # one entry, no header
        old = _spans(raw)
        count = len(old)
        newer = (old[0][0] >= cutoff and (entry[0], entry[1]) > (old[-1][0], old[-1][1])
                 and all(e[1] != entry[1] for e in old))
        body = raw
    if newer:
        return b"".join((_BUCKET_HEAD.pack(_MAGIC, count + 1, len(body)), body, packed)) if count < cap else raw
    spans = [e for e in _spans(raw) if e[0] >= cutoff and e[1] != entry[1]]
    spans.append((entry[0], entry[1], packed))
    spans.sort(key=lambda e: (e[0], e[1]))
    return join_packed([e[2] for e in spans[:cap]])


def prune_items(items: Iterable[tuple[bytes, bytes]], before_ts: int,
                kept: Callable[[bytes, list[Span]], None] | None = None,
                sink: MutableMapping[bytes, bytes] | None = None) -> tuple[list[tuple[bytes, bytes | None]], int]:
    """The writes that drop entries older than before_ts from packed values (None: delete the key,
    nothing kept), and how many entries they drop. ``kept(key, entries)`` sees each value's kept ones.
    ``sink``: the writes go to it in batches as they are found, and none are returned; only for a
    mapping whose ``items()`` walks a snapshot (``iterates_a_snapshot``: RocksDB's iterators).

    Why not the whole mapping as a list to change as it is walked: a store holds up to a window and
    a half of documents (tens of millions of keys in a large window), and the list held every key
    and value at once. The writes hold only what changes, and with a ``sink`` a batch of it."""
    writes: list[tuple[bytes, bytes | None]] = []
    dropped = 0
    for key, value in items:
        entries = entry_spans(value)
        keep = [e for e in entries if e[0] >= before_ts]
        if len(keep) != len(entries):
            writes.append((key, join_packed([e[2] for e in keep]) if keep else None))
            dropped += len(entries) - len(keep)
            if sink is not None and len(writes) >= 4096:
                apply_writes(sink, writes)
                writes = []
        if kept is not None:
            kept(key, keep)
    if sink is not None:
        apply_writes(sink, writes)
        writes = []
    return writes, dropped


def ref_hash(det: int, ident: str) -> int:
    """A reference to the payload of (det, ident) as a signed 64-bit int: Python's own hash of the
    pair, salted per process, so only for a set that lives inside one (a sweep's ``HashSet``).

    Why not mmh3 of the payload key, as at first: a sweep hashes every entry of every kept bucket
    (32 a news document, more where copies share buckets), and building the key and unpacking
    mmh3's tuple cost several times more an entry than this; on news over three windows the
    sweeps took longer than with the set of pairs it replaced."""
    return hash((det, ident))


class HashSet:
    """A set of signed 64-bit ints (``ref_hash``), about 8 bytes each: added to a list, sorted and
    merged into a sorted array of distinct values whenever the list holds ``buffer`` (2^18, about
    10 MB of Python ints).

    Why: a sweep of the news index meets each document's id once in each of its 32 buckets, and a
    Python set of them cost over 100 bytes an id. Two references with one hash (a chance of about one
    in a million at 6 million) mean a payload that no entry refers to is kept: space, never a verdict.
    Why a list and a merge of two sorted runs, not an ``array('q')`` and ``np.union1d`` as at first:
    ``array.extend`` from a list costs several times ``np.array``'s, and numpy 2's ``unique`` many
    times ``sort``'s: adding a million documents' references (32 million, each document's spread
    over the walk as its buckets are) took several times longer that way."""

    def __init__(self, buffer: int = 1 << 18):
        self.sorted = np.empty(0, np.int64)
        self.buf: list[int] = []
        self.buffer = buffer

    def update(self, hashes: list[int]) -> None:
        self.buf.extend(hashes)
        if len(self.buf) >= self.buffer:
            self._merge()

    def _merge(self) -> None:
        if self.buf:
            merged = np.concatenate([self.sorted, np.sort(np.array(self.buf, np.int64))])
            self.buf = []
            merged.sort(kind="stable")  # two sorted runs: timsort merges them in one pass
            distinct = np.empty(len(merged), bool)
            distinct[:1] = True
            np.not_equal(merged[1:], merged[:-1], out=distinct[1:])
            self.sorted = merged[distinct]

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """For each hash, whether it was added."""
        self._merge()
        if not len(self.sorted):
            return np.zeros(len(hashes), bool)
        at = np.minimum(np.searchsorted(self.sorted, hashes), len(self.sorted) - 1)
        return self.sorted[at] == hashes

    def __len__(self) -> int:
        self._merge()
        return len(self.sorted)


def snapshot_sink(data: MutableMapping[bytes, bytes]) -> MutableMapping[bytes, bytes] | None:
    """``data`` itself when a sweep may write to it while walking it (see ``prune_items``)."""
    return data if getattr(data, "iterates_a_snapshot", False) else None


def apply_writes(data: MutableMapping[bytes, bytes], writes: Iterable[tuple[bytes, bytes | None]]) -> None:
    """Each write, None deleting its key; with the mapping's ``delete_blind`` where it has one (the
    stores of ``store.py``: no read before a delete)."""
    delete_blind = getattr(data, "delete_blind", None)
    for key, value in writes:
        if value is None:
            if delete_blind is not None:
                delete_blind(key)
            else:
                data.pop(key, None)
        else:
            data[key] = value


@dataclass
class Found:
    """A verified candidate: the document (ts, id) and how well it matched."""

    ts: int
    id: str
    match: Match

    @property
    def order(self) -> tuple[int, str]:
        return (self.ts, self.id)


@dataclass
class ProbeResult:
    earliest: Found | None = None  # earliest matching document before the probing one
    later: list[Found] = field(default_factory=list)  # matching documents after it (late matches)
    # the (ts, id) of those later ones that need no offer of the probing document: they share a
    # bucket with ``earliest``, within the window of it, and match it (see ``BucketIndex.covered``)
    covered: AbstractSet[tuple[int, str]] = frozenset()  # shared and empty unless a probe finds some
    candidates: int = 0
    # earlier matches of other clusters than ``earliest``'s (labels met first), earliest first
    bridges: list[Found] = field(default_factory=list)
    label: bytes = b""  # the probing document's label: its earliest match's, else its own


class _Walk:
    """One probe's walk over its buckets (``BucketIndex._probe``): what it has verified and matched."""

    def __init__(self, index: "BucketIndex", det: int, ident: str, ts: int, payload: bytes, verify: Verify):
        self.index, self.det, self.ident, self.ts, self.payload, self.verify = index, det, ident, ts, payload, verify
        self.me = (ts, ident)
        self.lo, self.hi = ts - index.window, ts + index.window
        self.res = ProbeResult()
        self.best: tuple[int, str] | None = None  # res.earliest's (ts, id)
        self.mine: bytes | None = None  # its payload
        self.seen: dict[tuple[int, str], Match | None] = {}
        self.matched: dict[tuple[int, str], tuple[Found, bytes]] = {}  # earlier matches, with their labels
        self.met: set[bytes] = set()  # their labels, and those tried past the earliest match
        # the payloads of later matches, and for each bucket that holds both the best match met so
        # far and later matches, those (see ``covered``)
        self.kept: dict[tuple[int, str], bytes | None] = {}
        self.shared: list[tuple[tuple[int, str] | None, list[tuple[int, str]]]] = []
        self.refs = index._refs.get(det, {})
        # past the earliest match, per label not met: its earliest entry met (ts, id) and that
        # entry's inline payload; verified at the end (``_bridges``)
        self.past: dict[bytes, tuple[tuple[int, str], bytes]] = {}
        self.alike = False  # the earliest match's payload is the probe's: nothing past it to learn

    def _past(self, label: bytes, cand: tuple[int, str], inline: bytes) -> None:
        """An entry past the earliest match, of a label not met: kept if the earliest of its label."""
        got = self.past.get(label)
        if got is None or cand < got[0]:
            self.past[label] = (cand, inline)

    def _verify(self, cand: tuple[int, str], inline: bytes) -> tuple[Match | None, bytes | None]:
        """Verify a candidate not verified yet, its payload ``inline`` in the bucket or under P;
        returns the match (None: none) and the payload."""
        other = inline or self.refs.get(cand[1]) or self.index._payload(self.det, cand[1])
        m = self.seen[cand] = self.verify(self.payload, other) if other else None
        self.res.candidates += 1
        return m, other

    def _earlier(self, cand: tuple[int, str], m: Match, other: bytes | None, label: bytes) -> bool:
        """An earlier match; whether it is the earliest so far."""
        found = Found(cand[0], cand[1], m)
        self.matched[cand] = (found, label)
        self.met.add(label)
        if self.best is None or cand < self.best:
            self.res.earliest, self.best, self.mine = found, cand, other
            self.alike = other == self.payload
            return True
        return False

    def earlier_only(self, raw: bytes) -> None:
        """A bucket with a header whose entries are all earlier than the document: from the earliest
        up to the first match, then up to BRIDGE_READ entries for labels not met."""
        unpack, hs, met, seen, ident = _HEAD.unpack_from, _HEAD.size, self.met, self.seen, self.ident
        pos, end, lo, best, budget = _BUCKET_HEAD.size, len(raw), self.lo, self.best, BRIDGE_READ
        while pos < end:
            cts, il, pl = unpack(raw, pos)
            own = pl & OWN
            if own:
                pl ^= OWN
            pos += hs + il + pl
            if cts < lo:
                continue
            at = pos - pl  # the entry's label (unless ``own``), then its inline payload
            body = at if own else at + LABEL
            cand = None
            if best is not None and cts >= best[0]:
                if cts == best[0]:  # the same millisecond: which is earlier is in the ids
                    cand = (cts, raw[at - il:at].decode("utf-8", "surrogatepass"))
                if cand is None or cand > best:
                    if self.alike or budget <= 0:
                        return
                    budget -= 1
                    label = _entry_label(raw, at, il, body)
                    if label in met:
                        continue
                    cand = cand or (cts, raw[at - il:at].decode("utf-8", "surrogatepass"))
                    if cand[1] != ident and cand not in seen:
                        self._past(label, cand, raw[body:pos])
                    continue
            cand = cand or (cts, raw[at - il:at].decode("utf-8", "surrogatepass"))
            if cand[1] == ident or cand in seen:
                continue
            m, other = self._verify(cand, raw[body:pos])
            if m is not None:
                self._earlier(cand, m, other, _entry_label(raw, at, il, body))
                best = self.best

    def bucket(self, raw: bytes, late: bool, want_spot: bool) -> int | None:
        """Any other bucket: entries after this document too (it arrived late, or shares its
        millisecond with a burst), or no header. A walk over the entries' heads, decoding an id
        only where its entry is looked at; later entries are late matches. Returns where this
        document's entry goes (a bucket with a header, ``late`` and ``want_spot``), else None."""
        unpack, hs = _HEAD.unpack_from, _HEAD.size
        pos, end = _start(raw), len(raw)
        anchored = False  # best met in this bucket
        here: list[tuple[int, str]] = []  # the later matches met in it
        spot = -1 if pos and late and want_spot else None
        budget = BRIDGE_READ  # entries past the earliest match to read for other labels
        while pos < end:
            at = pos
            cts, il, pl = unpack(raw, at)
            own = pl & OWN
            if own:
                pl ^= OWN
            pos = at + hs + il + pl
            if cts < self.lo:
                continue
            if cts > self.hi:
                if spot == -1:
                    spot = at
                break
            cid = raw[pos - il - pl:pos - pl].decode("utf-8", "surrogatepass")
            if cid == self.ident:
                spot = None  # its own entry (a replay): the insert looks for it anyway
                continue
            cand, id_end = (cts, cid), pos - pl  # the entry's label (unless ``own``), then its inline payload
            body = id_end if own else id_end + LABEL
            earlier = cand < self.me
            if spot == -1 and not earlier:
                spot = at
            if not earlier and not late:
                break
            if earlier and self.best is not None and cand >= self.best:
                anchored = anchored or cand == self.best
                if cand != self.best and not self.alike and budget > 0:
                    budget -= 1
                    label = _entry_label(raw, id_end, il, body)
                    if label not in self.met and cand not in self.seen:
                        self._past(label, cand, raw[body:pos])
                continue
            if cand in self.seen:  # met in an earlier bucket: a match there is best or in later already
                if not earlier and self.seen[cand] is not None:
                    here.append(cand)
                continue
            m, other = self._verify(cand, raw[body:pos])
            if m is None:
                continue
            if earlier:
                anchored = self._earlier(cand, m, other, _entry_label(raw, id_end, il, body)) or anchored
            else:
                self.res.later.append(Found(cts, cid, m))
                self.kept[cand] = other
                here.append(cand)
        if here and anchored:
            self.shared.append((self.best, here))
        return end if spot == -1 else spot

    def _bridges(self) -> None:
        """Verify, for each label met past the earliest match, its earliest entry met there."""
        for label, (cand, inline) in sorted(self.past.items(), key=lambda kv: kv[1][0]):
            if label in self.met or cand in self.seen:
                continue
            m, other = self._verify(cand, inline)
            if m is not None:
                self._earlier(cand, m, other, label)

    def result(self, window: int) -> ProbeResult:
        if self.past:
            self._bridges()
        res, best = self.res, self.best
        if self.shared and best is not None:
            later = [y for b, ys in self.shared if b == best for y in ys]
            res.covered = BucketIndex.covered(window, best, self.mine, self.kept, later, self.verify)
        res.later.sort(key=lambda f: f.order)
        res.label = self.matched[best][1] if best is not None else label_of(self.ident)
        if len(self.matched) < 2:
            return res
        bridges: dict[bytes, Found] = {}  # one per label, the earliest; none of the earliest match's
        for cand in sorted(self.matched):
            found, label = self.matched[cand]
            if cand != best and label != res.label:
                bridges.setdefault(label, found)
        res.bridges = list(bridges.values())
        return res


class BucketIndex:
    def __init__(self, data: MutableMapping[bytes, bytes], *, window: int, max_bucket: int = 1000,
                 ref_cache: int = 0):
        self.data = data
        self.window = window
        self.max_bucket = max_bucket
        self.watermark: int | None = None
        self.observe: Callable[[int], None] | None = None  # bucket bytes after each write (metrics)
        # the payloads under P read last (up to ``ref_cache`` a detector; the oldest read goes
        # first). Why: a crowded bucket (a common n-gram of a campaign-heavy SMS stream) is walked
        # by every probe that shares it, and past its first INLINE_ENTRIES entries each entry looked
        # at is a read under P: 2.0M reads at 300,000 SMS of ``bench/scan_memory.py``'s set, 1.6M of
        # them from RocksDB, which made ``scan`` a fifth slower than when those payloads were
        # inline; 13,000 with 32,768 kept. Exact while every write and delete of a P key goes through
        # this object (``_insert``, ``sweep``), as in ``scan``; the workers leave it off, since a
        # rebalance brings in partitions that another worker wrote.
        self.ref_cache = ref_cache
        self._refs: dict[int, dict[str, bytes]] = {}  # det -> id -> payload (no key to build for a hit)

    @staticmethod
    def bucket_key(det: int, key: int) -> bytes:
        return _BUCKET_KEY.pack(BUCKET, det, key)

    @staticmethod
    def payload_key(det: int, ident: str) -> bytes:
        return b"P" + bytes([det]) + ident.encode("utf-8", "surrogatepass")

    @staticmethod
    def payload_ref(key: bytes) -> int:
        """The ``ref_hash`` of the (det, ident) whose ``payload_key`` is ``key``."""
        return ref_hash(key[1], key[2:].decode("utf-8", "surrogatepass"))

    def _payload(self, det: int, ident: str) -> bytes | None:
        """A payload stored under P, not found in ``_refs[det]`` (see ``ref_cache``)."""
        got = self.data.get(self.payload_key(det, ident))
        if got is not None and self.ref_cache:
            refs = self._refs.setdefault(det, {})
            if len(refs) >= self.ref_cache:
                del refs[next(iter(refs))]  # the oldest read
            refs[ident] = got
        return got

    def read(self, det: int, keys: Iterable[int]) -> dict[bytes, bytes | None]:
        """The packed buckets of ``keys`` (None where empty), in one multi-get when the mapping has
        ``get_many`` (RocksDB's MultiGet: one call and sorted lookups instead of one per key)."""
        bks = [self.bucket_key(det, k) for k in keys]
        many = getattr(self.data, "get_many", None)
        return dict(zip(bks, many(bks))) if many is not None else {bk: self.data.get(bk) for bk in bks}

    def probe(self, det: int, ident: str, ts: int, payload: bytes, keys: Iterable[int], verify: Verify,
              *, late: bool = True) -> ProbeResult:
        """The earliest earlier match and (if ``late``) every later match, within the window."""
        return self._probe(self.read(det, keys), det, ident, ts, payload, verify, late)

    def probe_insert(self, det: int, ident: str, ts: int, payload: bytes, keys: Iterable[int], verify: Verify,
                     *, late: bool = True, new_id: bool = False) -> ProbeResult:
        """``probe`` then ``insert`` of the same document, reading each bucket once: a document's
        insert writes exactly the buckets its probe has just read (half the reads, and at 1M
        documents a read is most of an insert's cost). ``new_id``: see ``merge_entry``."""
        raws = self.read(det, keys)
        spots: dict[bytes, int] = {}
        res = self._probe(raws, det, ident, ts, payload, verify, late, spots)
        self._insert(raws, det, ident, ts, payload, res.label, new_id, spots)
        return res

    def _probe(self, raws: dict[bytes, bytes | None], det: int, ident: str, ts: int, payload: bytes,
               verify: Verify, late: bool, spots: dict[bytes, int] | None = None) -> ProbeResult:
        """``spots``: filled with the byte offset where this document's entry goes in each bucket with
        a header that the walk for late matches reads whole (for ``merge_entry``'s ``at``), so that
        the insert does not walk a long bucket a second time (``_insert_at``)."""
        if not any(raws.values()):  # new keys (most of a stream of distinct texts)
            return ProbeResult(label=label_of(ident))
        walk = _Walk(self, det, ident, ts, payload, verify)
        walked: dict[tuple[int, bytes], tuple[bytes, int | None]] = {}  # twin_key -> bucket, its spot
        for bk, raw in raws.items():
            if not raw:
                continue
            # A bucket of the same bytes as one walked so far (a campaign's copies share most of
            # their buckets) would verify nothing new and could not find a better match, so only
            # its spot is taken.
            sig = twin_key(raw)
            twin = walked.get(sig)
            if twin is not None and twin[0] == raw:
                if twin[1] is not None and spots is not None:
                    spots[bk] = twin[1]
                continue
            if raw[:1] == _MAGIC and all_before(raw, walk.me):
                walk.earlier_only(raw)  # a stream in time order: every entry is earlier
                walked[sig] = (raw, None)
                continue
            spot = walk.bucket(raw, late, spots is not None)
            if spot is not None and spots is not None:
                spots[bk] = spot
            walked[sig] = (raw, spot)
        return walk.result(self.window)

    @staticmethod
    def covered(window: int, earliest: tuple[int, str], mine: bytes | None,
                payloads: dict[tuple[int, str], bytes | None], later: list[tuple[int, str]],
                verify: Verify) -> set[tuple[int, str]]:
        """The ``later`` matches (each in a bucket that holds ``earliest``, whose payload is ``mine``;
        theirs are in ``payloads``) whose verdicts will name ``earliest`` or an earlier document, so
        that an offer of the probing one cannot change them: within the window of ``earliest`` and
        matching it.

        Why that holds: the two share a bucket. Whichever of them was indexed second found the
        other there: the later one's probe then answered with ``earliest`` or an earlier match, or
        ``earliest``'s probe met the later one as a late match and offered itself, or left it
        covered by its own earliest match, which the same argument covers (each step to an earlier
        document, so it ends). It needs a ``verify`` that answers the same both ways, as the
        detectors' do (``tests/unit/test_detectors_html_imatch.py``).

        Why: a copy that arrives after later copies of the same message (the workers' prepare
        batches interleave on the index partitions) offered itself to each of them, an ``offer``
        message and a decide step each, though each already named the campaign's first copy."""
        return {y for y in set(later) if y[0] - earliest[0] <= window
                and mine and (other := payloads[y]) and verify(other, mine) is not None}

    def insert(self, det: int, ident: str, ts: int, payload: bytes, keys: Iterable[int],
               label: bytes | None = None) -> None:
        """Index a document under ``label`` (``ProbeResult.label``; by default its own)."""
        self._insert(self.read(det, keys), det, ident, ts, payload, label or label_of(ident))

    def _insert(self, raws: dict[bytes, bytes | None], det: int, ident: str, ts: int, payload: bytes,
                label: bytes, new_id: bool = False, spots: dict[bytes, int] | None = None) -> None:
        """Merge the document's entry, under ``label`` (``ProbeResult.label``), into each bucket."""
        if self.watermark is None or ts > self.watermark:
            self.watermark = ts
        cutoff = self.watermark - self.window
        inline = payload if len(payload) <= INLINE_MAX else b""
        # the buckets whose entry refers to the payload under P though it is small enough to go
        # inline: those that already hold INLINE_ENTRIES (see INLINE_ENTRIES), unless full
        by_ref: set[bytes] = set()
        if inline and len(inline) > REF_FROM:  # (a bucket of fewer bytes than _SMALLEST has fewer entries)
            by_ref = {bk for bk, raw in raws.items()
                      if raw and len(raw) >= _SMALLEST and INLINE_ENTRIES <= count_entries(raw) < self.max_bucket}
        if not inline or by_ref:  # before the entries that refer to it
            self.data[self.payload_key(det, ident)] = payload
            self._refs.get(det, {}).pop(ident, None)  # a revision's payload replaces its earlier one
        me, ref = (ts, ident, label + inline), (ts, ident, label)
        packed, packed_ref = pack_entry(me), pack_entry(ref) if by_ref else b""
        # long buckets merged so far, by their bytes: a bucket of the same bytes (a campaign's, see
        # ``_probe``) takes the same entry at the same spot, so it merges to the same bytes
        merged: dict[tuple[int, bytes], tuple[bytes, bytes]] = {}  # twin_key -> bucket, merged
        for bk, raw in raws.items():
            sig = twin_key(raw) if raw and len(raw) >= _TWIN_FROM else None
            twin = merged.get(sig) if sig else None
            if twin is not None and twin[0] == raw:
                new = twin[1]
            else:
                entry, packed_entry = (ref, packed_ref) if bk in by_ref else (me, packed)
                new = merge_entry(raw, entry, cutoff, self.max_bucket, packed_entry, new_id,
                                  spots.get(bk) if spots else None)
                if raw and sig:
                    merged[sig] = (raw, new)
            if new != raw:
                self.data[bk] = new
            if self.observe is not None:
                self.observe(len(new))

    def sweep(self, before_ts: int) -> int:
        """Drop every entry older than before_ts, and payloads no bucket refers to; return entries dropped.

        Walks the whole mapping: for ``scan`` and tests. Workers rely on pruning on write plus TTL.
        Held in memory meanwhile: a batch of the writes (all of them over a dict), and 8 bytes for
        each document whose payload is stored apart (news MinHash signatures) and that a kept entry
        refers to (``HashSet``). Over a mapping that walks its keys in order (RocksDB), the payload
        keys come after every bucket and are settled in batches as they come; over a dict they are
        listed to the end of the walk.

        Why not a set of the (det, id) that kept entries refer to, and a list of the payload keys, as
        before: about 200 bytes a news document, held over a store of a window and a half of them
        (``bench/sweep_memory.py``)."""
        live = HashSet()
        self._refs.clear()  # the payloads it deletes
        sink = snapshot_sink(self.data)
        in_order = sink is not None and getattr(self.data, "iterates_in_key_order", False)
        payload_keys: list[bytes] = []
        dead: list[tuple[bytes, bytes | None]] = []

        def settle() -> None:  # the payload keys met so far that no kept entry refers to, to delete
            refs = np.fromiter(map(self.payload_ref, payload_keys), np.int64, len(payload_keys))
            gone = ~live.contains(refs)
            dead.extend((k, None) for k, g in zip(payload_keys, gone.tolist()) if g)
            payload_keys.clear()

        def buckets():
            for k, v in self.data.items():
                if k[:1] != b"P":
                    yield k, v
                    continue
                payload_keys.append(k)  # in order: every bucket was walked ("B" < "P")
                if in_order and len(payload_keys) >= 4096:
                    settle()
                    apply_writes(self.data, dead)
                    dead.clear()

        def refer(key: bytes, entries: list[Span]) -> None:
            det = key[1]
            live.update([ref_hash(det, e[1]) for e in entries if inline_size(e[2]) <= 0])  # not inline: under P

        writes, dropped = prune_items(buckets(), before_ts, refer, sink)
        settle()
        writes += dead
        apply_writes(self.data, writes)
        return dropped
