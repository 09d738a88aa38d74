"""The stage functions of the dataflow, shared by both drivers.

    prepare ──► probes ──► index ─────────────► answers ──► decide
    (admit_id)  (by band-key partition: the    (by doc id)
                 document's probes; by digest:
                 its exact check)

``prepare`` sends a document's probes to the index partitions and its digest to the partition that
owns it, all on one topic (``fan_out``, ``index_item``): the index stage does the exact check as
one more probe, so every document crosses two hops from page to verdict, and each prepare batch
makes one message per partition, not two (see ``fan_out`` for the history and what it costs).

``Engine`` calls them in one process (one partition of everything); the Kafka workers call the
same functions on the partitions they own and carry the messages below between them over
topics. Every message is a small dataclass with ``to_bytes``/``from_bytes``.

Wire format: a message is a MessagePack array of its fields (bytes as MessagePack binary), and a
Kafka message on an internal topic is a MessagePack array of such messages (``pack_batches``).
Why not JSON, as before: an SMS crossed the internal topics and the decide changelog as about
1.5 KB of JSON with base64 digests and payloads, and encoding and decoding it was 7 % of the
workers' CPU in the two-worker SMS profile; MessagePack (msgspec) takes 0.2 µs to encode a
Prepared against 5 µs for JSON, and a third fewer bytes. Records written by earlier versions
(JSON objects, newline-separated in a batch) still read: a JSON object starts with ``{``, which
no MessagePack array does. A message whose text holds a lone surrogate (MessagePack strings are
UTF-8) travels as its JSON form, as a binary element of the batch.
"""
from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, MutableMapping, TypeVar

import mmh3
import msgspec

from . import hashing, tokenize
from .detectors import Detector, build_detectors
from .document import Doc, Limits, Rejected, make_doc, parse_event, validate
from .exact import ExactStore
from .idf import load_idf
from .index import BucketIndex
from .tokenize import WordTokenizer
from .verdict import Candidate, Cluster, DocState, Verdict

if TYPE_CHECKING:
    from ..config import Settings

SNIPPET_CHARS = 60
_GOLDEN = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1


def key_partition(det: int, key: int, partitions: int) -> int:
    """Which band-key partition owns bucket (det, key): a fixed mix, the same in every process."""
    return ((((key ^ (det << 56)) * _GOLDEN) & _M64) >> 32) % partitions


def id_partition(ident: str, partitions: int) -> int:
    return mmh3.hash(ident.encode("utf-8", "surrogatepass"), signed=False) % partitions


def digest_partition(digest: bytes, partitions: int) -> int:
    """Which partition's exact store owns a digest."""
    return int.from_bytes(digest[:8], "big") % partitions


# ------------------------------------------------------------------------------------ batches
BATCH_MAX_BYTES = 512 * 1024  # well under Kafka's default 1 MB message limit
_MSGPACK = msgspec.msgpack.Encoder()
_UNPACK = msgspec.msgpack.Decoder()
_JSON_ITEM = b"{"[0]


def _array_header(n: int) -> bytes:
    """MessagePack's header of an array of ``n`` elements."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _element(item: bytes) -> bytes:
    """An encoded message as an element of a batch array: a MessagePack message as it is, a JSON
    one (see ``_encode``) as MessagePack binary."""
    if item[:1] != b"{":
        return item
    n = len(item)
    head = b"\xc4" + bytes([n]) if n < 1 << 8 else b"\xc5" + n.to_bytes(2, "big") if n < 1 << 16 else \
        b"\xc6" + n.to_bytes(4, "big")
    return head + item


def byte_slices(sizes: list[int], max_bytes: int) -> list[range]:
    """Consecutive index ranges covering ``sizes`` in order, each summing to at most ``max_bytes``
    (an item larger than that alone in its range).

    Why: the prepare agent takes page events in large batches (a worker's fixed costs per batch and
    per message of the internal topics are then spread over many SMS), but a batch of a thousand
    news pages is a second of work that would hold every other agent of the worker; it prepares and
    sends such a batch slice by slice. ``pack_batches`` cuts the internal messages the same way."""
    out: list[range] = []
    start, total = 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > max_bytes:
            out.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


def pack_batches(items: list[bytes], max_bytes: int = BATCH_MAX_BYTES) -> list[bytes]:
    """Messages for one destination partition, many items each (a MessagePack array of them).

    Why: a Kafka message costs the same fixed work in the broker and in Faust whatever it holds;
    the workers send one message per destination partition per batch, not one per item. An item
    larger than ``max_bytes`` travels alone (in an array of one).
    """
    els = [_element(it) for it in items]
    # 5: the largest array header
    return [_array_header(len(r)) + b"".join(els[r.start:r.stop])
            for r in byte_slices([len(e) for e in els], max_bytes - 5)]


def unpack_batch(message: bytes | None) -> list[Any]:
    """The items of a batch message, each a decoded MessagePack array (a list) or the bytes of a
    JSON item; the message classes' ``from_item`` read either. A batch of an earlier version
    (newline-separated JSON items) gives its items' bytes."""
    if not message:
        return []
    if message[0] == _JSON_ITEM:
        return message.split(b"\n")
    return _UNPACK.decode(message)


def _encode(wire: list, legacy: Callable[[], bytes]) -> bytes:
    """MessagePack of ``wire``; the JSON form (``legacy()``) where MessagePack cannot carry it: a
    lone surrogate in an id or a text (its strings are UTF-8), an integer beyond 64 bits."""
    try:
        return _MSGPACK.encode(wire)
    except (UnicodeEncodeError, OverflowError):
        return legacy()


def _decode(b: bytes, from_wire: Callable[[list], Any], from_json: Callable[[dict], Any]) -> Any:
    return from_json(_loads(b)) if b[:1] == b"{" else from_wire(_UNPACK.decode(b))


class _Wire:
    """A message's bytes: its fields as a list (``_wire``/``_from_wire``) in MessagePack, or its
    JSON form (``_json``/``_from_json``) where MessagePack cannot carry it and in older records."""

    def _wire(self) -> list:
        raise NotImplementedError

    def _json(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def _from_wire(cls, v: list) -> Any:
        raise NotImplementedError

    @classmethod
    def _from_json(cls, d: dict) -> Any:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        return _encode(self._wire(), self._json)

    @classmethod
    def from_bytes(cls, b: bytes) -> Any:
        return _decode(b, cls._from_wire, cls._from_json)

    @classmethod
    def from_item(cls, item: Any) -> Any:
        """One item of ``unpack_batch``: a decoded list, or the bytes of a JSON item."""
        return cls._from_wire(item) if isinstance(item, list) else cls.from_bytes(item)


def _dumps(obj: Any) -> bytes:
    """Compact JSON in UTF-8, not ASCII: a CJK character takes 3 bytes instead of ``\\uXXXX``'s 6.
    Every document's text snippet crosses the fingerprints and answers topics and is stored with its
    decide state (each write goes to the changelog). A lone surrogate in a text survives the round
    trip (surrogatepass); records written with ASCII escapes read the same."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _loads(b: bytes) -> Any:
    return json.loads(b.decode("utf-8", "surrogatepass"))


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(s: str) -> bytes:
    return base64.b64decode(s)


# ------------------------------------------------------------------------------------ messages
@dataclass
class Prepared(_Wire):
    """prepare -> exact: everything the later stages need of one document (never its text).

    ``probes``: how many probes ``prepare`` sent to the index itself (``fan_out``); the message then
    carries no sketches. None in a message from a version before that: the exact stage routes its
    sketches (``exact_stage``), so what older workers left on the topic is still judged. (An older
    worker cannot read this form: stop the old workers before the new ones start, README.)"""

    id: str
    ts: int
    digest: bytes
    kind: str
    sketches: list[tuple[int, tuple[int, ...], bytes]]  # (detector code, keys, payload)
    rank: float | None = None
    snippet: str = ""  # the start of the normalized text: the sample a cluster record shows
    probes: int | None = None

    def _wire(self) -> list:
        return [self.id, self.ts, self.digest, self.kind, self.sketches, self.rank, self.snippet, self.probes]

    def __reduce__(self) -> tuple:
        """Pickled as the arguments of ``__init__``, which are its wire fields in their order. Why:
        ``scan``'s judging process unpickles every document its preparing processes send, and a
        dataclass's default pickle (a bare object, then its ``__dict__`` set field by field) took
        2.9-4.6 µs an SMS to load, against 1.5 so: a few per cent of that process's work, the
        busier of the two."""
        return Prepared, tuple(self._wire())

    def _json(self) -> bytes:
        return _dumps({"id": self.id, "ts": self.ts, "d": _b64(self.digest), "k": self.kind,
                       "s": [[c, list(k), _b64(p)] for c, k, p in self.sketches], "r": self.rank, "x": self.snippet,
                       "n": self.probes})

    @classmethod
    def _from_wire(cls, v: list) -> "Prepared":
        return cls(v[0], v[1], v[2], v[3], [(c, tuple(k), p) for c, k, p in v[4]], v[5], v[6],
                   v[7] if len(v) > 7 else None)

    @classmethod
    def _from_json(cls, d: dict) -> "Prepared":
        return cls(d["id"], d["ts"], _unb64(d["d"]), d["k"], [(c, tuple(k), _unb64(p)) for c, k, p in d["s"]],
                   d.get("r"), d.get("x", ""), d.get("n"))


@dataclass
class Probe(_Wire):
    """prepare -> index: one document's keys that fall in one band-key partition."""

    id: str
    ts: int
    partition: int
    entries: list[tuple[int, tuple[int, ...], bytes]]

    @property
    def order(self) -> tuple[int, str]:
        """(ts, id): the order of the index's entries, and the one it takes a batch's probes in
        (``IndexStage.in_order``)."""
        return (self.ts, self.id)

    def _wire(self) -> list:
        return [self.id, self.ts, self.partition, self.entries]

    def _json(self) -> bytes:
        return _dumps({"id": self.id, "ts": self.ts, "p": self.partition,
                       "e": [[c, list(k), _b64(p)] for c, k, p in self.entries]})

    @classmethod
    def _from_wire(cls, v: list) -> "Probe":
        return cls(v[0], v[1], v[2], [(c, tuple(k), p) for c, k, p in v[3]])

    @classmethod
    def _from_json(cls, d: dict) -> "Probe":
        return cls(d["id"], d["ts"], d["p"], [(c, tuple(k), _unb64(p)) for c, k, p in d["e"]])


@dataclass
class ToDecide(_Wire):
    """exact/index -> decide, keyed by the document it is about.

    kind "expect": the exact stage's word (``expected`` probe answers, ``cand`` an exact original);
    it may arrive before or after the answers it counts;
    kind "answer": one probe's earliest near match (``part`` names the probe's partition);
    kind "offer": a late match or an exact revision for an already-seen document;
    kind "join"/"leave" (decide -> decide): ``member`` = [id, ts, rank] now names / no longer names
    this document as its original (cluster sizes).
    """

    kind: str
    id: str
    ts: int | None
    cand: Candidate | None = None
    expected: int | None = None
    part: int | None = None
    rank: float | None = None
    member: list | None = None
    snippet: str | None = None

    def _wire(self) -> list:
        return [self.kind, self.id, self.ts, self.cand.to_list() if self.cand else None, self.expected, self.part,
                self.rank, self.member, self.snippet or None]

    def _json(self) -> bytes:
        d: dict[str, Any] = {"t": self.kind, "id": self.id, "ts": self.ts,
                             "c": self.cand.to_list() if self.cand else None, "n": self.expected, "p": self.part}
        if self.rank is not None:
            d["r"] = self.rank
        if self.member is not None:
            d["m"] = self.member
        if self.snippet:
            d["x"] = self.snippet
        return _dumps(d)

    @classmethod
    def _from_wire(cls, v: list) -> "ToDecide":
        return cls(v[0], v[1], v[2], Candidate.from_list(v[3]) if v[3] else None, v[4], v[5], v[6], v[7], v[8])

    @classmethod
    def _from_json(cls, d: dict) -> "ToDecide":
        return cls(d["t"], d["id"], d["ts"], Candidate.from_list(d["c"]) if d["c"] else None, d["n"], d["p"],
                   d.get("r"), d.get("m"), d.get("x"))


# ------------------------------------------------------------------------------------ prepare
class Preparer:
    """Stateless: validate, normalize, fingerprint with every detector that applies."""

    def __init__(self, settings: "Settings"):
        t = settings.text
        self.settings = settings
        self.limits = Limits(max_bytes=max(t.max_chars * 4, 1 << 20), max_chars=t.max_chars,
                             max_html_depth=t.max_html_depth)
        hashing.set_cache_size(t.token_cache)
        tokenize.set_cache_size(t.token_cache)
        self.tokenizer = WordTokenizer.from_settings(t)
        self.idf = load_idf(str(t.idf) if t.idf else None)
        self.detectors: list[Detector] = build_detectors(settings, self.tokenizer, self.idf)

    def warm(self, html: bool = True) -> float:
        """Load now what the first documents would otherwise load: the segmenter's dictionary, OpenCC's
        tables, the HTML parser (``html``). A worker calls it before it joins its group: else the
        first batch of every partition it is given waits behind those loads (the Kafka benchmark saw
        seconds of latency at the start of a run). ``scan`` leaves out the HTML parser (trafilatura's
        import and stop lists, about 0.35 s): a text-only file never needs it. Returns the seconds
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
        ident, ts, kind, body = validate(event, default_ts, self.limits)
        return make_doc(ident, ts, kind, body, title=event.get("title"), rank=event.get("rank"),
                        t2s=self.settings.text.traditional_to_simplified, limits=self.limits)

    def sketch(self, doc: Doc) -> Prepared:
        sketches = []
        for det in self.detectors:
            if det.applies(doc):
                s = det.sketch(doc)
                if s is not None and s.keys:
                    sketches.append((det.code, s.keys, s.payload))
        return Prepared(doc.id, doc.ts, doc.digest, doc.kind, sketches, doc.rank, doc.text[:SNIPPET_CHARS])

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


def route_probes(p: Prepared, partitions: int) -> list[Probe]:
    """Group the document's keys by owning partition: one probe per partition, never one per key."""
    if partitions == 1:  # the embedded engine: every key is partition 0's, in the order grouped below
        return [Probe(p.id, p.ts, 0, [(code, tuple(keys), payload) for code, keys, payload in p.sketches
                                      if keys])] if any(keys for _, keys, _ in p.sketches) else []
    by_part: dict[int, dict[int, list[int]]] = {}
    payloads = {}
    for code, keys, payload in p.sketches:
        payloads[code] = payload
        for key in keys:
            by_part.setdefault(key_partition(code, key, partitions), {}).setdefault(code, []).append(key)
    return [Probe(p.id, p.ts, part, [(code, tuple(ks), payloads[code]) for code, ks in dets.items()])
            for part, dets in sorted(by_part.items())]


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


def fan_out(p: Prepared, partitions: int) -> tuple[Prepared, list[Probe]]:
    """Split a prepared document into its probes (to the index partitions) and what the exact stage
    needs (the digest and how many probes went out, no sketches), both sent by prepare at once.

    Why not probe after the exact check, as the design first had it (exact copies never probed):
    a document crossed four topics from page to verdict, and at a steady input every hop adds a
    batch, a fetch and a produce; the exact stage also decoded and re-encoded every document's
    sketches. Now the exact check and the probes run side by side. The price: exact copies are
    probed and inserted into the buckets too. Their own verdicts do not change (an exact match
    beats every near match, ``DocState``). Another document's changes only where the original is
    not there to match first: a copy has its original's text, so its keys and payloads, and a later
    (ts, id) (the exact store names the earliest), so the copy can only be the earliest match
    where the original has left that document's window (or, an HTML copy of a plain-text
    original, on page structure alone); the copy, seen in the window, then counts. A campaign of
    identical copies fills its buckets up to ``max_bucket`` (the earliest entries stay; a full
    bucket is not rewritten, ``index.merge_entry``).

    The Kafka worker sends both on the probes topic, the Prepared to ``digest_partition`` (see
    ``index_item``)."""
    probes = route_probes(p, partitions)
    return Prepared(p.id, p.ts, p.digest, p.kind, [], p.rank, p.snippet, len(probes)), probes


def index_item(item: Any) -> Prepared | Probe:
    """One item of the index stage's topic (an ``unpack_batch`` item): a document's probe, or its
    exact check (the ``fan_out`` Prepared, on the partition that owns its digest).

    Why one topic and one stage for both, where the exact check first had a topic and an agent of
    its own: at a steady input every topic a batch is written to costs a message per partition,
    and every agent a batch, a fetch and a commit per turn, whatever the batch holds. With 6
    partitions and 2 workers this halves the internal messages (0.5-0.7 instead of 1.1-1.4 per SMS
    at a steady 1,200/s) and took 0.07-0.12 core off the workers at a steady 450 news/s
    (bench/HISTORY.md, sixteenth stop). The exact store and the bucket index live side by side on
    the same partition numbers (Faust gives a worker the same partitions of every topic with the
    same count), so the index agent holds both tables.

    Told apart by shape: a Probe is an array of 4 fields, a Prepared of 7 or 8; in JSON (a text
    MessagePack cannot carry) a Prepared has a digest ``"d"``, a Probe none."""
    return _index_wire(item) if isinstance(item, list) else _decode(item, _index_wire, _index_json)


def _index_wire(v: list) -> Prepared | Probe:
    return Probe._from_wire(v) if len(v) == 4 else Prepared._from_wire(v)


def _index_json(d: dict) -> Prepared | Probe:
    return Prepared._from_json(d) if "d" in d else Probe._from_json(d)


# ------------------------------------------------------------------------------------ exact
def exact_stage(store: ExactStore, p: Prepared, partitions: int) -> tuple[list[ToDecide], list[Probe]]:
    """The exact stage's word on one document for decide, and (only for a message from a version
    before ``fan_out``, which carries sketches) the probes to send: of first copies, as then."""
    out = store.process(p.digest, p.ts, p.id)
    probes: list[Probe] = []
    if p.probes is not None:
        expected = p.probes
    else:
        probes = route_probes(p, partitions) if out.first else []
        expected = len(probes)
    msgs: list[ToDecide] = []
    if out.first:
        msgs.append(ToDecide("expect", p.id, p.ts, None, expected=expected, rank=p.rank, snippet=p.snippet))
        if out.revise:  # later copies seen before this original
            me = Candidate(p.ts, p.id, "exact", "exact", 1.0, 0, -1)
            msgs += [ToDecide("offer", ident, ts, me) for ts, ident in out.revise]
    else:
        assert out.original is not None
        msgs.append(ToDecide("expect", p.id, p.ts, Candidate(out.original[0], out.original[1], "exact", "exact",
                                                             1.0, 0, -1), expected=expected, rank=p.rank,
                                  snippet=p.snippet))
    return msgs, probes


# ------------------------------------------------------------------------------------ index
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
            for f in res.later:
                if f.order in res.covered:  # its verdict names an earlier document than this one
                    continue
                msgs.append(ToDecide("offer", f.id, f.ts, Candidate(probe.ts, probe.id, "near", det.name,
                                                                     round(f.match.similarity, 4), f.match.distance,
                                                                     self.priority[code])))
        msgs.insert(0, ToDecide("answer", probe.id, probe.ts, best, part=probe.partition))
        return msgs


# ------------------------------------------------------------------------------------ decide
class DocStates(MutableMapping):
    """DocState by id over a bytes mapping (a Faust table in the workers), MessagePack values.

    States stored as JSON by earlier versions (in a table or its changelog) still read."""

    def __init__(self, data: MutableMapping):
        self.data = data

    @staticmethod
    def decode(raw: bytes) -> DocState:
        """A stored state (``encode``'s bytes, or an earlier version's JSON)."""
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
    cluster: Cluster | None = None

    def _store(self, ident: str, st: DocState) -> None:
        self.states[ident] = st

    def apply(self, msg: ToDecide) -> Verdict | None:
        self.outbox = []
        self.cluster = None
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
        clustered = st.cluster() if st.members or st.extra else None
        if st.ts is None:
            st.ts = msg.ts
        before = st.emitted[2] if st.emitted else None  # duplicate_of of the last verdict emitted
        if msg.kind == "expect":
            st.expected = msg.expected
            if msg.rank is not None:
                st.rank = msg.rank
            if msg.snippet:
                st.snippet = msg.snippet
            st.offer(msg.cand)
        elif msg.kind == "answer":
            assert msg.part is not None
            st.answered.add(msg.part)
            st.offer(msg.cand)
        elif msg.kind == "offer":
            st.offer(msg.cand)
        else:
            raise ValueError(f"unknown decide message {msg.kind!r}")
        v = st.step()
        if v is not None and v.duplicate_of != before:
            if before is not None:
                self.outbox.append(ToDecide("leave", before, None, member=[st.id, st.ts, st.rank]))
            if v.duplicate_of is not None:
                self.outbox.append(ToDecide("join", v.duplicate_of, None, member=[st.id, st.ts, st.rank]))
        if clustered is not None:
            now = st.cluster()
            if now != clustered:
                self.cluster = now
        self._store(msg.id, st)
        self.last = st
        return v

    def _membership(self, st: DocState, msg: ToDecide) -> None:
        assert msg.member is not None
        mid, mts, mrank = msg.member
        old = st.cluster()
        if msg.kind == "join":
            st.join(mid, mts, mrank)
        else:
            st.leave(mid)
        new = st.cluster()
        if (new.size, new.canonical) != (old.size, old.canonical):
            self.cluster = new


__all__ = ["Preparer", "Prepared", "Probe", "ToDecide", "route_probes", "fan_out", "exact_stage", "IndexStage",
           "DecideStage", "DocStates", "Rejected", "key_partition", "id_partition", "digest_partition", "pack_batches",
           "unpack_batch"]
