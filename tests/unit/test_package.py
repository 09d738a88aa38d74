"""The package a user installs with ``pip install .`` carries what it needs outside the repository:
the topic definitions and schemas, the IDF table and stop words, the status page."""
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_topics_schemas_and_data(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("stream_dedup-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for schema in (REPO / "topics" / "schemas").glob("*.json"):
        assert f"stream_dedup/data/topics/schemas/{schema.name}" in names
    assert {"stream_dedup/data/topics/topics.toml", "stream_dedup/data/idf_jieba.bin",
            "stream_dedup/data/stopwords_zh.txt", "stream_dedup/stream/web/status.html",
            "stream_dedup/stream/web/vendor/uPlot.iife.min.js", "stream_dedup/cli/__main__.py"} <= names


def test_the_default_topic_definitions_are_the_packaged_ones():
    from stream_dedup.config import load_settings

    folder = load_settings(environ={}).topics.definitions_dir()
    assert folder.resolve() == (REPO / "topics").resolve()
    assert folder.is_relative_to(Path(__import__("stream_dedup").__file__).parent)
