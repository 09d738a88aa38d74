"""HTML pages: the same article in another site's template must be found; different articles in one
site's template must not be called duplicates.

    python bench/html_quality.py [--per-page 3] [--corpus news/html | html_dev]

Events: the 23 real pages of ../shared/data/news/html, then each page's article written into
``--per-page`` templates of other sites (bench/html_variants.py). Each configuration runs the
in-process engine (the code the workers run) over the same events:

* recall: share of template swaps (and natural copies) judged duplicate of a page of their article;
* false positives: duplicate verdicts naming a page of another article, and among them the
  same-site ones (the template trap);
* docs/s: pages per second, extraction included.

"default, template table" first learns a template table from these same events
(``stream-dedup template build``, each page's source the site of its template, ``--min-docs``):
no label is read, as a user would learn one from a sample of the stream.

With ``--corpus html_dev`` (132 pages of 70 sites, ../shared/data/html_dev) a second table gives, per
template site, what extraction keeps of an article written into that site's template: recall (the
share of the article's 5-character shingles found in the extraction of the swapped page) and
template leak (the share of the extraction's shingles that are not the article's). No threshold of
the detectors or of extraction is fitted here: the defaults are scored as they are.

``--against ../old`` adds ``scan``'s pages/s over the same events, this checkout and each other one
alternately (``common.speed_rows``): the ratio to another commit in one run.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, need_shared, save, table  # noqa: E402
from html_variants import build_events, load_pages, shingles, site  # noqa: E402

from stream_dedup.config import Settings  # noqa: E402
from stream_dedup.core.engine import Engine  # noqa: E402
from stream_dedup.core.html import extract_blocks  # noqa: E402

CONFIGS = {"default (auto)": "auto", "default, template table": "auto", "structure only": ["structure"],
           "simhash only": ["simhash"], "minhash only": ["minhash"], "imatch only": ["imatch"]}


def learn_template(events: list[dict], min_docs: int) -> Path:
    """A template table learned from these events (``stream-dedup template build``), each page's
    source its template's site: unsupervised, from the stream itself, as a user would build one."""
    from stream_dedup.cli.template_build import build_template

    work = Path(tempfile.mkdtemp(prefix="html-template-"))
    sample = work / "sample.jsonl"
    with sample.open("w", encoding="utf-8") as f:
        for ev in events:
            f.write(json.dumps(ev, ensure_ascii=False) + "\n")
    build_template(Settings(), str(sample), min_docs=min_docs).save(work / "template.json")
    return work / "template.json"


def judge(events: list[dict], group: dict[str, str], detectors, template: Path | None = None) -> dict:
    s = Settings()
    s.engine.detectors = detectors
    s.text.template = template
    with tempfile.TemporaryDirectory() as tmp, Engine(s, tmp) as e:
        t0 = time.perf_counter()
        for ev in events:
            e.process(ev)
        secs = time.perf_counter() - t0
        verdicts = {v.id: v for v in e.verdicts()}
    first = {}
    for ev in sorted(events, key=lambda ev: ev["ts"]):
        first.setdefault(group[ev["id"]], ev["id"])
    should = [i for i in group if first[group[i]] != i]
    found = [i for i in should if verdicts[i].verdict == "duplicate" and group[verdicts[i].duplicate_of] == group[i]]
    wrong = [(i, verdicts[i].duplicate_of) for i in verdicts
             if verdicts[i].verdict == "duplicate" and group[verdicts[i].duplicate_of] != group[i]]
    same_site = [(a, b) for a, b in wrong if site(a.split("@")[0]) == site(b.split("@")[0])
                 or site(a.split("@")[-1]) == site(b.split("@")[-1])]
    tp, fp = len(found), len(wrong)
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / len(should) if should else 1.0
    return {"should": len(should), "found": tp, "false_positives": fp, "same_site_fp": len(same_site),
            "precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0, "docs_per_s": len(events) / secs,
            "examples_fp": wrong[:5], "missed": [i for i in should if i not in found][:10]}


def extraction_by_site(events: list[dict], pages: dict[str, str], template: Path | None = None) -> list[list]:
    """Per template site: swaps, mean extraction recall and template leak (see the module docstring),
    and both again with the template table's blocks left out."""
    from stream_dedup.core.template import TemplateTable
    from stream_dedup.core.text import normalize

    table = TemplateTable.load(template) if template else None

    def text(html: str, source: str = "") -> str:
        blocks = [t for _, t in extract_blocks(html)]
        if source and table is not None:
            blocks = [t for t, k in zip(blocks, table.keep(source, blocks, [normalize(t) for t in blocks])) if k]
        return "".join("".join(t.split()) for t in blocks)

    article = {name: shingles(text(h)) for name, h in pages.items()}
    by_site: dict[str, list[tuple[float, ...]]] = {}
    for ev in events:
        if "@" not in ev["id"]:
            continue
        src, tpl = ev["id"].split("@")
        want = article[src]
        row: list[float] = []
        for got in (shingles(text(ev["html"])), shingles(text(ev["html"], ev["source"]))) if table else \
                (shingles(text(ev["html"])),):
            row += [len(got & want) / max(1, len(want)), len(got - want) / max(1, len(got))]
        by_site.setdefault(site(tpl), []).append(tuple(row))

    def means(v: list[tuple[float, ...]]) -> list[float]:
        return [round(sum(x[i] for x in v) / len(v), 4) for i in range(len(v[0]))]

    rows = [[s, len(v), *means(v)] for s, v in sorted(by_site.items())]
    every = [x for v in by_site.values() for x in v]
    rows.append(["all", len(every), *means(every)])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-page", type=int, default=3)
    ap.add_argument("--corpus", default="news/html", help="folder of pages under ../shared/data")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--against", type=Path, nargs="*", default=[], metavar="CHECKOUT",
                    help="also time scan of these events by this checkout and these, alternated")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each checkout for --against")
    ap.add_argument("--min-docs", type=int, default=5, help="the template table's --min-docs")
    a = ap.parse_args()
    need_shared()
    folder = SHARED / a.corpus
    events, group = build_events(folder, per_page=a.per_page)
    limit = Settings().text.max_chars  # a swap into a very large template can pass it: left out, said
    big = [ev["id"] for ev in events if len(ev["html"]) > limit]
    events = [ev for ev in events if len(ev["html"]) <= limit]
    group = {ev["id"]: group[ev["id"]] for ev in events}
    if big:
        print(f"left out {len(big)} pages over text.max_chars ({limit}): {big[:5]}", flush=True)
    for ev in events:  # each page's source: the site of its template
        ev["source"] = site(ev["id"].split("@")[-1])
    template = learn_template(events, a.min_docs) if "default, template table" in a.configs else None
    rows, out = [], []
    for name in a.configs:
        dets = CONFIGS[name]
        r = judge(events, group, dets, template if "template" in name else None)
        rows.append([name, len(events), r["should"], r["found"], round(r["recall"], 4), r["false_positives"],
                     r["same_site_fp"], round(r["precision"], 4), round(r["f1"], 4), round(r["docs_per_s"], 1)])
        out.append({"config": name, **r})
        print(rows[-1], "missed:", r["missed"][:5], "fp:", r["examples_fp"][:3], flush=True)
    text = table(["config", "pages", "copies", "found", "recall", "false pos.", "same-site FP", "precision", "F1",
                  "pages/s"], rows)
    name = "html_quality"
    extraction = []
    if a.corpus != "news/html":
        name = "html_quality_" + folder.name
        extraction = extraction_by_site(events, load_pages(folder), template)
        cols = ["template site", "swaps", "extraction recall", "template leak"]
        if template:
            cols += ["recall, table", "leak, table"]
        text += "\n\n" + table(cols, extraction)
    speed = []
    if a.against:
        from common import REPO, checkouts, speed_rows

        path = REPO / "bench" / "work" / f"{name}_events.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for ev in events:
                f.write(json.dumps(ev, ensure_ascii=False) + "\n")
        speed = speed_rows({f"{a.corpus} pages and swaps": path}, checkouts(a.against), a.repeat)
        text += "\n\n" + table(["input", "scan of checkout", "median s", "pages/s", "speed of this checkout / its"],
                                speed)
    save(name, {"corpus": a.corpus, "results": out, "extraction": extraction, "speed": speed}, text)


if __name__ == "__main__":
    main()
