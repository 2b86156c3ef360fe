"""Turning a model's tool calls into runnable calls, and running one call safely.

Model mistakes are observations, not crashes: an unknown name, arguments that are not
JSON or fail the schema, a handler that raises, a tool that hangs. Each becomes an error
result the model reads on its next call, and the turn goes on. Fixes that keep the
transcript valid for strict providers (unique call ids, ``{}`` for empty arguments, a
repaired tool name) are applied to the assistant message itself before it is stored.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from hermes_core.arguments import schema_problems
from hermes_core.events import ToolFinished, ToolStarted, TurnEvent
from hermes_core.messages import AssistantMessage, ToolCall
from hermes_core.ports.tools import Tool, ToolContext, ToolResult, tool_error
from hermes_core.redact import redact
from hermes_core.registry import ToolRegistry
from hermes_core.results import truncate_result

__all__ = [
    "PreparedCall",
    "interrupted_result",
    "prepare_calls",
    "run_call",
    "unique_call_ids",
]


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A call ready to run (``tool`` and ``args`` set) or already answered (``error``)."""

    index: int
    call: ToolCall
    tool: Tool | None
    args: dict[str, Any] | None
    error: ToolResult | None = None


def unique_call_ids(calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """Give repeated (or empty) ids a ``_d<n>`` suffix so every result pairs with one call."""
    seen: set[str] = set()
    out: list[ToolCall] = []
    for position, call in enumerate(calls):
        base = call.id or f"call_{position}"
        new_id, n = base, 1
        while new_id in seen:
            new_id, n = f"{base}_d{n}", n + 1
        seen.add(new_id)
        out.append(call if new_id == call.id else call.model_copy(update={"id": new_id}))
    return tuple(out)


def _unknown_tool(name: str, available: list[str]) -> ToolResult:
    if not name.strip():
        return tool_error(
            "The tool name was empty. Do not re-emit this call; pick a tool from the list "
            "you were given, by its exact name."
        )
    listing = ", ".join(sorted(available)) or "(none)"
    return tool_error(f"Tool '{name}' does not exist. Available tools: {listing}")


def _bad_json(error: str) -> ToolResult:
    return tool_error(
        f"Error: Invalid JSON arguments. {error}. For tools with no required parameters, use "
        "an empty object: {}. Please retry with valid JSON."
    )


def _prepare_one(
    index: int, call: ToolCall, registry: ToolRegistry, offered: set[str]
) -> tuple[ToolCall, PreparedCall]:
    name = registry.repair_name(call.name) if call.name not in offered else call.name
    if name is not None and name not in offered:
        name = None
    if name is not None and name != call.name:
        call = call.model_copy(update={"name": name})
    if not call.arguments.strip():
        call = call.model_copy(update={"arguments": "{}"})
    if name is None:
        return call, PreparedCall(index, call, None, None, _unknown_tool(call.name, list(offered)))
    tool = registry.get(name)
    assert tool is not None  # offered names come from the registry
    try:
        args = json.loads(call.arguments)
    except ValueError as exc:
        return call, PreparedCall(index, call, tool, None, _bad_json(str(exc)))
    if not isinstance(args, dict):
        return call, PreparedCall(
            index, call, tool, None, _bad_json(f"arguments must be a JSON object, got {args!r}")
        )
    problems = schema_problems(tool.spec.parameters, args)
    if problems:
        error = tool_error(
            f"Invalid arguments for tool '{name}': {'; '.join(problems)}. "
            "Fix them and call the tool again.",
            expected=tool.spec.parameters,
        )
        return call, PreparedCall(index, call, tool, None, error)
    return call, PreparedCall(index, call, tool, args)


def prepare_calls(
    message: AssistantMessage, registry: ToolRegistry, offered: set[str]
) -> tuple[AssistantMessage, list[PreparedCall]]:
    """Fix the message's calls and classify each; ``offered`` are the names the model saw."""
    calls = unique_call_ids(message.tool_calls)
    fixed: list[ToolCall] = []
    prepared: list[PreparedCall] = []
    for index, call in enumerate(calls):
        call, ready = _prepare_one(index, call, registry, offered)
        fixed.append(call)
        prepared.append(ready)
    if tuple(fixed) != message.tool_calls:
        message = message.model_copy(update={"tool_calls": tuple(fixed)})
    return message, prepared


def interrupted_result(name: str) -> ToolResult:
    return ToolResult(
        f"[Tool execution cancelled — {name} was skipped due to user interrupt]", is_error=True
    )


async def run_call(
    prepared: PreparedCall,
    ctx: ToolContext,
    *,
    default_timeout: float | None,
    emit: Callable[[TurnEvent], None] | None,
    redact_secrets: bool = True,
) -> ToolResult:
    """Run one prepared call; every failure except cancellation becomes an error result.

    Known secret shapes are redacted from the output before the model (or the store, or a
    dataset) sees it.
    """
    if prepared.error is not None or prepared.tool is None or prepared.args is None:
        return prepared.error or tool_error("Tool call could not be prepared")
    spec = prepared.tool.spec
    timeout = spec.timeout if spec.timeout is not None else default_timeout
    if emit is not None:
        emit(ToolStarted(prepared.call.id, spec.name))
    started = time.perf_counter()
    # A bare deadline scope rather than anyio.fail_after: the same semantics for a scope
    # this function owns, at a third of the cost per call (fail_after wraps the scope in
    # a generator context manager).
    deadline = math.inf if timeout is None else anyio.current_time() + timeout
    try:
        with anyio.CancelScope(deadline=deadline) as scope:
            result = ToolResult.of(await prepared.tool(dict(prepared.args), ctx))
        if scope.cancelled_caught:
            result = tool_error(f"Tool '{spec.name}' timed out after {timeout:g}s")
    except Exception as exc:
        result = tool_error(f"Tool execution failed: {type(exc).__name__}: {exc}")
    content = redact(result.content) if redact_secrets else result.content
    result = ToolResult(truncate_result(content, spec.max_result_chars), result.is_error)
    if emit is not None:
        elapsed = time.perf_counter() - started
        emit(ToolFinished(prepared.call.id, spec.name, elapsed, result.is_error))
    return result
