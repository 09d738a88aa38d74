"""confluent-kafka clients built from the configuration, so SASL/TLS settings reach every one."""
from __future__ import annotations

from typing import Any

from .config import Settings


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
