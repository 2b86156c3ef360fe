"""Responses API mapping: core messages to ``POST /responses`` JSON, replies and events back.

Pure functions and one state machine, apart from the HTTP code so each rule is testable on
plain dicts. The rules come from WIRE.md §2.3, REFERENCE.md §11 and the bugs of WIRE.md §4:

* Stateless (``store: false``) multi-turn: the server keeps nothing, so every reasoning item
  is sent back (with its ``encrypted_content``, its ``summary`` even when ``[]``, and no
  ``id``, which would point at nothing) **immediately before** the item that followed it in
  the reply, else the API answers 400 "Item 'rs_…' of type 'reasoning' was provided without
  its required following item" (item 11). To make that possible each stored reasoning item
  carries a private ``_next`` stamp naming its follower; ``_``-keys never go on the wire.
* A reply's output items are kept whole and in order in ``provider_data``
  (``codex_reasoning_items``, ``codex_message_items``) and replayed as a unit per turn;
  a ``function_call`` becomes ``ToolCall(id=call_id, extra={"response_item_id": "fc_…"})``.
* ``usage.input_tokens`` includes cached input, so fresh input is what remains after the
  cache buckets; reasoning tokens come from ``output_tokens_details``.
* ``failed``/``cancelled`` replies are errors, ``incomplete`` ones map their reason
  (``content_filter``, else ``length``); empty arguments become ``"{}"`` (item 8).

The streamed path assembles the same output items from typed events (see
:mod:`hermes_adapters.llm.openai_responses`) and hands them to :func:`response_from_items`,
so a streamed reply and a JSON reply can never disagree.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from hermes_adapters.llm._http import error_from_payload
from hermes_core.errors import ModelError, ModelProtocolError
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
)
from hermes_core.ports.tools import ToolSpec

__all__ = [
    "NEXT_KEY",
    "as_mapping",
    "fallback_items",
    "incomplete_reason",
    "message_text",
    "parse_response",
    "protocol_error",
    "raise_for_status",
    "reasoning_text_of",
    "response_from_items",
    "responses_body",
    "responses_input",
    "tool_schema",
    "usage_from_responses",
]

NEXT_KEY = "_next"
"""Private stamp on a stored reasoning item: the identity of the item that followed it."""

ENCRYPTED_REASONING = "reasoning.encrypted_content"
_ItemKey: TypeAlias = tuple[str, str]
_UNFINISHED = {"queued", "in_progress"}


# -- request ----------------------------------------------------------------------------


def tool_schema(spec: ToolSpec) -> dict[str, Any]:
    """A flat Responses function tool (Chat Completions nests these under ``function``)."""
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "strict": False,
        "parameters": dict(spec.parameters),
    }


def _input_part(part: ContentPart) -> dict[str, Any]:
    """One chat-style content part in its Responses input form."""
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": str(part.get("text", ""))}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        detail = image.get("detail") if isinstance(image, Mapping) else None
        return {"type": "input_image", "image_url": url, "detail": detail or "auto"}
    return dict(part)


def _user_content(content: str | tuple[ContentPart, ...]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return [_input_part(p) for p in content]


def _tool_output(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
    return content if isinstance(content, str) else [_input_part(p) for p in content]


def _item_key(item: Mapping[str, Any] | None) -> _ItemKey | None:
    """How a follower is named: a call by its ``call_id``, anything else by its ``id``."""
    if item is None:
        return None
    kind = str(item.get("type") or ("message" if "role" in item else ""))
    ref = item.get("call_id") if kind == "function_call" else item.get("id")
    return (kind, ref) if isinstance(ref, str) and ref else None


def _follower_ref(item: Mapping[str, Any] | None) -> dict[str, str] | None:
    key = _item_key(item)
    if key is None:
        return None
    kind, ref = key
    return {"type": kind, "call_id" if kind == "function_call" else "id": ref}


def _private_free(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if not k.startswith("_")}


def _replayable_reasoning(item: Mapping[str, Any], store: bool) -> dict[str, Any] | None:
    """The wire form of a stored reasoning item, or ``None`` if it cannot be replayed.

    Without ``store`` the ``id`` is dropped (the server would answer 404 for it) and an item
    without ``encrypted_content`` carries nothing the model could use, so it is left out.
    """
    out = _private_free(item)
    out["type"] = "reasoning"
    if not isinstance(out.get("summary"), list):
        out["summary"] = []
    if not store:
        out.pop("id", None)
    if not out.get("id") and not (
        isinstance(out.get("encrypted_content"), str) and out["encrypted_content"]
    ):
        return None
    return out


def message_text(items: Sequence[Mapping[str, Any]], kind: str) -> str:
    key = "refusal" if kind == "refusal" else "text"
    return "".join(
        str(part.get(key) or "")
        for item in items
        for part in item.get("content") or ()
        if isinstance(part, Mapping) and part.get("type") == kind
    )


def _visible_content(items: Sequence[Mapping[str, Any]], has_calls: bool) -> str | None:
    """What ``AssistantMessage.content`` becomes for these message items (refusal fallback)."""
    text = message_text(items, "output_text")
    if text:
        return text
    refusal = message_text(items, "refusal")
    return refusal if refusal and not has_calls else None


def _assistant_items(message: AssistantMessage, store: bool) -> list[dict[str, Any]]:
    """One assistant turn as input items, reasoning placed right before its follower."""
    data = message.provider_data
    reasoning = [r for r in data.get("codex_reasoning_items") or () if isinstance(r, Mapping)]
    linked: dict[_ItemKey, Mapping[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for stored in reasoning:
        ref = stored.get(NEXT_KEY, ...)
        if ref is ...:  # stored by someone who did not stamp followers: replay up front
            wire = _replayable_reasoning(stored, store)
            if wire is not None:
                out.append(wire)
        elif isinstance(ref, Mapping) and (key := _item_key(ref)) is not None:
            linked[key] = stored
        # a ``None`` stamp: nothing followed it in the reply, and alone it is a 400

    def emit(key: _ItemKey | None, item: dict[str, Any]) -> None:
        chain: list[dict[str, Any]] = []
        seen: set[_ItemKey] = set()
        while key is not None and key in linked and key not in seen:
            seen.add(key)
            before = linked[key]
            wire = _replayable_reasoning(before, store)
            if wire is None:  # everything before it would lose its follower too
                break
            chain.append(wire)
            key = _item_key({"type": "reasoning", "id": before.get("id")})
        out.extend(reversed(chain))
        out.append(item)

    stored_messages = [m for m in data.get("codex_message_items") or () if isinstance(m, Mapping)]
    if stored_messages and message.content == _visible_content(
        stored_messages, bool(message.tool_calls)
    ):
        for stored_message in stored_messages:
            wire = _private_free(stored_message)
            if not store:
                wire.pop("id", None)
            emit(_item_key(stored_message), wire)
    elif message.content:
        emit(None, {"role": "assistant", "content": message.content})
    for call in message.tool_calls:
        call_id = str(call.extra.get("call_id") or call.id)
        wire_call: dict[str, Any] = {
            "type": "function_call",
            "call_id": call_id,
            "name": call.name,
            "arguments": call.arguments.strip() or "{}",
        }
        item_id = call.extra.get("response_item_id")
        if store and isinstance(item_id, str) and item_id:
            wire_call["id"] = item_id
        emit(("function_call", call_id), wire_call)
    return out


def responses_input(
    messages: Iterable[Message], *, store: bool = False
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(instructions, input)`` for a transcript.

    Leading system messages become ``instructions``; a system message later in the
    transcript (a compaction note, say) stays in place as a ``developer`` message.
    """
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    leading = True
    for message in messages:
        if isinstance(message, SystemMessage):
            if leading:
                instructions.append(message.content)
            else:
                items.append({"role": "developer", "content": message.content})
            continue
        leading = False
        if isinstance(message, UserMessage):
            items.append({"role": "user", "content": _user_content(message.content)})
        elif isinstance(message, AssistantMessage):
            items.extend(_assistant_items(message, store))
        elif isinstance(message, ToolMessage):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": _tool_output(message.content),
                }
            )
    return ("\n\n".join(instructions) if instructions else None), items


def responses_body(
    request: ModelRequest,
    *,
    model: str,
    stream: bool,
    store: bool = False,
    encrypted_reasoning: bool = True,
) -> dict[str, Any]:
    """The full request JSON. ``request.settings`` pass through; ``extra_body`` merges last.

    ``include: ["reasoning.encrypted_content"]`` is asked for whenever nothing is stored
    server-side, because without it the reasoning of a tool-call turn cannot be replayed.
    """
    instructions, items = responses_input(request.messages, store=store)
    body: dict[str, Any] = {"model": request.model or model}
    if instructions is not None:
        body["instructions"] = instructions
    body["input"] = items
    body["store"] = store
    if request.tools:
        body["tools"] = [tool_schema(spec) for spec in request.tools]
        body["tool_choice"] = request.tool_choice or "auto"
        body["parallel_tool_calls"] = True
    reasoning = request.reasoning or {}
    enabled = reasoning.get("enabled") is not False
    if request.reasoning is not None and enabled:
        body["reasoning"] = {
            "effort": reasoning.get("effort") or "medium",
            "summary": reasoning.get("summary") or "auto",
        }
    if encrypted_reasoning and enabled and not store:
        body["include"] = [ENCRYPTED_REASONING]
    if request.cache is not None and request.cache.cache_key:
        body["prompt_cache_key"] = request.cache.cache_key
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    extra_body: Mapping[str, Any] = {}
    for key, value in request.settings.items():
        if key == "extra_body" and isinstance(value, Mapping):
            extra_body = value
        else:
            body[key] = value
    if stream:
        body["stream"] = True
    body.update(extra_body)
    return body


# -- response ---------------------------------------------------------------------------


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def usage_from_responses(raw: Any) -> Usage:
    """Canonical buckets from a Responses ``usage`` object (input includes the cache)."""
    raw = as_mapping(raw)
    details = as_mapping(raw.get("input_tokens_details"))
    cached = _int(details.get("cached_tokens"))
    written = _int(details.get("cache_write_tokens"))
    return Usage(
        input_tokens=max(0, _int(raw.get("input_tokens")) - cached - written),
        output_tokens=_int(raw.get("output_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=_int(as_mapping(raw.get("output_tokens_details")).get("reasoning_tokens")),
    )


def protocol_error(provider: str, what: str, data: Any = None) -> ModelProtocolError:
    body = None if data is None else json.dumps(data, default=str)[:2000]
    return ModelProtocolError(f"{provider}: {what}", provider=provider, body=body)


def _arguments(raw: Any) -> str:
    if raw is None:
        return "{}"
    if not isinstance(raw, str):
        return json.dumps(raw, ensure_ascii=False)
    return raw if raw.strip() else "{}"


def reasoning_texts(item: Mapping[str, Any], key: str, kind: str) -> list[str]:
    return [
        str(part.get("text") or "")
        for part in item.get(key) or ()
        if isinstance(part, Mapping) and part.get("type") == kind and part.get("text")
    ]


def response_from_items(
    items: Sequence[Mapping[str, Any]],
    *,
    status: str | None,
    incomplete_reason: str | None = None,
    usage: Usage | None = None,
    model: str | None = None,
) -> ModelResponse:
    """One place turns output items into a reply, for the JSON and the streamed path."""
    summaries: list[str] = []
    raw_reasoning: list[str] = []
    reasoning_items: list[dict[str, Any]] = []
    message_items: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for position, item in enumerate(items):
        kind = item.get("type")
        if kind == "reasoning":
            following = items[position + 1] if position + 1 < len(items) else None
            reasoning_items.append({**item, NEXT_KEY: _follower_ref(following)})
            summaries += reasoning_texts(item, "summary", "summary_text")
            raw_reasoning += reasoning_texts(item, "content", "reasoning_text")
        elif kind == "message" and item.get("role", "assistant") == "assistant":
            message_items.append(dict(item))
        elif kind == "function_call":
            call_id = item.get("call_id") or item.get("id") or f"call_{uuid.uuid4().hex[:24]}"
            item_id = item.get("id")
            calls.append(
                ToolCall(
                    id=str(call_id),
                    name=str(item.get("name") or ""),
                    arguments=_arguments(item.get("arguments")),
                    extra={"response_item_id": item_id} if isinstance(item_id, str) else {},
                )
            )
    content = _visible_content(message_items, bool(calls))
    refusal = message_text(message_items, "refusal")
    finish: FinishReason = "tool_calls" if calls else "stop"
    if status == "incomplete":
        finish = "content_filter" if incomplete_reason == "content_filter" else "length"
    elif refusal and content == refusal:
        finish = "content_filter"
    provider_data: dict[str, Any] = {}
    if reasoning_items:
        provider_data["codex_reasoning_items"] = reasoning_items
    if message_items:
        provider_data["codex_message_items"] = message_items
    if refusal:
        provider_data["refusal"] = refusal
    reasoning = "\n\n".join(summaries) or "\n\n".join(raw_reasoning) or None
    message = AssistantMessage(
        content=content,
        reasoning=reasoning,
        tool_calls=tuple(calls),
        finish_reason=finish,
        provider_data=provider_data,
    )
    return ModelResponse(message, finish, usage or Usage(), model)


def raise_for_status(response: Mapping[str, Any], provider: str) -> None:
    """Failed and cancelled replies are errors; an unfinished one cannot be used."""
    status = response.get("status")
    if status == "failed":
        error = response.get("error") or {"message": "the response failed", "type": "server_error"}
        raise error_from_payload(error, provider=provider)
    if status == "cancelled":
        raise ModelError(
            f"{provider}: the response was cancelled before it finished", provider=provider
        )
    if status in _UNFINISHED:
        raise protocol_error(
            provider,
            f"the response is still {status!r}; background responses are not polled",
            response,
        )


def incomplete_reason(response: Mapping[str, Any]) -> str | None:
    reason = as_mapping(response.get("incomplete_details")).get("reason")
    return reason if isinstance(reason, str) else None


def fallback_items(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Some gateways leave ``output`` empty and fill only the ``output_text`` convenience."""
    text = response.get("output_text")
    if not isinstance(text, str) or not text:
        return []
    part = {"type": "output_text", "text": text, "annotations": []}
    return [{"type": "message", "role": "assistant", "content": [part]}]


def parse_response(data: Any, *, provider: str) -> ModelResponse:
    """The :class:`ModelResponse` of a non-streamed ``response`` object.

    Raises:
        ModelError: an error body, or ``status`` failed (mapped) or cancelled.
        ModelProtocolError: the body is not a response object, or it is unfinished.
    """
    if not isinstance(data, Mapping):
        raise protocol_error(provider, "the reply is not a JSON object", data)
    if data.get("error") and data.get("status") in {None, "failed"}:
        raise error_from_payload(data["error"], provider=provider)
    raise_for_status(data, provider)
    output = data.get("output")
    if not isinstance(output, list) or (not output and "status" not in data):
        if not fallback_items(data):
            raise protocol_error(provider, "the reply has no output items", data)
        output = []
    items = [dict(item) for item in output if isinstance(item, Mapping)]
    return response_from_items(
        items or fallback_items(data),
        status=str(data.get("status") or "completed"),
        incomplete_reason=incomplete_reason(data),
        usage=usage_from_responses(data.get("usage")),
        model=data.get("model") if isinstance(data.get("model"), str) else None,
    )


def reasoning_text_of(item: Mapping[str, Any]) -> str:
    """The readable reasoning of one item: its summary, else its raw reasoning text."""
    summaries = reasoning_texts(item, "summary", "summary_text")
    return "\n\n".join(summaries or reasoning_texts(item, "content", "reasoning_text"))
