"""Docs stay true: every Python block runs, and the config reference matches the code.

A ```python block is run as a script; a ```python test block is run with pytest. Blocks
that only show a shape use ```text or ```yaml instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_bootstrap.config_reference import render_reference

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python( test)?\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks() -> list[tuple[str, bool, str]]:
    found = []
    for page in PAGES:
        for number, match in enumerate(BLOCK.finditer(page.read_text()), 1):
            found.append((f"{page.name}#{number}", bool(match.group(1)), match.group(2)))
    return found


@pytest.mark.parametrize(("where", "is_test", "code"), _blocks(), ids=[b[0] for b in _blocks()])
def test_docs_code_runs(where: str, is_test: bool, code: str, tmp_path: Path) -> None:
    script = tmp_path / ("test_doc_example.py" if is_test else "example.py")
    script.write_text(code)
    env = {**os.environ, "HERMES_HOME": str(tmp_path / "home")}
    command = [sys.executable, str(script)]
    if is_test:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if is_test:
        assert " passed" in done.stdout and "skipped" not in done.stdout


def test_configuration_reference_is_generated_from_the_models() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == render_reference(), (
        "docs/configuration.md is stale: run "
        "`python -m hermes_bootstrap.config_reference > docs/configuration.md`"
    )
