"""Concurrency, cancellation, interrupts and trajectories of the turn loop."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from hermes_adapters.llm.scripted import FunctionModel, ScriptedModel, call, reply, tool_calls
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_adapters.trajectories.jsonl import JsonlTrajectorySink
from hermes_core import Agent, AgentSettings, FunctionTool, ToolSpec
from hermes_core.invariants import CANCELLED_RESULT, validate
from hermes_core.messages import AssistantMessage, ToolMessage
from hermes_core.ports.llm import ModelRequest, ModelResponse

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


def gate_tool(name: str, started: anyio.Event, release: anyio.Event, **kw: Any) -> FunctionTool:
    async def handler(args: dict[str, Any], ctx: Any) -> str:
        started.set()
        await release.wait()
        return f"{name} done"

    return FunctionTool(ToolSpec(name=name, description=f"{name} tool", **kw), handler)


def quick_tool(name: str, **kw: Any) -> FunctionTool:
    async def handler(args: dict[str, Any], ctx: Any) -> str:
        return f"{name} done"

    return FunctionTool(ToolSpec(name=name, description=f"{name} tool", **kw), handler)


async def test_turns_on_one_agent_run_in_arrival_order() -> None:
    order: list[str] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        text = str(request.messages[-1].content)
        order.append(f"start {text}")
        await anyio.sleep(0.02)
        order.append(f"end {text}")
        return ModelResponse(AssistantMessage(content=f"re {text}"))

    agent = Agent(FunctionModel(respond))
    async with anyio.create_task_group() as group:
        for text in ("a", "b", "c"):
            group.start_soon(agent.run_conversation, text)
            await anyio.sleep(0.001)  # fix the arrival order
    assert order == ["start a", "end a", "start b", "end b", "start c", "end c"]


async def test_separate_agents_overlap() -> None:
    running = 0
    peak = 0

    async def respond(request: ModelRequest) -> ModelResponse:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.05)
        running -= 1
        return ModelResponse(AssistantMessage(content="ok"))

    agents = [Agent(FunctionModel(respond)) for _ in range(2)]
    async with anyio.create_task_group() as group:
        for agent in agents:
            group.start_soon(agent.run_conversation, "x")
    assert peak == 2  # both model calls were in flight at once


async def test_host_cancellation_answers_open_calls_persists_and_propagates() -> None:
    store = InMemorySessionStore()
    started, never = anyio.Event(), anyio.Event()
    quick_started = anyio.Event()
    tools = [
        gate_tool("slow", started, never, parallel_safe=True),
        gate_tool("slow2", quick_started, never, parallel_safe=True),
    ]
    model = ScriptedModel([tool_calls(call("slow", id="c1"), call("slow2", id="c2"))])
    agent = Agent(model, tools, sessions=store, session_id="s1")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(agent.run_conversation, "go")
            with anyio.fail_after(5):
                await started.wait()
                await quick_started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    stored = await store.get_conversation("s1")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool"]
    assert all(isinstance(m, ToolMessage) and m.content == CANCELLED_RESULT for m in stored[2:])
    assert validate(stored) == []
    # the next turn resumes from the valid transcript
    model.add(reply("resumed"))
    result = await agent.run_conversation("again")
    assert result["final_response"] == "resumed"
    assert validate(model.last_request.messages) == []


async def test_cancellation_during_model_call_keeps_user_message() -> None:
    store = InMemorySessionStore()
    entered = anyio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        entered.set()
        await anyio.sleep(30)
        raise AssertionError("not reached")

    agent = Agent(FunctionModel(respond), sessions=store, session_id="s1")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(agent.run_conversation, "hello")
            with anyio.fail_after(5):
                await entered.wait()
            scope.cancel()
    stored = await store.get_conversation("s1")
    assert [(m.role, m.content) for m in stored] == [("user", "hello")]


async def test_interrupt_skips_unstarted_tools_and_returns_partial() -> None:
    started, release = anyio.Event(), anyio.Event()
    tools = [gate_tool("first", started, release), quick_tool("second")]
    model = ScriptedModel([tool_calls(call("first", id="c1"), call("second", id="c2"))])
    agent = Agent(model, tools)
    results: list[dict[str, Any]] = []

    async def run() -> None:
        results.append(await agent.run_conversation("go"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        with anyio.fail_after(5):
            await started.wait()
        agent.interrupt("stop please")
        release.set()
    result = results[0]
    assert result["interrupted"] is True
    assert result["interrupt_message"] == "stop please"
    assert result["turn_exit_reason"] == "interrupted_by_user"
    contents = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert contents[0] == "first done"
    assert contents[1] == "[Tool execution cancelled — second was skipped due to user interrupt]"
    assert result["messages"][-1] == {
        "role": "assistant",
        "content": "Operation interrupted.",
        "finish_reason": "stop",
    }
    model.assert_complete()


async def test_interrupt_before_the_model_call_stops_without_calling() -> None:
    model = ScriptedModel([])
    agent = Agent(model)
    agent.interrupt()
    result = await agent.run_conversation("hi")
    assert result["interrupted"] is True and result["api_calls"] == 0
    assert model.calls == []


async def test_parallel_results_follow_call_order_not_completion_order() -> None:
    async def make(args: dict[str, Any], ctx: Any) -> str:
        await anyio.sleep(args["delay"])
        return str(args["delay"])

    spec = ToolSpec(
        name="wait",
        description="wait",
        parameters={"type": "object", "properties": {"delay": {"type": "number"}}},
        parallel_safe=True,
    )
    delays = [0.05, 0.0, 0.03, 0.01]
    calls = [call("wait", {"delay": d}, id=f"c{i}") for i, d in enumerate(delays)]
    model = ScriptedModel([tool_calls(*calls), reply("ok")])
    result = await Agent(model, [FunctionTool(spec, make)]).run_conversation("x")
    tools = [m for m in result["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["c0", "c1", "c2", "c3"]
    assert [m["content"] for m in tools] == [str(d) for d in delays]


async def test_trajectories_are_written_for_finished_turns(tmp_path: Any) -> None:
    model = ScriptedModel([tool_calls(call("first", id="c1"), reasoning="plan"), reply("answer")])
    agent = Agent(
        model,
        [quick_tool("first")],
        trajectories=JsonlTrajectorySink(tmp_path),
        settings=AgentSettings(save_trajectories=True),
    )
    await agent.run_conversation("question")
    lines = (tmp_path / "trajectory_samples.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert record["completed"] is True and record["model"] == "scripted-model"
    turns = [(t["from"], t["value"]) for t in record["conversations"]]
    assert [f for f, _ in turns] == ["system", "human", "gpt", "tool", "gpt"]
    assert turns[1][1] == "question"
    assert turns[2][1].startswith("<think>\nplan\n</think>\n<tool_call>\n")
    assert '"name": "first"' in turns[2][1]
    assert turns[4][1] == "<think>\n</think>\nanswer"
    assert not (tmp_path / "failed_trajectories.jsonl").exists()


async def test_close_is_idempotent_and_closes_owned_resources() -> None:
    model = ScriptedModel([])
    agent = Agent(model, owned=[model])
    await agent.close()
    await agent.close()
    assert model.closed
    with pytest.raises(Exception, match="closed"):
        await agent.run_conversation("x")


async def test_secrets_in_tool_output_never_reach_the_model_or_the_dataset(
    tmp_path: Any,
) -> None:
    leaked = "sk-proj-" + "Z" * 40

    async def cat_env(args: dict[str, Any], ctx: Any) -> str:
        return f"OPENAI_API_KEY={leaked}\nHOME=/root"

    tool = FunctionTool(ToolSpec(name="cat_env", description="prints env"), cat_env)
    model = ScriptedModel([tool_calls(call("cat_env", id="c1")), reply(f"the key is {leaked}")])
    agent = Agent(
        model,
        [tool],
        trajectories=JsonlTrajectorySink(tmp_path),
        settings=AgentSettings(save_trajectories=True),
    )
    result = await agent.run_conversation("show env")
    assert leaked not in str(model.calls[1].messages[-1].content)
    assert "HOME=/root" in result["messages"][2]["content"]
    assert leaked not in (tmp_path / "trajectory_samples.jsonl").read_text()
