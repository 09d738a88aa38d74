"""Engine: every stage in one process, one partition of each state store.

It is the embedded driver behind ``stream-dedup scan`` and the Python API, and the reference the
Kafka workers are tested against: both call the functions in ``stages``.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from .exact import ExactStore
from .index import BucketIndex
from .stages import DecideStage, DocStates, IndexStage, Preparer, admit_id, exact_stage
from .wire import Prepared, ToDecide
from .routing import fan_out
from .store import Buffered, Generations, Keyed, KVStore, Tiered
from .verdict import Cluster, DocState, Verdict

# payloads under P that the index keeps after reading them (BucketIndex.ref_cache): ~250 bytes each
# for an SMS
REF_CACHE = 1 << 15

if TYPE_CHECKING:
    from ..config import Settings


class Engine:
    EXPIRE_EVERY = 50_000
    SWEEP_EVERY_WINDOWS = 0.5  # how far past the window an entry may be before a sweep (``expire``)

    def __init__(self, settings: "Settings", state_dir: str | Path | None = None, *, most_docs: int | None = None,
                 forget_after: int | None = None, clock: Callable[[], float] = time.time):
        """``most_docs``: an upper bound on the documents this engine will see, when the caller knows
        one (``scan`` of a file: its lines). A fresh engine then sizes its Bloom filter for no more
        than that: the configured capacity (1M documents, 38 MB) is touched at random, a page fault
        per page, a visible cost for a small file, whose filter fits in cache. A kept
        state folder keeps the configured size (its filter is refilled from the store).

        ``forget_after`` (event-time ms, or None: never): a document's verdict state and id check
        that left memory are forgotten between this long and half as long again after they left it
        or were last written there (``store.Generations``), as the workers' tables forget theirs.
        The ``Deduper`` sets it (it may run for months); ``scan`` does not (it writes every
        document's final verdict at the end of its file).

        ``clock`` (seconds): an event's ts more than ``engine.max_future_ms`` ahead of it is rejected
        (bad_ts)."""
        self.settings = settings
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="stream-dedup-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self.window = settings.engine.window_ms
        self.preparer = Preparer(settings, clock=clock)
        self.exact_kv = Buffered(KVStore(self.state_dir / "exact"))
        self.index_kv = Buffered(KVStore(self.state_dir / "index"))
        capacity = settings.engine.bloom_capacity
        if most_docs is not None and self._tmp is not None:
            capacity = max(1, min(capacity, most_docs))
        self.exact = ExactStore(self.exact_kv, self.window, bloom_capacity=capacity,
                                bloom_fp_rate=settings.engine.bloom_fp_rate, prefault=False)
        self.exact.rebuild_bloom()  # a kept --state folder: the filter comes back from the store
        self.index = IndexStage(BucketIndex(self.index_kv, window=self.window, max_bucket=settings.engine.max_bucket,
                                            ref_cache=REF_CACHE), self.preparer.detectors)
        # Per document: its verdict state and its first content's digest (the id check). The newest
        # are objects in memory, older ones go to a RocksDB folder opened when the first ones leave
        # memory (``Tiered``), so memory does not grow with the input. This run's own: a kept --state
        # folder carries the exact and near stores to the next run, not these.
        self.forget_after = forget_after
        self.run_kv: Buffered | Generations | None = None
        most = settings.engine.docs_in_memory
        self.decide = DecideStage(Tiered(lambda: Keyed(self._run_store(), b"S", DocStates.encode, DocStates.decode),
                                         most))
        self.digests: Tiered = Tiered(lambda: Keyed(self._run_store(), b"D"), most)
        self.watermark: int | None = None
        # the oldest event time in the exact and near stores, or a bound below it: none in fresh
        # stores, unknown in a kept --state folder's (its first expire sweeps)
        self._floor: float = float("-inf") if self.exact_kv.on_disk or self.index_kv.on_disk else float("inf")
        # Whether the id check has seen every id the buckets hold: fresh buckets, and an id check that
        # never forgets. Then an id new to the check is new to the buckets, and an insert need not
        # look for an old entry of it (``merge_entry``'s ``new_id``). A kept --state folder's buckets
        # hold ids of earlier runs, and a ``Deduper`` forgets ids on its own clock.
        self._all_ids_known = forget_after is None and not self.index_kv.on_disk
        self._since_expire = 0

    def process(self, raw: bytes | str | dict, default_ts: int | None = None) -> list[Verdict]:
        """Judge one event; return the verdicts it caused (its own, and revisions of others).

        Raises ``Rejected`` for events that cannot be judged, including a second event with an
        id already seen and different content (the first content of an id stands; a replay of
        the same content is harmless and returns the same verdict).
        """
        return self.judge(self.preparer.prepare(raw, default_ts))

    def judge(self, prepared: Prepared) -> list[Verdict]:
        """The stateful half of ``process``, for a document prepared here or in another process
        (``scan --jobs``: preparing is pure and most of the work, so it spreads over cores while the
        stores see documents one at a time, in input order, as here)."""
        new_id = admit_id(self.digests.get(prepared.id), prepared)
        if new_id:
            self.digests[prepared.id] = prepared.digest
            # an id new to the run has no verdict state: saying so spares the decide stage a look
            # in the spilled ones (a RocksDB miss, several µs)
            self.decide.states[prepared.id] = DocState(prepared.id)
        verdicts: list[Verdict] = []
        fingerprint, probes = fan_out(prepared, 1)
        msgs = exact_stage(self.exact, fingerprint)
        # this document's own answers, taken in with its expect in one decide step; not when the
        # exact stage also offered it to later copies that came first (their steps come between)
        fuse = len(msgs) == 1
        answers: list[ToDecide] = []
        for probe in probes:
            for m in self.index.process(probe, new_id=new_id and self._all_ids_known):
                (answers if fuse and m.kind == "answer" and m.id == prepared.id else msgs).append(m)
        queue = list(reversed(msgs))
        v = self.decide.apply(queue.pop(), answers)  # the expect: ``exact_stage``'s first message
        while True:
            if v:
                verdicts.append(v)
            queue.extend(reversed(self.decide.outbox))  # cluster and chain messages, as the workers route them
            if not queue:
                break
            v = self.decide.apply(queue.pop())
        self._advance(prepared.ts)
        return verdicts

    def _advance(self, ts: int) -> None:
        if self.watermark is None or ts > self.watermark:
            self.watermark = ts
        if ts < self._floor:
            self._floor = ts
        if isinstance(self.run_kv, Generations):  # only with forget_after
            self.run_kv.advance(self.watermark)
        self._since_expire += 1
        if self._since_expire >= self.EXPIRE_EVERY:
            self._since_expire = 0
            self.expire()

    def expire(self) -> int:
        """Drop exact and near state older than the window behind the newest event time.

        A sweep walks both stores whole, so it runs only when an entry can be older than the cutoff
        (``_floor``, the oldest event time stored, says) by ``SWEEP_EVERY_WINDOWS``. Why: ``scan`` calls
        this every 50,000 documents, and over a file whose events span less than the window (most
        files) every walk dropped nothing, while it listed both stores whole, which added to the peak RSS and to the time
        (``bench/scan_memory.py``). And over a longer
        one, a walk every 50,000 documents of stores that hold a window of them costs each document
        a walk of (window / 50,000) keys of its own: a window of millions of documents made every
        document pay for hundreds. Every half window, a key is walked about three times in its
        life, however large the window; entries live at most a window and a half (probes and the
        exact check ignore those past the window, so verdicts do not change)."""
        if self.watermark is None:
            return 0
        cutoff = self.watermark - self.window
        if cutoff <= self._floor + self.SWEEP_EVERY_WINDOWS * self.window:
            return 0
        dropped = self.exact.sweep(cutoff) + self.index.index.sweep(cutoff)
        self._floor = cutoff  # every entry left is at least this recent
        return dropped

    def verdict(self, ident: str) -> Verdict | None:
        st = self.decide.states.get(ident)
        if st is None or st.emitted is None:
            return None
        return st.verdict()

    def clusters(self) -> Iterable[Cluster]:
        """Every document that has copies, with its cluster size and canonical page.

        From the verdict states, not the id checks: with ``forget_after`` an original's id check
        can be forgotten before its state, which every copy that joins writes again."""
        for st in self.decide.states.values():
            if st.members or st.extra:
                yield st.cluster()

    def verdicts(self) -> Iterable[Verdict]:
        for ident in self.digests:
            v = self.verdict(ident)
            if v is not None:
                yield v

    def close(self) -> None:
        for kv in (self.exact_kv, self.index_kv):
            if self._tmp is None:  # a kept folder: write what is still buffered (a temporary one is deleted)
                kv.flush()
            kv.store.close()
        if isinstance(self.run_kv, Generations):
            self.run_kv.destroy()
        elif self.run_kv is not None:
            self.run_kv.store.destroy()
        self.run_kv = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _run_store(self) -> Buffered | Generations:
        """The folder of the per-document records that left memory, opened at the first spill.

        Smaller cache and memtables than the exact and near stores: it is read only for documents
        long past (an original whose copy arrives late, the verdicts written at the end of a scan).
        With ``forget_after``: generations of it, each a folder (``run/g<n>``), deleted whole."""
        if self.run_kv is None:
            path = self.state_dir / "run"
            shutil.rmtree(path, ignore_errors=True)  # a run that died left its own: not this run's records

            def folder(where: Path) -> Buffered:
                return Buffered(KVStore(where, cache_mb=8, write_buffer_mb=16), max_bytes=8 << 20)

            if self.forget_after is None:
                self.run_kv = folder(path)
            else:
                keep = 3  # a span of half forget_after: forgotten between 1 and 1.5 forget_after after a write
                span = max(1, self.forget_after // (keep - 1))
                self.run_kv = Generations(lambda n: folder(path / f"g{n}"), span=span, keep=keep,
                                          now=self.watermark or 0)
        return self.run_kv

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
