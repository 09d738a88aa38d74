"""``coordinated``: which broker answers a one-shot command waits out, and which it raises at once."""
import pytest
from confluent_kafka import KafkaError, KafkaException

from stream_dedup.stream.kafka_io import coordinated, coordinator_busy


def flaky(errors: list[int], result: str = "offsets"):
    """A call that fails with each of ``errors`` in turn, then returns ``result``."""
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise KafkaException(KafkaError(errors[len(calls) - 1]))
        return result

    return call, calls


def test_a_loading_coordinator_is_asked_again_with_growing_pauses_until_it_answers():
    call, calls = flaky([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                         KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR])
    pauses: list[float] = []
    assert coordinated(call, "committed offsets", sleep=pauses.append) == "offsets"
    assert len(calls) == 5
    assert pauses == pytest.approx([0.2, 0.4, 0.8, 1.6])


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._TRANSPORT,
                                  KafkaError.UNKNOWN_TOPIC_OR_PART])
def test_any_other_broker_error_is_raised_at_once(code):
    call, calls = flaky([code])
    pauses: list[float] = []
    with pytest.raises(KafkaException) as e:
        coordinated(call, "committed offsets", sleep=pauses.append)
    assert e.value.args[0].code() == code and len(calls) == 1 and pauses == []
    assert not coordinator_busy(e.value) and not coordinator_busy(RuntimeError("NOT_COORDINATOR"))


def test_a_coordinator_busy_for_longer_than_the_wait_is_reported_with_its_last_answer():
    call, calls = flaky([KafkaError.NOT_COORDINATOR] * 100)
    with pytest.raises(KafkaException) as e:
        coordinated(call, "commit", wait_s=1.0, sleep=lambda s: None)  # no real pause: the clock barely moves
    assert e.value.args[0].name() == "NOT_COORDINATOR"
    assert len(calls) == 4  # pauses 0.2, 0.4 and 0.8 fit in 1 s; the next, 1.6, does not


def test_an_offset_lookup_waits_out_a_partition_leader_not_known_yet_but_not_a_busy_coordinator():
    """``watermarks`` passes ``LEADER_NOT_READY``: just after a topic is created its partitions
    answer NOT_LEADER_FOR_PARTITION for a moment (seen by ``status`` in ``make demo``)."""
    from stream_dedup.stream.kafka_io import LEADER_NOT_READY

    call, calls = flaky([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                         KafkaError.UNKNOWN_TOPIC_OR_PART])
    pauses: list[float] = []
    assert coordinated(call, "offsets", sleep=pauses.append, busy=LEADER_NOT_READY) == "offsets"
    assert len(calls) == 4 and len(pauses) == 3
    call, calls = flaky([KafkaError.NOT_COORDINATOR])
    with pytest.raises(KafkaException):
        coordinated(call, "offsets", sleep=pauses.append, busy=LEADER_NOT_READY)
    assert len(calls) == 1
