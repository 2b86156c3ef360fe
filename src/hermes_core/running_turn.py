"""The working memory of one running turn, and how it becomes the result dict.

Kept apart from the driver (:mod:`hermes_core.agent`) so the bookkeeping rules — one
result per open call in call order, the budget note inside the last result, the exact
keys of the result dict users know — live in one small place.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hermes_core.budget import IterationBudget, pressure_note
from hermes_core.compression import message_chars
from hermes_core.dispatch import PreparedCall, interrupted_result
from hermes_core.invariants import CANCELLED_RESULT
from hermes_core.messages import Message, ToolMessage, Usage, messages_to_dicts
from hermes_core.ports.tools import ToolResult
from hermes_core.results import cap_batch
from hermes_core.turn import Outcome

__all__ = ["RunningTurn", "StreamCallback", "new_session_id", "strip_think"]

StreamCallback = Callable[[str], Awaitable[None] | None]

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>\s*", re.DOTALL)


def strip_think(text: str) -> str:
    """Visible text without inline reasoning blocks."""
    return _THINK.sub("", text).strip()


def new_session_id() -> str:
    """``YYYYMMDD_HHMMSS_<6hex>``, the id shape users know."""
    return f"{time.strftime('%Y%m%d_%H%M%S', time.localtime())}_{uuid.uuid4().hex[:6]}"


def _with_note(content: str, note: str) -> str:
    """Put the budget note inside a JSON object result, or append it to text."""
    stripped = content.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if isinstance(value, dict):
            value["_budget_warning"] = note
            return json.dumps(value, ensure_ascii=False)
    return f"{content}\n\n{note}"


@dataclass(slots=True)
class RunningTurn:
    """Mutable state of one turn: the transcript, what is not yet persisted, counters."""

    task_id: str
    user_text: str
    system_message: str | None
    stream_callback: StreamCallback | None
    budget: IterationBudget
    transcript: list[Message] = field(default_factory=list)
    start: int = 0
    """Index of this turn's user message in ``transcript``."""
    pending: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    api_calls: int = 0
    final_response: str | None = None
    last_reasoning: str | None = None
    open_calls: list[PreparedCall] = field(default_factory=list)
    slots: list[ToolResult | None] = field(default_factory=list)

    chars: int = 0
    """``message_chars`` summed over ``transcript``; :meth:`add` keeps it current."""

    def add(self, message: Message) -> None:
        self.transcript.append(message)
        self.pending.append(message)
        self.chars += message_chars(message)

    def set_transcript(self, transcript: list[Message]) -> None:
        """Replace the transcript (history assembled, compaction) and recount."""
        self.transcript = transcript
        self.chars = sum(message_chars(m) for m in transcript)

    def close_tool_group(self, *, batch_cap: int, cancelled: bool = False) -> None:
        """Append one result per open call, in call order, and clear the open group.

        Calls that never ran get the "cancelled" result (host cancellation) or the
        "skipped due to user interrupt" note; the budget note goes inside the last result.
        """
        if not self.open_calls:
            return
        results: list[ToolResult] = []
        for prepared, slot in zip(self.open_calls, self.slots, strict=True):
            if slot is not None:
                results.append(slot)
            elif cancelled:
                results.append(ToolResult(CANCELLED_RESULT, is_error=True))
            else:
                results.append(interrupted_result(prepared.call.name))
        texts = cap_batch([r.content for r in results], batch_cap)
        note = None if cancelled else pressure_note(self.budget)
        if note is not None:
            texts[-1] = _with_note(texts[-1], note)
        for prepared, result, text in zip(self.open_calls, results, texts, strict=True):
            self.add(
                ToolMessage(
                    tool_call_id=prepared.call.id,
                    name=prepared.call.name,
                    content=text,
                    is_error=result.is_error,
                )
            )
        self.open_calls, self.slots = [], []

    def result(self, outcome: Outcome, **identity: Any) -> dict[str, Any]:
        """The result dict users know; ``identity`` adds session, model and provider keys."""
        usage = self.usage
        return {
            "final_response": self.final_response,
            "last_reasoning": self.last_reasoning,
            "messages": messages_to_dicts(self.transcript),
            "api_calls": self.api_calls,
            "completed": outcome.completed and self.final_response is not None,
            "partial": outcome.partial,
            "interrupted": outcome.interrupted,
            "failed": outcome.failed,
            "error": outcome.error,
            "turn_exit_reason": outcome.exit_reason,
            "task_id": self.task_id,
            **identity,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
        }
