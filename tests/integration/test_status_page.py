"""The live status page in headless Chromium (Debian's chromium): it loads, its charts draw data
from a real run, it names the group's workers and the one serving it, and a screenshot is kept as a
test artifact (test-artifacts/status-page.png)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from stream_dedup.stream.topics import apply

from .pipeline import REPO, Workers, latest, produce_events, read_all
from ..conftest import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ARTIFACTS = REPO / "test-artifacts"
CAMPAIGN = "恭喜您获得本期幸运大奖，奖金五万元，请点击链接领取并填写银行卡信息，逾期作废，编号{}"


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    return exe


def test_status_page_renders_charts_clusters_and_ownership(kafka_settings, tmp_path):
    exe = chromium()
    kafka_settings.topics.partitions = 3
    apply(kafka_settings)
    port = free_port()
    workers = Workers(kafka_settings, tmp_path)
    events = [{"id": f"spam-{i}", "text": CAMPAIGN.format(1000 + i), "ts": 1000 + i} for i in range(40)]
    events += [{"id": f"ham-{i}", "text": f"明天下午{i % 12 + 1}点在{i}号会议室讨论第{i}季度的预算安排", "ts": 2000 + i}
               for i in range(40)]
    try:
        workers.start("w0", STREAM_DEDUP_WORKER__WEB_PORT=str(port), STREAM_DEDUP_WORKER__NAME="page-worker-a")
        workers.start("w1", STREAM_DEDUP_WORKER__WEB_PORT=str(free_port()), STREAM_DEDUP_WORKER__NAME="page-worker-b")
        produce_events(kafka_settings, events[:40], extra_raw=[b"not json"])
        read_all(kafka_settings, kafka_settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= 40, timeout=300)
        time.sleep(11)  # a second report interval: rates need two reports
        produce_events(kafka_settings, events[40:])
        read_all(kafka_settings, kafka_settings.topics.verdicts, until=lambda ms: len(latest(ms)) >= 80, timeout=300)
        time.sleep(22)
        url = f"http://127.0.0.1:{port}/status"
        with urllib.request.urlopen(url.replace("/status", "/status.json"), timeout=60) as r:
            assert r.status == 200
            said = json.loads(r.read())["work_said"]
        assert said.startswith("nothing to process"), said  # every event had its verdict
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "status-page.png"
        shot.unlink(missing_ok=True)
        flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                 "--window-size=1280,1500", "--virtual-time-budget=20000"]
        dom = subprocess.run([exe, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
        subprocess.run([exe, *flags, f"--screenshot={shot}", url], capture_output=True, timeout=180)
    finally:
        workers.stop_all()
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:2000]
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', body.group(1)))
    assert int(attrs.get("points", 0)) >= 1, attrs
    assert int(attrs.get("canvases", 0)) >= 2, attrs  # both charts drew
    assert int(attrs.get("clusters", 0)) >= 1, attrs
    assert "恭喜您获得本期幸运大奖，奖金五万元" in dom  # the campaign's text as sent (full-width comma)
    assert re.search(r'id="served-by">page-worker-a</b>', dom), dom[:3000]  # "this page: worker ..."
    for name in ("page-worker-a", "page-worker-b"):  # both workers: in the workers table and as owners
        assert dom.count(f">{name}</td>") >= 2, (name, dom[-4000:])
    legends = re.findall(r'<td class="u-value">([^<]*)</td>', dom)
    assert len(legends) >= 3 and "--" not in legends, legends  # the latest values, not uPlot's "--"
    assert re.search(r"<td class=\"num\">40</td>", dom), "the campaign's cluster has 40 copies"
    assert kafka_settings.topics.pages in dom and "not_json" in dom  # partitions and DLQ reasons
    assert "(nothing to process)" in dom  # every event had its verdict before the page was read
    # the header's words are the ones `status` prints, from the JSON (status.work_said)
    assert re.search(rf'id="total-lag">\d+ \({re.escape(said)}\)</b>', dom), dom[:3000]
    assert shot.exists() and shot.stat().st_size > 10_000
