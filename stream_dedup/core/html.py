"""HTML page -> main-content blocks ``(level, text)``: what the text detectors and the structure detector read.

Main content comes from trafilatura (maintained, used by large crawl pipelines, tuned on news
pages), which drops navigation, link lists, ads and footers; that is what keeps two different
articles in one site's template from looking alike. Its XML output keeps the structure the
structure detector needs, mapped to levels:

    <head rend="h1".."h6">  -> 1..6   headings
    <p> that is all bold    -> 7      emphasis blocks (sub-headings written as bold paragraphs)
    <p>, <item>, <quote>    -> 8      body paragraphs

When trafilatura finds almost nothing (a page whose article sits in script-filled markup), a
plain walk over the page's block elements without page furniture is the fallback, so a page
never loses its text. Before either runs, the parsed tree's nesting depth is checked against
``max_depth``: deeply nested "HTML bombs" are rejected instead of exhausting the stack.
"""
from __future__ import annotations

import copy

from .document import Rejected

HEADING_LEVELS = 6
EMPHASIS = 7
BODY = 8
_MIN_MAIN_CHARS = 80

_DROP = {"script", "style", "noscript", "nav", "header", "footer", "form", "aside", "iframe", "svg",
         "button", "select", "template", "head"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = {"p", "div", "li", "td", "section", "article", "blockquote", "pre", "br", "tr", "dd", "dt"}


def parse(html: str, max_depth: int):
    import lxml.html
    from lxml import etree

    if not html.strip():
        raise Rejected("bad_html", "empty document")
    try:
        root = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError) as e:
        raise Rejected("bad_html", str(e)) from None
    depth = 0
    for event, _ in etree.iterwalk(root, events=("start", "end")):
        depth += 1 if event == "start" else -1
        if depth > max_depth:
            raise Rejected("html_too_deep", f"nesting deeper than {max_depth}")
    return root


def extract_blocks(html: str, *, max_depth: int = 200) -> list[tuple[int, str]]:
    root = parse(html, max_depth)
    blocks = main_content(copy.deepcopy(root))
    if sum(len(t) for _, t in blocks) < _MIN_MAIN_CHARS:
        fallback = all_blocks(root)
        if sum(len(t) for _, t in fallback) > sum(len(t) for _, t in blocks):
            blocks = fallback
    return blocks


def main_content(root) -> list[tuple[int, str]]:
    import trafilatura
    from lxml import etree

    xml = trafilatura.extract(root, output_format="xml", include_formatting=True, include_comments=False,
                              include_tables=False, include_images=False, favor_precision=True)
    if not xml:
        return []
    main = etree.fromstring(xml.encode()).find("main")
    if main is None:
        return []
    for lb in main.iter("lb"):  # a line break inside a paragraph ends a block, as a new paragraph does
        lb.tail = "\n" + (lb.tail or "")
    out: list[tuple[int, str]] = []
    for el in main.iter("head", "p", "item", "quote", "code"):
        if el.getparent() is not None and el.getparent().tag in ("p", "item", "quote", "head"):
            continue  # nested: its text is part of the parent's
        text = "".join(el.itertext()).strip()
        if not text:
            continue
        if "\n" in text:
            out.extend((BODY, line.strip()) for line in text.split("\n") if line.strip())
            continue
        if el.tag == "head":
            rend = el.get("rend") or "h2"
            level = int(rend[1]) if len(rend) == 2 and rend[1].isdigit() else 2
        elif el.tag == "p" and _all_emphasis(el, text):
            level = EMPHASIS
        else:
            level = BODY
        out.append((min(level, BODY), text))
    return out


def _all_emphasis(p, text: str) -> bool:
    hi = [h for h in p.iter("hi") if (h.get("rend") or "") in ("#b", "#u", "#i")]
    return bool(hi) and sum(len("".join(h.itertext()).strip()) for h in hi) >= len(text) - 1


def all_blocks(root) -> list[tuple[int, str]]:
    """Every block of the page except its obvious furniture (scripts, nav, header, footer, forms)."""
    blocks: list[tuple[int, str]] = []
    buf: list[str] = []

    def flush(level: int = BODY) -> None:
        text = "".join(buf).strip()
        buf.clear()
        if text:
            blocks.append((level, text))

    def walk(el) -> None:
        tag = el.tag if isinstance(el.tag, str) else ""
        if tag in _DROP:
            return
        if tag in _HEADINGS:
            flush()
            buf.append(el.text_content())
            flush(_HEADINGS[tag])
            return
        if tag in _BLOCKS:
            flush()
        if el.text and tag:
            buf.append(el.text)
        for child in el:
            walk(child)
            if child.tail:
                buf.append(child.tail)
        if tag in _BLOCKS:
            flush()

    walk(root)
    flush()
    return blocks
