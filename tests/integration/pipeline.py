"""Helpers for pipeline tests: worker processes, a labelled stream, reading topics to the end."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from stream_dedup.config import Settings
from stream_dedup.stream.kafka_io import consumer, producer, send
from stream_dedup.cli.produce import event_key

from ..conftest import SHARED

REPO = Path(__file__).resolve().parents[2]


def settings_env(s: Settings, **extra: str) -> dict[str, str]:
    t = s.topics
    # the tests' own knobs share the settings' prefix, and settings reject unknown names
    base = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DEDUP_TEST_")}
    env = dict(base, KAFKA_BOOTSTRAP=s.kafka.bootstrap, STREAM_DEDUP_TOPICS__PAGES=t.pages,
               STREAM_DEDUP_TOPICS__DLQ=t.dlq, STREAM_DEDUP_TOPICS__VERDICTS=t.verdicts,
               STREAM_DEDUP_TOPICS__UNIQUE=t.unique, STREAM_DEDUP_TOPICS__DUPLICATE=t.duplicate,
               STREAM_DEDUP_TOPICS__CLUSTERS=t.clusters,
               STREAM_DEDUP_TOPICS__INTERNAL_PREFIX=t.internal_prefix, STREAM_DEDUP_TOPICS__PARTITIONS=str(t.partitions),
               STREAM_DEDUP_WORKER__APP_ID=s.worker.app_id, STREAM_DEDUP_WORKER__WEB_PORT="0",
               STREAM_DEDUP_WORKER__STALL_TIMEOUT_S="60")
    env.update(extra)
    return env


class Workers:
    """Worker processes of one app, each with its own state folder and log.

    Like the deployments (compose ``restart: unless-stopped``, a StatefulSet), a supervisor thread
    restarts a worker that exits by itself, e.g. with code 75 from the stall watchdog; ``restarts``
    records each (name, exit code) so tests can report them.
    """

    def __init__(self, settings: Settings, root: Path, supervise: bool = True):
        self.settings = settings
        self.root = root
        self.procs: dict[str, subprocess.Popen] = {}
        self.env: dict[str, dict[str, str]] = {}
        self.restarts: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        if supervise:
            threading.Thread(target=self._supervise, daemon=True).start()

    def _supervise(self) -> None:
        while not self.done.wait(1.0):
            with self.lock:
                for name, p in list(self.procs.items()):
                    if p.poll() is not None:
                        self.restarts.append((name, p.returncode))
                        self._spawn(name, self.env[name])

    def start(self, name: str, **env: str) -> subprocess.Popen:
        with self.lock:
            self.env[name] = env
            return self._spawn(name, env)

    def _spawn(self, name: str, env: dict[str, str]) -> subprocess.Popen:
        state = self.root / f"state-{name}"
        log = open(self.root / f"{name}.log", "ab")
        # a worker with injected faults is the test-only FaultyWorker (tests/faulty_worker.py)
        command = ["-m", "tests.faulty_worker"] if any(k.startswith("FAULT_") for k in env) else \
            ["-m", "stream_dedup.cli", "worker"]
        p = subprocess.Popen([sys.executable, *command],
                             env=settings_env(self.settings, STREAM_DEDUP_WORKER__STATE_DIR=str(state), **env),
                             stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        self.procs[name] = p
        return p

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        with self.lock:
            p = self.procs.pop(name)
        p.send_signal(sig)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def stop_all(self) -> None:
        self.done.set()
        for name in list(self.procs):
            self.stop(name)

    NOISE = ("producer buffer full", "producer flush took", "Timer commit is overlapping", "woke up too late")

    def logs(self, tail: int = 40) -> str:
        """Per worker: restarts, then the last ``tail`` lines that say something (counts, warnings, errors,
        rebalance steps), without Faust's per-flush chatter and multi-line advice."""
        out = [f"restarts: {self.restarts}"]
        for f in sorted(self.root.glob("*.log")):
            lines = [x[:400] for x in f.read_text(errors="replace").splitlines()
                     if x.startswith("[") and not any(n in x for n in self.NOISE)]
            out.append(f"--- {f.name}\n" + "\n".join(lines[-tail:]))
        return "\n".join(out)

    NOTABLE = ("assigned partitions", "Revoking", "revoked", "not seen here", "skipped offsets", "Restor",
               "stall", "exit")
    CHATTER = ("Unable connect to node", "Unable to update metadata", "Failed fetch messages",
               "Group Coordinator Request failed", "Heartbeat", "coordinator", "Connect to ipv4")

    def notable(self, limit: int = 40) -> str:
        """Per worker: its warnings, errors and rebalance steps over the whole run, each distinct
        message once with its count and first time (a fault's window, which the log's tail has
        scrolled past by the time a convergence check fails), without the broker's connection
        chatter while it is down."""
        out = [f"restarts: {self.restarts}"]
        for f in sorted(self.root.glob("*.log")):
            seen: dict[str, list] = {}
            for x in f.read_text(errors="replace").splitlines():
                m = re.match(r"\[[\d-]+ ([\d:,]+)\] \[\d+\] \[(\w+)\] (.*)", x)
                if m is None or any(n in x for n in self.NOISE + self.CHATTER):
                    continue
                when, level, msg = m.group(1), m.group(2), m.group(3)[:240]
                if level in ("WARNING", "ERROR", "CRITICAL") or any(k in msg for k in self.NOTABLE):
                    seen.setdefault(f"{level} {msg}", [when, 0])[1] += 1
            lines = [f"{t} x{c} {m}" for m, (t, c) in list(seen.items())[:limit]]
            out.append(f"--- {f.name} ({len(seen)} distinct)\n" + "\n".join(lines))
        return "\n".join(out)


def campaign_stream(templates: int, rounds: int, seed: int = 5) -> list[dict]:
    """A spam campaign from the shared SMS corpus: ``templates`` spam messages of 30 characters or
    more, no two starting alike, each sent in every one of ``rounds`` rounds (even rounds exact
    copies, odd ones with a mark added, as ``bench/campaign.py`` makes them). Event time follows
    the rounds; arrival order is shuffled within windows of 50, so some copies arrive late."""
    rng = random.Random(seed)
    texts: list[str] = []
    for line in (SHARED / "sms" / "sms_spam_zh.jsonl").read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        text = d["text"].strip()
        if d.get("label") == 1 and len(text) >= 30 and all(text[:12] != t[:12] for t in texts):
            texts.append(text)
            if len(texts) == templates:
                break
    events = [{"id": f"t{t}-r{r}", "text": text if r % 2 == 0 else f"{text} 第{r}版",
               "ts": 1_700_000_000_000 + (r * templates + t) * 1000}
              for r in range(rounds) for t, text in enumerate(texts)]
    for i in range(0, len(events), 50):
        window = events[i:i + 50]
        rng.shuffle(window)
        events[i:i + 50] = window
    return events


def labelled_stream(tmp: Path, n_news: int, n_sms: int, seed: int = 11, clustered: bool = False) -> list[dict]:
    """Events from the project's development benchmark (built from ../shared/data), arrival order shuffled
    against event time so that earlier documents often arrive after later ones. ``clustered``: only
    documents whose labelled cluster has copies (a short stream with many duplicates: 80 news and
    320 SMS so have 42 labelled copies, the benchmark's first 80 and 320 documents 1)."""
    out = tmp / "devset"
    subprocess.run([sys.executable, str(REPO / "bench" / "build_devset.py"), "--out", str(out)], check=True,
                   capture_output=True)
    rng = random.Random(seed)

    def take(name: str, k: int) -> list[dict]:
        rows = [json.loads(x) for x in (out / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
        if clustered:
            labels = [json.loads(x)["cluster"] for x in (out / f"{name}_labels.jsonl").read_text(
                encoding="utf-8").splitlines()]
            sizes = Counter(labels)
            rows = [r for r, c in zip(rows, labels, strict=True) if sizes[c] > 1]
        return rows[:k]

    events = take("news", n_news) + take("sms", n_sms)
    # beyond the development benchmark's ~13,000 events (long fault-test streams): real messages from
    # the shared SMS corpus under fresh ids (the convergence check compares with scan, not labels)
    missing = n_news + n_sms - len(events)
    if missing > 0:
        raw = (SHARED / "sms" / "sms_spam_zh.jsonl").read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(rng.sample(raw, min(missing, len(raw)))):
            events.append({"id": f"extra-{i}", "text": json.loads(line)["text"], "ts": rng.randrange(20_000_000)})
    for i, e in enumerate(sorted(events, key=lambda e: e["ts"])):
        e["ts"] = 1_700_000_000_000 + i * 1000
        if i % 3 == 0:
            e["rank"] = i % 7  # some pages carry a rank: the clusters name the highest-ranked copy
    rng.shuffle(events)
    return events


def produce_events(settings: Settings, events: list, extra_raw: list[bytes] = (), rate: float | None = None,
                   now_ts: bool = False) -> None:
    """Send at ``rate`` events/s (or at once); ``now_ts``: stamp each event with the wall clock as it goes
    (a live stream, whose event-time window moves with the clock)."""
    p = producer(settings)
    failed: list[str] = []  # a delivery the broker refused: flush() does not count it

    def delivered(err, msg) -> None:
        if err is not None:
            failed.append(f"{msg.key()!r}: {err}")

    t0 = time.monotonic()
    for i, e in enumerate(events):
        if now_ts and not isinstance(e, bytes):
            e["ts"] = int(time.time() * 1000)
        raw = e if isinstance(e, bytes) else json.dumps(e, ensure_ascii=False).encode()
        key = None if isinstance(e, bytes) else str(e["id"]).encode()
        send(p, settings.topics.pages, raw, key, on_delivery=delivered)
        if rate:
            ahead = (i + 1) / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    for raw in extra_raw:  # keyed as `stream-dedup produce` keys them: by id, where there is one
        send(p, settings.topics.pages, raw, event_key(raw), on_delivery=delivered)
    assert p.flush(60) == 0
    assert not failed, f"{len(failed)} events were not delivered to the pages topic, e.g. {failed[:5]}"


class Producing(threading.Thread):
    """``produce_events`` in the background; ``finish`` joins it and raises what it raised (a plain
    thread's exception is only printed, so an event the producer lost looked like one the workers
    lost)."""

    def __init__(self, settings: Settings, events: list, **kw) -> None:
        super().__init__(daemon=True)
        self.args_ = (settings, events)
        self.kw = kw
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            produce_events(*self.args_, **self.kw)
        except BaseException as e:  # noqa: BLE001 - handed to finish()
            self.error = e

    def finish(self, timeout: float) -> None:
        self.join(timeout)
        assert not self.is_alive(), f"the producer has not finished in {timeout} s"
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error!r}") from self.error


def read_all(settings: Settings, topic: str, until: callable, timeout: float, idle: float = 1e9) -> list[dict]:
    """Read a topic from the start until ``until(messages)`` holds, or timeout.

    ``until`` is asked when the topic has nothing new and otherwise after every 10 % more messages:
    it usually walks all of them (``latest``), and asking after each one made reading 72,000
    verdicts take longer than producing them (quadratic), on the cores the workers need."""
    c = consumer(settings, f"reader-{time.time_ns()}")
    c.subscribe([topic])
    msgs: list[dict] = []
    deadline = time.time() + timeout
    last = time.time()
    checked = 0
    try:
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                last = time.time()
                msgs.append(json.loads(m.value()))
                if len(msgs) < checked * 1.1 + 100:
                    continue
            elif time.time() - last > idle:
                break
            if until(msgs):
                break
            checked = len(msgs)
    finally:
        c.close()
    return msgs


def whereabouts(settings: Settings, ids: set[str], limit: int = 20) -> str:
    """Where events without a verdict sit on the pages topic (partition@offset): what a lost verdict
    needs to be traced against the workers' log (a gap re-read, a rebalance), which the count alone
    never said."""
    c = consumer(settings, f"whereabouts-{time.time_ns()}")
    c.subscribe([settings.topics.pages])
    found: dict[str, tuple[int, int]] = {}
    last = time.time()
    try:
        while time.time() - last < 5 and len(found) < len(ids):
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            last = time.time()
            try:
                i = str(json.loads(m.value())["id"])
            except Exception:  # noqa: BLE001 - the bad events of the stream
                continue
            if i in ids:
                found[i] = (m.partition(), m.offset())
    finally:
        c.close()
    return "; ".join(f"{i} at pages[{found[i][0]}]@{found[i][1]}" if i in found else f"{i} not on the pages topic"
                     for i in sorted(ids)[:limit])


def partition_counts(settings: Settings) -> dict[str, int]:
    """Every topic's partition count, as the broker's metadata says now."""
    from stream_dedup.stream.kafka_io import admin

    return {name: len(t.partitions) for name, t in admin(settings).list_topics(timeout=10).topics.items()}


def wait_for_partitions(settings: Settings, topic: str, n: int, timeout: float = 30) -> None:
    """Wait until the metadata shows ``n`` partitions of ``topic``: after ``create_partitions``
    returns, the brokers' metadata follows the controller a little later."""
    deadline = time.time() + timeout
    while partition_counts(settings).get(topic) != n:
        assert time.time() < deadline, f"{topic} does not show {n} partitions after {timeout} s"
        time.sleep(0.2)


def latest(verdicts: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for v in verdicts:
        if v["id"] not in out or v["revision"] > out[v["id"]]["revision"]:
            out[v["id"]] = v
    return out


def key_of(v: dict) -> tuple:
    return (v["verdict"], v["match"], v["duplicate_of"])
