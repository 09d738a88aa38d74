"""``topics.create_batches``: the project's topics created in requests a KRaft controller accepts."""
from hypothesis import given
from hypothesis import strategies as st

from stream_dedup.config import Settings
from stream_dedup.stream.topics import MAX_PARTITIONS_PER_CREATE, TopicSpec, create_batches, load_specs


@given(st.lists(st.integers(min_value=1, max_value=120), max_size=40), st.integers(min_value=1, max_value=100))
def test_batches_keep_every_topic_in_order_and_stay_under_the_limit_unless_one_topic_alone_exceeds_it(sizes, limit):
    specs = [TopicSpec(f"t{i}", n, {}) for i, n in enumerate(sizes)]
    batches = create_batches(specs, limit)
    assert [s for b in batches for s in b] == specs
    for b in batches:
        assert b and (sum(s.partitions for s in b) <= limit or len(b) == 1)
    for b, after in zip(batches, batches[1:]):  # a batch ends only when the next topic would not fit
        assert sum(s.partitions for s in b) + after[0].partitions > limit


def test_the_projects_topics_at_the_largest_partition_count_fit_the_brokers_limit_only_in_several_requests():
    """At ``topics.partitions`` = 1024, the most the configuration allows, one request for every
    topic was refused: "Excessively large number of partitions per request" (10,000 on Kafka 3.9)."""
    s = Settings()
    s.topics.partitions = 1024
    specs = load_specs(s)
    assert sum(x.partitions for x in specs) > MAX_PARTITIONS_PER_CREATE
    batches = create_batches(specs)
    assert len(batches) >= 2
    assert all(sum(x.partitions for x in b) <= MAX_PARTITIONS_PER_CREATE for b in batches)
    s.topics.partitions = 6
    assert create_batches(load_specs(s)) == [load_specs(s)]  # the default: one request, as before
