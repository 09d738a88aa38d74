"""Dead-letter records: one builder for rejected events and quarantined items, bounded in size.

Why the bound: a dead-letter record carries the original bytes in base64, a third larger than
they are, and a Kafka broker refuses a message over its limit (``message.max.bytes``, 1 MB by
default; the producer's ``max_request_size`` is 1,000,000 bytes). So a rejected event somewhat under
the limit made a record over it, which the broker refused, and the event was gone: no verdict, no dead letter,
its offset committed. A record here is at
most ``MAX_RECORD_BYTES``; an original too long for that keeps its first bytes, and the record says
so (``original_truncated``, ``original_bytes``). Its ``topic``, ``partition`` and ``offset`` still
say where the whole original is, for as long as that topic keeps it (`topics/topics.toml`: 7 days
for the pages topic), and ``stream-dedup redrive`` reads it from there. Such originals are over
670 KB.
"""
from __future__ import annotations

import base64
import json
from typing import Any

#: A dead-letter record's value at most: under the producer's 1,000,000-byte request limit and the
#: broker's 1 MB message limit, with room for the key and the record's framing.
MAX_RECORD_BYTES = 900_000
DETAIL_CHARS = 1000


def dead_letter_record(reason: str, detail: str, original: bytes, *, topic: str | None, partition: int | None,
                       offset: int | None, timestamp: int | None, max_bytes: int = MAX_RECORD_BYTES,
                       **extra: Any) -> bytes:
    """The JSON value of a dead-letter record (``topics/schemas/dlq_record.schema.json``), at most
    ``max_bytes`` long: the whole original when it fits, else as many of its first bytes as fit."""
    record: dict[str, Any] = {"reason": reason, "detail": detail[:DETAIL_CHARS], "original_b64": "",
                              "original_bytes": len(original), "original_truncated": False, "topic": topic,
                              "partition": partition, "offset": offset, "timestamp": timestamp, **extra}
    room = max_bytes - len(json.dumps(record).encode())  # "original_truncated": true is shorter still
    keep = len(original) if 4 * -(-len(original) // 3) <= room else max(0, room // 4 * 3)
    record["original_b64"] = base64.b64encode(original[:keep]).decode()
    record["original_truncated"] = keep < len(original)
    return json.dumps(record).encode()
