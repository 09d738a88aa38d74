"""Fingerprint math vs peers on the same feature lists, per document, news and SMS.

    python bench/fingerprint.py [--docs 300] [--sms-docs 3000] [--repeat 5]

* SimHash: this project's numpy SimHash vs the `simhash` library's Simhash, both given the same
  (word, TF-IDF weight) list of each document; ours per document (`simhash`, as `scan` calls it)
  and per stream batch of 256 documents (`simhash_many`, as the workers' prepare agent calls it).
* MinHash: this project's numpy MinHash (its production path: vectorized shingle hashing) vs
  `datasketch` MinHash(num_perm=128) updated with the same 5-char shingles (batch and one by one).
* n-gram sketch (short-text detector: skeleton, winnowed 4-gram keys, word hashes): this project
  only, per document (a text alone, as the Python API calls it) and per batch of 256 (``prefetch``
  keys the batch in one pass, as the prepare agent and ``scan`` do); each run starts from an empty
  document cache, so the skeleton is timed too.
Features are computed once, outside the timed region; the table gives the median over --repeat runs
of the per-document time and the ratio peer / ours (higher = ours faster). A run of every function
is one round, and every other round runs them in reverse, so that ours and the peer's share the
machine's minutes.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import devset, median_runs, need_shared, read_jsonl, save, table  # noqa: E402

from stream_dedup.config import load_settings  # noqa: E402
from stream_dedup.core.detectors.minhash import MinhashDetector  # noqa: E402
from stream_dedup.core.detectors.ngram import NgramDetector  # noqa: E402
from stream_dedup.core.simhash_fingerprint import simhash, simhash_many  # noqa: E402
from stream_dedup.core.stages import Preparer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=300, help="news articles")
    # 300 SMS made a timed call of 2-4 ms for our batched SimHash, and its ratio to the peer read
    # 8.8x to 13.9x in runs minutes apart (2026-12-03); ten times as many SMS last as long as the articles
    ap.add_argument("--sms-docs", type=int, default=3000, help="SMS")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    need_shared()
    from datasketch import MinHash
    from simhash import Simhash

    prep = Preparer(load_settings(environ={}))
    mh = MinhashDetector()
    ng = NgramDetector(prep.tokenizer)
    hasher = mh.hasher
    ds = devset()
    rows, out = [], {}
    for kind in ("news", "sms"):
        docs = [prep.document(e) for e in read_jsonl(ds / f"{kind}.jsonl", a.docs if kind == "news" else a.sms_docs)]
        feats = []
        for d in docs:
            tf = Counter(prep.tokenizer.words(d.text))
            words = list(tf)
            feats.append((words, np.array([tf[w] for w in words], dtype=np.float64) * prep.idf.weights(words)))
        pairs = [list(zip(w, wt.tolist())) for w, wt in feats]
        shingles = [mh.shingles(d) for d in docs]
        sbytes = [[s.encode() for s in sh_] for sh_ in shingles]
        n = len(docs)

        def ours_batched():  # as the prepare agent calls it: one simhash_many per stream batch of 256
            for i in range(0, n, 256):
                chunk = feats[i:i + 256]
                simhash_many([w for w, _ in chunk], [wt for _, wt in chunk])

        def peer_mh():
            for sb in sbytes:
                m = MinHash(num_perm=128)
                m.update_batch(sb)

        def peer_mh_loop():
            for sb in sbytes:
                m = MinHash(num_perm=128)
                for b in sb:
                    m.update(b)

        def ng_alone():
            for d in docs:
                d.cache.clear()
                ng.sketch(d)

        def ng_batched():
            for i in range(0, n, 256):
                chunk = docs[i:i + 256]
                for d in chunk:
                    d.cache.clear()
                ng.prefetch(chunk)
                for d in chunk:
                    ng.sketch(d)

        # every function once a round, every other round in reverse (common.median_runs): ours and
        # the peer's in the same minutes
        t = {k: secs / n for k, (_, secs) in median_runs({
            "ours_sh": lambda: [simhash(w, wt) for w, wt in feats], "ours_sh_batch": ours_batched,
            "peer_sh": lambda: [Simhash(p) for p in pairs],
            "ours_mh": lambda: [hasher.signature_of_text(d.text, 5) for d in docs], "peer_mh": peer_mh,
            "peer_mh_loop": peer_mh_loop, "ng": ng_alone, "ng_batch": ng_batched}, a.repeat).items()}
        t_ours_sh, t_ours_sh_batch, t_peer_sh, t_ours_mh, t_peer_mh, t_peer_mh_loop, t_ng, t_ng_batch = (
            t[k] for k in ("ours_sh", "ours_sh_batch", "peer_sh", "ours_mh", "peer_mh", "peer_mh_loop", "ng", "ng_batch"))
        for d in docs:
            d.cache.clear()
        for name, ours, peer, peer_name in [
            ("simhash", t_ours_sh, t_peer_sh, "simhash.Simhash"),
            ("simhash, batch of 256", t_ours_sh_batch, t_peer_sh, "simhash.Simhash"),
            ("minhash", t_ours_mh, t_peer_mh, "datasketch update_batch"),
            ("minhash", t_ours_mh, t_peer_mh_loop, "datasketch update loop"),
            ("ngram sketch", t_ng, None, "-"),
            ("ngram sketch, batch of 256", t_ng_batch, None, "-"),
        ]:
            rows.append([kind, name, round(ours * 1e6, 1), peer_name, round(peer * 1e6, 1) if peer else "-",
                         round(peer / ours, 2) if peer else "-"])
            out.setdefault(kind, []).append({"fingerprint": name, "ours_us": ours * 1e6, "peer": peer_name,
                                             "peer_us": peer * 1e6 if peer else None,
                                             "ratio_peer_over_ours": peer / ours if peer else None})
    text = table(["corpus", "fingerprint", "ours µs/doc", "peer", "peer µs/doc", "peer/ours"], rows)
    save("fingerprint", {"results": out, "docs": a.docs, "sms_docs": a.sms_docs, "repeat": a.repeat}, text)


if __name__ == "__main__":
    main()
