"""`produce` and `tail` on bad records, against the real broker: nothing lost, nothing stopped."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stream_dedup.stream.kafka_io import producer
from stream_dedup.stream.topics import apply

from .pipeline import settings_env

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[2]


def cli(settings, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stream_dedup.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=180, input=stdin, env=settings_env(settings))


def test_produce_reports_an_oversized_line_and_sends_the_rest(kafka_settings, tmp_path):
    apply(kafka_settings)
    lines = [json.dumps({"id": "a", "text": "第一条短信：明天上午九点开会。"}, ensure_ascii=False),
             json.dumps({"id": "big", "text": "长" * 600_000}, ensure_ascii=False),  # 1.8 MB: over the limit
             "{not json",
             json.dumps({"id": "c", "text": "第三条短信：会议改到下午三点。"}, ensure_ascii=False)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = cli(kafka_settings, "produce", str(path), "--no-progress", "--validate")
    assert r.returncode == 1, r.stderr
    assert "line 2 not sent: MSG_SIZE_TOO_LARGE" in r.stderr and "line 3 not sent: not JSON" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "produced 2 events" in r.stderr, r.stderr
    assert "rdkafka" not in r.stderr and "GETPID" not in r.stderr, r.stderr  # librdkafka's own lines stay quiet
    t = cli(kafka_settings, "tail", "--topic", kafka_settings.topics.pages, "--to-end")
    assert t.returncode == 0, t.stderr
    assert sorted(json.loads(x)["id"] for x in t.stdout.splitlines()) == ["a", "c"]


def test_tail_prints_a_record_it_cannot_parse_and_goes_on(kafka_settings):
    apply(kafka_settings)
    topic = kafka_settings.topics.pages
    p = producer(kafka_settings)
    nested = b"[" * 100_000 + b"]" * 100_000  # deeper than Python's JSON parser goes
    for value in (b'{"id": "x1", "text": "a"}', nested, b'{"id": "x2", "text": "b"}'):
        p.produce(topic, value=value, key=b"k", partition=0)
    assert p.flush(30) == 0
    t = cli(kafka_settings, "tail", "--topic", topic, "--to-end")
    assert t.returncode == 0, t.stderr[-2000:]
    out = t.stdout.splitlines()
    assert len(out) == 3 and out[1].startswith("[[[") and json.loads(out[2])["id"] == "x2", t.stdout[:300]
    assert "is not JSON (RecursionError); printed as text" in t.stderr and "Traceback" not in t.stderr


def test_tail_summary_counts_a_documents_revisions_once(kafka_settings):
    apply(kafka_settings)
    topic = kafka_settings.topics.verdicts
    p = producer(kafka_settings)
    for v in ({"id": "a", "verdict": "unique", "revision": 0}, {"id": "b", "verdict": "unique", "revision": 0},
              {"id": "b", "verdict": "duplicate", "match": "near", "duplicate_of": "a", "revision": 1}):
        p.produce(topic, value=json.dumps(v).encode(), key=v["id"].encode())
    assert p.flush(30) == 0
    t = cli(kafka_settings, "tail", "--to-end", "--summary")
    assert t.returncode == 0, t.stderr
    assert json.loads(t.stdout) == {"messages": 3, "documents": 2, "unique": 1, "duplicate/near": 1}
