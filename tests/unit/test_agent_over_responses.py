"""One agent turn end to end over the real HTTP path: Agent -> OpenAIResponsesModel -> socket.

The loopback simulator is a strict stateless Responses server: it rejects unanswered
function calls and any reasoning item not replayed immediately before the item that
followed it. So these tests prove the engine and the adapter agree on the transcript
(the assistant turn the engine stores must carry the reasoning items back unchanged),
not only that each works alone.
"""

from __future__ import annotations

import json

import pytest

from hermes_adapters.llm.openai_responses import OpenAIResponsesModel
from hermes_adapters.testing.responses_sim import ResponsesSimulator
from hermes_core import Agent, AgentSettings
from hermes_core.messages import Usage
from hermes_core.testing.llm import TextReply, ToolCallReply
from hermes_core.testing.sample_tools import add_tool

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_tool_turn_over_loopback(streaming: bool) -> None:
    sim = ResponsesSimulator()
    sim.play(
        ToolCallReply(
            [("call_1", "add", '{"a": 2, "b": 3}')],
            text="Let me add.",
            reasoning="I should use the add tool.",
            usage=Usage(input_tokens=40, output_tokens=10, cache_read_tokens=8),
        ),
        TextReply("2 + 3 = 5.", usage=Usage(input_tokens=60, output_tokens=6)),
    )
    chunks: list[str] = []
    async with sim.serve() as base_url:
        model = OpenAIResponsesModel("gpt-5", base_url=base_url, api_key="sk-loopback")
        async with Agent(model, [add_tool()], owned=[model]) as agent:
            result = await agent.run_conversation(
                "What is 2+3?", stream_callback=chunks.append if streaming else None
            )

    assert result["final_response"] == "2 + 3 = 5."
    assert result["completed"] is True and result["api_calls"] == 2
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert result["input_tokens"] == 100 and result["output_tokens"] == 16
    if streaming:
        assert "".join(chunks) == "Let me add.2 + 3 = 5."

    first, second = sim.requests
    assert first.path == "/v1/responses"
    assert first.headers["authorization"] == "Bearer sk-loopback"
    assert first.body.get("stream", False) is streaming
    assert first.body["store"] is False
    assert first.body["include"] == ["reasoning.encrypted_content"]
    assert [t["name"] for t in first.body["tools"]] == ["add"]
    assert isinstance(second.body["instructions"], str) and second.body["instructions"]
    replayed = second.body["input"]
    assert [i.get("type", i.get("role")) for i in replayed] == [
        "user",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert replayed[1]["summary"] == [
        {"type": "summary_text", "text": "I should use the add tool."}
    ]
    assert "id" not in replayed[1] and replayed[1]["encrypted_content"]
    assert replayed[3]["call_id"] == "call_1"
    assert replayed[4]["call_id"] == "call_1"
    assert json.loads(replayed[4]["output"]) == {"sum": 5}
    assert sim.replayed_reasoning(1) == "I should use the add tool."
    assert sim.pending == 0


async def test_summary_after_the_budget_is_spent_offers_tools_with_tool_choice_none() -> None:
    sim = ResponsesSimulator()
    sim.play(
        ToolCallReply([("call_1", "add", '{"a": 2, "b": 3}')], reasoning="Add them."),
        TextReply("I added 2 and 3: 5."),
    )
    async with sim.serve() as base_url:
        model = OpenAIResponsesModel("gpt-5", base_url=base_url, api_key="sk-loopback")
        settings = AgentSettings(max_iterations=1)
        async with Agent(model, [add_tool()], settings=settings, owned=[model]) as agent:
            result = await agent.run_conversation("What is 2+3?")

    assert result["final_response"] == "I added 2 and 3: 5."
    assert result["turn_exit_reason"].startswith("max_iterations_reached")
    first, summary = sim.requests
    assert summary.body["tools"] == first.body["tools"], "the tools prefix must not change"
    assert summary.body["tool_choice"] == "none"
    assert sim.pending == 0
