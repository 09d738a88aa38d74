"""A minimal Faust app for the foundation test: a rocksdict-backed table that must survive restarts.

Run: python tests/integration/faust_counter_app.py worker   (env: APP_ID, KAFKA_BOOTSTRAP, DATA_DIR)
"""
import json
import os

import faust

APP_ID = os.environ["APP_ID"]
app = faust.App(
    APP_ID,
    broker=f"kafka://{os.environ['KAFKA_BOOTSTRAP']}",
    store="rocksdb://",
    datadir=os.environ["DATA_DIR"],
    topic_partitions=2,
    topic_replication_factor=1,
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
)
source = app.topic(f"{APP_ID}-in", key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")
sink = app.topic(f"{APP_ID}-out", value_serializer="raw", key_serializer="raw")
counts = app.Table("counts", default=int, partitions=2)


@app.agent(source)
async def count(stream):
    async for key, _value in stream.items():
        k = key.decode()
        counts[k] += 1
        await sink.send(key=key, value=json.dumps({"key": k, "count": counts[k]}).encode())


if __name__ == "__main__":
    app.main()
