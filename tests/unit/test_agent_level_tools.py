"""todo, clarify and delegate_task: the tools that talk to the agent or the user."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from hermes_adapters.llm.scripted import FunctionModel, ScriptedModel, call, reply, tool_calls
from hermes_adapters.tools.clarify import HEADLESS_REFUSAL, ClarifyTool
from hermes_adapters.tools.delegate import DelegateTool
from hermes_adapters.tools.todo import TodoTool
from hermes_core import Agent, AgentSettings, FunctionTool, IterationBudget, ToolSpec
from hermes_core.messages import AssistantMessage, ToolMessage, UserMessage
from hermes_core.ports.llm import ModelRequest, ModelResponse
from hermes_core.ports.tools import ToolContext

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


def ctx(**services: Any) -> ToolContext:
    return ToolContext(task_id="t", services=services)


async def test_todo_replaces_merges_and_summarises() -> None:
    todo = TodoTool()
    items = [
        {"id": "1", "content": "read", "status": "completed"},
        {"id": "2", "content": "write", "status": "pending"},
    ]
    first = json.loads((await todo({"todos": items}, ctx())).content)
    assert first["summary"] == {
        "total": 2,
        "pending": 1,
        "in_progress": 0,
        "completed": 1,
        "cancelled": 0,
    }
    merged = await todo(
        {"todos": [{"id": "2", "content": "write", "status": "in_progress"}], "merge": True},
        ctx(),
    )
    assert [t["status"] for t in json.loads(merged.content)["todos"]] == [
        "completed",
        "in_progress",
    ]
    read_back = json.loads((await todo({}, ctx())).content)
    assert len(read_back["todos"]) == 2
    bad = await todo({"todos": [{"id": "3", "content": "x", "status": "done"}]}, ctx())
    assert bad.is_error and "not one of" in bad.content


async def test_clarify_asks_the_host_and_refuses_when_headless() -> None:
    asked: list[tuple[str, Sequence[str] | None]] = []

    async def clarifier(question: str, choices: Sequence[str] | None = None) -> str:
        asked.append((question, choices))
        return "blue"

    tool = ClarifyTool()
    answer = await tool(
        {"question": "Which colour?", "choices": ["red", "blue"]}, ctx(clarifier=clarifier)
    )
    assert json.loads(answer.content) == {"question": "Which colour?", "answer": "blue"}
    assert asked == [("Which colour?", ["red", "blue", "Other"])]
    headless = await tool({"question": "Which colour?"}, ctx())
    assert headless.is_error and HEADLESS_REFUSAL in headless.content
    too_many = await tool({"question": "q", "choices": list("abcde")}, ctx(clarifier=clarifier))
    assert too_many.is_error


def _lookup_tool() -> FunctionTool:
    async def lookup(args: dict[str, Any], c: Any) -> str:
        return f"facts about {args['topic']}"

    spec = ToolSpec(
        name="lookup",
        description="look up",
        parameters={"type": "object", "properties": {"topic": {"type": "string"}}},
        parallel_safe=True,
    )
    return FunctionTool(spec, lookup)


async def test_delegate_runs_isolated_children_in_order_with_a_shared_budget() -> None:
    seen_by_children: list[list[str]] = []
    child_tools: list[set[str]] = []
    peak = running = 0

    async def brain(request: ModelRequest) -> ModelResponse:
        nonlocal peak, running
        first_user = next(m for m in request.messages if isinstance(m, UserMessage))
        text = str(first_user.content)
        if text.startswith("Research"):  # a child
            seen_by_children.append([str(m.content) for m in request.messages[1:]])
            child_tools.append({s.name for s in request.tools})
            running += 1
            peak = max(peak, running)
            await anyio.sleep(0.02)
            running -= 1
            return ModelResponse(AssistantMessage(content=f"summary of {text}"))
        if isinstance(request.messages[-1], ToolMessage):
            return ModelResponse(AssistantMessage(content="all done"))
        args = {
            "tasks": [
                {"goal": "Research A"},
                {"goal": "Research B", "context": "ctx-B"},
                {"goal": "Research C"},
            ]
        }
        return ModelResponse(
            AssistantMessage(tool_calls=(call("delegate_task", args, id="d1"),)), "tool_calls"
        )

    budget = IterationBudget(10)
    tools = [DelegateTool(max_concurrent=2), ClarifyTool(), _lookup_tool()]
    parent = Agent(FunctionModel(brain), tools, budget=budget)
    result = await parent.run_conversation("Please research A, B and C")
    payload = json.loads(result["messages"][2]["content"])
    assert [r["summary"] for r in payload["results"]] == [
        "summary of Research A",
        "summary of Research B\n\nContext:\nctx-B",
        "summary of Research C",
    ]
    assert all(r["status"] == "completed" for r in payload["results"])
    # children never saw the parent's conversation, only their own goal
    assert all(len(seen) == 1 and seen[0].startswith("Research") for seen in seen_by_children)
    # children cannot delegate or ask the user
    assert all(tools == {"lookup"} for tools in child_tools)
    assert peak == 2
    assert budget.used == 2 + 3  # two parent calls, one per child


async def test_children_stop_when_the_shared_budget_is_spent() -> None:
    model = ScriptedModel(
        [
            tool_calls(call("delegate_task", {"goal": "Research X"}, id="d1")),
            tool_calls(call("lookup", {"topic": "x"}, id="l1")),  # child, budget now spent
            reply("child summary"),  # the child's tool-free summary call
            reply("parent summary"),  # the parent's tool-free summary call
        ]
    )
    parent = Agent(
        model, [DelegateTool(), _lookup_tool()], settings=AgentSettings(max_iterations=2)
    )
    result = await parent.run_conversation("go")
    assert result["turn_exit_reason"].startswith("max_iterations_reached")
    assert model.calls[2].tool_choice == "none"  # the child was forced to summarise
    assert [s.name for s in model.calls[2].tools] == [s.name for s in model.calls[1].tools]
    assert model.calls[3].tool_choice == "none"  # and so was the parent
    child_result = json.loads(result["messages"][2]["content"])["results"][0]
    assert child_result["summary"] == "child summary"
    model.assert_complete()


async def test_delegate_refuses_bad_arguments_and_missing_parent() -> None:
    tool = DelegateTool()
    assert (await tool({"goal": "x"}, ctx())).is_error
    parent = Agent(ScriptedModel([]))
    assert "give a `goal`" in (await tool({}, ctx(agent=parent))).content
