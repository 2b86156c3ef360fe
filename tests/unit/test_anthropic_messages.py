"""Unit tests of the Anthropic Messages adapter, its mapping and its simulator.

Why unit tests and not only the contract: the request JSON is a byte-level contract with a
strict server and with its prompt cache (every expected body below is written by hand from
WIRE.md §2.2 and REFERENCE.md §7/§11, never captured from the implementation), thinking
blocks must come back byte-for-byte, and each WIRE.md §4 bug needs its exact wire shape
replayed, which the scenario vocabulary deliberately does not expose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest

from hermes_adapters.llm._anthropic_mapping import (
    AnthropicStreamAssembler,
    anthropic_messages,
    parse_message,
    thinking_config,
    usage_from_anthropic,
)
from hermes_adapters.llm._http import SSEEvent
from hermes_adapters.llm.anthropic_messages import AnthropicMessagesModel
from hermes_adapters.testing.anthropic_sim import AnthropicSimulator, signature_for
from hermes_core.errors import (
    ContextTooLong,
    IncompleteStream,
    ModelError,
    ModelProtocolError,
    ModelUnavailable,
)
from hermes_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)
from hermes_core.ports.llm import (
    CacheHints,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hermes_core.testing.llm import (
    ContextOverflow,
    HttpError,
    MidStreamError,
    TextReply,
    ToolCallReply,
)
from hermes_core.testing.sample_tools import ADD_SPEC

pytestmark = pytest.mark.anyio
leakproof = pytest.mark.usefixtures("no_leaks")  # async tests only: the fixture is async

ADD_WIRE = {
    "name": "add",
    "description": "Add two integers.",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
MARK = {"type": "ephemeral"}
MARK_1H = {"type": "ephemeral", "ttl": "1h"}
MARKER_BYTES = b',"cache_control":{"type":"ephemeral"}'
# key order deliberately unusual: replay must keep whatever the server sent
THINK: dict[str, Any] = {
    "type": "thinking",
    "signature": "EqQBCkgIARABGAIiQL==",
    "thinking": "Two sums.",
}
REDACTED: dict[str, Any] = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


def _hi(text: str = "hi") -> ModelRequest:
    return ModelRequest(messages=(UserMessage(content=text),))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _events(*payloads: Mapping[str, Any]) -> list[SSEEvent]:
    return [SSEEvent(json.dumps(p), str(p["type"])) for p in payloads]


def _start(index: int, block: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": dict(block)}


def _delta(index: int, **delta: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 4, "output_tokens": 1},
    },
}


def _finish(stop_reason: str = "end_turn", output: int = 5) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason},
            "usage": {"output_tokens": output},
        },
        {"type": "message_stop"},
    ]


def _assemble(payloads: Sequence[Mapping[str, Any]]) -> tuple[list[StreamEvent], ModelResponse]:
    assembler = AnthropicStreamAssembler(provider="anthropic")
    deltas: list[StreamEvent] = []
    for event in _events(*payloads):
        deltas.extend(assembler.feed(event))
    return deltas, assembler.finish()


class _Capture:
    """A MockTransport handler that keeps the raw request bytes, then asks the simulator."""

    def __init__(self, sim: AnthropicSimulator) -> None:
        self.sim = sim
        self.raw: list[bytes] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.raw.append(request.content)
        return await self.sim.handle(request)


def _model(client: httpx.AsyncClient, **kw: Any) -> AnthropicMessagesModel:
    kw.setdefault("backoff", (0.001, 0.002))
    return AnthropicMessagesModel("claude-sonnet-4-5", api_key="sk-ant-secret", client=client, **kw)


# -- request building -------------------------------------------------------------------


def _multi_turn() -> tuple[Message, ...]:
    return (
        SystemMessage(content="You are Hermes. Today is Monday."),
        UserMessage(content="Add 2+3 and 4+5."),
        AssistantMessage(
            content="Adding.",
            reasoning="Two sums.",
            finish_reason="tool_calls",
            tool_calls=(
                ToolCall(id="toolu_1", name="add", arguments='{"a": 2, "b": 3}'),
                ToolCall(id="toolu_2", name="add", arguments=""),
            ),
            provider_data={
                "anthropic_content_blocks": [
                    THINK,
                    REDACTED,
                    {"type": "text", "text": "Adding."},
                    {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}},
                    {"type": "tool_use", "id": "toolu_2", "name": "add", "input": {}},
                ],
                "reasoning_content": "must not be sent",
            },
        ),
        ToolMessage(tool_call_id="toolu_1", content='{"sum": 5}', name="add"),
        ToolMessage(tool_call_id="toolu_2", content="", is_error=True),
        AssistantMessage(content="5 and 9.", finish_reason="stop"),
        UserMessage(
            content=(
                {"type": "text", "text": "Thanks!"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            )
        ),
    )


def test_multi_turn_request_body_is_exact() -> None:
    model = AnthropicMessagesModel("claude-sonnet-4-5", cache_ttl="1h")
    request = ModelRequest(
        messages=_multi_turn(),
        tools=(ADD_SPEC,),
        max_tokens=512,
        tool_choice="auto",
        cache=CacheHints(stable_system_chars=len("You are Hermes.")),
        settings={"temperature": 0.2, "extra_body": {"metadata": {"user_id": "u-7"}}},
    )
    expected = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "system": [
            {"type": "text", "text": "You are Hermes.", "cache_control": MARK_1H},
            {"type": "text", "text": " Today is Monday.", "cache_control": MARK_1H},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Add 2+3 and 4+5."}]},
            {
                "role": "assistant",
                "content": [
                    THINK,
                    REDACTED,
                    {"type": "text", "text": "Adding."},
                    {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}},
                    {"type": "tool_use", "id": "toolu_2", "name": "add", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"sum": 5}'},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "(no output)",
                        "is_error": True,
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "5 and 9.", "cache_control": MARK_1H}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Thanks!"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                        "cache_control": MARK_1H,
                    },
                ],
            },
        ],
        "tools": [ADD_WIRE],
        "tool_choice": {"type": "auto"},
        "temperature": 0.2,
        "metadata": {"user_id": "u-7"},
    }
    body = model.build_body(request)
    assert body == expected
    # same keys in the same order, so the serialised bytes are the expected bytes
    assert _dumps(body) == _dumps(expected)


def test_plain_request_with_caching_off_sends_system_as_a_string() -> None:
    model = AnthropicMessagesModel("claude-x", prompt_caching=False, max_tokens_default=1000)
    request = ModelRequest(
        messages=(SystemMessage(content="Be brief."), UserMessage(content="hi")), tools=(ADD_SPEC,)
    )
    assert model.build_body(request, stream=True) == {
        "model": "claude-x",
        "max_tokens": 1000,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [ADD_WIRE],
        "stream": True,
    }


@pytest.mark.parametrize(
    ("choice", "tool_choice"),
    [
        ("none", {"type": "none"}),  # tools stay: tool blocks in messages need them
        ("required", {"type": "any"}),
        ("auto", {"type": "auto"}),
        (None, None),
    ],
)
def test_tool_choice(choice: Any, tool_choice: Any) -> None:
    body = AnthropicMessagesModel("m").build_body(
        ModelRequest(messages=(UserMessage(content="hi"),), tools=(ADD_SPEC,), tool_choice=choice)
    )
    assert body["tools"] == [ADD_WIRE]
    assert body.get("tool_choice") == tool_choice


def test_tool_choice_none_keeps_thinking_and_needs_tools_to_be_sent() -> None:
    model = AnthropicMessagesModel("m")
    thinking = ModelRequest(
        (UserMessage(content="hi"),), (ADD_SPEC,), reasoning={"effort": "low"}, tool_choice="none"
    )
    body = model.build_body(thinking)
    assert body["tool_choice"] == {"type": "none"} and body["tools"] == [ADD_WIRE]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    bare = model.build_body(ModelRequest((UserMessage(content="hi"),), tool_choice="none"))
    assert "tools" not in bare and "tool_choice" not in bare


@pytest.mark.parametrize(
    ("reasoning", "budget"),
    [
        (None, None),
        ({"enabled": False, "effort": "high"}, None),
        ({"effort": "high"}, 16000),
        ({"effort": "medium"}, 8000),
        ({"effort": "low"}, 4000),
        ({"enabled": True}, 8000),
        ({"budget_tokens": 2048}, 2048),
    ],
)
def test_thinking_budget_from_effort(reasoning: Any, budget: int | None) -> None:
    config = thinking_config(reasoning)
    assert config == (None if budget is None else {"type": "enabled", "budget_tokens": budget})


def test_thinking_raises_max_tokens_and_pins_temperature() -> None:
    model = AnthropicMessagesModel("claude-x", prompt_caching=False)
    request = ModelRequest(
        messages=(UserMessage(content="hi"),),
        max_tokens=1000,
        reasoning={"effort": "high"},
        settings={"temperature": 0.3, "top_k": 5, "top_p": 0.99},
    )
    body = model.build_body(request)
    assert body["max_tokens"] == 16000 + 4096
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16000}
    assert body["temperature"] == 1 and "top_k" not in body and body["top_p"] == 0.99
    forced = ModelRequest(
        messages=_hi().messages,
        tools=(ADD_SPEC,),
        tool_choice="required",
        reasoning={"effort": "high"},
    )
    assert "thinking" not in model.build_body(forced), "thinking cannot be forced to use a tool"
    roomy = ModelRequest(messages=_hi().messages, max_tokens=64000, reasoning={"effort": "low"})
    assert model.build_body(roomy)["max_tokens"] == 64000


def test_tool_results_go_first_and_roles_merge() -> None:
    wire = anthropic_messages(
        [
            AssistantMessage(tool_calls=(ToolCall(id="t1", name="add"),)),
            UserMessage(content="Also, hurry."),  # steering arrives before the result
            ToolMessage(tool_call_id="t1", content=({"type": "text", "text": "3"},)),
            UserMessage(content="   "),
            AssistantMessage(content="Done."),
            AssistantMessage(content="Anything else?"),
        ]
    )
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": "(continued)"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "3"}],
                },
                {"type": "text", "text": "Also, hurry."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Done."},
                {"type": "text", "text": "Anything else?"},
            ],
        },
    ]


def test_changed_calls_still_replay_the_thinking_first() -> None:
    """The engine may rename a duplicate call id; the stored thinking still leads the turn."""
    message = AssistantMessage(
        tool_calls=(ToolCall(id="toolu_9_renamed", name="add", arguments="not json"),),
        provider_data={
            "anthropic_content_blocks": [
                THINK,
                {"type": "tool_use", "id": "toolu_9", "name": "add", "input": {"a": 1}},
            ]
        },
    )
    wire = anthropic_messages([UserMessage(content="go"), message])
    assert wire[1]["content"] == [
        THINK,
        {"type": "tool_use", "id": "toolu_9_renamed", "name": "add", "input": {}},
    ]


def test_unsigned_or_empty_thinking_is_never_replayed() -> None:
    message = AssistantMessage(
        content="ok",
        provider_data={
            "anthropic_content_blocks": [
                {"type": "thinking", "thinking": "", "signature": "sig"},
                {"type": "thinking", "thinking": "half", "signature": ""},
                {"type": "text", "text": "ok"},
            ]
        },
    )
    wire = anthropic_messages([UserMessage(content="go"), message])
    assert wire[1]["content"] == [{"type": "text", "text": "ok"}]


def _markers(body: Mapping[str, Any]) -> list[str]:
    """Where the cache breakpoints are: ``system.N`` or ``messages.N.content.M``."""
    found = [f"system.{i}" for i, b in enumerate(body.get("system") or []) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        for j, block in enumerate(message["content"]):
            if "cache_control" in block:
                assert block["type"] not in {"thinking", "redacted_thinking"}
                found.append(f"messages.{i}.content.{j}")
    return found


def _conversation(turns: int) -> list[Message]:
    messages: list[Message] = [SystemMessage(content="Stable part. Volatile part.")]
    for k in range(turns):
        messages.append(UserMessage(content=f"question {k}"))
        messages.append(
            AssistantMessage(
                content=f"answer {k}",
                tool_calls=(ToolCall(id=f"t{k}", name="add", arguments='{"a": 1}'),),
                provider_data={
                    "anthropic_content_blocks": [
                        {"type": "thinking", "thinking": f"think {k}", "signature": f"s{k}"},
                        {"type": "text", "text": f"answer {k}"},
                        {"type": "tool_use", "id": f"t{k}", "name": "add", "input": {"a": 1}},
                    ]
                },
            )
        )
        messages.append(ToolMessage(tool_call_id=f"t{k}", content="2"))
    return messages


@pytest.mark.parametrize("turns", [0, 1, 2, 5])
@pytest.mark.parametrize("stable", [None, 12, 0, 10_000])
def test_never_more_than_four_breakpoints_on_the_right_blocks(
    turns: int, stable: int | None
) -> None:
    model = AnthropicMessagesModel("m")
    messages = _conversation(turns) or [SystemMessage(content="Stable part. Volatile part.")]
    request = ModelRequest(messages=tuple(messages), cache=CacheHints(stable_system_chars=stable))
    body = model.build_body(request)
    markers = _markers(body)
    assert len(markers) <= 4
    split = stable == 12
    assert markers[: 2 if split else 1] == (["system.0", "system.1"] if split else ["system.0"])
    last = len(body["messages"]) - 1
    message_markers = markers[2 if split else 1 :]
    if turns == 0:  # only the placeholder user turn
        assert message_markers == ["messages.0.content.0"]
    else:  # the last tool_result and the assistant turn's tool_use, never its thinking
        assert message_markers == [f"messages.{last - 1}.content.2", f"messages.{last}.content.0"]


@leakproof
async def test_consecutive_requests_share_a_byte_identical_prefix() -> None:
    """Item 21: a growing conversation must not change a byte before the moving markers."""
    sim = AnthropicSimulator()
    capture = _Capture(sim)
    sim.play(
        ToolCallReply([("toolu_1", "add", '{"a": 2, "b": 3}')], reasoning="Use add."),
        TextReply("5."),
    )
    system = SystemMessage(content="You are Hermes.\n\nConversation started: Monday.")
    hints = CacheHints(stable_system_chars=len("You are Hermes."))
    async with httpx.AsyncClient(transport=httpx.MockTransport(capture)) as client:
        model = _model(client)
        history: list[Message] = [system, UserMessage(content="2+3?")]
        first = await model.complete(ModelRequest(tuple(history), (ADD_SPEC,), cache=hints))
        history += [first.message, ToolMessage(tool_call_id="toolu_1", content='{"sum": 5}')]
        await model.complete(ModelRequest(tuple(history), (ADD_SPEC,), cache=hints))
    one, two = (raw.replace(MARKER_BYTES, b"") for raw in capture.raw)
    head_one, _, tail_one = one.partition(b'"messages":')
    head_two, _, tail_two = two.partition(b'"messages":')
    assert head_one == head_two, "model, max_tokens and system must not change"
    messages_one = _dumps(json.loads(one)["messages"]).encode()
    messages_two = _dumps(json.loads(two)["messages"]).encode()
    assert tail_one.startswith(messages_one) and tail_two.startswith(messages_two)
    assert messages_two.startswith(messages_one[:-1]), "earlier turns changed between requests"
    assert tail_one[len(messages_one) :] == tail_two[len(messages_two) :], "tools changed"
    # the thinking block goes back exactly as the server sent it
    sent = {"type": "thinking", "thinking": "Use add.", "signature": signature_for("Use add.")}
    assert _dumps(sent).encode() in capture.raw[1]
    assert len(_markers(json.loads(capture.raw[1]))) == 4


# -- thinking replay and persistence (item 10) -----------------------------------------


def _server_message(content: list[dict[str, Any]], stop: str = "tool_use") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def test_thinking_and_redacted_thinking_replay_byte_for_byte() -> None:
    content: list[dict[str, Any]] = [
        THINK,
        REDACTED,
        {"type": "text", "text": "Adding."},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"b": 3, "a": 2}},
    ]
    response = parse_message(_server_message(content), provider="anthropic")
    assert response.message.reasoning == "Two sums."
    assert response.message.content == "Adding."
    assert response.message.tool_calls[0].arguments == '{"b": 3, "a": 2}'
    assert response.message.provider_data == {"anthropic_content_blocks": content}
    # through the session store's dict codec and back, then onto the wire
    stored = message_from_dict(json.loads(json.dumps(message_to_dict(response.message))))
    wire = anthropic_messages(
        [UserMessage(content="2+3"), stored, ToolMessage(tool_call_id="toolu_1", content="5")]
    )
    assert _dumps(wire[1]["content"]) == _dumps(content)


def test_streamed_thinking_blocks_are_kept_only_once_complete() -> None:
    deltas, response = _assemble(
        [
            MESSAGE_START,
            {"type": "ping"},
            _start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            _delta(0, type="thinking_delta", thinking="First "),
            _delta(0, type="thinking_delta", thinking="thought."),
            _delta(0, type="signature_delta", signature="sig-1"),
            _stop(0),
            _start(1, {"type": "redacted_thinking", "data": "opaque"}),
            _stop(1),
            _start(2, {"type": "thinking", "thinking": "", "signature": ""}),
            _delta(2, type="thinking_delta", thinking="Cut off"),
            _delta(2, type="signature_delta", signature="sig-trunc"),
            # no content_block_stop for block 2: it must never be replayed
            _start(3, {"type": "text", "text": ""}),
            _delta(3, type="text_delta", text="Hello"),
            _stop(3),
            {"type": "future_event", "x": 1},
            *_finish(),
        ]
    )
    assert response.message.provider_data == {
        "anthropic_content_blocks": [
            {"type": "thinking", "thinking": "First thought.", "signature": "sig-1"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Hello"},
        ]
    }
    assert response.message.reasoning == "First thought.\n\nCut off"
    assert (
        "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
        == response.message.reasoning
    )
    assert response.finish_reason == "stop"


def test_an_aborted_thinking_block_alone_stores_no_replay_data() -> None:
    _, response = _assemble(
        [
            MESSAGE_START,
            _start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            _delta(0, type="thinking_delta", thinking="Partial"),
            _start(1, {"type": "text", "text": ""}),
            _delta(1, type="text_delta", text="Answer"),
            _stop(1),
            *_finish(),
        ]
    )
    assert response.message.provider_data == {}
    assert response.message.content == "Answer"


@leakproof
async def test_a_stream_cut_inside_a_thinking_block_is_incomplete() -> None:
    body = (
        b"".join(
            f"event: {p['type']}\ndata: {json.dumps(p)}\n\n".encode()
            for p in [
                MESSAGE_START,
                _start(0, {"type": "thinking", "thinking": "", "signature": ""}),
                _delta(0, type="thinking_delta", thinking="Hmm"),
            ]
        )
        + b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Eq'
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    events: list[StreamEvent] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        model = _model(client)
        with pytest.raises(IncompleteStream):
            async for event in model.stream(_hi()):
                events.append(event)
    assert events == [ReasoningDelta("Hmm")]


@leakproof
async def test_a_rejected_signature_is_retried_once_without_thinking() -> None:
    sim = AnthropicSimulator()
    sim.play(TextReply("Recovered."))
    tampered = AssistantMessage(
        tool_calls=(ToolCall(id="toolu_1", name="add", arguments='{"a": 1}'),),
        provider_data={
            "anthropic_content_blocks": [
                {"type": "thinking", "thinking": "edited", "signature": signature_for("original")},
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
            ]
        },
    )
    request = ModelRequest(
        messages=(
            UserMessage(content="1"),
            tampered,
            ToolMessage(tool_call_id="toolu_1", content="1"),
        ),
        tools=(ADD_SPEC,),
        reasoning={"effort": "low"},
    )
    async with sim.mock_client() as client:
        response = await _model(client).complete(request)
        assert response.message.content == "Recovered."
        first, second = sim.bodies
        assert first["messages"][1]["content"][0]["type"] == "thinking"
        assert [b["type"] for b in second["messages"][1]["content"]] == ["tool_use"]
        assert "thinking" not in second
        sim.play(TextReply("never"))
        with pytest.raises(ModelError, match="Invalid `signature`") as info:
            await _model(client, thinking_recovery=False).complete(request)
        assert info.value.status == 400 and sim.pending == 1


# -- responses --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("something_new", "stop"),
    ],
)
def test_stop_reasons(stop: str, finish: str) -> None:
    response = parse_message(_server_message([{"type": "text", "text": "x"}], stop), provider="a")
    assert response.finish_reason == finish == response.message.finish_reason


def test_context_window_stop_reason_is_context_too_long() -> None:
    with pytest.raises(ContextTooLong):
        parse_message(_server_message([], "model_context_window_exceeded"), provider="a")
    with pytest.raises(ContextTooLong):
        _assemble([MESSAGE_START, *_finish("model_context_window_exceeded")])


def test_usage_is_taken_as_reported() -> None:
    raw = {
        "input_tokens": 50,
        "output_tokens": 9,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
    }
    assert usage_from_anthropic(raw) == Usage(
        input_tokens=50, output_tokens=9, cache_read_tokens=1000, cache_write_tokens=200
    )
    per_ttl = {
        "input_tokens": 5,
        "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 4},
    }
    assert usage_from_anthropic(per_ttl).cache_write_tokens == 7
    _, streamed = _assemble(
        [
            MESSAGE_START,
            *_finish(output=42)[:1],
            {"type": "message_delta", "delta": {}, "usage": {"cache_creation_input_tokens": 8}},
            {"type": "message_stop"},
        ]
    )
    assert streamed.usage == Usage(
        input_tokens=10, output_tokens=42, cache_read_tokens=4, cache_write_tokens=8
    )


def test_text_and_tool_use_in_one_response() -> None:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "Let me add."},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
        {"type": "text", "text": "And more."},
    ]
    plain = parse_message(_server_message(content), provider="a")
    deltas, streamed = _assemble(
        [
            MESSAGE_START,
            _start(0, {"type": "text", "text": ""}),
            _delta(0, type="text_delta", text="Let me add."),
            _stop(0),
            _start(1, {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}),
            _delta(1, type="input_json_delta", partial_json='{"a": 1, '),
            _delta(1, type="input_json_delta", partial_json='"b": 2}'),
            _stop(1),
            _start(2, {"type": "text", "text": ""}),
            _delta(2, type="text_delta", text="And more."),
            _stop(2),
            *_finish("tool_use"),
        ]
    )
    for response in (plain, streamed):
        assert response.message.content == "Let me add.\nAnd more."
        assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
            ("toolu_1", "add", '{"a": 1, "b": 2}')
        ]
        assert response.finish_reason == "tool_calls"
        assert response.message.provider_data == {}
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "Let me add.\nAnd more."
    assert [d for d in deltas if isinstance(d, ToolCallDelta)] == [
        ToolCallDelta(0, "toolu_1", "add", ""),
        ToolCallDelta(0, None, None, '{"a": 1, '),
        ToolCallDelta(0, None, None, '"b": 2}'),
    ]


def test_item6_interleaved_blocks_are_keyed_by_index() -> None:
    _, response = _assemble(
        [
            MESSAGE_START,
            _start(0, {"type": "tool_use", "id": "t_a", "name": "add", "input": {}}),
            _start(1, {"type": "tool_use", "id": "t_b", "name": "echo", "input": {}}),
            _delta(1, type="input_json_delta", partial_json='{"a": '),
            _delta(0, type="input_json_delta", partial_json='{"a": '),
            _delta(0, type="input_json_delta", partial_json="1}"),
            _delta(1, type="input_json_delta", partial_json="2}"),
            _stop(0),
            _stop(1),
            *_finish("tool_use"),
        ]
    )
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
        ("t_a", "add", '{"a": 1}'),
        ("t_b", "echo", '{"a": 2}'),
    ]


@pytest.mark.parametrize(
    ("start_input", "pieces", "arguments"),
    [
        ({}, [], "{}"),  # no deltas at all
        ({}, [""], "{}"),  # one empty partial_json (item 8)
        ({}, ['{"a":', " 1}"], '{"a": 1}'),  # the start's {} is not prepended (item 8)
        ({"a": 5}, [], '{"a": 5}'),  # a proxy sending the whole input up front
    ],
)
def test_item8_tool_input_assembly(
    start_input: dict[str, Any], pieces: list[str], arguments: str
) -> None:
    start = {"type": "tool_use", "id": "t1", "name": "ping", "input": start_input}
    deltas, response = _assemble(
        [
            MESSAGE_START,
            _start(0, start),
            *[_delta(0, type="input_json_delta", partial_json=p) for p in pieces],
            _stop(0),
            *_finish("tool_use"),
        ]
    )
    (call,) = response.message.tool_calls
    assert call.arguments == arguments and call.parsed_arguments() is not None
    streamed = "".join(d.arguments for d in deltas if isinstance(d, ToolCallDelta))
    assert (streamed.strip() or "{}") == arguments


def test_empty_tool_input_in_a_plain_reply() -> None:
    content = [{"type": "tool_use", "id": "t1", "name": "ping", "input": {}}]
    (call,) = parse_message(_server_message(content), provider="a").message.tool_calls
    assert call.arguments == "{}"


@pytest.mark.parametrize(
    ("payloads", "error"),
    [
        ([MESSAGE_START, *_finish()[:1]], IncompleteStream),  # item 22: no message_stop
        ([], IncompleteStream),
        ([{"type": "message_stop"}], ModelProtocolError),  # no message_start
        ([MESSAGE_START, _delta(3, type="text_delta", text="x")], ModelProtocolError),
    ],
)
def test_item22_a_stream_needs_its_frame(
    payloads: list[dict[str, Any]], error: type[Exception]
) -> None:
    with pytest.raises(error):
        _assemble(payloads)


@pytest.mark.parametrize(
    ("kind", "message", "error"),
    [
        ("overloaded_error", "Overloaded", ModelUnavailable),
        ("api_error", "Internal server error", ModelUnavailable),
        (
            "invalid_request_error",
            "prompt is too long: 210001 tokens > 200000 maximum",
            ContextTooLong,
        ),
    ],
)
def test_item14_error_events_inside_the_stream(
    kind: str, message: str, error: type[Exception]
) -> None:
    assembler = AnthropicStreamAssembler(provider="anthropic")
    assembler.feed(_events(MESSAGE_START)[0])
    payload = {"type": "error", "error": {"type": kind, "message": message}}
    with pytest.raises(error):
        assembler.feed(SSEEvent(json.dumps(payload), "error"))


def test_in_band_error_body_and_bad_bodies() -> None:
    with pytest.raises(ModelUnavailable):
        parse_message(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            provider="a",
        )
    for body in ({"type": "message"}, {"content": "text"}, [1], {"content": [1]}):
        with pytest.raises(ModelProtocolError):
            parse_message(body, provider="a")


# -- over HTTP ----------------------------------------------------------------------------


@leakproof
async def test_headers_path_and_key() -> None:
    sim = AnthropicSimulator()
    sim.play(TextReply("hi"))
    async with sim.mock_client() as client:
        model = _model(client, headers={"anthropic-beta": "prompt-caching-2024-07-31"})
        assert model.api_mode == "anthropic_messages" and model.provider == "anthropic"
        await model.complete(_hi())
    (request,) = sim.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-secret"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert "authorization" not in request.headers


@leakproof
@pytest.mark.parametrize(
    "scenario",
    [
        ContextOverflow(),
        HttpError(
            400, "input length and `max_tokens` exceed context limit: 190000 + 16384 > 200000"
        ),
    ],
    ids=["prompt_too_long", "input_plus_max_tokens"],
)
async def test_item14_overflow_is_context_too_long_and_not_retried(scenario: Any) -> None:
    sim = AnthropicSimulator()
    sim.play(scenario, TextReply("never"))
    async with sim.mock_client() as client:
        with pytest.raises(ContextTooLong):
            await _model(client).complete(_hi())
    assert len(sim.requests) == 1


@leakproof
async def test_529_overloaded_is_retried_and_mid_stream_overload_is_unavailable() -> None:
    sim = AnthropicSimulator()
    sim.play(HttpError(529), TextReply("fine"), MidStreamError("overloaded"))
    async with sim.mock_client() as client:
        model = _model(client)
        assert (await model.complete(_hi())).message.content == "fine"
        assert len(sim.requests) == 2
        text: list[str] = []
        with pytest.raises(ModelUnavailable, match="Overloaded"):
            async for event in model.stream(_hi()):
                if isinstance(event, TextDelta):
                    text.append(event.text)
    assert "".join(text) == "Partial answer "


@leakproof
async def test_simulator_rejects_unanswered_tool_use_like_the_server() -> None:
    sim = AnthropicSimulator()
    sim.play(ToolCallReply([("toolu_1", "add", '{"a": 1, "b": 2}')]), TextReply("3"))
    async with sim.mock_client() as client:
        model = _model(client)
        first = await model.complete(ModelRequest((UserMessage(content="1+2"),), (ADD_SPEC,)))
        dangling = ModelRequest((UserMessage(content="1+2"), first.message), (ADD_SPEC,))
        with pytest.raises(ModelError, match="`tool_use` ids were found without `tool_result`"):
            await model.complete(dangling)
        answered = ModelRequest(
            (*dangling.messages, ToolMessage(tool_call_id="toolu_1", content="3")), (ADD_SPEC,)
        )
        events = [e async for e in model.stream(answered)]
    assert isinstance(events[-1], ResponseComplete)
    assert events[-1].response.message.content == "3"


@leakproof
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_tool_history_needs_tools_defined_and_tool_choice_none_satisfies_it(
    stream: bool,
) -> None:
    sim = AnthropicSimulator()
    sim.play(ToolCallReply([("toolu_1", "add", '{"a": 1, "b": 2}')]), TextReply("It is 3."))
    async with sim.mock_client() as client:
        model = _model(client)
        first = await model.complete(ModelRequest((UserMessage(content="1+2"),), (ADD_SPEC,)))
        history = (
            UserMessage(content="1+2"),
            first.message,
            ToolMessage(tool_call_id="toolu_1", content="3"),
            UserMessage(content="Sum up."),
        )
        with pytest.raises(ModelError, match="must define tools") as info:
            await model.complete(ModelRequest(history))  # a tool-free call: rejected
        assert info.value.status == 400
        final = ModelRequest(history, (ADD_SPEC,), tool_choice="none")
        if stream:
            events = [e async for e in model.stream(final)]
            assert isinstance(events[-1], ResponseComplete)
            response = events[-1].response
        else:
            response = await model.complete(final)
    assert response.message.content == "It is 3."
    assert sim.requests[-1].body["tool_choice"] == {"type": "none"}
    assert [t["name"] for t in sim.requests[-1].body["tools"]] == ["add"]


@leakproof
async def test_simulator_rejects_an_unknown_tool_choice() -> None:
    sim = AnthropicSimulator()
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [ADD_WIRE],
        "tool_choice": {"type": "never"},
    }
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    async with sim.mock_client() as client:
        reply = await client.post("http://sim/v1/messages", json=body, headers=headers)
    assert reply.status_code == 400
    assert "does not match any of the expected tags" in reply.json()["error"]["message"]


@leakproof
async def test_stream_equals_complete_over_the_simulator_with_thinking() -> None:
    reply = ToolCallReply(
        [("toolu_1", "add", '{"a": 1}'), ("toolu_2", "ping", "")],
        text="Checking.",
        reasoning="Two calls.",
        usage=Usage(input_tokens=3, output_tokens=4, cache_read_tokens=5, cache_write_tokens=6),
    )
    sim = AnthropicSimulator()
    sim.play(reply, reply)
    async with sim.mock_client() as client:
        model = _model(client)
        request = ModelRequest(
            (UserMessage(content="go"),), (ADD_SPEC,), reasoning={"effort": "low"}
        )
        plain = await model.complete(request)
        events = [e async for e in model.stream(request)]
    assert isinstance(events[-1], ResponseComplete)
    streamed = events[-1].response
    assert streamed == plain
    assert plain.message.provider_data["anthropic_content_blocks"][0] == {
        "type": "thinking",
        "thinking": "Two calls.",
        "signature": signature_for("Two calls."),
    }
