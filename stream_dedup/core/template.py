"""Template lines: lines that recur on many different documents of one source, left out of fingerprints.

A portal's disclaimer under every article ("网友评论仅供其表达个人看法…"), a "related" header, an
SMS gateway's signature or opt-out tail: text that many *different* documents of one source carry
says nothing about which document a page is, and two pages that share only it are no copies. The
table is learned from a sample of the stream itself by ``stream-dedup template build``: the
sample is deduplicated first (a cluster counts once, so a story crawled a hundred times does not
make its own paragraphs template), then a unit of text that the originals of ``min_docs`` or more
clusters of one source carry is template for that source.

The table also lists the short-text grams (``detectors.ngram``) that the originals of
``COMMON_GRAM_DOCS`` clusters carry, on any source: the ngram detector keys a text by them only
where a window has no other gram.

Units. An HTML page: each block of the page (its whole template, not only its main content) and
each line of a block. A text: each line, and the clauses at the start and the end of each line (an
affix: a sender tag, a greeting, a signature, an opt-out tail), of which those that are template
are cut off one by one from either end. Units are compared after ``text.normalize``, by their
64-bit hash.

Why a table built from a sample, not counts kept live by the workers: a verdict must not depend on
the order in which the workers see the events (the convergence invariant: workers and ``scan``
give the same verdicts on the same events). Counts kept as the stream goes change a document's
fingerprint with what came before it, and what came before differs between ``scan`` and each
interleaving of the workers' partitions. A table is the same for every process that loads it, like
the IDF table; rebuild it from a recent sample to follow a source's template.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Iterable
from urllib.parse import urlsplit

from .hashing import hash64_uncached

FORMAT = "stream-dedup template"
VERSION = 1
# units of fewer characters are never template: a two-character clause ("好的") is content
MIN_UNIT_CHARS = 3
# a short-text gram (``detectors.ngram``) that the originals of this many clusters carry is common:
# a bucket of it would hold that many different messages, each verified by every probe that meets it
COMMON_GRAM_DOCS = 100
MAX_COMMON_GRAMS = 20_000
# clauses at either end of a line that may be an affix: a signature and a hotline, a tag and a greeting
AFFIX_CLAUSES = 3
# a clause: a run between these marks (as ``text.normalize`` leaves them) and white space
_CLAUSE = re.compile(r"[^,.!?;:|\[\]()\"'“”《》、。·~*\s]+")


def source_of(source: str | None, url: str | None) -> str:
    """The source a document's template is learned and looked up under: the event's ``source``,
    else its URL's host (without ``www.``), else "" (one shared source)."""
    if source:
        return source
    if url:
        host = (urlsplit(url).hostname or "").lower()
        return host[4:] if host.startswith("www.") else host
    return ""


def normalized_lines(text: str, t2s: bool = True) -> list[str]:
    """The lines of a raw text, each normalized (``text.normalize``), the empty ones left out."""
    from .text import normalize

    return [t for t in (normalize(x, t2s=t2s) for x in text.splitlines()) if t]


def clauses(line: str) -> list[str]:
    """A normalized line cut into clauses at punctuation and white space."""
    return _CLAUSE.findall(line)


def text_units(lines: Iterable[str]) -> set[str]:
    """The units of a text: its lines, and the first and the last ``AFFIX_CLAUSES`` clauses of each
    (normalized lines)."""
    out: set[str] = set()
    for line in lines:
        out.add(line)
        cs = clauses(line)
        if len(cs) > 1:
            out.update(cs[:AFFIX_CLAUSES] + cs[-AFFIX_CLAUSES:])
    return {u for u in out if len(u) >= MIN_UNIT_CHARS}


def html_units(blocks: Iterable[str], t2s: bool = True) -> set[str]:
    """The units of an HTML page: each block of the page (raw text), whole and line by line, normalized."""
    from .text import normalize

    out: set[str] = set()
    for block in blocks:
        out.add(normalize(block, t2s=t2s))
        if "\n" in block:
            out.update(normalized_lines(block, t2s))
    return {u for u in out if len(u) >= MIN_UNIT_CHARS}


def unit_hash(unit: str) -> int:
    return hash64_uncached(unit)


class TemplateTable:
    """Per source, the hashes of its template units; and the short-text grams common on the whole
    stream (``grams``, of ``gram_m`` characters: the ngram detector's keys only as a last resort).
    Loaded by every preparing process."""

    def __init__(self, sources: dict[str, frozenset[int]], min_docs: int, docs: int = 0,
                 grams: frozenset[int] = frozenset(), gram_m: int = 0):
        self.sources = sources
        self.min_docs = min_docs
        self.docs = docs  # the deduplicated documents it was learned from
        self.grams = grams
        self.gram_m = gram_m

    def grams_for(self, m: int) -> frozenset[int]:
        """The common grams, if they are of ``m`` characters (the ngram detector's ``m``)."""
        return self.grams if m == self.gram_m else frozenset()

    def __len__(self) -> int:
        return sum(len(s) for s in self.sources.values())

    def units_of(self, source: str) -> frozenset[int]:
        return self.sources.get(source, frozenset())

    def contains(self, source: str, unit: str) -> bool:
        """Whether the normalized ``unit`` is template for ``source``."""
        return unit_hash(unit) in self.units_of(source)

    def keep(self, source: str, blocks: list[str], normalized: list[str], t2s: bool = True) -> list[bool]:
        """For each of an HTML page's blocks (raw text, and ``normalized``), whether it is not
        template of its source: neither the block nor each of its lines is a template unit."""
        units = self.units_of(source)

        def template(block: str, norm: str) -> bool:
            if unit_hash(norm) in units:
                return True
            lines = normalized_lines(block, t2s)
            return len(lines) > 1 and all(unit_hash(t) in units for t in lines)

        return [not template(b, n) for b, n in zip(blocks, normalized)]

    def strip_text(self, source: str, lines: list[str]) -> list[str]:
        """A text's normalized lines without template lines, and each line without the template
        clauses at its start and end. Never strips a text to nothing: a text that is all template
        (an SMS of nothing but a gateway's tail) stays whole."""
        units = self.units_of(source)
        if not units:
            return lines
        kept = [line for line in lines if unit_hash(line) not in units]
        out = [_strip_affixes(line, units) for line in kept]
        out = [line for line in out if line]
        return out or lines

    def save(self, path: str | Path) -> None:
        doc = {"format": FORMAT, "version": VERSION, "min_docs": self.min_docs, "docs": self.docs,
               "sources": {s: sorted(f"{h:016x}" for h in hs) for s, hs in sorted(self.sources.items())},
               "gram_m": self.gram_m, "grams": sorted(f"{h:016x}" for h in self.grams)}
        Path(path).write_text(json.dumps(doc, ensure_ascii=False, indent=0), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "TemplateTable":
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a template table ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise ValueError(f"{path}: not a template table of version {VERSION} (stream-dedup template build)")
        sources = {s: frozenset(int(h, 16) for h in hs) for s, hs in doc["sources"].items()}
        grams = frozenset(int(h, 16) for h in doc.get("grams", ()))
        return cls(sources, int(doc["min_docs"]), int(doc.get("docs", 0)), grams, int(doc.get("gram_m", 0)))


def _strip_affixes(line: str, units: frozenset[int]) -> str:
    """``line`` without its first clause while that is template, then its last likewise; at least
    one clause stays."""
    cs = list(_CLAUSE.finditer(line))
    if len(cs) < 2:
        return line
    lo, hi = 0, len(cs)
    while hi - lo > 1 and unit_hash(cs[lo].group()) in units:
        lo += 1
    while hi - lo > 1 and unit_hash(cs[hi - 1].group()) in units:
        hi -= 1
    if (lo, hi) == (0, len(cs)):
        return line
    return line[cs[lo].start() if lo else 0:cs[hi - 1].end() if hi < len(cs) else len(line)]


class TemplateLearner:
    """Counts, per source, how many clusters' originals carry each unit; bounded by ``max_units``
    counters (when full, the rarest are dropped: a template unit recurs)."""

    def __init__(self, min_docs: int = 5, max_per_source: int = 2000, max_units: int = 4_000_000,
                 gram_m: int = 4, gram_docs: int = COMMON_GRAM_DOCS, max_grams: int = MAX_COMMON_GRAMS):
        self.min_docs = min_docs
        self.max_per_source = max_per_source
        self.max_units = max_units
        self.counts: Counter[tuple[str, int]] = Counter()
        self.docs = 0
        self.gram_m, self.gram_docs, self.max_grams = gram_m, gram_docs, max_grams
        self.gram_counts: Counter[int] = Counter()

    def add(self, source: str, units: Iterable[str], grams: Iterable[int] = ()) -> None:
        """One cluster's original: its source, its units, and (a short text) its grams' hashes."""
        self.docs += 1
        self.counts.update((source, unit_hash(u)) for u in set(units))
        self.gram_counts.update(set(grams))
        if len(self.counts) > self.max_units:
            self.counts = _pruned(self.counts, self.max_units)
        if len(self.gram_counts) > self.max_units:
            self.gram_counts = _pruned(self.gram_counts, self.max_units)


    def table(self) -> TemplateTable:
        by_source: dict[str, list[tuple[int, int]]] = {}
        for (source, h), n in self.counts.items():
            if n >= self.min_docs:
                by_source.setdefault(source, []).append((n, h))
        sources = {s: frozenset(h for _, h in sorted(hs, reverse=True)[:self.max_per_source])
                   for s, hs in by_source.items()}
        common = sorted(((n, h) for h, n in self.gram_counts.items() if n >= self.gram_docs), reverse=True)
        grams = frozenset(h for _, h in common[:self.max_grams])
        return TemplateTable(sources, self.min_docs, self.docs, grams, self.gram_m if grams else 0)


def _pruned(counts: Counter, bound: int) -> Counter:
    """``counts`` down to three quarters of ``bound``: the keys seen once go first, then twice..."""
    floor = 1
    while len(counts) > bound * 3 // 4:
        counts = Counter({k: n for k, n in counts.items() if n > floor})
        floor += 1
    return counts
