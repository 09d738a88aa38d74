import json

import pytest
from click.testing import CliRunner

from stream_dedup.cli import main

COMMANDS = [["scan"], ["worker"], ["topics"], ["topics", "apply"], ["topics", "list"], ["produce"], ["tail"],
            ["eval"], ["idf", "build"], ["status"], ["config"]]


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
