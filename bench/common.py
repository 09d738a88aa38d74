"""Shared helpers for the benchmark scripts: corpora, medians, tables, result files."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, TypeVar

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("STREAM_DEDUP_SHARED", REPO.parent / "shared" / "data"))
# where scripts write their tables: bench/results, or another folder (the test suite's runs of every
# script, tests/integration/test_bench_scripts.py, must not replace the recorded tables)
RESULTS = Path(os.environ.get("STREAM_DEDUP_BENCH_RESULTS") or REPO / "bench" / "results")
DEVSET = REPO / "bench" / "work" / "devset"
T = TypeVar("T")


def settings_for(prefix: str, partitions: int, bootstrap: str | None = None):
    """Settings whose topics (every one, the clusters output included) and group are named by
    ``prefix``, with ``partitions`` each: a benchmark run's own, beside other runs on one broker.
    The broker is ``bootstrap``, else the environment's (KAFKA_BOOTSTRAP)."""
    from stream_dedup.config import load_settings

    s = load_settings()
    if bootstrap:
        s.kafka.bootstrap = bootstrap
    t = s.topics
    t.pages, t.dlq, t.verdicts = f"{prefix}.pages", f"{prefix}.dlq", f"{prefix}.verdicts"
    t.unique, t.duplicate, t.clusters = f"{prefix}.unique", f"{prefix}.duplicate", f"{prefix}.clusters"
    t.internal_prefix, t.partitions = prefix, partitions
    s.worker.app_id = prefix
    return s


def need_shared() -> None:
    if not SHARED.exists():
        sys.exit(f"benchmarks need the sample corpora at {SHARED} (set STREAM_DEDUP_SHARED)")


def devset() -> Path:
    if not (DEVSET / "news.jsonl").exists():
        subprocess.run([sys.executable, str(REPO / "bench" / "build_devset.py")], check=True)
    return DEVSET


_compiled = False


def scan_cli(path: Path | str, out: Path | str, *options: str, env: dict | None = None) -> None:
    """``stream-dedup scan PATH --out OUT`` as its own process, start-up included, as a user runs it.

    The package is byte-compiled before the first run, as ``pip install`` does for the peers it
    installs: an environment with PYTHONDONTWRITEBYTECODE set (this machine's) would otherwise
    compile every module of stream_dedup from source in every timed run (~0.09 s of a 1 s scan)."""
    global _compiled
    if not _compiled:
        import compileall

        compileall.compile_dir(str(REPO / "stream_dedup"), quiet=1)
        _compiled = True
    subprocess.run([sys.executable, "-m", "stream_dedup.cli", "scan", str(path), "--out", str(out), "--no-progress",
                    *options], check=True, cwd=REPO, capture_output=True, env=env)


def stop_processes(procs: list, wait_s: float = 60) -> None:
    """SIGTERM every process (workers shut down side by side), then wait for each; kill one that has
    not stopped within ``wait_s``."""
    import signal

    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(wait_s)
        except subprocess.TimeoutExpired:
            p.kill()


def read_jsonl(path: Path, limit: int | None = None) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
                if limit and len(out) >= limit:
                    break
    return out


def median_run(fn, repeat: int = 5):
    """``fn()`` run ``repeat`` times: its last result and the median of the wall times."""
    times, result = [], None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def median_time(fn, repeat: int = 5) -> float:
    return median_run(fn, repeat)[1]


def alternated(fns: Mapping[str, Callable[[], T]], repeat: int) -> dict[str, list[T]]:
    """What each of ``fns`` returned in ``repeat`` rounds. A round calls each once, and every other
    round goes in the reverse order. Why: on this noisy machine a system's speed can change by a
    third within minutes, and systems timed one after another, each in a block of runs, were
    ranked by the minutes they got (``quality.py``'s SMS ratio read 0.84x and 1.16x ten minutes
    apart, 2026-12-03)."""
    names = list(fns)
    out: dict[str, list[T]] = {name: [] for name in names}
    for r in range(max(1, repeat)):
        for name in (names if r % 2 == 0 else names[::-1]):
            out[name].append(fns[name]())
    return out


def median_runs(fns: Mapping[str, Callable[[], T]], repeat: int) -> dict[str, tuple[T, float]]:
    """Each of ``fns`` run ``repeat`` times, ``alternated``: its last result and its median wall time."""
    def timed(fn: Callable[[], T]) -> Callable[[], tuple[T, float]]:
        def run() -> tuple[T, float]:
            t0 = time.perf_counter()
            result = fn()
            return result, time.perf_counter() - t0
        return run

    runs = alternated({name: timed(fn) for name, fn in fns.items()}, repeat)
    return {name: (rs[-1][0], statistics.median(t for _, t in rs)) for name, rs in runs.items()}


def checkout_name(tree: Path) -> str:
    """The commit a checkout is at, ``+`` when its files differ from it: what a row of another
    checkout's runs is named by (``--against``)."""
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return rev + ("+" if dirty else "")


def checkouts(paths: list[Path]) -> list[Path]:
    """``--against``'s folders, resolved; exits when one is not a checkout of stream-dedup."""
    trees = [t.resolve() for t in paths]
    for t in trees:
        if not (t / "stream_dedup" / "__init__.py").is_file():
            sys.exit(f"--against {t}: not a checkout of stream-dedup (no stream_dedup/__init__.py)")
    return trees


def machine() -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
            "cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(h) for h in headers]] + [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def save(name: str, data: dict, text: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"machine": machine(), **data}
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    (RESULTS / f"{name}.md").write_text(f"{text}\n\n{json.dumps(data['machine'])}\n", encoding="utf-8")
    print(text)
    shown = _shown(RESULTS / name)
    print(f"\nwritten: {shown}.json, {shown}.md")


def _shown(path: Path) -> str:
    """``path`` from the repository's root when it is inside it (bench/results/...), else whole."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def speed_rows(paths: dict[str, Path], trees: list[Path], repeat: int) -> list[list]:
    """Rows of (input, checkout, median s, docs/s, this checkout's speed / its): ``scan`` of each
    input by each checkout, alternated."""
    import compileall

    rows = []
    for tree in (REPO, *trees):
        compileall.compile_dir(str(tree / "stream_dedup"), quiet=1)

    def scan(tree: Path, path: Path):
        return lambda: subprocess.run(
            [sys.executable, "-m", "stream_dedup.cli", "scan", str(path), "--out", os.devnull, "--no-progress"],
            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, capture_output=True)

    for name, path in paths.items():
        n = sum(1 for _ in path.open("rb"))
        runs = median_runs({checkout_name(t): scan(t, path) for t in (REPO, *trees)}, repeat)
        mine = runs[checkout_name(REPO)][1]
        for who, (_, secs) in runs.items():
            rows.append([name, who, round(secs, 3), round(n / secs), round(secs / mine, 3)])
    return rows
