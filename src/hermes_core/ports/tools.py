"""The tools port: what a tool is, what it gets, what it returns.

A tool is real authority handed to model output, so the port carries what the engine
needs to keep it bounded: whether calls may overlap (``parallel_safe``), which argument
names a path it reads or writes (so overlapping file work stays ordered), and how long a
result may grow before it is truncated. Tools never raise for bad input: they return an
error result the model can read, and the engine turns any exception into one too.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolResult",
    "ToolSpec",
    "tool_error",
]

DEFAULT_MAX_RESULT_CHARS = 100_000
"""Results longer than this are truncated with a visible marker unless a tool says otherwise."""

PathAccess = Literal["read", "write"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Everything the engine and the model need to know about a tool, without its code.

    ``path_access``/``path_argument`` let the scheduler order file reads and writes that
    touch the same path while letting unrelated ones overlap.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    toolset: str = "custom"
    parallel_safe: bool = False
    max_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS
    path_access: PathAccess | None = None
    path_argument: str = "path"
    timeout: float | None = None
    untrusted_output: bool = False

    def function_schema(self) -> dict[str, Any]:
        """The OpenAI ``{"type": "function", "function": {...}}`` definition."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool hands back: text (often JSON) and whether it is an error."""

    content: str
    is_error: bool = False

    @classmethod
    def of(cls, value: Any) -> ToolResult:
        """Coerce a handler's return value: strings pass, anything else becomes JSON."""
        if isinstance(value, ToolResult):
            return value
        if isinstance(value, str):
            return cls(value)
        return cls(json.dumps(value, ensure_ascii=False, default=str))


def tool_error(message: str, **extra: Any) -> ToolResult:
    """An error result in the shape users know: ``{"error": message, ...}``."""
    return ToolResult(json.dumps({"error": message, **extra}, ensure_ascii=False), is_error=True)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Per-call context handed to a tool: who is calling and the host's callbacks.

    ``services`` carries optional collaborators (clarifier, approver, the session store,
    the iteration budget, an event emitter) keyed by name, so a tool asks for what it needs
    without the port growing a parameter per tool.
    """

    task_id: str
    session_id: str | None = None
    tool_call_id: str = ""
    services: Mapping[str, Any] = field(default_factory=dict)

    def service(self, name: str) -> Any:
        return self.services.get(name)


@runtime_checkable
class Tool(Protocol):
    """A callable tool. ``available`` is checked (and cached by the registry) before listing."""

    @property
    def spec(self) -> ToolSpec: ...

    async def available(self) -> bool: ...

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]


class FunctionTool:
    """A tool from a spec and an async handler: the quickest way to compose one by hand.

    The handler may return a string, a JSON-able value or a :class:`ToolResult`.
    """

    def __init__(
        self,
        spec: ToolSpec,
        handler: Handler,
        *,
        check: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self._spec = spec
        self._handler = handler
        self._check = check

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def available(self) -> bool:
        return True if self._check is None else await self._check()

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.of(await self._handler(args, ctx))

    def __repr__(self) -> str:
        return f"FunctionTool({self._spec.name!r}, toolset={self._spec.toolset!r})"
