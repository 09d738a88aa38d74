"""English short messages: campaign copies found, different messages kept apart.

    python bench/english_sms.py [--dialogues F ...] [--against ../old] [--peers]

The team's SMS corpus is Chinese; a gateway also carries English. The stream is built from
DailyDialog's utterances (Li et al. 2017, CC BY-NC-SA 4.0, research use; not shipped here): give
its ``dialogues_text.txt`` files (one dialogue a line, utterances ending in ``__eou__``), by
default ``bench/work/english/*.txt``, e.g. ``data/daily_dialog/{test,validation}/dialogues.txt`` of
the GitHub repository snakeztc/NeuralDialog-LAED. Distinct utterances (letters compared) that share
at most 15% of their 8-grams with an earlier one: 400 of 8 to 40 words are originals, with one copy
per edit class each (``EDITS``: a sender tag, an opt-out or contact tail, a filler inside words,
full-width, upper case, a letter changed in one or two words, the end cut, numbers changed, two
sentences swapped, Cyrillic look-alike letters, digits and marks for letters, two other utterances
after it, SMS spellings of its words), and 4,000 others are negatives, most of them short everyday
messages ("What do you do?", "$ 300.") that must not merge.

First table, leave-one-edit-class-out: for each class, the letter-gram Jaccard and the short-text
bound of Latin-script texts (``ngram.LATIN_JACCARD``, ``ngram.LATIN_SHORT``) are picked from a grid
by the best F1 on the OTHER classes' copies (with the originals and negatives), then that class is
scored at them. Second: the whole stream with the defaults as they ship.

Beside it: with ``--against`` the same stream through each other checkout's ``scan``, and with
``--peers`` rensa's char-3-gram MinHash LSH at each threshold of its grid.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_devset import drop_overlapping  # noqa: E402
from common import REPO, checkout_name, checkouts, save, table  # noqa: E402
from spam_edits import run_rensa, scores  # noqa: E402

from stream_dedup.cli.evaluate import evaluate  # noqa: E402

WORK = REPO / "bench" / "work" / "english"
_SENTENCE = re.compile(r"[^.?!]+[.?!]*\s*")


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def _typo(t: str, rng: random.Random) -> str:
    words = t.split(" ")
    for i in rng.sample(range(len(words)), min(len(words), rng.randint(1, 2))):
        w = words[i]
        if len(w) > 2:
            j = rng.randrange(len(w))
            words[i] = w[:j] + rng.choice("abcdefghijklmnopqrstuvwxyz") + w[j + 1:]
    return " ".join(words)


def _reorder(t: str, rng: random.Random) -> str:
    parts = _SENTENCE.findall(t)
    if len(parts) < 2:
        words = t.split(" ")
        return " ".join(words[len(words) // 2:] + words[:len(words) // 2])
    i, j = sorted(rng.sample(range(len(parts)), 2))
    parts[i], parts[j] = parts[j], parts[i]
    return " ".join(p.strip() for p in parts)


_CYRILLIC = dict(zip("aeopcxyiABEKMHOPCTX", "аеорсхуіАВЕКМНОРСТХ"))
_LEET = dict(zip("oeaistOEAIST", "03@1$703@1$7"))
_FILLER: list[str] = []  # utterances of neither the originals nor the negatives (``build``)
_SPOKEN = {"you": "u", "your": "ur", "are": "r", "please": "pls", "thanks": "thx", "tomorrow": "tmr", "great": "gr8",
           "before": "b4", "what": "wat", "because": "coz", "love": "luv", "people": "ppl", "message": "msg",
           "okay": "k", "and": "n", "tonight": "2nite", "today": "2day", "later": "l8r", "with": "wif",
           "the": "da", "see": "c", "be": "b", "to": "2", "for": "4"}

EDITS: dict[str, Callable[[str, random.Random], str]] = {
    "brand": lambda t, rng: rng.choice(["[FreeMsg] ", "FreeMsg: ", "<Vodafone> "]) + t,
    "optout": lambda t, rng: t + rng.choice([" Txt STOP to ", " Reply STOP to ", " To opt out text END to "])
    + _digits(rng, 5),
    "contact": lambda t, rng: t + rng.choice([f" Call 0800 {_digits(rng, 3)} {_digits(rng, 4)}",
                                              f" Visit bit.ly/{_digits(rng, 2)}xQ{_digits(rng, 2)}"]),
    "filler": lambda t, rng: "".join(c + (rng.choice(".*") if c.isalpha() and rng.random() < 0.2 else "")
                                     for c in t),
    "fullwidth": lambda t, rng: "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in t),
    "case": lambda t, rng: t.upper(),
    "typo": _typo,
    "truncate": lambda t, rng: t[:max(1, round(len(t) * (1 - rng.uniform(0.10, 0.25))))],
    "numbers": lambda t, rng: (re.sub("[0-9]+", lambda m: _digits(rng, len(m.group())), t)
                               if re.search("[0-9]", t) else t + f" Code {_digits(rng, 4)}"),
    "reorder": _reorder,
    # look-alike letters of other scripts, and digits or marks for letters, as spam dodges filters
    "homoglyph": lambda t, rng: "".join(_CYRILLIC.get(c, c) if rng.random() < 0.5 else c for c in t),
    "leet": lambda t, rng: "".join(_LEET.get(c, c) if rng.random() < 0.4 else c for c in t),
    # hash-busting: two utterances that are not in the stream put after the text
    "bust": lambda t, rng: t + " " + " ".join(rng.sample(_FILLER, 2)),
    # SMS spellings: most of the words that have one written that way ("u", "gr8", "2", "4")
    "speak": lambda t, rng: re.sub(r"[A-Za-z]+", lambda m: _SPOKEN.get(m.group().lower(), m.group())
                                   if rng.random() < 0.8 else m.group(), t),
}


def utterances(files: list[Path]) -> list[str]:
    """Distinct utterances of DailyDialog files, in order (their spaces before punctuation closed)."""
    seen, out = set(), []
    for f in files:
        for line in f.open(encoding="utf-8"):
            for u in line.split("__eou__"):
                u = re.sub(r"\s+([,.?!'’])", r"\1", u.strip())
                key = re.sub(r"[\W_]+", "", u.lower())
                if key and key not in seen:
                    seen.add(key)
                    out.append(u)
    return out


def build(files: list[Path], seed: int = 5) -> tuple[Path, Path]:
    """The stream and its labels (``spam_edits``'s format, ``edit`` the class of a copy)."""
    rng = random.Random(seed)
    texts = [d["text"] for d in drop_overlapping([{"text": u} for u in utterances(files)])]
    rng.shuffle(texts)
    originals = [t for t in texts if 8 <= len(t.split()) <= 40][:400]
    chosen = set(originals)
    rest = [t for t in texts if t not in chosen]
    ham = rest[:4000]
    _FILLER[:] = rest[4000:]
    docs, labels = [], []
    for i, t in enumerate(originals):
        docs.append({"id": f"o{i}", "text": t})
        labels.append({"id": f"o{i}", "cluster": f"c{i}", "edit": None})
        for name, fn in EDITS.items():
            docs.append({"id": f"o{i}-{name}", "text": fn(t, rng)})
            labels.append({"id": f"o{i}-{name}", "cluster": f"c{i}", "edit": name})
    for j, t in enumerate(ham):
        docs.append({"id": f"h{j}", "text": t})
        labels.append({"id": f"h{j}", "cluster": f"h{j}", "edit": None})
    rng.shuffle(docs)
    WORK.mkdir(parents=True, exist_ok=True)
    path, labels_path = WORK / "stream.jsonl", WORK / "labels.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for pos, d in enumerate(docs):
            f.write(json.dumps({**d, "ts": (pos + 1) * 1000}, ensure_ascii=False) + "\n")
    with labels_path.open("w", encoding="utf-8") as f:
        for lab in labels:
            f.write(json.dumps(lab, ensure_ascii=False) + "\n")
    return path, labels_path


def scan_of(tree: Path, path: Path) -> list[dict]:
    """``stream-dedup scan`` of a checkout over the stream, its default settings."""
    out = WORK / f"verdicts-{checkout_name(tree).rstrip('+')}.jsonl"
    subprocess.run([sys.executable, "-m", "stream_dedup.cli", "scan", str(path), "--out", str(out), "--no-progress"],
                   cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, capture_output=True)
    return [json.loads(x) for x in out.open(encoding="utf-8")]


def row(system: str, verdicts: list[dict], labels: list[dict]) -> list:
    """System, P / R / F1 of the whole stream, wrong duplicate verdicts, recall of each edit class."""
    w = evaluate(verdicts, labels).overall
    per = [scores(verdicts, labels, e)[0]["recall"] for e in EDITS]
    wrong = sum(1 for v in verdicts if v["verdict"] == "duplicate") - w.tp
    return [system, round(w.precision, 4), round(w.recall, 4), round(w.f1, 4), wrong, *per]


GRID = [(j, short) for j in (0.4, 0.5, 0.6, 0.7) for short in (24, 32, 48)]


def run_with(path: Path, jaccard: float, short: int) -> list[dict]:
    """``scan``'s verdicts in this process with these Latin-script bounds."""
    from stream_dedup.config import Settings
    from stream_dedup.core.detectors import ngram
    from stream_dedup.core.engine import Engine

    saved = ngram.LATIN_JACCARD, ngram.LATIN_SHORT
    ngram.LATIN_JACCARD, ngram.LATIN_SHORT = jaccard, short
    try:
        with Engine(Settings()) as engine, path.open("rb") as f:
            for line in f:
                engine.process(line)
            return [v.to_dict() for v in engine.verdicts()]
    finally:
        ngram.LATIN_JACCARD, ngram.LATIN_SHORT = saved


def leave_one_out(path: Path, labels: list[dict]) -> list[list]:
    """A row per held-out class: the bounds fitted on the others, then its precision, recall, F1."""
    from stream_dedup.core.detectors import ngram

    runs = {g: run_with(path, *g) for g in GRID}
    default = (ngram.LATIN_JACCARD, ngram.LATIN_SHORT)
    rows = []
    for held in EDITS:
        by = {g: scores(v, labels, held) for g, v in runs.items()}
        fit = max(GRID, key=lambda g: (by[g][1]["f1"], g == default))
        s = by[fit][0]
        rows.append([held, fit[0], fit[1], s["precision"], s["recall"], s["f1"]])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialogues", type=Path, nargs="+", default=sorted(WORK.glob("*.txt")))
    ap.add_argument("--against", type=Path, nargs="*", default=[], metavar="CHECKOUT")
    ap.add_argument("--peers", action="store_true", help="also rensa's char 3-gram MinHash LSH")
    a = ap.parse_args()
    if not a.dialogues:
        sys.exit(f"no DailyDialog files: pass --dialogues or put them in {WORK} (see --help)")
    path, labels_path = build(a.dialogues)
    labels = [json.loads(x) for x in labels_path.open(encoding="utf-8")]
    rows = [row(f"stream-dedup scan {checkout_name(t)}", scan_of(t, path), labels) for t in (REPO, *checkouts(a.against))]
    if a.peers:
        docs = [json.loads(x) for x in path.open(encoding="utf-8")]
        rows += [row(f"rensa char-3 MinHash LSH, Jaccard {t}", run_rensa(docs, t), labels) for t in (0.3, 0.5, 0.7)]
    held = leave_one_out(path, labels)
    text = (table(["held-out class", "Jaccard fitted on the others", "short below (letters)", "precision", "recall",
                   "F1"], held)
            + "\n\n" + table(["system", "precision", "recall", "F1", "wrong duplicates", *EDITS], rows))
    save("english_sms", {"leave_one_class_out": held, "rows": rows, "events": len(labels)}, text)


if __name__ == "__main__":
    main()
