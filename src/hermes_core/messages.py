"""The internal message model: OpenAI-shaped, vendor-neutral, immutable.

Every adapter translates to and from these types; the engine, the stores and the
trajectory converter only ever see them. They are frozen pydantic models so a transcript
can be shared between the engine, a store and a trajectory sink without defensive copies.

The dict codec (:func:`message_to_dict` / :func:`message_from_dict`) speaks the OpenAI
chat format users already hold (``{"role": "assistant", "content": ..., "tool_calls":
[...]}``) and is lossless: provider replay data (``reasoning_details``, Anthropic thinking
blocks, Responses reasoning items) and unknown keys survive a round trip untouched, because
dropping any of them breaks the next request to a strict provider (WIRE.md §4 items 10-12).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from hermes_core.errors import TranscriptError

__all__ = [
    "PROVIDER_DATA_KEYS",
    "AssistantMessage",
    "ContentPart",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "Usage",
    "UserMessage",
    "message_from_dict",
    "message_to_dict",
    "messages_from_dicts",
    "messages_to_dicts",
    "text_of",
]

ContentPart: TypeAlias = dict[str, Any]
"""One multimodal part (``{"type": "text", "text": ...}``, ``{"type": "image_url", ...}``)."""

PROVIDER_DATA_KEYS: tuple[str, ...] = (
    "reasoning_content",
    "reasoning_details",
    "anthropic_content_blocks",
    "codex_reasoning_items",
    "codex_message_items",
    "refusal",
)
"""Assistant keys that carry provider replay data; adapters send them back verbatim."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    # Weak references let adapters cache a message's wire encoding for exactly as long as
    # the message lives (frozen models with dict fields cannot be dict keys).
    __slots__ = ("__weakref__",)


class Usage(_Frozen):
    """Token usage in the canonical buckets.

    ``input_tokens`` excludes cached input: a provider that reports cache reads inside its
    input count (OpenAI) is normalised by its adapter, so the buckets add up to the prompt.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Everything the model read: fresh input plus cache reads and writes."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


class ToolCall(_Frozen):
    """One function call requested by the model.

    ``arguments`` is the raw JSON string exactly as the model produced it, so a transcript
    replays byte-for-byte; :meth:`parsed_arguments` gives the parsed view. ``extra`` keeps
    provider keys of the call (``call_id``, ``response_item_id``, Gemini's
    ``extra_content``).
    """

    id: str
    name: str
    arguments: str = "{}"
    extra: dict[str, Any] = Field(default_factory=dict)

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict; empty text means ``{}``; ``None`` if not a JSON object."""
        text = self.arguments.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


class SystemMessage(_Frozen):
    role: Literal["system"] = "system"
    content: str
    extra: dict[str, Any] = Field(default_factory=dict)


class UserMessage(_Frozen):
    role: Literal["user"] = "user"
    content: str | tuple[ContentPart, ...]
    extra: dict[str, Any] = Field(default_factory=dict)


class AssistantMessage(_Frozen):
    """A model reply: text, reasoning, tool calls and opaque provider replay data."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    provider_data: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)


class ToolMessage(_Frozen):
    """The result of one tool call, paired to it by ``tool_call_id``."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str | tuple[ContentPart, ...]
    name: str | None = None
    is_error: bool = False
    extra: dict[str, Any] = Field(default_factory=dict)


Message: TypeAlias = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]

_MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)


def text_of(content: str | Sequence[ContentPart] | None) -> str:
    """Flatten message content to text; non-text parts are skipped."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        str(part.get("text", "")) for part in content if part.get("type") in {"text", "input_text"}
    )


# -- dict codec ------------------------------------------------------------------------

_TOOL_CALL_KEYS = {"id", "type", "function"}
_KNOWN_KEYS: dict[str, set[str]] = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "reasoning", "tool_calls", "finish_reason"}
    | set(PROVIDER_DATA_KEYS),
    "tool": {"role", "tool_call_id", "content", "name", "is_error"},
}


def _tool_call_to_dict(call: ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    out.update(call.extra)
    return out


def _tool_call_from_dict(raw: Mapping[str, Any]) -> ToolCall:
    function = raw.get("function") or {}
    arguments = function.get("arguments", "{}")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    extra = {k: v for k, v in raw.items() if k not in _TOOL_CALL_KEYS}
    return ToolCall(
        id=str(raw.get("id") or ""),
        name=str(function.get("name") or ""),
        arguments=arguments,
        extra=extra,
    )


def _content_out(content: str | tuple[ContentPart, ...] | None) -> Any:
    return list(content) if isinstance(content, tuple) else content


def message_to_dict(message: Message) -> dict[str, Any]:
    """The OpenAI-style dict of ``message``; optional keys appear only when set."""
    out: dict[str, Any] = {"role": message.role, "content": _content_out(message.content)}
    if isinstance(message, AssistantMessage):
        if message.reasoning is not None:
            out["reasoning"] = message.reasoning
        if message.finish_reason is not None:
            out["finish_reason"] = message.finish_reason
        out.update(message.provider_data)
        if message.tool_calls:
            out["tool_calls"] = [_tool_call_to_dict(c) for c in message.tool_calls]
    elif isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
        if message.name is not None:
            out["name"] = message.name
        if message.is_error:
            out["is_error"] = True
    out.update(message.extra)
    return out


def message_from_dict(raw: Mapping[str, Any]) -> Message:
    """Parse one OpenAI-style message dict.

    Raises:
        TranscriptError: the dict has no known role or a field of the wrong type.
    """
    role = raw.get("role")
    known = _KNOWN_KEYS.get(role) if isinstance(role, str) else None
    if known is None:
        raise TranscriptError(
            f"message has role {role!r}; expected one of system, user, assistant, tool"
        )
    data: dict[str, Any] = {"role": role, "extra": {k: v for k, v in raw.items() if k not in known}}
    content = raw.get("content")
    if isinstance(content, list):
        content = tuple(content)
    if role == "assistant":
        data["content"] = content
        data["reasoning"] = raw.get("reasoning")
        data["finish_reason"] = raw.get("finish_reason")
        data["provider_data"] = {k: raw[k] for k in PROVIDER_DATA_KEYS if k in raw}
        data["tool_calls"] = tuple(_tool_call_from_dict(c) for c in raw.get("tool_calls") or ())
    else:
        data["content"] = "" if content is None else content
        if role == "tool":
            data["tool_call_id"] = raw.get("tool_call_id") or ""
            data["name"] = raw.get("name")
            data["is_error"] = bool(raw.get("is_error", False))
    try:
        return _MESSAGE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise TranscriptError(f"invalid {role} message: {exc.errors()[0]['msg']}") from exc


def messages_to_dicts(messages: Iterable[Message]) -> list[dict[str, Any]]:
    return [message_to_dict(m) for m in messages]


def messages_from_dicts(raws: Iterable[Mapping[str, Any]]) -> list[Message]:
    return [message_from_dict(r) for r in raws]
