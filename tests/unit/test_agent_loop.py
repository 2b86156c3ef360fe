"""The turn loop end to end over ScriptedModel and small in-test tools."""

from __future__ import annotations

import itertools
import json
from typing import Any

import anyio
import pytest

from hermes_adapters.llm.scripted import ScriptedModel, call, raise_error, reply, tool_calls
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_core import Agent, AgentSettings, FunctionTool, ToolSpec
from hermes_core.agent import SUMMARY_FALLBACK
from hermes_core.errors import ContextTooLong
from hermes_core.events import ToolFinished, TurnEvent, TurnFinished
from hermes_core.invariants import validate
from hermes_core.messages import Usage, messages_from_dicts
from hermes_core.testing.sample_tools import add_tool

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


def echo_tool(name: str = "echo", **spec_kw: Any) -> FunctionTool:
    async def handler(args: dict[str, Any], ctx: Any) -> str:
        return str(args.get("text", ""))

    return FunctionTool(
        ToolSpec(
            name=name,
            description="Echo text.",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
            **spec_kw,
        ),
        handler,
    )


async def test_plain_text_turn_returns_the_familiar_result_dict() -> None:
    model = ScriptedModel([reply("Hello!", usage=Usage(input_tokens=10, output_tokens=2))])
    async with Agent(model) as agent:
        result = await agent.run_conversation("hi")
    assert result["final_response"] == "Hello!"
    assert result["completed"] is True
    assert result["api_calls"] == 1
    assert result["turn_exit_reason"] == "text_response(finish_reason=stop)"
    assert result["input_tokens"] == 10 and result["output_tokens"] == 2
    assert [m["role"] for m in result["messages"]] == ["user", "assistant"]
    assert result["interrupted"] is False and result["failed"] is False
    model.assert_complete()


async def test_tool_round_trip_appends_result_and_answers() -> None:
    model = ScriptedModel(
        [tool_calls(call("add", {"a": 2, "b": 3}, id="c1")), reply("The sum is 5.")]
    )
    agent = Agent(model, [add_tool()])
    result = await agent.run_conversation("what is 2+3?")
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tool_msg = result["messages"][2]
    assert tool_msg["tool_call_id"] == "c1"
    assert json.loads(tool_msg["content"]) == {"sum": 5}
    assert result["final_response"] == "The sum is 5."
    # the second request carried the tool result
    second = model.calls[1]
    assert second.messages[-1].role == "tool"


async def test_request_n_plus_one_extends_request_n_byte_for_byte() -> None:
    model = ScriptedModel(
        [
            tool_calls(call("add", {"a": 1, "b": 1}, id="c1")),
            tool_calls(call("add", {"a": 2, "b": 2}, id="c2")),
            reply("done"),
        ]
    )
    agent = Agent(model, [add_tool()])
    await agent.run_conversation("go")
    model.add(reply("again done"))
    await agent.run_conversation("again")
    dumps = [[m.model_dump_json() for m in r.messages] for r in model.calls]
    for earlier, later in itertools.pairwise(dumps):
        assert later[: len(earlier)] == earlier
    tool_lists = {tuple(s.name for s in r.tools) for r in model.calls}
    assert len(tool_lists) == 1


async def test_unknown_tool_becomes_an_observation_and_turn_goes_on() -> None:
    model = ScriptedModel([tool_calls(call("nope", {}, id="c1")), reply("sorry")])
    agent = Agent(model, [add_tool()])
    result = await agent.run_conversation("x")
    content = json.loads(result["messages"][2]["content"])
    assert content["error"] == "Tool 'nope' does not exist. Available tools: add"
    assert result["final_response"] == "sorry"


async def test_tool_name_is_repaired_in_the_transcript() -> None:
    model = ScriptedModel([tool_calls(call("Add_Tool", {"a": 1, "b": 2}, id="c1")), reply("3")])
    agent = Agent(model, [add_tool()])
    result = await agent.run_conversation("x")
    assert result["messages"][1]["tool_calls"][0]["function"]["name"] == "add"
    assert json.loads(result["messages"][2]["content"]) == {"sum": 3}


async def test_three_all_invalid_batches_end_the_turn_partial() -> None:
    bad = [tool_calls(call("ghost", {}, id=f"c{i}")) for i in range(3)]
    model = ScriptedModel(bad)
    agent = Agent(model, [add_tool()])
    result = await agent.run_conversation("x")
    assert result["partial"] is True and result["completed"] is False
    assert result["error"] == "Model generated invalid tool call: ghost"
    assert validate(messages_from_dicts(result["messages"])) == []
    model.assert_complete()


async def test_invalid_json_and_schema_errors_are_readable() -> None:
    model = ScriptedModel(
        [
            tool_calls(
                call("add", '{"a": 1,', id="c1"),
                call("add", {"a": "one", "b": 2}, id="c2"),
                call("add", {"a": 1}, id="c3"),
            ),
            reply("ok"),
        ]
    )
    agent = Agent(model, [add_tool()])
    result = await agent.run_conversation("x")
    errors = [json.loads(m["content"])["error"] for m in result["messages"][2:5]]
    assert errors[0].startswith("Error: Invalid JSON arguments.")
    assert "a should be integer" in errors[1]
    assert "missing required argument b" in errors[2]


async def test_empty_arguments_mean_empty_object() -> None:
    model = ScriptedModel([tool_calls(call("echo", "", id="c1")), reply("ok")])
    agent = Agent(model, [echo_tool()])
    result = await agent.run_conversation("x")
    assert result["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert result["messages"][2]["content"] == ""


async def test_duplicate_call_ids_are_made_unique() -> None:
    model = ScriptedModel(
        [
            tool_calls(
                call("echo", {"text": "a"}, id="same"), call("echo", {"text": "b"}, id="same")
            ),
            reply("ok"),
        ]
    )
    agent = Agent(model, [echo_tool(parallel_safe=True)])
    result = await agent.run_conversation("x")
    ids = [c["id"] for c in result["messages"][1]["tool_calls"]]
    assert len(set(ids)) == 2
    assert [m["tool_call_id"] for m in result["messages"][2:4]] == ids
    assert [m["content"] for m in result["messages"][2:4]] == ["a", "b"]


async def test_raising_handler_and_timeout_become_error_results() -> None:
    async def boom(args: dict[str, Any], ctx: Any) -> str:
        raise ValueError("kaput")

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        await anyio.sleep(10)
        return "late"

    tools = [
        FunctionTool(ToolSpec(name="boom", description="fails"), boom),
        FunctionTool(ToolSpec(name="slow", description="hangs", timeout=0.05), slow),
    ]
    model = ScriptedModel(
        [tool_calls(call("boom", id="c1"), call("slow", id="c2")), reply("recovered")]
    )
    result = await Agent(model, tools).run_conversation("x")
    first, second = (json.loads(m["content"])["error"] for m in result["messages"][2:4])
    assert first == "Tool execution failed: ValueError: kaput"
    assert second == "Tool 'slow' timed out after 0.05s"
    assert result["final_response"] == "recovered"


async def test_a_tools_own_timeout_error_is_a_failure_not_our_timeout() -> None:
    # A tool whose HTTP client timed out raised TimeoutError; it must not be reported
    # as the harness's deadline, which it did not reach.
    async def flaky(args: dict[str, Any], ctx: Any) -> str:
        raise TimeoutError("upstream read timed out")

    tools = [FunctionTool(ToolSpec(name="flaky", description="times out", timeout=60), flaky)]
    model = ScriptedModel([tool_calls(call("flaky", id="c1")), reply("done")])
    result = await Agent(model, tools).run_conversation("x")
    error = json.loads(result["messages"][2]["content"])["error"]
    assert error == "Tool execution failed: TimeoutError: upstream read timed out"


async def test_results_over_the_tool_limit_are_truncated_with_marker() -> None:
    async def big(args: dict[str, Any], ctx: Any) -> str:
        return "H" * 500 + "T" * 500

    tool = FunctionTool(ToolSpec(name="big", description="big", max_result_chars=100), big)
    model = ScriptedModel([tool_calls(call("big", id="c1")), reply("ok")])
    result = await Agent(model, [tool]).run_conversation("x")
    content = result["messages"][2]["content"]
    assert content.startswith("H" * 40) and content.endswith("T" * 60)
    assert "[OUTPUT TRUNCATED - 900 chars omitted out of 1000 total]" in content


async def test_budget_exhaustion_makes_one_tool_free_summary_call() -> None:
    steps = [tool_calls(call("add", {"a": 1, "b": 1}, id=f"c{i}")) for i in range(3)]
    model = ScriptedModel([*steps, reply("<think>hm</think>Summary of work.")])
    agent = Agent(model, [add_tool()], settings=AgentSettings(max_iterations=3))
    result = await agent.run_conversation("loop")
    assert result["turn_exit_reason"] == "max_iterations_reached(4/3)"
    assert result["final_response"] == "Summary of work."
    last = model.calls[-1]
    # the tools stay defined (strict servers demand them next to tool history) but may not
    # be called, and the cached prefix is unchanged
    assert last.tool_choice == "none"
    assert last.tools == model.calls[0].tools and [s.name for s in last.tools] == ["add"]
    assert all(call.tool_choice is None for call in model.calls[:-1])
    assert "maximum number of tool-calling iterations" in str(last.messages[-1].content)
    model.assert_complete()


@pytest.mark.parametrize(
    ("text", "final"),
    [("Summary anyway.", "Summary anyway."), (None, SUMMARY_FALLBACK)],
    ids=["with_text", "without_text"],
)
async def test_tool_calls_on_the_summary_call_are_ignored(text: str | None, final: str) -> None:
    steps = [tool_calls(call("add", {"a": 1, "b": 1}, id=f"c{i}")) for i in range(2)]
    stray = tool_calls(call("add", {"a": 9, "b": 9}, id="stray"), text=text)
    model = ScriptedModel([*steps, stray, *([] if text else [stray])])
    agent = Agent(model, [add_tool()], settings=AgentSettings(max_iterations=2))
    result = await agent.run_conversation("loop")
    assert result["final_response"] == final
    assert result["turn_exit_reason"].startswith("max_iterations_reached")
    assert all(call.tool_choice == "none" for call in model.calls[2:])
    last = result["messages"][-1]
    assert last["role"] == "assistant" and last["content"] == final
    assert not last.get("tool_calls")
    assert "stray" not in json.dumps(result["messages"])  # never executed nor stored
    assert validate(messages_from_dicts(result["messages"])) == []
    model.assert_complete()


async def test_budget_pressure_notes_go_inside_the_last_tool_result() -> None:
    steps = [tool_calls(call("add", {"a": 1, "b": 1}, id=f"c{i}")) for i in range(9)]
    model = ScriptedModel([*steps, reply("done")])
    agent = Agent(model, [add_tool()], settings=AgentSettings(max_iterations=10))
    result = await agent.run_conversation("loop")
    tool_contents = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    seventh = json.loads(tool_contents[6])
    assert seventh["_budget_warning"].startswith("[BUDGET: Iteration 7/10. 3 iterations left.")
    ninth = json.loads(tool_contents[8])
    assert "Provide your final response NOW" in ninth["_budget_warning"]
    assert "_budget_warning" not in json.loads(tool_contents[5])


async def test_provider_failure_is_a_failed_result_not_a_crash() -> None:
    model = ScriptedModel([raise_error(ContextTooLong("prompt is too long", status=400))])
    result = await Agent(model).run_conversation("x")
    assert result["failed"] is True and result["completed"] is False
    assert "ContextTooLong" in result["error"]


async def test_streaming_callback_receives_text_deltas() -> None:
    chunks: list[str] = []
    model = ScriptedModel([reply("streamed answer text")])
    result = await Agent(model).run_conversation("x", stream_callback=chunks.append)
    assert "".join(chunks) == "streamed answer text"
    assert len(chunks) > 1
    assert result["final_response"] == "streamed answer text"


async def test_events_report_tools_with_durations_and_turn_end() -> None:
    events: list[TurnEvent] = []
    model = ScriptedModel([tool_calls(call("add", {"a": 1, "b": 2}, id="c1")), reply("3")])
    await Agent(model, [add_tool()], on_event=events.append).run_conversation("x")
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert len(finished) == 1 and finished[0].name == "add" and finished[0].duration >= 0
    assert isinstance(events[-1], TurnFinished) and events[-1].completed


async def test_history_continues_across_turns_and_persists_to_store() -> None:
    store = InMemorySessionStore()
    model = ScriptedModel([reply("first"), reply("second")])
    agent = Agent(model, sessions=store, session_id="s1")
    await agent.run_conversation("one")
    result = await agent.run_conversation("two")
    assert [m["content"] for m in result["messages"]] == ["one", "first", "two", "second"]
    stored = await store.get_conversation("s1")
    assert [m.content for m in stored] == ["one", "first", "two", "second"]
    info = await store.get_session("s1")
    assert info is not None and info.system_prompt == agent.system_prompt
