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
