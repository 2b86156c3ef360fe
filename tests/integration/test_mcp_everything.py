"""MCPToolSource against the reference ``@modelcontextprotocol/server-everything`` and
``mcp-server-time``: listing, echo, progress, sampling, elicitation, structured content,
and both error shapes (``isError`` and JSON-RPC), over every transport the servers speak.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from mcp_support import HttpServer, everything_stdio, http_config, require_time_server

from hermes_adapters.llm.scripted import ScriptedModel, reply
from hermes_adapters.mcp import MCPServerConfig, MCPToolSource
from hermes_core.events import ToolProgress
from hermes_core.messages import SystemMessage, UserMessage

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

EVERYTHING_TOOLS = {
    "echo",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "trigger-long-running-operation",
}


def ev(name: str) -> str:
    return f"mcp__everything__{name.replace('-', '_')}"


def payload(result: Any) -> Any:
    return json.loads(result.content)


@pytest.fixture
def everything_config(request: pytest.FixtureRequest) -> Any:
    def make(transport: str) -> MCPServerConfig:
        if transport == "stdio":
            return everything_stdio()
        fixture = "everything_http" if transport == "streamable_http" else "everything_sse"
        server: HttpServer = request.getfixturevalue(fixture)
        return http_config(server, transport)

    return make


@pytest.mark.parametrize("transport", ["stdio", "streamable_http", "sse"])
async def test_listing_echo_and_progress_over_each_transport(
    transport: str, everything_config: Any
) -> None:
    events: list[ToolProgress] = []
    config = everything_config(transport)
    async with MCPToolSource("everything", config, on_event=events.append) as source:
        specs = {s.name: s for s in await source.list_tools()}
        assert {ev(t) for t in EVERYTHING_TOOLS} <= set(specs)
        assert ev("list_resources") in specs and ev("get_prompt") in specs
        for spec in specs.values():
            assert spec.parameters["type"] == "object"
            assert isinstance(spec.parameters["properties"], dict)

        echoed = await source.call(ev("echo"), {"message": "hi"})
        assert payload(echoed) == {"result": "Echo: hi"}

        done = await source.call(
            ev("trigger-long-running-operation"), {"duration": 0.3, "steps": 3}
        )
        assert "Long running operation completed" in payload(done)["result"]
        assert [(e.progress, e.total) for e in events] == [(1, 3), (2, 3), (3, 3)]


async def test_sampling_is_served_by_the_host_model_with_a_token_cap(
    everything_http: HttpServer,
) -> None:
    model = ScriptedModel([reply("sampled by hermes")])
    config = http_config(everything_http, "streamable_http")
    async with MCPToolSource("everything", config, sampler=model) as source:
        names = {s.name for s in await source.list_tools()}
        assert ev("trigger-sampling-request") in names
        result = await source.call(
            ev("trigger-sampling-request"), {"prompt": "say hi", "maxTokens": 100_000}
        )
    assert not result.is_error
    assert "sampled by hermes" in payload(result)["result"]
    request = model.last_request
    assert request.max_tokens == 4096
    assert isinstance(request.messages[0], SystemMessage)
    assert isinstance(request.messages[1], UserMessage)
    assert "say hi" in str(request.messages[1].content)
    model.assert_complete()


async def test_sampling_without_a_model_is_not_offered(everything_sse: HttpServer) -> None:
    async with MCPToolSource("everything", http_config(everything_sse, "sse")) as source:
        names = {s.name for s in await source.list_tools()}
    assert ev("trigger-sampling-request") not in names


async def test_sampling_rate_limit_refuses_excess_requests(everything_sse: HttpServer) -> None:
    model = ScriptedModel([reply("one")])
    config = http_config(everything_sse, "sse", sampling={"max_rpm": 1})
    async with MCPToolSource("everything", config, sampler=model) as source:
        await source.list_tools()
        first = await source.call(ev("trigger-sampling-request"), {"prompt": "a"})
        second = await source.call(ev("trigger-sampling-request"), {"prompt": "b"})
    assert "one" in payload(first)["result"]
    assert second.is_error and "rate limit" in second.content
    model.assert_complete()


async def test_elicitation_is_declined_headless(everything_http: HttpServer) -> None:
    config = http_config(everything_http, "streamable_http")
    async with MCPToolSource("everything", config) as source:
        await source.list_tools()
        result = await source.call(ev("trigger-elicitation-request"), {})
    assert not result.is_error
    assert "declined" in payload(result)["result"]


async def test_structured_content_image_and_is_error(everything_http: HttpServer) -> None:
    config = http_config(everything_http, "streamable_http")
    async with MCPToolSource("everything", config) as source:
        await source.list_tools()
        structured = payload(
            await source.call(ev("get-structured-content"), {"location": "Chicago"})
        )
        expected = {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}
        assert structured["structuredContent"] == expected
        assert json.loads(structured["result"]) == expected

        image = payload(await source.call(ev("get-tiny-image"), {}))["result"]
        assert "[image: image/png, " in image and "base64" not in image

        bad = await source.call(ev("echo"), {})  # missing "message": an isError result
        assert bad.is_error and "-32602" in payload(bad)["error"]

        resources = payload(await source.call(ev("list_resources"), {}))
        assert resources and all("uri" in r for r in resources)
        first = resources[0]["uri"]
        read = payload(await source.call(ev("read_resource"), {"uri": first}))
        assert read["result"]
        prompts = payload(await source.call(ev("list_prompts"), {}))
        assert "simple-prompt" in {p["name"] for p in prompts}
        rendered = payload(await source.call(ev("get_prompt"), {"name": "simple-prompt"}))
        assert rendered["result"].startswith("user: ")


async def test_time_server_over_stdio() -> None:
    require_time_server()
    config = MCPServerConfig(
        command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
        resources=False,
        prompts=False,
    )
    async with MCPToolSource("time", config) as source:
        names = sorted(s.name for s in await source.list_tools())
        assert names == ["mcp__time__convert_time", "mcp__time__get_current_time"]
        now = payload(await source.call("mcp__time__get_current_time", {"timezone": "UTC"}))
        assert json.loads(now["result"])["timezone"] == "UTC"
        bad = await source.call("mcp__time__get_current_time", {"timezone": "Not/AZone"})
        assert bad.is_error and "Not/AZone" in payload(bad)["error"]
