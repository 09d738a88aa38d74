"""Fault harness: an operator's bad minutes, and what they do to verdicts.

    python bench/faults.py [--events 10000] [--rate 100] [--brokers 1 3]
                           [--guarantees at_least_once exactly_once] [--name faults]

Each row (brokers x processing guarantee) starts its own local broker, or KRaft cluster of three
(``deploy/kafka/kafka.sh``, replication 3, min.insync.replicas 2), two workers with default settings,
and sends SMS of the development set (with a few malformed events among them) at a steady rate.
While they are sent, three faults follow at 15 %, 45 % and 75 % of the sending time:

1. SIGKILL of worker w0, which a supervisor restarts 10 s later;
2. one broker: SIGKILL of the broker, started again 5 s later (same data); three brokers: SIGKILL of
   the node that coordinates the workers' group, started again 20 s later;
3. SIGKILL of worker w1, restarted 10 s later.

Verdicts are read as they arrive. The table gives per row: events lost (accepted, with no verdict at
the end), divergent (the highest revision differs from ``scan`` of the same events), malformed events
without a dead letter, and per fault two figures: the stall, the longest stretch without any verdict
from the fault until the next one (what an operator sees on a dashboard), and the wait, the longest
time from sending an event to its first verdict, over the events sent from the fault until 10 s
before the next one (what a user of the verdicts sees); and the longest changelog restore a worker
logged (its bulk restore, and Faust's "Restoring state" to "Done reading"). The test suite runs a
short version (one broker, at-least-once, 3,000 events).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, devset, need_shared, read_jsonl, save, settings_for, stop_processes, table  # noqa: E402
from kafka_e2e import env_for, free_port, wait_until_stable  # noqa: E402

from stream_dedup.core.engine import Engine  # noqa: E402
from stream_dedup.stream.kafka_io import admin, consumer, producer, quiet_librdkafka, send  # noqa: E402
from stream_dedup.stream.topics import apply  # noqa: E402

SCRIPT = REPO / "deploy" / "kafka" / "kafka.sh"
BAD = [b"{not json", b'{"text": "no id"}', b'{"id": "bad-1"}', b'{"id": "bad-2", "text": 42}',
       b'{"id": "bad-3", "text": "x", "ts": "noon"}']
FAULTS = ("SIGKILL w0", "broker", "SIGKILL w1")
RESTORE = re.compile(r"^\[([\d-]+ [\d:,]+)\] \[\d+\] \[INFO\] \[\^-+Recovery\]: "
                     r"(Restoring state from changelog topics|Done reading from changelog topics)", re.M)
BULK = re.compile(r"bulk restore: \d+ changelog records of \d+ partitions in ([\d.]+) s")
NEXT_S = 10.0  # an event sent this close to the next fault may wait for that one: not counted for its own


def free_block() -> int:
    """A port P with P, P+1, P+10, P+11, P+20 and P+21 free: a cluster of three's listeners."""
    for _ in range(50):
        base = free_port()
        if base + 22 < 65536 and all(port_free(base + d) for d in (1, 10, 11, 20, 21)):
            return base
    raise RuntimeError("no block of free ports found for a cluster of three")


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def coordinator(settings, group: str, wait_s: float = 30.0) -> str | None:
    """The id of the node coordinating ``group``, asked until ``wait_s`` passed (None then)."""
    client, deadline = admin(settings), time.time() + wait_s
    while time.time() < deadline:
        try:
            return str(client.describe_consumer_groups([group])[group].result(10).coordinator.id)
        except Exception:  # noqa: BLE001 - a busy cluster may not answer at once
            time.sleep(1)
    return None


class Brokers:
    """The row's own local broker or cluster of three on free ports, started fresh, stopped at the end."""

    def __init__(self, nodes: int) -> None:
        port = free_port() if nodes == 1 else free_block()
        self.env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
        self.env.update(KAFKA_PORT=str(port), KAFKA_NODES=str(nodes))
        self.nodes = nodes
        self.script("start", "--fresh")
        self.bootstrap = subprocess.run([str(SCRIPT), "bootstrap"], env=self.env, check=True, capture_output=True,
                                        text=True).stdout.strip()

    def script(self, *args: str) -> None:
        subprocess.run([str(SCRIPT), *args], env=self.env, check=True, capture_output=True, timeout=300)

    def crash(self, settings, group: str) -> tuple[str, str]:
        """SIGKILL one broker: the only one, or the node coordinating ``group``; what restarts it."""
        if self.nodes == 1:
            self.script("kill")
            return "broker killed, restarted after 5 s", "start"
        node = coordinator(settings, group) or "2"
        self.script("kill-node", node)
        return f"coordinator node {node} of 3 killed, restarted after 20 s", f"start-node {node}"

    def stop(self, keep: bool) -> None:
        """Stop the broker(s); their data stays only when ``keep`` (for reading the topics afterwards)."""
        subprocess.run([str(SCRIPT), "stop"], env=self.env, capture_output=True, timeout=300)
        data = Path(self.env.get("KAFKA_HOME", REPO / ".cache" / "kafka")) / f"run-{self.env['KAFKA_PORT']}"
        if keep:
            print(f"broker data kept: {data} (KAFKA_PORT={self.env['KAFKA_PORT']} "
                  f"KAFKA_NODES={self.nodes} deploy/kafka/kafka.sh start)", flush=True)
        else:
            shutil.rmtree(data, ignore_errors=True)


class WorkerProcs:
    """Named worker processes of one app, each with its state folder and log in ``tmp``. Like a
    deployment's supervisor (compose's ``restart: unless-stopped``, a StatefulSet), a thread starts
    again a worker that exited by itself (exit code 70 or 75: the worker asks for a restart);
    ``restarts`` counts them. A worker this script kills is started by the schedule instead."""

    def __init__(self, settings, tmp: Path, guarantee: str) -> None:
        self.settings, self.tmp, self.guarantee = settings, tmp, guarantee
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts: list[tuple[str, int]] = []
        self.lock = threading.RLock()
        self.done = threading.Event()
        threading.Thread(target=self.supervise, daemon=True).start()

    def supervise(self) -> None:
        while not self.done.wait(1.0):
            with self.lock:
                for name, p in list(self.procs.items()):
                    if p.poll() is not None:
                        self.restarts.append((name, p.returncode))
                        self.start(name)

    def start(self, name: str) -> None:
        s = self.settings
        env = env_for(s, str(self.tmp / f"state-{name}"))
        env.setdefault("BENCH_WORKER_LOG_LEVEL", "INFO")
        env.update(STREAM_DEDUP_WORKER__LOG_LEVEL=env["BENCH_WORKER_LOG_LEVEL"], STREAM_DEDUP_WORKER__NAME=name,
                   STREAM_DEDUP_WORKER__PROCESSING_GUARANTEE=self.guarantee,
                   STREAM_DEDUP_KAFKA__REPLICATION_FACTOR=str(s.kafka.replication_factor),
                   STREAM_DEDUP_KAFKA__MIN_INSYNC_REPLICAS=str(s.kafka.min_insync_replicas))
        with self.lock:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "stream_dedup.cli", "worker"], env=env,
                                                cwd=REPO, stdout=open(self.tmp / f"{name}.log", "ab"),
                                                stderr=subprocess.STDOUT)

    def kill(self, name: str) -> None:
        with self.lock:
            p = self.procs.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop_all(self) -> None:
        self.done.set()
        with self.lock:  # a restart under way is done first
            procs = list(self.procs.values())
        stop_processes(procs)

    def restores(self) -> list[float]:
        """Seconds each changelog restore took: the worker's bulk restores (``stream/restore.py``), and
        Faust's own reading of what they left ("Restoring state" to "Done reading" lines)."""
        out = []
        for f in self.tmp.glob("*.log"):
            began = None
            text = f.read_text(errors="replace")
            out += [float(m.group(1)) for m in BULK.finditer(text)]
            for m in RESTORE.finditer(text):
                t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if m.group(2).startswith("Restoring"):
                    began = t
                elif began is not None:
                    out.append(round(t - began, 1))
                    began = None
        return out

    def logs(self, tail: int = 2000) -> str:
        return "".join(f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}" for f in sorted(self.tmp.glob("*.log")))


class Arrivals(threading.Thread):
    """Reads a topic from the start, keeping each message with the time its producer stamped on it."""

    def __init__(self, settings, topic: str) -> None:
        super().__init__(daemon=True)
        self.c = consumer(settings, f"faults-reader-{time.time_ns()}")
        self.c.subscribe([topic])
        self.got: list[tuple[float, dict]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            m = self.c.poll(0.2)
            if m is not None and not m.error():
                # when the worker produced it (the record's CreateTime): this reader may lag behind
                self.got.append((m.timestamp()[1] / 1000, json.loads(m.value())))
        self.c.close()

    def ids(self) -> set[str]:
        return {v["id"] for _, v in list(self.got)}


def send_steadily(settings, events: list[dict], rate: float, t0: float) -> None:
    """Every event at its time on a steady clock from ``t0``, a malformed one after each 1/len(BAD) of them."""
    p = producer(settings)
    every = max(1, len(events) // len(BAD))
    for i, e in enumerate(events):
        ahead = t0 + i / rate - time.time()
        if ahead > 0:
            time.sleep(ahead)
        send(p, settings.topics.pages, json.dumps(e, ensure_ascii=False).encode(), str(e["id"]).encode())
        if i % every == every - 1:
            send(p, settings.topics.pages, BAD[i // every % len(BAD)], None)
        p.poll(0)
    if p.flush(300):
        raise RuntimeError("the producer could not deliver every event within 300 s")


def inject(brokers: Brokers, workers: WorkerProcs, settings, at: list[float]) -> list[tuple[str, float]]:
    """The schedule at the wall times ``at``: what was done and when."""
    done: list[tuple[str, float]] = []

    def wait_until(t: float) -> None:
        time.sleep(max(0.0, t - time.time()))

    for name, t in zip(FAULTS, at, strict=True):
        wait_until(t)
        if name == "broker":
            start = time.time()
            what, restart = brokers.crash(settings, settings.worker.app_id)
            done.append((what, start))
            time.sleep(5 if brokers.nodes == 1 else 20)
            brokers.script(*restart.split())
        else:
            worker = name.split()[1]
            start = time.time()
            workers.kill(worker)
            done.append((f"SIGKILL {worker}, restarted after 10 s", start))
            time.sleep(10)
            workers.start(worker)
    return done


def longest_stall(arrivals: list[float], start: float, end: float) -> float:
    """The longest stretch without a verdict from ``start`` until the first verdict after ``end``...
    unless verdicts flowed again before ``end``: then only up to ``end``."""
    times = sorted(a for a in arrivals if a > start)
    points = [start] + [a for a in times if a <= end]
    after = [a for a in times if a > end]
    if len(points) == 1 and after:
        points.append(after[0])
    return max((b - a for a, b in zip(points, points[1:])), default=float("nan"))


def scan_keys(settings, events: list[dict]) -> dict[str, tuple]:
    """``scan``'s verdict per id for the same events (sending order; verdicts are order-independent)."""
    with Engine(settings) as e:
        for ev in events:
            e.process(ev)
        return {v.id: (v.verdict, v.match, v.duplicate_of) for v in e.verdicts()}


def run_row(events: list[dict], nodes: int, guarantee: str, rate: float, tmp: Path, keep: bool = False) -> dict:
    """One row: broker(s), two workers, steady sending with the three faults, then the comparison."""
    brokers = Brokers(nodes)
    s = settings_for(f"faults-{nodes}-{guarantee[:3]}", partitions=6, bootstrap=brokers.bootstrap)
    s.kafka.replication_factor, s.kafka.min_insync_replicas = nodes, min(nodes, 2)
    quiet_librdkafka(s)  # this script's clients see the broker go away on purpose
    workers = WorkerProcs(s, tmp, guarantee)
    try:
        for attempt in range(3):  # a cluster just started can drop the first admin requests
            try:
                apply(s)
                break
            except Exception:
                if attempt == 2:
                    raise
                time.sleep(5)
        for name in ("w0", "w1"):
            workers.start(name)
        wait_until_stable(s, 2)
        reader = Arrivals(s, s.topics.verdicts)
        reader.start()
        t0 = time.time() + 1
        span = len(events) / rate
        at = [t0 + span * f for f in (0.15, 0.45, 0.75)]
        sender = threading.Thread(target=send_steadily, args=(s, events, rate, t0), daemon=True)
        sender.start()
        done = inject(brokers, workers, s, at)
        sender.join(600)
        wanted = {e["id"] for e in events}
        deadline = time.time() + 300
        while not wanted <= reader.ids() and time.time() < deadline:
            time.sleep(1)
        time.sleep(5)  # revisions still on their way
        reader.done.set()
        reader.join(10)
        dlq = Arrivals(s, s.topics.dlq)
        dlq.start()
        time.sleep(15)
        dlq.done.set()
        return {**compare(s, events, reader.got, len(dlq.got), done, t0, rate), "restores_s": workers.restores(),
                "restarts": workers.restarts}
    except Exception as e:
        raise RuntimeError(f"{e}\n{workers.logs()}") from e
    finally:
        workers.stop_all()
        brokers.stop(keep)


def compare(s, events: list[dict], got: list[tuple[float, dict]], dead_letters: int,
            done: list[tuple[str, float]], t0: float, rate: float) -> dict:
    """Lost and divergent against scan; per fault the stall and the longest wait of an event sent
    between it and the next fault (send time to its first verdict)."""
    latest: dict[str, dict] = {}
    first: dict[str, float] = {}
    for t, v in got:
        first.setdefault(v["id"], t)
        if v["id"] not in latest or v["revision"] > latest[v["id"]]["revision"]:
            latest[v["id"]] = v
    expected = scan_keys(s, events)
    sent = {e["id"]: t0 + i / rate for i, e in enumerate(events)}
    arrivals = [t for t, _ in got]
    ends = [t for _, t in done[1:]] + [max(t0 + len(events) / rate, done[-1][1] + 30)]
    faults = []
    for (what, start), end in zip(done, ends, strict=True):
        waits = {i: first[i] - t for i, t in sent.items() if start <= t < end - NEXT_S and i in first}
        profile: dict[int, float] = {}  # seconds after the fault an event was sent -> its longest wait
        for i, w in waits.items():
            k = int(sent[i] - start)
            profile[k] = round(max(profile.get(k, 0.0), w), 1)
        faults.append({"fault": what, "at": time.strftime("%H:%M:%S", time.gmtime(start)),
                       "stall_s": round(longest_stall(arrivals, start, end), 1),
                       "longest_wait_s": round(max(waits.values(), default=float("nan")), 1),
                       "wait_by_second": profile})
    differ = {i: {"got": latest[i], "scan": k} for i, k in expected.items()
              if i in latest and (latest[i]["verdict"], latest[i]["match"], latest[i]["duplicate_of"]) != k}
    lost = sorted(i for i in expected if i not in latest)
    return {"events": len(events), "lost": len(lost), "lost_ids": lost[:200],
            "divergent": len(differ), "divergent_ids": differ,
            "bad_sent": len(BAD), "dead_letters": dead_letters, "faults": faults}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10000, help="SMS of the development set (it has 10,462)")
    ap.add_argument("--rate", type=float, default=100.0, help="events per second")
    ap.add_argument("--brokers", type=int, nargs="+", choices=[1, 3], default=[1, 3])
    ap.add_argument("--guarantees", nargs="+", choices=["at_least_once", "exactly_once"],
                    default=["at_least_once", "exactly_once"])
    ap.add_argument("--name", default="faults", help="results name (bench/results/NAME.md)")
    ap.add_argument("--keep", type=Path, help="keep each row's worker logs and state in this folder, and its "
                    "broker's data")
    a = ap.parse_args()
    need_shared()
    events = read_jsonl(devset() / "sms.jsonl", a.events)
    rows, results = [], []
    for nodes in a.brokers:
        for guarantee in a.guarantees:
            if a.keep:
                (tmp := a.keep / f"{nodes}-{guarantee}").mkdir(parents=True, exist_ok=True)
                r = run_row(events, nodes, guarantee, a.rate, tmp, keep=True)
            else:
                with tempfile.TemporaryDirectory(prefix="bench-faults-") as folder:
                    r = run_row(events, nodes, guarantee, a.rate, Path(folder))
            r.update(brokers=nodes, guarantee=guarantee)
            results.append(r)
            rows.append([nodes, guarantee, r["events"], r["lost"], r["divergent"],
                         f"{r['dead_letters']} of {r['bad_sent']}"]
                        + [f"{f['stall_s']} / {f['longest_wait_s']}" for f in r["faults"]]
                        + [max(r["restores_s"], default=0.0), len(r["restarts"])]
                        + ["; ".join(f["fault"] for f in r["faults"][1:2])])
            print(rows[-1], flush=True)
    text = table(["brokers", "guarantee", "events", "lost", "divergent", "dead letters",
                  "SIGKILL w0: stall / wait s", "broker", "SIGKILL w1",
                  "longest changelog restore s", "workers' own restarts", "broker fault"], rows)
    save(a.name, {"events": a.events, "rate": a.rate, "rows": results}, text)
    if any(r["lost"] or r["divergent"] or r["dead_letters"] < r["bad_sent"] for r in results):
        sys.exit("faults: events lost, verdicts divergent or malformed events without a dead letter")


if __name__ == "__main__":
    main()
