"""A real agent turn through MCP sources: the model calls server-everything's echo over each
transport, and name collisions fail closed (the existing owner keeps the name).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp_support import HttpServer, everything_stdio, http_config

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_adapters.mcp import MCPServerConfig, MCPToolSource
from hermes_core import Agent, FunctionTool, ToolSpec
from hermes_core.ports.tools import ToolContext
from hermes_core.toolsets import mcp_toolset

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


@pytest.fixture
def everything_config(request: pytest.FixtureRequest) -> Any:
    def make(transport: str) -> MCPServerConfig:
        if transport == "stdio":
            return everything_stdio()
        fixture = "everything_http" if transport == "streamable_http" else "everything_sse"
        server: HttpServer = request.getfixturevalue(fixture)
        return http_config(server, transport)

    return make


def tool_messages(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in result["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("transport", ["stdio", "streamable_http", "sse"])
async def test_agent_turn_calls_echo_over_each_transport(
    transport: str, everything_config: Any
) -> None:
    model = ScriptedModel(
        [
            tool_calls(call("mcp__everything__echo", {"message": f"via {transport}"}, id="c1")),
            reply("the server echoed"),
        ]
    )
    async with (
        MCPToolSource("everything", everything_config(transport)) as source,
        Agent(model, tool_sources=[source]) as agent,
    ):
        result = await agent.run_conversation("echo something")
    assert result["final_response"] == "the server echoed"
    offered = {s.name for s in model.calls[0].tools}
    assert "mcp__everything__echo" in offered
    (tool,) = tool_messages(result)
    assert tool["tool_call_id"] == "c1"
    assert json.loads(tool["content"]) == {"result": f"Echo: via {transport}"}
    model.assert_complete()
    toolsets = mcp_toolset(source.name, sorted(offered))
    assert "mcp__everything__echo" in toolsets["mcp-everything"].tools


async def _builtin(args: dict[str, Any], ctx: ToolContext) -> str:
    return "the built-in ran"


async def test_a_server_tool_cannot_take_a_builtin_name(hermes_http: HttpServer) -> None:
    # a built-in that happens to own the name the server's echo would register under
    builtin = FunctionTool(ToolSpec(name="mcp__hermes__echo", description="built-in"), _builtin)
    model = ScriptedModel(
        [tool_calls(call("mcp__hermes__echo", {"text": "x"}, id="c1")), reply("done")]
    )
    async with (
        MCPToolSource("hermes", http_config(hermes_http, "streamable_http")) as source,
        Agent(model, [builtin], tool_sources=[source]) as agent,
    ):
        result = await agent.run_conversation("go")
    (tool,) = tool_messages(result)
    assert tool["content"] == "the built-in ran"
    descriptions = {s.name: s.description for s in model.calls[0].tools}
    assert descriptions["mcp__hermes__echo"] == "built-in"
    assert "mcp__hermes__add" in descriptions  # the rest of the server's tools still register


async def test_two_servers_whose_names_sanitise_alike_keep_the_first_owner(
    hermes_sse: HttpServer, everything_http: HttpServer
) -> None:
    # "dup.srv" (our server) and "dup-srv" (server-everything) both become "dup_srv", and both
    # have an "echo" tool: the first registered owner keeps mcp__dup_srv__echo
    model = ScriptedModel(
        [tool_calls(call("mcp__dup_srv__echo", {"text": "who?"}, id="c1")), reply("done")]
    )
    async with (
        MCPToolSource("dup.srv", http_config(hermes_sse, "sse")) as first,
        MCPToolSource("dup-srv", http_config(everything_http, "streamable_http")) as second,
    ):
        async with Agent(model, tool_sources=[first, second]) as agent:
            result = await agent.run_conversation("go")
        assert second.connection.generation == 1  # it was listed; its clashing tools were not
    (tool,) = tool_messages(result)
    assert json.loads(tool["content"]) == {"result": "Echo: who?"}
    specs = [s for s in model.calls[0].tools if s.name == "mcp__dup_srv__echo"]
    assert len(specs) == 1 and specs[0].description == "Echo the text back."
    names = {s.name for s in model.calls[0].tools}
    assert "mcp__dup_srv__get_sum" in names  # non-clashing tools of the second server stay
