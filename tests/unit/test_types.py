"""The package type-checks clean with mypy (the ``[tool.mypy]`` section of ``pyproject.toml``).

Why a test: the core's type hints say what flows between the stages (a ``Prepared``, a ``Probe``,
a packed bucket), and ``bench/instructions.py --commits MYPYC`` compiles the core from them, which
mypyc refuses to do for code that mypy rejects. In the Kafka drivers the check found a value that
can be None passed where it cannot (Faust's ``max_open_files`` on a machine with no limit), and it
keeps the private parts of Faust they depend on declared in one place. Without a test, the hints
drift from the code unseen."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_package_type_checks_clean(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"mypy found type errors:\n{r.stdout}{r.stderr}"
    assert "Success: no issues found" in r.stdout
