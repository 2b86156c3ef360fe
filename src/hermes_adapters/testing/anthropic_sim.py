"""A wire-faithful Anthropic Messages server for tests, in-process or on loopback.

:class:`AnthropicSimulator` plays the scenario vocabulary of :mod:`hermes_core.testing.llm`
in the exact Messages wire format (WIRE.md §2.2): ``message`` JSON bodies with content
blocks, typed SSE events whose ``event:`` name equals the data's ``type`` (``message_start``,
``content_block_start/delta/stop``, ``message_delta``, ``message_stop``, ``ping``,
``error``), Anthropic error bodies (``{"type": "error", "error": {...}}``, ``request-id``
header, 529 ``overloaded_error``) and the overflow text "prompt is too long: N tokens > M
maximum".

Like the real server it is strict, because the bugs it guards against (WIRE.md §4) only
show up against a strict peer: ``tool_use`` ids must be answered by ``tool_result`` blocks
in the next user message, thinking blocks must come back with the signature it issued for
exactly that text, at most four ``cache_control`` breakpoints, a user turn first, no
empty text blocks, ``tools`` defined whenever the messages hold tool blocks, the
``anthropic-version`` and ``x-api-key`` headers present.

Reach it through ``sim.mock_client()`` or ``async with sim.serve() as base_url``; the base
URL has no ``/v1`` suffix, as the adapter appends ``/v1/messages`` itself.

``simulate_cache=True`` reports prompt caching (:mod:`hermes_adapters.testing._prompt_cache`):
the prefix up to the last breakpoint is written on first sight and read when a later request
repeats it byte for byte. Off by default: scripted usage is then sent as written.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from hermes_adapters.testing._prompt_cache import PromptCache, unit, with_usage
from hermes_adapters.testing.scenario_server import (
    Pause,
    ScenarioServer,
    WirePlan,
    json_plan,
    sse,
)
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

__all__ = ["AnthropicSimulator", "signature_for"]

OVERFLOW = "prompt is too long: 210345 tokens > 200000 maximum"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_DEFAULT_MESSAGES = {
    400: "Invalid request.",
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    404: "The requested resource could not be found.",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of request tokens has exceeded your per-minute rate limit.",
    500: "Internal server error",
    529: "Overloaded",
}
_MID_STREAM = {
    "server": ("api_error", "Internal server error"),
    "overloaded": ("overloaded_error", "Overloaded"),
    "rate_limit": ("rate_limit_error", _DEFAULT_MESSAGES[429]),
    "context_overflow": ("invalid_request_error", OVERFLOW),
}
_STOP_OF = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
    "tool_calls": "tool_use",
}
_SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
_THINKING_REQUIRED = (
    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). "
    "We recommend you include thinking blocks from previous turns. To avoid this "
    "requirement, disable `thinking`."
)
_TOOLS_REQUIRED = "Requests which include `tool_use` or `tool_result` blocks must define tools."
_TOOL_CHOICE_TYPES = frozenset({"auto", "any", "tool", "none"})


def signature_for(thinking: str) -> str:
    """The signature the simulator issues for ``thinking`` (and demands back unchanged)."""
    digest = hashlib.sha256(b"hermes-sim:" + thinking.encode()).digest()
    return base64.b64encode(digest * 3).decode()


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _event(data: Mapping[str, Any]) -> bytes:
    return sse(dict(data), str(data["type"]))


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        str(b.get("text", ""))
        for b in content or ()
        if isinstance(b, Mapping) and b.get("type") == "text"
    )


class AnthropicSimulator(ScenarioServer):
    """Anthropic Messages (``POST /v1/messages``), strict like the real server."""

    def __init__(self, *, simulate_cache: bool = False) -> None:
        super().__init__()
        self._served = 0
        self.simulate_cache = simulate_cache
        self._cache = PromptCache()

    @asynccontextmanager
    async def serve(self, prefix: str = "") -> AsyncIterator[str]:
        """Serve on 127.0.0.1; the base URL has no path (the adapter adds ``/v1``)."""
        async with super().serve(prefix) as base_url:
            yield base_url

    # -- WireSimulator, format-specific half

    def supports(self, feature: Feature) -> bool:
        # blocks stream one after another, one delta per event, each at its own index, and
        # the API reports no separate reasoning-token count
        return feature not in {
            "all_index_zero",
            "interleave",
            "text_with_tool_deltas",
            "usage.reasoning_tokens",
        }

    def request_summary(self, index: int) -> RequestSummary:
        body = self._requests[index].body
        system = body.get("system")
        roles: list[str] = ["system"] if system else []
        user_texts: list[str] = []
        call_ids: list[str] = []
        result_ids: list[str] = []
        for message in body.get("messages", []):
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if message.get("role") == "assistant":
                roles.append("assistant")
                call_ids += [b["id"] for b in blocks if b.get("type") == "tool_use"]
                continue
            results = [b for b in blocks if b.get("type") == "tool_result"]
            others = [b for b in blocks if b.get("type") != "tool_result"]
            roles += ["tool"] * len(results)
            result_ids += [b["tool_use_id"] for b in results]
            if others:
                roles.append("user")
                user_texts.append(_texts(others))
        return RequestSummary(
            model=str(body.get("model")),
            stream=bool(body.get("stream")),
            system=_texts(system) if system else None,
            message_roles=tuple(roles),
            user_texts=tuple(user_texts),
            tool_names=tuple(t["name"] for t in body.get("tools", [])),
            tool_call_ids=tuple(call_ids),
            tool_result_ids=tuple(result_ids),
        )

    def replayed_reasoning(self, index: int) -> str | None:
        messages = self._requests[index].body.get("messages", [])
        turns = [
            m
            for m in messages
            if m.get("role") == "assistant"
            and isinstance(m.get("content"), list)
            and any(b.get("type") == "tool_use" for b in m["content"])
        ]
        if not turns:
            return None
        thoughts = [
            b.get("thinking", "") for b in turns[-1]["content"] if b.get("type") == "thinking"
        ]
        return "\n\n".join(thoughts) or None

    # -- strictness of the real server

    def validate(self, request: RecordedRequest) -> WirePlan | None:
        if request.method != "POST" or request.path != "/v1/messages":
            return self._error(404, f"Not found: {request.method} {request.path}")
        if "anthropic-version" not in request.headers:
            return self._error(400, "anthropic-version: header is required")
        if not request.headers.get("x-api-key"):
            return self._error(401, "x-api-key header is required")
        body = request.body
        if not isinstance(body.get("model"), str):
            return self._error(400, "model: Field required")
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return self._error(400, "max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._error(400, "messages: at least one message is required")
        markers = self._count_markers(body)
        if markers > 4:
            return self._error(
                400, f"A maximum of 4 blocks with cache_control may be provided. Found {markers}."
            )
        problem = self._check_config(body) or self._check_messages(body, messages)
        return None if problem is None else self._error(400, problem)

    @staticmethod
    def _count_markers(body: Mapping[str, Any]) -> int:
        blocks: list[Any] = list(body.get("tools") or ())
        system = body.get("system")
        if isinstance(system, list):
            blocks += system
        for message in body.get("messages") or ():
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, list):
                blocks += content
                for block in content:
                    inner = block.get("content") if isinstance(block, Mapping) else None
                    blocks += inner if isinstance(inner, list) else []
        return sum(1 for b in blocks if isinstance(b, Mapping) and "cache_control" in b)

    @staticmethod
    def _check_config(body: Mapping[str, Any]) -> str | None:
        names = [t.get("name") for t in body.get("tools") or ()]
        if len(set(names)) != len(names):
            return "tools: Tool names must be unique."
        for position, tool in enumerate(body.get("tools") or ()):
            schema = tool.get("input_schema")
            if not isinstance(schema, Mapping) or schema.get("type") != "object":
                return f"tools.{position}.custom.input_schema.type: Field required"
        choice = body.get("tool_choice")
        if choice is not None and (
            not isinstance(choice, Mapping) or choice.get("type") not in _TOOL_CHOICE_TYPES
        ):
            kind = choice.get("type") if isinstance(choice, Mapping) else choice
            return (
                f"tool_choice: Input tag '{kind}' found using 'type' does not match any of the "
                "expected tags: 'auto', 'any', 'tool', 'none'"
            )
        thinking = body.get("thinking")
        if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024:
                return (
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                )
            if budget >= body["max_tokens"]:
                return (
                    "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult "
                    "our documentation at https://docs.claude.com/en/docs/build-with-claude/"
                    "extended-thinking#max-tokens-and-context-window-size"
                )
            if body.get("temperature", 1) != 1:
                return (
                    "`temperature` may only be set to 1 when thinking is enabled or in "
                    "adaptive mode."
                )
            if (body.get("tool_choice") or {}).get("type") in {"any", "tool"}:
                return "Thinking may not be enabled when tool_choice forces tool use."
        return None

    def _check_messages(self, body: Mapping[str, Any], messages: list[Any]) -> str | None:
        if not body.get("tools") and _has_tool_blocks(messages):
            return _TOOLS_REQUIRED
        open_ids: list[str] = []
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, Mapping) else None
            if role not in {"user", "assistant"}:
                return f"messages.{i}.role: Input should be 'user' or 'assistant'"
            if i == 0 and role != "user":
                return 'messages: first message must use the "user" role'
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list) or not blocks:
                return f"messages.{i}: all messages must have non-empty content"
            for j, block in enumerate(blocks):
                problem = self._check_block(i, j, role, block)
                if problem:
                    return problem
            results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            if open_ids:
                missing = [x for x in open_ids if x not in results]
                if role != "user" or missing:
                    return (
                        f"messages.{i - 1}: `tool_use` ids were found without `tool_result` "
                        f"blocks immediately after: {', '.join(missing or open_ids)}. Each "
                        "`tool_use` block must have a corresponding `tool_result` block in the "
                        "next message."
                    )
            for j, result_id in enumerate(results):
                if result_id not in open_ids:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {result_id}. Each `tool_result` block must "
                        "have a corresponding `tool_use` block in the previous message."
                    )
            kinds = [b.get("type") for b in blocks]
            if results and kinds[: len(results)] != ["tool_result"] * len(results):
                return f"messages.{i}: `tool_result` blocks must come first in the user message"
            open_ids = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if open_ids:
            return (
                f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
                f"blocks immediately after: {', '.join(open_ids)}."
            )
        return self._check_final_thinking(body, messages)

    @staticmethod
    def _check_block(i: int, j: int, role: str, block: Any) -> str | None:
        if not isinstance(block, Mapping):
            return f"messages.{i}.content.{j}: Input should be an object"
        kind = block.get("type")
        where = f"messages.{i}.content.{j}"
        if kind == "text" and not str(block.get("text") or "").strip():
            return f"{where}.text: text content blocks must contain non-whitespace text"
        if kind in {"tool_use", "thinking", "redacted_thinking"} and role != "assistant":
            return f"{where}: `{kind}` blocks are only allowed in assistant messages"
        if kind == "tool_result" and role != "user":
            return f"{where}: `tool_result` blocks are only allowed in user messages"
        if kind == "tool_use" and not isinstance(block.get("input"), Mapping):
            return f"{where}.tool_use.input: Input should be a valid dictionary"
        if kind == "thinking":
            if "cache_control" in block:
                return f"{where}.thinking.cache_control: Extra inputs are not permitted"
            thinking = block.get("thinking")
            if not isinstance(thinking, str) or block.get("signature") != signature_for(thinking):
                return f"{where}: Invalid `signature` in `thinking` block"
        if kind == "redacted_thinking" and not block.get("data"):
            return f"{where}.redacted_thinking.data: Field required"
        return None

    @staticmethod
    def _check_final_thinking(body: Mapping[str, Any], messages: list[Any]) -> str | None:
        """With thinking on, the assistant turn inside an open tool loop starts with thinking."""
        thinking = body.get("thinking")
        if not (isinstance(thinking, Mapping) and thinking.get("type") == "enabled"):
            return None
        last = messages[-1]
        content = last.get("content")
        if not isinstance(content, list) or not any(
            b.get("type") == "tool_result" for b in content
        ):
            return None
        i = len(messages) - 2
        first = messages[i]["content"][0].get("type")
        if first in {"thinking", "redacted_thinking"}:
            return None
        return _THINKING_REQUIRED.format(i=i, found=first)

    # -- rendering

    def render(self, scenario: Scenario, request: RecordedRequest) -> WirePlan:
        self._served += 1
        body = request.body
        stream = bool(body.get("stream"))
        model = str(body.get("model"))
        if self.simulate_cache:
            scenario = with_usage(scenario, lambda u: self._cache_usage(model, body, u))
        if isinstance(scenario, HttpError):
            message = scenario.message or _DEFAULT_MESSAGES.get(
                scenario.status, "Internal server error"
            )
            return self._error(scenario.status, message, scenario.headers)
        if isinstance(scenario, ContextOverflow):
            return self._error(scenario.status, OVERFLOW, kind="invalid_request_error")
        if isinstance(scenario, MalformedBody):
            if not stream:
                return WirePlan(
                    200, {"content-type": "application/json"}, (scenario.body.encode(),)
                )
            start = self._message_start(model, Usage())
            bad = sse(scenario.body, "content_block_start")
            return WirePlan(200, _SSE_HEADERS, (start, bad), streamed=True)
        if isinstance(scenario, MidStreamError):
            kind, text = _MID_STREAM[scenario.error]
            error = {"type": "error", "error": {"type": kind, "message": scenario.message or text}}
            if not stream:
                return json_plan(200, error, self._ids())
            head: list[bytes | Pause] = [self._message_start(model, Usage())]
            head.append(_event({"type": "ping"}))
            head += self._text_block(0, scenario.partial, 8)[:-1]
            return WirePlan(200, _SSE_HEADERS, (*head, sse(error, "error")), streamed=True)
        if isinstance(scenario, TruncatedStream):
            if not stream:
                full = json.dumps(self._message(model, scenario.reply)).encode()
                return WirePlan(
                    200, {"content-type": "application/json"}, (full[: len(full) // 2],)
                )
            parts = self._events(model, scenario.reply)
            cut = parts[:-1] if scenario.keep_finish else parts[:-2]
            return WirePlan(200, _SSE_HEADERS, tuple(cut), streamed=True, abort=scenario.abort)
        if isinstance(scenario, Slow):
            if not stream:
                plan = json_plan(200, self._message(model, scenario.reply), self._ids())
                return replace(plan, delay=scenario.delay)
            parts = self._events(model, scenario.reply, pause=scenario.delay)
            return WirePlan(200, _SSE_HEADERS, tuple(parts), streamed=True)
        if not stream:
            return json_plan(200, self._message(model, scenario), self._ids())
        return WirePlan(200, _SSE_HEADERS, tuple(self._events(model, scenario)), streamed=True)

    def _cache_usage(self, model: str, body: Mapping[str, Any], usage: Usage) -> Usage:
        """Tools, system, then each message's blocks, in the order the server caches."""
        units = [unit({"tool": tool}) for tool in body.get("tools") or ()]
        system = body.get("system")
        for block in system if isinstance(system, list) else [system] if system else []:
            units.append(unit({"system": block}))
        for position, message in enumerate(body.get("messages") or ()):
            content = message.get("content")
            for block in content if isinstance(content, list) else [content]:
                units.append(unit({"m": position, "role": message.get("role"), "block": block}))
        return self._cache.explicit(model, units).apply(usage)

    def _ids(self) -> dict[str, str]:
        return {"request-id": f"req_sim_{len(self._requests):04d}"}

    def _error(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        kind: str | None = None,
    ) -> WirePlan:
        error_type = kind or _ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        payload = {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": self._ids()["request-id"],
        }
        return json_plan(status, payload, {**self._ids(), **(headers or {})})

    @staticmethod
    def _usage(usage: Usage, *, output: int | None = None) -> dict[str, Any]:
        return {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": usage.cache_write_tokens,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": usage.output_tokens if output is None else output,
            "service_tier": "standard",
        }

    @staticmethod
    def _blocks(reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.reasoning:
            thinking = reply.reasoning
            blocks.append(
                {"type": "thinking", "thinking": thinking, "signature": signature_for(thinking)}
            )
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for call_id, name, arguments in _calls(reply):
            payload = json.loads(arguments) if arguments.strip() else {}
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": payload})
        return blocks

    def _message(self, model: str, reply: Reply) -> dict[str, Any]:
        return {
            "id": f"msg_sim_{self._served:04d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": self._blocks(reply),
            "stop_reason": _stop_of(reply),
            "stop_sequence": None,
            "usage": self._usage(reply.usage),
        }

    def _message_start(self, model: str, usage: Usage) -> bytes:
        message: dict[str, Any] = {
            "id": f"msg_sim_{self._served:04d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(usage, output=1),
        }
        return _event({"type": "message_start", "message": message})

    @staticmethod
    def _text_block(index: int, text: str, size: int) -> list[bytes | Pause]:
        events: list[bytes | Pause] = [
            _event(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
            )
        ]
        for piece in _pieces(text, size):
            delta = {"type": "text_delta", "text": piece}
            events.append(_event({"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(_event({"type": "content_block_stop", "index": index}))
        return events

    def _events(self, model: str, reply: Reply, *, pause: float = 0.0) -> list[bytes | Pause]:
        """Every event of a streamed reply; ``pause`` (for :class:`Slow`) waits after the
        first text fragment, or after ``message_start`` when there is no text."""
        size = reply.shape.fragment
        events: list[bytes | Pause] = [
            self._message_start(model, reply.usage),
            _event({"type": "ping"}),
        ]
        if pause and not reply.text:
            events.append(Pause(pause))
        index = 0
        if reply.reasoning:
            start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            events.append(
                _event({"type": "content_block_start", "index": 0, "content_block": start})
            )
            for piece in _pieces(reply.reasoning, size):
                delta = {"type": "thinking_delta", "thinking": piece}
                events.append(_event({"type": "content_block_delta", "index": 0, "delta": delta}))
            signature = {"type": "signature_delta", "signature": signature_for(reply.reasoning)}
            events.append(_event({"type": "content_block_delta", "index": 0, "delta": signature}))
            events.append(_event({"type": "content_block_stop", "index": 0}))
            index = 1
        if reply.text:
            text_events = self._text_block(index, reply.text, size)
            if pause:
                text_events.insert(2, Pause(pause))
            events += text_events
            index += 1
        for call_id, name, arguments in _calls(reply):
            use = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
            events.append(
                _event({"type": "content_block_start", "index": index, "content_block": use})
            )
            for piece in _pieces(arguments, size) or [""]:
                delta = {"type": "input_json_delta", "partial_json": piece}
                events.append(
                    _event({"type": "content_block_delta", "index": index, "delta": delta})
                )
            events.append(_event({"type": "content_block_stop", "index": index}))
            index += 1
        finish = {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_of(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.usage.output_tokens},
        }
        events += [_event(finish), _event({"type": "message_stop"})]
        return events


def _has_tool_blocks(messages: Sequence[Any]) -> bool:
    return any(
        isinstance(block, Mapping) and block.get("type") in {"tool_use", "tool_result"}
        for message in messages
        if isinstance(message, Mapping) and isinstance(message.get("content"), list)
        for block in message["content"]
    )


def _calls(reply: Reply) -> Sequence[tuple[str, str, str]]:
    return reply.calls if isinstance(reply, ToolCallReply) else ()


def _stop_of(reply: Reply) -> str:
    if isinstance(reply, ToolCallReply):
        return "tool_use"
    assert isinstance(reply, TextReply)
    return _STOP_OF[reply.finish]
