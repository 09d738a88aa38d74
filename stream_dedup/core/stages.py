"""The stage functions of the dataflow, shared by ``scan``, the ``Deduper`` and the workers.

    prepare ──► probes ──► index ─────────────► answers ──► decide
    (admit_id)  (by band-key partition: the    (by doc id)
                 document's probes; by digest:
                 its exact check)

``prepare`` sends a document's probes to the index partitions and its digest to the partition that
owns it, all on one topic (``routing.fan_out``, ``wire.index_item``): the index stage does the exact
check as one more probe, so every document crosses two hops from page to verdict.

``Engine`` calls these in one process (one partition of everything); the Kafka workers call the
same functions on the partitions they own and carry the messages of ``wire`` between them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, MutableMapping, Sequence, TypeVar

from . import hashing, tokenize
from .detectors import Detector, build_detectors
from .document import Doc, Limits, Rejected, make_doc, parse_event, validate
from .exact import ExactStore
from .idf import load_idf
from .index import BucketIndex
from .template import TemplateTable, source_of
from .tokenize import WordTokenizer
from .verdict import Candidate, Cluster, DocState, Verdict
from .wire import Prepared, Probe, ToDecide, _decode, _dumps, _encode

if TYPE_CHECKING:
    from ..config import Settings


class Preparer:
    """Stateless: validate, normalize, fingerprint with every detector that applies."""

    def __init__(self, settings: "Settings", *, clock: Callable[[], float] | None = None):
        """``clock`` (seconds, as ``time.time``): check an event's ts against it (``scan``, the
        ``Deduper``), not against the ``default_ts`` it comes with (a worker's: the record's broker
        timestamp)."""
        t = settings.text
        self.settings = settings
        self.clock = clock
        self.limits = Limits(max_bytes=max(t.max_chars * 4, 1 << 20), max_chars=t.max_chars,
                             max_html_depth=t.max_html_depth, max_future_ms=settings.engine.max_future_ms)
        hashing.set_cache_size(t.token_cache)
        tokenize.set_cache_size(t.token_cache)
        self.tokenizer = WordTokenizer.from_settings(t)
        self.idf = load_idf(str(t.idf) if t.idf else None)
        self.template = TemplateTable.load(t.template) if t.template else None
        common = self.template.grams_for(settings.ngram.m) if self.template else frozenset()
        self.detectors: list[Detector] = build_detectors(settings, self.tokenizer, self.idf, common)

    def warm(self, html: bool = True) -> float:
        """Load now what the first documents would otherwise load: the segmenter's dictionary, OpenCC's
        tables, the HTML parser (``html``). A worker calls it before it joins its group: else the
        first batch of every partition it is given waits behind those loads (the Kafka benchmark saw
        seconds of latency at the start of a run). ``scan`` leaves out the HTML parser (trafilatura's
        import and stop lists): a text-only file never needs it. Returns the seconds
        it took."""
        t0 = time.perf_counter()
        self.tokenizer.words("预热分词词典")
        samples: list[tuple[bytes | str | dict, int | None]] = [
            ({"id": "warm-text", "text": "預熱：載入分詞詞典與繁簡轉換表，讓第一批文件不必等待。", "ts": 1}, None)]
        if html:
            samples.append(({"id": "warm-html", "ts": 1,
                             "html": "<html><body><article><p>预热：载入网页解析器。</p></article></body></html>"}, None))
        self.prepare_many(samples)
        return time.perf_counter() - t0

    def document(self, raw: bytes | str | dict, default_ts: int | None = None) -> Doc:
        event = parse_event(raw, self.limits)
        now = int(self.clock() * 1000) if self.clock is not None else default_ts
        ident, ts, kind, body = validate(event, default_ts, self.limits, now)
        source = source_of(event.get("source"), event.get("url")) if self.template is not None else ""
        return make_doc(ident, ts, kind, body, title=event.get("title"), rank=event.get("rank"),
                        t2s=self.settings.text.traditional_to_simplified, limits=self.limits, source=source,
                        template=self.template)

    def sketch(self, doc: Doc) -> Prepared:
        sketches = []
        for det in self.detectors if doc.note is None else ():  # a noted page is not compared
            if det.applies(doc):
                s = det.sketch(doc)
                if s is not None and s.keys:
                    sketches.append((det.code, s.keys, s.payload))
        return Prepared(doc.id, doc.ts, doc.digest, doc.kind, sketches, doc.rank, doc.sample, note=doc.note)

    def prepare(self, raw: bytes | str | dict, default_ts: int | None = None) -> Prepared:
        """Raises Rejected with a reason code for anything that cannot be judged."""
        return self.sketch(self.document(raw, default_ts))

    def prepare_many(self, events: list[tuple[bytes | str | dict, int | None]]) -> list[Prepared | Exception]:
        """``prepare`` of each (raw, default_ts) of a stream batch, with each detector's batch work
        (``Detector.prefetch``) done once for all of them; an event that cannot be judged gets its
        exception (``Rejected`` with the reason, or the internal error) in its place."""
        docs: list[Doc | Exception] = []
        for raw, ts in events:
            try:
                docs.append(self.document(raw, ts))
            except Exception as e:  # noqa: BLE001 - handed back: the caller dead-letters it
                docs.append(e)
        ok = [d for d in docs if isinstance(d, Doc)]
        for det in self.detectors:
            try:
                det.prefetch([d for d in ok if det.applies(d)])
            except Exception:  # noqa: BLE001 - only a speed-up: sketch() below meets the error per document
                pass
        out: list[Prepared | Exception] = []
        for d in docs:
            try:
                out.append(d if isinstance(d, Exception) else self.sketch(d))
            except Exception as e:  # noqa: BLE001
                out.append(e)
        return out


def admit_id(seen: bytes | None, p: Prepared) -> bool:
    """Whether ``p`` is the first content of its id, given the digest ``seen`` with it before (None:
    never). True: store ``p.digest`` under the id. False: the same content again (a replay, or a
    producer's retry), judged as before. Raises ``Rejected("id_conflict")`` for other content
    under a known id: the first content of an id stands, as its verdict already says, and the
    second would otherwise be indexed under the first one's id, so later documents would be
    called copies of a page with other text.

    Checked before ``fan_out``, on the id's partition of the page events (``scan``: a dict of every
    id; the workers: a table keyed by id, pages being keyed by id)."""
    if seen is None:
        return True
    if seen != p.digest:
        raise Rejected("id_conflict", f"id {p.id!r} was already seen with different content")
    return False


def exact_stage(store: ExactStore, p: Prepared) -> list[ToDecide]:
    """The exact stage's word on one document (a ``fan_out`` Prepared) for decide: it expects
    ``p.probes`` answers, with the exact original as its candidate when it is a copy."""
    assert p.probes is not None, "exact_stage takes the Prepared that fan_out made"
    expected = p.probes
    if p.note is not None:  # judged without a comparison (a page without article text): not stored
        return [ToDecide("expect", p.id, p.ts, None, expected=expected, rank=p.rank, snippet=p.snippet,
                         seen=p.seen, note=p.note)]
    out = store.process(p.digest, p.ts, p.id)
    msgs: list[ToDecide] = []
    if out.first:
        msgs.append(ToDecide("expect", p.id, p.ts, None, expected=expected, rank=p.rank, snippet=p.snippet,
                             seen=p.seen))
        if out.revise:  # later copies seen before this original
            me = Candidate(p.ts, p.id, "exact", "exact", 1.0, 0, -1)
            msgs += [ToDecide("offer", ident, ts, me) for ts, ident in out.revise]
    else:
        assert out.original is not None
        msgs.append(ToDecide("expect", p.id, p.ts, Candidate(out.original[0], out.original[1], "exact", "exact",
                                                             1.0, 0, -1), expected=expected, rank=p.rank,
                                  snippet=p.snippet, seen=p.seen))
    return msgs


_T = TypeVar("_T")


class IndexStage:
    def __init__(self, index: BucketIndex, detectors: Iterable[Detector]):
        dets = list(detectors)
        self.index = index
        self.by_code = {d.code: d for d in dets}
        self.priority = {d.code: i for i, d in enumerate(dets)}
        self.candidates = 0

    @staticmethod
    def in_order(batch: Iterable[tuple[_T, Probe]]) -> list[tuple[_T, Probe]]:
        """A batch's probes (each with what its driver keeps for it: the workers' event) in (ts, id)
        order, whatever message brought each, to ``process`` in that order.

        Why: the workers' prepare batches interleave on the index partitions, so a probe often
        comes after later documents of its buckets; the index then walks those buckets' entries
        for late matches, offers this document to each, and splices its entry in, where in order
        it reads up to its earliest match and appends (``BucketIndex._probe``). The verdicts do not
        depend on the order (late matches are offered), only the work does:
        ``tests/unit/test_batches.py`` runs a campaign out of order both ways."""
        return sorted(batch, key=lambda e: e[1].order)

    def process(self, probe: Probe, *, late: bool = True, new_id: bool = False) -> list[ToDecide]:
        """``new_id``: no bucket holds an entry of the probe's id (``BucketIndex.probe_insert``)."""
        best: Candidate | None = None
        msgs: list[ToDecide] = []
        for code, keys, payload in probe.entries:
            det = self.by_code.get(code)
            if det is None:
                raise ValueError(f"probe for detector code {code} that this worker does not run")
            res = self.index.probe_insert(code, probe.id, probe.ts, payload, keys, det.verify, late=late,
                                          new_id=new_id)
            self.candidates += res.candidates
            if res.earliest is not None:
                f = res.earliest
                c = Candidate(f.ts, f.id, "near", det.name, round(f.match.similarity, 4), f.match.distance,
                              self.priority[code])
                if best is None or c.rank() < best.rank():
                    best = c
            for f in res.bridges:  # earlier matches in other clusters: this document joins them
                msgs.append(ToDecide("offer", probe.id, probe.ts, Candidate(f.ts, f.id, "near", det.name,
                                                                         round(f.match.similarity, 4), f.match.distance,
                                                                         self.priority[code])))
            for f in res.later:
                if f.order in res.covered:  # its verdict names an earlier document than this one
                    continue
                msgs.append(ToDecide("offer", f.id, f.ts, Candidate(probe.ts, probe.id, "near", det.name,
                                                                     round(f.match.similarity, 4), f.match.distance,
                                                                     self.priority[code])))
        msgs.insert(0, ToDecide("answer", probe.id, probe.ts, best, part=probe.partition))
        return msgs


class DocStates(MutableMapping):
    """DocState by id over a bytes mapping (a Faust table in the workers), MessagePack values.

    A state MessagePack cannot carry (a lone surrogate) is stored as JSON."""

    def __init__(self, data: MutableMapping):
        self.data = data

    @staticmethod
    def decode(raw: bytes) -> DocState:
        """A stored state (``encode``'s bytes)."""
        return _decode(raw, DocState.from_wire, DocState.from_json)

    def __getitem__(self, ident: str) -> DocState:
        raw = self.data.get(ident.encode("utf-8", "surrogatepass"))
        if raw is None:
            raise KeyError(ident)
        return self.decode(raw)

    def get(self, ident: str, default=None):  # type: ignore[override]
        raw = self.data.get(ident.encode("utf-8", "surrogatepass"))
        return default if raw is None else self.decode(raw)

    def __setitem__(self, ident: str, st: DocState) -> None:
        self.data[ident.encode("utf-8", "surrogatepass")] = self.encode(st)

    @staticmethod
    def encode(st: DocState) -> bytes:
        """The bytes a state is stored as: the workers' table values, the embedded engine's spilled
        states (``Engine``)."""
        return _encode(st.to_wire(), lambda: _dumps(st.to_json()))

    @property
    def write_many(self) -> Callable[[Any, list[tuple[str, DocState | None]]], None] | None:
        """The underlying mapping's ``write_many`` (see ``store.WriteBack.flush``) over states, if it has one."""
        inner = getattr(self.data, "write_many", None)
        if inner is None:
            return None

        def write(scope: Any, items: list[tuple[str, DocState | None]]) -> None:
            inner(scope, [(i.encode("utf-8", "surrogatepass"), None if st is None else self.encode(st))
                          for i, st in items])
        return write

    def __delitem__(self, ident: str) -> None:
        del self.data[ident.encode("utf-8", "surrogatepass")]

    def __iter__(self):
        return (k.decode("utf-8", "surrogatepass") for k in self.data)

    def __len__(self) -> int:
        return len(self.data)


MAX_CHILDREN = 10_000  # documents whose match one document records (see ``DecideStage._tree``)


@dataclass
class DecideStage:
    """Per document: gather the stages' word into a verdict; per original: keep its cluster.

    After ``apply``, ``outbox`` holds join/leave messages for originals (the driver routes them back
    here by their id) and ``cluster`` the original's changed cluster record, if any.

    The state records which verdict was emitted, so the Kafka workers must not store it before that
    verdict (and the cluster messages) are delivered: after a crash in between, the replayed message
    would find "already emitted" and the verdict would never go out. They give it ``states`` behind
    a ``store.WriteBack`` flushed after delivery: a crash before the flush replays into the old state
    and emits again (a duplicate at worst, which at-least-once allows).
    """

    states: MutableMapping[str, DocState] = field(default_factory=dict)
    last: DocState | None = None  # the state ``apply`` just produced (saves the driver a second read)
    outbox: list[ToDecide] = field(default_factory=list)
    _clustered: DocState | None = None  # the state whose cluster record the last ``apply`` changed
    first_seen: int | None = None  # after ``apply``: the page record time of a first verdict it emitted

    @property
    def cluster(self) -> Cluster | None:
        """The cluster record the last ``apply`` changed, if any; built when asked (read it before
        the next ``apply``): ``scan`` never asks, and a campaign's original changes on every copy."""
        return None if self._clustered is None else self._clustered.cluster()

    def _store(self, ident: str, st: DocState) -> None:
        self.states[ident] = st

    def apply(self, msg: ToDecide, answers: Sequence[ToDecide] = ()) -> Verdict | None:
        """Take in one message; ``answers``: the same document's index answers with it, in one step
        (``Engine.judge`` has a document's expect and answers at once)."""
        self.outbox = []
        self._clustered = None
        self.first_seen = None
        st = self.states.get(msg.id)
        if st is None:
            st = DocState(msg.id)
        if msg.kind in ("join", "leave"):
            self._membership(st, msg)
            self._store(msg.id, st)
            self.last = st
            return None
        # The original's own messages (exact stage, index answers) and its members' joins (decide)
        # come from different agents, in any order: a record published before the original's ts,
        # rank or text were known goes out again once they are (else it can name a lower-ranked member).
        # (only its ts, rank and snippet change the record here, and only these messages set them)
        clustered = st.cluster() if (st.members or st.extra) and (st.ts is None or msg.kind == "expect") else None
        if st.ts is None and msg.ts is not None:
            st.ts = msg.ts
        before = st.emitted[2] if st.emitted else None  # duplicate_of of the last verdict emitted
        was = (st.answered_all, st.reach() if st.answered_all else None)
        heard = self._heard(msg)
        new = self._take_in(st, msg, answers, heard)
        v = st.step()
        if v is not None and v.revision == 0 and st.seen is not None:
            self.first_seen, st.seen = st.seen, None  # measured once, then no longer stored
        if v is not None and v.duplicate_of != before:
            if before is not None:
                self.outbox.append(ToDecide("leave", before, None, member=[st.id, st.ts, st.rank]))
            if v.duplicate_of is not None:
                self.outbox.append(ToDecide("join", v.duplicate_of, None, member=[st.id, st.ts, st.rank]))
        self._spread(st, heard, was, new)
        if clustered is not None:
            now_cluster = st.cluster()
            if now_cluster != clustered:
                self._clustered = st
        self._store(msg.id, st)
        self.last = st
        return v

    def _take_in(self, st: DocState, msg: ToDecide, answers: Sequence[ToDecide],
                 heard: tuple[str, list | None] | None) -> list[Candidate]:
        """Apply what a message (and the answers with it) says to the state (``heard``: its
        ``_heard``); returns the matches it brought that the document had not recorded
        (``DocState.link``)."""
        if msg.kind == "expect":
            st.expected = msg.expected
            if msg.rank is not None:
                st.rank = msg.rank
            if msg.snippet:
                st.snippet = msg.snippet
            if msg.seen is not None:
                st.seen = msg.seen
            if msg.note is not None:
                st.note = msg.note
        elif msg.kind == "answer":
            assert msg.part is not None
            st.answered.add(msg.part)
        elif msg.kind in ("link", "unlink", "root"):
            self._tree(st, msg.kind, heard)
        elif msg.kind != "offer":
            raise ValueError(f"unknown decide message {msg.kind!r}")
        cands = [msg.cand]
        for a in answers:
            if a.kind != "answer" or a.id != msg.id or a.part is None:
                raise ValueError(f"not an answer for {msg.id!r}: {a!r}")
            st.answered.add(a.part)
            cands.append(a.cand)
        new = []
        for c in cands:
            if c is not None and c.id != st.id:
                st.offer(c)
                if st.link(c):
                    new.append(c)
        return new

    def _spread(self, st: DocState, heard: tuple[str, list | None] | None, was: tuple[bool, list | None],
                new: list[Candidate]) -> None:
        """Whole clusters: tell the new matches of ``st`` that it is their neighbour, and every
        other neighbour its cluster's original when that changed (``DocState.reach``). Each
        document takes the earliest original any neighbour tells it and tells the others in turn;
        matches never go away, so every document of a cluster (documents joined by matches)
        settles on its earliest, whatever order the messages come in. A document says nothing
        until its answers are in, then tells all of them at once (``was``: whether they were in
        before this message, and what it knew then; ``heard``: the message's ``_heard``). These
        go after the joins: the answer to a link can move this document on, and its leave must
        find the join it undoes (both go to the same document, in this order)."""
        if not st.answered_all or (not st.links and not st.children) or (now := st.reach()) is None:
            return  # (no neighbour to tell: no link nor root message came, or it would have one)
        complete, reach = was
        linked = [c.id for c in new] if complete else [link[1] for link in st.links]
        told = set(linked)
        self.outbox.extend(ToDecide("link", ident, None, member=[st.id, *now]) for ident in linked)
        if heard is not None:
            sender, said = heard
            if said is not None and now < said:  # the sender knows a later original: answer it
                self.outbox.append(ToDecide("root", sender, None, member=[*now, st.id]))
            told.add(sender)
        if reach is not None and now >= reach:
            return
        for other in [link[1] for link in st.links] + st.children:
            if other not in told:
                told.add(other)
                self.outbox.append(ToDecide("root", other, None, member=[*now, st.id]))

    @staticmethod
    def _heard(msg: ToDecide) -> tuple[str, list | None] | None:
        """(the neighbour, the original it told) of a ``link`` (member [id, ts, id of its original])
        or ``root`` (member [ts, id of the original, sender]); None for the other messages. A link
        of an earlier version ([id]) tells no original."""
        if msg.kind == "link" and msg.member:
            return msg.member[0], list(msg.member[1:3]) if len(msg.member) >= 3 else None
        if msg.kind == "root" and msg.member:
            return msg.member[2], list(msg.member[:2])
        return None

    @staticmethod
    def _tree(st: DocState, kind: str, heard: tuple[str, list | None] | None) -> None:
        """A neighbour's word: a document that matched this one links to it; any neighbour tells the
        original it knows, and the earliest told is kept (``DocState.root``). An ``unlink`` (an
        earlier version's, after a document's match changed) changes nothing: the match holds."""
        if heard is None:
            return
        sender, said = heard
        if kind == "link" and sender not in st.children and len(st.children) < MAX_CHILDREN:
            st.children.append(sender)
        if said is not None and (st.root is None or said < st.root):
            st.root = said

    def _membership(self, st: DocState, msg: ToDecide) -> None:
        assert msg.member is not None
        mid, mts, mrank = msg.member
        old = st.size_canonical()
        if msg.kind == "join":
            st.join(mid, mts, mrank)
        else:
            st.leave(mid)
        if st.size_canonical() != old:
            self._clustered = st


__all__ = ["Preparer", "exact_stage", "admit_id", "IndexStage", "DecideStage", "DocStates", "Rejected"]
