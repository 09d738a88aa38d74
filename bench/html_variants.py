"""HTML ground truth from the real pages in ../shared/data/news/html: the same article in other sites' templates.

A repost on another site keeps the article (headings, paragraphs, bold sub-headings) and swaps
everything around it. ``in_template`` does exactly that with two real pages: it finds the
template page's article container (the element whose own paragraphs hold the most text), empties
it, and writes the source article's blocks into it. Everything else of the template page stays:
navigation, link lists, related-article boxes, scripts, footers, the template's <title>.

Groups (which pages hold the same article) come from the extracted text itself: pages whose
main-content 5-shingle Jaccard is >= 0.8 are one article (the corpus has one such natural
triple: thepaper_2, thepaper_4 and visiable_test_thepaper_1).
"""
from __future__ import annotations

import html as htmlmod
import random
import re
from pathlib import Path

import lxml.html

from stream_dedup.core.html import extract_blocks, main_content, parse
from stream_dedup.core.paragraphs import BODY, COLOUR, EMPHASIS, FONT_SIZE, HEADING_LEVELS, NUMBERED


def site(name: str) -> str:
    """The site a page comes from: ``tests_sina_2`` (news/html) and ``sina_2`` (html_dev) are sina's."""
    m = re.match(r"(?:visiable_)?tests?_([a-z]+)", name)
    return m.group(1) if m else name.rsplit("_", 1)[0]


def article_container(root, article: list[str]):
    """The deepest element that holds at least 90% of the page's extracted article text."""
    wanted = {t for t in article if len(t) >= 8}
    total = sum(len(t) for t in wanted)
    best = None
    for el in root.iter():
        if not isinstance(el.tag, str) or el.tag in ("html", "body"):
            continue
        inside = " ".join(el.text_content().split())
        got = sum(len(t) for t in wanted if t in inside)
        if total and got >= 0.9 * total:
            best = el  # iter() is document order: later hits are descendants or later siblings
    return best


def raw_blocks(page: str) -> list[tuple[int, str]]:
    """Main-content blocks before normalization (to find them in the page's own markup)."""
    return main_content(parse(page, 10_000))


def render(blocks: list[tuple[int, str]]) -> str:
    out = []
    for level, text in blocks:
        t = htmlmod.escape(text)
        if NUMBERED < level <= HEADING_LEVELS:
            n = level - NUMBERED
            out.append(f"<h{n}>{t}</h{n}>")
        elif level == FONT_SIZE:
            out.append(f'<p><span style="font-size: 20px">{t}</span></p>')
        elif level == EMPHASIS:
            out.append(f"<p><strong>{t}</strong></p>")
        elif level == COLOUR:
            out.append(f'<p><font color="#c00000">{t}</font></p>')
        else:  # a plain paragraph, or a numbered sub-heading (its number is in its text)
            assert level == BODY or level <= NUMBERED
            out.append(f"<p>{t}</p>")
    return "\n".join(out)


def in_template(article_html: str, template_html: str) -> str:
    blocks = extract_blocks(article_html)
    root = lxml.html.document_fromstring(template_html)
    box = article_container(root, [" ".join(t.split()) for _, t in raw_blocks(template_html)])
    if box is None:
        raise ValueError("template has no article container")
    for h1 in list(root.iter("h1")):  # the template's own headline goes with its article
        if h1.getparent() is not None:
            h1.drop_tree()
    for child in list(box):
        box.remove(child)
    box.text = None
    for el in lxml.html.fragments_fromstring(render(blocks)):
        box.append(el)
    return lxml.html.tostring(root, encoding="unicode")


def usable_template(page: str, probe: str) -> bool:
    """A template whose own article the swap removes (some pages keep it in script data: not usable)."""
    try:
        swapped = "".join(t for _, t in extract_blocks(in_template(probe, page)))
    except ValueError:
        return False
    own = [t for _, t in extract_blocks(page) if len(t) > 15]
    return bool(own) and sum(1 for t in own if t in swapped) <= 0.1 * len(own)


def load_pages(folder: Path) -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8", errors="replace") for p in sorted(folder.glob("*.html"))}


def shingles(text: str, n: int = 5) -> set[str]:
    return {text[i:i + n] for i in range(max(1, len(text) - n + 1))}


def groups(pages: dict[str, str]) -> dict[str, str]:
    """page -> article group (the first page of the group, by name)."""
    text = {n: "".join(t for _, t in extract_blocks(h)) for n, h in pages.items()}
    sh = {n: shingles(t) for n, t in text.items()}
    out: dict[str, str] = {}
    for n in sorted(pages):
        for g in sorted(set(out.values())):
            if len(sh[n] & sh[g]) / max(1, len(sh[n] | sh[g])) >= 0.8:
                out[n] = g
                break
        else:
            out[n] = n
    return out


def build_events(folder: Path, per_page: int = 3, seed: int = 5) -> tuple[list[dict], dict[str, str]]:
    """Originals (earlier) and their template swaps (later) as page events; returns (events, group of each id)."""
    pages = load_pages(folder)
    grp = groups(pages)
    rng = random.Random(seed)
    events, group = [], {}
    for i, (name, h) in enumerate(sorted(pages.items())):
        events.append({"id": name, "html": h, "ts": 1_000 + i})
        group[name] = grp[name]
    ts = 10_000
    probe = pages[min(pages, key=lambda n: len(pages[n]))]
    templates = [t for t in sorted(pages) if usable_template(pages[t], probe)]
    for name, h in sorted(pages.items()):
        others = [t for t in templates if site(t) != site(name)]
        for tpl in rng.sample(others, min(per_page, len(others))):
            vid = f"{name}@{tpl}"
            events.append({"id": vid, "html": in_template(h, pages[tpl]), "ts": ts})
            group[vid] = grp[name]
            ts += 1
    return events, group
