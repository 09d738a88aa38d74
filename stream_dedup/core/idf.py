"""IDF tables: how informative a word is, for SimHash weights and I-Match lexicons.

Two sources give the same kind of table:
* ``build_idf`` counts document frequencies in a corpus (``stream-dedup idf build``):
  ``idf(w) = ln((N + 1) / (df(w) + 1)) + 1``; unseen words get the value of a word seen once.
* the shipped default is built from jieba's dictionary frequencies (MIT licensed, so the
  derived table may be redistributed): ``idf(w) = ln(total / freq(w))``, the word's
  self-information, which ranks words the way document frequency does on general text.
  Unknown words (names, numbers, new terms) get the 80th percentile: rare but not maximal.

File format (``idf.bin``): gzip of a JSON header line then ``word<TAB>idf`` lines, sorted, so
tables diff and load without a custom decoder.
"""
from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

if TYPE_CHECKING:
    from ..config import TextSettings

FORMAT = "stream-dedup-idf"


@dataclass
class IdfTable:
    idf: dict[str, float]
    default: float
    docs: int = 0
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.idf)

    def get(self, word: str) -> float:
        return self.idf.get(word, self.default)

    def weights(self, words: list[str]) -> np.ndarray:
        """``get`` of each word as float64: one C-level ``map`` over the dict, no Python call a word
        (a news article has a few hundred distinct words, and this ran once a word)."""
        return np.fromiter(map(self.idf.get, words, repeat(self.default)), dtype=np.float64, count=len(words))

    def save(self, path: str | Path) -> None:
        header = {"format": FORMAT, "version": 1, "docs": self.docs, "default": round(self.default, 3),
                  "source": self.source, **self.meta}
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
            for w in sorted(self.idf):
                f.write(f"{w}\t{self.idf[w]:.2f}\n")

    @classmethod
    def load(cls, path: str | Path) -> "IdfTable":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            header = json.loads(f.readline())
            if header.get("format") != FORMAT:
                raise ValueError(f"{path}: not an IDF table (format {header.get('format')!r})")
            # one split of the whole body, not a Python loop per line: the default table has 300k
            # words, and its load is most of a worker's or `scan`'s start-up after jieba's
            fields = f.read().replace("\n", "\t").split("\t")
        if len(fields) % 2:
            fields.pop()  # the empty string after the last newline
        idf = dict(zip(fields[0::2], map(float, fields[1::2])))
        return cls(idf, float(header["default"]), int(header.get("docs", 0)), header.get("source", ""))


def build_idf(docs: Iterable[list[str]]) -> IdfTable:
    df: Counter[str] = Counter()
    n = 0
    for words in docs:
        n += 1
        df.update(set(words))
    idf = {w: math.log((n + 1) / (c + 1)) + 1 for w, c in df.items()}
    return IdfTable(idf, math.log((n + 1) / 2) + 1, n, "corpus")


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
    return IdfTable(idf, default, 0, f"jieba-dict:min_freq={min_freq}")


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
