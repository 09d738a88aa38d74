"""The detector interface: ``keys(doc)`` picks buckets, ``verify(a, b)`` confirms a pair.

A detector turns a document into a ``Sketch``: a few integer bucket keys and a payload (the
bytes ``verify`` compares, e.g. the 8-byte SimHash). Two documents are candidates when they share
a key *of the same detector*; they are near-duplicates when ``verify`` of their payloads returns
a ``Match``. Detectors never see state, partitions or Kafka: the index stores payloads under
keys, and the stages move them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..document import Doc
    from ..tokenize import WordTokenizer


@dataclass(frozen=True)
class Match:
    similarity: float
    distance: int | None = None


@dataclass(frozen=True)
class Sketch:
    keys: tuple[int, ...]
    payload: bytes


class Detector(ABC):
    name: str = ""
    code: int = 0  # stable byte in on-disk keys: never reuse a code for another detector

    @abstractmethod
    def applies(self, doc: "Doc") -> bool:
        """Whether this detector judges the document (by length and kind)."""

    @abstractmethod
    def sketch(self, doc: "Doc") -> Sketch | None:
        """Keys and payload; None when the document has too little to fingerprint."""

    @abstractmethod
    def verify(self, a: bytes, b: bytes) -> Match | None:
        """Compare two payloads; a Match when they are near-duplicates."""

    def keys(self, doc: "Doc") -> tuple[int, ...]:
        s = self.sketch(doc)
        return s.keys if s else ()

    def prefetch(self, docs: "list[Doc]") -> None:
        """Work for a whole batch of documents it applies to, ahead of ``sketch`` on each (optional).

        Only a speed-up: ``sketch`` must give the same answer with or without it."""


def doc_words(doc: "Doc", tokenizer: "WordTokenizer") -> list[str]:
    """jieba words of the normalized text, computed once per document and shared by detectors."""
    words = doc.cache.get("words")
    if words is None:
        words = doc.cache["words"] = tokenizer.words(doc.text)
    return words
