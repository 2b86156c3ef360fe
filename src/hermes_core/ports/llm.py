"""The model port: one request object in, one response (or a stream of deltas) out.

A single frozen :class:`ModelRequest` replaces a long argument list, so adding a setting
never breaks an adapter's signature. Adapters own the wire format and map vendor errors to
:mod:`hermes_core.errors`; the engine only sees these types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from hermes_core.messages import AssistantMessage, Message, Usage
from hermes_core.ports.tools import ToolSpec

__all__ = [
    "CacheHints",
    "ChatModel",
    "FinishReason",
    "ModelRequest",
    "ModelResponse",
    "ReasoningDelta",
    "ResponseComplete",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
]

FinishReason: TypeAlias = Literal["stop", "tool_calls", "length", "content_filter"]


@dataclass(frozen=True, slots=True)
class CacheHints:
    """Where the byte-stable prefix ends, for providers with explicit prompt caching.

    ``stable_system_chars`` is the length of the system prompt's stable tier (identity,
    tool guidance, skills); ``cache_key`` feeds providers that key caches by name.
    """

    stable_system_chars: int | None = None
    cache_key: str | None = None
    ttl: Literal["5m", "1h"] | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model call needs. ``tools=()`` means a tool-free call."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str | None = None
    max_tokens: int | None = None
    reasoning: Mapping[str, Any] | None = None
    tool_choice: Literal["auto", "none", "required"] | None = None
    cache: CacheHints | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Sampling and vendor settings passed through (temperature, top_p, extra_body...)."""


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One complete model reply."""

    message: AssistantMessage
    finish_reason: FinishReason = "stop"
    usage: Usage = field(default_factory=Usage)
    model: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Visible text as it arrives."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning (thinking) text as it arrives; never shown as the answer."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of tool call ``index``; ``id``/``name`` arrive once, arguments in pieces."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ResponseComplete:
    """The last event of every stream: the assembled reply."""

    response: ModelResponse


StreamEvent: TypeAlias = TextDelta | ReasoningDelta | ToolCallDelta | ResponseComplete


@runtime_checkable
class ChatModel(Protocol):
    """A chat model behind some wire format.

    ``stream`` yields deltas and always ends with :class:`ResponseComplete`; an adapter
    whose stream ends without its terminal event raises ``IncompleteStream``.
    ``aclose`` is idempotent.
    """

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    @property
    def api_mode(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...
