"""IDF tables: how informative a word is, for SimHash weights and I-Match lexicons.

Two sources give the same kind of table:
* ``build_idf`` counts document frequencies in a corpus (``stream-dedup idf build``):
  ``idf(w) = ln((N + 1) / (df(w) + 1)) + 1``; unseen words get the value of a word seen once.
* the shipped default is built from jieba's dictionary frequencies (MIT licensed, so the
  derived table may be redistributed): ``idf(w) = ln(total / freq(w))``, the word's
  self-information, which ranks words the way document frequency does on general text.
  Unknown words (names, numbers, new terms) get the 80th percentile: rare but not maximal.

Loaded form: the words' 64-bit mmh3 hashes (the same ``hashing.hash64`` the fingerprints use), sorted,
with their values; a lookup is a binary search of the hashes (``np.searchsorted``) for a whole
document at once. Why not a ``dict[str, float]``: building the 300k-entry dict was most of a
worker's and ``scan``'s start-up after the segmenter's, and a dict lookup per word (a cache miss
into a 300k-entry table) was a good part of a news article's SimHash. Two distinct words share a
64-bit hash with probability about 2e-9 for the whole table; ``from_words`` keeps the first.

File format (``idf.bin``), version 2: a NumPy ``.npz`` archive (zip) with ``header`` (UTF-8 JSON),
``hashes`` (uint64, sorted), ``centi`` (int32: the values in hundredths, as version 1 rounded them)
and ``words`` (the UTF-8 words, newline-separated, in hash order: to inspect or diff a table, never
read on load). ``hashes`` and ``centi`` are stored, the others deflated (tables saved before
2026-11-26 deflate all four; both load). Version 1 (gzip of a JSON header line, then
``word<TAB>idf`` lines) still loads.
"""
from __future__ import annotations

import gzip
import io
import json
import math
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

import numpy as np

from .hashing import hash64_list, hash64_uncached as _hash

if TYPE_CHECKING:
    from ..config import TextSettings

FORMAT = "stream-dedup-idf"
_GZIP_MAGIC = b"\x1f\x8b"


_STORED = ("hashes", "centi")  # the members a lookup reads, stored uncompressed (``IdfTable.save``)


def _npy(array: np.ndarray) -> bytes:
    """One array in NumPy's ``.npy`` format, as ``np.savez`` writes each member."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array), allow_pickle=False)
    return buf.getvalue()


@dataclass
class IdfTable:
    hashes: np.ndarray  # uint64, sorted, distinct: the words' hash64
    values: np.ndarray  # float64, the idf of hashes[i]
    default: float  # the value of a word not in the table
    docs: int = 0
    source: str = ""
    meta: dict = field(default_factory=dict)
    words: list[str] | None = None  # in hash order, when known (built here, or read on request)

    @classmethod
    def from_words(cls, idf: Mapping[str, float], default: float, docs: int = 0, source: str = "",
                   meta: dict | None = None) -> "IdfTable":
        words = list(idf)
        hashes = np.fromiter(map(_hash, words), dtype=np.uint64, count=len(words))
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        keep = np.ones(len(hashes), dtype=bool)
        keep[1:] = hashes[1:] != hashes[:-1]  # a 64-bit collision: the first word keeps the slot
        order = order[keep]
        values = np.fromiter((idf[w] for w in words), dtype=np.float64, count=len(words))[order]
        return cls(hashes[keep], values, float(default), docs, source, dict(meta or {}),
                   [words[i] for i in order.tolist()])

    def __len__(self) -> int:
        return len(self.hashes)

    def get(self, word: str) -> float:
        return float(self.weights([word])[0])

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """The value of each word hash (uint64 array), ``default`` where the table has none."""
        if not len(self.hashes):
            return np.full(len(hashes), self.default)
        # the needles in sorted order: each search then starts near the last one's answer, in
        # cache, instead of 19 cache misses down the table (cheaper for an article's hundreds of words,
        # with the sort and the scatter back)
        order = np.argsort(hashes)
        at = np.empty(len(hashes), dtype=np.intp)
        at[order] = np.searchsorted(self.hashes, hashes[order])
        np.minimum(at, len(self.hashes) - 1, out=at)
        return np.where(self.hashes[at] == hashes, self.values[at], self.default)

    def weights(self, words: list[str]) -> np.ndarray:
        """``get`` of each word as float64, in one binary search for the whole list."""
        return self.lookup(np.array(hash64_list(words), dtype=np.uint64))

    def as_dict(self) -> dict[str, float]:
        """word -> idf (needs the words: a table built here, or a file's ``words`` member)."""
        if self.words is None:
            raise ValueError("this table was loaded without its words")
        return dict(zip(self.words, self.values.tolist()))

    def save(self, path: str | Path) -> None:
        if self.words is None:
            raise ValueError("this table was loaded without its words; load it with words=True to save it")
        header = {"format": FORMAT, "version": 2, "docs": self.docs, "default": round(self.default, 3),
                  "source": self.source, **self.meta}
        members = {"header": np.frombuffer(json.dumps(header, ensure_ascii=False).encode(), dtype=np.uint8),
                   "hashes": self.hashes, "centi": np.rint(self.values * 100).astype(np.int32),
                   "words": np.frombuffer("\n".join(self.words).encode("utf-8", "surrogatepass"), dtype=np.uint8)}
        with zipfile.ZipFile(path, "w") as z:
            for name, array in members.items():
                # what a lookup reads is stored as it is: inflating it was most of a load, on
                # the start-up of every scan and worker (the words, never read on load, are deflated)
                method = zipfile.ZIP_STORED if name in _STORED else zipfile.ZIP_DEFLATED
                z.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), _npy(array), method)

    @classmethod
    def load(cls, path: str | Path, *, words: bool = False) -> "IdfTable":
        """``words``: read the words too (to save, or ``as_dict``); lookups never need them."""
        with open(path, "rb") as f:
            magic = f.read(2)
        if magic == _GZIP_MAGIC:
            return cls._load_v1(path)
        try:
            npz = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: not an IDF table ({e})") from None
        with npz:
            if "header" not in npz.files:
                raise ValueError(f"{path}: not an IDF table (no header)")
            header = json.loads(npz["header"].tobytes())
            if header.get("format") != FORMAT:
                raise ValueError(f"{path}: not an IDF table (format {header.get('format')!r})")
            hashes = npz["hashes"]
            # hundredths / 100 is the double nearest the decimal, as float() of version 1's text gave
            values = npz["centi"].astype(np.float64) / 100.0
            ws = npz["words"].tobytes().decode("utf-8", "surrogatepass").split("\n") if words else None
        if ws == [""]:
            ws = []
        return cls(hashes, values, float(header["default"]), int(header.get("docs", 0)), header.get("source", ""),
                   words=ws)

    @classmethod
    def _load_v1(cls, path: str | Path) -> "IdfTable":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            header = json.loads(f.readline())
            if header.get("format") != FORMAT:
                raise ValueError(f"{path}: not an IDF table (format {header.get('format')!r})")
            fields = f.read().replace("\n", "\t").split("\t")
        if len(fields) % 2:
            fields.pop()  # the empty string after the last newline
        idf = dict(zip(fields[0::2], map(float, fields[1::2])))
        return cls.from_words(idf, float(header["default"]), int(header.get("docs", 0)), header.get("source", ""))


def build_idf(docs: Iterable[list[str]]) -> IdfTable:
    df: Counter[str] = Counter()
    n = 0
    for words in docs:
        n += 1
        df.update(set(words))
    idf = {w: math.log((n + 1) / (c + 1)) + 1 for w, c in df.items()}
    return IdfTable.from_words(idf, math.log((n + 1) / 2) + 1, n, "corpus")


def build_idf_from_jsonl(path: str, *, field: str = "text", limit: int | None = None,
                         settings: "TextSettings | None" = None, progress: bool = False) -> IdfTable:
    from tqdm import tqdm

    from .text import normalize
    from .tokenize import WordTokenizer

    tok = WordTokenizer.from_settings(settings)
    t2s = settings.traditional_to_simplified if settings else True

    def gen():
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(tqdm(f, desc="idf", unit="doc", disable=not progress)):
                if limit is not None and i >= limit:
                    break
                try:
                    text = json.loads(line).get(field)
                except (ValueError, AttributeError):
                    continue
                if isinstance(text, str):
                    yield tok.words(normalize(text, t2s=t2s))

    table = build_idf(gen())
    table.source = f"corpus:{Path(path).name}"
    return table


def build_idf_from_jieba(min_freq: int = 3) -> IdfTable:
    """The default table, from jieba's dict.txt frequencies (see the module docstring)."""
    import jieba

    from .text import to_simplified

    freqs: Counter[str] = Counter()
    dict_path = Path(jieba.__file__).parent / "dict.txt"
    with open(dict_path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                freqs[to_simplified(parts[0]).casefold()] += int(parts[1])
    total = sum(freqs.values())
    idf = {w: round(math.log(total / c), 2) for w, c in freqs.items() if c >= min_freq}
    values = sorted(idf.values())
    default = values[int(0.8 * (len(values) - 1))]
    return IdfTable.from_words(idf, default, 0, f"jieba-dict:min_freq={min_freq}")


DEFAULT_TABLE = "idf_jieba.bin"


@lru_cache(maxsize=4)
def load_idf(path: str | None = None) -> IdfTable:
    """The configured table, or the shipped default."""
    if path:
        return IdfTable.load(path)
    with resources.as_file(resources.files("stream_dedup").joinpath(f"data/{DEFAULT_TABLE}")) as p:
        return IdfTable.load(p)


if __name__ == "__main__":  # regenerate the shipped default: python -m stream_dedup.core.idf
    out = Path(__file__).resolve().parent.parent / "data" / DEFAULT_TABLE
    t = build_idf_from_jieba()
    t.save(out)
    print(f"wrote {out}: {len(t)} words, default {t.default}")
