"""Page events in, prepared documents out: validation, normalization, the exact digest.

Validation mirrors ``topics/schemas/page_event.schema.json`` (a test proves they agree) but is
hand-written for two reasons: every rejection needs a stable reason code for the dead-letter
topic, and it runs on every event in the hot path.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from .hashing import digest128
from .text import drop_fillers, normalize

if TYPE_CHECKING:
    from .template import TemplateTable


#: Every reason code a dead-letter record can carry (README: "Bad input and limits").
REASONS = frozenset({"not_json", "bad_utf8", "not_object", "oversized", "missing_id", "bad_id", "missing_text",
                     "bad_text", "bad_ts", "missing_ts", "bad_rank", "empty_text", "bad_html", "html_too_deep",
                     "id_conflict", "bad_title", "bad_url", "bad_source"})


class Rejected(ValueError):
    """An event that cannot be judged; ``reason`` is a stable code for the dead-letter topic."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self):  # pickled whole: ``scan --jobs`` hands rejections back from its worker processes
        return (Rejected, (self.reason, self.detail))


@dataclass
class Doc:
    """One prepared document: what every detector and stage reads."""

    id: str
    ts: int  # epoch ms (integer): (ts, id) orders documents everywhere
    text: str  # normalized
    digest: bytes  # 16 bytes, mmh3 128 of ``text``
    kind: str = "text"  # "text" or "html"
    title: str | None = None
    rank: float | None = None
    html_blocks: list[tuple[int, str]] | None = None  # (level, normalized text) for HTML pages
    cache: dict[str, Any] = field(default_factory=dict, repr=False)  # per-doc features (words, skeleton)
    sample: str = ""  # the start of the text as sent (HTML: as extracted), what a cluster record shows
    note: str | None = None  # why it is judged unique without a comparison (NO_ARTICLE), else None

    @property
    def order(self) -> tuple[int, str]:
        return (self.ts, self.id)


SAMPLE_CHARS = 60
# the note of an HTML page whose main content holds no article text (``html.has_article``)
NO_ARTICLE = "no_article_text"
# the note of an HTML page whose article text is all template lines of its source (``text.template``)
TEMPLATE_ONLY = "template_only"


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 8 * 1024 * 1024
    max_chars: int = 2_000_000
    max_html_depth: int = 200
    max_future_ms: int = 0  # 0: no bound (see ``validate``'s ``now``)


# msgspec's JSON decoder, several times faster than the UTF-8 decode and ``json.loads``
_decode_json = msgspec.json.Decoder().decode


def parse_event(raw: bytes | str | dict, limits: Limits = Limits()) -> dict:
    """Bytes or str of one JSON event -> dict, or Rejected.

    msgspec decodes first; whatever it refuses (NaN, a lone surrogate escape, an integer past its
    range, any malformed input) or decodes to other than an object goes through the standard
    library, whose answer stands, so the events accepted and the reasons given are ``json.loads``'s
    (except an integer too long for ``int``: a ``HugeInt``, rejected for the field that holds it):
    where msgspec decodes an object, it is the object ``json.loads`` gives
    (``tests/unit/test_bad_input.py`` holds the cases)."""
    if isinstance(raw, dict):
        return raw
    if len(raw) > limits.max_bytes:
        unit = "bytes" if isinstance(raw, bytes) else "chars"
        raise Rejected("oversized", f"{len(raw)} {unit} > {limits.max_bytes}")
    try:
        fast = _decode_json(raw)
    except Exception:  # noqa: BLE001 - the standard library below decides, and names the reason
        fast = None
    if type(fast) is dict:
        return fast
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Rejected("bad_utf8", str(e)) from None
    try:
        obj = json.loads(raw, parse_int=_parse_int)
    except RecursionError:
        raise Rejected("not_json", "nested too deeply") from None
    except ValueError as e:
        raise Rejected("not_json", str(e)) from None
    if not isinstance(obj, dict):
        raise Rejected("not_object", f"expected a JSON object, got {type(obj).__name__}")
    return obj


class HugeInt:
    """An integer literal longer than Python converts (``sys.get_int_max_str_digits``, 4,300 digits):
    valid JSON, so the event is parsed and the field that holds it is the one rejected."""

    def __init__(self, literal: str):
        self.literal = literal
        self.digits = len(literal.lstrip("-"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HugeInt) and other.literal == self.literal

    def __hash__(self) -> int:
        return hash(self.literal)

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _parse_int(literal: str) -> int | HugeInt:
    try:
        return int(literal)
    except ValueError:
        return HugeInt(literal)


def _str_field(event: dict, name: str) -> str | None:
    v = event.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise Rejected(f"bad_{name}", f"{name} must be a string, got {type(v).__name__}")
    return v


def validate(event: dict, default_ts: int | None = None, limits: Limits = Limits(),
             now: int | None = None) -> tuple[str, int, str, str]:
    """Check the event against the page-event contract; return (id, ts, kind, body).

    ``now``: the time the event's ts is checked against (its record's broker timestamp, or the
    clock): a ts more than ``limits.max_future_ms`` ahead of it is rejected, since a document
    far in the future would move the event-time window past every other one."""
    if "id" not in event or event["id"] is None:
        raise Rejected("missing_id", "the event has no id")
    ident = event["id"]
    if isinstance(ident, float) and ident.is_integer():
        ident = int(ident)  # JSON Schema counts 3.0 as an integer; so do we
    if isinstance(ident, HugeInt):
        raise Rejected("bad_id", f"id is {ident!r}; an id has 1 to 1024 characters")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        raise Rejected("bad_id", f"id must be a string or integer, got {type(ident).__name__}")
    ident = str(ident)
    if not ident or len(ident) > 1024:
        raise Rejected("bad_id", "id must have 1 to 1024 characters")
    try:
        ident.encode("utf-8")
    except UnicodeEncodeError:
        raise Rejected("bad_id", "id is not valid Unicode (a lone surrogate escape)") from None
    text = _str_field(event, "text")
    html = _str_field(event, "html")
    _str_field(event, "title")
    _str_field(event, "url")
    _str_field(event, "source")
    if text is not None:
        body, kind = text, "text"
    elif html is not None:
        body, kind = html, "html"
    else:
        raise Rejected("missing_text", "the event has neither text nor html")
    if len(body) > limits.max_chars:
        raise Rejected("oversized", f"{len(body)} chars > {limits.max_chars}")
    ts = event.get("ts")
    if ts is None:
        if default_ts is None:
            raise Rejected("missing_ts", "no ts and no default")
        ts = default_ts
    elif isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or abs(ts) > 2**62:
        raise Rejected("bad_ts", f"ts must be a finite number of epoch milliseconds, got {ts!r}")
    if now is not None and limits.max_future_ms and ts > now + limits.max_future_ms:
        raise Rejected("bad_ts", f"ts {int(ts)} is {int(ts - now)} ms ahead of {now}, more than engine.max_future_ms "
                                 f"({limits.max_future_ms})")
    rank = event.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, (int, float)) or not math.isfinite(rank)):
        raise Rejected("bad_rank", "rank must be a finite number")
    return ident, int(math.floor(ts)), kind, body


def make_doc(ident: str, ts: int, kind: str, body: str, *, title: str | None = None, rank: float | None = None,
             t2s: bool = True, limits: Limits = Limits(), source: str = "",
             template: "TemplateTable | None" = None) -> Doc:
    """``template``: the units of ``source`` it holds are left out of the text (``core.template``)."""
    if kind == "html":
        return _html_doc(ident, ts, body, title=title, rank=rank, t2s=t2s, limits=limits, source=source,
                         template=template)
    text = normalize(body, t2s=t2s)
    if template is not None and template.units_of(source) and text:
        from .template import normalized_lines

        lines = normalized_lines(body, t2s)
        kept = template.strip_text(source, lines)
        if kept != lines:
            text = normalize("\n".join(kept), t2s=t2s)
    if not text:
        raise Rejected("empty_text", "no text left after normalization")
    return Doc(ident, ts, drop_fillers(text), digest128(text), "text", title, rank, None, sample=sample_of(body))


def _html_doc(ident: str, ts: int, body: str, *, title: str | None, rank: float | None, t2s: bool, limits: Limits,
              source: str, template: "TemplateTable | None") -> Doc:
    """An HTML page: its main content's blocks (``html.extract_blocks``) without its source's
    template blocks; a page with no article text left is noted, never compared."""
    from .html import extract_blocks, has_article, page_text

    note = None
    raw = extract_blocks(body, max_depth=limits.max_html_depth)
    blocks = [(lvl, normalize(t, t2s=t2s)) for lvl, t in raw]
    if template is not None and template.units_of(source) and has_article(raw):
        keep = template.keep(source, [t for _, t in raw], [t for _, t in blocks], t2s=t2s)
        if not all(keep):
            raw = [r for r, k in zip(raw, keep) if k]
            blocks = [b for b, k in zip(blocks, keep) if k]
            if not has_article(raw):
                note = TEMPLATE_ONLY
    if not note and not has_article(raw):  # nothing to compare: unique, with the reason, if it has text at all
        note = NO_ARTICLE
    if note:
        raw = [(0, page_text(body, max_depth=limits.max_html_depth))]
        blocks = [(lvl, normalize(t, t2s=t2s)) for lvl, t in raw]
    blocks = [(lvl, t) for lvl, t in blocks if t]
    text = " ".join(t for _, t in blocks)
    if not text:
        raise Rejected("empty_text", "no text left after normalization")
    return Doc(ident, ts, text, digest128(text), "html", title, rank, [] if note else blocks,
               sample=sample_of(" ".join(t for _, t in raw)), note=note)


def sample_of(text: str) -> str:
    """The first ``SAMPLE_CHARS`` characters of ``text`` with its runs of white space made one space."""
    return " ".join(text[:SAMPLE_CHARS * 4].split())[:SAMPLE_CHARS]
