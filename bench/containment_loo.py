"""MinHash containment's threshold on template swaps, scored leaving one template site out.

    python bench/containment_loo.py

Pages as ``html_quality.py`` builds them (news/html, 3 swaps a page; html_dev, 2 a page), each
made into its document as the engine does. Pairs: one article in two templates (a copy) and two
articles in one site's template (not a copy). The MinHash detector verifies each pair with
containment off, then at each ``minhash.containment`` of the grid (``minhash.contained_ratio`` as
configured). Leaving template sites out: each pair is scored at the threshold fitted on the pairs
of no site it involves (the most copies found with no false pair, ties to the highest).
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, need_shared, save, table  # noqa: E402
from html_variants import build_events, site  # noqa: E402

from stream_dedup.config import Settings  # noqa: E402
from stream_dedup.core.detectors.minhash import MinhashDetector  # noqa: E402
from stream_dedup.core.document import Rejected, make_doc  # noqa: E402

GRID = [0.7, 0.8, 0.85, 0.9, 0.95, 1.0]
CORPORA = {"news/html": 3, "html_dev": 2}


def pairs(corpus: str, per_page: int) -> list[tuple[bool, str, bytes, bytes]]:
    """(a copy, the template site of the pair, payload, payload) of every pair that is one article
    or one template site, with both payloads."""
    events, group = build_events(SHARED / corpus, per_page=per_page)
    mh = MinhashDetector()
    payloads = {}
    for ev in events:
        try:
            sk = mh.sketch(make_doc(ev["id"], ev["ts"], "html", ev["html"]))
        except Rejected:
            continue
        if sk is not None:
            payloads[ev["id"]] = sk.payload
    out = []
    for a, b in itertools.combinations(sorted(payloads), 2):
        ta, tb = site(a.split("@")[-1]), site(b.split("@")[-1])
        if group[a] == group[b] or ta == tb:
            out.append((group[a] == group[b], ta if ta == tb else f"{ta}+{tb}", payloads[a], payloads[b]))
    return out


def main() -> None:
    need_shared()
    ratio = Settings().minhash.contained_ratio
    rows, every = [], []
    for corpus, per_page in CORPORA.items():
        ps = pairs(corpus, per_page)
        every += [(corpus, *p) for p in ps]
        copies = sum(1 for p in ps if p[0])
        for thr in [0.0, *GRID]:
            det = MinhashDetector(containment=thr, contained_ratio=ratio)
            hit = [det.verify(a, b) is not None for _, _, a, b in ps]
            found = sum(1 for h, p in zip(hit, ps) if h and p[0])
            wrong = sum(1 for h, p in zip(hit, ps) if h and not p[0])
            rows.append([corpus, "off" if not thr else thr, copies, found, len(ps) - copies, wrong])
    verdicts = {thr: [MinhashDetector(containment=thr, contained_ratio=ratio).verify(a, b) is not None
                      for _, _, _, a, b in every] for thr in GRID}
    held_found = held_wrong = 0
    fits: dict[float, int] = {}
    for label in sorted({p[2] for p in every}):  # a template site, or the two of a copy pair
        out = set(label.split("+"))

        def score(thr: float) -> tuple[int, float]:
            kept = [(h, p[1]) for h, p in zip(verdicts[thr], every) if not out & set(p[2].split("+"))]
            wrong = sum(1 for h, copy in kept if h and not copy)
            return (-wrong if wrong else sum(1 for h, copy in kept if h and copy)), thr
        best = max(GRID, key=score)
        fits[best] = fits.get(best, 0) + 1
        held_found += sum(1 for h, p in zip(verdicts[best], every) if p[2] == label and h and p[1])
        held_wrong += sum(1 for h, p in zip(verdicts[best], every) if p[2] == label and h and not p[1])
    copies = sum(1 for p in every if p[1])
    rows.append(["both, template sites left out", "fitted", copies, held_found, len(every) - copies, held_wrong])
    text = (table(["pages", "containment", "copy pairs", "found", "other-article pairs", "called copies"], rows)
            + "\n\nthresholds fitted (held-out site or pair of sites: count): "
            + ", ".join(f"{t:g}: {n}" for t, n in sorted(fits.items())))
    save("containment_loo", {"rows": rows, "fits": fits, "grid": GRID, "contained_ratio": ratio}, text)


if __name__ == "__main__":
    main()
