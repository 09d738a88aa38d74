"""Collect the latest bench/results/*.md tables into bench/RESULTS.md (date, commit and machine included).

Tables that are no longer current (one-off rates of earlier stops) live in bench/results/archive/, which is
not collected; bench/TARGETS.md is appended, bench/HISTORY.md is not.

    python bench/collect.py
"""
from __future__ import annotations

import json
import re

from common import RESULTS
ORDER = ["quality", "html_quality", "fingerprint", "scan_vs_jieba", "campaign", "scan_memory", "sweep_memory", "deduper_disk",
         "stages", "instructions", "segmenters", "index_scale", "kafka_e2e", "kafka_profile", "status_scale"]
TITLES = {"quality": "Quality and speed vs peers (development benchmark)", "fingerprint": "Fingerprint math vs peers",
          "scan_vs_jieba": "scan vs raw jieba segmentation", "index_scale": "Index scaling",
          "campaign": "A spam campaign: a few SMS sent over and over, against the peers' index loops",
          "scan_memory": "scan's memory as the input grows, against a peer's index loop",
          "sweep_memory": "One sweep of scan's news index: memory and time as the store grows, "
                          "and with copies sharing buckets",
          "deduper_disk": "A long-lived Deduper's run folder: forgetting old states vs keeping them",
          "kafka_e2e": "Kafka end to end (real local broker)",
          "html_quality": "HTML pages: other sites' templates vs same-site pages",
          "segmenters": "Word segmenters: Python jieba vs rjieba (the default, behind its adapter)",
          "stages": "What a document costs in each stage of scan",
          "instructions": "What an event costs in instructions (Valgrind), and what the machine gave per second",
          "kafka_profile": "Kafka end to end: where the workers' CPU goes (py-spy)",
          "status_scale": "`stream-dedup status` as the partitions grow (real local broker)"}
COMMANDS = {"quality": "python bench/quality.py", "fingerprint": "python bench/fingerprint.py",
            "scan_vs_jieba": "python bench/scan_vs_jieba.py", "index_scale": "python bench/index_scale.py",
            "kafka_e2e": "python bench/kafka_e2e.py", "html_quality": "python bench/html_quality.py",
            "segmenters": "python bench/segmenters.py", "stages": "python bench/stages.py",
            "instructions": "python bench/instructions.py", "kafka_profile": "python bench/kafka_e2e.py",
            "status_scale": "python bench/status_scale.py", "scan_memory": "python bench/scan_memory.py",
            "deduper_disk": "python bench/deduper_disk.py", "sweep_memory": "python bench/sweep_memory.py",
            "campaign": "python bench/campaign.py"}


def base_of(name: str) -> str:
    """The script behind a result: kafka_e2e_rate618, kafka_e2e_half, kafka_e2e_half_p2,
    kafka_e2e_campaign and kafka_e2e_compare are kafka_e2e's; scan_memory_compare and
    scan_memory_compare_sms are scan_memory's."""
    return re.sub(r"(_rate\d+|_half)?(_p\d+)?(_campaign)?(_compare(_\w+)?)?$", "", name)


def main() -> None:
    parts = ["# Benchmark results\n", "Latest run of each script on the project's 2-core development machine "
             "(noisy: medians and ratios measured in one run matter, not absolute numbers).\n"]
    # <name>_trial: kafka_e2e's quick checks beside a recorded table (not committed: .gitignore)
    names = sorted({p.stem for p in RESULTS.glob("*.json") if not p.stem.endswith("_trial")},
                   key=lambda n: (ORDER.index(base_of(n)) if base_of(n) in ORDER else 99, n))
    for name in names:
        data = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
        m = data.get("machine", {})
        base = base_of(name)
        table = (RESULTS / f"{name}.md").read_text(encoding="utf-8").rsplit("\n\n{", 1)[0]
        title = TITLES.get(base, name)
        if "_compare" in name:  # --against: other checkouts beside this one
            title = ("scan against other commits' scan (or a peer) on one input, alternated in one run"
                     if base == "scan_memory" else f"{title}: other commits' workers alternated with these in one run")
        parts.append(f"## {title}{' (' + name + ')' if name != base else ''}\n")
        cmd = COMMANDS.get(base, name)
        if isinstance(data.get("args"), dict):  # show the flags it ran with
            flags = [f"--{k.replace('_', '-')}" + ("" if v is True else
                                                   f" {' '.join(map(str, v)) if isinstance(v, list) else v}")
                     for k, v in data["args"].items() if v is not None and v is not False and v != []]
            cmd = " ".join([cmd, *flags])
        parts.append(f"`{cmd}`: {m.get('date')}, commit {m.get('commit')}, {m.get('cpus')} CPUs, "
                     f"Python {m.get('python')}\n")
        parts.append(table.strip() + "\n")
        if (RESULTS / f"{name}.png").exists():
            parts.append(f"![{name}](results/{name}.png)\n")
    targets = RESULTS.parent / "TARGETS.md"  # hand-written: which targets the tables meet, and why not
    if targets.exists():
        parts.append(targets.read_text(encoding="utf-8"))
    out = RESULTS.parent / "RESULTS.md"
    out.write_text("\n".join(parts), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
