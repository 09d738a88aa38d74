"""I-Match with randomized lexicons (Chowdhury et al. 2002; Kolcz, Chowdhury and Alspector 2004).

I-Match hashes the set of a document's words that belong to a lexicon of mid-IDF words: very
common words carry no identity and very rare ones (typos, numbers, names unique to one copy) are
the first to differ between copies, so both ends are dropped. Two documents with the same filtered
word set get the same signature, whatever the order, punctuation or repeated words.

One signature is brittle: a single lexicon word added or removed by an edit changes it. Kolcz et
al. add L extra lexicons, each the main lexicon minus a small random share of its words; an edit
that touches a dropped word leaves that lexicon's signature intact, and a match on *any* lexicon
is a duplicate. The random drops here are a hash of (word, lexicon number), so every worker and
every run draws the same lexicons without shipping them.

Guard: documents with fewer than ``min_words`` distinct lexicon words get no signature for that
lexicon (the literature's warning: short documents collide on tiny sets).
Keys: one per lexicon, the signature itself. Payload: all L + 1 signatures; ``verify`` requires the
same signature under the same lexicon (a key collision across lexicons is not a match).
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import mmh3
import numpy as np

from ..hashing import hash64_list
from .base import Detector, Match, Sketch, doc_words

if TYPE_CHECKING:
    from ..document import Doc
    from ..idf import IdfTable
    from ..tokenize import WordTokenizer


class ImatchDetector(Detector):
    name = "imatch"
    code = 4

    def __init__(self, tokenizer: "WordTokenizer", idf: "IdfTable", *, lexicons: int = 5, drop: float = 0.1,
                 min_words: int = 10, low: float = 0.2, high: float = 0.95, min_chars: int = 0):
        self.tokenizer = tokenizer
        values = idf.values
        lo, hi = (np.quantile(values, [low, high]) if len(values) else (0.0, 0.0))
        # the lexicon as word hashes (the table holds hashes, see ``idf``), tested with the cached hash64
        self.lexicon = frozenset(idf.hashes[(values >= lo) & (values <= hi)].tolist())
        self.lexicons = lexicons
        self.drop_cut = int(drop * 2**32)
        self.min_words = min_words
        self.min_chars = min_chars

    def applies(self, doc: "Doc") -> bool:
        return len(doc.text) >= self.min_chars

    def filtered(self, doc: "Doc") -> list[str]:
        lex = self.lexicon
        words = list(set(doc_words(doc, self.tokenizer)))
        return sorted(w for w, h in zip(words, hash64_list(words)) if h in lex)

    def signatures(self, doc: "Doc") -> list[int]:
        """Signature per lexicon (0 = too few words); index 0 is the main lexicon."""
        words = self.filtered(doc)
        out = []
        for i in range(self.lexicons + 1):
            kept = words if i == 0 else [w for w in words if mmh3.hash(w, seed=i, signed=False) >= self.drop_cut]
            out.append(mmh3.hash64("\x1f".join(kept), seed=i, signed=False)[0] | 1 if len(kept) >= self.min_words
                       else 0)
        return out

    def sketch(self, doc: "Doc") -> Sketch | None:
        sigs = self.signatures(doc)
        if not any(sigs):
            return None
        return Sketch(tuple(s >> 1 for s in sigs if s), struct.pack(f"<{len(sigs)}Q", *sigs))

    def verify(self, a: bytes, b: bytes) -> Match | None:
        sa = struct.unpack(f"<{len(a) // 8}Q", a)
        sb = struct.unpack(f"<{len(b) // 8}Q", b)
        same = sum(1 for x, y in zip(sa, sb) if x and x == y)
        if not same:
            return None
        return Match(same / max(1, sum(1 for x, y in zip(sa, sb) if x or y)))
