"""ToolContract for the agent-level tools: todo, clarify, delegate_task."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_adapters.tools.clarify import ClarifyTool
from hermes_adapters.tools.delegate import DelegateTool
from hermes_adapters.tools.todo import TodoTool
from hermes_core.ports.tools import Tool
from hermes_core.testing import ToolContract


class TestTodoContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return TodoTool()

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"todos": [{"id": "1", "content": "x", "status": "pending"}]}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {"todos": "nope"},
            {"todos": [{"id": "1"}]},
            {"todos": [{"id": "1", "content": "x", "status": "finished"}]},
        ]


class TestClarifyContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return ClarifyTool()

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"question": "Which one?"}  # headless: a readable refusal, still a result

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [{"question": ""}, {"question": "q", "choices": ["a", "b", "c", "d", "e"]}]


class TestDelegateContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return DelegateTool()

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"goal": "summarise"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [{}, {"tasks": [{"context": "no goal"}]}]
