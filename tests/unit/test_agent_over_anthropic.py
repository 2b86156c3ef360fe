"""One agent turn end to end over the real HTTP path: Agent -> AnthropicMessagesModel -> socket.

The loopback simulator is a strict Messages server: it rejects ``tool_use`` ids left
without a ``tool_result`` in the next user message, thinking blocks whose signature does not
match the text it issued, a thinking-enabled tool loop whose assistant turn does not start
with thinking, and more than four cache breakpoints. So these tests prove the engine and
the adapter agree on the transcript, not only that each works alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from hermes_adapters.llm.anthropic_messages import AnthropicMessagesModel
from hermes_adapters.testing.anthropic_sim import AnthropicSimulator, signature_for
from hermes_core import Agent, AgentSettings
from hermes_core.messages import Usage
from hermes_core.testing.llm import TextReply, ToolCallReply
from hermes_core.testing.sample_tools import add_tool

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

THOUGHT = "I should use the add tool."


def _cache_markers(body: Mapping[str, Any]) -> int:
    blocks = list(body.get("system") or [])
    for message in body["messages"]:
        blocks += message["content"]
    return sum(1 for b in blocks if "cache_control" in b)


@pytest.mark.parametrize("thinking", [False, True], ids=["plain", "thinking"])
@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_tool_turn_over_loopback(streaming: bool, thinking: bool) -> None:
    sim = AnthropicSimulator()
    sim.play(
        ToolCallReply(
            [("toolu_1", "add", '{"a": 2, "b": 3}')],
            text="Let me add that.",
            reasoning=THOUGHT,
            usage=Usage(input_tokens=40, output_tokens=10, cache_write_tokens=900),
        ),
        TextReply(
            "2 + 3 = 5.", usage=Usage(input_tokens=60, output_tokens=6, cache_read_tokens=900)
        ),
    )
    settings = AgentSettings(reasoning={"effort": "low"} if thinking else None)
    chunks: list[str] = []
    async with sim.serve() as base_url:
        model = AnthropicMessagesModel(
            "claude-sonnet-4-5", base_url=base_url, api_key="sk-ant-loopback"
        )
        async with Agent(model, [add_tool()], settings=settings, owned=[model]) as agent:
            result = await agent.run_conversation(
                "What is 2+3?", stream_callback=chunks.append if streaming else None
            )

    assert result["final_response"] == "2 + 3 = 5."
    assert result["completed"] is True and result["api_calls"] == 2
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert result["input_tokens"] == 100 and result["output_tokens"] == 16
    if streaming:
        assert "".join(chunks) == "Let me add that.2 + 3 = 5."

    first, second = sim.requests
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "sk-ant-loopback"
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert first.body.get("stream", False) is streaming
    assert [t["name"] for t in first.body["tools"]] == ["add"]
    assert ("thinking" in first.body) is thinking
    assert first.body["system"] == second.body["system"], "the system prompt must stay stable"
    replayed = second.body["messages"]
    assert [m["role"] for m in replayed] == ["user", "assistant", "user"]
    assert replayed[1]["content"][:3] == [
        {"type": "thinking", "thinking": THOUGHT, "signature": signature_for(THOUGHT)},
        {"type": "text", "text": "Let me add that."},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "add",
            "input": {"a": 2, "b": 3},
            "cache_control": {"type": "ephemeral"},  # one of the last two markable turns
        },
    ]
    result_block = replayed[2]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "toolu_1"
    assert json.loads(result_block["content"]) == {"sum": 5}
    assert sim.replayed_reasoning(1) == THOUGHT
    assert all(_cache_markers(r.body) <= 4 for r in sim.requests)
    assert sim.pending == 0


@pytest.mark.parametrize("thinking", [False, True], ids=["plain", "thinking"])
async def test_summary_after_the_budget_is_spent_is_accepted_by_the_strict_server(
    thinking: bool,
) -> None:
    """The last, tool-free call still defines the tools (the transcript holds tool_use and
    tool_result blocks, which the server refuses otherwise) and forbids calling them."""
    sim = AnthropicSimulator()
    sim.play(
        ToolCallReply([("toolu_1", "add", '{"a": 2, "b": 3}')], reasoning=THOUGHT),
        TextReply("I added 2 and 3: 5."),
    )
    settings = AgentSettings(max_iterations=1, reasoning={"effort": "low"} if thinking else None)
    async with sim.serve() as base_url:
        model = AnthropicMessagesModel(
            "claude-sonnet-4-5", base_url=base_url, api_key="sk-ant-loopback"
        )
        async with Agent(model, [add_tool()], settings=settings, owned=[model]) as agent:
            result = await agent.run_conversation("What is 2+3?")

    assert result["final_response"] == "I added 2 and 3: 5."
    assert result["turn_exit_reason"].startswith("max_iterations_reached")
    first, summary = sim.requests
    assert summary.body["tools"] == first.body["tools"], "the tools prefix must not change"
    assert summary.body["tool_choice"] == {"type": "none"}
    assert "tool_choice" not in first.body
    assert ("thinking" in summary.body) is thinking
    assert sim.pending == 0
