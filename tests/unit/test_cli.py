import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stream_dedup.cli import main

REPO = Path(__file__).resolve().parents[2]
COMMANDS = [["scan"], ["worker"], ["topics"], ["topics", "apply"], ["topics", "list"], ["produce"], ["tail"],
            ["eval"], ["idf", "build"], ["status"], ["config"], ["redrive"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_every_subcommand_has_help(cmd):
    r = CliRunner().invoke(main, cmd + ["--help"])
    assert r.exit_code == 0, r.output
    assert "Usage:" in r.output


def test_bad_config_exits_2_with_a_clear_message(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[simhash]\nk = -1\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["--config", str(cfg), "config"])
    assert r.exit_code == 2
    assert "simhash.k" in r.output


def test_config_redacts_secrets():
    r = CliRunner().invoke(main, ["config"], env={"STREAM_DEDUP_KAFKA__CLIENT__SASL_PASSWORD": "s3cret"})
    assert r.exit_code == 0, r.output
    assert "s3cret" not in r.output
    assert json.loads(r.output)["kafka"]["client"]["sasl.password"] == "***"


def test_topics_list_uses_configured_names():
    r = CliRunner().invoke(main, ["topics", "list"], env={"STREAM_DEDUP_TOPICS__PAGES": "crawl.pages"})
    assert r.exit_code == 0, r.output
    assert "crawl.pages" in r.output and "stream-dedup.index-changelog" in r.output


def test_scan_as_a_program_delivers_every_verdict_through_a_pipe_before_its_fast_exit(tmp_path):
    """``stream-dedup scan`` ends with ``os._exit`` (no interpreter teardown): what it wrote to a
    pipe, far more than a pipe holds, and its summary must all arrive, with exit code 0; a scan that
    fails must still exit non-zero with its error."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as most run it
    src = tmp_path / "in.jsonl"
    texts = ["【京东】您的订单{}已发货，请保持电话畅通。", "今晚八点{}号会议室开会，请准时参加。",
             "尊敬的客户，您的验证码是{}，五分钟内有效。"]
    src.write_text("".join(json.dumps({"id": f"m{i}", "ts": 1_700_000_000_000 + i, "text": texts[i % 3].format(i)},
                                      ensure_ascii=False) + "\n" for i in range(3000)), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "stream_dedup.cli", "scan", str(src), "--no-progress"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    verdicts = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(r.stdout) > 1 << 17 and [v["id"] for v in verdicts] == [f"m{i}" for i in range(3000)]
    assert sum(v["verdict"] == "duplicate" for v in verdicts) > 2000  # three campaigns
    assert "docs 3000" in r.stderr
    r = subprocess.run([sys.executable, "-m", "stream_dedup.cli", "scan", str(tmp_path / "missing.jsonl")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "missing.jsonl" in r.stderr and "does not exist" in r.stderr
    assert "Traceback" not in r.stderr  # a usage error, not a crash


def _one_line_error(r, code: int, needle: str) -> None:
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == code and len(lines) == 1 and needle in lines[0], (r.exit_code, r.output)
    assert "Traceback" not in r.output


def test_eval_says_what_is_wrong_with_its_files(tmp_path):
    verdicts, labels, broken = tmp_path / "v.jsonl", tmp_path / "l.jsonl", tmp_path / "b.jsonl"
    verdicts.write_text('{"id": "a", "verdict": "unique"}\n{"id": "b", "verdict": "duplicate", "duplicate_of": "a"}\n')
    labels.write_text('{"id": "x", "cluster": 1}\n')
    broken.write_text('{"id": "a", "verdict": "unique"}\nnot json\n')
    runner = CliRunner()
    _one_line_error(runner.invoke(main, ["eval", str(verdicts), str(labels)]), 2, "labels none of the ids")
    _one_line_error(runner.invoke(main, ["eval", str(labels), str(verdicts)]), 2, "arguments are VERDICTS then LABELS")
    _one_line_error(runner.invoke(main, ["eval", str(broken), str(labels)]), 2, "b.jsonl line 2: not JSON")


def test_scan_into_a_missing_folder_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["scan", str(REPO / "examples" / "sample.jsonl"), "--out",
                                  str(tmp_path / "absent" / "v.jsonl")])
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output, r.output


def test_an_invalid_choice_lists_the_valid_ones():
    from stream_dedup.config import ConfigError, load_settings

    with pytest.raises(ConfigError, match=r"one of: at_least_once, exactly_once"):
        load_settings(environ={"STREAM_DEDUP_WORKER__PROCESSING_GUARANTEE": "exactly-once"})


def test_the_records_users_handle_are_importable_from_the_package():
    import stream_dedup

    assert {"Deduper", "Rejected", "Verdict", "Cluster"} <= set(stream_dedup.__all__)
    assert stream_dedup.Rejected("bad_id", "empty").reason == "bad_id"
