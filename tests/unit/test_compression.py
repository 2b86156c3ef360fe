"""Compression: where to cut (property-tested), and the engine compacting mid-conversation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_adapters.llm.scripted import ScriptedModel, call, raise_error, reply, tool_calls
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_core import Agent, AgentSettings, FunctionTool, ToolSpec
from hermes_core.compression import (
    SUMMARY_PREFIX,
    CompressionSettings,
    apply_summary,
    context_window_for,
    plan_compression,
    prune_tool_results,
    threshold_tokens,
)
from hermes_core.errors import ContextTooLong
from hermes_core.events import Compressed, TurnEvent
from hermes_core.invariants import validate
from hermes_core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

SMALL = CompressionSettings(threshold_tokens=200, protect_first_n=2, protect_last_n=4)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    for turn in range(draw(st.integers(1, 8))):
        out.append(UserMessage(content=f"user {turn} " + "x" * draw(st.integers(0, 300))))
        for step in range(draw(st.integers(0, 3))):
            n = draw(st.integers(1, 3))
            calls = tuple(ToolCall(id=f"c{turn}_{step}_{k}", name="t") for k in range(n))
            out.append(AssistantMessage(tool_calls=calls))
            out += [ToolMessage(tool_call_id=c.id, content="r" * 50) for c in calls]
        out.append(AssistantMessage(content=f"answer {turn}"))
    return out


@given(conversations(), st.integers(1, 6), st.integers(1, 12))
@settings(max_examples=150, deadline=None)
def test_cuts_never_split_a_tool_group_and_keep_the_last_user(
    transcript: list[Message], first: int, last: int
) -> None:
    config = CompressionSettings(threshold_tokens=100, protect_first_n=first, protect_last_n=last)
    plan = plan_compression(transcript, config)
    if plan is None:
        return
    assert [*plan.head, *plan.middle, *plan.tail] == transcript
    for part in (plan.middle, plan.tail):
        assert part and not isinstance(part[0], ToolMessage)
    last_user = max(i for i, m in enumerate(transcript) if isinstance(m, UserMessage))
    assert transcript[last_user] in plan.tail
    compacted = apply_summary(plan, "SUMMARY")
    assert validate(compacted) == []
    assert any(SUMMARY_PREFIX in str(m.content) for m in compacted)


def test_threshold_floors_follow_the_reference() -> None:
    assert threshold_tokens(CompressionSettings(context_window=200_000)) == 150_000
    assert threshold_tokens(CompressionSettings(context_window=1_000_000)) == 500_000
    assert threshold_tokens(CompressionSettings(context_window=32_000)) == int(32_000 * 0.85)
    assert threshold_tokens(CompressionSettings(threshold_tokens=1234)) == 1234
    assert context_window_for("anthropic/claude-sonnet-4") == 200_000
    assert context_window_for("unknown-model", override=4096) == 4096


def test_old_tool_results_become_one_line_stubs() -> None:
    calls = (ToolCall(id="c1", name="terminal", arguments='{"command": "ls -la"}'),)
    messages: list[Message] = [
        UserMessage(content="go"),
        AssistantMessage(tool_calls=calls),
        ToolMessage(tool_call_id="c1", content="x" * 5000),
    ]
    pruned = prune_tool_results(messages)
    assert pruned[2].content == "[terminal] command='ls -la' -> 5000 chars of output (pruned)"
    assert prune_tool_results(messages, keep_last=1)[2].content == "x" * 5000


def _big_tool() -> FunctionTool:
    async def handler(args: dict[str, Any], ctx: Any) -> str:
        return "data " * 100

    return FunctionTool(ToolSpec(name="fetch", description="fetch", parallel_safe=True), handler)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_engine_compacts_into_a_child_session_and_continues_from_the_summary() -> None:
    store = InMemorySessionStore()
    events: list[TurnEvent] = []
    model = ScriptedModel(
        [reply("first answer")]
        + [tool_calls(call("fetch", {}, id=f"f{i}")) for i in range(4)]
        + [reply("second answer"), reply("third answer from the summary")]
    )
    summarizer = ScriptedModel([reply("## Goal\nThe user asked about data.")])
    agent = Agent(
        model,
        [_big_tool()],
        sessions=store,
        session_id="root",
        settings=AgentSettings(compression=SMALL),
        summarizer=summarizer,
        on_event=events.append,
    )
    await agent.run_conversation("first question")
    await agent.run_conversation("second question")
    result = await agent.run_conversation("third question")
    assert result["final_response"] == "third answer from the summary"
    compressions = [e for e in events if isinstance(e, Compressed)]
    assert compressions and compressions[0].reason == "threshold"
    assert "TURNS TO SUMMARIZE" in str(summarizer.calls[0].messages[0].content)
    last_request = model.calls[-1].messages
    assert any("The user asked about data." in str(m.content) for m in last_request)
    assert validate(last_request) == []
    # the continuation is a lineage-linked child the resume logic finds
    assert agent.session_id != "root"
    assert await store.resolve_resume_session_id("root") == agent.session_id
    child = await store.get_conversation(agent.session_id)
    assert validate(child) == [] and child[-1].content == "third answer from the summary"
    parent = await store.get_session("root")
    assert parent is not None and parent.end_reason == "compression"


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_context_too_long_compacts_and_retries() -> None:
    big = CompressionSettings(threshold_tokens=10**9, protect_first_n=1, protect_last_n=2)
    history: list[Message] = []
    for i in range(6):
        history += [UserMessage(content=f"q{i} " + "y" * 400), AssistantMessage(content=f"a{i}")]
    model = ScriptedModel(
        [raise_error(ContextTooLong("prompt is too long", status=400)), reply("fits now")]
    )
    summarizer = ScriptedModel([reply("short summary")])
    agent = Agent(model, settings=AgentSettings(compression=big), summarizer=summarizer)
    result = await agent.run_conversation("final", conversation_history=history)
    assert result["final_response"] == "fits now" and result["completed"]
    assert len(model.calls[1].messages) < len(model.calls[0].messages)
    assert result["api_calls"] == 1


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_a_failed_summary_never_drops_history() -> None:
    history: list[Message] = []
    for i in range(6):
        history += [UserMessage(content=f"q{i} " + "z" * 400), AssistantMessage(content=f"a{i}")]
    model = ScriptedModel([raise_error(ContextTooLong("prompt is too long", status=400))])
    summarizer = ScriptedModel([raise_error(ContextTooLong("summary too long", status=400))])
    agent = Agent(model, settings=AgentSettings(compression=SMALL), summarizer=summarizer)
    result = await agent.run_conversation("final", conversation_history=history)
    assert result["failed"] is True and "ContextTooLong" in result["error"]
    assert json.dumps(result["messages"]).count("z" * 400) == 6
