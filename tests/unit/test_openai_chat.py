"""Unit tests of the Chat Completions adapter and the shared HTTP helpers.

Why unit tests and not only the contract: the request JSON is a byte-level contract with
strict servers (every expected body below is written out by hand from WIRE.md §2.1 and
REFERENCE.md §11, never captured from the implementation), the retry policy is pure
arithmetic on headers, and each WIRE.md §4 bug needs its exact wire shape replayed,
which the scenario vocabulary deliberately does not expose.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest

from hermes_adapters.llm import openai_chat
from hermes_adapters.llm._http import (
    Endpoint,
    RetryPolicy,
    SSEEvent,
    error_from_payload,
    error_from_status,
    is_context_overflow,
    iter_sse,
    parse_retry_after,
    should_retry,
)
from hermes_adapters.llm._openai_mapping import (
    ChatStreamAssembler,
    chat_messages,
    parse_chat_completion,
    usage_from_chat,
)
from hermes_adapters.llm.openai_chat import OpenAIChatModel
from hermes_adapters.testing.openai_chat_sim import OpenAIChatSimulator
from hermes_core.errors import (
    ConfigError,
    ContextTooLong,
    IncompleteStream,
    ModelAuthError,
    ModelError,
    ModelProtocolError,
    ModelRateLimited,
    ModelUnavailable,
)
from hermes_core.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from hermes_core.ports.llm import (
    CacheHints,
    ModelRequest,
    ReasoningDelta,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hermes_core.testing.llm import HttpError, MidStreamError, TextReply, ToolCallReply
from hermes_core.testing.sample_tools import ADD_SPEC

pytestmark = pytest.mark.anyio
leakproof = pytest.mark.usefixtures("no_leaks")  # async tests only: the fixture is async


# -- request building -------------------------------------------------------------------


def _multi_turn() -> tuple[SystemMessage | UserMessage | AssistantMessage | ToolMessage, ...]:
    return (
        SystemMessage(content="You are Hermes."),
        UserMessage(content="Add 2+3 and 4+5."),
        AssistantMessage(
            content=None,
            reasoning="Two sums, in parallel.",
            finish_reason="tool_calls",
            tool_calls=(
                ToolCall(
                    id="call_1",
                    name="add",
                    arguments='{"a": 2, "b": 3}',
                    extra={"call_id": "call_1", "response_item_id": "fc_1"},
                ),
                ToolCall(
                    id="call_2",
                    name="add",
                    arguments="",
                    extra={"extra_content": {"google": {"thought_signature": "abc"}}},
                ),
            ),
            provider_data={
                "reasoning_content": "Two sums, in parallel.",
                "codex_reasoning_items": [{"type": "reasoning", "id": "rs_1"}],
                "anthropic_content_blocks": [{"type": "thinking", "thinking": "x"}],
            },
        ),
        ToolMessage(tool_call_id="call_1", content='{"sum": 5}', name="add"),
        ToolMessage(tool_call_id="call_2", content='{"sum": 9}', is_error=False),
        AssistantMessage(content="5 and 9.", finish_reason="stop", reasoning="Done."),
        UserMessage(content=({"type": "text", "text": "Thanks!"},)),
    )


def test_multi_turn_request_body_is_exact() -> None:
    model = OpenAIChatModel("gpt-4.1")
    request = ModelRequest(
        messages=_multi_turn(),
        tools=(ADD_SPEC,),
        max_tokens=512,
        reasoning={"effort": "low"},
        tool_choice="auto",
        cache=CacheHints(stable_system_chars=15, cache_key="session-7"),
        settings={"temperature": 0.2, "extra_body": {"seed": 7}},
    )
    assert model.build_body(request) == {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "You are Hermes."},
            {"role": "user", "content": "Add 2+3 and 4+5."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "add", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"sum": 5}'},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"sum": 9}'},
            {"role": "assistant", "content": "5 and 9."},
            {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two integers.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        "required": ["a", "b"],
                    },
                },
            }
        ],
        "tool_choice": "auto",
        "max_completion_tokens": 512,
        "reasoning_effort": "low",
        "prompt_cache_key": "session-7",
        "temperature": 0.2,
        "seed": 7,
    }


def test_streamed_body_asks_for_usage_and_legacy_max_tokens_is_configurable() -> None:
    model = OpenAIChatModel("local", max_tokens_field="max_tokens")
    request = ModelRequest(messages=(UserMessage(content="hi"),), max_tokens=64)
    assert model.build_body(request, stream=True) == {
        "model": "local",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_reasoning_disabled_sends_no_effort_and_request_model_wins() -> None:
    model = OpenAIChatModel("default-model")
    request = ModelRequest(
        messages=(UserMessage(content="hi"),),
        model="override",
        reasoning={"enabled": False, "effort": "high"},
    )
    body = model.build_body(request)
    assert body["model"] == "override" and "reasoning_effort" not in body


def test_gemini_keeps_extra_content_on_tool_calls() -> None:
    messages = chat_messages(_multi_turn(), keep_extra_content=True)
    assert messages[2]["tool_calls"][1]["extra_content"] == {"google": {"thought_signature": "abc"}}
    auto = OpenAIChatModel("gemini-2.5-pro").build_body(ModelRequest(messages=_multi_turn()))
    assert "extra_content" in auto["messages"][2]["tool_calls"][1]


def test_deepseek_echoes_reasoning_content_on_tool_call_turns_only() -> None:
    messages = chat_messages(_multi_turn(), reasoning_echo="reasoning_content")
    assert messages[2]["reasoning_content"] == "Two sums, in parallel."
    assert "reasoning_content" not in messages[5], "non-tool turns may drop it (WIRE §2.1)"
    assert all("reasoning_details" not in m for m in messages)


@pytest.mark.parametrize(
    ("reasoning", "provider_data", "sent"),
    [
        (None, {}, " "),
        ("", {"reasoning_content": ""}, " "),
        ("from the reasoning field", {}, "from the reasoning field"),
        ("ignored", {"reasoning_content": "verbatim"}, "verbatim"),
    ],
)
def test_deepseek_echo_fills_empty_reasoning_with_a_space(
    reasoning: str | None, provider_data: dict[str, Any], sent: str
) -> None:
    turn = AssistantMessage(
        reasoning=reasoning,
        tool_calls=(ToolCall(id="c1", name="add", arguments="{}"),),
        provider_data=provider_data,
    )
    (message,) = chat_messages((turn,), reasoning_echo="reasoning_content")
    assert message["reasoning_content"] == sent


def test_openrouter_echoes_reasoning_details_verbatim() -> None:
    details = [
        {"type": "reasoning.text", "text": "step", "signature": "s1", "format": "x", "index": 0},
        {"type": "reasoning.encrypted", "data": "opaque==", "index": 1},
    ]
    turns = (
        AssistantMessage(content="plain", provider_data={"reasoning_details": details}),
        AssistantMessage(
            tool_calls=(ToolCall(id="c1", name="add"),),
            provider_data={"reasoning_details": details, "reasoning_content": "no"},
        ),
    )
    messages = chat_messages(turns, reasoning_echo="reasoning_details")
    assert [m["reasoning_details"] for m in messages] == [details, details]
    assert all("reasoning_content" not in m for m in messages)


def test_default_echo_strips_every_reasoning_field() -> None:
    for message in chat_messages(_multi_turn()):
        assert not {"reasoning", "reasoning_content", "reasoning_details", "finish_reason"} & set(
            message
        )
        assert not any(k.startswith(("codex_", "anthropic_")) for k in message)


# -- retry policy -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"Retry-After-Ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after": "Wed, 01 Jan 2025 00:00:30 GMT"}, 30.0),
        ({"retry-after": "Wed, 01 Jan 2025 00:00:00 GMT"}, None),
        ({"retry-after": "0"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "nope", "retry-after": "3"}, 3.0),
        ({}, None),
    ],
)
def test_retry_after_parsing(headers: dict[str, str], seconds: float | None) -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_retry_after(headers, now=now) == seconds


def test_backoff_is_exponential_capped_and_jittered_down() -> None:
    exact = RetryPolicy(jitter=lambda: 0.0)
    assert [exact.backoff(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    jittered = RetryPolicy(jitter=lambda: 0.999)
    assert jittered.backoff(0) == pytest.approx(0.5 * 0.75, rel=1e-3)
    assert exact.delay(0, {"retry-after": "3"}) == 3.0
    assert exact.delay(1, {"retry-after": "600"}) == 1.0, "absurd waits fall back to backoff"
    with pytest.raises(ConfigError):
        RetryPolicy(max_retries=-1)


@pytest.mark.parametrize(
    ("status", "headers", "body", "retry"),
    [
        (500, {}, "", True),
        (503, {}, "", True),
        (529, {}, "", True),
        (408, {}, "", True),
        (409, {}, "", True),
        (429, {}, "", True),
        (500, {"x-should-retry": "false"}, "", False),
        (418, {"x-should-retry": "true"}, "", True),
        (400, {"x-should-retry": "true"}, "", False),
        (401, {}, "", False),
        (403, {}, "", False),
        (404, {}, "", False),
        (422, {}, "", False),
        (429, {}, '{"error": {"message": "quota", "code": "insufficient_quota"}}', False),
        (413, {}, '{"error": {"message": "prompt is too long: 300000 tokens"}}', False),
    ],
)
def test_should_retry(status: int, headers: dict[str, str], body: str, retry: bool) -> None:
    assert should_retry(status, headers, body) is retry


# -- error mapping ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 128000 tokens. However, you requested 130000.",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000",
        "model_context_window_exceeded",
        "Request has too many tokens for this model",
        "The input exceeds the context window of this model",
    ],
)
@pytest.mark.parametrize("status", [400, 413])
def test_context_overflow_phrasings(message: str, status: int) -> None:
    body = json.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )
    error = error_from_status(status, {}, body, provider="p")
    assert isinstance(error, ContextTooLong) and error.status == status


def test_overflow_needs_a_client_status_or_the_code() -> None:
    assert not is_context_overflow(500, "maximum context length exceeded upstream")
    assert is_context_overflow(500, "whatever", "context_length_exceeded")


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, ModelAuthError),
        (403, ModelAuthError),
        (429, ModelRateLimited),
        (500, ModelUnavailable),
        (529, ModelUnavailable),
        (408, ModelUnavailable),
        (404, ModelError),
    ],
)
def test_status_mapping(status: int, kind: type[ModelError]) -> None:
    error = error_from_status(status, {"retry-after": "4"}, '{"error": "x"}', provider="p")
    assert type(error) is kind and error.status == status and error.body == '{"error": "x"}'
    if isinstance(error, ModelRateLimited):
        assert error.retry_after == 4.0


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ({"message": "boom", "type": "server_error"}, ModelUnavailable),
        ({"message": "Overloaded", "type": "overloaded_error"}, ModelUnavailable),
        ({"message": "slow down", "code": "rate_limit_exceeded"}, ModelRateLimited),
        ({"message": "bad key", "code": "invalid_api_key"}, ModelAuthError),
        (
            {"message": "This endpoint's maximum context length is 8192", "code": 400},
            ContextTooLong,
        ),
        ("plain string error", ModelError),
    ],
)
def test_in_band_error_mapping(payload: Any, kind: type[ModelError]) -> None:
    assert type(error_from_payload(payload, provider="p")) is kind


# -- the HTTP path ----------------------------------------------------------------------


def _model(
    handler: Callable[[httpx.Request], httpx.Response], **kw: Any
) -> tuple[OpenAIChatModel, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    kw.setdefault("backoff", (0.001, 0.002))
    return OpenAIChatModel("gpt-test", client=client, api_key="sk-secret", **kw), client


def _hi() -> ModelRequest:
    return ModelRequest(messages=(UserMessage(content="hi"),))


@leakproof
async def test_key_goes_only_to_the_configured_host_and_redirects_are_not_followed() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"location": "https://evil.example/steal"})

    model, client = _model(handler)
    async with client:
        with pytest.raises(ModelError) as info:
            await model.complete(_hi())
    assert info.value.status == 302
    assert [str(r.url) for r in seen] == ["https://api.openai.com/v1/chat/completions"]
    assert seen[0].headers["authorization"] == "Bearer sk-secret"
    endpoint = Endpoint("https://api.openai.com/v1", api_key="sk-hidden")
    assert endpoint.url("/models") == "https://api.openai.com/v1/models"
    with pytest.raises(ConfigError):
        endpoint.url("https://evil.example/v1/chat/completions")
    assert "sk-hidden" not in repr(endpoint)


@leakproof
async def test_no_key_no_authorization_header() -> None:
    sim = OpenAIChatSimulator()
    sim.play(TextReply("hi"))
    async with sim.mock_client() as client:
        model = OpenAIChatModel("m", client=client, base_url="http://localhost:11434/v1")
        await model.complete(_hi())
    assert "authorization" not in sim.requests[0].headers
    assert sim.requests[0].path == "/v1/chat/completions"


@leakproof
async def test_errors_are_raised_from_the_httpx_exception() -> None:
    sim = OpenAIChatSimulator()
    sim.play(HttpError(401))
    async with sim.mock_client() as client:
        model = OpenAIChatModel("m", client=client)
        with pytest.raises(ModelAuthError) as info:
            await model.complete(_hi())
    assert isinstance(info.value.__cause__, httpx.HTTPStatusError)
    assert "Incorrect API key" in str(info.value)


@leakproof
async def test_connection_errors_are_retried_then_mapped() -> None:
    attempts = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal attempts
        attempts += 1
        raise httpx.ConnectError("connection refused", request=request)

    model, client = _model(handler, max_retries=3)
    async with client:
        with pytest.raises(ModelUnavailable) as info:
            await model.complete(_hi())
    assert attempts == 4
    assert isinstance(info.value.__cause__, httpx.ConnectError)


@leakproof
async def test_timeouts_are_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    model, client = _model(handler, max_retries=0)
    async with client:
        with pytest.raises(ModelUnavailable, match="timed out"):
            await model.complete(_hi())


@leakproof
async def test_insufficient_quota_is_not_retried() -> None:
    sim = OpenAIChatSimulator()
    sim.play(HttpError(429, "You exceeded your current quota", code="insufficient_quota"))
    async with sim.mock_client() as client:
        model = OpenAIChatModel("m", client=client, backoff=(0.001, 0.001))
        with pytest.raises(ModelRateLimited):
            await model.complete(_hi())
    assert len(sim.requests) == 1


@leakproof
async def test_request_is_built_once_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = OpenAIChatSimulator()
    sim.play(HttpError(503), HttpError(429, headers={"retry-after-ms": "1"}), TextReply("ok"))
    calls = 0
    original = OpenAIChatModel._encode

    def counting(self: OpenAIChatModel, request: ModelRequest, *, stream: bool) -> bytes:
        nonlocal calls
        calls += 1
        return original(self, request, stream=stream)

    monkeypatch.setattr(OpenAIChatModel, "_encode", counting)
    async with sim.mock_client() as client:
        model = OpenAIChatModel("m", client=client, backoff=(0.001, 0.001))
        assert (await model.complete(_hi())).message.content == "ok"
    assert calls == 1 and len(sim.requests) == 3


@leakproof
async def test_owned_and_borrowed_clients() -> None:
    async with httpx.AsyncClient() as borrowed:
        model = OpenAIChatModel("m", client=borrowed)
        await model.aclose()
        await model.aclose()
        assert not borrowed.is_closed
        with pytest.raises(ModelError, match="after aclose"):
            await model.complete(_hi())
    owned = OpenAIChatModel("m")
    await owned.aclose()
    with pytest.raises(ConfigError):
        OpenAIChatModel("m", base_url="api.openai.com/v1")


@leakproof
async def test_protocol_errors_for_bodies_without_choices() -> None:
    for body in ({"object": "chat.completion"}, {"choices": [{"index": 0}]}, [1, 2]):
        with pytest.raises(ModelProtocolError):
            parse_chat_completion(body, provider="p")
    with pytest.raises(ContextTooLong):
        parse_chat_completion(
            {"error": {"message": "maximum context length is 8k", "code": None}}, provider="p"
        )


# -- response parsing -------------------------------------------------------------------


def test_refusal_becomes_content_filter() -> None:
    response = parse_chat_completion(
        {
            "choices": [
                {
                    "message": {"role": "assistant", "content": None, "refusal": "I can't."},
                    "finish_reason": "stop",
                }
            ]
        },
        provider="p",
    )
    assert response.finish_reason == "content_filter"
    assert response.message.content == "I can't."
    assert response.message.provider_data == {"refusal": "I can't."}


def test_tool_calls_with_stop_finish_and_null_arguments() -> None:
    response = parse_chat_completion(
        {
            "choices": [
                {
                    "message": {
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "ping", "arguments": None},
                            },
                            {
                                "type": "function",
                                "function": {"name": "add", "arguments": {"a": 1}},
                                "extra_content": {"google": {"thought_signature": "t"}},
                            },
                        ],
                    },
                    "finish_reason": "stop",
                }
            ],
            "model": "served-model",
        },
        provider="p",
    )
    first, second = response.message.tool_calls
    assert (first.id, first.arguments) == ("c1", "{}")
    assert second.id.startswith("call_") and second.arguments == '{"a": 1}'
    assert second.extra == {"extra_content": {"google": {"thought_signature": "t"}}}
    assert response.finish_reason == "tool_calls" and response.message.content is None
    assert response.model == "served-model"


@pytest.mark.parametrize(
    ("raw", "usage"),
    [
        (
            {
                "prompt_tokens": 1000,
                "completion_tokens": 50,
                "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 100},
                "completion_tokens_details": {"reasoning_tokens": 20},
            },
            Usage(
                input_tokens=300,
                output_tokens=50,
                cache_read_tokens=600,
                cache_write_tokens=100,
                reasoning_tokens=20,
            ),
        ),
        (
            {"prompt_tokens": 90, "completion_tokens": 9, "prompt_cache_hit_tokens": 64},
            Usage(input_tokens=26, output_tokens=9, cache_read_tokens=64),
        ),
        (
            {"prompt_tokens": 5, "completion_tokens": None, "prompt_tokens_details": None},
            Usage(input_tokens=5),
        ),
        (None, Usage()),
    ],
    ids=["openai", "deepseek", "nulls", "absent"],
)
def test_usage_buckets(raw: Any, usage: Usage) -> None:
    assert usage_from_chat(raw) == usage


# -- streaming: WIRE.md §4 cases replayed chunk by chunk -----------------------------------


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return json.dumps({"object": "chat.completion.chunk", "choices": choices, **top})


def _feed(payloads: Sequence[str], *, done: bool = True) -> tuple[list[StreamEvent], Any]:
    assembler = ChatStreamAssembler(provider="p")
    events: list[StreamEvent] = []
    for payload in [*payloads, *(["[DONE]"] if done else [])]:
        events.extend(assembler.feed(SSEEvent(payload)))
    return events, assembler.finish()


def _call(
    index: int, id: str | None = None, name: str | None = None, args: str | None = None
) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    out: dict[str, Any] = {"index": index, "function": function}
    if id is not None:
        out |= {"id": id, "type": "function"}
    return out


def _calls(response: Any) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, c.arguments) for c in response.message.tool_calls]


def test_item6_interleaved_fragments_are_keyed_by_index() -> None:
    _, response = _feed(
        [
            _chunk({"tool_calls": [_call(0, "a", "read_file", "")]}),
            _chunk({"tool_calls": [_call(1, "b", "write_file", "")]}),
            _chunk({"tool_calls": [_call(1, args='{"path": "out"}')]}),
            _chunk({"tool_calls": [_call(0, args='{"path": "in"}')]}),
            _chunk({}, "tool_calls"),
        ]
    )
    assert _calls(response) == [
        ("a", "read_file", '{"path": "in"}'),
        ("b", "write_file", '{"path": "out"}'),
    ]


def test_item7_all_index_zero_with_ids() -> None:
    events, response = _feed(
        [
            _chunk({"tool_calls": [_call(0, "a", "add", '{"a":1}')]}),
            _chunk({"tool_calls": [_call(0, "b", "add", '{"a":2}')]}),
            _chunk({}, "tool_calls"),
        ]
    )
    assert _calls(response) == [("a", "add", '{"a":1}'), ("b", "add", '{"a":2}')]
    assert [e.index for e in events if isinstance(e, ToolCallDelta)] == [0, 1]


def test_item7_all_index_zero_without_ids_splits_on_a_name_after_complete_json() -> None:
    _, response = _feed(
        [
            _chunk({"tool_calls": [_call(0, name="add", args='{"a":')]}),
            _chunk({"tool_calls": [_call(0, name="add", args="1}")]}),  # repeated name: noise
            _chunk({"tool_calls": [_call(0, name="echo", args='{"t":"x"}')]}),
            _chunk({"tool_calls": [_call(0, name="add", args='{"a":3}')]}),
            _chunk({}, "tool_calls"),
        ]
    )
    names_args = [(n, a) for _, n, a in _calls(response)]
    assert names_args == [("add", '{"a":1}'), ("echo", '{"t":"x"}'), ("add", '{"a":3}')]
    ids = [i for i, _, _ in _calls(response)]
    assert len(set(ids)) == 3 and all(i.startswith("call_") for i in ids)


def test_repeated_id_on_every_fragment_continues_the_call() -> None:
    _, response = _feed(
        [
            _chunk({"tool_calls": [_call(0, "a", "add", '{"a"')]}),
            _chunk({"tool_calls": [_call(0, "a", None, ": 1}")]}),
            _chunk({}, "tool_calls"),
        ]
    )
    assert _calls(response) == [("a", "add", '{"a": 1}')]


def test_item8_empty_arguments_become_an_empty_object() -> None:
    _, response = _feed(
        [_chunk({"tool_calls": [_call(0, "a", "ping", "")]}), _chunk({}, "tool_calls")]
    )
    assert _calls(response) == [("a", "ping", "{}")]


def test_item9_text_and_tool_deltas_in_one_chunk() -> None:
    events, response = _feed(
        [
            _chunk({"content": "Let me look. "}),
            _chunk({"content": "Calling.", "tool_calls": [_call(0, "a", "ls", '{"p": "."}')]}),
            _chunk({}, "tool_calls"),
        ]
    )
    assert response.message.content == "Let me look. Calling."
    assert _calls(response) == [("a", "ls", '{"p": "."}')]
    assert [type(e) for e in events] == [TextDelta, TextDelta, ToolCallDelta]


def test_item12_streamed_reasoning_fields_are_kept() -> None:
    detail = {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0}
    events, response = _feed(
        [
            _chunk({"reasoning": "Think", "reasoning_details": [{**detail, "text": "Think"}]}),
            _chunk({"reasoning": "ing.", "reasoning_details": [{**detail, "text": "ing."}]}),
            _chunk({"reasoning_details": [{**detail, "text": "", "signature": "sig"}]}),
            _chunk(
                {"reasoning_details": [{"type": "reasoning.encrypted", "data": "e==", "index": 1}]}
            ),
            _chunk({"content": "Answer."}, "stop"),
        ]
    )
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Think", "ing."]
    assert response.message.reasoning == "Thinking."
    assert response.message.provider_data["reasoning_details"] == [
        {**detail, "text": "Thinking.", "signature": "sig"},
        {"type": "reasoning.encrypted", "data": "e==", "index": 1},
    ]


def test_item12_deepseek_reasoning_content_is_kept_for_replay() -> None:
    _, response = _feed(
        [
            _chunk({"content": None, "reasoning_content": "Need "}),
            _chunk({"content": None, "reasoning_content": "a tool."}),
            _chunk({"tool_calls": [_call(0, "a", "add", "{}")]}, "tool_calls"),
        ]
    )
    assert response.message.provider_data == {"reasoning_content": "Need a tool."}
    (replayed,) = chat_messages((response.message,), reasoning_echo="reasoning_content")
    assert replayed["reasoning_content"] == "Need a tool."


def test_item14_overflow_reported_inside_the_stream() -> None:
    assembler = ChatStreamAssembler(provider="p")
    assembler.feed(SSEEvent(_chunk({"content": "par"})))
    error = {
        "error": {
            "message": "prompt is too long: 1 tokens > 0 maximum",
            "type": "invalid_request_error",
        }
    }
    with pytest.raises(ContextTooLong):
        assembler.feed(SSEEvent(json.dumps(error)))


@pytest.mark.parametrize(
    ("payloads", "done"),
    [
        ([_chunk({"content": "cut"})], True),
        ([_chunk({"content": "cut"}), _chunk({}, "stop")], False),
        ([], True),
    ],
    ids=["no_finish", "no_done", "empty"],
)
def test_item22_a_stream_needs_finish_reason_and_done(payloads: list[str], done: bool) -> None:
    with pytest.raises(IncompleteStream):
        _feed(payloads, done=done)


def test_usage_chunk_and_foreign_choices() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    other_choice = json.dumps({"choices": [{"index": 1, "delta": {"content": "nope"}}]})
    _, response = _feed(
        [_chunk({"content": "yes"}, "stop"), other_choice, _chunk(None, usage=usage)]
    )
    assert response.message.content == "yes"
    assert response.usage == Usage(input_tokens=6, output_tokens=2, cache_read_tokens=4)


def test_a_cut_event_is_incomplete_and_a_bad_event_is_a_protocol_error() -> None:
    assembler = ChatStreamAssembler(provider="p")
    with pytest.raises(IncompleteStream):
        assembler.feed(SSEEvent('{"choices": [{"ind', complete=False))
    with pytest.raises(ModelProtocolError):
        assembler.feed(SSEEvent("not json"))
    assembler.feed(SSEEvent("[DONE]", complete=False))
    assert assembler.done


# -- SSE parsing ------------------------------------------------------------------------


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


@leakproof
async def test_sse_parser_follows_the_spec() -> None:
    events = [
        e
        async for e in iter_sse(
            _lines(
                ": keep-alive comment",
                "event: message_start",
                "id: 7",
                'data: {"a":',
                "data:1}",
                "",
                "",
                "data: [DONE]\r",
                "",
                "data: tail",
            )
        )
    ]
    assert events == [
        SSEEvent('{"a":\n1}', "message_start", "7"),
        SSEEvent("[DONE]", id="7"),  # the last event id persists, per the SSE spec
        SSEEvent("tail", id="7", complete=False),
    ]


@leakproof
async def test_stream_cut_by_the_transport_is_incomplete() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        class Cut(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                yield f"data: {_chunk({'content': 'hel'})}\n\n".encode()
                raise httpx.RemoteProtocolError("peer closed connection")

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Cut())

    model, client = _model(handler)
    events: list[StreamEvent] = []
    async with client:
        with pytest.raises(IncompleteStream) as info:
            async for event in model.stream(_hi()):
                events.append(event)
    assert events == [TextDelta("hel")]
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


@leakproof
async def test_simulated_tool_round_trip_with_strict_pairing() -> None:
    """The simulator rejects an unanswered tool call like the real server does."""
    sim = OpenAIChatSimulator()
    sim.play(ToolCallReply([("c1", "add", '{"a": 1, "b": 2}')]))
    async with sim.mock_client() as client:
        model = OpenAIChatModel("m", client=client)
        first = await model.complete(
            ModelRequest(messages=(UserMessage(content="1+2"),), tools=(ADD_SPEC,))
        )
        dangling = ModelRequest(
            messages=(UserMessage(content="1+2"), first.message), tools=(ADD_SPEC,)
        )
        with pytest.raises(ModelError, match="tool_call_id"):
            await model.complete(dangling)
        assert isinstance((await _last(model, sim)), ResponseComplete)


async def _last(model: OpenAIChatModel, sim: OpenAIChatSimulator) -> StreamEvent:
    sim.play(TextReply("3"))
    events = [e async for e in model.stream(_hi())]
    return events[-1]


@leakproof
@pytest.mark.parametrize(
    ("error", "kind"),
    [("overloaded", ModelUnavailable), ("context_overflow", ContextTooLong)],
)
async def test_mid_stream_error_releases_the_response_without_aclosing(
    error: Any, kind: type[ModelError]
) -> None:
    """The caller iterates plainly (no ``aclosing``): the adapter still reads the rest of
    the body before raising, so no httpx iterator is left for a stray finaliser task."""
    sim = OpenAIChatSimulator()
    sim.play(MidStreamError(error))
    text: list[str] = []
    async with sim.mock_client() as client:
        model = OpenAIChatModel("m", client=client, max_retries=0)
        with pytest.raises(kind):
            async for event in model.stream(_hi()):
                if isinstance(event, TextDelta):
                    text.append(event.text)
    assert "".join(text) == "Partial answer "


@leakproof
async def test_draining_after_an_in_band_error_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that reports an error and then keeps the connection open cannot hold the
    caller: the drain gives up after its bound and the error still surfaces."""
    monkeypatch.setattr(openai_chat, "_DRAIN_SECONDS", 0.05)

    def handler(request: httpx.Request) -> httpx.Response:
        class Stalled(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                error = {"message": "The server had an error.", "type": "server_error"}
                yield f"data: {json.dumps({'error': error})}\n\n".encode()
                await anyio.sleep_forever()
                yield b""  # pragma: no cover

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Stalled())

    model, client = _model(handler, max_retries=0)
    async with client:
        with anyio.fail_after(5), pytest.raises(ModelUnavailable):
            async for _ in model.stream(_hi()):
                pass


@leakproof
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tool_choice": "none"}, "only allowed when 'tools' are specified"),
        ({"tool_choice": "never", "tools": [ADD_SPEC.function_schema()]}, "Invalid value: 'never'"),
    ],
)
async def test_simulator_rejects_a_bad_tool_choice(extra: dict[str, Any], message: str) -> None:
    sim = OpenAIChatSimulator()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    async with sim.mock_client() as client:
        reply = await client.post("http://sim/v1/chat/completions", json=body)
    assert reply.status_code == 400 and message in reply.json()["error"]["message"]
