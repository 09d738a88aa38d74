"""Kafka end to end on a real broker: sustained events/s and verdict latency, 1 and 2 workers.

    python bench/kafka_e2e.py [--events 10000] [--workers 1 2] [--kinds sms news] [--rate R|half] [--repeat 3]
                              [--profile] [--partitions 6] [--warmup-runs 2] [--warmup-seconds 25]

Starts the local broker (unless KAFKA_BOOTSTRAP is set) and warms it with unreported runs of the
first configuration, at least --warmup-runs and until it has been loaded for --warmup-seconds (a
fresh broker's JIT makes its first ~20 s of load slower),
creates private topics per run, starts the workers, waits until their group is stable and they
have answered 60 warm-up events, then produces the events (their ts = send time) and reads
verdicts. Throughput = events / (last verdict - first send); latency = verdict arrival -
send time. The same events also go through the embedded engine (`scan`'s Engine) for the ratio,
warm like the workers (after 100 events in the same process; before 2026-11-24 the embedded run
included jieba's dictionary load, about 1 s of a 3,000-SMS run, which flattered the ratio).
With --rate R, events are sent at R per second (those due within the same 5 ms together). With
--rate half, every configuration is measured twice in the same invocation: at full speed, then at
half the median events/s it just reached (the latency target's rate, taken from the same hour's
maximum: this machine's speed moves by up to 2x between hours, and a fixed rate copied from another
hour's maximum may be that hour's maximum).
Every configuration runs --repeat times (fresh topics and workers each time; 3 by default, 1 with
--profile): the table gives the medians of events/s, p50 and p99 and every run's events/s and p99,
because two runs of the same command differ by up to ±30 % on this machine; the other columns
and the latency plot come from the run with the median events/s. The embedded rate is the median
of as many runs.
"changelog KB/event" is the bytes the run added to the changelog topics' log segments on the
broker, per event (read from this project's broker's log folder; empty for another broker): a
changelog record carries a whole bucket, so ``--kinds campaign`` (``bench/campaign.py``'s spam
campaign, 50 messages sent over and over) writes as many records per SMS as the SMS set and many
times the bytes.
The "cores" columns say who used the machine's CPU during the measured run (/proc): the workers,
the broker and anything else, this script's own Kafka clients, and what stayed idle. "worker CPU
ms/event" is the workers' CPU per event; "main threads" the part of it on the workers' main threads
(agents, Faust, the producer; the rest is mostly the Kafka consumer's thread); "stages' code" the
time the stages' own code took per event (the workers' ``stream_dedup_stage_seconds``, read from
their /metrics before and after the run: preparing, exact checks, probes, decisions; wall time, so
it includes any time the thread was preempted), the core's share of the main threads. "msgs per
batch" and "ms per batch" are the agents' average batch, prepare / index / decide, over the measured
run (``stream_dedup_batch_messages`` and ``stream_dedup_batch_seconds``): full batches at the maximum
rate, small ones at a steady rate, where an event costs more CPU.
With --profile, py-spy samples every worker during the measured run and a second table says where
their CPU went (bench/worker_profile.py); the results are then written as kafka_profile*. The raw
samples stay in bench/work/profiles/<run>/, and ``python bench/worker_profile.py
bench/work/profiles/<run>/profile-*.txt`` lists the functions each category's CPU went to.

To tell a change's cost from the hour's (how the fifty-fourth stop cleared a news slowdown):

    python bench/kafka_e2e.py --workers 1 --kinds news --against ../old

``--against`` names other checkouts (``git worktree add ../old 2720619``): each configuration's
runs alternate between this tree's workers and theirs (a round runs each once, every other round in
the reverse order), on the same broker, and the table's first column names the code by commit
(``+`` when the tree has changes not committed). The embedded rate, and so "kafka/scan", is this
tree's. The results' name then ends in ``_compare``, so that the recorded tables are kept.

A run whose workers, kinds or events differ from those of the recorded table of its name
(``RECORDED``: kafka_e2e, kafka_e2e_half, kafka_profile, kafka_profile_half, kafka_e2e_campaign) is written as
``<name>_trial``, which ``collect.py`` and git leave out: ``--workers 2 --kinds sms`` to check a
change no longer replaces the 1- and 2-worker table.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (REPO, RESULTS, alternated, checkout_name, checkouts, devset, need_shared, read_jsonl,  # noqa: E402
                    save, settings_for, stop_processes, table)
from worker_profile import CpuMeter, Profiler, summary  # noqa: E402
import campaign  # noqa: E402

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from stream_dedup.config import load_settings  # noqa: E402
from stream_dedup.core.engine import Engine  # noqa: E402
from stream_dedup.stream.kafka_io import admin, consumer, producer, send  # noqa: E402
from stream_dedup.stream.topics import apply  # noqa: E402


def broker_pid() -> int | None:
    """The local broker's pid (``kafka.sh status`` on the bootstrap's port); None for another broker."""
    port = os.environ.get("KAFKA_BOOTSTRAP", "").rsplit(":", 1)[-1]
    if not port.isdigit():
        return None
    out = subprocess.run([str(REPO / "deploy/kafka/kafka.sh"), "status"], env=dict(os.environ, KAFKA_PORT=port),
                         capture_output=True, text=True).stdout.split()
    return int(out[2]) if len(out) > 2 and out[:2] == ["running", "pid"] and out[2].isdigit() else None


def env_for(s, state: str, web_port: int = 0) -> dict:
    t = s.topics
    return dict(os.environ, KAFKA_BOOTSTRAP=s.kafka.bootstrap, STREAM_DEDUP_TOPICS__PAGES=t.pages,
                STREAM_DEDUP_TOPICS__DLQ=t.dlq, STREAM_DEDUP_TOPICS__VERDICTS=t.verdicts,
                STREAM_DEDUP_TOPICS__UNIQUE=t.unique, STREAM_DEDUP_TOPICS__DUPLICATE=t.duplicate,
                STREAM_DEDUP_TOPICS__CLUSTERS=t.clusters,
                STREAM_DEDUP_TOPICS__INTERNAL_PREFIX=t.internal_prefix, STREAM_DEDUP_TOPICS__PARTITIONS=str(t.partitions),
                STREAM_DEDUP_WORKER__APP_ID=s.worker.app_id, STREAM_DEDUP_WORKER__WEB_PORT=str(web_port),
                STREAM_DEDUP_WORKER__STATE_DIR=state,
                STREAM_DEDUP_WORKER__LOG_LEVEL=os.environ.get("BENCH_WORKER_LOG_LEVEL", "WARNING"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker_sums(ports: list[int]) -> dict[tuple[str, str], float] | None:
    """(sample, stage) -> its value summed over the workers, from their ``/metrics``, for the
    samples in ``_SUMMED``. None when a worker does not answer."""
    out: dict[tuple[str, str], float] = {}
    for port in ports:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        except OSError:
            return None
        for fam in text_string_to_metric_families(body):
            for sample in fam.samples:
                if sample.name in _SUMMED:
                    key = (sample.name, sample.labels["stage"])
                    out[key] = out.get(key, 0.0) + sample.value
    return out


# ``stream_dedup_stage_seconds``: the time each stage's own code took (``prepare_many`` per slice, and
# each exact check, probe and decision: the core's work, without the wire format, the tables'
# flushes, Faust or aiokafka); ``stream_dedup_batch_*``: the agents' batches, their messages and
# wall time
_SUMMED = ("stream_dedup_stage_seconds_sum", "stream_dedup_batch_messages_count",
           "stream_dedup_batch_messages_sum", "stream_dedup_batch_seconds_sum")


def stage_costs(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], events: int) -> dict:
    """What the run itself added to ``worker_sums``: the stages' code in ms per event, and per agent
    its batches, the messages in an average one and its average wall time."""
    d = {k: v - before.get(k, 0.0) for k, v in after.items()}
    stages = {st: round(1000 * v / events, 3) for (name, st), v in d.items() if name == "stream_dedup_stage_seconds_sum"}
    batches = {}
    for (name, st), n in d.items():
        if name == "stream_dedup_batch_messages_count" and n > 0:
            batches[st] = {"batches": int(n),
                           "messages_per_batch": round(d.get(("stream_dedup_batch_messages_sum", st), 0.0) / n, 1),
                           "ms_per_batch": round(1000 * d.get(("stream_dedup_batch_seconds_sum", st), 0.0) / n, 2)}
    return {"stages": stages, "batches": batches}


def wait_until_stable(s, workers: int, timeout: float = 180) -> None:
    """Until the workers' group is Stable with every worker holding partitions. A warm-up answer
    alone does not show it: a worker that joins after it makes the group rebalance, and that pause
    (seconds) used to land in the first tenth of the measured run."""
    client = admin(s)
    group = s.worker.app_id
    deadline = time.time() + timeout
    seen = "no description"
    while time.time() < deadline:
        try:
            d = client.describe_consumer_groups([group])[group].result(10)
            seen = f"last seen {d.state}, {len(d.members)} member(s)"
            if (str(d.state).endswith("STABLE") and len(d.members) == workers
                    and all(m.assignment and m.assignment.topic_partitions for m in d.members)):
                return
        except Exception as e:  # noqa: BLE001 - the group does not exist until the first worker joins
            seen = f"last answer {e!r}"
        time.sleep(0.5)
    raise RuntimeError(f"group {group} did not become stable with {workers} worker(s) in {timeout:.0f} s ({seen})")


def worker_logs(tmp: Path, prefix: str, workers: int, tail: int = 3000) -> str:
    """The end of each worker's log, for an error message: the logs go with the run's temporary folder."""
    return "".join(f"--- worker {i}:\n" + (tmp / f"{prefix}-{i}.log").read_text(errors="replace")[-tail:]
                   for i in range(workers))


def warm_up(s, p, c, workers: int, tmp: Path, prefix: str, n: int = 60) -> None:
    """``n`` unique documents (random CJK text, no copies of the measured events) through every stage,
    answered before the measured run: each worker's first batch per partition (RocksDB opens, Bloom
    filters, producer metadata) is start-up, not sustained speed."""
    rng = random.Random(7)
    ids = {f"warm-{i}" for i in range(n)}
    for ident in sorted(ids):
        text = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(60))
        p.produce(s.topics.pages, key=ident.encode(), value=json.dumps({"id": ident, "text": text, "ts": 1}).encode())
    p.flush(30)
    deadline = time.time() + 180
    while ids and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            ids.discard(json.loads(m.value())["id"])
    if ids:
        raise RuntimeError(f"workers did not answer {len(ids)} warm-up event(s):\n{worker_logs(tmp, prefix, workers)}")


def internal_totals(c, prefix: str, partitions: int) -> dict[str, int]:
    from confluent_kafka import TopicPartition

    return {name: sum(c.get_watermark_offsets(TopicPartition(f"{prefix}.{name}", part), timeout=10)[1]
                      for part in range(partitions))
            for name in INTERNAL}


INTERNAL = ("probes", "answers", "exact-changelog", "index-changelog", "decide-changelog", "ids-changelog")


def log_folder() -> Path | None:
    """This project's broker's log folder (``kafka.sh``'s layout), when KAFKA_BOOTSTRAP names it on
    loopback; None for another broker, whose files this script cannot see."""
    boot = os.environ.get("KAFKA_BOOTSTRAP", "")
    host, _, port = boot.rpartition(":")
    if host not in ("127.0.0.1", "localhost") or not port.isdigit():
        return None
    folder = Path(os.environ.get("KAFKA_HOME") or REPO / ".cache" / "kafka") / f"run-{port}" / "log"
    return folder if folder.is_dir() else None


def internal_bytes(prefix: str) -> dict[str, int] | None:
    """Bytes in the internal topics' log segments (the record batches as the broker stores them),
    by the names of ``internal_totals``; None where the broker's files are not here.

    Why bytes as well as records: a record of a bucket's changelog is the whole bucket, so a spam
    campaign, whose buckets hold hundreds of copies, sends the same number of records per SMS as
    a stream of distinct messages and many times the bytes (``--kinds campaign``)."""
    folder = log_folder()
    if folder is None:
        return None
    out = dict.fromkeys(INTERNAL, 0)
    for part in folder.glob(f"{prefix}.*"):
        name = part.name[len(prefix) + 1:].rpartition("-")[0]
        if name in out:
            out[name] += sum(f.stat().st_size for f in part.glob("*.log"))
    return out


def drop_topics(s, prefix: str) -> None:
    """Delete the run's topics (its own prefix: pages, internal, changelogs, outputs). Left behind,
    every run's compacted changelogs kept the broker's log cleaner and retention checks busy in the
    runs after it: the broker's share of the cores grew run after run on one broker (0.26 to 0.75
    core for the same SMS run at the seventh stop of 2026-11-25)."""
    client = admin(s)
    names = [t for t in client.list_topics(timeout=30).topics if t.startswith(prefix)]
    for fut in client.delete_topics(names, operation_timeout=30).values() if names else ():
        try:
            fut.result()
        except Exception as e:  # noqa: BLE001 - a leftover topic only costs the broker some work
            print(f"warning: topic not deleted: {e}", flush=True)


# With --rate, the events due within the next 5 ms are sent together: one sleep per event (2,500 a second at
# half the SMS maximum) cost this script 0.18 core of the machine's two, against 0.07 sending at full speed,
# and the workers and the broker share those cores. The producer's own linger (librdkafka, 5 ms) groups
# them the same way either way; each event's latency counts from its own send time.
# the recorded tables, with the workers, kinds and events of their commands (README's
# Benchmarks section): a run under one of these names with other ones is written as <name>_trial,
# so that a quick check does not replace a recording (the fifty-fourth stop lost one so)
RECORDED = {"kafka_e2e": ([1, 2], ["sms", "news"], 10000),
            "kafka_e2e_half": ([2], ["sms", "news"], 10000),
            "kafka_profile": ([2], ["sms"], 10000),
            "kafka_profile_half": ([2], ["sms"], 10000),
            "kafka_e2e_campaign": ([2], ["sms", "campaign"], 10000)}
PROFILES = REPO / "bench" / "work" / "profiles"  # --profile's raw py-spy samples, one folder a run
PACE_TICK_S = 0.005


def run_one(events: list[dict], workers: int, rate: float | None, tmp: Path, profile: bool = False,
            partitions: int = 6, tree: Path = REPO) -> dict:
    """One measured run, the workers started from the checkout ``tree`` (its own ``stream_dedup``)."""
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    s = settings_for(prefix, partitions=partitions)
    apply(s)
    ports = [free_port() for _ in range(workers)]
    procs = [subprocess.Popen([sys.executable, "-m", "stream_dedup.cli", "worker"],
                              env={**env_for(s, str(tmp / f"{prefix}-{i}"), ports[i]), "PYTHONPATH": str(tree)},
                              stdout=open(tmp / f"{prefix}-{i}.log", "wb"), stderr=subprocess.STDOUT, cwd=tree)
             for i in range(workers)]
    c = consumer(s, f"{prefix}-reader")
    c.subscribe([s.topics.verdicts])
    p = producer(s, **{"linger.ms": 5})
    try:
        try:
            wait_until_stable(s, workers)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{worker_logs(tmp, prefix, workers)}") from None
        warm_up(s, p, c, workers, tmp, prefix)
        before = internal_totals(c, prefix, partitions)  # the run's own messages per event, without the warm-up's
        bytes_before = internal_bytes(prefix)
        sums_before = worker_sums(ports)
        sent_at: dict[str, float] = {}
        lat: dict[str, float] = {}
        arrivals: list[float] = []
        done = threading.Event()

        def read() -> None:  # verdicts are read while events are sent: arrival times are real
            deadline = time.time() + 900
            while len(lat) < len(events) and time.time() < deadline and not done.is_set():
                m = c.poll(0.1)
                if m is None or m.error():
                    continue
                now = time.time()
                v = json.loads(m.value())
                sent = sent_at.get(v["id"])
                if sent is not None and v["id"] not in lat:
                    lat[v["id"]] = now - sent
                    arrivals.append(now)

        reader = threading.Thread(target=read)
        pids = [pr.pid for pr in procs]
        profiler = None
        if profile:  # the raw samples stay for `python bench/worker_profile.py <folder>/profile-*.txt`
            (kept := PROFILES / prefix).mkdir(parents=True, exist_ok=True)
            print(f"py-spy samples: {kept.relative_to(REPO)}", flush=True)
            # for per-event figures (worker_profile.py --against)
            (kept / "run.json").write_text(json.dumps({"events": len(events), "workers": workers, "rate": rate}))
            profiler = Profiler(pids, kept)
            profiler.start()
        meter = CpuMeter(pids, broker_pid())
        reader.start()
        t0 = time.time()
        for i, e in enumerate(events):
            if rate:  # event i is due i / rate s after the start; sleep only when it is a tick ahead or more
                ahead = i / rate - (time.time() - t0)
                if ahead >= PACE_TICK_S:
                    time.sleep(ahead)
            now = time.time()
            ev = {"id": e["id"], "text": e["text"], "ts": int(now * 1000)}
            sent_at[e["id"]] = now
            send(p, s.topics.pages, json.dumps(ev, ensure_ascii=False).encode(), e["id"].encode())
        p.flush(60)
        reader.join()
        done.set()
        cpu = meter.stop()
        sums_after = worker_sums(ports)
        profiled = profiler.stop() if profiler is not None else None
        last = max(arrivals) if arrivals else time.time()
        vals = sorted(lat.values())
        after = internal_totals(c, prefix, partitions)
        per_event = {name: round((after[name] - before[name]) / len(events), 2) for name in after}
        bytes_after = internal_bytes(prefix)  # the records are on the broker: every verdict is in
        bytes_per_event = ({name: round((bytes_after[name] - bytes_before[name]) / len(events)) for name in bytes_after}
                           if bytes_before is not None and bytes_after is not None else None)
        # where the tail sits: p50/p99 per tenth of the run (by send time)
        by_send = sorted((sent_at[i] - t0, v) for i, v in lat.items())
        tenths = []
        for k in range(10):
            part = sorted(v for _, v in by_send[k * len(by_send) // 10:(k + 1) * len(by_send) // 10])
            if part:
                tenths.append({"from_s": round(by_send[k * len(by_send) // 10][0], 1),
                               "p50_ms": round(1000 * part[len(part) // 2], 1),
                               "p99_ms": round(1000 * part[int(0.99 * (len(part) - 1))], 1)})
        result = {"events": len(events), "answered": len(lat), "seconds": round(last - t0, 2),
                  "latency_by_tenth": tenths, "timeline": [[round(a, 3), round(1000 * b, 1)] for a, b in by_send],
                  "messages_per_event": per_event, "bytes_per_event": bytes_per_event,
                  "events_per_s": round(len(lat) / (last - t0), 1),
                  "latency_median_ms": round(1000 * statistics.median(vals), 1),
                  "latency_p99_ms": round(1000 * vals[int(0.99 * (len(vals) - 1))], 1)}
        result["cpu"] = cpu
        result["cpu_ms_per_event"] = {  # the workers' CPU per event, and how much of it the stages' own code took
            "workers": round(1000 * cpu["workers_cpu_s"] / len(events), 3),
            "main_threads": round(1000 * cpu["workers_main_thread_cpu_s"] / len(events), 3)}
        if sums_before is not None and sums_after is not None:
            costs = stage_costs(sums_before, sums_after, len(events))
            result["cpu_ms_per_event"]["stages"] = costs["stages"]
            result["agent_batches"] = costs["batches"]
        if profiled is not None:
            result["profile"] = summary(profiled, len(events))
    finally:
        c.close()
        exited = [pr.poll() for pr in procs]  # a worker that left early (e.g. the stall watchdog's 75)
        stop_processes(procs)
    drop_topics(s, prefix)
    # what the workers logged about lost messages they recovered (see stream/gaps.py)
    logs = [(tmp / f"{prefix}-{i}.log").read_text(errors="replace") for i in range(workers)]
    result["worker_log"] = {"gap fills": sum(t.count("the stream skipped offsets") for t in logs),
                            "tail re-reads": sum(t.count("never reached the stream") for t in logs),
                            "errors": sum(t.count("[ERROR]") for t in logs),
                            "exited early": sum(code is not None for code in exited)}
    if result["worker_log"]["errors"]:  # the logs go with the run's temporary folder: keep what went wrong
        lines = [t.splitlines() for t in logs]
        result["worker_errors"] = ["\n".join(ls[i:i + 20]) for ls in lines for i, x in enumerate(ls) if "[ERROR]" in x][:3]
        print("worker errors:", *result["worker_errors"], sep="\n  ", flush=True)
    return result


def measure(kind: str, events: list[dict], w: int, rate: float | None, repeat: int, tmp: Path, profile: bool,
            partitions: int, trees: dict[str, Path]) -> list[dict]:
    """One configuration run ``repeat`` times with the workers of each of ``trees`` (code name ->
    checkout), the checkouts alternated run by run (``common.alternated``), and combined per
    checkout (``combine``)."""
    done: Counter[str] = Counter()

    def one(code: str) -> dict:
        r = run_one(events, w, rate, tmp, profile, partitions, trees[code])
        done[code] += 1
        print(f"{kind} x{w} rate {rate or 'max'}{' at ' + code if len(trees) > 1 else ''} run {done[code]}/{repeat}: "
              f"{r['events_per_s']} events/s, p50 {r['latency_median_ms']} ms, p99 {r['latency_p99_ms']} ms, "
              "worker logs:", r.get("worker_log"), "cores per worker:", r["cpu"]["per_worker_cores"], flush=True)
        if min(r["cpu"]["per_worker_cores"]) < 0.05 or r["worker_log"]["errors"] or r["worker_log"]["exited early"]:
            print("warning: in this run a worker did (almost) nothing, left early or logged an error; "
                  "see worker_log and cpu in the JSON", flush=True)
        return r

    runs = alternated({code: partial(one, code) for code in trees}, repeat)
    return [{**combine(rs), "kind": kind, "workers": w, "rate": rate, "code": code} for code, rs in runs.items()]


AGENTS = ("prepare", "index", "decide")


def row(r: dict, scan_rate: float) -> list:
    mpe = r["messages_per_event"]
    return [r["kind"], r["workers"], r["rate"] or "max", r["events"], r["answered"], r["events_per_s"],
            " / ".join(f"{x['events_per_s']:.0f}" for x in r["repeats"]),
            r["latency_median_ms"], r["latency_p99_ms"],
            " / ".join(f"{x['latency_p99_ms']:.0f}" for x in r["repeats"]),
            round(scan_rate, 1), r["ratio_to_scan"],
            round(mpe["probes"] + mpe["answers"], 1),
            round(mpe["exact-changelog"] + mpe["index-changelog"] + mpe["decide-changelog"]
                  + mpe.get("ids-changelog", 0), 1),  # ids: since the thirty-third stop
            round(sum(v for k, v in bpe.items() if k.endswith("changelog")) / 1024, 2)
            if (bpe := r.get("bytes_per_event")) else "",
            r["cpu_ms_per_event"]["workers"], r["cpu_ms_per_event"]["main_threads"],
            round(sum(r["cpu_ms_per_event"].get("stages", {}).values()), 3) or "",
            " / ".join(f"{b[st]['messages_per_batch']:.0f}" for st in AGENTS if st in b) if (b := r.get("agent_batches")) else "",
            " / ".join(f"{b[st]['ms_per_batch']:.1f}" for st in AGENTS if st in b) if b else "",
            r["cpu"]["workers_cores"], r["cpu"].get("broker_cores"), r["cpu"].get("irq_cores"),
            r["cpu"]["rest_cores"], r["cpu"]["bench_client_cores"], r["cpu"]["idle_cores"]]


def combine(runs: list[dict]) -> dict:
    """One configuration's runs as one result: the run with the median events/s (its timeline, cores,
    messages and profile), with events/s, p50 and p99 replaced by their medians over the runs, and
    every run's own numbers under ``repeats``."""
    ordered = sorted(runs, key=lambda r: r["events_per_s"])
    r = dict(ordered[(len(ordered) - 1) // 2])
    r["repeats"] = [{k: x[k] for k in ("events_per_s", "latency_median_ms", "latency_p99_ms", "answered", "cpu",
                                      "worker_log", "messages_per_event", "bytes_per_event")} for x in runs]
    for k in ("events_per_s", "latency_median_ms", "latency_p99_ms"):
        r[k] = round(statistics.median(x[k] for x in runs), 1)
    r["answered"] = min(x["answered"] for x in runs)
    return r


def embedded(events: list[dict]) -> float:
    t0 = time.perf_counter()
    with Engine(load_settings()) as e:
        for i, ev in enumerate(events):
            e.process({"id": ev["id"], "text": ev["text"], "ts": i})
    return len(events) / (time.perf_counter() - t0)


MAX_WARMUP_RUNS = 15  # a slow hour's runs still end the warm-up


def rate_arg(text: str) -> float | str:
    if text == "half":
        return text
    try:
        r = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a rate is events/s or 'half', not {text!r}") from None
    if r <= 0:
        raise argparse.ArgumentTypeError("a rate must be positive")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # at most this many of each kind (the news set has 2,722). 10,000 rather than 3,000 since the
    # seventh stop: two workers answer 3,000 SMS in about a second, much of it the broker's warm-up
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--kinds", nargs="+", default=["sms", "news"], choices=["sms", "news", "campaign"],
                    help="campaign: bench/campaign.py's 50 spam SMS in 600 rounds (the first --events of them); "
                         "the results' name then ends in _campaign")
    ap.add_argument("--rate", type=rate_arg, default=None, metavar="R|half",
                    help="events/s to send; half: each configuration at full speed, then at half of that")
    ap.add_argument("--profile", action="store_true", help="sample the workers with py-spy (bench extra)")
    ap.add_argument("--partitions", type=int, default=6, help="of pages and every internal topic")
    ap.add_argument("--repeat", type=int, default=None, help="runs per configuration (default 3; 1 with --profile)")
    ap.add_argument("--warmup-runs", type=int, default=2, metavar="N",
                    help="runs of the first configuration, not reported, before the measured ones when this "
                         "script started the broker itself (0: none)")
    ap.add_argument("--warmup-seconds", type=float, default=25.0, metavar="S",
                    help="and more such runs until the broker has been under load for S seconds in all "
                         f"(at most {MAX_WARMUP_RUNS} runs; 0: --warmup-runs only)")
    ap.add_argument("--against", type=Path, nargs="+", default=[], metavar="CHECKOUT",
                    help="other checkouts of stream-dedup whose workers run each configuration too, "
                         "alternately with this tree's; the results' name then ends in _compare")
    a = ap.parse_args()
    repeat = a.repeat or (1 if a.profile else 3)
    if a.profile and not Profiler.available():
        ap.error("--profile needs py-spy: pip install -e '.[bench]'")
    need_shared()
    trees = {checkout_name(REPO): REPO}
    trees.update({f"{checkout_name(t)} ({t.name})": t for t in checkouts(a.against)})
    half = a.rate == "half"
    code_head = ["code"] if a.against else []  # a column only when checkouts are compared

    def code(r: dict) -> list[str]:
        return [r["code"]] if a.against else []

    fixed_rate = None if half else a.rate
    started = False
    broker_env = dict(os.environ, KAFKA_PORT="19192")  # no KAFKA_BOOTSTRAP: kafka.sh leaves a named cluster alone
    if not os.environ.get("KAFKA_BOOTSTRAP"):
        subprocess.run([str(REPO / "deploy/kafka/kafka.sh"), "start", "--fresh"], check=True, env=broker_env)
        os.environ["KAFKA_BOOTSTRAP"] = "127.0.0.1:19192"
        started = True
    tmp = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    rows, results, warmups = [], [], []
    try:
        ds = devset()
        events_of = {kind: read_jsonl(campaign.build(50, 600) if kind == "campaign" else ds / f"{kind}.jsonl", a.events)
                     for kind in a.kinds}
        if started:
            # A broker fresh from start-up keeps compiling its hot paths (JIT) through its first ~20 s
            # of load: at half the maximum, runs 1 to 5 of one broker gave p99 1,498 / 458 / 348 / 368 /
            # 414 ms (seventh stop), and at full speed eight runs in a row of a fresh broker gave 3,522 /
            # 3,704 / 3,675 / 4,043 / 2,929 / 4,049 / 4,264 / 4,498 SMS/s, its CPU falling from 0.68 to
            # 0.41 core (twelfth stop): two warm-up runs, about 5 s of load, left it half warm. A
            # deployed broker has been up for days, so the measured runs start after at least N runs
            # of the first kind's events at the same rate, with the most workers asked for, and after
            # as many more as it takes to have loaded the broker for --warmup-seconds.
            loaded = 0.0
            while len(warmups) < a.warmup_runs or (loaded < a.warmup_seconds and len(warmups) < MAX_WARMUP_RUNS):
                warm = run_one(events_of[a.kinds[0]], max(a.workers), fixed_rate, tmp, False, a.partitions)
                loaded += warm["seconds"]
                warmups.append({k: warm[k] for k in ("events_per_s", "seconds", "latency_median_ms", "latency_p99_ms",
                                                     "cpu")})
                print(f"broker warm-up run {len(warmups)} (not reported): {warm['events_per_s']} events/s, "
                      f"p99 {warm['latency_p99_ms']} ms, broker {warm['cpu']['broker_cores']} core; "
                      f"{loaded:.0f} s of load", flush=True)
        for kind, events in events_of.items():
            embedded(events[:100])  # warm, as the workers are: jieba's dictionary loaded, code paths run once
            scan_rate = statistics.median(embedded(events) for _ in range(repeat))
            def record(rs: list[dict]) -> dict:
                for r in rs:
                    r.update(scan_events_per_s=round(scan_rate, 1),
                             ratio_to_scan=round(r["events_per_s"] / scan_rate, 3))
                    results.append(r)
                    rows.append([*code(r), *row(r, scan_rate)])
                    print(rows[-1], flush=True)
                return rs[0]

            for w in a.workers:
                first = record(measure(kind, events, w, fixed_rate, repeat, tmp, a.profile, a.partitions, trees))
                if half:  # the same configuration again, at half the rate it just reached (this tree's)
                    record(measure(kind, events, w, round(first["events_per_s"] / 2, 1), repeat, tmp, a.profile,
                                   a.partitions, trees))
    finally:
        if started:
            # not os.environ, which names the broker by now: kafka.sh would leave it running
            subprocess.run([str(REPO / "deploy/kafka/kafka.sh"), "stop"], env=broker_env)
        shutil.rmtree(tmp, ignore_errors=True)
    text = table([*code_head, "kind", "workers", "rate", "events", "answered", "events/s", "events/s runs", "latency p50 ms",
                  "latency p99 ms", "p99 runs", "scan events/s", "kafka/scan", "internal msgs/event", "changelog msgs/event",
                  "changelog KB/event", "worker CPU ms/event", "main threads", "stages' code",
                  "msgs per batch", "ms per batch", "cores: workers", "broker", "kernel irq", "rest", "bench client",
                  "idle"], rows)
    name = (("kafka_profile" if a.profile else "kafka_e2e")
            + ("_half" if half else f"_rate{int(a.rate)}" if a.rate else "")
            + (f"_p{a.partitions}" if a.partitions != 6 else "")
            + ("_campaign" if "campaign" in a.kinds else "")
            + ("_compare" if a.against else ""))
    recorded = RECORDED.get(name)
    if recorded is not None and recorded != (a.workers, a.kinds, a.events):
        name += "_trial"  # a subset of a recorded table's command: keep the recorded table
    if a.profile:
        text += "\n\nWhere the workers' CPU went (py-spy, all workers together; shares of CPU in use):\n\n" + table(
            ([*code_head, "kind", "workers", "category", "share of CPU", "CPU ms/event"]),
            [[*code(r), r["kind"], r["workers"], cat, v["share"], v["cpu_ms_per_event"]]
             for r in results for cat, v in r["profile"]["by_category"].items()]
            + [[*code(r), r["kind"], r["workers"], "all", 1.0, r["profile"]["cpu_ms_per_event"]] for r in results])
    for r in results:
        print(f"{r['kind']} x{r['workers']} rate {r['rate'] or 'max'}{' at ' + r['code'] if a.against else ''}: "
              "latency p50/p99 ms by tenth of the run:",
              " ".join(f"{t['p50_ms']:.0f}/{t['p99_ms']:.0f}" for t in r["latency_by_tenth"]))
    save(name, {"runs": results, "broker_warmup_runs": warmups,
                "args": {**vars(a), "against": [str(t) for t in a.against]}}, text)
    plot(name, results)


def plot(name: str, results: list[dict]) -> None:
    """Verdict latency against send time, one panel per run (shows whether the tail is a start-up
    effect, periodic stalls or a growing queue); skipped without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return

    fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.4 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        xs, ys = zip(*r["timeline"]) if r["timeline"] else ((), ())
        ax.scatter(xs, ys, s=2)
        ax.set_yscale("log")
        ax.set_title(f"{r['kind']}, {r['workers']} worker(s), rate {r['rate'] or 'max'}, {r['code']}", fontsize=9)
        ax.set_ylabel("latency ms")
    axes[-1, 0].set_xlabel("send time s")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)


if __name__ == "__main__":
    main()
