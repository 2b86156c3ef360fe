"""Every runnable example under examples/ runs and says what the docs claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "an example should print what it did"


def test_custom_agent_example_answers_from_the_tool() -> None:
    path = next(p for p in EXAMPLES if p.name == "custom_agent.py")
    out = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out == ["2 + 3 = 5", "['user', 'assistant', 'tool', 'assistant']"]
