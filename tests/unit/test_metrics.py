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


def test_batch_histograms_count_messages_and_seconds_per_stage():
    m = Metrics()
    sizes, times = m.batch("prepare")
    assert m.batch("prepare") == (sizes, times)
    for n in (1, 3, 1024):
        sizes.observe(n)
    times.observe(0.004)
    m.batch("index")[0].observe(7)
    assert _sample(m, "stream_dedup_batch_messages_count", {"stage": "prepare"}) == 3
    assert _sample(m, "stream_dedup_batch_messages_sum", {"stage": "prepare"}) == 1028
    assert _sample(m, "stream_dedup_batch_messages_bucket", {"stage": "prepare", "le": "4.0"}) == 2
    assert _sample(m, "stream_dedup_batch_messages_bucket", {"stage": "prepare", "le": "512.0"}) == 2
    assert _sample(m, "stream_dedup_batch_seconds_bucket", {"stage": "prepare", "le": "0.005"}) == 1
    assert _sample(m, "stream_dedup_batch_messages_count", {"stage": "index"}) == 1
    assert _sample(m, "stream_dedup_batch_seconds_count", {"stage": "index"}) == 0


def test_children_of_two_workers_in_one_process_do_not_mix():
    a, b = Metrics(), Metrics()
    a.stage("decide").observe(0.01)
    assert _sample(a, "stream_dedup_stage_seconds_count", {"stage": "decide"}) == 1
    assert _sample(b, "stream_dedup_stage_seconds_count", {"stage": "decide"}) is None


def test_batched_histogram_exposes_what_the_library_histogram_would():
    """Same values into prometheus_client's own Histogram and into the batched one: same buckets
    (bounds included: "le" is less than or equal), count and sum, across a fold of pending values."""
    import random

    from prometheus_client import CollectorRegistry, Histogram

    from stream_dedup.stream import metrics as mod

    bounds = (0.001, 0.01, 0.1, 1.0)
    ref_reg, our_reg = CollectorRegistry(), CollectorRegistry()
    ref = Histogram("h", "doc", ["stage"], buckets=bounds, registry=ref_reg)
    ours = mod.BatchedHistogram("h", "doc", ("stage",), buckets=bounds, registry=our_reg)
    rng = random.Random(7)
    values = [rng.choice(bounds) for _ in range(50)] + [rng.uniform(0, 2) for _ in range(5000)]
    for i, v in enumerate(values):
        stage = "a" if i % 3 else "b"
        ref.labels(stage).observe(v)
        ours.labels(stage).observe(v)
        if i == 2000:  # a scrape in the middle folds what is pending
            assert our_reg.get_sample_value("h_count", {"stage": "a"}) == ref_reg.get_sample_value("h_count", {"stage": "a"})
    for stage in ("a", "b"):
        for le in ("0.001", "0.01", "0.1", "1.0", "+Inf"):
            labels = {"stage": stage, "le": le}
            assert our_reg.get_sample_value("h_bucket", labels) == ref_reg.get_sample_value("h_bucket", labels), labels
        assert our_reg.get_sample_value("h_count", {"stage": stage}) == ref_reg.get_sample_value("h_count", {"stage": stage})
        assert abs(our_reg.get_sample_value("h_sum", {"stage": stage})
                   - ref_reg.get_sample_value("h_sum", {"stage": stage})) < 1e-6


def test_batched_histogram_folds_without_a_scrape(monkeypatch):
    from stream_dedup.stream import metrics as mod

    monkeypatch.setattr(mod, "_FOLD_AT", 10)
    h = mod.BatchedHistogram("h", "doc", buckets=(1.0,))
    for _ in range(25):
        h.observe(0.5)
    series = h.labels()
    assert len(series.pending) == 5  # two folds of 10 happened on observe, memory stays bounded
    assert series.counts.tolist() == [20, 0]


def test_exposition_has_process_gauges_and_the_verdict_latency_but_no_created_series():
    m = Metrics()
    m.verdict_latency.observe(0.2)
    m.verdict_latency.observe(7.0)
    m.events_in.inc()
    text = m.render().decode()
    assert "process_resident_memory_bytes" in text and "process_cpu_seconds_total" in text
    assert _sample(m, "stream_dedup_verdict_latency_seconds_bucket", {"le": "0.25"}) == 1
    assert _sample(m, "stream_dedup_verdict_latency_seconds_count", {}) == 2
    assert "_created" not in text, [x for x in text.splitlines() if "_created" in x][:3]
