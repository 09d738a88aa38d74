"""confluent-kafka clients built from the configuration, so SASL/TLS settings reach every one."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .config import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the broker's "ask again" answers to group calls (offset fetch and commit): its group
#: coordinator is loading or has moved, as for some seconds after a broker starts
COORDINATOR_BUSY = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")


def client_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """librdkafka settings: bootstrap, then the user's pass-through block, then per-client extras."""
    conf: dict[str, Any] = {"bootstrap.servers": settings.kafka.bootstrap}
    conf.update(settings.kafka.client)
    conf.update(extra)
    return conf


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


def send(p, topic: str, value: bytes, key: bytes | None = None, **kw: Any) -> None:
    """Produce one message, waiting for room when librdkafka's local queue is full."""
    while True:
        try:
            p.produce(topic, value=value, key=key, **kw)
            break
        except BufferError:
            p.poll(0.05)
    p.poll(0)


def coordinator_busy(e: BaseException) -> bool:
    """Whether ``e`` is a Kafka error that means "the group coordinator is not ready yet"."""
    from confluent_kafka import KafkaError, KafkaException

    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return isinstance(err, KafkaError) and err.name() in COORDINATOR_BUSY


def coordinated(call: Callable[[], T], what: str, wait_s: float = 60.0,
                sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, asked again while the broker answers that the group coordinator is busy.

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
            if not coordinator_busy(e) or time.monotonic() + delay > deadline:
                raise
            log.info("%s: %s; asking again in %.1f s", what, e, delay)
            sleep(delay)
            delay = min(2 * delay, 2.0)
