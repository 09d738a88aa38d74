from pathlib import Path

import pytest

from stream_dedup.config import ConfigError, load_settings


def test_defaults_validate():
    s = load_settings(environ={})
    assert s.simhash.k == 3 and s.simhash.bands == "5c2"
    assert s.kafka.bootstrap == "127.0.0.1:9092"
    assert s.worker.web_host == "127.0.0.1"


def test_toml_then_env_overrides(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[simhash]\nk = 4\nbands = "5c2"\n[kafka]\nbootstrap = "b1:9092"\n'
                   '[kafka.client]\n"security.protocol" = "SASL_SSL"\n', encoding="utf-8")
    s = load_settings(cfg, environ={"STREAM_DEDUP_SIMHASH__K": "2",
                                    "STREAM_DEDUP_KAFKA__CLIENT__SASL_MECHANISM": "SCRAM-SHA-512",
                                    "STREAM_DEDUP_KAFKA__CLIENT__SASL_PASSWORD": "hunter2"})
    assert s.simhash.k == 2 and s.simhash.bands == "5c2"
    assert s.kafka.bootstrap == "b1:9092"
    assert s.kafka.client == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.password": "hunter2"}
    assert s.kafka.redacted_client()["sasl.password"] == "***"


def test_kafka_bootstrap_env_is_the_default():
    assert load_settings(environ={"KAFKA_BOOTSTRAP": "10.0.0.1:9093"}).kafka.bootstrap == "10.0.0.1:9093"


@pytest.mark.parametrize("env,needle", [
    ({"STREAM_DEDUP_ENGINE__WINDOW_MS": "-5"}, "engine.window_ms"),
    ({"STREAM_DEDUP_SIMHASH__BANDS": "3x7"}, "simhash.bands"),
    ({"STREAM_DEDUP_KAFKA__BOOTSTRAP": "nohostport"}, "kafka.bootstrap"),
    ({"STREAM_DEDUP_SIMHASH__NOPE": "1"}, "simhash.nope"),
    ({"STREAM_DEDUP_NOPE": "1"}, "nope: "),
    ({"STREAM_DEDUP_ENGINE__DETECTORS": "[1]"}, "engine.detectors.0"),
    ({"STREAM_DEDUP_TEXT__IDF": "5"}, "text.idf"),
    ({"STREAM_DEDUP_WORKER__PROCESSING_GUARANTEE": "exactly-once"}, "worker.processing_guarantee"),
])
def test_errors_name_the_setting_and_its_source(env, needle):
    with pytest.raises(ConfigError) as e:
        load_settings(environ=env)
    assert needle in str(e.value)
    assert next(iter(env)) in str(e.value)


def test_values_convert_to_their_types_and_a_file_error_names_the_file(tmp_path):
    s = load_settings(environ={"STREAM_DEDUP_TEXT__IDF": "/tmp/idf.bin", "STREAM_DEDUP_NGRAM__THRESHOLD": "1",
                               "STREAM_DEDUP_ENGINE__DETECTORS": '["ngram", "simhash"]'})
    assert s.text.idf == Path("/tmp/idf.bin") and s.ngram.threshold == 1.0 and isinstance(s.ngram.threshold, float)
    assert s.engine.detectors == ["ngram", "simhash"] and s.as_dict()["text"]["idf"] == "/tmp/idf.bin"
    p = tmp_path / "c.toml"
    p.write_text("[ngram]\nthreshold = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_settings(p, environ={})
    assert "ngram.threshold" in str(e.value) and f"(in {p})" in str(e.value)


def test_bad_toml_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[simhash\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(p, environ={})
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml", environ={})


def test_configuration_reference_is_generated_from_the_model():
    from pathlib import Path

    from stream_dedup.config import Settings, fields, reference_markdown

    readme = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = readme.split("<!-- config-reference:start -->\n")[1].split("\n<!-- config-reference:end -->")[0]
    assert block == reference_markdown(), "docs/configuration.md is stale: paste `stream-dedup config --reference`"
    for section, model, _, _ in fields(Settings):
        for name, _, _, description in fields(model):
            assert description, f"{section}.{name} has no description"


def test_the_projects_own_environment_names_are_not_taken_for_settings():
    """The benchmarks' corpus and results folders and the test suite's knobs share the prefix; a typo does not."""
    s = load_settings(environ={"STREAM_DEDUP_SHARED": "/data", "STREAM_DEDUP_TEST_SOAK_S": "60",
                               "STREAM_DEDUP_TOPICS_DIR": "topics", "STREAM_DEDUP_BENCH_RESULTS": "/tmp/results"})
    assert s == load_settings(environ={})
    with pytest.raises(ConfigError, match="STREAM_DEDUP_SHARD"):
        load_settings(environ={"STREAM_DEDUP_SHARD": "/data"})
