"""``stream-dedup scan``: the embedded engine over a JSONL file or stdin."""
from __future__ import annotations

import itertools
import os
import pickle
import sys
import tempfile
import time
import traceback
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, TextIO

from .gc_tuning import fewer_collections
from .config import Settings
from .core.document import Rejected, parse_event, validate
from .core.engine import Engine
from .core.wire import Prepared
from .core.stages import Preparer
from .core.verdict import json_record


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
_worker_preparer: list[Preparer] = []  # the preparer of a ``--jobs`` pool process (stdin)


def _init_worker(settings: Settings) -> None:
    _yield_to_judging()
    _worker_preparer[:] = [Preparer(settings, clock=time.time)]  # forked: jieba and the IDF table are already loaded


PREPARE_NICENESS = 5


def _yield_to_judging() -> None:
    """Lower this preparing process's priority a little (nice +5).

    Why: every document waits for the judging process, which is one process on one core; where
    the cores are fewer than the processes (two preparing and one judging on this 2-core machine)
    the scheduler otherwise shares them evenly and preempts the judge. The preparing processes
    still get every cycle it leaves idle (a news scan is bound by them, and keeps its speed)."""
    try:
        os.nice(PREPARE_NICENESS)
    except OSError:  # not permitted here: same speed, only less fair to the judge
        pass


def _prepare_chunk(chunk: list[Line]) -> list[Outcome]:
    return _prepare_lines(_worker_preparer[0], chunk)


def _prepare_lines(preparer: Preparer, lines: list[Line]) -> list[Outcome]:
    """Each line prepared, or its rejection; with the detectors' batch work done once for all of them
    (``Preparer.prepare_many``). Any other error is a bug and stops
    the scan."""
    out: list[Outcome] = []
    for (lineno, _), p in zip(lines, preparer.prepare_many([(line, lineno) for lineno, line in lines])):
        if isinstance(p, Exception) and not isinstance(p, Rejected):
            raise p
        out.append((lineno, p))
    return out


#: Lines per chunk that a preparing process prepares and sends at once (the detectors' batch work is
#: done once per chunk). 128 rather than 32: the chunk's fixed costs (NumPy calls, a pickle, a pipe
#: write and a wake-up of the judging process) are spread over more documents; 256 was no faster
#: in alternated runs.
CHUNK_LINES = 128


class Spool:
    """Strings appended in order and read back once, in that order: in memory up to ``chunk``, the
    earlier ones pickled to an unnamed temporary file a chunk at a time.

    Why: ``scan`` writes each document's final verdict at the end, revisions included, in input
    order, so it keeps every id. A list of ten million ids is most of a gigabyte; the file keeps the
    memory at one chunk (``engine.docs_in_memory``, as for the documents' states)."""

    def __init__(self, chunk: int):
        self.chunk = max(1, chunk)
        self.mem: list[str] = []
        self.file: Any = None

    def append(self, item: str) -> None:
        self.mem.append(item)
        if len(self.mem) >= self.chunk:
            if self.file is None:
                self.file = tempfile.TemporaryFile(prefix="stream-dedup-order-")
            pickle.dump(self.mem, self.file, pickle.HIGHEST_PROTOCOL)
            self.mem = []

    def __iter__(self) -> Iterator[str]:
        if self.file is not None:
            self.file.flush()
            self.file.seek(0)
            while True:
                try:
                    yield from pickle.load(self.file)
                except EOFError:
                    break
        yield from self.mem

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _chunks(lines: Iterable[Line], size: int) -> Iterator[list[Line]]:
    it = iter(lines)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _lines(f, progress: Callable[[int], None] | None = None) -> Iterator[Line]:
    """The numbered, stripped, non-empty lines of a binary file; ``progress`` gets each line's bytes."""
    for lineno, line in enumerate(f, 1):
        if progress is not None:
            progress(len(line))
        line = line.strip()
        if line:
            yield lineno, line


def _file_worker(settings: Settings, path: str, worker: int, jobs: int, size: int, conns: list) -> None:
    """A preparing process of ``FilePreparers``: gets ready to prepare, forks the next one, then reads
    the whole file, prepares every ``jobs``-th chunk from ``worker`` on, and sends each chunk's
    outcomes on ``conns[worker]``, then None (or the traceback of a failure).

    Why the chain of forks: getting ready is mostly rjieba's dictionary (read-only
    afterwards). Forked from a ready process, the next one starts ready, so the machine builds the
    dictionary once rather than once per process, beside the judging process that opens the stores
    meanwhile: on a machine where every process competes for the CPU, the preparing processes spend
    less CPU than if each built its own."""
    conn, child = conns[worker], None
    try:
        for other in conns[:worker]:
            other.close()  # only the judging process may hold another process's pipe: EOF means death
        if worker == 0:  # the ones it forks inherit its niceness: lowering it again would add up
            _yield_to_judging()
        preparer = Preparer(settings, clock=time.time)
        preparer.warm(html=False)
        child = os.fork() if worker + 1 < jobs else None
        if child == 0:
            _run_forked(settings, path, worker + 1, jobs, size, conns)
        for other in conns[worker + 1:]:
            other.close()
        with open(path, "rb") as f:
            for c, lines in enumerate(_chunks(_lines(f), size)):
                if c % jobs == worker:  # f.tell(): the bytes read up to the chunk's last line
                    conn.send_bytes(pickle.dumps((f.tell(), _prepare_lines(preparer, lines)),
                                                 pickle.HIGHEST_PROTOCOL))
        conn.send_bytes(pickle.dumps(None))
    except BaseException:  # noqa: BLE001 - handed to the judging process, which stops the scan with it
        conn.send_bytes(pickle.dumps(traceback.format_exc()))
    finally:
        conn.close()
        if child:  # reaped here, not left to init: no zombie, and its CPU counts in our parent's rusage
            os.waitpid(child, 0)


def _run_forked(settings: Settings, path: str, worker: int, jobs: int, size: int, conns: list) -> None:
    """The body of a process forked by ``_file_worker``: it never returns into its parent's code
    (the rest of the parent's work and its exit handlers are not its own)."""
    code = 1
    try:
        _file_worker(settings, path, worker, jobs, size, conns)
        code = 0
    finally:
        os._exit(code)


class FilePreparers:
    """``jobs`` processes that prepare a file's documents, read back in input order.

    Why not a ``multiprocessing.Pool``: a pool feeds and drains its processes through two threads in
    the judging process, and every RocksDB read or write releases the GIL, so each store call waited
    behind those threads. Here each
    process reads the file itself and takes every ``jobs``-th chunk of ``chunk`` lines, so nothing is
    sent to it; the judging process reads chunk c from process c % jobs, on its own thread. A full
    pipe stops a process that runs ahead, so memory stays bounded. The processes start before the
    stores are opened, and load what preparing needs (the segmenter, the IDF table) while they open."""

    def __init__(self, settings: Settings, path: str, jobs: int, chunk: int = CHUNK_LINES):
        import multiprocessing as mp

        # the first process loads what preparing needs (the segmenter's dictionary) while this
        # one opens the stores, and forks the next, and so on (_file_worker): judging never segments
        # (the n-gram payload carries its words)
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context("spawn")
        pipes = [ctx.Pipe(duplex=False) for _ in range(jobs)]
        self.conns = [recv for recv, _ in pipes]
        sends = [send for _, send in pipes]
        self.first = ctx.Process(target=_file_worker, args=(settings, path, 0, jobs, chunk, sends),
                                 name="scan-prepare", daemon=True)
        self.first.start()
        for send in sends:
            send.close()

    def outcomes(self, progress: Callable[[int], None] = lambda read: None) -> Iterator[Outcome]:
        """Each line's outcome in input order; ``progress`` gets the bytes read so far."""
        jobs = len(self.conns)
        for c in itertools.count():
            w = c % jobs
            try:
                msg = pickle.loads(self.conns[w].recv_bytes())
            except EOFError:
                raise RuntimeError(f"scan: preparing process {w} died") from None
            if msg is None:  # the process that would hold chunk c has none: every chunk was read
                return
            if isinstance(msg, str):
                raise RuntimeError(f"scan: preparing process {w} failed:\n{msg}")
            read, outs = msg
            progress(read)
            yield from outs

    def close(self) -> None:
        """Stops the processes that are still preparing: the first by a signal, the ones it forked
        when their pipes close (their next write fails)."""
        if self.first.is_alive():
            self.first.terminate()
        self.first.join()
        for conn in self.conns:
            conn.close()


def prepared_in_order(settings: Settings, preparer: Preparer, lines: Iterable[Line], jobs: int,
                      chunk: int = CHUNK_LINES) -> Iterator[Outcome]:
    """Each line prepared (or its rejection), in input order; with ``jobs`` >= 1 in a pool of that many
    processes (stdin; a file goes to ``FilePreparers``), else here.

    Preparing (parse, normalize, segment, fingerprint) is pure and most of a document's cost; the
    stores must see documents one at a time in input order, so the results come back in order and
    the verdicts equal a single process's. At most ``4 * jobs`` chunks are in flight: memory stays
    bounded however long the input."""
    if jobs < 1:
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


def _count_lines(path: str) -> int:
    """Lines of a file (the last one may lack its newline): a bound on the documents it holds."""
    n = 1
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


class _TextAsBytes:
    """A text stream that is given bytes (UTF-8): standard output where it has no binary layer."""

    def __init__(self, text: TextIO):
        self.text = text

    def write(self, b: bytes) -> None:
        self.text.write(b.decode("utf-8"))

    def flush(self) -> None:
        self.text.flush()


def _stdout_bytes():
    """Standard output's binary layer, after what its text layer holds (a test's capture may have none)."""
    sys.stdout.flush()
    return getattr(sys.stdout, "buffer", None) or _TextAsBytes(sys.stdout)


def _progress_bar(total: int | None):
    from tqdm import tqdm  # only when shown: its import is part of start-up

    return tqdm(total=total, unit="B", unit_scale=True, desc="scan", file=sys.stderr)


class _NoBar:
    """What the scan loop asks of a progress bar, when none is shown."""

    n = 0

    def update(self, k: int) -> None:
        self.n += k

    def close(self) -> None:
        pass


def default_jobs() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


#: Lines ``auto_jobs`` reads to tell short texts from long ones.
SAMPLE_LINES = 256


def auto_jobs(settings: Settings, input_path: str, cores: int | None = None) -> int:
    """Preparing processes for ``scan`` of this input: one per core, or for short texts one fewer.

    Why not one per core always: the judging process needs a core too, and how much of the work is
    preparing depends on the texts. A news article costs several times as much to prepare as to
    judge, so the preparing processes bound the run and every core should prepare. A short text
    (an SMS) costs about as much to judge as to prepare, so the judging process is half the work,
    and a second preparing process on two cores only takes turns with it. Short: the first ``SAMPLE_LINES`` events average at most
    ``text.short_chars`` characters of text or HTML (the body ``document.validate`` picks; the
    length under which the n-gram detector alone judges them), a line that is not a valid event
    counting its bytes. Standard input is not sampled (one per core)."""
    cores = cores or default_jobs()
    if input_path == "-":
        return cores
    chars = lines = 0
    with open(input_path, "rb") as f:
        for _, line in itertools.islice(_lines(f), SAMPLE_LINES):
            lines += 1
            try:
                chars += len(validate(parse_event(line), 0)[3])
            except Rejected:
                chars += len(line)
    short = lines > 0 and chars <= settings.text.short_chars * lines
    return cores - 1 if short else cores


def run_scan(settings: Settings, input_path: str, out_path: str = "-", *, state_dir: str | None = None,
             progress: bool = False, report_bad: TextIO | None = None, quiet: bool = False,
             clusters_path: str | None = None, jobs: int = 0) -> ScanSummary:
    """``jobs``: processes that prepare documents beside this one, which judges them (``FilePreparers``
    for a file, else ``prepared_in_order``); 0: this process prepares them too. The verdicts do
    not depend on it."""
    with fewer_collections():
        return _run_scan(settings, input_path, out_path, state_dir=state_dir, progress=progress,
                         report_bad=report_bad, quiet=quiet, clusters_path=clusters_path, jobs=jobs)


def _run_scan(settings: Settings, input_path: str, out_path: str, *, state_dir: str | None, progress: bool,
              report_bad: TextIO | None, quiet: bool, clusters_path: str | None, jobs: int) -> ScanSummary:
    summary = ScanSummary()
    if report_bad is None and not quiet:
        report_bad = sys.stderr
    t0 = time.perf_counter()
    total = os.path.getsize(input_path) if input_path != "-" else None  # a missing file fails here
    # started before the stores are opened: the processes load what preparing needs meanwhile
    preparers = FilePreparers(settings, input_path, jobs) if jobs >= 1 and input_path != "-" else None
    engine: Engine | None = None
    order = Spool(settings.engine.docs_in_memory)
    try:
        engine = Engine(settings, state_dir, most_docs=None if input_path == "-" else _count_lines(input_path))
        bar = _progress_bar(total) if progress else _NoBar()
        f = None
        try:
            if preparers is not None:
                outcomes = preparers.outcomes(lambda read: bar.update(read - bar.n))
            else:
                f = _open_in(input_path)
                outcomes = prepared_in_order(settings, engine.preparer, _lines(f, bar.update), jobs)
            for lineno, p in outcomes:
                _judge_line(engine, lineno, p, summary, order, report_bad)
        finally:
            bar.close()
            if f is not None and f is not sys.stdin.buffer:
                f.close()
        _write_verdicts(engine, order, out_path, summary)
        if clusters_path:
            _write_clusters(engine, clusters_path, summary)
    finally:
        order.close()
        if preparers is not None:
            preparers.close()
        if engine is not None:
            engine.close()
    summary.seconds = time.perf_counter() - t0
    return summary


def _judge_line(engine: Engine, lineno: int, p: Prepared | Rejected, summary: ScanSummary, order: Spool,
                report_bad: TextIO | None) -> None:
    """Judge one line's document, its ids in first-verdict order in ``order``; a rejected line is
    counted and reported (the first 1,000)."""
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
        return
    for v in verdicts:
        if v.revision == 0:
            order.append(v.id)
        else:
            summary.revisions += 1


def _write_verdicts(engine: Engine, order: Spool, out_path: str, summary: ScanSummary) -> None:
    """Each document's final verdict, in the order of their first verdicts, as the records' bytes
    the workers publish (``json_record``)."""
    out = _stdout_bytes() if out_path == "-" else open(out_path, "wb")
    try:
        for ident in order:
            final = engine.verdict(ident)
            if final is None:  # every judged document keeps its verdict: a broken engine, not bad input
                raise RuntimeError(f"no verdict kept for document {ident!r}")
            summary.docs += 1
            if final.verdict == "unique":
                summary.unique += 1
            elif final.match == "exact":
                summary.exact += 1
            else:
                summary.near += 1
                summary.by_detector[final.detector or "?"] += 1
            out.write(json_record(final.to_dict()) + b"\n")
    finally:
        if out_path == "-":
            out.flush()
        else:
            out.close()


def _write_clusters(engine: Engine, path: str, summary: ScanSummary) -> None:
    """The clusters, largest first."""
    with open(path, "wb") as cf:
        for c in sorted(engine.clusters(), key=lambda c: (-c.size, c.ts or 0, c.id)):
            summary.clusters += 1
            summary.largest_cluster = max(summary.largest_cluster, c.size)
            cf.write(json_record(c.to_dict()) + b"\n")
