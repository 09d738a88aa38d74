"""A per-process memo for pure functions of a token, bounded by two generations.

Why: the hot paths (word filtering, feature hashing) see the same Zipf-shaped vocabulary over and
over, so a dict lookup beats recomputing. But a live stream never stops bringing new tokens
(phone numbers, names, URLs), and a cache that grows until some large bound makes a worker's RSS
creep for hours. Two generations keep memory flat and the hot words hot: lookups hit the young
dict; a miss there looks in the old one (or computes) and inserts into the young one; when the
young dict is full it becomes the old one and the previous old one is dropped. So at most
``2 * size`` entries live, and a word used within the last ``size`` insertions is never
recomputed twice in a row.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, Hashable, Iterable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class GenerationalCache(Generic[K, V]):
    """Memo of ``compute`` (a pure function); values must not be None."""

    def __init__(self, compute: Callable[[K], V], size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.compute = compute
        self.size = size
        self.young: dict[K, V] = {}
        self.old: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self.young) + len(self.old)

    def get(self, key: K) -> V:
        v = self.young.get(key)
        return v if v is not None else self.miss(key)

    def miss(self, key: K) -> V:
        """Value of a key not in the young generation (the caller's fast path already looked)."""
        v = self.old.get(key)
        if v is None:
            v = self.compute(key)
        if len(self.young) >= self.size:
            self.old, self.young = self.young, {}
        self.young[key] = v
        return v

    def get_many(self, keys: Iterable[K]) -> list[V]:
        """``get`` of each key: one ``map`` over the young generation's ``dict.get``, and the keys
        it lacks looked up in the old one, computed and inserted all at once.

        Why at once: a news article brings dozens of words the young generation lacks (a stream's
        long tail), and a ``miss`` call for each was a visible share of its preparing. Where
        the inserts would overfill the young generation, each key goes through ``miss``, which
        rotates the generations as it fills, so the bound holds."""
        keys = keys if isinstance(keys, list) else list(keys)
        young = self.young
        vals: list[Any] = list(map(young.get, keys))
        if None not in vals:
            return vals
        lacking = [k for v, k in zip(vals, keys) if v is None]
        if len(young) + len(lacking) > self.size:
            miss = self.miss
            return [v if v is not None else miss(k) for v, k in zip(vals, keys)]
        found: list[Any] = list(map(self.old.get, lacking))
        if None in found:
            compute = self.compute
            found = [f if f is not None else compute(k) for f, k in zip(found, lacking)]
        young.update(zip(lacking, found))
        fill = iter(found).__next__
        return [v if v is not None else fill() for v in vals]

    def resize(self, size: int) -> None:
        """A new bound per generation; a smaller one takes effect at the next insertion."""
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        if len(self.young) > size:
            self.old, self.young = {}, {}

    def clear(self) -> None:
        self.young, self.old = {}, {}
