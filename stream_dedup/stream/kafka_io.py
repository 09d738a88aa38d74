"""confluent-kafka clients built from the configuration, so SASL/TLS settings reach every one."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..config import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the broker's "ask again" answers to group calls (offset fetch and commit): its group
#: coordinator is loading or has moved, as for some seconds after a broker starts
COORDINATOR_BUSY = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")
#: its answers to an offset lookup on a partition whose leader is not known yet, as for a moment
#: after the topic is created
LEADER_NOT_READY = ("NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PART")


#: librdkafka's own log lines go to this logger, at ``kafka.log_level`` and above, never raw to stderr
LIBRDKAFKA = logging.getLogger("stream_dedup.librdkafka")
#: how long a command waits for the broker's metadata before it says the broker cannot be reached
REACH_TIMEOUT_S = 5.0


class Unreachable(RuntimeError):
    """The broker did not answer a metadata request: the one-line reason a command exits 3 with."""


def client_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """librdkafka settings: bootstrap, then the user's pass-through block, then per-client extras."""
    conf: dict[str, Any] = {"bootstrap.servers": settings.kafka.bootstrap, "logger": LIBRDKAFKA}
    conf.update(settings.kafka.client)
    conf.update(extra)
    return conf


def quiet_librdkafka(settings: Settings) -> None:
    """Send librdkafka's log lines to ``LIBRDKAFKA`` at the configured level, with one handler of its own."""
    LIBRDKAFKA.setLevel(settings.kafka.log_level)
    LIBRDKAFKA.propagate = False
    if not LIBRDKAFKA.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s librdkafka: %(message)s"))
        LIBRDKAFKA.addHandler(handler)


def check_reachable(settings: Settings, timeout: float = REACH_TIMEOUT_S) -> None:
    """Ask the cluster for its metadata; raise ``Unreachable`` with the reason when no broker answers
    within ``timeout``. Every Kafka command calls it first, so that an absent broker is one clear
    line and exit code 3, not a minute of retries."""
    from confluent_kafka import KafkaException

    client = admin(settings)
    try:
        client.list_topics(timeout=timeout)
    except KafkaException as e:
        err = e.args[0] if e.args else e
        reason = err.str() if hasattr(err, "str") else str(err)
        raise Unreachable(f"cannot reach Kafka at {settings.kafka.bootstrap} ({reason})") from None


def admin(settings: Settings):
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(settings))


def producer(settings: Settings, **extra: Any):
    from confluent_kafka import Producer

    defaults = {"linger.ms": 20, "compression.type": "lz4", "enable.idempotence": True}
    defaults.update(extra)
    return Producer(client_config(settings, **defaults))


def consumer(settings: Settings, group: str, **extra: Any):
    from confluent_kafka import Consumer

    defaults = {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    defaults.update(extra)
    return Consumer(client_config(settings, **defaults))


def end_reader(settings: Settings, group: str):
    """A consumer for reading partitions up to their ends (``assign_up_to_ends``, ``reached_end``):
    the end-of-partition event on, and the broker's wait for new records short.

    Why the short wait: a fetch at a partition's end is held by the broker for up to
    ``fetch.wait.max.ms`` (librdkafka's default, 500 ms) in case records come, and only its answer
    brings the end-of-partition event. A partition whose last offset is a transaction marker ends
    no other way, so ``status``, which reads every lagging partition so, spent most of its time in
    that wait (``bench/status_scale.py``)."""
    return consumer(settings, group, **{"enable.partition.eof": True, "fetch.wait.max.ms": 10})


def no_record_from(settings: Settings, starts: dict[Any, int], timeout: float = 10.0,
                   ends: dict[Any, int] | None = None) -> set[Any]:
    """Of ``starts`` ((topic, partition) -> offset), those whose partition holds no record from that
    offset to its end, read committed: the offsets left are commit markers or aborted records. A
    partition not answered within ``timeout``, or whose end comes before the one ``ends`` gives
    for it, counts as holding one."""
    if not starts:
        return set()
    from confluent_kafka import KafkaError, TopicPartition

    c = end_reader(settings, f"{settings.worker.app_id}-end-check")
    left = {(k[0], k[1]): k for k in starts}
    empty: set[Any] = set()
    try:
        c.assign([TopicPartition(t, p, starts[k]) for (t, p), k in left.items()])
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            m = c.poll(0.5)
            err = m.error() if m is not None else None
            if m is None or (err is not None and err.code() != KafkaError._PARTITION_EOF):
                continue
            k = left.pop((m.topic(), m.partition()), None)
            if k is not None and err is not None and m.offset() >= (ends or {}).get(k, 0):
                empty.add(k)
    finally:
        c.close()
    return empty


def send(p, topic: str, value: bytes, key: bytes | None = None, **kw: Any) -> None:
    """Produce one message, waiting for room when librdkafka's local queue is full."""
    while True:
        try:
            p.produce(topic, value=value, key=key, **kw)
            break
        except BufferError:
            p.poll(0.05)
    p.poll(0)


def _kafka_error_in(e: BaseException, names: tuple[str, ...]) -> bool:
    from confluent_kafka import KafkaError, KafkaException

    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return isinstance(err, KafkaError) and err.name() in names


def coordinator_busy(e: BaseException) -> bool:
    """Whether ``e`` is a Kafka error that means "the group coordinator is not ready yet"."""
    return _kafka_error_in(e, COORDINATOR_BUSY)


def coordinated(call: Callable[[], T], what: str, wait_s: float = 60.0,
                sleep: Callable[[float], None] = time.sleep,
                busy: tuple[str, ...] = COORDINATOR_BUSY) -> T:
    """``call()``, asked again while the broker answers that the group coordinator is busy
    (or another of the ``busy`` answers).

    Why: a one-shot command run right after a broker start (``redrive``, ``status``) failed its
    first committed-offset lookup with NOT_COORDINATOR and exited, where a rerun a few seconds
    later worked. Only those answers are retried, 0.2 s apart doubling to 2 s, for ``wait_s``;
    any other error, and the last busy answer, is raised at once."""
    deadline = time.monotonic() + wait_s
    delay = 0.2
    while True:
        try:
            return call()
        except Exception as e:
            if not _kafka_error_in(e, busy) or time.monotonic() + delay > deadline:
                raise
            log.info("%s: %s; asking again in %.1f s", what, e, delay)
            sleep(delay)
            delay = min(2 * delay, 2.0)


def topic_partitions(c, topic: str, timeout: float = 10.0) -> list[int] | None:
    """The partition numbers of ``topic`` by the metadata of client ``c``; None when the broker
    does not know the topic (or reports an error for it)."""
    meta = c.list_topics(topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return sorted(meta.partitions)


def assign_up_to_ends(c, topic: str, *, last: int | None = None, timeout: float = 10.0,
                      parts: list[int] | None = None) -> dict[int, int] | None:
    """Assign the partitions of ``topic`` that hold records now, each from its beginning (or from
    its ``last`` records); return their ends (high watermarks), None when the topic is not in the
    metadata. ``parts``: the topic's partitions when the caller has just looked them up. Assigned,
    not subscribed: no group join to wait for. Read up to the ends with ``reached_end``, whose
    end-of-partition case needs the consumer's ``enable.partition.eof`` (``end_reader``)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    if parts is None:
        parts = topic_partitions(c, topic, timeout)
    if parts is None:
        return None
    ends: dict[int, int] = {}
    starts = []
    for (_, p), (low, high) in watermarks(c, [(topic, p) for p in parts], timeout).items():
        if high > low:
            ends[p] = high
            starts.append(TopicPartition(topic, p, OFFSET_BEGINNING if last is None else max(low, high - last)))
    c.assign(starts)
    return ends


def reached_end(msg, ends: dict[int, int]) -> bool:
    """Whether ``msg`` ends its partition's read of ``assign_up_to_ends``: the record just before
    the end, or the consumer's word that it reached the end. Why both: the offset before the end
    can be a transaction's commit marker, which no message carries (an exactly-once worker's
    output topics end so)."""
    from confluent_kafka import KafkaError

    end = ends.get(msg.partition())
    if end is None:
        return False
    err = msg.error()
    if err is None:
        return msg.offset() >= end - 1
    return err.code() == KafkaError._PARTITION_EOF and msg.offset() >= end


def watermarks(c, partitions: Iterable[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], tuple[int, int]]:
    """The low and high offsets of each (topic, partition), as ``get_watermark_offsets`` gives
    them (the high one read committed when ``c`` reads so: the last stable offset), asked again
    while a partition's leader is not known: a command run just after the topic was created
    (``status`` in ``make demo``) would fail otherwise.

    Why ``offsets_for_times`` with Kafka's ListOffsets codes (-2 the earliest, -1 the latest)
    instead of ``get_watermark_offsets`` per partition: it asks each leader once for all its
    partitions. ``status`` reads every source partition on each call, and the status page every
    10 s, and at a thousand partitions a round trip each takes seconds (``bench/status_scale.py``)."""
    from confluent_kafka import KafkaException, TopicPartition

    wanted = list(partitions)
    if not wanted:
        return {}

    def ask(code: int) -> dict[tuple[str, int], int]:
        got = c.offsets_for_times([TopicPartition(t, p, code) for t, p in wanted], timeout=timeout)
        for tp in got:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {(tp.topic, tp.partition): tp.offset for tp in got}

    what = f"offsets of {len(wanted)} partition(s) of {', '.join(sorted({t for t, _ in wanted}))}"
    low = coordinated(lambda: ask(-2), what, wait_s=max(timeout, 10.0), busy=LEADER_NOT_READY)
    high = coordinated(lambda: ask(-1), what, wait_s=max(timeout, 10.0), busy=LEADER_NOT_READY)
    return {tp: (low[tp], high[tp]) for tp in wanted}
