"""Verdicts: the earliest-match rule and revisions, as a small state machine per document.

The rule: a document's match is the EARLIEST (ts, id) document that matches it, exact matches first
(any earlier exact copy beats every near match), then near matches; it is a duplicate of the
earliest member of its cluster (the documents joined by matches, ``DecideStage._spread``). The
verdict is a function of the set of documents in the window, not of arrival order, which is what
lets N workers on shuffled partitions converge on what ``scan`` says.

A document's state gathers: what the exact stage said (and how many probe answers to expect),
the answers of its probes (each names its partition, so a replayed answer is not counted twice),
and late matches (an earlier document that arrived after it). The first verdict is emitted when
every expected answer is in (an exact copy's: when the exact stage has named its original); any
later change emits the next revision. Merging is a minimum over candidates, so every message can
be applied twice with no effect the second time.
"""
from __future__ import annotations

import bisect
import heapq
import json
from dataclasses import dataclass, field
from typing import Any

import msgspec


@dataclass(frozen=True)
class Candidate:
    ts: int
    id: str
    match: str  # "exact" or "near"
    detector: str | None = None
    similarity: float | None = None
    distance: int | None = None
    priority: int = 0  # detector priority (lower wins a tie on the same document)

    def rank(self) -> tuple:
        return (self.ts, self.id, self.priority, -(self.similarity or 0.0))

    def to_list(self) -> list:
        return [self.ts, self.id, self.match, self.detector, self.similarity, self.distance, self.priority]

    @classmethod
    def from_list(cls, v: list) -> "Candidate":
        return cls(*v)


@dataclass
class Verdict:
    id: str
    verdict: str
    match: str | None
    duplicate_of: str | None
    detector: str | None
    similarity: float | None
    distance: int | None
    ts: int
    revision: int
    via: str | None = None  # the document it matched, when that is not its cluster's original
    note: str | None = None  # a unique verdict given without a comparison, and why (``document.NO_ARTICLE``)

    def key(self) -> tuple:
        k = (self.verdict, self.match, self.duplicate_of, self.detector, self.similarity, self.distance, self.via)
        return k + (self.note,) if self.note is not None else k

    def to_dict(self) -> dict[str, Any]:
        d = {"id": self.id, "verdict": self.verdict, "match": self.match, "duplicate_of": self.duplicate_of,
             "detector": self.detector, "similarity": self.similarity, "distance": self.distance,
             "ts": self.ts, "revision": self.revision}
        if self.via is not None:
            d["via"] = self.via
        if self.note is not None:
            d["note"] = self.note
        return d


@dataclass
class DocState:
    id: str
    ts: int | None = None
    expected: int | None = None  # None until the exact stage has spoken
    answered: set[int] = field(default_factory=set)
    exact: Candidate | None = None
    near: Candidate | None = None
    revision: int = -1
    emitted: tuple | None = None
    rank: float | None = None
    members: dict[str, list] = field(default_factory=dict)  # duplicate id -> [ts, rank] (see Cluster)
    extra: int = 0  # members beyond MAX_MEMBERS, counted only
    snippet: str = ""  # start of the text, for cluster records
    # Whole clusters (see ``DecideStage._spread``): ``root`` is [ts, id] of the earliest cluster
    # original a neighbour told; ``children`` the documents that matched this one, ``links`` [ts, id]
    # of those it matched: the neighbours told when the original it knows changes.
    root: list | None = None
    children: list[str] = field(default_factory=list)
    seen: int | None = None  # the page record's timestamp (workers), until its first verdict is out
    note: str | None = None  # judged unique without a comparison, and why (``Verdict.note``)
    links: list[list] = field(default_factory=list)
    # What ``cluster`` needs of ``members``, kept up to date by ``join`` and ``leave`` and rebuilt
    # when None (a state read back from the store, or a leave of one of them); never stored. Why:
    # recomputed per call, a campaign's original (up to MAX_MEMBERS members, every copy a join)
    # spent most of ``scan``'s time in ``cluster``.
    _top: tuple | None = field(default=None, init=False, repr=False, compare=False)  # the members' best _canon_key
    _first: list[tuple[int, str]] | None = field(default=None, init=False, repr=False, compare=False)  # SAMPLE earliest

    @property
    def answered_all(self) -> bool:
        """Every expected answer is in, or an exact copy's original is known: no near match can beat
        that (``fan_out`` probes copies too; their answers need not hold up the verdict)."""
        return self.expected is not None and (self.exact is not None or len(self.answered) >= self.expected)

    @property
    def complete(self) -> bool:
        """Ready for a verdict: every answer is in. A duplicate names the earliest original it knows of
        (``reach``), a revision when it learns of an earlier one: a verdict never waits on another
        document's."""
        return self.answered_all

    def link(self, cand: Candidate) -> bool:
        """Record a match it was told of (its earliest, a bridge, a late earlier document: the cluster
        is joined through any of them); whether it is new. Up to MAX_LINKS."""
        there = [cand.ts, cand.id]
        if there in self.links or len(self.links) >= MAX_LINKS:
            return False
        self.links.append(there)
        return True

    def reach(self) -> list | None:
        """[ts, id] of the earliest document known to be in this one's cluster: itself, its matches,
        the originals its neighbours told (None before any is known)."""
        r = self.root
        for link in self.links:
            if r is None or link < r:
                r = link
        if self.ts is not None and (r is None or r[0] > self.ts or (r[0] == self.ts and r[1] >= self.id)):
            return [self.ts, self.id]
        return r

    @property
    def best(self) -> Candidate | None:
        return self.exact or self.near

    def offer(self, cand: Candidate | None) -> None:
        if cand is None or cand.id == self.id:
            return
        if cand.match == "exact":
            if self.exact is None or cand.rank() < self.exact.rank():
                self.exact = cand
        elif self.near is None or cand.rank() < self.near.rank():
            self.near = cand

    def verdict(self) -> Verdict:
        return self._verdict(self._key())

    def _key(self) -> tuple:
        """What ``Verdict.key`` of the verdict now would be, without building it."""
        best = self.best
        reach = self.reach()
        original = reach[1] if reach is not None else self.id
        if best is None and original == self.id:
            k = ("unique", None, None, None, None, None, None)
            return k + (self.note,) if self.note is not None else k  # a note rides unique verdicts only
        if best is None:  # the first of its cluster's copies, whose later copies joined an earlier cluster
            return ("duplicate", "near", original, None, None, None, None)
        return ("duplicate", best.match, original, best.detector, best.similarity, best.distance,
                best.id if original != best.id else None)

    def _verdict(self, k: tuple) -> Verdict:
        assert self.ts is not None
        return Verdict(self.id, k[0], k[1], k[2], k[3], k[4], k[5], self.ts, self.revision, k[6],
                       k[7] if len(k) > 7 else None)

    def step(self) -> Verdict | None:
        """The verdict to emit now, if complete and different from the last one emitted."""
        if not self.complete:
            return None
        k = self._key()
        if k == self.emitted:
            return None
        self.revision += 1
        self.emitted = k
        return self._verdict(k)

    def join(self, mid: str, ts: int, rank: float | None) -> None:
        """A duplicate names this document as its original (a replayed join changes nothing)."""
        if mid in self.members:
            return
        if len(self.members) >= MAX_MEMBERS:
            self.extra += 1  # a campaign beyond MAX_MEMBERS: counted, not kept (replays may recount)
            return
        self.members[mid] = [ts, rank]
        if self._top is not None:
            self._top = min(self._top, _canon_key(mid, ts, rank))
        if self._first is not None and (len(self._first) < SAMPLE or (ts, mid) < self._first[-1]):
            bisect.insort(self._first, (ts, mid))
            del self._first[SAMPLE:]

    def leave(self, mid: str) -> None:
        """A duplicate's verdict no longer names this document."""
        m = self.members.pop(mid, None)
        if m is None:
            if self.extra:
                self.extra -= 1
            return
        if self._top is not None and self._top[2] == mid:
            self._top = None
        if self._first is not None and (m[0], mid) in self._first:
            self._first = None

    def size_canonical(self) -> tuple[int, str]:
        """``cluster``'s size and canonical page, without building its record."""
        # canonical: the highest rank; without ranks (or on ties) the earliest, i.e. the original
        if self.members and self._top is None:
            self._top = min(_canon_key(i, m[0], m[1]) for i, m in self.members.items())
        best = self._top if self.members else None
        if self.ts is not None:
            me = _canon_key(self.id, self.ts, self.rank)
            best = me if best is None else min(best, me)
        return 1 + len(self.members) + self.extra, best[2] if best is not None else self.id

    def cluster(self) -> "Cluster":
        if self._first is None:
            self._first = heapq.nsmallest(SAMPLE, ((m[0], i) for i, m in self.members.items()))
        size, canonical = self.size_canonical()
        return Cluster(self.id, size, canonical, [i for _, i in self._first], self.ts, self.snippet)

    # --- persistence (decide's state store / changelog)
    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id, "ts": self.ts, "expected": self.expected, "answered": sorted(self.answered),
            "exact": self.exact.to_list() if self.exact else None,
            "near": self.near.to_list() if self.near else None, "revision": self.revision,
            "emitted": list(self.emitted) if self.emitted else None}
        if self.rank is not None:
            d["rank"] = self.rank
        if self.members or self.extra:
            d["members"], d["extra"] = self.members, self.extra
        if self.snippet:
            d["snippet"] = self.snippet
        if self.root is not None:
            d["root"] = self.root
        if self.children:
            d["children"] = self.children
        if self.seen is not None:
            d["seen"] = self.seen
        if self.note is not None:
            d["note"] = self.note
        if self.links:
            d["links"] = self.links
        return d

    def to_wire(self) -> list:
        """The fields as a list, for MessagePack (``stages.DocStates``)."""
        return [self.id, self.ts, self.expected, sorted(self.answered), self.exact.to_list() if self.exact else None,
                self.near.to_list() if self.near else None, self.revision,
                list(self.emitted) if self.emitted else None, self.rank, self.members or None, self.extra,
                self.snippet, self.root, self.children or None, self.seen, self.note, self.links or None]

    @classmethod
    def from_wire(cls, v: list) -> "DocState":
        return cls(v[0], v[1], v[2], set(v[3]), Candidate.from_list(v[4]) if v[4] else None,
                   Candidate.from_list(v[5]) if v[5] else None, v[6], tuple(v[7]) if v[7] else None, v[8],
                   v[9] or {}, v[10], v[11], v[12], v[13] or [], v[14] if len(v) > 14 else None,
                   v[15] if len(v) > 15 else None, (v[16] or []) if len(v) > 16 else [])

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "DocState":
        return cls(d["id"], d["ts"], d["expected"], set(d["answered"]),
                   Candidate.from_list(d["exact"]) if d["exact"] else None,
                   Candidate.from_list(d["near"]) if d["near"] else None, d["revision"],
                   tuple(d["emitted"]) if d["emitted"] else None, d.get("rank"), d.get("members", {}),
                   d.get("extra", 0), d.get("snippet", ""), d.get("root"), d.get("children", []), d.get("seen"),
                   d.get("note"), d.get("links", []))


MAX_MEMBERS = 256
MAX_LINKS = 64  # matches a document records (its neighbours in its cluster)
SAMPLE = 10  # members a cluster record names


def _canon_key(ident: str, ts: int, rank: float | None) -> tuple[float, int, str]:
    """Smallest wins the canonical page: the highest rank, then the earliest (ts, id)."""
    return (-(rank if rank is not None else float("-inf")), ts, ident)


@dataclass
class Cluster:
    """How many copies of a page exist: the original, every document whose verdict names it, and the
    canonical page among them (highest ``rank`` event field, else the original). Published on the
    ``clusters`` topic, keyed by the original's id, whenever it changes."""

    id: str  # the original (earliest) document
    size: int
    canonical: str
    members: list[str]  # up to 10 duplicates, earliest first
    ts: int | None
    text: str = ""  # the start of the original's text as sent (white space collapsed)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "size": self.size, "canonical": self.canonical, "members": self.members, "ts": self.ts,
                "text": self.text}


_JSON = msgspec.json.Encoder()


def json_record(obj: dict) -> bytes:
    """A verdict or cluster record as the verdicts and clusters topics and ``scan``'s output carry it:
    compact UTF-8 JSON (msgspec, several times faster than json.dumps). A lone surrogate in an id or text (not UTF-8) is written
    with JSON's ASCII escapes instead."""
    try:
        return _JSON.encode(obj)
    except UnicodeEncodeError:
        return json.dumps(obj).encode()
