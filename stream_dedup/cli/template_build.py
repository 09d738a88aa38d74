"""``stream-dedup template build``: learn a template table (``core.template``) from a sample of the stream.

Two passes over the sample: ``scan`` with the configuration (its template left out) finds the
clusters; then each cluster's original (a ``unique`` verdict) gives its source and units to the
learner, so that copies of one document count once.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Iterable

import msgspec

from ..config import Settings
from ..core.document import Rejected, parse_event, validate
from ..core.template import TemplateLearner, TemplateTable, html_units, normalized_lines, source_of, text_units
from ..core.text import normalize


def build_template(settings: Settings, input_path: str, *, min_docs: int = 5, max_per_source: int = 2000,
                   jobs: int = 0) -> TemplateTable:
    """The template table of the JSONL sample at ``input_path``."""
    plain = msgspec.structs.replace(settings, text=msgspec.structs.replace(settings.text, template=None))
    originals = _originals(plain, input_path, jobs)
    learner = TemplateLearner(min_docs=min_docs, max_per_source=max_per_source, gram_m=plain.ngram.m)
    t2s = plain.text.traditional_to_simplified
    with open(input_path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                event = parse_event(raw)
                ident, ts, kind, body = validate(event, 0)
            except Rejected:
                continue
            if ident not in originals:
                continue
            if kind == "html":
                try:
                    units = html_units(_page_blocks(body, plain.text.max_html_depth), t2s=t2s)
                except Rejected:
                    continue
                grams: Iterable[int] = ()
            else:
                units = text_units(normalized_lines(body, t2s))
                text = normalize(body, t2s=t2s)
                short = len(text) <= plain.text.short_chars * 3 // 2  # the texts the ngram detector keys
                grams = _grams(text, plain.ngram.m) if short else ()
            learner.add(source_of(event.get("source"), event.get("url")), units, grams)
    return learner.table()


def _originals(settings: Settings, input_path: str, jobs: int) -> set[str]:
    """The ids whose verdict is ``unique`` and that were compared (no note): one per cluster."""
    from ..scan import run_scan

    fd, out = tempfile.mkstemp(suffix=".jsonl", prefix="template-verdicts-")
    os.close(fd)
    try:
        run_scan(settings, input_path, out, quiet=True, jobs=jobs)
        latest: dict[str, dict] = {}
        with open(out, "rb") as f:
            for line in f:
                v = json.loads(line)
                if v["id"] not in latest or v.get("revision", 0) >= latest[v["id"]].get("revision", 0):
                    latest[v["id"]] = v
    finally:
        os.unlink(out)
    return {i for i, v in latest.items() if v["verdict"] == "unique" and not v.get("note")}


def _page_blocks(html: str, max_depth: int) -> list[str]:
    """Every block of a page: its main content as extracted, and all its blocks outside scripts,
    navigation, header and footer (what an extraction that missed the body keeps instead)."""
    from ..core.html import all_blocks, extract_blocks, parse

    return [t for _, t in extract_blocks(html, max_depth=max_depth)] + [t for _, t in all_blocks(parse(html, max_depth))]


def _grams(text: str, m: int) -> set[int]:
    """The hashes of a short text's skeleton m-grams as the ngram detector keys them, those with a
    masked number left out (they are last-resort keys already)."""
    from ..core.detectors.ngram import gram_hashes, numbered
    from ..core.text import skeletons

    sk = skeletons(text)[0]
    hashes = gram_hashes(sk, m)
    return set(hashes) - {hashes[i] for i in numbered(sk, m, len(hashes))}
