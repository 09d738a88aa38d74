"""The extraction rule's constants, scored leaving one site out.

    python bench/extraction_loo.py

``core.html.choose`` picks a page's body from trafilatura's precision extraction, its recall
extraction (when precision found under ``min_prose`` Han characters of prose and recall
``factor`` times as much) and the page walk (when both found under ``min_main``). Those constants
were set looking at html_dev's failures, so here each of html_dev's 70 sites is held out in turn:
the constants are fitted on the other sites' pages (the grid point extracting the most pages
right, ties to the nearest default) and that site's pages are scored at them.

A page is extracted right when its Han characters are 0.7 to 1.5 times the article's size given
in html_dev/SOURCES.md (hand-made ground truth where the source repository has one). The three
extractions of each page are made once; the grid only reruns the choice.
"""
from __future__ import annotations

import copy
import itertools
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, need_shared, save, table  # noqa: E402
from html_variants import site  # noqa: E402

from stream_dedup.core import html  # noqa: E402

HAN = re.compile(r"[\u4e00-\u9fff]")
GRID = {"min_prose": [50, 100, 150, 200, 300], "factor": [1.5, 2.0, 3.0], "min_main": [40, 80, 120, 200]}
DEFAULT = {"min_prose": html.MIN_PROSE, "factor": html.RECALL_FACTOR, "min_main": html.MIN_MAIN_CHARS}


def truth() -> dict[str, int]:
    """Article sizes (Han characters) by page name, from SOURCES.md's table."""
    out = {}
    for line in (SHARED / "html_dev" / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 9 and cells[1].endswith(".html") and (m := re.match(r"\d+", cells[9])):
            out[cells[1][:-5]] = int(m.group())
    return out


def extractions(name: str) -> tuple[list, list, list]:
    """(precise, recalled, walked) of one page."""
    root = html.parse((SHARED / "html_dev" / f"{name}.html").read_text(encoding="utf-8", errors="replace"), 200)
    html.drop_teasers(root)  # as extract_blocks does
    return (html.main_content(copy.deepcopy(root), recall=False), html.main_content(copy.deepcopy(root), recall=True),
            html.prose_blocks(root))


def right(blocks: list, size: int) -> bool:
    got = sum(len(HAN.findall(t)) for _, t in blocks)
    return 0.7 * size <= got <= 1.5 * size


def main() -> None:
    need_shared()
    sizes = truth()
    pages = {n: extractions(n) for n in sorted(sizes)}
    points = [dict(zip(GRID, v)) for v in itertools.product(*GRID.values())]
    ok = {i: {n: right(html.choose(p, lambda r=r: r, lambda w=w: w, **pt), sizes[n])
              for n, (p, r, w) in pages.items()} for i, pt in enumerate(points)}
    sites = sorted({site(n) for n in pages})

    def distance(pt: dict) -> float:
        return sum(abs(pt[k] - DEFAULT[k]) / DEFAULT[k] for k in GRID)

    held, picked = 0, {}
    for s in sites:
        others = [n for n in pages if site(n) != s]
        best = max(range(len(points)), key=lambda i: (sum(ok[i][n] for n in others), -distance(points[i])))
        picked[s] = best
        held += sum(ok[best][n] for n in pages if site(n) == s)
    default = next(i for i, pt in enumerate(points) if pt == DEFAULT)
    counts: dict[int, int] = {}
    for i in picked.values():
        counts[i] = counts.get(i, 0) + 1
    rows = [["default " + _show(DEFAULT), len(pages), sum(ok[default].values()),
             round(sum(ok[default].values()) / len(pages), 4)],
            ["leave one site out (fitted on the other sites)", len(pages), held, round(held / len(pages), 4)]]
    fits = [[_show(points[i]), n, sum(ok[i].values())] for i, n in sorted(counts.items(), key=lambda x: -x[1])]
    text = (table(["constants", "pages", "extracted right", "share"], rows) + "\n\n"
            + table(["constants fitted (held-out site's fit)", "sites", "pages right with them, all sites"], fits))
    save("extraction_loo", {"rows": rows, "fits": fits, "grid": GRID}, text)


def _show(pt: dict) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in pt.items())


if __name__ == "__main__":
    main()
