"""Poison messages: set aside what fails on every attempt, so that one bad item cannot stop a partition.

Why: when an agent raises, the worker holds the batch and exits for a restart that replays it
(``app.guarded``). That loses nothing when the cause passes (a broker that was away, a full
disk that was cleared). When the cause is in the data (a bug that one document trips in the
index or decide stage), every restart replays the same item and fails again: a crash loop, and
the partition's later events never get a verdict.

The ``FailureJournal`` counts each message's failed attempts in a file beside the worker's
tables, so the count survives the restarts. A message that failed once is replayed on its own,
and an index or decide message item by item (each item is one document's probe or answer; a
pages message is one event), with the tables written after each, so that the failing item is
found and the others go through; a document whose items fail on their own is counted too,
across the messages that carry it. On the ``worker.quarantine_after``-th attempt (of the
message, or of the document), an item that raises again goes to the dead-letter topic (reason ``quarantined``, with the stage,
the exception, the document ids and the item's bytes, which ``stream-dedup redrive`` sends back
to the same topic and partition once the bug is fixed) and the partition moves on.

The journal also remembers the documents it quarantined. A document's items keep coming after
the first one failed (in decide: its late answers, offers and cluster changes), and each would
cost two restarts; a batch that fails and names such a document is replayed at once, in the same
process, message by message, and its item about the known document that raises is quarantined
on the spot.

Errors of the infrastructure (the Kafka client's, the operating system's, out of memory) never
count: the data is not their cause, and they restart the worker as before.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core.wire import Prepared, Probe, ToDecide, index_item, pack_batches, unpack_batch
from .dead_letters import dead_letter_record

log = logging.getLogger("stream_dedup.worker")

REASON = "quarantined"
FILE_NAME = "failures.json"

# exception classes from these packages are the infrastructure's, whatever their name (``cimpl``:
# confluent-kafka's compiled module, where KafkaException lives)
_INFRA_MODULES = frozenset({"aiokafka", "kafka", "confluent_kafka", "cimpl", "faust", "mode", "rocksdict"})


def counts_as_poison(e: BaseException) -> bool:
    """Whether an exception may be the data's fault: not the Kafka client's, Faust's or the store's,
    not an OSError (connections, timeouts, disks), not MemoryError."""
    if isinstance(e, (OSError, MemoryError, TimeoutError)):
        return False
    return not any(c.__module__.split(".")[0] in _INFRA_MODULES for c in type(e).__mro__)


MessageKey = tuple[str, int, int]  # topic, partition, offset


@dataclass
class FailureJournal:
    """Failed attempts per message, kept in a JSON file that survives the worker's restarts.

    ``limit`` 0 turns quarantine off: nothing is counted, and a failing message restarts the
    worker for as long as it fails (the behaviour before this journal). The file holds only
    messages that failed and have not gone through since, and poison messages until their
    partition's commit passes them: a handful at most. It is written (atomically: a temporary
    file, then a rename) only when that set changes.
    """

    path: Path
    limit: int
    attempts: dict[str, int] = field(default_factory=dict)
    # ids of documents whose items failed on their own, with how often, in any message
    failing: dict[str, int] = field(default_factory=dict)
    # ids of documents with a quarantined item, oldest first (at most MAX_DOCUMENTS)
    documents: dict[str, None] = field(default_factory=dict)

    MAX_DOCUMENTS = 10_000

    @classmethod
    def load(cls, path: Path, limit: int) -> FailureJournal:
        j = cls(path, limit)
        if limit and path.exists():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                j.attempts = {str(k): int(v) for k, v in raw["attempts"].items()}
                j.failing = {str(k): int(v) for k, v in raw["failing"].items()}
                j.documents = dict.fromkeys(str(d) for d in raw["documents"])
            except (ValueError, TypeError, AttributeError, KeyError) as e:
                # a journal we cannot read costs at most a few more restarts: start counting again
                log.warning("failure journal %s is unreadable (%r); counting from zero", path, e)
                j.attempts, j.failing, j.documents = {}, {}, {}
        return j

    @staticmethod
    def key(m: MessageKey) -> str:
        return f"{m[0]}:{m[1]}:{m[2]}"

    def suspect(self, m: MessageKey) -> bool:
        """Has this message failed before? Then it is replayed on its own, item by item."""
        return bool(self.attempts) and self.key(m) in self.attempts

    def failed(self, messages: list[MessageKey]) -> int:
        """Count one more failed attempt for each message; returns the most attempts among them
        (0 with quarantine off). An item that raises on its message's ``limit``-th attempt is
        quarantined."""
        if not self.limit or not messages:
            return 0
        n = self._count(messages)
        self._save()
        return n

    def _count(self, messages: list[MessageKey]) -> int:
        for m in messages:
            k = self.key(m)
            self.attempts[k] = self.attempts.get(k, 0) + 1
        return max(self.attempts[self.key(m)] for m in messages)

    def passed(self, m: MessageKey) -> None:
        """The message went through. An innocent one (it failed in a batch with a poison message, or
        its cause has passed) is forgotten; a poison one is kept, so that a replay of it (after a
        rebalance, or a restart before the commit) dead-letters its failing items again at once
        instead of failing its batch."""
        k = self.key(m)
        if k in self.attempts and self.attempts[k] < self.limit:
            del self.attempts[k]
            self._save()

    def failed_alone(self, m: MessageKey, ids: list[str]) -> int:
        """An item of message ``m`` about documents ``ids`` failed on its own: count it for the
        message and for each document. Returns its attempts: the message's, or one more than its
        documents' failures on their own, whichever is more. Why the documents: a document's items
        travel in several messages (in index, one per partition its probes go to), each with its
        own count; by the message alone each would cost two restarts."""
        if not self.limit:
            return 0
        n = self._count([m])
        for d in ids:
            self.failing[d] = self.failing.get(d, 0) + 1
        self._save()
        return max([n] + [self.failing[d] + 1 for d in ids])

    def quarantined(self, ids: list[str]) -> None:
        """Remember documents whose item was quarantined: a later item about one of them that raises
        (a late answer, an offer, a cluster change) is quarantined at once, without the restarts."""
        for d in ids:
            self.failing.pop(d, None)
            self.documents.pop(d, None)
            self.documents[d] = None
        while len(self.documents) > self.MAX_DOCUMENTS:
            del self.documents[next(iter(self.documents))]
        self._save()

    def known(self, ids: list[str]) -> bool:
        """Is any of these documents one with a quarantined item?"""
        return bool(self.documents) and any(d in self.documents for d in ids)

    def forget_committed(self, committed: Callable[[str, int], int | None]) -> None:
        """Drop the messages before their partition's committed offset (``committed(topic, partition)``,
        the next offset to read, None when not known here): they are never replayed."""
        stale = []
        for k in self.attempts:
            topic, part, offset = k.rsplit(":", 2)
            c = committed(topic, int(part))
            if c is not None and int(offset) < c:
                stale.append(k)
        if stale:
            for k in stale:
                del self.attempts[k]
            self._save()

    def _save(self) -> None:
        """Write the file; a write that fails (a full disk) is logged, and the counts live on in
        memory: the journal must never turn a failed batch into an exception of its own."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"attempts": self.attempts, "failing": self.failing, "documents": list(self.documents)},
                          f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("failure journal %s not written (%r): its counts restart from zero with the worker",
                        self.path, e)


def split_items(stage: str, value: bytes | None) -> list[bytes]:
    """A message as messages of one item each, in order: what the agent reads when it replays a
    suspect message item by item. A pages message is one event already."""
    if stage == "prepare" or not value:
        return [value or b""]
    return [pack_batches([_read(stage, item).to_bytes()])[0] for item in unpack_batch(value)]


def _read(stage: str, item: Any) -> Prepared | Probe | ToDecide:
    """One item of an index or decide message, as its stage reads it."""
    return index_item(item) if stage == "index" else ToDecide.from_item(item)


def item_ids(stage: str, value: bytes | None) -> list[str]:
    """The ids of the documents a message is about (for the dead-letter record); [] when unreadable."""
    try:
        if stage == "prepare":
            doc = json.loads(value or b"")
            return [str(doc["id"])] if isinstance(doc, dict) and "id" in doc else []
        return list(dict.fromkeys(_read(stage, item).id for item in unpack_batch(value)))
    except Exception:  # noqa: BLE001 - the record is still written, without ids
        return []


def quarantine_detail(stage: str, e: BaseException, attempts: int, known: bool) -> str:
    """Why an item is quarantined: its dead-letter record's ``detail``, and the worker's log line."""
    why = "its document was quarantined before" if known else f"attempt {attempts}"
    return f"the {stage} stage raised {e!r} ({why})"


def dead_letter(stage: str, m: MessageKey, item: int, value: bytes | None, e: BaseException,
                attempts: int, known: bool = False, timestamp: int | None = None,
                ids: list[str] | None = None) -> bytes:
    """The dead-letter record of a quarantined item (``topics/schemas/dlq_record.schema.json``,
    built and bounded by ``dead_letters``); ``known``: its document had an item quarantined before;
    ``timestamp``: its message's, in ms (``redrive`` sends it back with the item: an event without a
    ``ts`` is judged at that time); ``ids``: the item's documents, when the caller has read them."""
    return dead_letter_record(REASON, quarantine_detail(stage, e, attempts, known), value or b"", topic=m[0],
                              partition=m[1], offset=m[2], timestamp=timestamp, item=item, stage=stage,
                              attempts=attempts, ids=item_ids(stage, value) if ids is None else ids)
