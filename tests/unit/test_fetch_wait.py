"""The worker's consumer long-polls the broker for ``worker.fetch_max_wait_ms``, not Faust's fixed 1,500 ms
(see ``stream.internals`` for why). No broker: the consumer is built, never started."""
import asyncio

from stream_dedup.config import load_settings
from stream_dedup.stream.worker import Worker


def worker_app(tmp_path, **env: str):
    return Worker(load_settings(None, environ={"STREAM_DEDUP_WORKER__STATE_DIR": str(tmp_path / "state"), **env})).app


def consumer_fetch(tmp_path, **env: str) -> tuple[int, int]:
    """(fetch_max_wait_ms, fetch_min_bytes) of the consumer the worker would create."""
    app = worker_app(tmp_path, **env)

    async def build() -> tuple[int, int]:
        consumer = app.consumer._thread._create_worker_consumer(app.consumer.transport)
        return consumer._fetch_max_wait_ms, consumer._fetch_min_bytes

    return asyncio.run(build())


def consumer_wait_ms(tmp_path, **env: str) -> int:
    return consumer_fetch(tmp_path, **env)[0]


def test_worker_consumer_fetch_wait_follows_the_setting(tmp_path):
    assert consumer_wait_ms(tmp_path) == 100
    assert consumer_wait_ms(tmp_path, STREAM_DEDUP_WORKER__FETCH_MAX_WAIT_MS="1500") == 1500
    assert consumer_wait_ms(tmp_path, STREAM_DEDUP_WORKER__FETCH_MAX_WAIT_MS="40") == 40


def test_worker_consumer_fetch_minimum_follows_the_setting(tmp_path):
    assert consumer_fetch(tmp_path) == (100, 1)
    assert consumer_fetch(tmp_path, STREAM_DEDUP_WORKER__FETCH_MIN_BYTES="4096",
                          STREAM_DEDUP_WORKER__FETCH_MAX_WAIT_MS="50") == (50, 4096)


def producer_accumulator(tmp_path, **env: str) -> tuple[int, int]:
    """(codec id, most bytes per batch) of the producer batches the worker would build (codec 0
    none, 3 lz4)."""
    app = worker_app(tmp_path, **env)

    async def build() -> tuple[int, int]:
        producer = app.producer._new_producer()
        try:
            acc = producer._message_accumulator
            return acc._compression_type, acc._batch_size
        finally:
            await producer.client.close()

    return asyncio.run(build())


def test_worker_producer_compression_follows_the_setting(tmp_path):
    from aiokafka.record.default_records import DefaultRecordBase

    assert producer_accumulator(tmp_path)[0] == 0
    assert producer_accumulator(tmp_path, STREAM_DEDUP_WORKER__PRODUCER_COMPRESSION="lz4")[0] == DefaultRecordBase.CODEC_LZ4


def test_worker_producer_batch_size_follows_the_setting(tmp_path):
    from stream_dedup.config import WorkerSettings

    assert producer_accumulator(tmp_path)[1] == WorkerSettings().producer_batch_bytes
    assert producer_accumulator(tmp_path, STREAM_DEDUP_WORKER__PRODUCER_BATCH_BYTES="65536")[1] == 65536
