"""The messages the stages send each other, and their bytes on the internal topics.

Every message is a small dataclass with ``to_bytes``/``from_bytes``: a MessagePack array of its
fields (msgspec). A Kafka message on an internal topic is a MessagePack array of such messages
(``pack_batches``), so a worker sends one message per destination partition per batch. A message
that MessagePack cannot carry (a lone surrogate in a text, an integer beyond 64 bits) travels as
its JSON form, a binary element of the batch.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Callable

import msgspec

from .verdict import Candidate

BATCH_MAX_BYTES = 512 * 1024  # well under Kafka's default 1 MB message limit
_MSGPACK = msgspec.msgpack.Encoder()
_UNPACK = msgspec.msgpack.Decoder()


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
    JSON item; the message classes' ``from_item`` read either."""
    if not message:
        return []
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
    JSON form (``_json``/``_from_json``) where MessagePack cannot carry it."""

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


@dataclass
class Prepared(_Wire):
    """prepare -> exact: everything the later stages need of one document (never its text).

    ``probes``: how many probes ``prepare`` sent to the index itself (``fan_out``), which then
    carries no sketches; None before ``fan_out``. ``seen``: the page record's timestamp (ms) in a
    worker, from which its first verdict's latency is measured; None in ``scan``."""

    id: str
    ts: int
    digest: bytes
    kind: str
    sketches: list[tuple[int, tuple[int, ...], bytes]]  # (detector code, keys, payload)
    rank: float | None = None
    snippet: str = ""  # the start of the text as sent: the sample a cluster record shows
    probes: int | None = None
    seen: int | None = None
    note: str | None = None  # judged unique without a comparison, and why (``document.NO_ARTICLE``)

    def _wire(self) -> list:
        return [self.id, self.ts, self.digest, self.kind, self.sketches, self.rank, self.snippet, self.probes,
                self.seen, self.note]

    def __reduce__(self) -> tuple:
        """Pickled as the arguments of ``__init__``, which are its wire fields in their order. Why:
        ``scan``'s judging process unpickles every document its preparing processes send, and a
        dataclass's default pickle (a bare object, then its ``__dict__`` set field by field) took
        longer to load, in the busier of the two processes."""
        return Prepared, tuple(self._wire())

    def _json(self) -> bytes:
        return _dumps({"id": self.id, "ts": self.ts, "d": _b64(self.digest), "k": self.kind,
                       "s": [[c, list(k), _b64(p)] for c, k, p in self.sketches], "r": self.rank, "x": self.snippet,
                       "n": self.probes, "w": self.seen, "o": self.note})

    @classmethod
    def _from_wire(cls, v: list) -> "Prepared":
        return cls(v[0], v[1], v[2], v[3], [(c, tuple(k), p) for c, k, p in v[4]], v[5], v[6], v[7],
                   v[8] if len(v) > 8 else None, v[9] if len(v) > 9 else None)

    @classmethod
    def _from_json(cls, d: dict) -> "Prepared":
        return cls(d["id"], d["ts"], _unb64(d["d"]), d["k"], [(c, tuple(k), _unb64(p)) for c, k, p in d["s"]],
                   d.get("r"), d.get("x", ""), d.get("n"), d.get("w"), d.get("o"))


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
    kind "offer": a late match, an exact revision for an already-seen document, or a bridge (an
    earlier match of another cluster than the document's earliest match's);
    kind "join"/"leave" (decide -> decide): ``member`` = [id, ts, rank] now names / no longer names
    this document as its original (cluster sizes);
    kind "link" (decide -> decide): ``member`` = [id, ts, id of its cluster's earliest known member]
    matched this document; kind "root": ``member`` = [ts, id, sender], the earliest cluster member
    that the neighbour ``sender`` knows of (``DecideStage._spread``). An "unlink" of an earlier
    version changes nothing.
    ``seen`` (kind "expect", workers only): the page record's timestamp, for the verdict latency.
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
    seen: int | None = None
    note: str | None = None  # kind "expect": judged unique without a comparison, and why

    def _wire(self) -> list:
        return [self.kind, self.id, self.ts, self.cand.to_list() if self.cand else None, self.expected, self.part,
                self.rank, self.member, self.snippet or None, self.seen, self.note]

    def _json(self) -> bytes:
        d: dict[str, Any] = {"t": self.kind, "id": self.id, "ts": self.ts,
                             "c": self.cand.to_list() if self.cand else None, "n": self.expected, "p": self.part}
        if self.rank is not None:
            d["r"] = self.rank
        if self.member is not None:
            d["m"] = self.member
        if self.snippet:
            d["x"] = self.snippet
        if self.seen is not None:
            d["w"] = self.seen
        if self.note is not None:
            d["o"] = self.note
        return _dumps(d)

    @classmethod
    def _from_wire(cls, v: list) -> "ToDecide":
        return cls(v[0], v[1], v[2], Candidate.from_list(v[3]) if v[3] else None, v[4], v[5], v[6], v[7], v[8],
                   v[9] if len(v) > 9 else None, v[10] if len(v) > 10 else None)

    @classmethod
    def _from_json(cls, d: dict) -> "ToDecide":
        return cls(d["t"], d["id"], d["ts"], Candidate.from_list(d["c"]) if d["c"] else None, d["n"], d["p"],
                   d.get("r"), d.get("m"), d.get("x"), d.get("w"), d.get("o"))


def index_item(item: Any) -> Prepared | Probe:
    """One item of the index stage's topic (an ``unpack_batch`` item): a document's probe, or its
    exact check (the ``fan_out`` Prepared, on the partition that owns its digest).

    One topic and one stage for both: every topic a batch is written to costs a message per
    partition and every agent a fetch and a commit per turn. The exact store and the bucket index
    live side by side on the same partition numbers, so the index agent holds both tables.

    Told apart by shape: a Probe is an array of 4 fields, a Prepared of 8; in JSON (a text
    MessagePack cannot carry) a Prepared has a digest ``"d"``, a Probe none."""
    return _index_wire(item) if isinstance(item, list) else _decode(item, _index_wire, _index_json)


def _index_wire(v: list) -> Prepared | Probe:
    return Probe._from_wire(v) if len(v) == 4 else Prepared._from_wire(v)


def _index_json(d: dict) -> Prepared | Probe:
    return Prepared._from_json(d) if "d" in d else Probe._from_json(d)
