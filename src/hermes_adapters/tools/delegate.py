"""The ``delegate_task`` tool: child agents with isolated context and a shared budget.

A child sees only its goal and the context the parent writes for it, so the parent's
history does not leak into (or bloat) the child's requests. Children spend the parent's
:class:`~hermes_core.budget.IterationBudget`, so fan-out cannot multiply the spend; run at
most ``max_concurrent`` at once; and get a restricted tool set: they cannot delegate
further, ask the user, or write memory. Each child's summary returns in task order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import anyio

from hermes_core.agent import Agent
from hermes_core.ports.tools import ToolContext, ToolResult, ToolSpec, tool_error

__all__ = ["BLOCKED_FOR_CHILDREN", "DelegateTool"]

BLOCKED_FOR_CHILDREN = frozenset({"delegate_task", "clarify", "memory", "send_message"})
CHILD_PROMPT = (
    "You are a focused sub-agent working on one task for a parent agent. Work only on the "
    "goal below, use your tools as needed, and finish with a concise summary of what you "
    "found or did: the parent sees only that summary."
)

SPEC = ToolSpec(
    name="delegate_task",
    toolset="delegation",
    description=(
        "Hand one task (goal) or several (tasks) to sub-agents with fresh context. Give each "
        "the context it needs: it cannot see this conversation. Returns each summary in order."
    ),
    parameters={
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "context": {"type": "string"},
            "tasks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"goal": {"type": "string"}, "context": {"type": "string"}},
                    "required": ["goal"],
                },
            },
            "toolsets": {"type": "array", "items": {"type": "string"}},
        },
    },
)


class DelegateTool:
    """Spawns child :class:`~hermes_core.agent.Agent` runs from the calling agent."""

    def __init__(
        self,
        *,
        max_concurrent: int = 3,
        max_depth: int = 1,
        max_iterations: int = 50,
        max_summary_chars: int = 24_000,
        child_tools: Iterable[str] | None = None,
    ) -> None:
        self.max_concurrent = max_concurrent
        self.max_depth = max_depth
        self.max_iterations = max_iterations
        self.max_summary_chars = max_summary_chars
        self.child_tools = set(child_tools) if child_tools is not None else None

    @property
    def spec(self) -> ToolSpec:
        return SPEC

    async def available(self) -> bool:
        return True

    def _tasks(self, args: dict[str, Any]) -> list[dict[str, str]] | str:
        tasks = args.get("tasks")
        if tasks:
            if not isinstance(tasks, list):
                return "`tasks` must be a list of {goal, context} objects"
            out = []
            for i, task in enumerate(tasks):
                goal = str((task or {}).get("goal") or "").strip()
                if not goal:
                    return f"tasks[{i}] has no goal"
                out.append({"goal": goal, "context": str(task.get("context") or "")})
            return out
        goal = str(args.get("goal") or "").strip()
        if not goal:
            return "give a `goal` (one task) or `tasks` (several)"
        return [{"goal": goal, "context": str(args.get("context") or "")}]

    def _child(self, parent: Agent, ctx: ToolContext, depth: int) -> Agent:
        names = [n for n in parent.tools.names if n not in BLOCKED_FOR_CHILDREN]
        if self.child_tools is not None:
            names = [n for n in names if n in self.child_tools]
        settings = replace(
            parent.settings,
            max_iterations=self.max_iterations,
            save_trajectories=False,
            identity=CHILD_PROMPT,
            context=None,
            source="tool",
        )
        return Agent(
            parent.model,
            parent.tools.subset(names),
            settings=settings,
            budget=ctx.service("budget"),
            services={"delegate_depth": depth},
        )

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        parent = ctx.service("agent")
        if not isinstance(parent, Agent):
            return tool_error("delegate_task needs a parent agent; none is attached")
        depth = int(ctx.service("delegate_depth") or 0) + 1
        if depth > self.max_depth:
            return tool_error(f"delegation depth {self.max_depth} reached: do the task yourself")
        tasks = self._tasks(args)
        if isinstance(tasks, str):
            return tool_error(tasks)
        results: list[dict[str, Any] | None] = [None] * len(tasks)
        limiter = anyio.CapacityLimiter(self.max_concurrent)

        async def run(index: int, task: dict[str, str]) -> None:
            async with limiter:
                child = self._child(parent, ctx, depth)
                prompt = task["goal"] + (
                    f"\n\nContext:\n{task['context']}" if task["context"] else ""
                )
                outcome = await child.run_conversation(
                    prompt, task_id=f"{ctx.task_id}:child{index}"
                )
                await child.close()
            summary = str(outcome.get("final_response") or outcome.get("error") or "")
            results[index] = {
                "task_index": index,
                "goal": task["goal"],
                "status": "completed" if outcome["completed"] else "incomplete",
                "summary": summary[: self.max_summary_chars],
                "api_calls": outcome["api_calls"],
            }

        async with anyio.create_task_group() as group:
            for index, task in enumerate(tasks):
                group.start_soon(run, index, task)
        return ToolResult.of({"results": results})
