"""The ``todo`` tool: a small task list the model keeps for itself.

The list lives in the tool instance (one per agent), not in the transcript, so it
survives compression: the model can always read it back whole.
"""

from __future__ import annotations

from typing import Any, Literal

from hermes_core.ports.tools import ToolContext, ToolResult, ToolSpec, tool_error

__all__ = ["TodoTool"]

Status = Literal["pending", "in_progress", "completed", "cancelled"]
STATUSES: tuple[Status, ...] = ("pending", "in_progress", "completed", "cancelled")

SPEC = ToolSpec(
    name="todo",
    toolset="todo",
    description=(
        "Read or update your task list. With no arguments, returns the list. With `todos`, "
        "replaces the list, or with merge=true updates items by id and adds new ones."
    ),
    parameters={
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["id", "content", "status"],
                },
            },
            "merge": {"type": "boolean", "default": False},
        },
    },
)


class TodoTool:
    """One agent's task list."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, str]] = {}

    @property
    def spec(self) -> ToolSpec:
        return SPEC

    async def available(self) -> bool:
        return True

    @property
    def items(self) -> list[dict[str, str]]:
        return [dict(item) for item in self._items.values()]

    def _view(self) -> dict[str, Any]:
        summary = {"total": len(self._items)} | {s: 0 for s in STATUSES}
        for item in self._items.values():
            summary[item["status"]] += 1
        return {"todos": self.items, "summary": summary}

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        todos = args.get("todos")
        if todos is None:
            return ToolResult.of(self._view())
        if not isinstance(todos, list):
            return tool_error("`todos` must be a list of {id, content, status} objects")
        parsed: list[dict[str, str]] = []
        for position, raw in enumerate(todos):
            if not isinstance(raw, dict) or not all(k in raw for k in ("id", "content", "status")):
                return tool_error(f"todos[{position}] needs id, content and status")
            if raw["status"] not in STATUSES:
                return tool_error(
                    f"todos[{position}].status {raw['status']!r} is not one of {', '.join(STATUSES)}"
                )
            parsed.append(
                {"id": str(raw["id"]), "content": str(raw["content"]), "status": str(raw["status"])}
            )
        if not args.get("merge", False):
            self._items = {}
        for item in parsed:
            self._items[item["id"]] = item
        return ToolResult.of(self._view())
