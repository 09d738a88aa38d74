"""Every benchmark script of the README's Benchmarks section runs from this checkout and writes its table.

Why here: the benchmark issue is done when each script runs, as one command, on a fresh clone. The
scripts are run by hand at a stop, a few of them each time, so one that a change of the package
broke (an import, a renamed function, a setting) would stay broken until someone ran it. Each runs
here on a small input (the arguments below, not the recorded ones), as its own process, with its
tables sent to a temporary folder (``STREAM_DEDUP_BENCH_RESULTS``), and the recorded tables in
``bench/results`` must not change. Nothing is timed: each check is on what the script measured
that does not depend on the machine's speed (who answered, which verdicts, which rows).

Left out: ``instructions.py`` (needs Valgrind, which the machine may lack), ``worker_profile.py``
and ``kafka_e2e.py --profile`` (py-spy samples of the workers), ``build_devset.py`` (every script
that reads the development benchmark builds it first).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import REPO, shared_data

pytestmark = [pytest.mark.slow, pytest.mark.bench]
RECORDED = REPO / "bench" / "results"


def _recorded() -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in RECORDED.iterdir() if p.is_file()}


def run_script(tmp_path: Path, script: str, *args: str, timeout: float = 600, bootstrap: str | None = None) -> Path:
    """Runs ``bench/<script>`` as the README does, its tables going to ``tmp_path / "results"``;
    returns that folder. Fails with the script's output when it exits with an error. ``bootstrap``:
    the suite's broker, named to the script (else it would start and warm one of its own)."""
    shared_data("")  # the scripts read the team's corpora
    results = tmp_path / "results"
    before = _recorded()
    proc = subprocess.run([sys.executable, str(REPO / "bench" / script), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(os.environ, STREAM_DEDUP_BENCH_RESULTS=str(results),
                                   **({"KAFKA_BOOTSTRAP": bootstrap} if bootstrap else {})))
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert _recorded() == before, f"{script} wrote to bench/results, not to STREAM_DEDUP_BENCH_RESULTS"
    return results


def table_of(results: Path, name: str) -> dict:
    """``name``'s JSON, after checking that its table was written beside it, with the machine line."""
    data = json.loads((results / f"{name}.json").read_text(encoding="utf-8"))
    text = (results / f"{name}.md").read_text(encoding="utf-8")
    assert "\n|-" in text, f"{name}.md holds no table:\n{text[:500]}"  # a table's separator row
    assert data["machine"]["commit"] and data["machine"]["cpus"], data["machine"]
    return data


def _quality(d: dict) -> None:
    rows = {(r["set"], r["system"]): r for r in d["results"]}
    for s in ("news", "sms"):  # the claim: a higher F1 than both peers on each set
        ours = rows[(s, "stream-dedup scan")]["f1"]
        peers = [rows[(s, p)]["f1"] for p in ("simhash SimhashIndex k=3", "datasketch MinHashLSH 0.7")]
        assert ours > max(peers), (s, ours, peers)
        assert rows[(s, "stream-dedup scan")]["docs_per_s"] > 0


def _stages(d: dict) -> None:
    stages = {(r["set"], r["stage"]) for r in d["results"]}
    assert {("news", "judge (fresh state)"), ("sms", "judge (fresh state)")} <= stages, stages
    assert all(r["us_per_doc"] > 0 for r in d["results"])


def _fingerprint(d: dict) -> None:
    for corpus in ("news", "sms"):
        kinds = {r["fingerprint"] for r in d["results"][corpus]}
        assert {"simhash", "minhash"} <= kinds, kinds
        assert all(r["ours_us"] > 0 for r in d["results"][corpus])
        assert all(r["ratio_peer_over_ours"] > 0 for r in d["results"][corpus] if r["peer"] != "-")  # n-gram keys: no peer


def _scan_vs_jieba(d: dict) -> None:
    assert d["docs"] > 0 and d["jieba_s"] > 0 and d["scan_cli_s"] > 0


def _campaign(d: dict) -> None:
    ours = next(r for r in d["results"] if r["system"] == "stream-dedup scan")
    assert ours["docs"] == 10 * 20 and ours["f1"] == 1.0 and ours["originals_called_duplicate"] == 0, ours


def _scan_memory(d: dict) -> None:
    systems = {r["system"]: r for r in d["rows"]}
    assert {r["docs"] for r in d["rows"]} == {2000} and "simhash SimhashIndex k=3 loop" in systems, d["rows"]
    assert all(r["peak_rss_mb"] > 0 for r in d["rows"])


def _sweep_memory(d: dict) -> None:
    assert all(s["entries_dropped"] > 0 for s in d["sizes"]), d["sizes"]


def _deduper_disk(d: dict) -> None:
    assert d["verdicts_equal"] == d["docs"] == 2000  # forgetting old states must not change a verdict


def _index_scale(d: dict) -> None:
    assert {s: [r["indexed"] for r in rows] for s, rows in d["results"].items()} == \
        {"4x16": [1000, 2000], "5c2": [1000, 2000]}, d["results"]


def _segmenters(d: dict) -> None:
    adapter = [r for r in d["agreement"] if r["segmenter"].startswith("rjieba (adapter")]
    assert adapter and sum(r["docs"] for r in adapter) > 1000, d["agreement"]


def _html_quality(d: dict) -> None:
    default = next(r for r in d["results"] if r["config"] == "default (auto)")
    assert default["should"] > 0 and default["recall"] > 0.5 and default["same_site_fp"] == 0, default


def _spam_edits(d: dict) -> None:
    held = {r["held_out"]: r for r in d["leave_one_class_out"]}
    assert len(held) == 13 and all(r["recall"] > 0.8 for r in held.values()), held
    assert any(row[0].startswith("rensa") for row in d["whole"]), d["whole"]


def _extraction_loo(d: dict) -> None:
    default, held = d["rows"]
    assert default[1] == held[1] == 132 and held[2] >= 0.9 * held[1], d["rows"]


def _peers(d: dict) -> None:
    systems = {r["system"].split(",")[0] for r in d["results"]}
    assert systems == {"stream-dedup scan", "rensa", "gaoya"}, d["results"]
    assert all(r["f1"] > 0.5 and r["docs_per_s"] > 0 for r in d["results"]), d["results"]


PURE: list[tuple[str, list[str], str, Callable[[dict], None]]] = [
    ("quality.py", ["--repeat", "1"], "quality", _quality),
    ("stages.py", ["--repeat", "1"], "stages", _stages),
    ("fingerprint.py", ["--docs", "50", "--sms-docs", "300", "--repeat", "1"], "fingerprint", _fingerprint),
    ("scan_vs_jieba.py", ["--repeat", "1"], "scan_vs_jieba", _scan_vs_jieba),
    ("campaign.py", ["--templates", "10", "--rounds", "20", "--repeat", "1"], "campaign", _campaign),
    ("scan_memory.py", ["--docs", "2000", "--repeat", "1"], "scan_memory", _scan_memory),
    ("sweep_memory.py", ["--docs", "2000", "--copies-docs", "500", "--repeat", "1"], "sweep_memory", _sweep_memory),
    ("deduper_disk.py", ["--docs", "2000", "--repeat", "1"], "deduper_disk", _deduper_disk),
    ("index_scale.py", ["--sizes", "1000", "2000"], "index_scale", _index_scale),
    ("segmenters.py", ["--speed-docs", "50"], "segmenters", _segmenters),
    ("html_quality.py", ["--per-page", "1"], "html_quality", _html_quality),
    ("extraction_loo.py", [], "extraction_loo", _extraction_loo),
    ("peers.py", ["--sets", "sms", "--repeat", "1", "--grid", "0.3"], "peers", _peers),
    ("spam_edits.py", ["--originals", "150", "--ham", "500", "--grid", "0.8", "0.85", "--peers"], "spam_edits",
     _spam_edits),
]


@pytest.mark.parametrize("script,args,name,check", PURE, ids=[p[0] for p in PURE])
def test_a_benchmark_script_runs_and_writes_its_table(tmp_path, script, args, name, check):
    check(table_of(run_script(tmp_path, script, *args), name))


def test_english_sms_scores_each_edit_class(tmp_path):
    """DailyDialog is not shipped (its licence is non-commercial): the script runs where a user put it."""
    if not list((REPO / "bench" / "work" / "english").glob("*.txt")):
        pytest.skip("no DailyDialog files in bench/work/english (see bench/english_sms.py)")
    rows = table_of(run_script(tmp_path, "english_sms.py", "--peers"), "english_sms")["rows"]
    ours, peers = rows[0], rows[1:]
    assert ours[0].startswith("stream-dedup scan") and len(ours) == 15 and ours[1] > 0.9, ours
    assert [r[0].split(",")[0] for r in peers] == ["rensa char-3 MinHash LSH"] * 3, peers


def test_collect_gathers_the_tables_it_finds(tmp_path):
    results = run_script(tmp_path, "stages.py", "--sets", "sms", "--repeat", "1")
    run_script(tmp_path, "collect.py")
    text = (results.parent / "README.md").read_text(encoding="utf-8")
    section = text.split("<!-- table: stages -->", 1)[1].split("<!-- /table -->", 1)[0]
    assert "judge (fresh state)" in section and "`stages`:" in section, section[:1000]


@pytest.mark.kafka
def test_kafka_e2e_answers_every_event_through_a_worker(tmp_path, kafka_bootstrap):
    """A broker the suite already runs: the script neither starts one nor warms it."""
    results = run_script(tmp_path, "kafka_e2e.py", "--events", "300", "--workers", "1", "--kinds", "sms",
                         "--repeat", "1", bootstrap=kafka_bootstrap)
    run = table_of(results, "kafka_e2e_trial")["runs"][0]  # other arguments than the recorded table's
    assert (run["kind"], run["workers"], run["events"], run["answered"]) == ("sms", 1, 300, 300), run
    assert run["worker_log"]["errors"] == 0 and run["latency_p99_ms"] > 0, run


@pytest.mark.kafka
def test_status_scale_reads_every_partition(tmp_path, kafka_bootstrap):
    d = table_of(run_script(tmp_path, "status_scale.py", "--partitions", "6", "--repeat", "1",
                            bootstrap=kafka_bootstrap), "status_scale")
    assert [(r["partitions"], r["source_partitions"]) for r in d["results"]] == [(6, 18)], d["results"]
