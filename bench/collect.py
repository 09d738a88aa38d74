"""Copy each benchmark's current table from bench/results/NAME.md into bench/README.md.

Every section of bench/README.md that holds a table is framed by ``<!-- table: BASE -->`` and
``<!-- /table -->``; the newest result of that benchmark (by the date line a script writes under
its table, ``--against`` comparisons and ``_trial`` runs left out) replaces what was there.

    python bench/collect.py
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from common import RESULTS

FRAME = re.compile(r"(<!-- table: (\w+) -->\n).*?(<!-- /table -->)", re.S)


def base_of(name: str) -> str:
    """The script behind a result name: kafka_e2e_half and kafka_e2e_campaign are kafka_e2e's."""
    return re.sub(r"(_rate\d+|_half)?(_p\d+)?(_campaign)?$", "", name)


def current(results: Path) -> dict[str, tuple[str, dict, str]]:
    """For each benchmark, its newest result: (name, machine line, table text)."""
    best: dict[str, tuple[str, dict, str]] = {}
    for path in sorted(results.glob("*.md")):
        if path.stem.endswith("_trial") or "_compare" in path.stem:
            continue
        table, _, tail = path.read_text(encoding="utf-8").rstrip().rpartition("\n\n")
        try:
            meta = json.loads(tail)
        except ValueError:
            continue
        base = base_of(path.stem)
        if base not in best or meta.get("date", "") > best[base][1].get("date", ""):
            best[base] = (path.stem, meta, table.strip())
    return best


def render(name: str, meta: dict, table: str, results: Path) -> str:
    """A section's body: where the table comes from, the table and its plot if there is one."""
    line = f"`{name}`: {meta.get('date')}, commit {meta.get('commit')}, {meta.get('cpus')} CPUs"
    plot = f"\n\n![{name}](results/{name}.png)" if (results / f"{name}.png").exists() else ""
    return f"{line}\n\n{table}{plot}\n"


def fill(readme: str, tables: dict[str, tuple[str, dict, str]], results: Path) -> str:
    """``readme`` with every framed table replaced by the current one (left as it is when none)."""
    def one(m: re.Match) -> str:
        found = tables.get(m.group(2))
        if found is None:
            return m.group(0)
        return m.group(1) + render(*found, results) + m.group(3)
    return FRAME.sub(one, readme)


def main() -> None:
    readme = RESULTS.parent / "README.md"
    if not readme.exists():
        readme = Path(__file__).resolve().parent / "README.md"
    text = fill(readme.read_text(encoding="utf-8"), current(RESULTS), RESULTS)
    out = RESULTS.parent / "README.md"
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
