"""HTML to text blocks (level, text) with lxml.

This first version keeps headings and paragraphs and drops scripts, styles, navigation,
headers, footers, forms and asides; the main-content extraction that the HTML structure
detector needs refines it (see the detectors issue).
"""
from __future__ import annotations

from .document import Rejected

_DROP = {"script", "style", "noscript", "nav", "header", "footer", "form", "aside", "iframe", "svg",
         "button", "select", "template", "head"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = {"p", "div", "li", "td", "section", "article", "blockquote", "pre", "br", "tr", "dd", "dt"}


def extract_blocks(html: str, *, max_depth: int = 512) -> list[tuple[int, str]]:
    import lxml.html
    from lxml import etree

    try:
        root = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError) as e:
        raise Rejected("bad_html", str(e)) from None
    blocks: list[tuple[int, str]] = []
    buf: list[str] = []

    def flush(level: int = 7) -> None:
        text = "".join(buf).strip()
        buf.clear()
        if text:
            blocks.append((level, text))

    def walk(el, depth: int) -> None:
        if depth > max_depth:
            raise Rejected("html_too_deep", f"nesting deeper than {max_depth}")
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
            walk(child, depth + 1)
            if child.tail:
                buf.append(child.tail)
        if tag in _BLOCKS:
            flush()

    walk(root, 0)
    flush()
    return blocks
