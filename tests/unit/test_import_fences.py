"""The import contracts hold now, and they would catch the core importing httpx."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=src.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_core_importing_httpx_breaks_the_contract(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    clean = _lint(src)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    budget = src / "hermes_core" / "budget.py"
    budget.write_text(budget.read_text() + "\nimport httpx  # noqa\n")
    broken = _lint(src)
    assert broken.returncode != 0
    assert "hermes_core.budget -> httpx" in broken.stdout
