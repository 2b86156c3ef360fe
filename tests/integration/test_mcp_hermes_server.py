"""MCPToolSource against our own MCP server over stdio, Streamable HTTP and SSE."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from mcp_support import HttpServer, hermes_stdio, http_config

from hermes_adapters.mcp import MCPServerConfig, MCPToolSource
from hermes_core.events import ToolProgress

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

TRANSPORTS = ["stdio", "streamable_http", "sse"]


@pytest.fixture
def config_for(request: pytest.FixtureRequest) -> Any:
    """Build a config for our server over ``transport`` (HTTP servers are session-wide)."""

    def make(transport: str, **overrides: Any) -> MCPServerConfig:
        if transport == "stdio":
            return hermes_stdio(**overrides)
        fixture = "hermes_http" if transport == "streamable_http" else "hermes_sse"
        server: HttpServer = request.getfixturevalue(fixture)
        return http_config(server, transport, **overrides)

    return make


def payload(result: Any) -> Any:
    return json.loads(result.content)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_tools_results_errors_and_progress(
    transport: str, config_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-never-leak-1234")
    monkeypatch.setenv("HERMES_TEST_VALUE", "from-the-host")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/tmp/xdg")
    stdio_env = {"env": {"SERVER_SETTING": "${env:HERMES_TEST_VALUE}", "PLAIN": "${HOME}"}}
    events: list[ToolProgress] = []
    config = config_for(transport, **(stdio_env if transport == "stdio" else {}))
    async with MCPToolSource("hermes", config, on_event=events.append) as source:
        specs = {s.name: s for s in await source.list_tools()}
        assert {"mcp__hermes__echo", "mcp__hermes__slow", "mcp__hermes__fail"} <= set(specs)
        echo = specs["mcp__hermes__echo"]
        assert echo.toolset == "mcp-hermes" and echo.untrusted_output
        assert echo.parameters["type"] == "object" and "text" in echo.parameters["properties"]
        assert "$schema" not in json.dumps(echo.parameters)

        result = await source.call("mcp__hermes__echo", {"text": "hi"})
        assert not result.is_error and payload(result) == {"result": "Echo: hi"}
        assert payload(await source.call("mcp__hermes__add", {"a": 2, "b": 3})) == {"result": "5"}

        failed = await source.call("mcp__hermes__fail", {"message": "no luck"})
        assert failed.is_error and "no luck" in payload(failed)["error"]

        rpc = await source.call("mcp__hermes__rpc_error", {"message": "bad password=hunter2"})
        assert rpc.is_error
        assert payload(rpc)["error"] == "MCP error -32602: bad password=[REDACTED]"

        structured = payload(await source.call("mcp__hermes__structured", {}))
        weather = {"temperature": 21.5, "conditions": "sunny", "humidity": 40}
        assert structured["structuredContent"] == weather
        assert json.loads(structured["result"]) == weather

        image = payload(await source.call("mcp__hermes__image", {}))
        assert image == {"result": "a pixel\n[image: image/png, 70 bytes]"}

        slow = await source.call("mcp__hermes__slow", {"steps": 3})
        assert payload(slow) == {"result": "done after 3 steps"}
        assert [(e.progress, e.total, e.message) for e in events] == [
            (1, 3, "step 1"),
            (2, 3, "step 2"),
            (3, 3, "step 3"),
        ]
        assert {e.name for e in events} == {"mcp__hermes__slow"}

        unknown = await source.call("mcp__hermes__nope", {})
        assert unknown.is_error and "not offered" in payload(unknown)["error"]

        if transport == "stdio":
            env = await source.call("mcp__hermes__env_names", {})
            check_filtered_environment(set(json.loads(payload(env)["result"])))


def check_filtered_environment(names: set[str]) -> None:
    """The stdio child sees the allow list, XDG_* and its own env; never the host's secrets."""
    assert "OPENAI_API_KEY" not in names and "HERMES_TEST_VALUE" not in names
    assert {"SERVER_SETTING", "PLAIN", "PATH", "XDG_CONFIG_HOME"} <= names
    allowed = {"PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "SHELL", "TMPDIR"}
    # CPython itself may add LC_CTYPE when it coerces the C locale
    extra = names - allowed - {"SERVER_SETTING", "PLAIN", "LC_CTYPE"}
    assert all(n.startswith("XDG_") for n in extra), extra


async def test_missing_interpolated_variable_is_a_clear_connect_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HERMES_MISSING_VAR", raising=False)
    config = hermes_stdio(env={"X": "${env:HERMES_MISSING_VAR}"}, initial_connect_attempts=1)
    async with MCPToolSource("broken", config) as source:
        assert await source.list_tools() == []
        assert source.parked
        result = await source.call("mcp__broken__echo", {"text": "x"})
    assert result.is_error
    assert source.connection.park_reason is not None
    assert "HERMES_MISSING_VAR" in source.connection.park_reason


async def test_include_wins_over_exclude_and_exclude_filters(hermes_http: HttpServer) -> None:
    only = http_config(
        hermes_http,
        "streamable_http",
        tools={"include": ["ec*", "add"], "exclude": ["echo"]},
        resources=False,
    )
    async with MCPToolSource("inc", only) as source:
        names = sorted(s.name for s in await source.list_tools())
    assert names == [
        "mcp__inc__add",
        "mcp__inc__echo",
        "mcp__inc__get_prompt",
        "mcp__inc__list_prompts",
    ]
    dropped = http_config(
        hermes_http,
        "streamable_http",
        tools={"exclude": ["crash", "env_*"]},
        resources=False,
        prompts=False,
    )
    async with MCPToolSource("exc", dropped) as source:
        names = [s.name for s in await source.list_tools()]
    assert "mcp__exc__crash" not in names and "mcp__exc__env_names" not in names
    assert "mcp__exc__echo" in names and "mcp__exc__list_resources" not in names


async def test_colliding_tool_names_are_all_skipped(
    hermes_http: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hermes.mcp")
    # the shared server runs with --collide: "dup.name" and "dup-name" both sanitise to dup_name
    async with MCPToolSource("my.server", http_config(hermes_http, "streamable_http")) as source:
        names = [s.name for s in await source.list_tools()]
        assert "mcp__my_server__echo" in names
        assert not [n for n in names if "dup" in n]
        result = await source.call("mcp__my_server__dup_name", {})
    assert result.is_error
    assert "all map to 'mcp__my_server__dup_name'" in caplog.text


async def test_elicitation_asks_the_clarifier_or_declines_headless(
    hermes_http: HttpServer,
) -> None:
    asked: list[tuple[str, Sequence[str] | None]] = []

    async def clarifier(question: str, choices: Sequence[str] | None = None) -> str:
        asked.append((question, choices))
        return "blue"

    config = http_config(hermes_http, "streamable_http")
    async with MCPToolSource("ui", config, clarifier=clarifier) as source:
        await source.list_tools()
        answered = await source.call("mcp__ui__ask", {"question": "Favourite colour?"})
    assert payload(answered) == {"result": "user said: blue"}
    assert len(asked) == 1 and "Favourite colour?" in asked[0][0]

    async with MCPToolSource("headless", config) as source:
        await source.list_tools()
        declined = await source.call("mcp__headless__ask", {"question": "Favourite colour?"})
    assert payload(declined) == {"result": "user action: decline"}


async def test_calls_to_one_server_are_serialized_unless_parallel(hermes_sse: HttpServer) -> None:
    for parallel in (False, True):
        events: list[ToolProgress] = []
        config = http_config(hermes_sse, "sse", supports_parallel_tool_calls=parallel)
        async with MCPToolSource("ser", config, on_event=events.append) as source:
            await source.list_tools()
            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    tg.start_soon(source.call, "mcp__ser__slow", {"steps": 4, "delay": 0.05})
        order = [e.call_id for e in events]
        first = order[0]
        serialized = order == sorted(order, key=lambda c: c != first)
        assert serialized is (not parallel), order


async def test_headers_are_interpolated_and_sent(
    hermes_http: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_TEST_TOKEN", "tok-123")
    config = http_config(
        hermes_http, "streamable_http", headers={"Authorization": "Bearer ${env:HERMES_TEST_TOKEN}"}
    )
    assert "tok-123" not in repr(config)  # the config keeps the reference, not the secret
    async with MCPToolSource("auth", config) as source:
        await source.list_tools()
        sent = await source.call("mcp__auth__header", {"name": "Authorization"})
    assert payload(sent) == {"result": "Bearer tok-123"}


async def test_idle_session_is_closed_and_reopened_on_demand(hermes_sse: HttpServer) -> None:
    config = http_config(hermes_sse, "sse", idle_timeout_seconds=0.2)
    async with MCPToolSource("idle", config) as source:
        await source.list_tools()
        assert payload(await source.call("mcp__idle__add", {"a": 1, "b": 1})) == {"result": "2"}
        with anyio.fail_after(5):
            for _ in range(500):  # the recycler closes the session after 0.2 s without calls
                if not source.connection.connected:
                    break
                await anyio.sleep(0.01)
        assert not source.connection.connected
        assert payload(await source.call("mcp__idle__add", {"a": 2, "b": 2})) == {"result": "4"}
        assert source.connection.generation == 2
