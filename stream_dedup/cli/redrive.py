"""`redrive`: send dead-lettered items back where they came from, once the bug that put them there is fixed.

Why: a quarantined item (``stream/quarantine.py``) and an event whose preparation raised
(``internal_error``) are the work of a bug, not of bad data; after the fix their documents should
get the verdicts they missed. Each dead-letter record holds the item's bytes as the stage read
them (or, for an original over about 670 KB, their start and the offset of the source message,
which is read for the rest: ``target``), its source topic and partition, and the message key;
sent back there, the stage works on it again. The stages are idempotent (a replayed message
changes nothing that was done), so sending a record twice is harmless, and the verdict rule does
not depend on arrival order, so a document judged late gets the verdict it would have got in
order (with revisions of the later copies it turns out to precede).

The run reads the dead-letter topic in a consumer group of its own (``<app_id>-redrive``) up to
the end it saw when it started, sends the records of the chosen reasons, waits for the broker's
acks, and only then commits: the next run starts after what this one read (``--from-beginning``
reads everything again). Records of other reasons (bad data: sending them back would reject them
again) are read past and counted as skipped.
"""
from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeGuard

from ..config import Settings
from ..stream.kafka_io import (client_config, coordinated, end_reader, producer, reached_end, send, topic_partitions,
                       watermarks)
from ..stream.gaps import confluent_fetch
from ..stream.quarantine import item_ids

# the reasons that a fixed bug cures; the others are the data's, and a resend is rejected again
BUG_REASONS = ("quarantined", "internal_error")


@dataclass(frozen=True)
class Target:
    """Where a dead-letter record's bytes go back to."""

    topic: str
    partition: int | None  # None: by key (a record that names no partition)
    key: bytes | None
    value: bytes
    timestamp: int | None = None  # ms, the source message's: an event without a ``ts`` keeps its time


class NotRedrivable(ValueError):
    """A record that cannot be sent back (no bytes, or a source that does not exist)."""


Fetch = Callable[[str, int, int], bytes | None]  # (topic, partition, offset) -> the message's value


def target(record: Any, key: bytes | None, pages: str, partitions: Callable[[str], int | None],
           fetch: Fetch | None = None) -> Target:
    """The source topic and partition of a dead-letter record, with its key and original bytes.

    ``partitions(topic)``: how many partitions the topic has now (None: no such topic). Why the same
    partition and not the key: internal topics are routed by band key or digest, not by the
    message key, and the pages topic's producers may hash keys differently from this client.
    A record whose original was cut to fit (``original_truncated``, ``stream/dead_letters.py``)
    gets the whole of it from its source message, read with ``fetch`` at the record's offset: it
    must be as long as ``original_bytes`` and begin with the bytes the record kept."""
    if not isinstance(record, dict):
        raise NotRedrivable("not a dead-letter record (not a JSON object)")
    try:
        value = base64.b64decode(record["original_b64"], validate=True)
    except (KeyError, TypeError, binascii.Error) as e:
        raise NotRedrivable(f"no original bytes ({e!r})") from None
    topic = record.get("topic") or pages
    if not isinstance(topic, str):
        raise NotRedrivable(f"source topic {topic!r} is not a name")
    partition = record.get("partition")
    if partition is not None and not _natural(partition):
        raise NotRedrivable(f"source partition {partition!r} is not a partition number")
    if record.get("original_truncated") is True:
        value = _whole(record, value, topic, partition, fetch)
    count = partitions(topic)
    if count is None:
        raise NotRedrivable(f"source topic {topic!r} does not exist")
    if partition is not None and partition >= count:
        raise NotRedrivable(f"source partition {topic}[{partition}] does not exist ({count} partitions)")
    ts = record.get("timestamp")
    return Target(topic, partition, key, value, ts if _natural(ts) else None)


def _whole(record: dict, kept: bytes, topic: str, partition: int | None, fetch: Fetch | None) -> bytes:
    """The whole original of a record that kept only its first bytes, from its source message."""
    offset, size = record.get("offset"), record.get("original_bytes")
    where = f"{topic}[{partition}]@{offset}"
    if partition is None or not _natural(offset) or not _natural(size):
        raise NotRedrivable(f"the record keeps only the first {len(kept)} bytes of the original and does not "
                            "say where the whole of it is")
    whole = fetch(topic, partition, offset) if fetch is not None else None
    if whole is None:
        raise NotRedrivable(f"the record keeps only the first {len(kept)} of the original's {size} bytes, "
                            f"and {where} no longer holds the whole of it")
    if len(whole) != size or not whole.startswith(kept):
        raise NotRedrivable(f"the message at {where} is not the record's original ({len(whole)} bytes, not "
                            f"{size} beginning with the {len(kept)} kept)")
    return whole


def _natural(v: Any) -> TypeGuard[int]:
    """A partition number or a time in ms: an int (not a bool) >= 0."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def record_ids(record: Any) -> list[str]:
    """The documents a record is about: a quarantined item's ``ids``, or a page event's id (read as
    the quarantine reads a pages message's)."""
    if not isinstance(record, dict):
        return []
    if isinstance(record.get("ids"), list):
        return [str(i) for i in record["ids"]]
    try:
        raw = base64.b64decode(record.get("original_b64") or "")
    except (TypeError, binascii.Error):
        return []
    return item_ids("prepare", raw)


def redrive(settings: Settings, *, reasons: Iterable[str] = BUG_REASONS, ids: Iterable[str] = (),
            from_beginning: bool = False, dry_run: bool = False,
            echo: Callable[[str], None] | None = None, timeout: float = 30.0) -> dict[str, int]:
    """Send the dead-letter records of ``reasons`` (about ``ids`` only, when given) back to their
    sources; returns counts (``redriven.<reason>``, ``skipped.<reason>``, ``unredrivable``, ``read``).
    Raises RuntimeError when the topic cannot be read or a send is not acknowledged (nothing is
    committed then: the next run sends the same records again)."""
    from confluent_kafka import KafkaException

    run = Redrive(settings, set(reasons), set(ids), dry_run=dry_run, echo=echo, timeout=timeout)
    try:
        ends = run.start(from_beginning)
        run.read_to(ends)
        run.finish(ends)
    except KafkaException as e:  # no broker, no rights, a commit refused: nothing half done is committed
        raise RuntimeError(f"redrive from {run.dlq!r} failed: {e}") from None
    finally:
        run.close()
    return dict(run.counts)


class Redrive:
    """One run of ``redrive``: its reader of the dead-letter topic, its producer (none for a dry
    run), the counts and the sends not acknowledged."""

    def __init__(self, settings: Settings, reasons: set[str], ids: set[str], *, dry_run: bool,
                 echo: Callable[[str], None] | None, timeout: float):
        self.settings, self.reasons, self.ids, self.echo, self.timeout = settings, reasons, ids, echo, timeout
        self.dlq = settings.topics.dlq
        self.consumer = end_reader(settings, f"{settings.worker.app_id}-redrive")
        self.producer = None if dry_run else producer(settings)
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []
        self._sizes: dict[str, int | None] = {}
        self._read = confluent_fetch(client_config(settings))  # the gap filler's reader: no group, nothing committed

    def partitions(self, topic: str) -> int | None:
        """How many partitions ``topic`` has (None: no such topic), asked once a topic."""
        if topic not in self._sizes:
            parts = topic_partitions(self.consumer, topic, self.timeout)
            self._sizes[topic] = len(parts) if parts is not None else None
        return self._sizes[topic]

    def fetch(self, topic: str, partition: int, offset: int) -> bytes | None:
        """The value of the message at ``offset``, None when the topic no longer holds it."""
        msgs = self._read(topic, partition, offset, offset + 1)
        return (msgs[0].value or b"") if msgs and msgs[0].offset == offset else None

    def start(self, from_beginning: bool) -> dict[int, int]:
        """Assign the dead-letter partitions that hold records, from the group's committed offsets
        (or the beginning); returns each one's end at the start, where this run stops."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        dlq, c = self.dlq, self.consumer
        if self.partitions(dlq) is None:
            raise RuntimeError(f"dead-letter topic {dlq!r} does not exist (run `stream-dedup topics apply`)")
        tps = [TopicPartition(dlq, i) for i in range(self.partitions(dlq) or 0)]
        ends = {p: high for (_, p), (_, high) in watermarks(c, [(dlq, tp.partition) for tp in tps], self.timeout).items()}
        starts = {tp.partition: OFFSET_BEGINNING if from_beginning or tp.offset < 0 else tp.offset
                  for tp in coordinated(lambda: c.committed(tps, timeout=self.timeout), f"committed offsets of {dlq!r}")}
        nonempty = {i: end for i, end in ends.items() if end > 0}
        c.assign([TopicPartition(dlq, i, starts[i]) for i in nonempty])
        return nonempty

    def read_to(self, ends: dict[int, int]) -> None:
        """Read every assigned partition up to its end at the start, handling each record."""
        from confluent_kafka import KafkaError

        left = set(ends)
        while left:
            msg = self.consumer.poll(self.timeout)
            if msg is None:
                raise RuntimeError(f"{self.dlq!r}: no message for {self.timeout:.0f} s before the end it had at the start")
            if msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"cannot read {self.dlq!r}: {msg.error()}")
            if reached_end(msg, ends):
                left.discard(msg.partition())
            if msg.error() or msg.offset() >= ends[msg.partition()]:
                continue  # the end of the partition, or a record that arrived after the start: the next run's
            self.handle(msg)

    def handle(self, msg: Any) -> None:
        """One dead-letter record: skipped (another reason, other documents), not redrivable (said
        why), or sent back to its source."""
        self.counts["read"] += 1
        try:
            record = json.loads(msg.value() or b"")
        except ValueError:
            record = None
        reason = record.get("reason") if isinstance(record, dict) else None
        about = record_ids(record) if reason in self.reasons else []
        if reason not in self.reasons or (self.ids and not self.ids.intersection(about)):
            self.counts[f"skipped.{reason}"] += 1
            return
        here = f"{self.dlq}[{msg.partition()}]@{msg.offset()}"
        try:
            t = target(record, msg.key(), self.settings.topics.pages, self.partitions, self.fetch)
        except NotRedrivable as e:
            self.counts["unredrivable"] += 1
            self._say(f"{here}: not sent back: {e}")
            return
        self.counts[f"redriven.{reason}"] += 1
        self._say(f"{here}: {reason} {about} -> {t.topic if t.partition is None else f'{t.topic}[{t.partition}]'}")
        self.send(t)

    def send(self, t: Target) -> None:
        """Send a record back (not in a dry run); a failed delivery is noted for ``finish``."""
        if self.producer is None:
            return
        kw: dict[str, Any] = {"on_delivery": self._delivered}
        if t.partition is not None:
            kw["partition"] = t.partition
        if t.timestamp is not None:
            kw["timestamp"] = t.timestamp
        send(self.producer, t.topic, t.value, t.key, **kw)

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.failures.append(str(err))

    def finish(self, ends: dict[int, int]) -> None:
        """Wait for every send's ack, then commit the ends read to: nothing is committed unless all
        were sent back."""
        from confluent_kafka import TopicPartition

        if self.producer is None:
            return
        remaining = self.producer.flush(self.timeout)
        if remaining or self.failures:
            raise RuntimeError(f"{remaining + len(self.failures)} records were not sent back: "
                               f"{self.failures[:3] or 'flush timed out'}; nothing is committed")
        if ends:
            done = [TopicPartition(self.dlq, i, end) for i, end in ends.items()]
            coordinated(lambda: self.consumer.commit(offsets=done, asynchronous=False), f"commit of {self.dlq!r}")

    def _say(self, line: str) -> None:
        if self.echo is not None:
            self.echo(line)

    def close(self) -> None:
        self.consumer.close()
