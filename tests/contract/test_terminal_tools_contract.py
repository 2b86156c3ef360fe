"""The ``terminal`` toolset's tools pass :class:`ToolContract`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_adapters.tools.terminal import ProcessRegistry, ProcessTool, TerminalTool
from hermes_core.ports.tools import Tool
from hermes_core.testing.tools import ToolContract


class TestTerminalContract(ToolContract):
    @pytest.fixture
    def tool(self, tmp_path: Path) -> Tool:
        return TerminalTool(ProcessRegistry(), workspace_root=tmp_path, kill_grace=1.0)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"command": "echo ok"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {},
            {"command": 1},
            {"command": "   "},
            {"command": "ls", "timeout": 10_000},
            {"command": "ls", "workdir": "../.."},
            {"command": "rm -rf /"},
        ]

    @pytest.fixture
    def slow_args(self) -> dict[str, Any] | None:
        return {"command": "sleep 5"}


class TestProcessContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return ProcessTool(ProcessRegistry())

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"action": "list"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {},
            {"action": "explode"},
            {"action": "poll"},
            {"action": "poll", "session_id": "proc_missing"},
            {"action": "log", "session_id": 7},
        ]
