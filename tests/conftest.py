"""Suite-wide fixtures: the anyio backend and a guard against leaked tasks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def isolated_hermes_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own HERMES_HOME, so nothing reads or writes ~/.hermes."""
    home = tmp_path_factory.mktemp("hermes_home")
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
async def no_leaks() -> AsyncIterator[None]:
    """Fail the test if it leaves tasks running on its loop once it returns.

    Use with ``pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]``.
    """
    before = set(asyncio.all_tasks())
    yield
    for _ in range(5):  # let tasks that are already finishing run to completion
        await anyio.lowlevel.checkpoint()
    current = asyncio.current_task()
    leaked = [
        t
        for t in asyncio.all_tasks() - before
        if t is not current and not t.done() and not _is_runner_task(t)
    ]
    assert not leaked, f"tasks leaked by the test: {leaked}"


def _is_runner_task(task: asyncio.Task[object]) -> bool:
    """anyio's pytest runner keeps its own task alive between test calls."""
    coro = task.get_coro()
    return "TestRunner" in getattr(coro, "__qualname__", "")
