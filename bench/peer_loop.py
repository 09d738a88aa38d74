"""A fast peer's dedup loop as a user would write it, run as its own process by ``bench/peers.py``.

    python bench/peer_loop.py {rensa,gaoya} THRESHOLD IN.jsonl OUT.jsonl

Each document, in (ts, id) order: normalized (NFKC, lower-case, punctuation and spaces removed),
cut into character 3-grams, a 128-permutation MinHash; the index is queried (candidates whose
estimated Jaccard is at least THRESHOLD) and the document inserted. A hit makes it a duplicate of
its earliest hit. Only the peer library and the standard library are imported: the process's
start-up is the peer's own.
"""
from __future__ import annotations

import json
import re
import sys
import unicodedata

NUM_PERM = 128
_DROP = re.compile(r"[\W_]+")


def normalized(text: str) -> str:
    return _DROP.sub("", unicodedata.normalize("NFKC", text).lower()) or text


def bands(threshold: float, num_perm: int = NUM_PERM) -> int:
    """The band count whose LSH S-curve is steepest at ``threshold`` among divisors of num_perm."""
    divisors = [b for b in range(1, num_perm + 1) if num_perm % b == 0]
    return min(divisors, key=lambda b: abs((1 / b) ** (b / num_perm) - threshold))


def rensa_index(threshold: float):
    from rensa import RMinHash, RMinHashLSH

    lsh = RMinHashLSH(threshold=threshold, num_perm=NUM_PERM, num_bands=bands(threshold))
    sigs: list = []

    def query_insert(key: int, text: str) -> list[int]:
        m = RMinHash(num_perm=NUM_PERM, seed=42)
        m.update([text[i:i + 3] for i in range(max(1, len(text) - 2))])
        hits = [k for k in lsh.query(m) if sigs[k].jaccard(m) >= threshold]
        sigs.append(m)
        lsh.insert(key, m)
        return hits

    return query_insert


def gaoya_index(threshold: float):
    from gaoya.minhash import MinHashStringIndex

    b = bands(threshold)
    idx = MinHashStringIndex(hash_size=32, jaccard_threshold=threshold, num_bands=b, band_size=NUM_PERM // b,
                             analyzer="char", lowercase=False, ngram_range=(3, 3))

    def query_insert(key: int, text: str) -> list[int]:
        hits = idx.query(text)
        idx.insert_document(key, text)
        return hits

    return query_insert


def run(peer: str, threshold: float, docs: list[dict]) -> list[dict]:
    """Verdicts of ``peer``'s loop over ``docs`` (dicts with id, text, ts), in (ts, id) order."""
    index = {"rensa": rensa_index, "gaoya": gaoya_index}[peer](threshold)
    docs = sorted(docs, key=lambda d: (d["ts"], d["id"]))
    ids = [d["id"] for d in docs]  # a key is a document's position: earliest = smallest
    out = []
    for key, d in enumerate(docs):
        hits = index(key, normalized(d["text"]))
        out.append({"id": d["id"], "verdict": "duplicate" if hits else "unique",
                    "duplicate_of": ids[min(hits)] if hits else None, "ts": d["ts"], "match": "near" if hits else None})
    return out


def main() -> None:
    peer, threshold, src, dst = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(src, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    with open(dst, "w", encoding="utf-8") as out:
        for v in run(peer, threshold, docs):
            out.write(json.dumps(v, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
