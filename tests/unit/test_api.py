"""The Python API: the README's example runs as written, and the API agrees with scan."""
import json
import re
from pathlib import Path

import pytest

from stream_dedup import Deduper
from stream_dedup.core.document import Rejected

REPO = Path(__file__).resolve().parents[2]


def test_readme_python_api_example_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API"):readme.index("## Contracts")]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md#python-api", "exec"), {})


def test_api_matches_scan_on_the_sample_and_rejects_bad_events(tmp_path):
    from stream_dedup.config import load_settings
    from stream_dedup.scan import run_scan

    sample = REPO / "examples" / "sample.jsonl"
    run_scan(load_settings(environ={}), str(sample), str(tmp_path / "v.jsonl"), quiet=True)
    scanned = {v["id"]: (v["verdict"], v["duplicate_of"]) for v in map(json.loads, open(tmp_path / "v.jsonl"))}
    with Deduper() as d:
        for line in sample.read_text(encoding="utf-8").splitlines():
            d.check(line)
        assert {i: (d.verdict(i).verdict, d.verdict(i).duplicate_of) for i in scanned} == scanned
        with pytest.raises(Rejected) as e:
            d.check(b"{broken")
        assert e.value.reason == "not_json"


def test_scan_with_several_preparing_processes_gives_the_same_verdicts_and_rejections(tmp_path):
    """``scan --jobs``: documents are prepared in other processes and judged here in input order."""
    import io
    import pickle

    from stream_dedup.config import load_settings
    from stream_dedup.scan import CHUNK_LINES, run_scan

    lines = (REPO / "examples" / "sample.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    extra = ["{broken", json.dumps({"id": first["id"], "text": "同一个编号，不同的内容：应被拒绝。", "ts": 5}),
             json.dumps({"id": "tw", "text": "新浪體育訊　北京時間４月１２日，湖人隊擊敗國王。", "ts": 9}),
             json.dumps({"id": "cn", "text": "新浪体育讯北京时间4月12日,湖人队击败国王.", "ts": 10})]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines[:12] + extra[:2] + lines[12:] * 25 + extra[2:]) + "\n", encoding="utf-8")
    assert len(src.read_text(encoding="utf-8").splitlines()) > 2 * CHUNK_LINES  # every process gets a chunk
    runs = {}
    for jobs in (1, 2, 3):  # 3: a chain of forks (each preparing process forks the next)
        bad = io.StringIO()
        summary = run_scan(load_settings(environ={}), str(src), str(tmp_path / f"v{jobs}.jsonl"), jobs=jobs,
                           report_bad=bad, clusters_path=str(tmp_path / f"c{jobs}.jsonl"))
        runs[jobs] = ((tmp_path / f"v{jobs}.jsonl").read_text(encoding="utf-8"),
                      (tmp_path / f"c{jobs}.jsonl").read_text(encoding="utf-8"), bad.getvalue(), summary.as_dict())
    assert runs[1][:3] == runs[2][:3] == runs[3][:3]
    one, two, three = runs[1][3], runs[2][3], runs[3][3]
    for d in (one, two, three):
        d.pop("seconds"), d.pop("docs_per_s")
    assert one == two == three and one["rejected"] == 2 and one["reasons"] == {"not_json": 1, "id_conflict": 1}
    verdicts = {v["id"]: v for v in map(json.loads, runs[2][0].splitlines())}
    assert verdicts["cn"]["verdict"] == "duplicate" and verdicts["cn"]["duplicate_of"] == "tw"
    e = pickle.loads(pickle.dumps(Rejected("not_json", "line 3")))  # how rejections come back from a worker
    assert (e.reason, e.detail) == ("not_json", "line 3")


def test_scan_stops_with_the_error_of_a_preparing_process_that_fails_or_dies(tmp_path, monkeypatch):
    """``FilePreparers``: an error in a preparing process (a bug, not a rejected line) stops the scan
    with that process's traceback, and a process killed midway stops it too, instead of a hang (the
    second process is forked by the first: only the judging process holds its pipe's reading end)."""
    import os
    import signal

    from stream_dedup import scan
    from stream_dedup.config import load_settings

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": f"第{i}条短信：周末特价，欢迎光临。", "ts": i}) + "\n"
                           for i in range(2_000)), encoding="utf-8")
    settings = load_settings(environ={})

    def broken(preparer, lines):
        raise OSError("disk on fire")

    with monkeypatch.context() as m:
        m.setattr(scan, "_prepare_lines", broken)  # the processes are forked: they run it too
        with pytest.raises(RuntimeError, match="(?s)preparing process 0 failed.*disk on fire"):
            scan.run_scan(settings, str(src), str(tmp_path / "v.jsonl"), jobs=2, quiet=True)

    prep = scan.FilePreparers(settings, str(src), 2, chunk=8)
    try:
        outcomes = prep.outcomes()
        assert next(outcomes)[0] == 1  # process 0 is ready, so it has forked process 1
        first = prep.first.pid
        with open(f"/proc/{first}/task/{first}/children") as f:
            (second,) = map(int, f.read().split())
        os.kill(second, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="preparing process 1 died"):
            for _ in outcomes:
                pass
    finally:
        prep.close()
