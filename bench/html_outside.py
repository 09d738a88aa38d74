"""HTML extraction on pages outside html_dev: magic-html's benchmark pages and their hand-made texts.

    python bench/html_outside.py [--pages DIR]

The pages (not shipped: their text belongs to the sites) are those of the GitHub repository
opendatalab/magic-html (Apache-2.0), ``benchmark/data/article/htmls/*.html`` with
``benchmark/data/article/base.json`` beside them in DIR (default ``bench/work/magic_html``), e.g.
``git show HEAD:<path>`` from a snapshot. The 42 pages html_dev took from there (html_dev/SOURCES.md)
are left out; most of the others are not Chinese (English, Japanese, Arabic, Turkish...).

For each page, ``core.html.extract_blocks`` and trafilatura's precision mode alone: extraction
recall (share of the hand-made text's 5-character shingles found) and template leak (share of the
output's shingles not in it), by language (Chinese when a fifth of the text is Han). Then the
other-script bounds of ``core.html.choose`` (``MIN_OTHER_LETTERS``, ``OTHER_MIN_PROSE``) fitted
leaving one site out: each site's pages scored at the grid point best (recall minus leak) on the
other sites.
"""
from __future__ import annotations

import argparse
import copy
import itertools
import json
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, save, table  # noqa: E402

from stream_dedup.core import html  # noqa: E402

GRID = {"min_other": [50, 100, 200, 400, 10**9], "other_min_prose": [200, 400, 800]}


def shingles(text: str, k: int = 5) -> set[str]:
    t = "".join(text.split())
    return {t[i:i + k] for i in range(max(0, len(t) - k + 1))}


def pages(folder: Path) -> list[dict]:
    """The pages outside html_dev with a hand-made text of 50 shingles or more, and their three
    extractions (made once: the grid only reruns the choice)."""
    base = json.loads((folder / "base.json").read_text(encoding="utf-8"))
    used = set(re.findall(r"htmls/([0-9a-f]+)\.html", (SHARED / "html_dev" / "SOURCES.md").read_text(encoding="utf-8")))
    out = []
    for name, rec in base.items():
        path = folder / f"{name}.html"
        want = shingles(rec["content"])
        if name in used or not path.exists() or len(want) < 50:
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        root = html.parse(raw, 200)
        html.drop_teasers(root)  # as extract_blocks does
        han = sum(1 for c in rec["content"] if "\u4e00" <= c <= "\u9fff")
        out.append({"site": urlparse(rec["url"]).netloc, "want": want, "raw": raw,
                    "lang": "Chinese" if han > 0.2 * len(rec["content"]) else "other",
                    "precise": html.main_content(copy.deepcopy(root)),
                    "recall": html.main_content(copy.deepcopy(root), recall=True), "walk": html.prose_blocks(root)})
    return out


def scored(got: set[str], want: set[str]) -> tuple[float, float]:
    return len(got & want) / len(want), len(got - want) / max(1, len(got))


def chosen(page: dict, min_other: int, other_min_prose: int) -> tuple[float, float]:
    saved = html.MIN_OTHER_LETTERS, html.OTHER_MIN_PROSE
    html.MIN_OTHER_LETTERS, html.OTHER_MIN_PROSE = min_other, other_min_prose
    try:
        best = html.choose(page["precise"], lambda: page["recall"], lambda: page["walk"])
    finally:
        html.MIN_OTHER_LETTERS, html.OTHER_MIN_PROSE = saved
    return scored(shingles("".join(t for _, t in best)), page["want"])


def mean(rows: list[tuple[float, float]]) -> list[float]:
    return [round(sum(r[i] for r in rows) / len(rows), 4) for i in (0, 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=Path, default=REPO / "bench" / "work" / "magic_html")
    a = ap.parse_args()
    if not (a.pages / "base.json").exists():
        sys.exit(f"no magic-html pages in {a.pages} (see --help)")
    import trafilatura

    ps = pages(a.pages)
    rows = []
    for lang in ("Chinese", "other"):
        sel = [p for p in ps if p["lang"] == lang]
        ours = mean([scored(shingles("".join(t for _, t in html.extract_blocks(p["raw"]))), p["want"]) for p in sel])
        alone = mean([scored(shingles(trafilatura.extract(p["raw"], favor_precision=True) or ""), p["want"])
                      for p in sel])
        rows.append([lang, len(sel), *ours, *alone])
    points = list(itertools.product(*GRID.values()))
    runs = {g: [chosen(p, *g) for p in ps] for g in points}
    held: list[tuple[float, float]] = []
    fits: dict[tuple, int] = {}
    for s in sorted({p["site"] for p in ps}):
        others = [i for i, p in enumerate(ps) if p["site"] != s]
        fit = max(points, key=lambda g: sum(runs[g][i][0] - runs[g][i][1] for i in others))
        fits[fit] = fits.get(fit, 0) + 1
        held += [runs[fit][i] for i, p in enumerate(ps) if p["site"] == s]
    default = (html.MIN_OTHER_LETTERS, html.OTHER_MIN_PROSE)
    off = (10**9, html.OTHER_MIN_PROSE)
    text = (table(["pages", "count", "recall", "leak", "trafilatura alone: recall", "leak"], rows) + "\n\n"
            + table(["other-script bounds", "pages", "recall", "leak"],
                    [[f"default {default}", len(ps), *mean(runs[default])],
                     ["leave one site out", len(held), *mean(held)],
                     ["none (Han prose alone)", len(ps), *mean(runs[off])]])
            + "\n\nfits: " + ", ".join(f"{k}: {n} sites" for k, n in fits.items()))
    save("html_outside", {"rows": rows, "fits": {str(k): n for k, n in fits.items()}}, text)


if __name__ == "__main__":
    main()
