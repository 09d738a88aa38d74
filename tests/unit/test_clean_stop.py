"""Exactly-once: local tables are kept after a clean stop and restored from the changelogs after a crash."""
from stream_dedup.stream import clean_stop


def _tables(tmp_path):
    tables = tmp_path / "v1" / "tables"
    (tables / "decide-0.db").mkdir(parents=True)
    (tables / "decide-0.db" / "CURRENT").write_text("MANIFEST-000001\n")
    return tables


def test_after_a_crash_exactly_once_deletes_the_local_tables(tmp_path):
    tables = _tables(tmp_path)
    assert clean_stop.settle(tmp_path, tables, exactly_once=True)
    assert not tables.exists()


def test_after_a_clean_stop_the_tables_stay_and_the_marker_is_used_once(tmp_path):
    tables = _tables(tmp_path)
    clean_stop.mark(tmp_path)
    assert not clean_stop.settle(tmp_path, tables, exactly_once=True)
    assert (tables / "decide-0.db" / "CURRENT").exists()
    assert not (tmp_path / clean_stop.MARKER).exists()  # the next crash is not taken for a clean stop
    assert clean_stop.settle(tmp_path, tables, exactly_once=True)


def test_at_least_once_keeps_its_tables_after_a_crash(tmp_path):
    tables = _tables(tmp_path)
    assert not clean_stop.settle(tmp_path, tables, exactly_once=False)
    assert tables.exists()
