"""`produce` and `tail`: put a JSONL corpus on a topic, follow a topic's JSON messages."""
from __future__ import annotations

import json
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..config import Settings
from ..stream.kafka_io import assign_up_to_ends, consumer, end_reader, producer, reached_end, send, topic_partitions


def _lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of each non-empty line."""
    f = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for number, line in enumerate(f, 1):
            line = line.rstrip(b"\r\n")
            if line:
                yield number, line
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def event_key(line: bytes) -> bytes | None:
    """The id as the message key, so every event of one id lands on one partition (the workers
    check ``id_conflict`` per partition); None when unreadable, and the worker dead-letters the
    line. JSON nested too deeply for Python's parser is unreadable too, not a crash of the command."""
    try:
        doc = json.loads(line)
        ident = doc.get("id") if isinstance(doc, dict) else None
        return str(ident).encode() if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None
    except (ValueError, RecursionError):  # UnicodeDecodeError and a lone surrogate's encode error are ValueErrors
        return None


@dataclass
class Produced:
    """What ``produce_jsonl`` did: lines sent, and each line it could not send with its number and why."""

    sent: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    undelivered: list[tuple[int, str]] = field(default_factory=list)  # (line number, broker's error)
    unflushed: int = 0  # still queued when the flush gave up


def _invalid(line: bytes) -> str | None:
    """Why a line is not a JSON object (``--validate``), None when it is one."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as e:
        return f"not JSON ({type(e).__name__}: {str(e)[:80]})"
    return None if isinstance(doc, dict) else f"not a JSON object ({type(doc).__name__})"


def produce_jsonl(settings: Settings, path: str, *, topic: str | None = None, limit: int | None = None,
                  rate: float | None = None, progress: bool = True, validate: bool = False,
                  warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> Produced:
    """Send every line as it is (bad lines too: the worker's prepare stage judges them), except a line
    the client refuses (over the producer's size limit) or, with ``validate``, one that is not a JSON
    object: each is reported through ``warn`` with its line number, and the rest is sent and flushed."""
    from confluent_kafka import KafkaException
    from tqdm import tqdm

    topic = topic or settings.topics.pages
    p = producer(settings)
    out = Produced()

    def on_delivery(number: int) -> Callable:
        def done(err, _msg) -> None:
            if err is not None:
                out.undelivered.append((number, str(err)))
        return done

    t0 = time.monotonic()
    bar = tqdm(desc=f"produce {topic}", unit="ev", disable=not progress, file=sys.stderr)
    for number, line in _lines(path):
        if limit is not None and out.sent >= limit:
            break
        why = _invalid(line) if validate else None
        if why is None:
            try:
                send(p, topic, line, event_key(line), on_delivery=on_delivery(number))
            except KafkaException as e:
                why = f"{e.args[0].name() if e.args else e} ({len(line):,} bytes)"
        if why is not None:
            out.refused.append((number, why))
            warn(f"stream-dedup: line {number} not sent: {why}")
            continue
        out.sent += 1
        bar.update(1)
        if rate:
            ahead = out.sent / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    bar.close()
    out.unflushed = p.flush(60)
    for number, err in out.undelivered[:20]:
        warn(f"stream-dedup: line {number} not delivered: {err}")
    return out


#: how often ``tail_topic`` looks for partitions added to the topic it follows
NEW_PARTITIONS_EVERY_S = 5.0


def tail_topic(settings: Settings, topic: str, *, max_messages: int | None = None, idle: float | None = None,
               from_end: bool = False, echo: Callable[[str], None] | None = print,
               max_ids: int | None = None, to_end: bool = False) -> dict[str, int]:
    """Read a topic (no group joined, nothing committed); count documents by the kind of their latest
    verdict (revisions count once), and the messages read.

    ``max_ids``: stop once records about this many distinct documents were read (a verdict's
    ``id``, else the record's key). Why beside ``max_messages``: the verdicts topic carries
    revisions, so N events can take more than N records (a copy judged before its original is
    revised when the original arrives), and "every event I sent has a verdict" is N distinct ids.

    ``to_end``: read what the topic held when the call began, then stop. Why not ``idle``: a quiet
    window cannot tell "all read" from "a slow start", and a fetch that takes longer than the window
    ends the read early. The ends are the partitions' high watermarks, taken first.

    The partitions are assigned, not subscribed: a group join would come out of the ``idle``
    window, and a broker with the default ``group.initial.rebalance.delay.ms`` holds a new group's
    join for 3 s. A follower (not ``to_end``) looks for partitions added to the topic every
    ``NEW_PARTITIONS_EVERY_S`` and reads them from their beginning (all their records are newer
    than the read): the pages topic can grow (``topics apply --grow-input``) while someone tails it."""
    if to_end and from_end:
        raise ValueError("to_end and from_end exclude each other: from the end there is nothing to read up to it")
    tail = Tail(settings, topic, to_end=to_end, echo=echo)
    try:
        tail.start(from_end)
        while ((max_messages is None or tail.seen < max_messages) and (max_ids is None or len(tail.latest) < max_ids)
               and not (to_end and not tail.ends)):
            if not to_end:
                tail.grow()
            if not tail.poll() and idle is not None and time.monotonic() - tail.last > idle:
                break
    except KeyboardInterrupt:
        pass
    finally:
        tail.close()
    counts = tail.summary()
    if max_ids is not None:
        counts["ids"] = counts["documents"]
    return counts


class Tail:
    """One ``tail_topic`` read: its reader, where it stops (``to_end``: each partition's end at the
    start, dropped when reached) and what it counted."""

    def __init__(self, settings: Settings, topic: str, *, to_end: bool, echo: Callable[[str], None] | None):
        group = f"stream-dedup-tail-{uuid.uuid4().hex[:8]}"
        self.consumer = end_reader(settings, group) if to_end else consumer(settings, group)
        self.topic, self.to_end, self.echo = topic, to_end, echo
        self.ends: dict[int, int] = {}
        self.counts: Counter[str] = Counter()
        self.seen = 0
        self.latest: dict[object, str] = {}  # document -> the kind of its latest record
        self.known: set[int] = set()
        self.last = self.looked = time.monotonic()

    def start(self, from_end: bool) -> None:
        """Assign the topic's partitions: up to their ends, or from their end or beginning."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

        parts = topic_partitions(self.consumer, self.topic)
        if parts is None:
            raise RuntimeError(f"topic {self.topic} cannot be read: it is not in the broker's metadata")
        if self.to_end:
            self.ends = assign_up_to_ends(self.consumer, self.topic, parts=parts) or {}
        else:
            self.consumer.assign([TopicPartition(self.topic, p, OFFSET_END if from_end else OFFSET_BEGINNING)
                                  for p in parts])
        self.known = set(parts)
        self.last = self.looked = time.monotonic()

    def grow(self) -> None:
        """Every ``NEW_PARTITIONS_EVERY_S``, read partitions added to the topic from their beginning."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        if time.monotonic() - self.looked < NEW_PARTITIONS_EVERY_S:
            return
        self.looked = time.monotonic()
        try:  # a metadata request that fails or times out is asked again next time
            added = sorted(set(topic_partitions(self.consumer, self.topic, timeout=2.0) or ()) - self.known)
        except KafkaException:
            added = []
        if added:
            self.consumer.incremental_assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in added])
            self.known.update(added)

    def poll(self) -> bool:
        """Read one message (half a second at most); whether one came, a partition's end included."""
        msg = self.consumer.poll(0.5)
        if msg is None:
            return False
        if self.to_end and reached_end(msg, self.ends):
            del self.ends[msg.partition()]
        if not msg.error():
            self.record(msg)
        return True

    def record(self, msg) -> None:
        """Count a record by the kind of verdict it carries (its document's latest), print it."""
        self.last = time.monotonic()
        self.seen += 1
        text = msg.value().decode("utf-8", "replace") if msg.value() is not None else "null"
        v = None
        try:
            v = json.loads(text)
            kind = v.get("verdict", "?") if isinstance(v, dict) else "?"
            if kind == "duplicate":
                kind = f"duplicate/{v.get('match')}"
        except (ValueError, RecursionError) as e:  # printed as it is: a data problem never stops a tail
            kind = "?"
            self.counts["unparsed"] += 1
            print(f"stream-dedup: {self.topic}[{msg.partition()}]@{msg.offset()} is not JSON "
                  f"({type(e).__name__}); printed as text", file=sys.stderr)
        ident = v.get("id") if isinstance(v, dict) else None
        doc = ("id", ident) if isinstance(ident, str) else ("key", msg.key())
        self.latest[doc] = kind  # a verdict's revisions count once, as their latest kind
        if self.echo is not None:
            self.echo(text)

    def summary(self) -> dict[str, int]:
        counts = self.counts + Counter(self.latest.values())
        counts["messages"] = self.seen
        counts["documents"] = len(self.latest)
        if self.to_end and self.ends:
            counts["unfinished_partitions"] = len(self.ends)
        return dict(counts)

    def close(self) -> None:
        self.consumer.close()
