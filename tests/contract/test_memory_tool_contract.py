"""The memory tool held to the tool contract.

The contract's context carries no services, so the tool has no store: a valid call gets
the "Memory is not available" error result (the contract accepts any result for valid
arguments), and invalid calls (a bad action, a bad target) must come back as errors.
"""

from __future__ import annotations

from typing import Any

import pytest

from hermes_adapters.tools.memory import MemoryTool
from hermes_core.ports.tools import Tool
from hermes_core.testing.tools import ToolContract


class TestMemoryTool(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return MemoryTool()

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"action": "add", "target": "memory", "content": "Project uses uv"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {"action": "rename", "target": "memory", "content": "x"},
            {"action": "add", "target": "notes", "content": "x"},
        ]
