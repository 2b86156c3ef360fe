"""A wire-faithful OpenAI Chat Completions server for tests, in-process or on loopback.

:class:`OpenAIChatSimulator` plays the scenario vocabulary of
:mod:`hermes_core.testing.llm` in the exact Chat Completions wire format: JSON bodies,
SSE ``data:`` chunks ending in ``data: [DONE]``, the usage chunk with empty ``choices``
(only when the request asked for it), vendor error bodies. It can emulate three host
dialects, because reasoning travels differently on each: ``"openai"`` (no reasoning
fields), ``"deepseek"`` (``reasoning_content``; a tool-call turn replayed without it is a
400, as in DeepSeek's thinking mode; cache hits as ``prompt_cache_hit_tokens``) and
``"openrouter"`` (``reasoning`` plus ``reasoning_details``; context errors with a numeric
``code``). Like a strict server it also rejects transcripts with unanswered tool calls,
and (OpenRouter in front of Claude) more than four ``cache_control`` breakpoints.

``simulate_cache=True`` reports prompt caching (:mod:`hermes_adapters.testing._prompt_cache`):
``"openrouter"`` caches at ``cache_control`` breakpoints on content parts, like Claude
behind it (reads and writes in ``prompt_tokens_details``); ``"openai"`` reads the longest
prefix seen before under the same ``prompt_cache_key``; ``"deepseek"`` the longest prefix
seen before. Off by default: scripted usage is then sent as written.

Two ways to reach it, sharing one script and one request log:

* ``sim.mock_client()`` (an ``httpx.AsyncClient`` over ``httpx.MockTransport``): fast,
  no sockets;
* ``async with sim.serve() as base_url`` (a tiny HTTP/1.1 server on 127.0.0.1): the real
  network path, chunked transfer encoding, abrupt disconnects.

The format-neutral machinery lives in :mod:`hermes_adapters.testing.scenario_server`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal, TypeAlias

from hermes_adapters.testing._prompt_cache import PromptCache, unit, with_usage
from hermes_adapters.testing.scenario_server import (
    Pause,
    ScenarioServer,
    WirePlan,
    json_plan,
    sse,
)
from hermes_core.messages import Usage, text_of
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
    StreamShape,
    TextReply,
    ToolCallReply,
    TruncatedStream,
)

__all__ = ["ChatDialect", "OpenAIChatSimulator"]

ChatDialect: TypeAlias = Literal["openai", "deepseek", "openrouter"]

_OVERFLOW = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted "
    "in 131072 tokens. Please reduce the length of the messages."
)
_DEFAULT_MESSAGES = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    403: "You are not allowed to access this model.",
    404: "The model does not exist or you do not have access to it.",
    408: "Request timed out.",
    409: "Conflict.",
    422: "Unprocessable request.",
    429: "Rate limit reached for requests.",
}
_ERROR_TYPES = {401: "invalid_request_error", 429: "requests"}
_MID_STREAM: dict[str, tuple[str, str, str | None]] = {
    "server": (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ),
    "overloaded": (
        "The engine is currently overloaded, please try again later.",
        "server_error",
        "overloaded",
    ),
    "rate_limit": ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
    "context_overflow": (_OVERFLOW, "invalid_request_error", "context_length_exceeded"),
}
_SIGNATURE = "sig-sim-0123456789"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class OpenAIChatSimulator(ScenarioServer):
    """Chat Completions (``POST /v1/chat/completions``) in one of three host dialects."""

    def __init__(self, dialect: ChatDialect = "openai", *, simulate_cache: bool = False) -> None:
        super().__init__()
        self.dialect: ChatDialect = dialect
        self._served = 0
        self.simulate_cache = simulate_cache
        self._cache = PromptCache()

    # -- WireSimulator, format-specific half

    def supports(self, feature: Feature) -> bool:
        if feature in {"reasoning", "reasoning_replay"}:
            return self.dialect != "openai"
        if feature == "usage.cache_write_tokens":
            return self.dialect != "deepseek"
        return True

    def request_summary(self, index: int) -> RequestSummary:
        body = self._requests[index].body
        messages = [m for m in body.get("messages", []) if isinstance(m, Mapping)]
        roles = tuple("system" if m.get("role") == "developer" else m.get("role") for m in messages)
        system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
        return RequestSummary(
            model=str(body.get("model")),
            stream=bool(body.get("stream")),
            system=text_of(system) if isinstance(system, str | list) else None,
            message_roles=tuple(str(r) for r in roles),
            user_texts=tuple(text_of(m.get("content")) for m in messages if m["role"] == "user"),
            tool_names=tuple(t["function"]["name"] for t in body.get("tools", [])),
            tool_call_ids=tuple(
                c["id"] for m in messages for c in m.get("tool_calls") or () if "id" in c
            ),
            tool_result_ids=tuple(m["tool_call_id"] for m in messages if m.get("role") == "tool"),
        )

    def replayed_reasoning(self, index: int) -> str | None:
        messages = self._requests[index].body.get("messages", [])
        turns = [m for m in messages if m.get("role") == "assistant" and m.get("tool_calls")]
        if not turns:
            return None
        last = turns[-1]
        if self.dialect == "deepseek":
            value = last.get("reasoning_content")
            return value if isinstance(value, str) else None
        if self.dialect == "openrouter":
            details = last.get("reasoning_details") or []
            texts = [d.get("text", "") for d in details if d.get("type") == "reasoning.text"]
            return "".join(texts) or None
        return None

    # -- strictness of a real server

    def validate(self, request: RecordedRequest) -> WirePlan | None:
        body = request.body
        messages = body.get("messages")
        if not isinstance(body.get("model"), str) or not isinstance(messages, list) or not messages:
            return self._error(400, "'model' and a non-empty 'messages' array are required")
        choice = body.get("tool_choice")
        if choice is not None and not body.get("tools"):
            return self._error(
                400,
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
            )
        if not isinstance(choice, Mapping) and choice not in (None, "none", "auto", "required"):
            return self._error(
                400,
                f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.",
            )
        markers = sum(
            1
            for m in messages
            if isinstance(m, Mapping) and isinstance(m.get("content"), list)
            for part in m["content"]
            if isinstance(part, Mapping) and "cache_control" in part
        )
        if self.dialect == "openrouter" and markers > 4:
            return self._error(
                400, f"A maximum of 4 blocks with cache_control may be provided. Found {markers}."
            )
        open_ids: list[str] = []
        for position, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                if message.get("tool_call_id") not in open_ids:
                    return self._error(
                        400,
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                    )
                open_ids.remove(message["tool_call_id"])
                continue
            if open_ids:
                return self._error(
                    400,
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(open_ids)}",
                )
            if role == "assistant" and message.get("tool_calls"):
                open_ids = [c.get("id") for c in message["tool_calls"]]
                if self.dialect == "deepseek" and "reasoning_content" not in message:
                    return self._error(
                        400,
                        "Missing `reasoning_content` field in the assistant message at "
                        f"message index {position}.",
                    )
        if open_ids:
            return self._error(400, f"tool_call_ids without response: {', '.join(open_ids)}")
        return None

    # -- rendering

    def render(self, scenario: Scenario, request: RecordedRequest) -> WirePlan:
        self._served += 1
        body = request.body
        stream = bool(body.get("stream"))
        model = str(body.get("model"))
        usage_requested = bool((body.get("stream_options") or {}).get("include_usage"))
        if self.simulate_cache:
            scenario = with_usage(scenario, lambda u: self._cache_usage(body, u))
        if isinstance(scenario, HttpError):
            message = scenario.message or _DEFAULT_MESSAGES.get(
                scenario.status, "The server had an error while processing your request."
            )
            kind = _ERROR_TYPES.get(
                scenario.status,
                "server_error" if scenario.status >= 500 else "invalid_request_error",
            )
            return self._error(scenario.status, message, kind, scenario.code, scenario.headers)
        if isinstance(scenario, ContextOverflow):
            code: Any = "context_length_exceeded"
            if self.dialect == "openrouter":
                code = scenario.status
            return self._error(scenario.status, _OVERFLOW, "invalid_request_error", code)
        if isinstance(scenario, MalformedBody):
            if not stream:
                return WirePlan(
                    200, {"content-type": "application/json"}, (scenario.body.encode(),)
                )
            opening = self._chunk(model, {"role": "assistant", "content": ""})
            bad = (opening, sse(scenario.body), sse("[DONE]"))
            return WirePlan(200, _SSE_HEADERS, bad, streamed=True)
        if isinstance(scenario, MidStreamError):
            text, kind, code = _MID_STREAM[scenario.error]
            error = {"message": scenario.message or text, "type": kind, "param": None, "code": code}
            if not stream:
                return json_plan(200, {"error": error})
            head = [self._chunk(model, {"role": "assistant", "content": ""})]
            head += [self._chunk(model, {"content": p}) for p in _pieces(scenario.partial, 8)]
            return WirePlan(200, _SSE_HEADERS, (*head, sse({"error": error})), streamed=True)
        if isinstance(scenario, TruncatedStream):
            if not stream:
                full = json.dumps(self._completion(model, scenario.reply)).encode()
                return WirePlan(
                    200, {"content-type": "application/json"}, (full[: len(full) // 2],)
                )
            parts, finish_at = self._events(model, scenario.reply, usage_requested)
            cut = parts[:-1] if scenario.keep_finish else parts[:finish_at]
            return WirePlan(200, _SSE_HEADERS, tuple(cut), streamed=True, abort=scenario.abort)
        if isinstance(scenario, Slow):
            if not stream:
                plan = json_plan(200, self._completion(model, scenario.reply))
                return replace(plan, delay=scenario.delay)
            parts, _ = self._events(model, scenario.reply, usage_requested, pause=scenario.delay)
            return WirePlan(200, _SSE_HEADERS, tuple(parts), streamed=True)
        if not stream:
            return json_plan(200, self._completion(model, scenario))
        parts, _ = self._events(model, scenario, usage_requested)
        return WirePlan(200, _SSE_HEADERS, tuple(parts), streamed=True)

    def _cache_usage(self, body: Mapping[str, Any], usage: Usage) -> Usage:
        """Tools, then each message's content parts and the rest of it, in prompt order
        (a string is one text part, as the model sees it)."""
        units = [unit({"tool": tool}) for tool in body.get("tools") or ()]
        for position, message in enumerate(body["messages"]):
            content = message.get("content")
            if isinstance(content, str):  # what the model sees: one text part (no marker)
                content = [{"type": "text", "text": content}] if content else []
            parts = content if isinstance(content, list) else []
            head = {"m": position, "role": message.get("role")}
            units += [unit({**head, "part": part}) for part in parts]
            rest = {k: v for k, v in message.items() if k not in {"role", "content"}}
            units.append(unit({**head, "rest": rest}))
        scope = str(body.get("model"))
        if self.dialect == "openrouter":
            return self._cache.explicit(scope, units).apply(usage)
        if self.dialect == "openai":
            scope += f"|{body.get('prompt_cache_key') or ''}"
        return self._cache.automatic(scope, units).apply(usage)

    def _error(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        code: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> WirePlan:
        payload = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return json_plan(status, payload, headers)

    def _usage(self, usage: Usage) -> dict[str, Any]:
        if self.dialect == "deepseek":  # no cache-write bucket; hits and misses instead
            prompt = usage.input_tokens + usage.cache_read_tokens
            return {
                "prompt_tokens": prompt,
                "completion_tokens": usage.output_tokens,
                "total_tokens": prompt + usage.output_tokens,
                "prompt_cache_hit_tokens": usage.cache_read_tokens,
                "prompt_cache_miss_tokens": usage.input_tokens,
                "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            }
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {
                "cached_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "audio_tokens": 0,
            },
            "completion_tokens_details": {
                "reasoning_tokens": usage.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _reasoning_fields(self, text: str, *, last: bool = True) -> dict[str, Any]:
        if self.dialect == "deepseek":
            return {"reasoning_content": text}
        if self.dialect == "openrouter":
            detail: dict[str, Any] = {"type": "reasoning.text", "text": text}
            if last:
                detail["signature"] = _SIGNATURE
            detail.update({"format": "anthropic-claude-v1", "index": 0})
            return {"reasoning": text, "reasoning_details": [detail]}
        return {}

    def _completion(self, model: str, reply: Reply) -> dict[str, Any]:
        calls = reply.calls if isinstance(reply, ToolCallReply) else ()
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.reasoning:
            message.update(self._reasoning_fields(reply.reasoning))
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in calls
            ]
        finish = "tool_calls" if calls else _finish_of(reply)
        return {
            "id": f"chatcmpl-sim-{self._served}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": self._usage(reply.usage),
            "system_fingerprint": "fp_sim",
        }

    def _chunk(self, model: str, delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish}
        return sse(
            {
                "id": f"chatcmpl-sim-{self._served}",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "system_fingerprint": "fp_sim",
                "choices": [choice],
            }
        )

    def _events(
        self, model: str, reply: Reply, usage_requested: bool, *, pause: float = 0.0
    ) -> tuple[list[bytes | Pause], int]:
        """Every event of a streamed reply, and the position of the finish chunk.

        ``pause`` (for :class:`Slow`) waits after the first text fragment, or after the
        opening chunk when there is no text.
        """
        shape: StreamShape = reply.shape
        size = shape.fragment
        events: list[bytes | Pause] = [self._chunk(model, {"role": "assistant", "content": ""})]
        if reply.reasoning:
            pieces = _pieces(reply.reasoning, size)
            for piece in pieces:
                fields = self._reasoning_fields(piece, last=False)
                if self.dialect == "deepseek":
                    fields["content"] = None
                events.append(self._chunk(model, fields))
            if self.dialect == "openrouter":  # the signature arrives in a trailing detail
                detail: dict[str, Any] = {"type": "reasoning.text", "text": ""}
                detail["signature"] = _SIGNATURE
                detail.update({"format": "anthropic-claude-v1", "index": 0})
                events.append(self._chunk(model, {"reasoning_details": [detail]}))
        text_pieces = _pieces(reply.text or "", size)
        fragments = self._tool_fragments(reply, shape)
        text_events: list[bytes | Pause]
        if shape.text_with_tool_deltas and text_pieces and fragments:
            heads = [f.pop(0) for f in fragments]
            *early, last = text_pieces
            text_events = [self._chunk(model, {"content": p}) for p in early]
            text_events.append(self._chunk(model, {"content": last, "tool_calls": heads}))
        else:
            text_events = [self._chunk(model, {"content": p}) for p in text_pieces]
        if pause and text_events:
            text_events.insert(1, Pause(pause))
        elif pause:
            events.append(Pause(pause))
        events.extend(text_events)
        ordered: list[dict[str, Any]] = []
        if shape.interleave:
            for round_ in range(max((len(f) for f in fragments), default=0)):
                ordered.extend(f[round_] for f in fragments if round_ < len(f))
        else:
            ordered = [fragment for call in fragments for fragment in call]
        events.extend(self._chunk(model, {"tool_calls": [f]}) for f in ordered)
        finish_at = len(events)
        events.append(
            self._chunk(model, {}, finish="tool_calls" if fragments else _finish_of(reply))
        )
        if usage_requested:
            usage_chunk = {
                "id": f"chatcmpl-sim-{self._served}",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "choices": [],
                "usage": self._usage(reply.usage),
            }
            events.append(sse(usage_chunk))
        events.append(sse("[DONE]"))
        return events, finish_at

    @staticmethod
    def _tool_fragments(reply: Reply, shape: StreamShape) -> list[list[dict[str, Any]]]:
        if not isinstance(reply, ToolCallReply):
            return []
        out: list[list[dict[str, Any]]] = []
        for k, (call_id, name, arguments) in enumerate(reply.calls):
            index = 0 if shape.all_index_zero else k
            head: dict[str, Any] = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            pieces = _pieces(arguments, shape.fragment)
            if shape.all_index_zero and len(pieces) <= 1:  # Ollama style: whole call at once
                head["function"]["arguments"] = arguments
                pieces = []
            call = [head]
            call += [{"index": index, "function": {"arguments": p}} for p in pieces]
            out.append(call)
        return out


_SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}


def _finish_of(reply: Reply) -> str:
    return reply.finish if isinstance(reply, TextReply) else "tool_calls"
