"""The pure parts of the MCP adapter: configuration, naming, schemas, scrubbing, results.

No server is needed here; these pin the rules the live tests rely on.
"""

from __future__ import annotations

import json

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from hermes_adapters.mcp import MCPConfigError, MCPServerConfig, scrub
from hermes_adapters.mcp._stdio import child_environment
from hermes_adapters.mcp.errors import is_dead_session
from hermes_adapters.mcp.naming import assign_names, normalize_schema, registered_name
from hermes_adapters.mcp.results import to_tool_result


def test_transport_is_inferred_and_keys_are_checked() -> None:
    assert MCPServerConfig(command="srv").effective_transport == "stdio"
    assert MCPServerConfig(url="http://127.0.0.1:1/mcp").effective_transport == "streamable_http"
    sse = MCPServerConfig(url="http://127.0.0.1:1/sse", transport="sse")
    assert sse.effective_transport == "sse"
    assert (sse.timeout, sse.connect_timeout, sse.supports_parallel_tool_calls) == (300, 60, False)
    for bad in (
        {},
        {"command": "srv", "url": "http://x"},
        {"url": "ftp://x"},
        {"url": "http://x", "env": {"A": "b"}},
        {"command": "srv", "keepalive_interval": 1},
        {"command": "srv", "tool": {"exclude": ["x"]}},  # a typo must not pass silently
    ):
        with pytest.raises(ValidationError):
            MCPServerConfig.model_validate(bad)


def test_interpolation_in_env_and_headers() -> None:
    environ = {"TOKEN": "t0k", "HOME": "/home/me"}
    config = MCPServerConfig(command="srv", env={"A": "${env:TOKEN}", "B": "${HOME}/x", "C": "$X"})
    assert config.resolved_env(environ) == {"A": "t0k", "B": "/home/me/x", "C": "$X"}
    http = MCPServerConfig(url="http://h/mcp", headers={"Authorization": "Bearer ${TOKEN}"})
    assert http.resolved_headers(environ) == {"Authorization": "Bearer t0k"}
    with pytest.raises(MCPConfigError, match="'MISSING'"):
        MCPServerConfig(command="srv", env={"A": "${MISSING}"}).resolved_env(environ)


def test_tool_filter_include_wins() -> None:
    config = MCPServerConfig(command="s", tools={"include": ["get_*"], "exclude": ["get_x"]})
    assert config.tools.allows("get_x") and not config.tools.allows("put")
    config = MCPServerConfig(command="s", tools={"exclude": ["danger*"]})
    assert config.tools.allows("safe") and not config.tools.allows("danger_zone")


def test_child_environment_is_an_allow_list() -> None:
    host = {
        "PATH": "/bin",
        "HOME": "/h",
        "LOGNAME": "me",
        "OPENAI_API_KEY": "sk-x",
        "XDG_DATA_HOME": "/d",
        "BASH_FUNC_x%%": "() { :; }",
        "TERM": "() { evil; }",
    }
    env = child_environment({"MINE": "1"}, host)
    assert env == {"PATH": "/bin", "HOME": "/h", "XDG_DATA_HOME": "/d", "MINE": "1"}


def test_names_are_sanitised_and_collisions_all_skipped() -> None:
    assert registered_name("my.server", "get-time") == "mcp__my_server__get_time"
    long = registered_name("s", "x" * 100)
    assert len(long) == 64 and long == registered_name("s", "x" * 100)
    assert long != registered_name("s", "x" * 99 + "y")
    assignment = assign_names("srv", ["a.b", "a-b", "ok", "c d"])
    assert assignment.names == {"mcp__srv__ok": "ok", "mcp__srv__c_d": "c d"}
    assert sorted(raw for raw, _ in assignment.skipped) == ["a-b", "a.b"]


def test_schema_normalisation() -> None:
    assert normalize_schema(None) == {"type": "object", "properties": {}}
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "$id": {"type": "string", "$comment": "a property may be called $id"},
            "n": {"type": "integer"},
        },
        "required": ["n", "ghost"],
        "additionalProperties": False,
    }
    assert normalize_schema(schema) == {
        "type": "object",
        "properties": {"$id": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    assert normalize_schema({"properties": [], "required": "x"}) == {
        "type": "object",
        "properties": {},
    }


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("auth failed for ghp_abcdefghijklmnopqrstuvwx1234", "auth failed for "),
        ("key sk-proj-abc123DEF456ghi789 rejected", "key  rejected"),
        ("Authorization: Bearer abc.def.ghi", "Authorization: Bearer "),
        ("url?token=s3cr3t&page=2", "url?token=&page=2"),
        ("API_KEY=xyz password='p w' secret=\"q\"", "API_KEY= password= secret="),
        ("https://user:hunter2@example.com/x", "https://user:@example.com/x"),
    ],
)
def test_scrub_removes_secrets(raw: str, kept: str) -> None:
    scrubbed = scrub(raw)
    assert "[REDACTED]" in scrubbed
    assert scrubbed.replace("[REDACTED]", "") == kept


def test_scrub_keeps_harmless_text() -> None:
    text = "used tokens=1500 of max_tokens; keys are fine; sk-8 is short"
    assert scrub(text) == text


def test_results_join_text_summarise_binary_and_keep_structure() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="one"),
            types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
            types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
        ],
        structured_content={"k": 1},
        _meta={"trace": "t"},
    )
    out = json.loads(to_tool_result(result).content)
    assert out == {
        "result": "one\n[image: image/png, 5 bytes]\n[audio: audio/wav, 3 bytes]",
        "structuredContent": {"k": 1},
        "_meta": {"trace": "t"},
    }
    only_structured = types.CallToolResult(content=[], structured_content={"k": 2})
    assert json.loads(to_tool_result(only_structured).content) == {"result": {"k": 2}}
    failed = to_tool_result(
        types.CallToolResult(
            content=[types.TextContent(type="text", text="denied: token=abc")], is_error=True
        )
    )
    assert failed.is_error and json.loads(failed.content) == {"error": "denied: token=[REDACTED]"}


def test_dead_session_detection() -> None:
    assert is_dead_session(MCPError(types.CONNECTION_CLOSED, "Connection closed"))
    assert is_dead_session(MCPError(types.INVALID_REQUEST, "Session terminated"))
    assert is_dead_session(MCPError(-32000, "Bad Request: No valid session ID provided"))
    assert is_dead_session(ExceptionGroup("x", [ConnectionResetError()]))
    assert not is_dead_session(MCPError(types.INVALID_PARAMS, "Unknown tool: x"))
    assert not is_dead_session(MCPError(types.CONNECTION_CLOSED, "app error using -32000"))
    assert not is_dead_session(ValueError("boom"))
