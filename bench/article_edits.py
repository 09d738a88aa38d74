"""Reposted articles with the edits editors and scrapers make, scored leave-one-edit-class-out.

    python bench/article_edits.py [--originals 600] [--seed 7]

The stream (written to bench/work/article_edits/): the THUCNews articles of ../shared/data/news of
300 characters or more but 100 (whose sentences the ``insert`` class takes), ``--originals`` of them
with two edited copies each, each copy by one edit class drawn at random from ``CLASSES``. Every
article is its own original: the corpus's articles made from one template (a shop's price notes of
one camera) count as false positives wherever a threshold lets them match.

    delete     10-30% of the sentences left out (an abridged repost)
    insert     other articles' sentences put in, 10-30% as many as it has (ads, related items)
    typo       1-4% of the Han characters replaced (OCR, a scraper's encoding slips)
    numbers    every digit changed (a figure updated)
    truncate   only the first 60-90% kept (a teaser, a page cut off)
    reorder    its halves swapped, or its sentences shuffled
    wrap       an editor's byline and source lines before and after it
    trad       traditional characters (OpenCC s2t)
    punct      punctuation left out or written as spaces (a scraper's plain text)
    combo2     two of the classes above
    combo3     three of the classes above

Each run is the in-process engine (the code ``scan`` and the workers run) at one
``minhash.threshold`` of ``--grid``. Leave-one-edit-class-out: for every held-out class the threshold
is the grid point with the best F1 (at precision >= 0.99) on the OTHER classes' copies with the
originals and negatives, and that class is scored at it. A second table gives the whole stream at
each threshold, and the news development set's F1 at each (its hard negatives: other outlets'
reports of one event).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_devset import read  # noqa: E402
from common import REPO, SHARED, devset, need_shared, save, table  # noqa: E402
from spam_edits import leave_one_out, scores, write_stream  # noqa: E402

from stream_dedup.cli.evaluate import evaluate  # noqa: E402
from stream_dedup.config import MinhashSettings  # noqa: E402

WORK = REPO / "bench" / "work" / "article_edits"
_SENTENCE = re.compile(r"[^。！？!?]+[。！？!?]*")
BYLINES = ["【本报讯】记者 张伟 报道", "（来源：中国新闻网）", "本文转载自微信公众号", "编者按：以下内容仅供参考。",
           "新华社北京电", "(责任编辑：李明)", "点击关注，获取更多精彩内容", "声明：本文由入驻作者撰写，观点仅代表作者本人。"]
COMMON = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会"
          "可主发年动同工也能下过子说产种面而方后多定行学法所民")


def sentences(t: str) -> list[str]:
    return _SENTENCE.findall(t) or [t]


def delete(t: str, rng: random.Random, others: list[str]) -> str:
    s = sentences(t)
    drop = set(rng.sample(range(len(s)), int(len(s) * rng.uniform(0.1, 0.3))))
    return "".join(x for i, x in enumerate(s) if i not in drop) or t


def insert(t: str, rng: random.Random, others: list[str]) -> str:
    s = sentences(t)
    extra = sentences(rng.choice(others))
    for x in extra[:max(1, int(len(s) * rng.uniform(0.1, 0.3)))]:
        s.insert(rng.randrange(len(s) + 1), x)
    return "".join(s)


def typo(t: str, rng: random.Random, others: list[str]) -> str:
    p = rng.uniform(0.01, 0.04)
    return "".join(rng.choice(COMMON) if "\u4e00" <= c <= "\u9fff" and rng.random() < p else c for c in t)


def numbers(t: str, rng: random.Random, others: list[str]) -> str:
    return re.sub(r"\d", lambda m: rng.choice("0123456789"), t)


def truncate(t: str, rng: random.Random, others: list[str]) -> str:
    return t[:int(len(t) * rng.uniform(0.6, 0.9))]


def reorder(t: str, rng: random.Random, others: list[str]) -> str:
    s = sentences(t)
    if rng.random() < 0.5:
        return "".join(s[len(s) // 2:] + s[:len(s) // 2])
    rng.shuffle(s)
    return "".join(s)


def wrap(t: str, rng: random.Random, others: list[str]) -> str:
    head, tail = rng.sample(BYLINES, 2)
    return f"{head} {t} {tail}"


_S2T = None


def trad(t: str, rng: random.Random, others: list[str]) -> str:
    global _S2T
    if _S2T is None:
        import opencc

        _S2T = opencc.OpenCC("s2t")
    return _S2T.convert(t)


_PUNCT = re.compile(r"[，。！？：；、“”‘’（）《》…—,.!?:;\"'()]")


def punct(t: str, rng: random.Random, others: list[str]) -> str:
    return _PUNCT.sub(rng.choice(("", " ")), t)


SINGLE = {f.__name__: f for f in (delete, insert, typo, numbers, truncate, reorder, wrap, trad, punct)}
CLASSES = list(SINGLE) + ["combo2", "combo3"]


def edit(cls: str, t: str, rng: random.Random, others: list[str]) -> tuple[str, str]:
    """(the edited text, the classes applied: ``cls`` or, for a combo, its parts joined by +)."""
    if cls in SINGLE:
        return SINGLE[cls](t, rng, others), cls
    parts = rng.sample(sorted(SINGLE), 2 if cls == "combo2" else 3)
    for p in parts:
        t = SINGLE[p](t, rng, others)
    return t, "+".join(parts)


def build(originals: int, seed: int) -> tuple[Path, Path]:
    """The stream and its labels (see the module docstring), made once per size and seed."""
    WORK.mkdir(parents=True, exist_ok=True)
    tag = f"{originals}-{seed}-c{len(SINGLE)}-all"
    path, labels_path = WORK / f"stream-{tag}.jsonl", WORK / f"labels-{tag}.jsonl"
    if path.exists() and labels_path.exists():
        return path, labels_path
    rng = random.Random(seed)
    rows = [r for r in read(SHARED / "news" / "thucnews_1000.jsonl") if len(r["text"]) >= 300]
    rng.shuffle(rows)
    arts = [{"id": f"thuc-{r['id']}", "text": r["text"]} for r in rows]
    # the inserted sentences come from articles outside the stream
    source, others = arts[:len(arts) - 100], [a["text"] for a in arts[len(arts) - 100:]]
    docs, labels = [], []
    for i, a in enumerate(source):
        docs.append(a)
        labels.append({"id": a["id"], "cluster": f"c-{a['id']}", "kind": "original", "edit": None})
        if i >= originals:
            continue
        for v in (1, 2):
            cls = rng.choice(CLASSES)
            text, applied = edit(cls, a["text"], rng, others)
            docs.append({"id": f"{a['id']}-v{v}", "text": text})
            labels.append({"id": f"{a['id']}-v{v}", "cluster": f"c-{a['id']}", "kind": "near", "edit": cls,
                           "applied": applied})
    return write_stream(docs, labels, rng, path, labels_path)


def run_scan(path: Path, threshold: float) -> list[dict]:
    """``scan``'s verdicts in this process, at this ``minhash.threshold``."""
    from stream_dedup.config import load_settings
    from stream_dedup.core.engine import Engine

    env = {**os.environ, "STREAM_DEDUP_MINHASH__THRESHOLD": str(threshold)}
    with Engine(load_settings(environ=env)) as engine, path.open("rb") as f:
        for line in f:
            engine.process(line)
        return [v.to_dict() for v in engine.verdicts()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--originals", type=int, default=600)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--grid", type=float, nargs="+", default=[0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    a = ap.parse_args()
    need_shared()
    path, labels_path = build(a.originals, a.seed)
    labels = [json.loads(x) for x in labels_path.open(encoding="utf-8")]
    runs = {t: run_scan(path, t) for t in a.grid}
    rows, out = leave_one_out(runs, labels, CLASSES, MinhashSettings().threshold, "threshold")
    news = devset() / "news.jsonl"
    news_labels = [json.loads(x) for x in (devset() / "news_labels.jsonl").open(encoding="utf-8")]
    whole = []
    for t, v in runs.items():
        w, n = evaluate(v, labels).overall, evaluate(run_scan(news, t), news_labels).overall
        by_class = {c: scores(v, labels, c)[0]["recall"] for c in CLASSES}
        whole.append([f"minhash.threshold {t}", round(w.precision, 4), round(w.recall, 4), round(w.f1, 4),
                      round(n.precision, 4), round(n.f1, 4), *(by_class[c] for c in CLASSES)])
    text = (table(["held-out class", "copies", "threshold fitted on the others", "precision", "recall", "F1"], rows)
            + "\n\n" + table(["system (whole stream)", "precision", "recall", "F1", "news dev precision",
                               "news dev F1", *CLASSES], whole))
    save("article_edits", {"leave_one_class_out": out, "whole": whole}, text)


if __name__ == "__main__":
    main()
