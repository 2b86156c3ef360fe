"""Typed turn events, for hosts, progress displays and tracing.

The engine emits one event per observable step. A host subscribes with an ``on_event``
callback (synchronous, cheap: it runs on the turn's task) or by iterating
``agent.events()``. A failing subscriber is logged and never breaks the turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from hermes_core.messages import Usage

__all__ = [
    "Compressed",
    "ModelRequestStarted",
    "ModelResponded",
    "StageEntered",
    "ToolFinished",
    "ToolProgress",
    "ToolStarted",
    "TurnEvent",
    "TurnFinished",
    "TurnStarted",
]


@dataclass(frozen=True, slots=True)
class TurnStarted:
    task_id: str
    session_id: str | None


@dataclass(frozen=True, slots=True)
class StageEntered:
    """The state machine moved to ``stage`` (see :class:`hermes_core.turn.Stage`)."""

    stage: str


@dataclass(frozen=True, slots=True)
class ModelRequestStarted:
    api_call: int
    message_count: int
    tool_count: int
    streaming: bool


@dataclass(frozen=True, slots=True)
class ModelResponded:
    api_call: int
    finish_reason: str
    tool_calls: int
    duration: float
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """Progress reported by a long tool (an MCP server's progress notification)."""

    call_id: str
    name: str
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    name: str
    duration: float
    is_error: bool


@dataclass(frozen=True, slots=True)
class Compressed:
    """The transcript was compacted; ``session_id`` is the continuation session, if any."""

    messages_before: int
    messages_after: int
    reason: str
    session_id: str | None


@dataclass(frozen=True, slots=True)
class TurnFinished:
    exit_reason: str
    api_calls: int
    completed: bool


TurnEvent: TypeAlias = (
    Compressed
    | TurnStarted
    | StageEntered
    | ModelRequestStarted
    | ModelResponded
    | ToolStarted
    | ToolProgress
    | ToolFinished
    | TurnFinished
)
