"""Detector registry: configuration names -> detector instances."""
from __future__ import annotations

from typing import TYPE_CHECKING, AbstractSet

from .base import Detector, Match, Sketch
from .imatch import ImatchDetector
from .minhash import MinhashDetector
from .ngram import NgramDetector
from .simhash import SimhashDetector
from .structure import StructureDetector

if TYPE_CHECKING:
    from ...config import Settings
    from ..idf import IdfTable
    from ..tokenize import WordTokenizer

__all__ = ["Detector", "Match", "Sketch", "build_detectors", "NAMES"]
NAMES = ("simhash", "minhash", "ngram", "imatch", "structure")
AUTO = ("simhash", "minhash", "ngram", "structure")


def build_detectors(settings: "Settings", tokenizer: "WordTokenizer", idf: "IdfTable",
                    common_grams: AbstractSet[int] = frozenset()) -> list[Detector]:
    """The configured detectors, in priority order (ties between equally early matches go to the first).

    ``auto``: ngram for short texts, simhash and minhash for long ones, with an overlap band around
    ``text.short_chars`` where both run, so that a pair straddling the boundary still shares one;
    HTML pages add the structure detector. I-Match is opt-in: on the development benchmark it finds
    no duplicate that MinHash misses (``bench/quality.py``), so by default it would only add keys.
    ``common_grams``: the ngram detector's grams common on the stream (a template table's).
    """
    short = settings.text.short_chars
    names = list(AUTO) if settings.engine.detectors == "auto" else list(settings.engine.detectors)
    auto = settings.engine.detectors == "auto"
    out: list[Detector] = []
    for name in names:
        if name == "simhash":
            out.append(SimhashDetector(tokenizer, idf, k=settings.simhash.k,
                                       bands="5c2" if settings.simhash.bands == "auto" else settings.simhash.bands,
                                       min_features=settings.simhash.min_features,
                                       min_chars=short // 2 if auto else 0))
        elif name == "minhash":
            m = settings.minhash
            out.append(MinhashDetector(num_perm=m.num_perm, bands=m.bands, shingle=m.shingle, threshold=m.threshold,
                                       containment=m.containment, contained_ratio=m.contained_ratio,
                                       min_chars=short // 2 if auto else 0))
        elif name == "ngram":
            out.append(NgramDetector(tokenizer, common=common_grams, m=settings.ngram.m, w=settings.ngram.w,
                                     threshold=settings.ngram.threshold,
                                     edit_threshold=settings.ngram.edit_threshold,
                                     containment=settings.ngram.containment,
                                     min_contained=settings.ngram.min_contained,
                                     contained_ratio=settings.ngram.contained_ratio,
                                     max_chars=short + short // 2 if auto else None))
        elif name == "imatch":
            i = settings.imatch
            out.append(ImatchDetector(tokenizer, idf, lexicons=i.lexicons, drop=i.drop, min_words=i.min_words,
                                      low=i.low, high=i.high, min_chars=short // 2 if auto else 0))
        elif name == "structure":
            st = settings.structure
            out.append(StructureDetector(beta=st.beta, beta2=st.beta2, keys=st.keys, min_features=st.min_features))
        else:
            raise ValueError(f"unknown detector {name!r}; known: {', '.join(NAMES)}")
    return out
