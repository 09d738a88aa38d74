"""`make demo`, the README's first command, against the test broker: its two workers answer every
event of the shipped sample, and their latest verdicts are the ones `scan` gives the same file."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from .pipeline import REPO, key_of, latest

pytestmark = pytest.mark.kafka
SAMPLE = REPO / "examples" / "sample.jsonl"


def judged(records: list[dict]) -> dict[str, tuple]:
    """id -> (verdict, match, duplicate_of) of each id's latest revision."""
    return {i: key_of(v) for i, v in latest(records).items()}


def test_demo_answers_every_sample_event_as_scan_does(kafka_bootstrap, tmp_path):
    if not (REPO / ".venv" / "bin" / "stream-dedup").exists():
        pytest.skip("deploy/demo.sh runs the repository's .venv, which `make` creates")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DEDUP_")}
    env.update(KAFKA_BOOTSTRAP=kafka_bootstrap, DEMO_WEB_PORT="0")  # no broker of its own; no web ports
    r = subprocess.run(["bash", str(REPO / "deploy" / "demo.sh")], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    n = sum(1 for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip())
    assert f"summary: {n} of {n} events have verdicts" in r.stdout
    path = re.search(r"revisions included: (\S+\.jsonl)\)", r.stdout)
    assert path, r.stdout
    demo = judged([json.loads(line) for line in (REPO / path.group(1)).read_text(encoding="utf-8").splitlines()])

    out = tmp_path / "scan.jsonl"
    s = subprocess.run([sys.executable, "-m", "stream_dedup.cli", "scan", str(SAMPLE), "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert s.returncode == 0, s.stderr
    expected = judged([json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()])
    assert len(expected) == n
    assert demo == expected
    assert sum(v[0] == "duplicate" for v in expected.values()) >= 8  # the sample's copies are found
