"""Where a worker's CPU goes during a Kafka run: py-spy samples of each worker, grouped by what they do.

Used by ``kafka_e2e.py --profile`` (py-spy from the ``bench`` extra; attaching needs ptrace
permission, which root and most containers have). A sample counts for **core** when its stack
passes through ``stream_dedup/core`` (the same work ``scan`` does for the event: normalizing,
segmenting, fingerprinting, probing and verdicts, libraries included); every other sample counts
for the innermost package on its stack that the worker runs on (aiokafka, Faust and mode, the
worker's own driver code in ``stream_dedup/stream``), or for the event loop and the standard
library when none is (asyncio's scheduling, JSON of the verdicts, selectors). Idle samples (a
thread waiting) are not taken, so the shares are of CPU in use.

Only a thread that holds the GIL is sampled (py-spy ``--gil``). A worker runs two Python threads,
Faust's main event loop and the Kafka consumer's thread, and without ``--gil`` py-spy counts a
thread that has left a system call and waits for the other thread to release the GIL as busy,
on the line of that call: ``EpollSelector.select`` and the socket ``write`` of aiokafka's
requests then looked like the largest lines, and the samples added up to much more CPU per
event than /proc counted. With ``--gil`` those lines fall to almost nothing, and the samples come
near /proc's CPU time.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

CORE = "core (judging the event, as scan does)"
# innermost match wins; the order only breaks ties within one frame's path
PACKAGES = [
    ("/aiokafka/", "Kafka client (aiokafka)"),
    ("/faust/", "Faust and mode (streams, tables, agents)"),
    ("/mode/", "Faust and mode (streams, tables, agents)"),
    ("/stream_dedup/", "worker driver (stream_dedup/stream)"),
    ("/site-packages/", "other libraries"),
]
LOOP = "event loop and standard library"
# frames that run an event loop (the worker's main thread, mode's consumer thread): a sample whose
# innermost package frame is one of these is the loop's own work (select, scheduling)
RUNNERS = ("execute_from_commandline (", "ServiceThread._start_thread (", "WorkerThread.run (")
RATE = 100
CLOCK = os.sysconf("SC_CLK_TCK")


class Profiler:
    """py-spy attached to each worker process from ``start()`` to ``stop()``."""

    def __init__(self, pids: list[int], out: Path):
        self.pids = pids
        self.out = out
        self.procs: list[subprocess.Popen] = []

    @staticmethod
    def available() -> bool:
        return py_spy() is not None

    def start(self) -> None:
        for pid in self.pids:
            self.procs.append(subprocess.Popen(
                [py_spy(), "record", "--pid", str(pid), "--format", "raw", "--full-filenames", "--nonblocking", "--gil",
                 "--rate", str(RATE), "--output", str(self.out / f"profile-{pid}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self) -> list[Counter]:
        for p in self.procs:
            p.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        return [categorize((self.out / f"profile-{pid}.txt").read_text(errors="replace"))
                for pid in self.pids if (self.out / f"profile-{pid}.txt").exists()]


def samples(raw: str) -> Iterator[tuple[list[str], int]]:
    """(frames, outermost first; count) from py-spy's raw output (``frame;...;frame count`` a line)."""
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def categorize(raw: str) -> Counter:
    """Samples per category."""
    out: Counter = Counter()
    for frames, count in samples(raw):
        out[placed(frames)[0]] += count
    return out


def placed(frames: list[str]) -> tuple[str, str]:
    """A sample's category, and the frame it counts for in ``top``: the innermost core frame for
    the core, the innermost frame of the package that decided it otherwise, and the innermost
    frame of all for the event loop and the standard library."""
    core = [f for f in frames if "/stream_dedup/core/" in f]
    if core:
        return CORE, core[-1]
    for frame in reversed(frames):  # innermost first
        if frame.startswith(RUNNERS):
            return LOOP, frames[-1]
        for needle, name in PACKAGES:
            if needle in frame:
                return name, frame
    return LOOP, frames[-1]


def top(raw: str, n: int = 12, lines: bool = False) -> dict[str, list[tuple[str, int]]]:
    """The functions each category's samples fall in, most samples first: a sample counts for the
    frame that decided its category (``placed``), so a driver function's row includes the
    standard library it calls (JSON, struct).
    What the shares alone cannot say: which function a cut should start from."""
    by = own(raw, lines)
    return {cat: c.most_common(n) for cat, c in sorted(by.items(), key=lambda kv: -sum(kv[1].values()))}


def own(raw: str, lines: bool = False) -> dict[str, Counter]:
    """Samples per category and per frame that decided it (``placed``): every row of ``top``."""
    by: dict[str, Counter] = {}
    for frames, count in samples(raw):
        cat, frame = placed(frames)
        by.setdefault(cat, Counter())[short(frame, lines)] += count
    return by


def inclusive(raw: str, n: int = 30, needle: str = "/stream_dedup/") -> list[tuple[str, int]]:
    """Samples whose stack passes through each of this project's functions (callees included),
    most first: which stage and which step of it a cut would pay off in (``top`` says which
    function's own lines)."""
    return through(raw, needle).most_common(n)


def through(raw: str, needle: str = "/stream_dedup/") -> Counter:
    """Samples whose stack passes through each function whose frame holds ``needle``: every row of
    ``inclusive``, in no order."""
    out: Counter = Counter()
    for frames, count in samples(raw):
        for name in sorted({short(f) for f in frames if needle in f}):  # a recursive function counts once; ties in a fixed order
            out[name] += count
    return out


def grown(a: tuple[str, int], b: tuple[str, int], rows: str = "own", lines: bool = False) -> list[tuple[str, float, float]]:
    """(row, CPU ms per event in run A, in run B) of every row in either, the most grown first.

    ``a`` and ``b`` are (raw samples, events); ``rows`` "own" gives ``top``'s rows (the category
    after the frame), "inclusive" those of ``inclusive``. Why per event and not shares: two runs of
    one code at two rates differ in what every part costs, and shares hide a part that grew with
    the rest (how the fifty-sixth stop read where half rate's extra CPU per SMS went)."""
    def per_event(raw: str, events: int) -> dict[str, float]:
        if rows == "inclusive":
            counts = through(raw)
        else:
            counts = Counter({f"{frame}  [{cat.split(' (')[0]}]": k
                              for cat, c in own(raw, lines).items() for frame, k in c.items()})
        return {row: cpu_ms(k, events) for row, k in counts.items()}

    pa, pb = per_event(*a), per_event(*b)
    return sorted(((row, pa.get(row, 0.0), pb.get(row, 0.0)) for row in pa.keys() | pb.keys()),
                  key=lambda r: (r[1] - r[2], r[0]))


def run_events(files: list[Path]) -> int:
    """The events of the run whose samples ``files`` are: ``run.json`` in their folder, which
    ``kafka_e2e.py --profile`` writes."""
    meta = files[0].parent / "run.json"
    if not meta.exists():
        raise SystemExit(f"{meta} is missing: per-event figures need the run's event count "
                         "(kafka_e2e.py --profile writes it; for older runs write {\"events\": N} there)")
    return int(json.loads(meta.read_text())["events"])


def cpu_ms(count: int, events: int) -> float:
    """CPU ms per event of ``count`` samples taken at ``RATE`` Hz over a run of ``events``."""
    return 1000 * count / RATE / max(1, events)


def short(frame: str, lines: bool = False) -> str:
    """``func (/long/path/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py)``, or ``...:12)``
    with ``lines`` (py-spy's raw frames name the line each sample was on)."""
    name, _, where = frame.partition(" (")
    where = re.sub(r"^.*(/site-packages/|/lib/python3\.\d+/|/(?=stream_dedup/))", "", where)
    if not lines:
        where = where.rsplit(":", 1)[0] + ")" if ":" in where else where
    return f"{name} ({where}" if where else name


def summary(counters: list[Counter], events: int) -> dict:
    """Shares of CPU in use and CPU ms per event, by category, over all workers."""
    total = Counter()
    for c in counters:
        total.update(c)
    n = sum(total.values())
    return {"samples": n, "rate_hz": RATE,
            "cpu_ms_per_event": round(cpu_ms(n, events), 2),
            "by_category": {name: {"share": round(k / n, 3) if n else 0.0,
                                   "cpu_ms_per_event": round(cpu_ms(k, events), 3)}
                            for name, k in total.most_common()}}


def proc_cpu_s(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of a process so far, or of one of its threads (Linux /proc)."""
    stat = Path(f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK


def machine_cpu_s() -> tuple[float, float, float]:
    """(busy, idle, irq + softirq) CPU seconds of the whole machine so far, all cores."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = vals[3] + vals[4]  # idle + iowait
    return (sum(vals[:8]) - idle) / CLOCK, idle / CLOCK, (vals[5] + vals[6]) / CLOCK


def py_spy() -> str | None:
    """py-spy from this interpreter's environment (the venv's bin, on PATH or not), else from PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


class CpuMeter:
    """Who used the machine's cores during the measured run: the workers (and of that their main
    threads, which run the agents, Faust and the producer; the rest is mostly the Kafka consumer's
    thread), the broker (when its pid is known), this benchmark's own Kafka clients, the kernel's interrupt work (on loopback the
    receive side of every TCP segment: softirq time that /proc charges to no process), and the
    rest, plus what stayed idle."""

    def __init__(self, pids: list[int], broker_pid: int | None = None):
        self.pids = pids
        self.broker_pid = broker_pid
        self.start = self._now()

    def _broker_s(self) -> float:
        try:
            return proc_cpu_s(self.broker_pid) if self.broker_pid else 0.0
        except OSError:
            return 0.0

    def _now(self) -> tuple:
        return (time.monotonic(), [proc_cpu_s(p) for p in self.pids], sum(os.times()[:2]), self._broker_s(),
                *machine_cpu_s(), sum(proc_cpu_s(p, p) for p in self.pids))

    def stop(self) -> dict:
        t1, w1, own1, broker1, busy1, idle1, irq1, main1 = self._now()
        t0, w0, own0, broker0, busy0, idle0, irq0, main0 = self.start
        wall = max(1e-9, t1 - t0)
        workers = sum(w1) - sum(w0)
        own = own1 - own0
        busy = busy1 - busy0
        broker = broker1 - broker0
        irq = irq1 - irq0
        return {"wall_s": round(wall, 2), "cores": os.cpu_count(),
                # CPU seconds as measured, for per-event figures (the cores below are rounded)
                "workers_cpu_s": round(workers, 4), "workers_main_thread_cpu_s": round(main1 - main0, 4),
                "workers_cores": round(workers / wall, 2),
                "per_worker_cores": [round((b - a) / wall, 2) for a, b in zip(w0, w1)],
                "workers_main_thread_cores": round((main1 - main0) / wall, 2),
                "bench_client_cores": round(own / wall, 2),
                "broker_cores": round(broker / wall, 2) if self.broker_pid else None,
                "irq_cores": round(irq / wall, 2),
                "rest_cores": round(max(0.0, busy - workers - own - broker - irq) / wall, 2),
                "idle_cores": round((idle1 - idle0) / wall, 2)}


if __name__ == "__main__":
    # python bench/worker_profile.py bench/work/profiles/<run>/profile-*.txt: the top functions per
    # category, over all the files given (kafka_e2e.py --profile keeps each run's raw samples there)
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--lines", action="store_true", help="one row per line, not per function")
    ap.add_argument("--inclusive", action="store_true",
                    help="this project's functions with their callees' samples, instead of the categories")
    ap.add_argument("--against", nargs="+", type=Path, metavar="FILE",
                    help="another run's samples (A): each row's CPU ms per event in A and in FILES (B), the "
                         "rows that grew most first (--top of them); the events come from each folder's run.json")
    a = ap.parse_args()

    def read(files: list[Path]) -> str:
        return "\n".join(f.read_text(errors="replace") for f in files)

    raw = read(a.files)
    if a.against:
        then, now = (read(a.against), run_events(a.against)), (raw, run_events(a.files))
        a_ms, b_ms = (cpu_ms(sum(k for _, k in samples(raw_)), events) for raw_, events in (then, now))
        print(f"CPU ms per event sampled: A {a_ms:.3f}, B {b_ms:.3f}\n\n       A       B     B-A")
        for row, x, y in grown(then, now, "inclusive" if a.inclusive else "own", a.lines)[:a.top]:
            print(f"  {x:6.3f}  {y:6.3f}  {y - x:+6.3f}  {row}")
        raise SystemExit(0)
    total = sum(count for _, count in samples(raw))
    for cat, rows in ({"": inclusive(raw, a.top)} if a.inclusive else top(raw, a.top, a.lines)).items():
        if cat:
            print(f"\n{cat}")
        for frame, k in rows:
            print(f"  {k / max(1, total):6.1%}  {frame}")
