"""``stream-dedup scan``: the embedded engine over a JSONL file or stdin."""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, TextIO

from .config import Settings
from .core.document import Rejected
from .core.engine import Engine
from .core.stages import Prepared, Preparer


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


Line = tuple[int, bytes]  # (line number, stripped line)
Outcome = tuple[int, Prepared | Rejected]
_worker_preparer: list[Preparer] = []  # the preparer of a ``--jobs`` worker process


def _init_worker(settings: Settings) -> None:
    _worker_preparer[:] = [Preparer(settings)]  # forked: jieba and the IDF table are already loaded


def _prepare_chunk(chunk: list[Line]) -> list[Outcome]:
    return _prepare_lines(_worker_preparer[0], chunk)


def _prepare_lines(preparer: Preparer, lines: Iterable[Line]) -> list[Outcome]:
    out: list[Outcome] = []
    for lineno, line in lines:
        try:
            out.append((lineno, preparer.prepare(line, default_ts=lineno)))
        except Rejected as e:
            out.append((lineno, e))
    return out


def _chunks(lines: Iterable[Line], size: int) -> Iterator[list[Line]]:
    it = iter(lines)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def prepared_in_order(settings: Settings, preparer: Preparer, lines: Iterable[Line], jobs: int,
                      chunk: int = 32) -> Iterator[Outcome]:
    """Each line prepared (or its rejection), in input order; with ``jobs`` > 1 in that many processes.

    Preparing (parse, normalize, segment, fingerprint) is pure and most of a document's cost; the
    stores must see documents one at a time in input order, so the results come back in order and
    the verdicts equal a single process's. At most ``4 * jobs`` chunks are in flight: memory stays
    bounded however long the input."""
    if jobs <= 1:
        for c in _chunks(lines, chunk):
            yield from _prepare_lines(preparer, c)
        return
    import multiprocessing as mp

    # load once here, then fork: the workers start with the dictionary in memory (an HTML page makes
    # each worker load the HTML parser on its own)
    preparer.warm(html=False)
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with mp.get_context(method).Pool(jobs, initializer=_init_worker, initargs=(settings,)) as pool:
        flight: deque = deque()
        for c in _chunks(lines, chunk):
            flight.append(pool.apply_async(_prepare_chunk, (c,)))
            if len(flight) >= 4 * jobs:
                yield from flight.popleft().get()
        while flight:
            yield from flight.popleft().get()


def default_jobs() -> int:
    """One preparing process per core (the stores' own work runs alongside, in this process)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_scan(settings: Settings, input_path: str, out_path: str = "-", *, state_dir: str | None = None,
             progress: bool = False, report_bad: TextIO | None = None, quiet: bool = False,
             clusters_path: str | None = None, jobs: int = 1) -> ScanSummary:
    """``jobs``: processes that prepare documents (see ``prepared_in_order``); the verdicts do not
    depend on it."""
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
            def lines() -> Iterator[Line]:
                for lineno, line in enumerate(f, 1):
                    bar.update(len(line))
                    line = line.strip()
                    if line:
                        yield lineno, line

            for lineno, p in prepared_in_order(settings, engine.preparer, lines(), jobs):
                try:
                    if isinstance(p, Rejected):
                        raise p
                    verdicts = engine.judge(p)
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
