"""A small tool for tests that need one: ``add`` two integers.

Why this module exists: adapter, engine and caching tests all need a tool with a real
schema to offer the model and run; one shared definition keeps their wire expectations
(name, description, schema) the same everywhere.
"""

from __future__ import annotations

from typing import Any

from hermes_core.ports.tools import FunctionTool, ToolSpec

__all__ = ["ADD_SPEC", "add_tool"]

ADD_SPEC = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
    parallel_safe=True,  # a pure function: calls may run side by side
)


async def _add(args: dict[str, Any], ctx: Any) -> dict[str, int]:
    return {"sum": args["a"] + args["b"]}


def add_tool() -> FunctionTool:
    """``add`` as a runnable tool: ``{"a": 2, "b": 3}`` gives ``{"sum": 5}``."""
    return FunctionTool(ADD_SPEC, _add)
