"""Spam campaigns with the edits spammers make: a generator, scored leave-one-edit-class-out.

    python bench/spam_edits.py [--originals 1500] [--ham 6000] [--seed 11] [--peers]

The stream (written to bench/work/spam_edits/): real spam messages of ../shared/data/sms as
campaign originals (masked digits filled, no two sharing more than 15% of their 8-grams), real
ham messages as negatives (natural exact copies kept and labelled; a ham message that overlaps an
earlier one dropped, so unlabelled near-copies cannot count against a system), and for every
original two copies, each made by one edit class drawn at random from ``CLASSES``:

    brand      a sender tag in 【】 before (or after) the text
    optout     an opt-out tail: 回T退订, 拒收请回复R, ...
    contact    a contact tail: a hotline, a short link, a WeChat id
    noise      dots, asterisks, spaces or 丶 between a third of the characters
    fullwidth  digits and Latin letters as full-width forms
    trad       traditional characters (OpenCC s2t)
    emoji      two or three emoji in the text
    typo       one or two characters replaced by other common characters
    truncate   the last 10-25% cut off (a message split by the gateway)
    greeting   the first 10-25% replaced by another greeting or a sender's call (亲，/ 您好！/ 老板好，)
    numbers    every number changed (prices, dates, codes)
    reorder    two clauses swapped
    shuffle    every clause in another order (three or more)
    bust       one to three news headlines before or after the text (hash-busting)
    combo2     two of the classes above
    combo3     three of the classes above

Leave-one-edit-class-out: for every held-out class, the short-text containment threshold
(``ngram.containment``) is picked from a grid by the best F1 on the OTHER classes' copies (with the
originals and ham), then that class is scored at it: no threshold is fitted to the class it is
scored on. With ``--peers`` a rensa char-3-gram MinHash LSH loop runs over the same stream at each
threshold of its own grid, reported at its best (fitted on everything: its most favourable case).
Beside each system: the share of LCQMC's hard-negative question pairs (``hard_negatives``) whose
second question it calls a duplicate of the first.

    python bench/spam_edits.py --against ../old [--repeat 5]

also times ``stream-dedup scan`` (the CLI, start-up included) over the SMS dev set and this stream,
this checkout and each ``--against`` checkout (``git worktree add ../old HEAD~1``) alternately: the
median of --repeat runs and this checkout's speed as a ratio to theirs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_devset import COMMON, drop_overlapping, fill_masks, read  # noqa: E402
from common import REPO, SHARED, checkouts, devset, need_shared, save, speed_rows, table  # noqa: E402

from stream_dedup.cli.evaluate import evaluate  # noqa: E402
from stream_dedup.config import NgramSettings  # noqa: E402

WORK = REPO / "bench" / "work" / "spam_edits"
BRANDS = ["京东", "中国移动", "招商银行", "美团外卖", "拼多多", "平安保险", "苏宁易购", "唯品会", "携程旅行", "建设银行",
          "中国联通", "饿了么"]
OPTOUT = ["回T退订", "退订回T", "拒收请回复R", "回TD退订", "退订回N", "回复TD退订", "不再接收请回T", "退订请回复0000"]
EMOJI = ["🔥", "🎁", "💰", "👉", "✨", "🧧", "📣", "❤️", "⭐", "🎉"]
NOISE = [".", "*", " ", "丶", "·", "_", "-"]
_NUM = re.compile(r"\d+(?:\.\d+)?")
_CLAUSE = re.compile(r"[^，,。！？!?；;]+[，,。！？!?；;]?")


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def brand(t: str, rng: random.Random) -> str:
    tag = f"【{rng.choice(BRANDS)}】"
    return tag + t if rng.random() < 0.8 else t + tag


def optout(t: str, rng: random.Random) -> str:
    return t + rng.choice(["", " ", "，"]) + rng.choice(OPTOUT)


def contact(t: str, rng: random.Random) -> str:
    tails = [f"详询{rng.choice(['400', '800'])}-{_digits(rng, 3)}-{_digits(rng, 4)}",
             f"戳 t.cn/{''.join(rng.choice('abcdefghijkmnpqrstuvwxyzABCDEFGH23456789') for _ in range(7))}",
             f"点击 https://dwz.cn/{''.join(rng.choice('abcdefghjkmnpqrstuvwxyz0123456789') for _ in range(6))} 领取",
             f"加微信{''.join(rng.choice('abcdefghijkmnpqrstuvwxyz') for _ in range(5))}{_digits(rng, 3)}",
             f"电话1{rng.choice('3589')}{_digits(rng, 9)}"]
    return t + rng.choice(["", " ", "，"]) + rng.choice(tails)


def noise(t: str, rng: random.Random) -> str:
    mark = rng.choice(NOISE)
    return "".join(c + (mark if rng.random() < 0.33 and not c.isspace() else "") for c in t).strip()


def fullwidth(t: str, rng: random.Random) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in t)


def trad(t: str, rng: random.Random) -> str:
    return _s2t().convert(t)


def emoji(t: str, rng: random.Random) -> str:
    chars = list(t)
    for _ in range(rng.randint(2, 3)):
        chars.insert(rng.randint(0, len(chars)), rng.choice(EMOJI))
    return "".join(chars)


def typo(t: str, rng: random.Random) -> str:
    chars = list(t)
    spots = [i for i, c in enumerate(chars) if "\u4e00" <= c <= "\u9fff"]
    for i in rng.sample(spots, min(len(spots), rng.randint(1, 2))):
        chars[i] = rng.choice(COMMON)
    return "".join(chars)


def truncate(t: str, rng: random.Random) -> str:
    return t[:max(1, round(len(t) * (1 - rng.uniform(0.10, 0.25))))]


GREETINGS = ["亲，", "您好！", "老板好，", "尊敬的会员：", "温馨提示：", "亲爱的朋友，"]


def greeting(t: str, rng: random.Random) -> str:
    return rng.choice(GREETINGS) + t[round(len(t) * rng.uniform(0.10, 0.25)):]


def numbers(t: str, rng: random.Random) -> str:
    out = _NUM.sub(lambda m: _digits(rng, len(m.group()) if rng.random() < 0.7 else max(1, len(m.group()) + 1)), t)
    return out if out != t else t + f" 编号{_digits(rng, 6)}"


_TITLES: list[str] = []


def bust(t: str, rng: random.Random) -> str:
    """Hash-busting: one to three news headlines put after (or before) the text, as much as the text
    or more, so that a fingerprint of the whole no longer matches the campaign's."""
    if not _TITLES:
        _TITLES.extend(r["text"] for r in read(SHARED / "news" / "thucnews_titles_20k.jsonl"))
    filler = "。".join(rng.sample(_TITLES, rng.randint(1, 3)))
    return t + "。" + filler if rng.random() < 0.7 else filler + "。" + t


def reorder(t: str, rng: random.Random) -> str:
    parts = _CLAUSE.findall(t)
    if len(parts) < 2:
        return t[len(t) // 2:] + t[:len(t) // 2]
    i, j = sorted(rng.sample(range(len(parts)), 2))
    parts[i], parts[j] = parts[j], parts[i]
    return "".join(parts)


def shuffle(t: str, rng: random.Random) -> str:
    parts = _CLAUSE.findall(t)
    if len(set(parts)) < 3:
        return reorder(t, rng)
    while True:
        order = rng.sample(parts, len(parts))
        if order != parts:
            return "".join(order)


SINGLE: dict[str, Callable[[str, random.Random], str]] = {
    f.__name__: f for f in (brand, optout, contact, noise, fullwidth, trad, emoji, typo, truncate, greeting, numbers,
                            reorder, shuffle, bust)}
CLASSES = list(SINGLE) + ["combo2", "combo3"]


def edit(cls: str, t: str, rng: random.Random) -> tuple[str, str]:
    """(the edited text, the classes applied: ``cls`` or, for a combo, its parts joined by +)."""
    if cls in SINGLE:
        return SINGLE[cls](t, rng), cls
    # noise last: the other edits see the text as the spammer wrote it
    parts = sorted(rng.sample(sorted(SINGLE), 2 if cls == "combo2" else 3), key=lambda c: c == "noise")
    for p in parts:
        t = SINGLE[p](t, rng)
    return t, "+".join(parts)


_T2S = None


def _s2t():
    global _T2S
    if _T2S is None:
        import opencc

        _T2S = opencc.OpenCC("s2t")
    return _T2S


def build(originals: int, ham: int, seed: int, copies: int = 2) -> tuple[Path, Path]:
    """The stream and its labels (see the module docstring), made once per size and seed;
    ``copies`` edited copies of every original (``bench/peers.py`` makes a long stream with more)."""
    WORK.mkdir(parents=True, exist_ok=True)
    tag = f"{originals}-{ham}-{seed}" + (f"-x{copies}" if copies != 2 else "") + f"-c{len(SINGLE)}"
    path, labels_path = WORK / f"stream-{tag}.jsonl", WORK / f"labels-{tag}.jsonl"
    if path.exists() and labels_path.exists():
        return path, labels_path
    rng = random.Random(seed)
    rows = list(read(SHARED / "sms" / "sms_spam_zh.jsonl"))
    rng.shuffle(rows)
    spam = drop_overlapping([{"id": f"spam-{r['id']}", "text": fill_masks(r["text"].strip(), rng)} for r in rows
                             if r["label"] == 1 and len(r["text"].strip()) >= 8][:originals * 2])[:originals]
    seen: dict[str, str] = {}
    hams, labels = [], []
    for r in rows:
        if r["label"] != 0 or len(hams) >= ham:
            continue
        text = fill_masks(r["text"].strip(), rng)
        if not text:
            continue
        first = seen.setdefault(text, f"ham-{r['id']}")
        hams.append({"id": f"ham-{r['id']}", "text": text, "cluster": f"c-{first}"})
    kept = {d["id"] for d in drop_overlapping([h for h in hams if f"c-{h['id']}" == h["cluster"]])}
    docs = []
    for h in hams:
        if h["cluster"][2:] in kept:
            docs.append({"id": h["id"], "text": h["text"]})
            labels.append({"id": h["id"], "cluster": h["cluster"], "kind": "original" if h["cluster"] == f"c-{h['id']}"
                           else "exact", "edit": None})
    for s in spam:
        docs.append({"id": s["id"], "text": s["text"]})
        labels.append({"id": s["id"], "cluster": f"c-{s['id']}", "kind": "original", "edit": None})
        for v in range(1, copies + 1):
            cls = rng.choice(CLASSES)
            text, applied = edit(cls, s["text"], rng)
            docs.append({"id": f"{s['id']}-v{v}", "text": text})
            labels.append({"id": f"{s['id']}-v{v}", "cluster": f"c-{s['id']}", "kind": "near", "edit": cls,
                           "applied": applied})
    return write_stream(docs, labels, rng, path, labels_path)


def write_stream(docs: list[dict], labels: list[dict], rng: random.Random, path: Path,
                 labels_path: Path) -> tuple[Path, Path]:
    """The documents in an order ``rng`` shuffles, ts 1000 apart, and their labels: a stream and its
    labelling as the benchmarks read them."""
    order = list(range(len(docs)))
    rng.shuffle(order)
    with path.open("w", encoding="utf-8") as f:
        for pos, i in enumerate(order):
            f.write(json.dumps({**docs[i], "ts": (pos + 1) * 1000}, ensure_ascii=False) + "\n")
    with labels_path.open("w", encoding="utf-8") as f:
        for lab in labels:
            f.write(json.dumps(lab, ensure_ascii=False) + "\n")
    return path, labels_path


def run_scan(path: Path, **ngram) -> list[dict]:
    """``scan``'s verdicts in this process, with these ``ngram`` settings over the defaults."""
    from stream_dedup.config import load_settings
    from stream_dedup.core.engine import Engine

    env = {f"STREAM_DEDUP_NGRAM__{k.upper()}": json.dumps(v) for k, v in ngram.items()}
    with Engine(load_settings(environ={**os.environ, **env})) as engine, path.open("rb") as f:
        for line in f:
            engine.process(line)
        return [v.to_dict() for v in engine.verdicts()]


def run_rensa(docs: list[dict], threshold: float) -> list[dict]:
    """rensa's RMinHash + RMinHashLSH over char 3-grams after NFKC / lower-case / punctuation removal
    (``peer_loop``, in this process)."""
    from peer_loop import run

    return run("rensa", threshold, docs)


def hard_negatives() -> Path:
    """LCQMC's dev pairs of questions that differ in meaning (label 0) as one stream, each pair's two
    questions one after the other: most share most of their characters ("…怎么切" / "…怎么吃")."""
    out = WORK / "hard_negatives.jsonl"
    rows = [json.loads(x) for x in (SHARED / "pairs" / "LCQMC_dev.jsonl").open(encoding="utf-8")]
    with out.open("w", encoding="utf-8") as f:
        for i, r in enumerate(r for r in rows if r["label"] == 0):
            for j in (1, 2):
                f.write(json.dumps({"id": f"hn-{i}-{j}", "text": r[f"text{j}"], "ts": 2 * i + j}, ensure_ascii=False) + "\n")
    return out


def called(verdicts: list[dict]) -> str:
    """The share of hard-negative pairs whose second question was called a duplicate of the first."""
    pairs = {v["id"].rsplit("-", 1)[0] for v in verdicts}
    hits = sum(1 for v in verdicts if v["verdict"] == "duplicate" and v["id"].endswith("-2")
               and v["id"][:-1] + "1" in (v["duplicate_of"], v.get("via")))
    return f"{100 * hits / len(pairs):.2f}% of {len(pairs)}"


def scores(verdicts: list[dict], labels: list[dict], held: str | None) -> tuple[dict, dict]:
    """(score of the originals, ham and the copies of class ``held``; of those and the OTHER classes).

    Both read the whole stream's verdicts against the whole labelling: a copy counts as found when
    its verdict names a member of its cluster, or, when it is its cluster's earliest member, when a
    member's verdict names it. Precision: the duplicate verdicts of the selected documents that
    name a member of their own cluster."""
    cluster = {lab["id"]: lab["cluster"] for lab in labels}
    edit = {lab["id"]: lab.get("edit") for lab in labels}
    first: dict[str, tuple] = {}
    for v in verdicts:
        c = cluster[v["id"]]
        first[c] = min(first.get(c, (v["ts"], v["id"])), (v["ts"], v["id"]))
    named = {v["duplicate_of"] for v in verdicts if v["verdict"] == "duplicate"
             and cluster.get(v["duplicate_of"]) == cluster[v["id"]]}

    def score(keep) -> dict:
        tp = pred = rel = found = 0
        for v in verdicts:
            e = edit[v["id"]]
            if not keep(e):
                continue
            right = v["verdict"] == "duplicate" and cluster.get(v["duplicate_of"]) == cluster[v["id"]]
            pred += v["verdict"] == "duplicate"
            tp += right
            if e is not None:
                rel += 1
                earliest = first[cluster[v["id"]]][1] == v["id"]
                found += right or (earliest and v["id"] in named)
        p, r = tp / pred if pred else 1.0, found / rel if rel else 1.0
        return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r) if p + r else 0, 4),
                "copies": rel, "found": found, "false_positives": pred - tp}

    return score(lambda e: e is None or e == held), score(lambda e: e != held)


def leave_one_out(runs: dict[float, list[dict]], labels: list[dict], classes: list[str], default: float,
                  name: str) -> tuple[list[list], list[dict]]:
    """For each held-out class, the setting of ``runs`` (verdicts by its value) with the best F1 at
    precision >= 0.99 on the other classes (ties to the nearest to ``default``), and that class's
    score there: the table's rows and the results' records (the setting under ``name``)."""
    rows, out = [], []
    for held in classes:
        by = {x: scores(v, labels, held) for x, v in runs.items()}
        fit = max(runs, key=lambda x: (by[x][1]["precision"] >= 0.99, by[x][1]["f1"], -abs(x - default)))
        s = by[fit][0]
        rows.append([held, sum(1 for lab in labels if lab.get("edit") == held), fit, s["precision"], s["recall"],
                     s["f1"]])
        out.append({"held_out": held, name: fit, **s})
        print(rows[-1], flush=True)
    return rows, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--originals", type=int, default=1500)
    ap.add_argument("--ham", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--grid", type=float, nargs="+", default=[0.7, 0.75, 0.8, 0.85, 0.9])
    ap.add_argument("--peers", action="store_true", help="also rensa's char 3-gram MinHash LSH at its best threshold")
    ap.add_argument("--against", type=Path, nargs="*", default=[], metavar="CHECKOUT",
                    help="also time scan of this checkout against these, alternated")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each checkout for --against")
    a = ap.parse_args()
    need_shared()
    path, labels_path = build(a.originals, a.ham, a.seed)
    labels = [json.loads(x) for x in labels_path.open(encoding="utf-8")]
    runs: dict[float, list[dict]] = {}
    secs: dict[float, float] = {}
    for c in a.grid:
        t0 = time.perf_counter()
        runs[c] = run_scan(path, containment=c)
        secs[c] = time.perf_counter() - t0
    rows, out = leave_one_out(runs, labels, CLASSES, NgramSettings().containment, "containment")
    n = sum(1 for _ in path.open())
    whole = {c: evaluate(v, labels).overall for c, v in runs.items()}
    negatives = hard_negatives()
    summary = [["stream-dedup scan, containment " + str(c), round(w.precision, 4), round(w.recall, 4), round(w.f1, 4),
                round(n / secs[c]), called(run_scan(negatives, containment=c))] for c, w in whole.items()]
    if a.peers:
        docs = [json.loads(x) for x in path.open(encoding="utf-8")]
        pairs = [json.loads(x) for x in negatives.open(encoding="utf-8")]
        for t in (0.2, 0.3, 0.4, 0.5, 0.6):
            t0 = time.perf_counter()
            w = evaluate(run_rensa(docs, t), labels).overall
            summary.append([f"rensa char-3 MinHash LSH, Jaccard {t}", round(w.precision, 4), round(w.recall, 4),
                            round(w.f1, 4), round(n / (time.perf_counter() - t0)), called(run_rensa(pairs, t))])
    text = (table(["held-out class", "copies", "containment fitted on the others", "precision", "recall", "F1"], rows)
            + "\n\n" + table(["system (whole stream)", "precision", "recall", "F1", "docs/s",
                               "hard-negative pairs called duplicate"], summary))
    speed = []
    if a.against:
        speed = speed_rows({"sms dev set": devset() / "sms.jsonl", "this stream": path}, checkouts(a.against), a.repeat)
        text += "\n\n" + table(["input", "scan of checkout", "median s", "docs/s", "speed of this checkout / its"],
                                speed)
    save("spam_edits", {"leave_one_class_out": out, "whole": summary, "speed": speed}, text)


if __name__ == "__main__":
    main()
