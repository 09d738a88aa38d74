"""The exact stage's Bloom filters, one per partition this worker owns, built from its table.

A filter answers "certainly new" for a digest it lacks, so it must hold every digest of its table:
one is built at a partition's first event in the current assignment, and dropped when the
partition leaves or the assignment it was built in is over.
"""
from __future__ import annotations

import logging
from typing import Any, MutableMapping

from ..core.exact import ExactStore
from .changelog import TableMapping

log = logging.getLogger("stream_dedup.worker")


class ExactFilters:
    """Per-partition ``ExactStore``s over one write-back table, rebuilt as partitions move."""

    def __init__(self, app: Any, data: MutableMapping, table: TableMapping, *, window: int, capacity: int,
                 fp_rate: float, partitions: int):
        self.app = app
        self.data = data
        self.table = table
        self.window = window
        # digests spread evenly over the partitions: each filter is sized for its share
        self.capacity = -(-capacity // partitions)
        self.fp_rate = fp_rate
        self.stores: dict[int, ExactStore] = {}
        # the rebalance each partition's filter was built in; None: built while one was under way
        self.built: dict[int, int | None] = {}

    def store(self, partition: int) -> ExactStore:
        """The partition's store, its filter warmed from the table at its first event here."""
        st = self.stores.get(partition)
        if st is None:
            st = self.stores[partition] = ExactStore(self.data, self.window, bloom_capacity=self.capacity,
                                                     bloom_fp_rate=self.fp_rate)
            self.built[partition] = None if self.app.rebalancing else self.app.rebalancing_count
            rebuilt = st.rebuild_bloom(self.table.partition_items(partition))
            log.info("exact partition %d: Bloom filter rebuilt from %d stored digests", partition, rebuilt)
        return st

    def drop_stale(self) -> None:
        """Drop the filters not built in the current assignment, once its restore is done: one built
        in another assignment misses what the partition's owner wrote meanwhile; one built during a
        rebalance may have read a table Faust was still restoring."""
        for part in [p for p, built in self.built.items() if built != self.app.rebalancing_count]:
            self.built.pop(part, None)
            self.stores.pop(part, None)

    def forget(self, partition: int) -> None:
        """A partition left this worker: its filter goes (its new owner adds digests meanwhile)."""
        if self.stores.pop(partition, None) is not None:
            self.built.pop(partition, None)
            log.info("exact partition %d revoked: its Bloom filter is dropped", partition)
