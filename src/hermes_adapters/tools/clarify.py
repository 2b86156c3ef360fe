"""The ``clarify`` tool: ask the user a question through the host's Clarifier.

A headless agent has no one to ask. It must not block on a hidden prompt, so the tool
answers with a refusal the model can act on: assume, say so, and go on.
"""

from __future__ import annotations

from typing import Any

from hermes_core.ports.tools import ToolContext, ToolResult, ToolSpec, tool_error

__all__ = ["HEADLESS_REFUSAL", "ClarifyTool"]

MAX_CHOICES = 4
HEADLESS_REFUSAL = (
    "clarify is not available: no user is attached to this agent (headless run). Make the "
    "most reasonable assumption, state it in your answer, and continue."
)

SPEC = ToolSpec(
    name="clarify",
    toolset="clarify",
    description=(
        "Ask the user a clarifying question when the request is ambiguous. Offer up to 4 "
        "choices when they help; the user may also answer freely."
    ),
    parameters={
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_CHOICES},
            "multi_select": {"type": "boolean", "default": False},
        },
        "required": ["question"],
    },
)


class ClarifyTool:
    """Routes the question to ``ctx.service("clarifier")``."""

    @property
    def spec(self) -> ToolSpec:
        return SPEC

    async def available(self) -> bool:
        return True

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        question = str(args.get("question") or "").strip()
        if not question:
            return tool_error("`question` is required and cannot be empty")
        choices = args.get("choices") or []
        if not isinstance(choices, list) or len(choices) > MAX_CHOICES:
            return tool_error(f"`choices` must be a list of at most {MAX_CHOICES} strings")
        clarifier = ctx.service("clarifier")
        if clarifier is None:
            return tool_error(HEADLESS_REFUSAL)
        offered = [str(c) for c in choices]
        if offered:
            offered.append("Other")
        answer = await clarifier(question, offered or None)
        return ToolResult.of({"question": question, "answer": str(answer)})
