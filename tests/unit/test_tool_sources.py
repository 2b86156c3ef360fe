"""Dynamic tool sources (MCP-like) enter the registry; collisions fail closed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_core import Agent, FunctionTool, ToolSpec
from hermes_core.ports.tools import ToolResult

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


class FakeSource:
    def __init__(self, name: str, tools: list[str], *, broken: bool = False) -> None:
        self._name = name
        self._tools = tools
        self._broken = broken
        self.calls: list[tuple[str, Mapping[str, Any]]] = []

    @property
    def name(self) -> str:
        return self._name

    async def list_tools(self) -> list[ToolSpec]:
        if self._broken:
            raise ConnectionError("server is down")
        return [
            ToolSpec(name=t, description=f"{t} from {self._name}", toolset=f"mcp-{self._name}")
            for t in self._tools
        ]

    async def call(self, name: str, args: Mapping[str, Any]) -> ToolResult:
        self.calls.append((name, args))
        return ToolResult(json.dumps({"result": f"{name} ran"}))

    async def aclose(self) -> None:
        return None


async def _builtin(args: dict[str, Any], ctx: Any) -> str:
    return "builtin ran"


async def test_source_tools_are_offered_and_called() -> None:
    source = FakeSource("time", ["mcp__time__now"])
    model = ScriptedModel([tool_calls(call("mcp__time__now", {}, id="c1")), reply("it is now")])
    result = await Agent(model, tool_sources=[source]).run_conversation("time?")
    assert [s.name for s in model.calls[0].tools] == ["mcp__time__now"]
    assert source.calls == [("mcp__time__now", {})]
    assert json.loads(result["messages"][2]["content"]) == {"result": "mcp__time__now ran"}


async def test_collisions_keep_the_builtin_and_dead_sources_are_skipped() -> None:
    builtin = FunctionTool(ToolSpec(name="shared", description="builtin"), _builtin)
    clash = FakeSource("x", ["shared", "mcp__x__other"])
    dead = FakeSource("dead", ["mcp__dead__t"], broken=True)
    model = ScriptedModel([tool_calls(call("shared", {}, id="c1")), reply("ok")])
    result = await Agent(model, [builtin], tool_sources=[clash, dead]).run_conversation("x")
    assert sorted(s.name for s in model.calls[0].tools) == ["mcp__x__other", "shared"]
    assert result["messages"][2]["content"] == "builtin ran"
    assert clash.calls == []
