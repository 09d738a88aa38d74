"""Paragraph classes: the structure method's paragraph weights (Xiong, Ya and Zhang 2013).

From high to low: numbered sub-headings (第一章, 一、, （一）, 1., （1）), then the HTML tags (headings
h1..h6, a font size larger than the page's usual paragraphs', bold, a colour other than their
usual one), then plain paragraphs, list items and quotes. A lower number is a higher weight;
``core.html`` gives each extracted block its class, ``core.detectors.structure`` builds the
text-structure tree from them.
"""
from __future__ import annotations

import re
from typing import Any, NamedTuple

# the classes, highest weight first: numbered sub-headings 1..5, headings h1..h6 as 6..11, then
# font size, bold, colour, plain text
NUMBERED = 5
HEADING_LEVELS = 11
FONT_SIZE = 12
EMPHASIS = 13
COLOUR = 14
BODY = 15


def heading(n: int) -> int:
    """The class of an ``<hn>`` heading."""
    return NUMBERED + n


HEADINGS = {f"h{n}": heading(n) for n in range(1, 7)}


# numbered sub-headings, in the order Chinese documents nest them
_NUMBERING = [re.compile(p) for p in (
    r"第[一二三四五六七八九十百零〇\d]+[章节编部篇]",
    r"[一二三四五六七八九十]+、",
    r"[（(][一二三四五六七八九十]+[）)]",
    r"\d{1,2}[.．、](?!\d)",
    r"[（(]\d{1,2}[）)]",
)]


def numbering(text: str) -> int | None:
    """The class of a block that starts with a sub-heading number (1 for 第一章 .. 5 for （1）)."""
    text = text.lstrip()
    for cls, pattern in enumerate(_NUMBERING, 1):
        if pattern.match(text):
            return cls
    return None


def weigh(root, blocks: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Blocks with their classes: a sub-heading number outranks the HTML tags, and a plain or bold
    block whose whole text the page sets in a larger font than its usual paragraphs, in bold, or
    in a colour other than their usual one takes that class. "Usual": the size and colour that
    cover most of the blocks' text, so a page that styles every paragraph alike sets none apart."""
    fonts = fonts_of(root) if any(lvl > HEADING_LEVELS for lvl, _ in blocks) else {}
    styles = [fonts.get("".join(t.split()), _PLAIN) for _, t in blocks]
    usual_size = _usual([(t, st.size) for (_, t), st in zip(blocks, styles)])
    usual_colour = _usual([(t, st.colour) for (_, t), st in zip(blocks, styles)])
    out = []
    for (level, text), st in zip(blocks, styles):
        num = numbering(text)
        if num is not None:
            level = num
        elif level > HEADING_LEVELS:
            level = (FONT_SIZE if st.size > usual_size else EMPHASIS if st.bold or level == EMPHASIS
                     else COLOUR if st.colour != usual_colour else level)
        out.append((level, text))
    return out


class Font(NamedTuple):
    size: float  # CSS pixels
    bold: bool
    colour: str  # "" for the page's default


_DEFAULT_SIZE = 16.0
_PLAIN = Font(_DEFAULT_SIZE, False, "")
_STYLED_TAGS = {"font", "span", "b", "strong", "big", "p", "div", "td", "section", "em"}
_MAX_STYLED_CHARS = 2000  # an element holding more is a container, not a paragraph
_FONT_SIZES = {"1": 10.0, "2": 13.0, "3": 16.0, "4": 18.0, "5": 24.0, "6": 32.0, "7": 48.0}
_CSS_SIZES = {"x-small": 10.0, "small": 13.0, "medium": 16.0, "large": 18.0, "x-large": 24.0, "xx-large": 32.0}
_SIZE = re.compile(r"font-size:\s*(?:([\d.]+)\s*(px|pt|em|rem|%)?|([a-z-]+))")
_COLOUR = re.compile(r"(?:^|;)\s*color:\s*([^;]+)")
_BOLD = re.compile(r"font-weight:\s*(?:bold|bolder|[6-9]00)")


def _font_size(el, style: str) -> float | None:
    """An element's font size in CSS pixels, from ``<font size>``, ``<big>`` or its style."""
    if el.tag == "font" and (el.get("size") or "").strip() in _FONT_SIZES:
        return _FONT_SIZES[el.get("size").strip()]
    if el.tag == "big":
        return 20.0
    m = _SIZE.search(style)
    if not m:
        return None
    if m.group(3):
        return _CSS_SIZES.get(m.group(3))
    try:
        value = float(m.group(1))
    except ValueError:
        return None
    return value * {"pt": 4 / 3, "em": 16.0, "rem": 16.0, "%": 0.16}.get(m.group(2) or "px", 1.0)


def fonts_of(root) -> dict[str, Font]:
    """The font of each text (whitespace removed) that one element of the page sets whole: its
    size, weight and colour, an inner element's over an outer one's (the way a browser shows it)."""
    out: dict[str, Font] = {}
    for el in root.iter():  # document order: an inner element comes after the one around it
        if not isinstance(el.tag, str) or el.tag not in _STYLED_TAGS:
            continue
        style = (el.get("style") or "").lower()
        m = _COLOUR.search(style)
        colour = (m.group(1) if m else el.get("color") if el.tag == "font" else None)
        size = _font_size(el, style)
        bold = el.tag in ("b", "strong") or bool(_BOLD.search(style))
        if size is None and colour is None and not bold:
            continue
        text = "".join(el.text_content().split())
        if not text or len(text) > _MAX_STYLED_CHARS:
            continue
        was = out.get(text, _PLAIN)
        out[text] = Font(size if size is not None else was.size, bold or was.bold,
                         "".join(colour.split()).lower() if colour is not None else was.colour)
    return out


def _usual(values: list[tuple[str, Any]]) -> Any:
    """The value that covers the most text."""
    cover: dict[Any, int] = {}
    for text, v in values:
        cover[v] = cover.get(v, 0) + len(text)
    return max(cover, key=cover.__getitem__) if cover else None
