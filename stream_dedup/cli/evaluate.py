"""``stream-dedup eval``: precision, recall and F1 of duplicate verdicts against labelled clusters.

Labels: one ``{"id", "cluster"}`` per line (optional ``"kind"``: ``"exact"`` or ``"near"`` for a
non-first member, to split recall by kind; ids without a label are clusters of their own).
A duplicate verdict is correct when ``duplicate_of`` is in the same cluster as ``id``. Recall's
denominator is every non-first member of a cluster (first by the verdicts' (ts, id) order).
Precision is split by the verdict's ``match`` (exact / near) and by ``detector``.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class Score:
    tp: int = 0
    predicted: int = 0
    relevant: int = 0

    @property
    def precision(self) -> float:
        return self.tp / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.tp / self.relevant if self.relevant else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"precision": round(self.precision, 4), "recall": round(self.recall, 4), "f1": round(self.f1, 4),
                "tp": self.tp, "predicted": self.predicted, "relevant": self.relevant}


@dataclass
class EvalReport:
    overall: Score
    by_kind: dict[str, Score] = field(default_factory=dict)
    by_detector: dict[str, Score] = field(default_factory=dict)
    docs: int = 0
    false_positives: list[tuple[str, str]] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"docs": self.docs, "overall": self.overall.as_dict(),
                "by_kind": {k: s.as_dict() for k, s in sorted(self.by_kind.items())},
                "precision_by_detector": {k: s.as_dict() for k, s in sorted(self.by_detector.items())},
                "false_positive_examples": self.false_positives[:20], "missed_examples": self.missed[:20]}

    def describe(self) -> str:
        rows = [("overall", self.overall)] + [(f"  {k}", s) for k, s in sorted(self.by_kind.items())]
        lines = [f"{'':12} {'precision':>9} {'recall':>7} {'F1':>7} {'TP':>7} {'pred':>7} {'rel':>7}"]
        for name, s in rows:
            lines.append(f"{name:12} {s.precision:9.4f} {s.recall:7.4f} {s.f1:7.4f} {s.tp:7} {s.predicted:7} {s.relevant:7}")
        if self.by_detector:
            lines.append("precision by detector: " + ", ".join(
                f"{k} {s.precision:.4f} ({s.tp}/{s.predicted})" for k, s in sorted(self.by_detector.items())))
        lines.append(f"docs {self.docs}")
        return "\n".join(lines)


def evaluate(verdicts: Iterable[dict], labels: Iterable[dict]) -> EvalReport:
    latest: dict[str, dict] = {}
    for v in verdicts:
        ident = str(v["id"])
        if ident not in latest or v.get("revision", 0) >= latest[ident].get("revision", 0):
            latest[ident] = v
    cluster: dict[str, str] = {}
    kind: dict[str, str] = {}
    for lab in labels:
        ident = str(lab["id"])
        cluster[ident] = str(lab["cluster"])
        if lab.get("kind"):
            kind[ident] = lab["kind"]
    members: dict[str, list[tuple]] = defaultdict(list)
    for ident, v in latest.items():
        members[cluster.get(ident, f"__single__{ident}")].append((v.get("ts", 0), ident))
    relevant: set[str] = set()
    for ms in members.values():
        ms.sort()
        relevant.update(ident for _, ident in ms[1:])
    overall = Score(relevant=len(relevant))
    by_kind: dict[str, Score] = defaultdict(Score)
    by_det: dict[str, Score] = defaultdict(Score)
    # a cluster's kind: "exact" when every derived member is an exact copy, else "near"
    ckind: dict[str, str] = {}
    for ident, k in kind.items():
        if k in ("exact", "near"):
            c = cluster[ident]
            ckind[c] = "near" if k == "near" or ckind.get(c) == "near" else "exact"

    def kind_of(ident: str) -> str:
        return ckind.get(cluster.get(ident, ""), "unlabelled")

    for ident in relevant:
        by_kind[kind_of(ident)].relevant += 1
    report = EvalReport(overall, docs=len(latest))
    for ident, v in latest.items():
        if v.get("verdict") != "duplicate":
            continue
        of = str(v.get("duplicate_of"))
        ok = ident in cluster and cluster.get(of) == cluster[ident]
        k = kind_of(ident) if ok else f"false/{v.get('match')}"
        overall.predicted += 1
        by_kind[k].predicted += 1
        by_det[v.get("detector") or "?"].predicted += 1
        if ok:
            overall.tp += 1
            by_kind[k].tp += 1
            by_det[v.get("detector") or "?"].tp += 1
        else:
            report.false_positives.append((ident, of))
    got = {i for i, v in latest.items() if v.get("verdict") == "duplicate"}
    report.missed = sorted(relevant - got)
    if ckind:
        report.by_kind = dict(by_kind)
    report.by_detector = dict(by_det)
    return report


class EvalInputError(ValueError):
    """A verdicts or labels file that cannot be scored: the message says which line and why."""


def _read_jsonl(path: str, needs: tuple[str, ...], what: str) -> list[dict]:
    """Every record of a JSONL file, each checked for the keys ``needs``."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError) as e:
                raise EvalInputError(f"{path} line {number}: not JSON ({e})") from None
            if not isinstance(rec, dict) or any(k not in rec for k in needs):
                raise EvalInputError(f"{path} line {number}: {what} needs {', '.join(map(repr, needs))} (the "
                                     "arguments are VERDICTS then LABELS)")
            out.append(rec)
    return out


def evaluate_files(verdicts_path: str, labels_path: str) -> EvalReport:
    """``evaluate`` of two files; ``EvalInputError`` when they cannot be scored together."""
    verdicts = _read_jsonl(verdicts_path, ("id", "verdict"), "a verdict")
    labels = _read_jsonl(labels_path, ("id", "cluster"), "a label")
    if verdicts and labels and not {str(v["id"]) for v in verdicts} & {str(lab["id"]) for lab in labels}:
        raise EvalInputError(f"{labels_path} labels none of the ids in {verdicts_path}")
    return evaluate(verdicts, labels)
