"""HTML page -> main-content blocks ``(level, text)``: what the text detectors and the structure detector read.

Main content comes from trafilatura (maintained, used by large crawl pipelines, tuned on news
pages), which drops navigation, link lists, ads and footers; that is what keeps two different
articles in one site's template from looking alike. Its XML output keeps the structure the
structure detector needs; each block gets its paragraph class (``core.paragraphs``: numbered
sub-headings, headings, font size, bold, colour, plain text), from which
``core.detectors.structure`` builds the text-structure tree.

When trafilatura finds almost nothing (a page whose article sits in script-filled markup), a
plain walk over the page's block elements without page furniture is the fallback, so a page
never loses its text. Before either runs, the parsed tree's nesting depth is checked against
``max_depth``: deeply nested "HTML bombs" are rejected instead of exhausting the stack.
"""
from __future__ import annotations

import copy
import re
from typing import Callable

from .document import Rejected
from .paragraphs import BODY, EMPHASIS, HEADING_LEVELS, HEADINGS, heading, weigh

# prose characters under which the extraction is taken for missing the body and the page's own
# prose blocks are walked instead
MIN_MAIN_CHARS = 40

_DROP = {"script", "style", "noscript", "nav", "header", "footer", "form", "aside", "iframe", "svg",
         "button", "select", "template", "head"}

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
    """The page's main content as blocks, from the best of three extractions by the evidence of
    prose (``prose_chars``): trafilatura in its precision mode, in its recall mode, and the page's
    own prose blocks (``prose_blocks``). Precision stands unless it found much less prose than
    recall (a body it cut away: a comment disclaimer or a title left alone); the page walk only
    when both found almost none."""
    root = parse(html, max_depth)
    drop_teasers(root)
    best = choose(main_content(copy.deepcopy(root), recall=False),
                  lambda: main_content(copy.deepcopy(root), recall=True), lambda: prose_blocks(root))
    return weigh(root, best)


# class or id words of a page's modules of other articles: "recommended", "related", "more
# stories", 推荐 (tuijian), 相关 (xiangguan), 猜你喜欢 (caini), "you may like"
_TEASER = re.compile(r"recommend|related|relate[-_]|more-?stories|tuijian|xiangguan|caini|guess-?you|you-?like", re.I)
_NEVER_TEASER = {"html", "body", "main", "article"}


def drop_teasers(root) -> None:
    """Remove the page's modules of other articles (a "related" list, a "more stories" stream,
    the next article of an endless page), named so by their class or id: their summaries read as
    prose, so extraction kept them beside a short article, and two articles of one portal then
    shared them. A module holding the page's own headline (``_headline``) stays; on a page without
    one, so does a module holding most of the page's text (an article in a misnamed block)."""
    headline = _headline(root)
    keep = {headline, *headline.iterancestors()} if headline is not None else set()
    found, stack = [], [root]
    while stack:  # outermost modules only: a dropped one's inside is not looked at
        for el in stack.pop():
            if (isinstance(el.tag, str) and el.tag not in _NEVER_TEASER and el not in keep
                    and _TEASER.search(f"{el.get('class') or ''} {el.get('id') or ''}")):
                found.append(el)
            else:
                stack.append(el)
    if headline is None and found:
        half = _chars(root) / 2
        found = [el for el in found if _chars(el) <= half]
    for el in found:
        el.drop_tree()


def _chars(el) -> int:
    """Characters of an element's text, spaces left out."""
    return sum(len(t) - t.count(" ") - t.count("\n") for t in el.itertext())


def _headline(root):
    """The page's headline: its longest h1 whose text is in the page's <title> (a site's name in
    an h1 is shorter), else its only h1."""
    h1 = root.findall(".//h1")
    title = root.findtext(".//title") or ""
    named = [(len(text), i, h) for i, h in enumerate(h1) if (text := h.text_content().strip()) and text in title]
    if named:
        return max(named, key=lambda t: (t[0], -t[1]))[2]
    return h1[0] if len(h1) == 1 else None


# Han characters of prose below which the precise extraction may have lost the body (html_dev's
# articles have 300 or more; a short news item in the 23 news pages, about 190)
MIN_PROSE = 100
# how many times the precise extraction's prose the recall mode must find to replace it
RECALL_FACTOR = 2.0


def choose(precise: list[tuple[int, str]], recalled: Callable[[], list[tuple[int, str]]],
           walked: Callable[[], list[tuple[int, str]]], *, min_prose: int = MIN_PROSE,
           factor: float = RECALL_FACTOR, min_main: int = MIN_MAIN_CHARS) -> list[tuple[int, str]]:
    """The rule of ``extract_blocks`` over its three extractions (the other two made only when
    needed), without the site's legal lines (``legal_line``). The constants are parameters so that
    ``bench/extraction_loo.py`` can score them leaving one site out."""
    best = _choose(precise, recalled, walked, min_prose, factor, min_main)
    return [b for b in best if not legal_line(b[1])]


def _choose(precise: list[tuple[int, str]], recalled: Callable[[], list[tuple[int, str]]],
            walked: Callable[[], list[tuple[int, str]]], min_prose: int, factor: float,
            min_main: int) -> list[tuple[int, str]]:
    other = other_prose(precise)
    if other >= MIN_OTHER_LETTERS:  # an article in another script: Han counts cannot judge it
        return _other_script(precise, other, recalled, factor)
    best, score = precise, prose_chars(precise)
    if score < min_prose:
        more = recalled()
        r = prose_chars(more)
        if r > max(score * factor, score + min_prose):
            best, score = [b for b in more if not _navigation(b[1])], r
    if score < min_main:
        walk = walked()
        if prose_chars(walk) > score:
            best = walk
    return best


_SENTENCE_MARKS = frozenset("。！？；，、,.!?;")
_NAV_MARKS = ("|", "｜", "·", ">>", "»")


# a site's legal notice: copyright, licence and registration numbers, the complaint hotline
_LEGAL = re.compile(r"©|copyright|all rights reserved|版权所有(?![者人])|icp备|icp证|公网安备|制作单位|不良信息举报", re.I)
# longer than this, a block with such words is article text (a story about copyright), not a notice
LEGAL_MAX = 120


def legal_line(text: str) -> bool:
    """A short block of a site's legal notice ("Copyright © ... All Rights Reserved", "版权所有",
    "京ICP备..."), which extractions keep under a short article: every page of the site carries it,
    so it made two short articles alike."""
    return len(text) <= LEGAL_MAX and _LEGAL.search(text) is not None


def _han(text: str) -> int:
    return sum(1 for c in text if "\u4e00" <= c <= "\u9fff")


def _navigation(text: str) -> bool:
    """A line of menu items or a breadcrumb: separators between short words, no sentence."""
    seps = sum(text.count(m) for m in _NAV_MARKS)
    return seps >= 2 and not any(c in _SENTENCE_MARKS for c in text)


# less prose than this and a page has no article text (a list, video or gallery page, or a
# template whose body did not extract): judged unique with a note, never fingerprinted, since its
# headings and menus would match every page of its template
MIN_ARTICLE_CHARS = 20
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def has_article(blocks: list[tuple[int, str]]) -> bool:
    """Whether the blocks hold article text: Chinese prose (``prose_chars``) or Latin sentences."""
    if prose_chars(blocks) >= MIN_ARTICLE_CHARS:
        return True
    words = sum(n for _, t in blocks if (n := len(_LATIN_WORD.findall(t))) >= 8
                and any(c in _SENTENCE_MARKS for c in t) and not _navigation(t))
    return words >= MIN_ARTICLE_CHARS


def page_text(html: str, *, max_depth: int = 200) -> str:
    """All the text of a page outside its scripts and styles (to tell a page without an article
    from one without any text)."""
    return " ".join(t for _, t in all_blocks(parse(html, max_depth)))


# letters of other scripts (Latin, kana, Hangul, Arabic...) in sentences above which the precise
# extraction is an article in that script: the Han counts of ``choose`` would swap it for the recall
# mode or the page walk on the strength of a few Han characters in an ad or a footer
MIN_OTHER_LETTERS = 100
# and below which the recall mode is tried for it (as ``MIN_PROSE`` Han characters are for Chinese)
OTHER_MIN_PROSE = 400


def _other_script(precise: list[tuple[int, str]], score: int, recalled: Callable[[], list[tuple[int, str]]],
                  factor: float) -> list[tuple[int, str]]:
    """``choose`` for an article in another script, of ``score`` letters of prose (``other_prose``): the
    recall mode when that is little and it finds ``factor`` times as much, else the precise one."""
    if score < OTHER_MIN_PROSE:
        more = recalled()
        if other_prose(more) > factor * score:
            return [b for b in more if not _navigation(b[1])]
    return precise
_OTHER_LETTER = re.compile(r"[^\W\d_\u4e00-\u9fff]")


def other_prose(blocks: list[tuple[int, str]]) -> int:
    """Letters outside Han in blocks that read as sentences (a sentence mark, not a menu line)."""
    return sum(len(_OTHER_LETTER.findall(t)) for _, t in blocks
               if any(c in _SENTENCE_MARKS for c in t) and not _navigation(t))


def prose_chars(blocks: list[tuple[int, str]]) -> int:
    """Han characters in blocks that read as sentences: eight or more, with a sentence mark, not a
    menu line. What an article body has and navigation, link lists and disclaimers lack."""
    return sum(n for _, t in blocks if (n := _han(t)) >= 8 and any(c in _SENTENCE_MARKS for c in t)
               and not _navigation(t))


def main_content(root, *, recall: bool = False) -> list[tuple[int, str]]:
    import trafilatura
    from lxml import etree

    xml = trafilatura.extract(root, output_format="xml", include_formatting=True, include_comments=False,
                              include_tables=False, include_images=False, favor_precision=not recall,
                              favor_recall=recall)
    if not xml:
        return []
    main = etree.fromstring(xml.encode()).find("main")
    if main is None:
        return []
    for lb in main.iter("lb"):  # a line break inside a paragraph ends a block, as a new paragraph does
        lb.tail = "\n" + (lb.tail or "")
    out: list[tuple[int, str]] = []
    _blocks_of(main, out)
    return out


_TEXT_BLOCKS = ("head", "p", "item", "quote", "code")


def _blocks_of(el, out: list[tuple[int, str]]) -> None:
    """Blocks of trafilatura's XML, in order: each heading, paragraph, list item, quote or code, and
    the loose text a container holds between them (a body written as text and line breaks)."""
    def loose(text: str | None) -> None:
        for line in (text or "").split("\n"):
            if line.strip():
                out.append((BODY, line.strip()))

    loose(el.text)
    for child in el:
        if child.tag in _TEXT_BLOCKS:
            _text_block(child, out)
        elif child.tag not in ("lb", "hi", "ref"):
            _blocks_of(child, out)
        else:
            loose("".join(child.itertext()))
        loose(child.tail)


def _text_block(el, out: list[tuple[int, str]]) -> None:
    text = "".join(el.itertext()).strip()
    if not text:
        return
    if "\n" in text:
        out.extend((BODY, line.strip()) for line in text.split("\n") if line.strip())
        return
    if el.tag == "head":
        rend = el.get("rend") or "h2"
        level = heading(int(rend[1]) if len(rend) == 2 and rend[1] in "123456" else 2)
    elif el.tag == "p" and _all_emphasis(el, text):
        level = EMPHASIS
    else:
        level = BODY
    out.append((min(level, BODY), text))


def _all_emphasis(p, text: str) -> bool:
    hi = [h for h in p.iter("hi") if (h.get("rend") or "") in ("#b", "#u", "#i")]
    return bool(hi) and sum(len("".join(h.itertext()).strip()) for h in hi) >= len(text) - 1


def prose_blocks(root) -> list[tuple[int, str]]:
    """The page's headings and its blocks that read as sentences (``prose_chars``), outside its
    obvious furniture: the fallback when trafilatura finds no body. Never a menu or a footer line."""
    blocks = all_blocks(root)
    return [(lvl, t) for lvl, t in blocks if lvl <= HEADING_LEVELS and 0 < len(t) <= 80 and not _navigation(t)
            or prose_chars([(lvl, t)])]


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
        if tag in HEADINGS:
            flush()
            buf.append(el.text_content())
            flush(HEADINGS[tag])
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
