"""The status page's numbers from worker reports and cluster records (pure functions)."""
from stream_dedup.stream.status import largest_clusters, throughput_history


def report(worker, at, n_in, verdicts, dups):
    return {"worker": worker, "at": at, "counts": {"in": n_in, "verdicts": verdicts,
                                                   "verdict.duplicate.near": dups, "verdict.unique": verdicts - dups}}


def test_rates_are_summed_over_workers_per_step_and_restarts_are_skipped():
    reps = [report("a", 0, 0, 0, 0), report("b", 1, 0, 0, 0),
            report("a", 10, 100, 100, 20), report("b", 11, 50, 50, 30),
            report("a", 20, 200, 200, 40), report("b", 21, 5, 5, 0)]  # b restarted: counts went down
    h = throughput_history(reps)
    assert [p["t"] for p in h] == [10.0, 20.0]
    assert h[0]["in_per_s"] == 15.0 and h[0]["verdicts_per_s"] == 15.0
    assert h[0]["duplicate_rate"] == round(50 / 150, 4)
    assert h[1]["in_per_s"] == 10.0 and h[1]["duplicate_rate"] == 0.2


def test_largest_clusters_take_the_latest_record_per_original():
    recs = [{"id": "a", "size": 2}, {"id": "b", "size": 5}, {"id": "a", "size": 9}, {"id": "c", "size": 3},
            {"id": "c", "size": 1}]
    assert [(c["id"], c["size"]) for c in largest_clusters(recs, n=5)] == [("a", 9), ("b", 5)]


def test_workers_are_marked_stale_or_left_and_dropped_once_gone():
    """A killed worker leaves the group: listed as "left" while its report is recent, then dropped;
    a member whose reports stopped is "stale"; without the group's description nothing is dropped."""
    import time

    from stream_dedup.stream.status import current_workers

    now = time.time()
    reps = [{"worker": "a", "at": now - 5}, {"worker": "b", "at": now - 45}, {"worker": "killed", "at": now - 8},
            {"worker": "gone", "at": now - 20}]
    got = {w["worker"]: w["state"] for w in current_workers(reps, {"a", "b"})}
    assert got == {"a": "ok", "b": "stale", "killed": "left"}
    assert len(current_workers(reps, None)) == 4
