"""A wire-faithful OpenAI Responses server for tests, in-process or on loopback.

:class:`ResponsesSimulator` plays the scenario vocabulary of :mod:`hermes_core.testing.llm`
in the exact Responses format (WIRE.md §2.3): ``response`` objects with output items,
typed SSE events (an ``event:`` line equal to the payload's ``type``, a
``sequence_number`` on each, no ``[DONE]``) ending in ``response.completed``,
``response.incomplete`` or ``response.failed``, and OpenAI's error bodies.

It validates like a strict stateless server, because that is where Responses clients
break (WIRE.md §4 item 11):

* every ``function_call`` in ``input`` must be answered by a later
  ``function_call_output`` and every output must answer an earlier call;
* a replayed reasoning item must sit immediately before the item that followed it when
  the simulator produced it, else 400 "Item 'rs_…' of type 'reasoning' was provided
  without its required following item". Its ``encrypted_content`` is a sealed token that
  names that follower (and carries the reasoning, which is how
  :meth:`ResponsesSimulator.replayed_reasoning` knows what the model would see); a
  tampered token is a 400, and a bare id under ``store: false`` is OpenAI's 404;
* encrypted reasoning is only returned when ``include`` asks for it, and tools must be in
  the flat Responses shape.

``simulate_cache=True`` reports ``input_tokens_details.cached_tokens`` for the longest
prefix (instructions, tools, input items) an earlier request with the same
``prompt_cache_key`` sent; without a key nothing is cached. Off by default.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from hermes_adapters.testing._prompt_cache import PromptCache, unit, with_usage
from hermes_adapters.testing.scenario_server import Pause, ScenarioServer, WirePlan, json_plan, sse
from hermes_core.messages import Usage
from hermes_core.testing.llm import (
    ContextOverflow,
    Feature,
    HttpError,
    MalformedBody,
    MidStreamError,
    RecordedRequest,
    Reply,
    RequestSummary,
    Scenario,
    Slow,
    TextReply,
    ToolCallReply,
    TruncatedStream,
)

__all__ = ["ResponsesSimulator", "seal", "unseal"]

_OVERFLOW = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
_DEFAULT_MESSAGES = {
    401: "Incorrect API key provided.",
    404: "The model does not exist or you do not have access to it.",
    429: "Rate limit reached for requests.",
}
_MID_STREAM: dict[str, tuple[str, str]] = {
    "server": ("The server had an error while processing your request.", "server_error"),
    "overloaded": ("The engine is currently overloaded, please try again later.", "server_error"),
    "rate_limit": ("Rate limit reached for requests.", "rate_limit_exceeded"),
    "context_overflow": (_OVERFLOW, "context_length_exceeded"),
}
_SECRET = b"hermes-responses-sim"
_ASSISTANT_ITEMS = {"reasoning", "function_call", "assistant"}
_SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def seal(payload: Mapping[str, Any]) -> str:
    """An opaque, tamper-evident ``encrypted_content`` token (the real one is encrypted)."""
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    mac = hashlib.sha256(_SECRET + raw).hexdigest()[:16]
    return f"{base64.urlsafe_b64encode(raw).decode()}.{mac}"


def unseal(token: Any) -> dict[str, Any] | None:
    """The payload of a token minted by :func:`seal`, or ``None`` if it was altered."""
    if not isinstance(token, str) or "." not in token:
        return None
    encoded, _, mac = token.rpartition(".")
    try:
        raw = base64.urlsafe_b64decode(encoded.encode())
        payload = json.loads(raw)
    except ValueError:
        return None
    if hashlib.sha256(_SECRET + raw).hexdigest()[:16] != mac or not isinstance(payload, dict):
        return None
    return payload


def _kind(item: Mapping[str, Any]) -> str:
    """An input item's type; a bare ``{role, content}`` is an easy message."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _side(item: Mapping[str, Any]) -> str:
    """Which core role an input item stands for: reasoning and calls are the assistant's."""
    kind = _kind(item)
    if kind == "message":
        role = str(item.get("role"))
        return "system" if role in {"system", "developer"} else role
    if kind in {"reasoning", "function_call"}:
        return kind
    return "tool" if kind == "function_call_output" else kind


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        str(p.get("text", ""))
        for p in content or ()
        if isinstance(p, Mapping) and p.get("type") in {"input_text", "output_text"}
    )


def _follows(ref: Any, item: Mapping[str, Any] | None) -> bool:
    """Whether ``item`` is the follower a sealed reasoning token names."""
    if item is None or not isinstance(ref, Mapping):
        return False
    if ref.get("type") == "function_call":
        return _kind(item) == "function_call" and item.get("call_id") == ref.get("call_id")
    return _kind(item) == "message" and item.get("role") == "assistant"


class ResponsesSimulator(ScenarioServer):
    """The Responses API (``POST /v1/responses``), strict about stateless replay."""

    def __init__(self, *, simulate_cache: bool = False) -> None:
        super().__init__()
        self._served = 0
        self.simulate_cache = simulate_cache
        self._cache = PromptCache()

    # -- WireSimulator, format-specific half

    def supports(self, feature: Feature) -> bool:
        # Each event carries exactly one typed delta, so text and tool fragments can never
        # share one; every other oddity (including items all at output_index 0) is sendable.
        return feature != "text_with_tool_deltas"

    def request_summary(self, index: int) -> RequestSummary:
        body = self._requests[index].body
        items = self._items(body)
        roles: list[str] = ["system"] if isinstance(body.get("instructions"), str) else []
        for item in items:
            side = _side(item)
            side = "assistant" if side in _ASSISTANT_ITEMS else side
            if side != "assistant" or not roles or roles[-1] != "assistant":
                roles.append(side)  # a run of reasoning/message/call items is one turn
        instructions = body.get("instructions")
        return RequestSummary(
            model=str(body.get("model")),
            stream=bool(body.get("stream")),
            system=instructions if isinstance(instructions, str) else None,
            message_roles=tuple(roles),
            user_texts=tuple(_text(i.get("content")) for i in items if _side(i) == "user"),
            tool_names=tuple(str(t.get("name")) for t in body.get("tools") or ()),
            tool_call_ids=tuple(str(i["call_id"]) for i in items if _kind(i) == "function_call"),
            tool_result_ids=tuple(
                str(i["call_id"]) for i in items if _kind(i) == "function_call_output"
            ),
        )

    def replayed_reasoning(self, index: int) -> str | None:
        """What the model reads back as its own reasoning in the last tool-call turn."""
        items = self._items(self._requests[index].body)
        calls = [p for p, item in enumerate(items) if _kind(item) == "function_call"]
        if not calls:
            return None
        start = end = calls[-1]
        while start > 0 and _side(items[start - 1]) in _ASSISTANT_ITEMS:
            start -= 1
        while end + 1 < len(items) and _side(items[end + 1]) in _ASSISTANT_ITEMS:
            end += 1
        texts = []
        for item in items[start : end + 1]:
            if _kind(item) != "reasoning":
                continue
            sealed = unseal(item.get("encrypted_content"))
            if sealed is not None:
                texts.append(str(sealed.get("text", "")))
            else:  # without encrypted content only the summary is left to read
                texts += [str(s.get("text", "")) for s in item.get("summary") or ()]
        return "\n\n".join(texts) or None

    @staticmethod
    def _items(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        raw = body.get("input")
        if isinstance(raw, str):
            return [{"role": "user", "content": raw}]
        return [i for i in raw or () if isinstance(i, Mapping)]

    # -- strictness of a real server

    def validate(self, request: RecordedRequest) -> WirePlan | None:
        if not request.path.endswith("/responses"):
            return self._error(404, f"Invalid URL (POST {request.path})", code=None)
        body = request.body
        if not isinstance(body.get("model"), str):
            return self._missing("model")
        for position, tool in enumerate(body.get("tools") or ()):
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                return self._missing(f"tools[{position}].name")  # a Chat-shaped tool
        raw = body.get("input")
        if isinstance(raw, str):
            return None
        if not isinstance(raw, list) or not raw:
            return self._missing("input")
        return self._check_items(raw, store=body.get("store", True) is not False)

    def _check_items(self, items: Sequence[Any], *, store: bool) -> WirePlan | None:
        open_calls: list[str] = []
        for position, item in enumerate(items):
            where = f"input[{position}]"
            if not isinstance(item, Mapping):
                return self._error(400, f"Invalid type for '{where}': expected an object.")
            kind = _kind(item)
            following = items[position + 1] if position + 1 < len(items) else None
            if kind == "message":
                problem = self._check_message(item, where)
            elif kind == "function_call":
                problem = None
                open_calls.append(str(item.get("call_id")))
            elif kind == "function_call_output":
                call_id = str(item.get("call_id"))
                if call_id not in open_calls:
                    message = f"No tool call found for function call output with call_id {call_id}."
                    return self._error(400, message, param="input")
                open_calls.remove(call_id)
                problem = None
            elif kind == "reasoning":
                problem = self._check_reasoning(item, following, where, store)
            else:
                problem = self._error(400, f"Invalid value: '{kind}'.", param=f"{where}.type")
            if problem is not None:
                return problem
        if open_calls:
            return self._error(400, f"No tool output found for function call {open_calls[0]}.")
        return None

    def _check_message(self, item: Mapping[str, Any], where: str) -> WirePlan | None:
        content = item.get("content")
        if isinstance(content, str):
            return None
        assistant = item.get("role") == "assistant"
        allowed = ("output_text", "refusal") if assistant else ("input_text", "input_image")
        for index, part in enumerate(content if isinstance(content, list) else [None]):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind not in allowed:
                listed = ", ".join(f"'{a}'" for a in allowed)
                return self._error(
                    400,
                    f"Invalid value: '{kind}'. Supported values are: {listed}.",
                    param=f"{where}.content[{index}]",
                )
        return None

    def _check_reasoning(
        self, item: Mapping[str, Any], following: Any, where: str, store: bool
    ) -> WirePlan | None:
        item_id = item.get("id")
        if not isinstance(item.get("summary"), list):
            return self._missing(f"{where}.summary")
        token = item.get("encrypted_content")
        if token is None:
            if isinstance(item_id, str) and not store:
                return self._error(
                    404,
                    f"Item with id '{item_id}' not found. Items are not persisted when "
                    "`store` is set to false. Try again with `store` set to true, or remove "
                    "this item from your input.",
                    param="input",
                )
            return None if isinstance(item_id, str) else self._missing(f"{where}.encrypted_content")
        sealed = unseal(token)
        name = item_id if isinstance(item_id, str) else (sealed or {}).get("id", "rs_unknown")
        if sealed is None:
            return self._error(400, f"The encrypted content for item {name} could not be verified.")
        after = following if isinstance(following, Mapping) else None
        if not _follows(sealed.get("next"), after):
            return self._error(
                400,
                f"Item '{name}' of type 'reasoning' was provided without its required "
                "following item.",
                param="input",
            )
        return None

    # -- rendering

    def render(self, scenario: Scenario, request: RecordedRequest) -> WirePlan:
        self._served += 1
        body = request.body
        stream = bool(body.get("stream"))
        key = body.get("prompt_cache_key")
        if self.simulate_cache and isinstance(key, str) and key:
            units = [unit({"instructions": body.get("instructions")})]
            units += [unit({"tool": t}) for t in body.get("tools") or ()]
            units += [unit({"item": i}) for i in self._items(body)]
            cached = f"{body.get('model')}|{key}"
            scenario = with_usage(scenario, lambda u: self._cache.automatic(cached, units).apply(u))
        if isinstance(scenario, HttpError):
            message = scenario.message or _DEFAULT_MESSAGES.get(scenario.status, "Bad request.")
            kind = "server_error" if scenario.status >= 500 else "invalid_request_error"
            if scenario.status == 429:
                kind = "requests"
            return self._error(
                scenario.status, message, kind=kind, code=scenario.code, headers=scenario.headers
            )
        if isinstance(scenario, ContextOverflow):
            return self._error(
                scenario.status, _OVERFLOW, code="context_length_exceeded", param="input"
            )
        events = _Events(self._served, body)
        if isinstance(scenario, MidStreamError):
            return self._mid_stream_error(scenario, events, stream)
        if isinstance(scenario, MalformedBody):
            if not stream:
                return _raw_json(scenario.body.encode())
            bad = [*events.opening(), sse(scenario.body, "response.output_text.delta")]
            return events.plan(bad)
        if isinstance(scenario, TruncatedStream):
            if not stream:
                full = json.dumps(events.response(scenario.reply)).encode()
                return _raw_json(full[: len(full) // 2])
            parts, finish_at = events.stream(scenario.reply)
            cut = parts[:-1] if scenario.keep_finish else parts[:finish_at]
            return events.plan(cut, abort=scenario.abort)
        reply, delay = (
            (scenario.reply, scenario.delay) if isinstance(scenario, Slow) else (scenario, 0.0)
        )
        if not stream:
            return replace(json_plan(200, events.response(reply)), delay=delay)
        return events.plan(events.stream(reply, pause=delay)[0])

    def _mid_stream_error(
        self, scenario: MidStreamError, events: _Events, stream: bool
    ) -> WirePlan:
        """Failures after a 200: ``response.failed`` for the model, ``error`` for the API."""
        text, code = _MID_STREAM[scenario.error]
        error = {"code": code, "message": scenario.message or text}
        if not stream:
            return json_plan(200, events.response(TextReply(""), status="failed", error=error))
        parts = events.opening() + events.partial_message(scenario.partial)
        if scenario.error in {"server", "overloaded"}:
            failed = events.response(TextReply(scenario.partial), status="failed", error=error)
            parts.append(events.event("response.failed", response=failed))
        else:
            parts.append(events.event("error", param=None, **error))
        return events.plan(parts)

    def _missing(self, param: str) -> WirePlan:
        return self._error(400, f"Missing required parameter: '{param}'.", param=param)

    def _error(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: Any = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> WirePlan:
        payload = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return json_plan(status, payload, headers)


@dataclass(frozen=True, slots=True)
class _Event:
    kind: str
    fields: Mapping[str, Any]


_Part: TypeAlias = _Event | Pause | bytes


class _Events:
    """The items and events of one reply, numbered and named the way OpenAI does."""

    def __init__(self, served: int, body: Mapping[str, Any]) -> None:
        self.served = served
        self.body = body
        self.tag = ""
        self.sequence = 0
        self.encrypted = "reasoning.encrypted_content" in (body.get("include") or ())

    @staticmethod
    def event(kind: str, **fields: Any) -> _Event:
        """One typed event; numbered later by :meth:`plan`, in the order it is sent."""
        return _Event(kind, fields)

    def plan(self, parts: Sequence[_Part], *, abort: bool = False) -> WirePlan:
        """The streamed body: each event named like its ``type`` and numbered in order."""
        out: list[bytes | Pause] = []
        for part in parts:
            if isinstance(part, _Event):
                payload = {"type": part.kind, "sequence_number": self.sequence, **part.fields}
                self.sequence += 1
                out.append(sse(payload, part.kind))
            else:
                out.append(part)
        return WirePlan(200, _SSE_HEADERS, tuple(out), streamed=True, abort=abort)

    # the response object

    def output(self, reply: Reply) -> list[dict[str, Any]]:
        # Item ids derive from the reply, so one scenario played twice yields equal items
        # (the contract compares a streamed and a JSON rendering of the same reply).
        self.tag = hashlib.sha256(repr(reply).encode()).hexdigest()[:12]
        items: list[dict[str, Any]] = []
        calls = reply.calls if isinstance(reply, ToolCallReply) else ()
        if reply.text:
            items.append(
                {
                    "id": f"msg_{self.tag}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [self._text_part(reply.text)],
                }
            )
        for k, (call_id, name, arguments) in enumerate(calls):
            items.append(
                {
                    "id": f"fc_{self.tag}_{k}",
                    "type": "function_call",
                    "status": "completed",
                    "arguments": arguments,
                    "call_id": call_id,
                    "name": name,
                }
            )
        if reply.reasoning:
            items.insert(0, self._reasoning(reply.reasoning, items[0] if items else None))
        return items

    def _reasoning(self, text: str, following: Mapping[str, Any] | None) -> dict[str, Any]:
        item_id = f"rs_{self.tag}"
        item: dict[str, Any] = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": text}],
        }
        if self.encrypted:
            nxt: dict[str, Any] = {"type": "message"}
            if following is not None and following["type"] == "function_call":
                nxt = {"type": "function_call", "call_id": following["call_id"]}
            item["encrypted_content"] = seal({"id": item_id, "text": text, "next": nxt})
        return item

    @staticmethod
    def _text_part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def response(
        self,
        reply: Reply,
        *,
        status: str | None = None,
        error: Mapping[str, Any] | None = None,
        output: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        body = self.body
        finish = reply.finish if isinstance(reply, TextReply) else "tool_calls"
        incomplete = {"length": "max_output_tokens", "content_filter": "content_filter"}
        reason = incomplete.get(finish)
        if status is None:
            status = "incomplete" if reason else "completed"
        return {
            "id": f"resp_sim{self.served}",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": status,
            "error": dict(error) if error else None,
            "incomplete_details": {"reason": reason} if status == "incomplete" else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": str(body.get("model")),
            "output": self.output(reply) if output is None else output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": list(body.get("tools") or ()),
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": None if status in {"in_progress", "failed"} else _usage(reply.usage),
            "metadata": {},
        }

    # the stream

    def opening(self) -> list[_Part]:
        skeleton = self.response(TextReply(""), status="in_progress", output=[])
        return [
            self.event("response.created", response=skeleton),
            self.event("response.in_progress", response=skeleton),
        ]

    def partial_message(self, text: str) -> list[_Part]:
        """A message that starts streaming and never finishes (the failure follows it)."""
        item = {"id": f"msg_partial{self.served}", "type": "message", "role": "assistant"}
        added = self.event(
            "response.output_item.added", output_index=0, item={**item, "content": []}
        )
        body, _ = self._item_events({**item, "content": [self._text_part(text)]}, 0, 8, 0.0)
        return [added, *body]

    def stream(self, reply: Reply, *, pause: float = 0.0) -> tuple[list[_Part], int]:
        """Every event of a streamed reply, and where the first ``.done`` event sits.

        ``pause`` (for :class:`Slow`) waits after the first text delta, or after the
        opening events when there is no text.
        """
        shape = reply.shape
        items = self.output(reply)
        parts = self.opening()
        finish_at = len(parts)
        if pause and not reply.text:
            parts.append(Pause(pause))
        bodies: list[list[_Part]] = []
        dones: list[list[_Part]] = []
        for index, item in enumerate(items):
            at = 0 if shape.all_index_zero and item["type"] == "function_call" else index
            added = {**item}
            if item["type"] == "message":
                added.update(status="in_progress", content=[])
            elif item["type"] == "function_call":
                added.update(status="in_progress", arguments="")
            else:
                added.update(summary=[])
                added.pop("encrypted_content", None)
            parts.append(self.event("response.output_item.added", output_index=at, item=added))
            body, done = self._item_events(item, at, shape.fragment, pause)
            if shape.interleave and item["type"] == "function_call":
                bodies.append(body)
                dones.append(done)
                continue
            parts += body
            finish_at = len(parts)
            parts += done
        if bodies:  # interleaved calls: every call announced, then fragments round-robin
            for round_ in range(max(len(b) for b in bodies)):
                parts += [b[round_] for b in bodies if round_ < len(b)]
            finish_at = len(parts)
            parts += [event for done in dones for event in done]
        terminal = self.response(reply)
        kind = "response.incomplete" if terminal["status"] == "incomplete" else "response.completed"
        parts.append(self.event(kind, response=terminal))
        return parts, finish_at

    def _item_events(
        self, item: Mapping[str, Any], at: int, size: int, pause: float
    ) -> tuple[list[_Part], list[_Part]]:
        """The delta events of one item, and its closing events."""
        item_id = item["id"]
        ids = {"item_id": item_id, "output_index": at}
        body: list[_Part] = []
        done: list[_Part] = []
        if item["type"] == "reasoning":
            text = item["summary"][0]["text"]
            part = {"type": "summary_text", "text": ""}
            where = {**ids, "summary_index": 0}
            body.append(self.event("response.reasoning_summary_part.added", **where, part=part))
            body += [
                self.event("response.reasoning_summary_text.delta", **where, delta=piece)
                for piece in _pieces(text, size)
            ]
            done.append(self.event("response.reasoning_summary_text.done", **where, text=text))
            done.append(
                self.event(
                    "response.reasoning_summary_part.done", **where, part={**part, "text": text}
                )
            )
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            where = {**ids, "content_index": 0}
            body.append(
                self.event("response.content_part.added", **where, part=self._text_part(""))
            )
            for n, piece in enumerate(_pieces(text, size)):
                body.append(
                    self.event("response.output_text.delta", **where, delta=piece, logprobs=[])
                )
                if n == 0 and pause:
                    body.append(Pause(pause))
            done.append(self.event("response.output_text.done", **where, text=text, logprobs=[]))
            done.append(
                self.event("response.content_part.done", **where, part=self._text_part(text))
            )
        else:
            arguments = item["arguments"]
            body += [
                self.event("response.function_call_arguments.delta", **ids, delta=piece)
                for piece in _pieces(arguments, size)
            ]
            done.append(
                self.event("response.function_call_arguments.done", **ids, arguments=arguments)
            )
        done.append(self.event("response.output_item.done", output_index=at, item=dict(item)))
        return body, done


def _raw_json(body: bytes) -> WirePlan:
    return WirePlan(200, {"content-type": "application/json"}, (body,))


def _usage(usage: Usage) -> dict[str, Any]:
    """OpenAI counts cached input inside ``input_tokens``."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }
