"""Anthropic Messages mapping: core messages to request JSON, reply JSON and SSE to core types.

Pure functions and one small state machine, kept apart from the HTTP code so every rule is
unit-testable on plain dicts. The rules come from WIRE.md §2.2, REFERENCE.md §7/§11 and §4:

* thinking blocks are replayed byte-for-byte, in position, from
  ``provider_data["anthropic_content_blocks"]``; only blocks whose ``content_block_stop``
  arrived are stored, so a signature cut off by an aborted stream cannot brick a session
  (item 10);
* tool results go first in the next user message, roles merge, a user turn leads (item 1);
* streamed blocks are keyed by ``index``; a ``tool_use`` start's ``input: {}`` is ignored
  once ``input_json_delta`` pieces follow, and an empty buffer means ``{}`` (items 6, 8);
* at most four ``cache_control`` breakpoints on a body built in a fixed key order, so a
  growing conversation keeps a byte-identical prefix (item 21);
* overflow is :class:`ContextTooLong` as a 400, an in-stream error or a stop reason
  (item 14), and a stream needs ``message_stop`` (item 22).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_adapters.llm._http import SSEEvent, error_from_payload
from hermes_core.errors import ContextTooLong, IncompleteStream, ModelProtocolError
from hermes_core.messages import (
    AssistantMessage,
    ContentPart,
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
    "MAX_CACHE_BREAKPOINTS",
    "NO_OUTPUT",
    "THINKING_BUDGETS",
    "AnthropicStreamAssembler",
    "anthropic_messages",
    "messages_body",
    "parse_message",
    "thinking_config",
    "usage_from_anthropic",
]

MAX_CACHE_BREAKPOINTS = 4
NO_OUTPUT = "(no output)"
LEADING_USER = "(continued)"
"""Sent as the first user turn when a transcript starts with the assistant."""

THINKING_BUDGETS: dict[str, int] = dict(
    minimal=1024, low=4000, medium=8000, high=16000, xhigh=32000, max=32000
)
THINKING_HEADROOM = 4096
"""``max_tokens`` must exceed the thinking budget; this much is left for the answer."""

_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


# -- request ----------------------------------------------------------------------------


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image_block(url: str) -> dict[str, Any]:
    """An OpenAI ``image_url`` as an Anthropic image source (data URL or plain URL)."""
    source: dict[str, Any] = {"type": "url", "url": url}
    if url.startswith("data:") and ";base64," in url:
        media_type, _, data = url[5:].partition(";base64,")
        source = {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "image", "source": source}


def _content_blocks(content: str | Sequence[ContentPart]) -> list[dict[str, Any]]:
    """User or tool content as blocks; empty text is dropped (the server rejects it)."""
    if isinstance(content, str):
        return [_text_block(content)] if content.strip() else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind in {"text", "input_text"}:
            text = part.get("text")
            if isinstance(text, str) and text.strip():
                blocks.append(_text_block(text))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if isinstance(url, str) and url:
                blocks.append(_image_block(url))
        else:  # already Anthropic-shaped (image, document...): pass through
            blocks.append(dict(part))
    return blocks


def _tool_result(message: ToolMessage) -> dict[str, Any]:
    content: str | list[dict[str, Any]] = (
        message.content if isinstance(message.content, str) else _content_blocks(message.content)
    )
    if not content or (isinstance(content, str) and not content.strip()):
        content = NO_OUTPUT  # an empty result is a 400
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    out["content"] = content
    if message.is_error:
        out["is_error"] = True
    return out


def _tool_use(call: ToolCall, stored: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``tool_use`` block; arguments that are not a JSON object fall back to the stored
    input (what the model really sent) or ``{}``, since ``input`` must be an object."""
    parsed = call.parsed_arguments()
    if parsed is None and stored is not None and isinstance(stored.get("input"), dict):
        parsed = stored["input"]
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": parsed or {}}


def _replayable(block: Mapping[str, Any]) -> bool:
    """A stored thinking block the server will accept back: complete and signed."""
    if block.get("type") == "thinking":
        return bool(block.get("thinking")) and bool(block.get("signature"))
    return block.get("type") == "redacted_thinking" and bool(block.get("data"))


def _assistant_blocks(message: AssistantMessage, replay_thinking: bool) -> list[dict[str, Any]]:
    """Blocks of one assistant turn: stored thinking verbatim, then text, then tool_use.

    When the stored content list still agrees with the message (same text, same call ids)
    it is replayed in its original order, so interleaved blocks keep their positions; if
    the engine changed the calls (repaired ids) the stored thinking goes first instead.
    """
    raw = message.provider_data.get("anthropic_content_blocks")
    stored = [b for b in raw if isinstance(b, Mapping)] if isinstance(raw, list) else []
    content = message.content or ""
    text = [_text_block(content)] if content.strip() else []
    calls = {call.id: call for call in message.tool_calls}
    stored_text = "\n".join(
        str(b["text"]) for b in stored if b.get("type") == "text" and b.get("text")
    )
    stored_ids = [b.get("id") for b in stored if b.get("type") == "tool_use"]
    agrees = stored_text == content and stored_ids == [c.id for c in message.tool_calls]
    if stored and agrees:
        out: list[dict[str, Any]] = []
        for block in stored:
            kind = block.get("type")
            if kind in _THINKING_TYPES:
                if replay_thinking and _replayable(block):
                    out.append(dict(block))
            elif kind == "text":
                if str(block.get("text", "")).strip():
                    out.append(_text_block(str(block["text"])))
            elif kind == "tool_use":
                out.append(_tool_use(calls[str(block["id"])], block))
            else:  # server-side blocks of the same reply travel with it
                out.append(dict(block))
        return out
    thinking = [dict(b) for b in stored if replay_thinking and _replayable(b)]
    by_id = {b.get("id"): b for b in stored if b.get("type") == "tool_use"}
    return thinking + text + [_tool_use(c, by_id.get(c.id)) for c in message.tool_calls]


def anthropic_messages(
    messages: Iterable[Message], *, replay_thinking: bool = True
) -> list[dict[str, Any]]:
    """The ``messages`` array (system messages are skipped: they go top-level).

    Tool results merge into one user message with the ``tool_result`` blocks first;
    consecutive same-role messages merge; a leading user turn is ensured; messages without
    any block are left out (the server rejects empty content).
    """
    turns: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = []
    for message in messages:
        results: list[dict[str, Any]] = []
        if isinstance(message, UserMessage):
            role, blocks = "user", _content_blocks(message.content)
        elif isinstance(message, ToolMessage):
            role, blocks, results = "user", [], [_tool_result(message)]
        elif isinstance(message, AssistantMessage):
            role, blocks = "assistant", _assistant_blocks(message, replay_thinking)
        else:
            continue
        if not blocks and not results:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
            turns[-1][2].extend(results)
        else:
            turns.append((role, blocks, results))
    wire = [{"role": role, "content": results + blocks} for role, blocks, results in turns]
    if not wire or wire[0]["role"] != "user":
        wire.insert(0, {"role": "user", "content": [_text_block(LEADING_USER)]})
    return wire


def thinking_config(
    reasoning: Mapping[str, Any] | None, tool_choice: str | None = None
) -> dict[str, Any] | None:
    """``thinking`` for the request, or ``None``: none asked, disabled, or a forced tool
    choice (the server refuses thinking together with ``tool_choice: any``)."""
    if reasoning is None or reasoning.get("enabled") is False or tool_choice == "required":
        return None
    budget = reasoning.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
        effort = str(reasoning.get("effort") or "medium").lower()
        if effort in {"none", "off"}:
            return None
        budget = THINKING_BUDGETS.get(effort, THINKING_BUDGETS["medium"])
    return {"type": "enabled", "budget_tokens": budget}


def _marker(ttl: str | None) -> dict[str, Any]:
    return {"type": "ephemeral", "ttl": ttl} if ttl else {"type": "ephemeral"}


def _system_param(text: str, stable: int | None, marker: dict[str, Any] | None) -> Any:
    """A string without caching; with it, one or two marked blocks (stable prefix, rest)."""
    if marker is None:
        return text
    cut = stable if stable is not None and 0 < stable < len(text) else 0
    parts = [text[:cut], text[cut:]] if text[:cut].strip() and text[cut:].strip() else [text]
    return [{"type": "text", "text": p, "cache_control": dict(marker)} for p in parts]


def _mark_messages(wire: list[dict[str, Any]], marker: dict[str, Any], count: int) -> None:
    """Put ``marker`` on the last markable block of the last ``count`` markable messages.

    Thinking blocks cannot carry a marker and must stay untouched, so the marked block is
    replaced by a copy rather than edited in place.
    """
    for message in reversed(wire):
        if count <= 0:
            return
        blocks: list[dict[str, Any]] = message["content"]
        for position in range(len(blocks) - 1, -1, -1):
            block = blocks[position]
            if block.get("type") in _THINKING_TYPES:
                continue
            blocks[position] = {**block, "cache_control": dict(marker)}
            count -= 1
            break


def messages_body(
    request: ModelRequest,
    *,
    model: str,
    stream: bool,
    max_tokens_default: int = 16384,
    prompt_caching: bool = True,
    cache_ttl: str | None = None,
    replay_thinking: bool = True,
) -> dict[str, Any]:
    """The full request JSON, built in a fixed key order so it serialises stably.

    ``request.settings`` pass through (``extra_body`` merges last); with thinking on,
    ``temperature`` is 1 and ``top_k`` is dropped, as the server demands.
    ``tool_choice="none"`` keeps the tools and sends ``{"type": "none"}``: the server
    rejects ``tool_use``/``tool_result`` blocks in a request that defines no tools, and
    ``none`` (unlike ``any``) is allowed with thinking.
    ``replay_thinking=False`` drops thinking blocks and the thinking config: the recovery
    path for a transcript whose stored signatures the server no longer accepts.
    """
    system = "\n\n".join(m.content for m in request.messages if isinstance(m, SystemMessage))
    wire = anthropic_messages(request.messages, replay_thinking=replay_thinking)
    hints = request.cache
    ttl = (hints.ttl if hints is not None else None) or cache_ttl
    marker = _marker(ttl) if prompt_caching else None
    thinking = thinking_config(request.reasoning, request.tool_choice) if replay_thinking else None
    max_tokens = request.max_tokens or max_tokens_default
    if thinking is not None:
        max_tokens = max(max_tokens, int(thinking["budget_tokens"]) + THINKING_HEADROOM)
    body: dict[str, Any] = {"model": request.model or model, "max_tokens": max_tokens}
    used = 0
    if system.strip():
        stable = hints.stable_system_chars if hints is not None else None
        body["system"] = _system_param(system, stable, marker)
        used = len(body["system"]) if marker is not None else 0
    if marker is not None:
        _mark_messages(wire, marker, min(2, MAX_CACHE_BREAKPOINTS - used))
    body["messages"] = wire
    if request.tools:  # sent even with tool_choice "none": tool blocks need tools defined
        body["tools"] = [
            {"name": s.name, "description": s.description, "input_schema": dict(s.parameters)}
            for s in request.tools
        ]
        if request.tool_choice in _TOOL_CHOICE:
            body["tool_choice"] = dict(_TOOL_CHOICE[request.tool_choice])
    if thinking is not None:
        body["thinking"] = thinking
        body["temperature"] = 1
    extra_body: Mapping[str, Any] = {}
    for key, value in request.settings.items():
        if key == "extra_body" and isinstance(value, Mapping):
            extra_body = value
        elif thinking is None or key not in {"temperature", "top_k"}:
            body[key] = value
    if stream:
        body["stream"] = True
    body.update(extra_body)
    return body


# -- response ---------------------------------------------------------------------------


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_from_anthropic(raw: Any) -> Usage:
    """Canonical buckets; ``input_tokens`` already excludes cache reads and writes."""
    if not isinstance(raw, Mapping):
        return Usage()
    written = _int(raw.get("cache_creation_input_tokens"))
    by_ttl = raw.get("cache_creation")
    if not written and isinstance(by_ttl, Mapping):
        written = sum(_int(v) for v in by_ttl.values())
    return Usage(
        input_tokens=_int(raw.get("input_tokens")),
        output_tokens=_int(raw.get("output_tokens")),
        cache_read_tokens=_int(raw.get("cache_read_input_tokens")),
        cache_write_tokens=written,
    )


def _protocol(provider: str, what: str, data: Any = None) -> ModelProtocolError:
    body = None if data is None else json.dumps(data, default=str)[:2000]
    return ModelProtocolError(f"{provider}: {what}", provider=provider, body=body)


@dataclass(slots=True)
class _Block:
    """One content block: its wire dict, raw tool arguments, and whether it completed."""

    data: dict[str, Any]
    arguments: str | None = None
    done: bool = True
    ordinal: int = -1
    parts: list[str] = field(default_factory=list)
    emitted: bool = False


def _response(
    blocks: Sequence[_Block], stop: str | None, usage: Usage, model: str | None, provider: str
) -> ModelResponse:
    """One place decides content, reasoning, calls, finish and replay data for both paths."""
    if stop == "model_context_window_exceeded":
        raise ContextTooLong(
            f"{provider}: the reply hit the model's context window "
            "(stop_reason model_context_window_exceeded); compress or shorten the conversation",
            provider=provider,
        )
    texts = [str(b.data.get("text") or "") for b in blocks if b.data.get("type") == "text"]
    thoughts = [
        str(b.data.get("thinking") or "") for b in blocks if b.data.get("type") == "thinking"
    ]
    calls = [
        ToolCall(
            id=str(b.data.get("id") or _new_id()),
            name=str(b.data.get("name") or ""),
            arguments=(b.arguments or "").strip() or "{}",
        )
        for b in blocks
        if b.data.get("type") == "tool_use"
    ]
    finish = _STOP.get(stop or "", "stop")
    if calls and finish == "stop":
        finish = "tool_calls"
    elif not calls and finish == "tool_calls":
        finish = "stop"
    kept = [b.data for b in blocks if b.done]
    provider_data: dict[str, Any] = {}
    if any(b.get("type") in _THINKING_TYPES for b in kept):
        provider_data["anthropic_content_blocks"] = kept
    message = AssistantMessage(
        content="\n".join(t for t in texts if t) or None,
        reasoning="\n\n".join(t for t in thoughts if t) or None,
        tool_calls=tuple(calls),
        finish_reason=finish,
        provider_data=provider_data,
    )
    return ModelResponse(message, finish, usage, model)


def parse_message(data: Any, *, provider: str) -> ModelResponse:
    """The :class:`ModelResponse` of a non-streamed ``message`` body.

    Raises:
        ModelError: the body is an in-band error object (mapped like an HTTP error).
        ContextTooLong: ``stop_reason`` is ``model_context_window_exceeded``.
        ModelProtocolError: the body has no ``content`` list of block objects.
    """
    if not isinstance(data, Mapping):
        raise _protocol(provider, "the reply is not a JSON object", data)
    if data.get("type") == "error" or ("error" in data and "content" not in data):
        raise error_from_payload(data, provider=provider)
    content = data.get("content")
    if not isinstance(content, list) or not all(isinstance(b, Mapping) for b in content):
        raise _protocol(provider, "the reply has no content block list", data)
    usage = usage_from_anthropic(data.get("usage"))
    blocks = [_Block(dict(b)) for b in content]
    for block in blocks:  # the server parsed the model's JSON; json.dumps restores a string
        if block.data.get("type") == "tool_use":
            block.arguments = json.dumps(block.data.get("input") or {}, ensure_ascii=False)
    return _response(
        blocks, _str(data.get("stop_reason")), usage, _str(data.get("model")), provider
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _new_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


# -- streaming --------------------------------------------------------------------------


class AnthropicStreamAssembler:
    """Turns typed Messages SSE events into deltas and, at the end, one response.

    Feed it every SSE event with :meth:`feed`; it returns the deltas to yield, sets
    :attr:`done` on ``message_stop`` and raises mapped errors for ``event: error``.
    :meth:`finish` builds the :class:`ModelResponse` exactly as the non-streamed path does,
    keeping only blocks whose ``content_block_stop`` arrived as replay data.
    """

    def __init__(self, *, provider: str) -> None:
        self.provider = provider
        self.done = False
        self._started = False
        self._blocks: dict[int, _Block] = {}
        self._calls = 0
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self._model: str | None = None
        self._events = 0
        self._seen: set[str] = set()

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """Deltas carried by one SSE event.

        Raises:
            ModelError: an ``error`` event (mapped; overflow is ContextTooLong).
            IncompleteStream: the event was cut off mid-payload.
            ModelProtocolError: the payload is not an event object, or names an unknown
                block index.
        """
        data = event.data.strip()
        if not data:
            return []
        try:
            payload = json.loads(data)
        except ValueError as exc:
            if not event.complete:
                raise IncompleteStream(
                    f"{self.provider}: the stream was cut off inside an event",
                    provider=self.provider,
                ) from exc
            raise _protocol(self.provider, f"a stream event is not JSON: {data[:200]!r}") from exc
        if not isinstance(payload, Mapping):
            raise _protocol(self.provider, "a stream event is not a JSON object", payload)
        self._events += 1
        kind = payload.get("type") or event.event
        if kind == "error" or event.event == "error":
            raise error_from_payload(payload, provider=self.provider)
        if kind == "message_start":
            self._started = True
            message = payload.get("message")
            if isinstance(message, Mapping):
                self._model = _str(message.get("model")) or self._model
                self._merge_usage(message.get("usage"))
        elif kind == "content_block_start":
            return self._block_start(payload)
        elif kind == "content_block_delta":
            return self._block_delta(payload)
        elif kind == "content_block_stop":
            return self._block_stop(payload)
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                self._stop = delta["stop_reason"]
            self._merge_usage(payload.get("usage"))
        elif kind == "message_stop":
            self.done = True
        return []  # ping and unknown events carry nothing for us

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def _block(self, payload: Mapping[str, Any]) -> _Block:
        index = payload.get("index")
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None:
            raise _protocol(self.provider, f"an event names unknown block {index!r}", payload)
        return block

    def _block_start(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        index = payload.get("index")
        start = payload.get("content_block")
        if not isinstance(index, int) or not isinstance(start, Mapping):
            raise _protocol(self.provider, "content_block_start without index or block", payload)
        block = _Block(dict(start), done=False)
        self._blocks[index] = block
        kind = block.data.get("type")
        if kind == "tool_use":
            block.ordinal = self._calls
            self._calls += 1
            block.data["id"] = _str(block.data.get("id")) or _new_id()
            name = _str(block.data.get("name")) or None
            return [ToolCallDelta(block.ordinal, block.data["id"], name, "")]
        if kind in {"text", "thinking"}:
            initial = str(block.data.get(kind) or "")
            block.data[kind] = ""
            return self._grow(block, initial)
        return []

    def _grow(self, block: _Block, piece: str) -> list[StreamEvent]:
        """Append text or thinking; a later block starts with the separator the joined
        content uses ("\n" for text, "\n\n" for thinking) so deltas add up to it."""
        kind = str(block.data["type"])
        if not piece:
            return []
        out = piece
        if not block.data[kind] and kind in self._seen:
            out = ("\n" if kind == "text" else "\n\n") + piece
        self._seen.add(kind)
        block.data[kind] += piece
        return [TextDelta(out) if kind == "text" else ReasoningDelta(out)]

    def _block_delta(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        block = self._block(payload)
        delta = payload.get("delta")
        if not isinstance(delta, Mapping):
            return []
        kind = delta.get("type")
        if kind in {"text_delta", "thinking_delta"} and block.data.get("type") == kind[:-6]:
            return self._grow(block, str(delta.get(kind[:-6]) or ""))
        if kind == "signature_delta":
            block.data["signature"] = str(block.data.get("signature") or "") + str(
                delta.get("signature") or ""
            )
        elif kind == "input_json_delta" and block.data.get("type") == "tool_use":
            piece = str(delta.get("partial_json") or "")
            if piece:
                block.parts.append(piece)
                block.emitted = True
                return [ToolCallDelta(block.ordinal, None, None, piece)]
        elif kind == "citations_delta" and "citation" in delta:
            citations = block.data.get("citations")
            block.data["citations"] = [*(citations or []), delta["citation"]]
        return []

    def _block_stop(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        block = self._block(payload)
        block.done = True
        if block.data.get("type") != "tool_use":
            return []
        self._settle_tool(block)
        if not block.emitted and block.arguments != "{}":
            # a proxy that puts the whole input in the start block and sends no deltas
            block.emitted = True
            return [ToolCallDelta(block.ordinal, None, None, block.arguments or "")]
        return []

    @staticmethod
    def _settle_tool(block: _Block) -> None:
        """Arguments from the deltas; the start block's ``input`` only when none came."""
        raw = "".join(block.parts).strip()
        if raw:
            block.arguments = raw
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            block.data["input"] = parsed if isinstance(parsed, dict) else {}
            return
        start = block.data.get("input")
        block.data["input"] = start if isinstance(start, dict) else {}
        block.arguments = json.dumps(start, ensure_ascii=False) if start else "{}"

    def finish(self) -> ModelResponse:
        """The assembled response.

        Raises:
            IncompleteStream: no ``message_stop`` arrived.
            ModelProtocolError: the stream never sent ``message_start``.
            ContextTooLong: the stop reason says the context window was exceeded.
        """
        if not self.done:
            missing = "message_delta and message_stop" if self._stop is None else "message_stop"
            raise IncompleteStream(
                f"{self.provider}: the stream ended after {self._events} event(s) without "
                f"{missing}; the reply is incomplete",
                provider=self.provider,
            )
        if not self._started:
            raise _protocol(self.provider, "the stream has no message_start event")
        blocks = [self._blocks[i] for i in sorted(self._blocks)]
        for block in blocks:
            if block.data.get("type") == "tool_use" and block.arguments is None:
                self._settle_tool(block)
        return _response(
            blocks, self._stop, usage_from_anthropic(self._usage), self._model, self.provider
        )
