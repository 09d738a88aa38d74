"""The garbage-collector policy of the long loops (stream_dedup.gc_tuning)."""
import gc
import weakref

from stream_dedup.gc_tuning import fewer_collections, settle


class Node:
    """An object that can be weakly referenced and hold itself: a reference cycle."""

    me: "Node"


def test_settle_freezes_what_exists_and_raises_the_young_threshold():
    old = gc.get_threshold()
    try:
        before = gc.get_freeze_count()
        kept = [[i] for i in range(1000)]  # tracked containers that exist before settling
        frozen = settle(12_345)
        assert frozen == gc.get_freeze_count() >= before + len(kept)
        assert gc.get_threshold() == (12_345, 20, 100)
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def test_settle_collects_start_up_garbage_before_freezing_when_asked():
    old = gc.get_threshold()
    try:
        gc.disable()  # no pass of its own between making the garbage and settling
        cycle = Node()
        cycle.me = cycle
        ref = weakref.ref(cycle)
        del cycle
        settle(collect=True)
        assert ref() is None  # collected, not frozen
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*old)


def test_fewer_collections_undoes_itself_and_still_frees_new_cycles():
    old = gc.get_threshold()
    with fewer_collections(5_000):
        assert gc.get_threshold()[0] == 5_000 and gc.get_freeze_count() > 0
        cycle = Node()
        cycle.me = cycle
        ref = weakref.ref(cycle)
        del cycle
        gc.collect()  # a cycle made after the freeze is still collected
        assert ref() is None
    assert gc.get_threshold() == old and gc.get_freeze_count() == 0
