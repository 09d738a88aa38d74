"""``under(event)``: a table write goes to the partition of the message the agent is working on."""
from faust.events import Event
from faust.streams import current_event
from faust.types.tuples import Message

from stream_dedup.stream.context import Under as _Under


def _event(topic: str, partition: int, offset: int) -> Event:
    msg = Message(topic, partition, offset, timestamp=0.0, timestamp_type=0, headers=[], key=b"k", value=b"v",
                  checksum=None)
    return Event(None, b"k", b"v", [], msg)


def test_under_sets_the_current_event_and_restores_the_previous_one():
    worked: set = set()
    a, b = _event("t.probes", 3, 10), _event("t.answers", 1, 7)
    before = current_event()
    with _Under(a, worked):
        assert current_event() is a
        with _Under(b, worked):
            assert current_event() is b
        assert current_event() is a  # nested: the outer event again
    assert current_event() is before
    assert worked == {("t.probes", 3), ("t.answers", 1)}


def test_under_restores_the_event_when_the_body_raises():
    a = _event("t.probes", 0, 1)
    before = current_event()
    try:
        with _Under(a, set()):
            raise KeyError("boom")
    except KeyError:
        pass
    assert current_event() is before
