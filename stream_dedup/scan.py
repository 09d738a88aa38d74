"""``stream-dedup scan``: the embedded engine over a JSONL file or stdin."""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from .config import Settings
from .core.document import Rejected
from .core.engine import Engine


@dataclass
class ScanSummary:
    docs: int = 0
    unique: int = 0
    exact: int = 0
    near: int = 0
    rejected: int = 0
    revisions: int = 0
    seconds: float = 0.0
    reasons: Counter = field(default_factory=Counter)
    by_detector: Counter = field(default_factory=Counter)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    clusters: int = 0
    largest_cluster: int = 0

    @property
    def docs_per_s(self) -> float:
        return self.docs / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"docs": self.docs, "unique": self.unique, "exact": self.exact, "near": self.near,
                "rejected": self.rejected, "revisions": self.revisions, "seconds": round(self.seconds, 3),
                "docs_per_s": round(self.docs_per_s, 1), "reasons": dict(self.reasons),
                "near_by_detector": dict(self.by_detector), "clusters": self.clusters,
                "largest_cluster": self.largest_cluster}

    def describe(self) -> str:
        s = (f"docs {self.docs}  unique {self.unique}  exact {self.exact}  near {self.near}  "
             f"rejected {self.rejected}  revisions {self.revisions}  "
             f"{self.docs_per_s:.0f} docs/s ({self.seconds:.1f}s)")
        if self.by_detector:
            s += "\nnear by detector: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_detector.items()))
        if self.reasons:
            s += "\nrejected: " + ", ".join(f"{k} {v}" for k, v in self.reasons.most_common())
        return s


def _open_in(path: str):
    return sys.stdin.buffer if path == "-" else open(path, "rb")


def run_scan(settings: Settings, input_path: str, out_path: str = "-", *, state_dir: str | None = None,
             progress: bool = False, report_bad: TextIO | None = None, quiet: bool = False,
             clusters_path: str | None = None) -> ScanSummary:
    from tqdm import tqdm

    summary = ScanSummary()
    if report_bad is None and not quiet:
        report_bad = sys.stderr
    t0 = time.perf_counter()
    engine = Engine(settings, state_dir)
    order: list[str] = []
    try:
        f = _open_in(input_path)
        total = os.path.getsize(input_path) if input_path != "-" else None
        bar = tqdm(total=total, unit="B", unit_scale=True, desc="scan", disable=not progress, file=sys.stderr)
        try:
            for lineno, line in enumerate(f, 1):
                bar.update(len(line))
                line = line.strip()
                if not line:
                    continue
                try:
                    verdicts = engine.process(line, default_ts=lineno)
                except Rejected as e:
                    summary.rejected += 1
                    summary.reasons[e.reason] += 1
                    if report_bad is not None and len(summary.bad_lines) < 1000:
                        print(f"scan: line {lineno}: {e.reason}: {e.detail[:200]}", file=report_bad)
                    summary.bad_lines.append((lineno, e.reason))
                    continue
                for v in verdicts:
                    if v.revision == 0:
                        order.append(v.id)
                    else:
                        summary.revisions += 1
        finally:
            bar.close()
            if f is not sys.stdin.buffer:
                f.close()
        out = sys.stdout if out_path == "-" else open(out_path, "w", encoding="utf-8")
        try:
            for ident in order:
                v = engine.verdict(ident)
                assert v is not None
                summary.docs += 1
                if v.verdict == "unique":
                    summary.unique += 1
                elif v.match == "exact":
                    summary.exact += 1
                else:
                    summary.near += 1
                    summary.by_detector[v.detector or "?"] += 1
                out.write(json.dumps(v.to_dict(), ensure_ascii=False) + "\n")
        finally:
            if out is not sys.stdout:
                out.close()
        if clusters_path:
            with open(clusters_path, "w", encoding="utf-8") as cf:
                for c in sorted(engine.clusters(), key=lambda c: (-c.size, c.ts or 0, c.id)):
                    summary.clusters += 1
                    summary.largest_cluster = max(summary.largest_cluster, c.size)
                    cf.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
    finally:
        engine.close()
    summary.seconds = time.perf_counter() - t0
    return summary
