"""Unit tests of the Responses adapter, its mapping and its simulator.

Why unit tests and not only the contract: the request JSON is a byte-level contract with a
strict stateless server (the expected bodies below are written by hand from WIRE.md §2.3
and REFERENCE.md §11, never captured from the implementation), reasoning replay has
placement rules the scenario vocabulary cannot express (several reasoning items per turn,
chains, orphans), and each WIRE.md §4 bug needs its exact event sequence replayed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import pytest

from hermes_adapters.llm._http import SSEEvent
from hermes_adapters.llm._responses_mapping import (
    parse_response,
    responses_input,
    usage_from_responses,
)
from hermes_adapters.llm.openai_responses import OpenAIResponsesModel, ResponsesStreamAssembler
from hermes_adapters.testing.responses_sim import ResponsesSimulator, seal
from hermes_core.errors import (
    ContextTooLong,
    IncompleteStream,
    ModelError,
    ModelProtocolError,
    ModelRateLimited,
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
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hermes_core.testing.llm import ContextOverflow, MidStreamError, TextReply, ToolCallReply
from hermes_core.testing.sample_tools import ADD_SPEC

pytestmark = pytest.mark.anyio
leakproof = pytest.mark.usefixtures("no_leaks")  # async tests only: the fixture is async


# -- request building -------------------------------------------------------------------

RS_1 = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "First I say so."}],
    "encrypted_content": "enc-1",
    "_next": {"type": "message", "id": "msg_1"},
}
RS_2 = {
    "id": "rs_2",
    "type": "reasoning",
    "summary": [],
    "encrypted_content": "enc-2",
    "_next": {"type": "function_call", "call_id": "call_2"},
}
MSG_1 = {
    "id": "msg_1",
    "type": "message",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Adding.", "annotations": []}],
}


def _multi_turn() -> tuple[Message, ...]:
    """A reply whose output was [rs_1, msg_1, fc_1, rs_2, fc_2], then results and more."""
    return (
        SystemMessage(content="You are Hermes."),
        UserMessage(content="Add 2+3 and 4+5."),
        AssistantMessage(
            content="Adding.",
            reasoning="First I say so.",
            finish_reason="tool_calls",
            tool_calls=(
                ToolCall(
                    id="call_1",
                    name="add",
                    arguments='{"a": 2, "b": 3}',
                    extra={"response_item_id": "fc_1"},
                ),
                ToolCall(id="call_2", name="add", arguments="", extra={"response_item_id": "fc_2"}),
            ),
            provider_data={"codex_reasoning_items": [RS_1, RS_2], "codex_message_items": [MSG_1]},
        ),
        ToolMessage(tool_call_id="call_1", content='{"sum": 5}', name="add"),
        ToolMessage(tool_call_id="call_2", content='{"sum": 9}'),
        AssistantMessage(content="5 and 9.", finish_reason="stop", reasoning="Done."),
        UserMessage(
            content=(
                {"type": "text", "text": "Thanks!"},
                {"type": "image_url", "image_url": {"url": "https://img.example/a.png"}},
            )
        ),
    )


def test_multi_turn_request_body_is_exact() -> None:
    model = OpenAIResponsesModel("gpt-5")
    request = ModelRequest(
        messages=_multi_turn(),
        tools=(ADD_SPEC,),
        max_tokens=512,
        reasoning={"effort": "low"},
        cache=CacheHints(stable_system_chars=15, cache_key="session-7"),
        settings={"temperature": 0.2, "extra_body": {"service_tier": "flex"}},
    )
    assert model.build_body(request) == {
        "model": "gpt-5",
        "instructions": "You are Hermes.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Add 2+3 and 4+5."}]},
            # each reasoning item immediately before the item that followed it; no ids
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "First I say so."}],
                "encrypted_content": "enc-1",
            },
            {
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Adding.", "annotations": []}],
            },
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "add",
                "arguments": '{"a": 2, "b": 3}',
            },
            {"type": "reasoning", "summary": [], "encrypted_content": "enc-2"},
            {"type": "function_call", "call_id": "call_2", "name": "add", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": '{"sum": 5}'},
            {"type": "function_call_output", "call_id": "call_2", "output": '{"sum": 9}'},
            {"role": "assistant", "content": "5 and 9."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Thanks!"},
                    {
                        "type": "input_image",
                        "image_url": "https://img.example/a.png",
                        "detail": "auto",
                    },
                ],
            },
        ],
        "store": False,
        "tools": [
            {
                "type": "function",
                "name": "add",
                "description": "Add two integers.",
                "strict": False,
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-7",
        "max_output_tokens": 512,
        "temperature": 0.2,
        "service_tier": "flex",
    }


def test_streamed_minimal_body() -> None:
    model = OpenAIResponsesModel("gpt-5")
    request = ModelRequest(messages=(UserMessage(content="hi"),), model="override")
    assert model.build_body(request, stream=True) == {
        "model": "override",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "stream": True,
    }


def test_reasoning_switches() -> None:
    hi = (UserMessage(content="hi"),)
    disabled = OpenAIResponsesModel("m").build_body(
        ModelRequest(messages=hi, reasoning={"enabled": False, "effort": "high"})
    )
    assert "reasoning" not in disabled and "include" not in disabled
    plain = OpenAIResponsesModel("gpt-4.1", encrypted_reasoning=False).build_body(
        ModelRequest(messages=hi, reasoning={"summary": "detailed"})
    )
    assert plain["reasoning"] == {"effort": "medium", "summary": "detailed"}
    assert "include" not in plain


def test_store_true_replays_by_id() -> None:
    _, items = responses_input(_multi_turn(), store=True)
    assert [i.get("id") for i in items[1:6]] == ["rs_1", "msg_1", "fc_1", "rs_2", "fc_2"]
    body = OpenAIResponsesModel("m", store=True).build_body(ModelRequest(messages=_multi_turn()))
    assert body["store"] is True and "include" not in body


def test_later_system_messages_stay_in_place_as_developer() -> None:
    instructions, items = responses_input(
        (
            SystemMessage(content="A"),
            SystemMessage(content="B"),
            UserMessage(content="hi"),
            SystemMessage(content="[context compacted]"),
        )
    )
    assert instructions == "A\n\nB"
    assert items[-1] == {"role": "developer", "content": "[context compacted]"}


def _turn(reasoning: list[dict[str, Any]], content: str | None = None) -> AssistantMessage:
    return AssistantMessage(
        content=content,
        tool_calls=(ToolCall(id="c1", name="add", arguments="{}"),),
        provider_data={"codex_reasoning_items": reasoning},
    )


def _kinds(items: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        f"{i['type']}:{i.get('encrypted_content') or i.get('call_id')}"
        if "type" in i
        else f"{i['role']}"
        for i in items
    ]


def test_chained_reasoning_is_replayed_in_order_before_its_follower() -> None:
    first = {"id": "rs_a", "type": "reasoning", "summary": [], "encrypted_content": "a"}
    second = {"id": "rs_b", "type": "reasoning", "summary": [], "encrypted_content": "b"}
    turn = _turn(
        [
            {**first, "_next": {"type": "reasoning", "id": "rs_b"}},
            {**second, "_next": {"type": "function_call", "call_id": "c1"}},
        ]
    )
    _, items = responses_input((turn,))
    assert _kinds(items) == ["reasoning:a", "reasoning:b", "function_call:c1"]


def test_unreplayable_reasoning_is_left_out() -> None:
    """An item with nothing after it, or without encrypted content, would be a 400/404."""
    orphan = {"id": "rs_o", "type": "reasoning", "summary": [], "encrypted_content": "o"}
    bare = {"id": "rs_bare", "type": "reasoning", "summary": []}
    turn = _turn(
        [{**orphan, "_next": None}, {**bare, "_next": {"type": "function_call", "call_id": "c1"}}]
    )
    _, items = responses_input((turn,))
    assert _kinds(items) == ["function_call:c1"]


def test_unstamped_reasoning_goes_first_and_missing_summary_becomes_empty() -> None:
    turn = _turn([{"id": "rs_x", "type": "reasoning", "encrypted_content": "x"}], content="Hi.")
    _, items = responses_input((turn,))
    assert items[0] == {"type": "reasoning", "encrypted_content": "x", "summary": []}
    assert _kinds(items) == ["reasoning:x", "assistant", "function_call:c1"]


def test_edited_content_is_sent_plainly_and_its_reasoning_dropped() -> None:
    message = AssistantMessage(
        content="Adding (redacted).",
        provider_data={"codex_reasoning_items": [RS_1], "codex_message_items": [MSG_1]},
    )
    _, items = responses_input((message,))
    assert items == [{"role": "assistant", "content": "Adding (redacted)."}]


def test_tool_output_parts_are_input_parts() -> None:
    _, items = responses_input(
        (
            AssistantMessage(tool_calls=(ToolCall(id="c1", name="shot"),)),
            ToolMessage(
                tool_call_id="c1",
                content=({"type": "image_url", "image_url": "data:image/png;base64,AA"},),
            ),
        )
    )
    assert items[1]["output"] == [
        {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "auto"}
    ]


# -- response parsing -------------------------------------------------------------------


def _response(output: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"object": "response", "status": "completed", "output": output, **top}


def _fc(item_id: str, call_id: str, arguments: str = "{}") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": "add",
        "arguments": arguments,
    }


def _rs(item_id: str, text: str | None = None) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"id": item_id, "type": "reasoning", "summary": summary, "encrypted_content": item_id}


def test_output_items_map_to_one_message_and_keep_their_order() -> None:
    response = parse_response(
        _response(
            [
                _rs("rs_1", "Add first."),
                _fc("fc_1", "call_1", '{"a": 1}'),
                _rs("rs_2", "Then."),
                _fc("fc_2", "call_2", ""),
            ],
            model="gpt-5-served",
            usage={"input_tokens": 10, "output_tokens": 5},
        ),
        provider="p",
    )
    message = response.message
    assert [(c.id, c.arguments, c.extra) for c in message.tool_calls] == [
        ("call_1", '{"a": 1}', {"response_item_id": "fc_1"}),
        ("call_2", "{}", {"response_item_id": "fc_2"}),
    ]
    assert message.reasoning == "Add first.\n\nThen."
    assert response.finish_reason == "tool_calls" and response.model == "gpt-5-served"
    stamps = [r["_next"] for r in message.provider_data["codex_reasoning_items"]]
    assert stamps == [
        {"type": "function_call", "call_id": "call_1"},
        {"type": "function_call", "call_id": "call_2"},
    ]
    # stored, restored through the dict codec, replayed: each reasoning item before its call
    restored = message_from_dict(json.loads(json.dumps(message_to_dict(message))))
    assert restored == message
    _, items = responses_input((restored,))
    assert _kinds(items) == [
        "reasoning:rs_1",
        "function_call:call_1",
        "reasoning:rs_2",
        "function_call:call_2",
    ]


@pytest.mark.parametrize(
    ("top", "finish"),
    [
        ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "length"),
        (
            {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}},
            "content_filter",
        ),
        ({}, "stop"),
    ],
)
def test_incomplete_reasons(top: dict[str, Any], finish: str) -> None:
    text = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "x"}],
    }
    response = parse_response(_response([text], **top), provider="p")
    assert response.finish_reason == finish and response.message.content == "x"


def test_refusal_becomes_content_filter() -> None:
    refusal = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "No."}],
    }
    response = parse_response(_response([refusal]), provider="p")
    assert (response.message.content, response.finish_reason) == ("No.", "content_filter")
    assert response.message.provider_data["refusal"] == "No."


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            _response([], status="failed", error={"code": "server_error", "message": "x"}),
            ModelUnavailable,
        ),
        (
            _response([], status="failed", error={"code": "rate_limit_exceeded", "message": "x"}),
            ModelRateLimited,
        ),
        (_response([], status="failed", error=None), ModelUnavailable),
        (_response([], status="cancelled"), ModelError),
        (_response([], status="in_progress"), ModelProtocolError),
        (
            {"error": {"message": "Your input exceeds the context window", "code": None}},
            ContextTooLong,
        ),
        ({"object": "response"}, ModelProtocolError),
        ([1, 2], ModelProtocolError),
    ],
    ids=[
        "failed",
        "failed_rate",
        "failed_bare",
        "cancelled",
        "queued",
        "error_body",
        "no_output",
        "list",
    ],
)
def test_failed_and_malformed_replies(body: Any, error: type[ModelError]) -> None:
    with pytest.raises(error) as info:
        parse_response(body, provider="p")
    assert type(info.value) is error


def test_empty_output_falls_back_to_output_text() -> None:
    response = parse_response(
        _response([], output_text="From the convenience field."), provider="p"
    )
    assert response.message.content == "From the convenience field."


@pytest.mark.parametrize(
    ("raw", "usage"),
    [
        (
            {
                "input_tokens": 1000,
                "input_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 100},
                "output_tokens": 50,
                "output_tokens_details": {"reasoning_tokens": 20},
                "total_tokens": 1050,
            },
            Usage(
                input_tokens=300,
                output_tokens=50,
                cache_read_tokens=600,
                cache_write_tokens=100,
                reasoning_tokens=20,
            ),
        ),
        ({"input_tokens": 5, "input_tokens_details": None}, Usage(input_tokens=5)),
        (None, Usage()),
    ],
    ids=["full", "nulls", "absent"],
)
def test_usage_buckets(raw: Any, usage: Usage) -> None:
    assert usage_from_responses(raw) == usage


# -- streaming: WIRE.md §4 cases replayed event by event -----------------------------------


def _feed(
    events: Sequence[Mapping[str, Any]], *, terminal: str | None = "response.completed"
) -> tuple[list[StreamEvent], ModelResponse]:
    assembler = ResponsesStreamAssembler(provider="p")
    out: list[StreamEvent] = []
    tail = [{"type": terminal, "response": {"status": None, "usage": None}}] if terminal else []
    for n, event in enumerate([*events, *tail]):
        data = json.dumps({"sequence_number": n, **event})
        out.extend(assembler.feed(SSEEvent(data, str(event["type"]))))
    return out, assembler.finish()


def _added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def _args(item_id: str, delta: str, index: int = 0) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "item_id": item_id,
        "output_index": index,
        "delta": delta,
    }


def _calls(response: ModelResponse) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, c.arguments) for c in response.message.tool_calls]


def test_item6_interleaved_argument_deltas_are_keyed_by_item_id() -> None:
    events, response = _feed(
        [
            _added(0, {**_fc("fc_a", "call_a", ""), "name": "read_file"}),
            _added(1, {**_fc("fc_b", "call_b", ""), "name": "write_file"}),
            _args("fc_b", '{"path": ', 1),
            _args("fc_a", '{"path": ', 0),
            _args("fc_a", '"in"}', 0),
            _args("fc_b", '"out"}', 1),
        ]
    )
    assert _calls(response) == [
        ("call_a", "read_file", '{"path": "in"}'),
        ("call_b", "write_file", '{"path": "out"}'),
    ]
    assert [(e.index, e.arguments) for e in events if isinstance(e, ToolCallDelta)] == [
        (0, ""),
        (1, ""),
        (1, '{"path": '),
        (0, '{"path": '),
        (0, '"in"}'),
        (1, '"out"}'),
    ]


def test_item7_every_item_at_output_index_zero_is_still_told_apart() -> None:
    _, response = _feed(
        [
            _added(0, _fc("fc_a", "call_a", "")),
            _args("fc_a", '{"a":1}'),
            _added(0, _fc("fc_b", "call_b", "")),
            _args("fc_b", '{"a":2}'),
        ]
    )
    assert _calls(response) == [("call_a", "add", '{"a":1}'), ("call_b", "add", '{"a":2}')]


def test_item8_empty_argument_buffer_becomes_an_empty_object() -> None:
    _, response = _feed([_added(0, _fc("fc_a", "call_a", ""))])
    assert _calls(response) == [("call_a", "add", "{}")]


def test_done_item_fills_in_what_no_delta_carried() -> None:
    """A server that skips deltas still yields deltas that add up to the final reply."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    full = {**message, "content": [{"type": "output_text", "text": "Hello there"}]}
    reasoning = _rs("rs_1", "Short thought.")
    events, response = _feed(
        [
            _added(0, {"id": "rs_1", "type": "reasoning", "summary": []}),
            {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
            _added(1, message),
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 1,
                "content_index": 0,
                "delta": "Hello",
            },
            {"type": "response.output_item.done", "output_index": 1, "item": full},
            {"type": "response.function_call_arguments.delta", "item_id": "fc_x", "delta": "{}"},
            {"type": "response.output_item.done", "output_index": 2, "item": _fc("fc_x", "c9")},
        ]
    )
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello", " there"]
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Short thought."]
    named = [e for e in events if isinstance(e, ToolCallDelta) and e.name]
    assert [(e.id, e.name) for e in named] == [("c9", "add")]
    assert response.message.content == "Hello there"
    assert _calls(response) == [("c9", "add", "{}")]


def test_an_item_announced_without_id_is_matched_by_position() -> None:
    anonymous = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": ""}
    events, response = _feed(
        [
            _added(0, anonymous),
            _args("fc_late", '{"a": 1}', 0),
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": _fc("fc_late", "c1", '{"a": 1}'),
            },
        ]
    )
    assert _calls(response) == [("c1", "add", '{"a": 1}')]
    assert response.message.tool_calls[0].extra == {"response_item_id": "fc_late"}
    assert len([e for e in events if isinstance(e, ToolCallDelta)]) == 2


def test_reasoning_parts_are_joined_like_the_json_reply() -> None:
    def part(index: int, delta: str) -> dict[str, Any]:
        return {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": index,
            "delta": delta,
        }

    events, response = _feed(
        [
            _added(0, {"id": "rs_1", "type": "reasoning", "summary": []}),
            part(0, "One."),
            part(1, "Two."),
        ]
    )
    streamed = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert streamed == response.message.reasoning == "One.\n\nTwo."


@pytest.mark.parametrize(
    "terminal", [None, "response.output_text.done"], ids=["nothing", "no_completed"]
)
def test_item22_a_stream_needs_response_completed(terminal: str | None) -> None:
    text = {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "delta": "cut",
    }
    with pytest.raises(IncompleteStream):
        _feed([text], terminal=terminal)


def test_incomplete_terminal_event_is_a_length_finish() -> None:
    assembler = ResponsesStreamAssembler(provider="p")
    assembler.feed_event({"type": "response.output_text.delta", "item_id": "m", "delta": "Hal"})
    assembler.feed_event(
        {
            "type": "response.incomplete",
            "response": {"incomplete_details": {"reason": "max_output_tokens"}},
        }
    )
    assert assembler.done
    response = assembler.finish()
    assert (response.message.content, response.finish_reason) == ("Hal", "length")


@pytest.mark.parametrize(
    ("event", "error"),
    [
        ({"type": "error", "code": "rate_limit_exceeded", "message": "slow"}, ModelRateLimited),
        (
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                    "message": "x",
                },
            },
            ContextTooLong,
        ),
        (
            {
                "type": "response.failed",
                "response": {"error": {"code": "server_error", "message": "x"}},
            },
            ModelUnavailable,
        ),
    ],
    ids=["error_flat", "error_nested_item14", "failed"],
)
def test_in_band_failures_are_mapped(event: dict[str, Any], error: type[ModelError]) -> None:
    assembler = ResponsesStreamAssembler(provider="p")
    assembler.feed_event({"type": "response.output_text.delta", "item_id": "m", "delta": "pa"})
    with pytest.raises(error):
        assembler.feed(SSEEvent(json.dumps(event)))


def test_duplicates_done_markers_and_bad_events() -> None:
    assembler = ResponsesStreamAssembler(provider="p")
    delta = {
        "type": "response.output_text.delta",
        "item_id": "m",
        "delta": "x",
        "sequence_number": 3,
    }
    assert assembler.feed(SSEEvent(json.dumps(delta))) == [TextDelta("x")]
    assert assembler.feed(SSEEvent(json.dumps(delta))) == [], "a redelivered event is skipped"
    assert assembler.feed(SSEEvent("[DONE]")) == [] and not assembler.done
    with pytest.raises(IncompleteStream):
        assembler.feed(SSEEvent('{"type": "response.out', complete=False))
    with pytest.raises(ModelProtocolError):
        assembler.feed(SSEEvent("<html>"))


# -- the simulator is as strict as the real server --------------------------------------


def _post(sim: ResponsesSimulator, body: Mapping[str, Any]) -> tuple[int, Any]:
    plan = sim.respond("POST", "/v1/responses", {}, json.dumps(body).encode())
    payload = b"".join(p for p in plan.body if isinstance(p, bytes))
    return plan.status, json.loads(payload)


def _sealed(item_id: str, call_id: str) -> dict[str, Any]:
    token = seal(
        {"id": item_id, "text": "t", "next": {"type": "function_call", "call_id": call_id}}
    )
    return {"type": "reasoning", "summary": [], "encrypted_content": token}


def _call_and_output(call_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "function_call", "call_id": call_id, "name": "add", "arguments": "{}"},
        {"type": "function_call_output", "call_id": call_id, "output": "1"},
    ]


def test_item11_reasoning_away_from_its_follower_is_rejected() -> None:
    sim = ResponsesSimulator()
    sim.play(TextReply("ok"))
    user = {"role": "user", "content": "hi"}
    misplaced = [user, _sealed("rs_9", "c1"), user, *_call_and_output("c1")]
    status, body = _post(sim, {"model": "m", "store": False, "input": misplaced})
    assert status == 400
    assert body["error"]["message"] == (
        "Item 'rs_9' of type 'reasoning' was provided without its required following item."
    )
    placed = [user, _sealed("rs_9", "c1"), *_call_and_output("c1")]
    assert _post(sim, {"model": "m", "store": False, "input": placed})[0] == 200


@pytest.mark.parametrize(
    ("items", "status", "text"),
    [
        (
            [{"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"}],
            400,
            "No tool output found for function call c1.",
        ),
        (
            [{"type": "function_call_output", "call_id": "c1", "output": "1"}],
            400,
            "No tool call found for function call output with call_id c1.",
        ),
        (
            [{"type": "reasoning", "id": "rs_1", "summary": []}, *_call_and_output("c1")],
            404,
            "Item with id 'rs_1' not found.",
        ),
        (
            [{**_sealed("rs_1", "c1"), "encrypted_content": "forged.0"}, *_call_and_output("c1")],
            400,
            "could not be verified",
        ),
        (
            [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
            400,
            "Invalid value: 'output_text'",
        ),
    ],
    ids=["unanswered_call", "stray_output", "bare_id", "forged", "wrong_part"],
)
def test_simulator_rejects_what_openai_rejects(
    items: list[dict[str, Any]], status: int, text: str
) -> None:
    sim = ResponsesSimulator()
    got, body = _post(sim, {"model": "m", "store": False, "input": items})
    assert got == status and text in body["error"]["message"]


def test_simulator_rejects_chat_shaped_tools_and_returns_reasoning_only_on_request() -> None:
    sim = ResponsesSimulator()
    chat_tool = {"type": "function", "function": {"name": "add"}}
    status, body = _post(sim, {"model": "m", "input": "hi", "tools": [chat_tool]})
    assert status == 400 and "tools[0].name" in body["error"]["message"]
    sim.play(TextReply("x", reasoning="thought"), TextReply("x", reasoning="thought"))
    _, plain = _post(sim, {"model": "m", "input": "hi"})
    assert "encrypted_content" not in plain["output"][0]
    _, asked = _post(sim, {"model": "m", "input": "hi", "include": ["reasoning.encrypted_content"]})
    assert asked["output"][0]["encrypted_content"]


# -- over HTTP --------------------------------------------------------------------------


@leakproof
async def test_reasoning_replay_across_a_multi_turn_transcript() -> None:
    """Three calls; each request must pass the strict simulator's placement rules."""
    sim = ResponsesSimulator()
    sim.play(
        ToolCallReply([("call_1", "add", '{"a": 1, "b": 2}')], reasoning="First sum."),
        ToolCallReply([("call_2", "add", '{"a": 3, "b": 4}')], text="Next.", reasoning="Second."),
        TextReply("3 and 7.", reasoning="All done."),
    )
    messages: list[Message] = [SystemMessage(content="Be exact."), UserMessage(content="Sums?")]
    async with sim.mock_client() as client:
        model = OpenAIResponsesModel("gpt-5", client=client, api_key="sk-x")
        for turn, result in enumerate(['{"sum": 3}', '{"sum": 7}', None]):
            request = ModelRequest(messages=tuple(messages), tools=(ADD_SPEC,))
            response = await (model.complete(request) if turn != 1 else _streamed(model, request))
            messages.append(response.message)
            if result is not None:
                call = response.message.tool_calls[0]
                messages.append(ToolMessage(tool_call_id=call.id, content=result))
        await model.aclose()
    assert messages[-1].content == "3 and 7."
    final_input = sim.requests[2].body["input"]
    assert [i.get("type", i.get("role")) for i in final_input] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert sim.requests[2].body["instructions"] == "Be exact."
    assert all("id" not in item for item in final_input)
    assert sim.replayed_reasoning(1) == "First sum."
    assert sim.replayed_reasoning(2) == "Second."
    assert [r.path for r in sim.requests] == ["/v1/responses"] * 3
    assert sim.requests[0].headers["authorization"] == "Bearer sk-x"


async def _streamed(model: OpenAIResponsesModel, request: ModelRequest) -> ModelResponse:
    events = [e async for e in model.stream(request)]
    final = events[-1]
    assert hasattr(final, "response")
    response: ModelResponse = final.response
    return response


@leakproof
async def test_item14_overflow_is_context_too_long_and_not_retried() -> None:
    sim = ResponsesSimulator()
    sim.play(ContextOverflow(), TextReply("never"))
    async with sim.mock_client() as client:
        model = OpenAIResponsesModel("m", client=client, backoff=(0.001, 0.001))
        with pytest.raises(ContextTooLong):
            await model.complete(ModelRequest(messages=(UserMessage(content="hi"),)))
    assert len(sim.requests) == 1


@leakproof
async def test_item22_a_cut_connection_is_incomplete() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        class Cut(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                delta = {"type": "response.output_text.delta", "item_id": "m", "delta": "hel"}
                yield f"event: {delta['type']}\ndata: {json.dumps(delta)}\n\n".encode()
                raise httpx.RemoteProtocolError("peer closed connection")

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Cut())

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    events: list[StreamEvent] = []
    async with client:
        model = OpenAIResponsesModel("m", client=client)
        with pytest.raises(IncompleteStream) as info:
            async for event in model.stream(ModelRequest(messages=(UserMessage(content="x"),))):
                events.append(event)
    assert events == [TextDelta("hel")]
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


@leakproof
async def test_identity() -> None:
    model = OpenAIResponsesModel("gpt-5", provider="azure")
    assert (model.model_name, model.provider, model.api_mode) == (
        "gpt-5",
        "azure",
        "codex_responses",
    )
    assert "gpt-5" in repr(model)
    await model.aclose()


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
    sim = ResponsesSimulator()
    sim.play(MidStreamError(error))
    text: list[str] = []
    async with sim.mock_client() as client:
        model = OpenAIResponsesModel("m", client=client, max_retries=0)
        with pytest.raises(kind):
            async for event in model.stream(ModelRequest(messages=(UserMessage(content="x"),))):
                if isinstance(event, TextDelta):
                    text.append(event.text)
    assert "".join(text) == "Partial answer "
