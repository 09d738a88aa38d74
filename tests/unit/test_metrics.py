"""The worker's metric children are looked up once and still count in the registry that /metrics serves."""
from stream_dedup.stream.metrics import Metrics


def _sample(m: Metrics, name: str, labels: dict[str, str]) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_stage_and_verdict_children_are_cached_and_counted():
    m = Metrics()
    assert m.stage("exact") is m.stage("exact")
    assert m.stage("exact") is not m.stage("index")
    m.stage("exact").observe(0.002)
    m.stage("exact").observe(0.3)
    m.stage("index").observe(0.001)
    assert _sample(m, "stream_dedup_stage_seconds_count", {"stage": "exact"}) == 2
    assert _sample(m, "stream_dedup_stage_seconds_bucket", {"stage": "exact", "le": "0.0025"}) == 1
    assert _sample(m, "stream_dedup_stage_seconds_count", {"stage": "index"}) == 1

    near = m.verdict("duplicate", "near", "ngram")
    assert near is m.verdict("duplicate", "near", "ngram")
    near.inc()
    near.inc()
    m.verdict("unique", "", "").inc()
    assert _sample(m, "stream_dedup_verdicts_total", {"verdict": "duplicate", "match": "near", "detector": "ngram"}) == 2
    assert _sample(m, "stream_dedup_verdicts_total", {"verdict": "unique", "match": "", "detector": ""}) == 1
    assert b'stream_dedup_verdicts_total{detector="ngram",match="near",verdict="duplicate"} 2.0' in m.render()


def test_children_of_two_workers_in_one_process_do_not_mix():
    a, b = Metrics(), Metrics()
    a.stage("decide").observe(0.01)
    assert _sample(a, "stream_dedup_stage_seconds_count", {"stage": "decide"}) == 1
    assert _sample(b, "stream_dedup_stage_seconds_count", {"stage": "decide"}) is None
