"""Chat Completions mapping: core messages to request JSON, reply JSON and SSE to core types.

Pure functions and one small state machine, kept apart from the HTTP code so every rule
here is unit-testable on plain dicts. The rules come from REFERENCE.md §11 and the bug
reports in WIRE.md §4:

* reasoning replay is per host (``reasoning_echo``): DeepSeek-style hosts need
  ``reasoning_content`` back on tool-call turns (400 otherwise, item 12), OpenRouter-style
  hosts want ``reasoning_details`` back verbatim, and strict gateways reject both (422);
* streamed tool calls are assembled by ``index``, but a new ``id`` or a new name after
  complete JSON also starts a call, because some servers send every call at index 0
  (items 6-7); one chunk may carry text and tool deltas together (item 9);
* empty arguments become ``"{}"`` (item 8), and a stream that ends without a finish
  reason and ``[DONE]`` is an :class:`IncompleteStream`, never a silent partial (item 22).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from hermes_adapters.llm._http import SSEEvent, error_from_payload
from hermes_core.errors import IncompleteStream, ModelProtocolError
from hermes_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from hermes_core.ports.llm import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)

__all__ = [
    "ChatStreamAssembler",
    "ReasoningEcho",
    "chat_body",
    "chat_messages",
    "parse_chat_completion",
    "reasoning_text",
    "usage_from_chat",
]

ReasoningEcho: TypeAlias = Literal["none", "reasoning_content", "reasoning_details"]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "end_turn": "stop",
    "eos": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "max_tokens": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "tool_use": "tool_calls",
    "content_filter": "content_filter",
}
_TOOL_CALL_WIRE_KEYS = {"id", "type", "function", "index"}
_DROPPED_CALL_EXTRA = {"call_id", "response_item_id"}


# -- request ----------------------------------------------------------------------------


def _content(content: str | tuple[dict[str, Any], ...]) -> Any:
    return list(content) if isinstance(content, tuple) else content


def _common_extra(message: Message, out: dict[str, Any]) -> dict[str, Any]:
    """Keep the few extra keys the wire knows; ``api_content`` overrides what is sent."""
    if "name" in message.extra and message.role in {"system", "user", "assistant"}:
        out["name"] = message.extra["name"]
    if "api_content" in message.extra:
        out["content"] = message.extra["api_content"]
    return out


def _tool_call(call: ToolCall, keep_extra_content: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments.strip() or "{}"},
    }
    if keep_extra_content and "extra_content" in call.extra:
        out["extra_content"] = call.extra["extra_content"]
    return out


def _assistant(
    message: AssistantMessage, echo: ReasoningEcho, keep_extra_content: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [_tool_call(c, keep_extra_content) for c in message.tool_calls]
    elif message.content is None:
        out["content"] = ""
    data = message.provider_data
    if echo == "reasoning_content" and message.tool_calls:
        replay = data.get("reasoning_content") or message.reasoning or ""
        out["reasoning_content"] = replay if isinstance(replay, str) and replay else " "
    elif echo == "reasoning_details" and data.get("reasoning_details"):
        out["reasoning_details"] = data["reasoning_details"]
    return _common_extra(message, out)


def chat_messages(
    messages: Iterable[Message],
    *,
    reasoning_echo: ReasoningEcho = "none",
    keep_extra_content: bool = False,
) -> list[dict[str, Any]]:
    """The ``messages`` array for ``messages``.

    Reasoning, finish reasons, ``codex_*``/Anthropic replay data and bookkeeping keys are
    stripped; reasoning is echoed only as ``reasoning_echo`` says (see the module doc).
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            out.append(_common_extra(message, {"role": "system", "content": message.content}))
        elif isinstance(message, UserMessage):
            out.append(
                _common_extra(message, {"role": "user", "content": _content(message.content)})
            )
        elif isinstance(message, AssistantMessage):
            out.append(_assistant(message, reasoning_echo, keep_extra_content))
        elif isinstance(message, ToolMessage):
            item = {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": _content(message.content),
            }
            out.append(_common_extra(message, item))
    return out


def chat_body(
    request: ModelRequest,
    *,
    model: str,
    stream: bool,
    reasoning_echo: ReasoningEcho = "none",
    max_tokens_field: str = "max_completion_tokens",
    keep_extra_content: bool = False,
    messages: Any = None,
    tools: Any = None,
) -> dict[str, Any]:
    """The full request JSON. ``request.settings`` pass through; ``extra_body`` merges last.

    ``messages``/``tools``: values to use instead of converting ``request``'s (the adapter
    passes placeholders and splices its cached JSON in).
    """
    body: dict[str, Any] = {
        "model": request.model or model,
        "messages": messages
        if messages is not None
        else chat_messages(
            request.messages,
            reasoning_echo=reasoning_echo,
            keep_extra_content=keep_extra_content,
        ),
    }
    if request.tools:
        body["tools"] = (
            tools if tools is not None else [spec.function_schema() for spec in request.tools]
        )
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
    if request.max_tokens is not None:
        body[max_tokens_field] = request.max_tokens
    reasoning = request.reasoning or {}
    if reasoning.get("enabled") is not False and reasoning.get("effort"):
        body["reasoning_effort"] = reasoning["effort"]
    if request.cache is not None and request.cache.cache_key:
        body["prompt_cache_key"] = request.cache.cache_key
    extra_body: Mapping[str, Any] = {}
    for key, value in request.settings.items():
        if key == "extra_body" and isinstance(value, Mapping):
            extra_body = value
        else:
            body[key] = value
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra_body)
    return body


# -- response ---------------------------------------------------------------------------


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_from_chat(raw: Any) -> Usage:
    """Canonical buckets from a Chat Completions ``usage`` object.

    ``prompt_tokens`` includes cache reads and writes there, so fresh input is what is left
    after subtracting them; DeepSeek reports reads as ``prompt_cache_hit_tokens``.
    """
    if not isinstance(raw, Mapping):
        return Usage()
    prompt = _int(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    cached = _int(details.get("cached_tokens")) or _int(raw.get("prompt_cache_hit_tokens"))
    written = _int(details.get("cache_write_tokens"))
    completion = raw.get("completion_tokens_details")
    completion = completion if isinstance(completion, Mapping) else {}
    return Usage(
        input_tokens=max(0, prompt - cached - written),
        output_tokens=_int(raw.get("completion_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=_int(completion.get("reasoning_tokens")),
    )


def reasoning_text(details: Any) -> str | None:
    """Readable reasoning from OpenRouter-style ``reasoning_details`` items, if any."""
    if not isinstance(details, list):
        return None
    parts = []
    for item in details:
        if not isinstance(item, Mapping):
            continue
        for key in ("text", "summary", "thinking", "content"):
            value = item.get(key)
            if isinstance(value, str) and value:
                parts.append(value)
                break
    return "\n\n".join(parts) or None


def _arguments(raw: Any) -> str:
    if raw is None:
        return "{}"
    if not isinstance(raw, str):
        return json.dumps(raw, ensure_ascii=False)
    return raw if raw.strip() else "{}"


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(slots=True)
class _Reply:
    """The parts of one reply, filled from a JSON body or from stream deltas."""

    content: str | None = None
    refusal: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    reasoning_details: list[Any] | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None

    def response(self) -> ModelResponse:
        """One place decides finish reasons and provider data, for both paths."""
        content = self.content or None
        finish = _FINISH.get(self.finish or "", "stop")
        if self.tool_calls and finish == "stop":
            finish = "tool_calls"  # some hosts say "stop" after tool calls
        elif not self.tool_calls and finish == "tool_calls":
            finish = "stop"
        provider_data: dict[str, Any] = {}
        if self.reasoning_content is not None:
            provider_data["reasoning_content"] = self.reasoning_content
        if self.reasoning_details:
            provider_data["reasoning_details"] = self.reasoning_details
        if self.refusal:
            provider_data["refusal"] = self.refusal
            if content is None and not self.tool_calls:
                content, finish = self.refusal, "content_filter"
        reasoning = (
            self.reasoning or self.reasoning_content or reasoning_text(self.reasoning_details)
        )
        message = AssistantMessage(
            content=content,
            reasoning=reasoning or None,
            tool_calls=tuple(self.tool_calls),
            finish_reason=finish,
            provider_data=provider_data,
        )
        return ModelResponse(message, finish, self.usage, self.model)


def _protocol(provider: str, what: str, data: Any = None) -> ModelProtocolError:
    body = None if data is None else json.dumps(data, default=str)[:2000]
    return ModelProtocolError(f"{provider}: {what}", provider=provider, body=body)


def parse_chat_completion(data: Any, *, provider: str) -> ModelResponse:
    """The :class:`ModelResponse` of a non-streamed ``chat.completion`` body.

    Raises:
        ModelError: the body is an in-band error object (mapped like an HTTP error).
        ModelProtocolError: the body has no usable ``choices[0].message``.
    """
    if not isinstance(data, Mapping):
        raise _protocol(provider, "the reply is not a JSON object", data)
    choices = data.get("choices")
    if data.get("error") and not choices:
        raise error_from_payload(data["error"], provider=provider)
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise _protocol(provider, "the reply has no choices", data)
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise _protocol(provider, "choices[0] has no message", data)
    reply = _Reply(
        content=_str(message.get("content")),
        refusal=_str(message.get("refusal")),
        reasoning=_str(message.get("reasoning")),
        reasoning_content=_str(message.get("reasoning_content")),
        reasoning_details=_list(message.get("reasoning_details")),
        finish=_str(choice.get("finish_reason")),
        usage=usage_from_chat(data.get("usage")),
        model=_str(data.get("model")),
    )
    for raw in message.get("tool_calls") or ():
        if not isinstance(raw, Mapping):
            raise _protocol(provider, "a tool call is not an object", data)
        function = raw.get("function")
        function = function if isinstance(function, Mapping) else {}
        reply.tool_calls.append(
            ToolCall(
                id=_str(raw.get("id")) or _new_call_id(),
                name=_str(function.get("name")) or "",
                arguments=_arguments(function.get("arguments")),
                extra={k: v for k, v in raw.items() if k not in _TOOL_CALL_WIRE_KEYS},
            )
        )
    return reply.response()


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _list(value: Any) -> list[Any] | None:
    return list(value) if isinstance(value, list) and value else None


# -- streaming --------------------------------------------------------------------------


@dataclass(slots=True)
class _Slot:
    id: str
    name: str | None
    parts: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def complete_json(self) -> bool:
        text = "".join(self.parts).strip()
        if not text:
            return True
        try:
            json.loads(text)
        except ValueError:
            return False
        return True


def _starts_new_call(slot: _Slot, call_id: str | None, name: str | None) -> bool:
    """Whether a fragment at an occupied index begins another call (WIRE.md §4 item 7).

    Some servers send every parallel call at index 0. A different ``id`` is a new call; so
    is a name arriving once the buffered arguments are complete JSON (or, for a different
    name, still empty). A repeated identical name mid-arguments is treated as noise.
    """
    if call_id is not None:
        return call_id != slot.id
    if name is None or slot.name is None:
        return False
    buffered = "".join(slot.parts).strip()
    if not buffered:
        return name != slot.name
    return slot.complete_json()


def _same_detail(last: Mapping[str, Any], item: Mapping[str, Any]) -> bool:
    if last.get("type") != item.get("type"):
        return False
    if "index" in last or "index" in item:
        return last.get("index") == item.get("index")
    return last.get("id") == item.get("id") or item.get("id") is None


class ChatStreamAssembler:
    """Turns ``chat.completion.chunk`` events into deltas and, at the end, one response.

    Feed it every SSE event with :meth:`feed`; it returns the deltas to yield, sets
    :attr:`done` on ``[DONE]`` and raises mapped errors for in-band error payloads.
    :meth:`finish` builds the :class:`ModelResponse` exactly as the non-streamed path does.
    """

    def __init__(self, *, provider: str) -> None:
        self.provider = provider
        self.done = False
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._reasoning_content: list[str] | None = None
        self._details: list[dict[str, Any]] = []
        self._slots: list[_Slot] = []
        self._slot_of_index: dict[int, int] = {}
        self._finish: str | None = None
        self._usage = Usage()
        self._model: str | None = None
        self._chunks = 0

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """Deltas carried by one SSE event.

        Raises:
            ModelError: the event is an in-band error (mapped; overflow is ContextTooLong).
            IncompleteStream: the event was cut off mid-payload.
            ModelProtocolError: the payload is not a chunk object.
        """
        data = event.data.strip()
        if data == "[DONE]":
            self.done = True
            return []
        if not data:
            return []
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            if not event.complete:
                raise IncompleteStream(
                    f"{self.provider}: the stream was cut off inside an event",
                    provider=self.provider,
                ) from exc
            raise _protocol(self.provider, f"a stream event is not JSON: {data[:200]!r}") from exc
        if not isinstance(chunk, Mapping):
            raise _protocol(self.provider, "a stream event is not a JSON object", chunk)
        if chunk.get("error") or event.event == "error":
            raise error_from_payload(chunk.get("error", chunk), provider=self.provider)
        return self.feed_chunk(chunk)

    def feed_chunk(self, chunk: Mapping[str, Any]) -> list[StreamEvent]:
        """Deltas of one parsed chunk (choice 0 only; ``n > 1`` is not supported)."""
        self._chunks += 1
        self._model = _str(chunk.get("model")) or self._model
        if isinstance(chunk.get("usage"), Mapping):
            self._usage = usage_from_chat(chunk["usage"])
        events: list[StreamEvent] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                events.extend(self._delta(delta))
            if isinstance(choice.get("finish_reason"), str):
                self._finish = choice["finish_reason"]
        return events

    def _delta(self, delta: Mapping[str, Any]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        reasoning = _str(delta.get("reasoning"))
        reasoning_content = _str(delta.get("reasoning_content"))
        if reasoning is not None:
            self._reasoning.append(reasoning)
        if reasoning_content is not None:
            self._reasoning_content = [*(self._reasoning_content or []), reasoning_content]
        self._merge_details(delta.get("reasoning_details"))
        piece = reasoning or reasoning_content
        if piece:
            events.append(ReasoningDelta(piece))
        text = _str(delta.get("content"))
        if text:
            self._text.append(text)
            events.append(TextDelta(text))
        refusal = _str(delta.get("refusal"))
        if refusal:
            self._refusal.append(refusal)
        calls = delta.get("tool_calls")
        for fragment in calls if isinstance(calls, list) else ():
            if isinstance(fragment, Mapping):
                event = self._tool_fragment(fragment)
                if event is not None:
                    events.append(event)
        return events

    def _merge_details(self, items: Any) -> None:
        """Streamed ``reasoning_details`` pieces of one item share type and index: join them."""
        if not isinstance(items, list):
            return
        for item in items:
            if not isinstance(item, Mapping):
                continue
            last = self._details[-1] if self._details else None
            if last is None or not _same_detail(last, item):
                self._details.append(dict(item))
                continue
            for key, value in item.items():
                if key in {"text", "summary", "data", "thinking"} and isinstance(value, str):
                    previous = last.get(key)
                    last[key] = (previous if isinstance(previous, str) else "") + value
                elif value is not None:
                    last[key] = value

    def _tool_fragment(self, fragment: Mapping[str, Any]) -> ToolCallDelta | None:
        index = fragment.get("index", 0)
        index = index if isinstance(index, int) else 0
        function = fragment.get("function")
        function = function if isinstance(function, Mapping) else {}
        call_id = _str(fragment.get("id")) or None
        name = _str(function.get("name")) or None
        arguments = _str(function.get("arguments")) or ""
        position = self._slot_of_index.get(index)
        slot = None if position is None else self._slots[position]
        starts_new = slot is None or _starts_new_call(slot, call_id, name)
        extra = {k: v for k, v in fragment.items() if k not in _TOOL_CALL_WIRE_KEYS}
        if starts_new:
            slot = _Slot(id=call_id or _new_call_id(), name=name, parts=[arguments], extra=extra)
            self._slot_of_index[index] = len(self._slots)
            self._slots.append(slot)
            return ToolCallDelta(len(self._slots) - 1, slot.id, name, arguments)
        assert slot is not None and position is not None
        new_name = name if name is not None and slot.name is None else None
        if new_name is not None:
            slot.name = new_name
        slot.parts.append(arguments)
        slot.extra.update(extra)
        if not arguments and new_name is None:
            return None
        return ToolCallDelta(position, None, new_name, arguments)

    def finish(self) -> ModelResponse:
        """The assembled response.

        Raises:
            IncompleteStream: no finish reason or no ``[DONE]`` arrived.
        """
        if self._finish is None or not self.done:
            missing = "a finish_reason" if self._finish is None else "the [DONE] marker"
            raise IncompleteStream(
                f"{self.provider}: the stream ended after {self._chunks} chunk(s) without "
                f"{missing}; the reply is incomplete",
                provider=self.provider,
            )
        reply = _Reply(
            content="".join(self._text),
            refusal="".join(self._refusal) or None,
            reasoning="".join(self._reasoning) or None,
            reasoning_content=(
                None if self._reasoning_content is None else "".join(self._reasoning_content)
            ),
            reasoning_details=list(self._details) or None,
            finish=self._finish,
            usage=self._usage,
            model=self._model,
        )
        for slot in self._slots:
            reply.tool_calls.append(
                ToolCall(
                    id=slot.id,
                    name=slot.name or "",
                    arguments=_arguments("".join(slot.parts)),
                    extra=slot.extra,
                )
            )
        return reply.response()
