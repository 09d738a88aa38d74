"""What an event costs the core in instructions, counted by Valgrind: a measure the machine's hour does not move.

    python bench/instructions.py [--commits WORKTREE MYPYC 0ed719b ...] [--kinds sms news] [--events 2000 500]

Why: on this shared 2-core machine the same code runs up to 3x slower in one hour than in another
(the machine's speed varies by the hour), so a rate measured today cannot be set against one
measured yesterday, and an A/B of two commits needs many alternating runs to see a 10 % change.
The number of instructions the CPU executes for the same events does not depend on how fast the
machine runs. It is not exact either: runs of the script on the same SMS code gave counts up to
6 % apart, so a difference under about 6 % is not resolved by one run (rates move up to 3x); run
both sides twice or more for a smaller change. The cause is
not pinned down; Python's hash order is one candidate (fixed here since: PYTHONHASHSEED=0), and
threads whose work depends on timing (RocksDB's, counted by Valgrind too) another. That spread is
in millions of instructions per run, not per event, so it needs the default sizes: with
``--events 200`` two runs of the same SMS code gave 498 and 529 thousand per event, and the
MYPYC build 432 and 532, which is noise, not a measurement.
Valgrind's cachegrind tool counts the instructions (``I refs``, with the cache
simulation off); the events run once with N events and once with 1, and the difference over N - 1
is the cost of an event, without the interpreter's start-up, the imports and the first loads (the
first event warms the engine in both).

Workloads, on the first N events of the development benchmark (bench/build_devset.py), ts = position:
* ``engine``: ``Engine.process`` one event at a time: what ``kafka_e2e.py``'s "scan events/s" column
  runs (its ``embedded``);
* ``batched``: ``Preparer.prepare_many`` over batches of ``--batch`` events (1,024: a worker's full
  batch at full speed) then ``Engine.judge`` of each: the core's part of a worker's work.

Each commit other than ``WORKTREE`` (the files as they are) is checked out into a temporary
``git worktree`` and imported from there, with this script's workloads (they use only ``Engine``
and ``Preparer.prepare_many``, so older commits run them too). ``MYPYC`` is the working tree's
package copied aside with the core's busiest modules (``COMPILED``) compiled by mypyc, from their
type hints, into C extensions: what a typed, compiled core would save, without a rewrite (needs
the bench extra's mypy and a C compiler; about a minute to build). It is a measurement only: the
project ships and runs the pure-Python modules. The table also gives
the events/s of the same workload run natively now (the N - 1 events after the first, median of
--repeat runs) and what the two make together: the instructions per second the machine gave this
process in this hour, the figure that moves.

Needs Valgrind (``apt-get install valgrind``); under it the workloads run about 25x slower (a run of
2,000 SMS: about 30 s; the default two commits, both kinds and both workloads: under 10 minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, devset, need_shared, read_jsonl, save, table  # noqa: E402

WORKTREE = "WORKTREE"
MYPYC = "MYPYC"
# the modules a worker's SMS spends its core time in (stages, index, verdicts, exact store and
# filter, the n-gram detector); mypy must pass on them for mypyc to build them
COMPILED = ("index", "verdict", "exact", "bloom", "store", "cache", "stages", "engine", "document", "hashing",
            "detectors/ngram")
WORKLOADS = ("engine", "batched")
_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def load_events(kind: str, n: int) -> list[dict]:
    lines = read_jsonl(devset() / f"{kind}.jsonl", n)
    return [{"id": ev["id"], "text": ev["text"], "ts": i} for i, ev in enumerate(lines)]


def run_workload(kind: str, workload: str, n: int, batch: int) -> float:
    """Run in the child process, against whichever ``stream_dedup`` is first on the path: the first
    event warms the engine (the segmenter's dictionary, OpenCC's tables, the stores), untimed; the
    seconds the other N - 1 took."""
    from stream_dedup.config import load_settings
    from stream_dedup.core.engine import Engine

    events = load_events(kind, n)
    with Engine(load_settings()) as e:
        e.process(events[0])
        rest = events[1:]
        t0 = time.perf_counter()
        if workload == "engine":
            for ev in rest:
                e.process(ev)
        else:
            for c in range(0, len(rest), batch):
                for p in e.preparer.prepare_many([(ev, None) for ev in rest[c:c + batch]]):
                    if isinstance(p, Exception):
                        raise p
                    e.judge(p)
        return time.perf_counter() - t0


def child_cmd(kind: str, workload: str, n: int, batch: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", kind, workload, str(n), str(batch)]


def count(env: dict, kind: str, workload: str, n: int, batch: int) -> int:
    """Instructions of one child run under cachegrind."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           *child_cmd(kind, workload, n, batch)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    m = _IREFS.search(r.stderr)
    if r.returncode != 0 or m is None:
        sys.exit(f"valgrind run failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def native(env: dict, kind: str, workload: str, n: int, batch: int, repeat: int) -> float:
    """Events/s of the workload's N - 1 timed events run without Valgrind, median of ``repeat`` runs."""
    secs = []
    for _ in range(repeat):
        r = subprocess.run(child_cmd(kind, workload, n, batch), env=env, capture_output=True, text=True, check=True)
        secs.append(json.loads(r.stdout.strip().splitlines()[-1])["seconds"])
    return (n - 1) / max(statistics.median(secs), 1e-9)


def checkout(commit: str, into: Path) -> Path:
    """The commit's files in a detached worktree (``main`` byte-compiles them, as it does the working tree's)."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True,
                         text=True)
    if sha.returncode != 0:
        sys.exit(f"not a commit: {commit!r}")
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(into), sha.stdout.strip()], cwd=REPO, check=True)
    return into


def compiled_copy(into: Path) -> Path:
    """The working tree's package under ``into`` with ``COMPILED`` built by mypyc (the .py files stay
    beside the extensions, which Python imports first)."""
    shutil.copytree(REPO / "stream_dedup", into / "stream_dedup",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    mods = [f"stream_dedup/core/{m}.py" for m in COMPILED]
    r = subprocess.run([sys.executable, "-m", "mypyc", "--ignore-missing-imports", "--follow-imports=silent",
                        *mods], cwd=into, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"mypyc failed (pip install -e '.[bench]' for mypy; a C compiler is needed too):\n"
                 f"{(r.stdout + r.stderr)[-3000:]}")
    return into


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, workload, n, batch = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps({"seconds": run_workload(kind, workload, n, batch)}))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", nargs="+", default=[WORKTREE],
                    help=f"commits to compare; {WORKTREE} is the files as they are, {MYPYC} the same with "
                         "the core's busiest modules compiled by mypyc (the first is the baseline)")
    ap.add_argument("--kinds", nargs="+", default=["sms", "news"], choices=["sms", "news"])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--events", type=int, nargs="+", default=None, metavar="N",
                    help="events per kind, in --kinds order (default: 2,000 SMS, 500 news articles)")
    ap.add_argument("--batch", type=int, default=1024, help="prepare_many batch of the batched workload")
    ap.add_argument("--repeat", type=int, default=3, help="native runs per row (their median)")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench/instructions.py needs Valgrind: apt-get install valgrind")
    need_shared()
    default_n = {"sms": 2000, "news": 500}
    events = a.events or [default_n[k] for k in a.kinds]
    if len(events) != len(a.kinds):
        sys.exit("--events takes one number per kind")
    if min(events) < 2:
        sys.exit("--events must be at least 2 (one run of 1 event is subtracted)")
    devset()  # built once here, not by every child
    rows, runs = [], []
    base: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="stream-dedup-instr-") as tmp:
        trees: list[tuple[str, Path]] = []
        worktrees: list[Path] = []  # the git worktrees made here, removed at the end
        try:
            for i, commit in enumerate(a.commits):
                if commit == WORKTREE:
                    trees.append((commit, REPO))
                elif commit == MYPYC:
                    trees.append((commit, compiled_copy(Path(tmp) / f"tree{i}")))
                else:
                    worktrees.append(checkout(commit, Path(tmp) / f"tree{i}"))
                    trees.append((commit, worktrees[-1]))
            for commit, tree in trees:
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "stream_dedup")], check=True)
                env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
                label = (f"{commit} ({_head()}{_modified()})" if commit in (WORKTREE, MYPYC) else commit)
                for kind, n in zip(a.kinds, events):
                    # a run of 1 event is the warming event alone, whatever the workload: counted once per kind
                    warm = count(env, kind, a.workloads[0], 1, a.batch)
                    for wl in a.workloads:
                        t0 = time.time()
                        per_event = (count(env, kind, wl, n, a.batch) - warm) / (n - 1)
                        rate = native(env, kind, wl, n, a.batch, a.repeat)
                        ratio = per_event / base.setdefault((kind, wl), per_event)
                        rows.append([label, kind, wl, n, round(per_event / 1000, 1), round(ratio, 3), round(rate),
                                     round(per_event * rate / 1e9, 2)])
                        runs.append({"commit": commit, "kind": kind, "workload": wl, "events": n,
                                     "instructions_per_event": round(per_event), "ratio_to_first": round(ratio, 4),
                                     "native_events_per_s": round(rate, 1), "native_runs": a.repeat,
                                     "giga_instructions_per_s": round(per_event * rate / 1e9, 3),
                                     "at": time.strftime("%H:%M", time.gmtime(t0))})
                        print(rows[-1], flush=True)
        finally:
            for tree in worktrees:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)
    text = table(["commit", "kind", "workload", "events", "k instructions/event", "vs first",
                  "events/s now", "G instructions/s now"], rows)
    save("instructions", {"runs": runs, "args": vars(a)}, text)


def _head() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()


def _modified() -> str:
    """", modified" when the package's files differ from HEAD (what the row measured is not a commit)."""
    out = subprocess.run(["git", "status", "--porcelain", "--", "stream_dedup"], cwd=REPO, capture_output=True,
                         text=True).stdout
    return ", modified" if out.strip() else ""


if __name__ == "__main__":
    main()
