"""Compose an agent by hand from chosen adapters (no container, no config file)."""

from __future__ import annotations

from typing import Any

import anyio

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_core import Agent, FunctionTool, ToolSpec


async def add(args: dict[str, Any], ctx: Any) -> dict[str, int]:
    return {"sum": args["a"] + args["b"]}


ADD = FunctionTool(
    ToolSpec(
        name="add",
        description="Add two integers.",
        parameters={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        parallel_safe=True,
    ),
    add,
)


async def main() -> str:
    model = ScriptedModel([tool_calls(call("add", {"a": 2, "b": 3})), reply("2 + 3 = 5")])
    store = InMemorySessionStore()
    async with Agent(model, [ADD], sessions=store, session_id="demo") as agent:
        answer = await agent.chat("what is 2+3?")
    stored = await store.get_conversation("demo")
    print(answer)
    print([m.role for m in stored])
    return answer


if __name__ == "__main__":
    anyio.run(main)
