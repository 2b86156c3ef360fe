"""Prompt caching end to end: Agent -> adapter -> simulator that reports cache hits.

Three ways a provider caches a prompt, each over its adapter and a simulator run with
``simulate_cache=True`` (reads and writes are estimated from the bytes the adapter sent):

* native Anthropic: ``cache_control`` on system and message blocks;
* Claude behind OpenRouter: the same breakpoints in the Chat Completions envelope
  (markers only on content parts, REFERENCE.md §7);
* OpenAI Responses: automatic prefix caching routed by ``prompt_cache_key``.

WIRE.md §4 item 21 is the bug class: a prefix that is not byte-stable across turns (or a
fifth breakpoint) turns every turn into a cache write. So besides "the second call reads
the cache" these tests pin the byte-identical prefix, the marker placement and count, and
that a changed system prompt really does miss.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from hermes_adapters.llm._cache_envelope import envelope_cache_control
from hermes_adapters.llm.anthropic_messages import AnthropicMessagesModel
from hermes_adapters.llm.openai_chat import OpenAIChatModel
from hermes_adapters.llm.openai_responses import OpenAIResponsesModel
from hermes_adapters.testing import AnthropicSimulator, OpenAIChatSimulator, ResponsesSimulator
from hermes_adapters.testing.scenario_server import ScenarioServer
from hermes_core import Agent, AgentSettings
from hermes_core.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from hermes_core.ports.llm import CacheHints, ChatModel, ModelRequest
from hermes_core.testing.llm import TextReply, ToolCallReply
from hermes_core.testing.sample_tools import add_tool

pytestmark = pytest.mark.anyio
leakproof = pytest.mark.usefixtures("no_leaks")  # async tests only: the fixture is async

BACKENDS = ["anthropic", "openrouter", "responses"]
EXPLICIT = {"anthropic", "openrouter"}  # breakpoint caching: the first call writes
IDENTITY = "You are Cachebot, a careful assistant. " * 40
CONTEXT = "# Project Context\n\nThe repository is a Python 3.11 project. " * 10
MARKER = {"type": "ephemeral"}


@dataclass
class Wire:
    """A simulator, the raw request bodies as sent, and a factory for its adapter."""

    sim: ScenarioServer
    raw: list[bytes]
    make: Callable[[], ChatModel]

    def bodies(self) -> list[Mapping[str, Any]]:
        return self.sim.bodies


@asynccontextmanager
async def _wire(backend: str) -> AsyncIterator[Wire]:
    """``backend``'s adapter over ``httpx.MockTransport``, recording each body's bytes."""
    sim: ScenarioServer
    if backend == "anthropic":
        sim = AnthropicSimulator(simulate_cache=True)
    elif backend == "openrouter":
        sim = OpenAIChatSimulator("openrouter", simulate_cache=True)
    else:
        sim = ResponsesSimulator(simulate_cache=True)
    raw: list[bytes] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        raw.append(request.content)
        return await sim.handle(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:

        def make() -> ChatModel:
            if backend == "anthropic":
                return AnthropicMessagesModel(
                    "claude-sonnet-4-5",
                    base_url="https://api.anthropic.test",
                    api_key="sk-ant-test",
                    client=client,
                )
            if backend == "openrouter":
                return OpenAIChatModel(
                    "anthropic/claude-sonnet-4.5",
                    base_url="https://openrouter.test/api/v1",
                    api_key="sk-or-test",
                    client=client,
                    provider="openrouter",
                    reasoning_echo="reasoning_details",
                )
            return OpenAIResponsesModel(
                "gpt-5", base_url="https://api.openai.test/v1", api_key="sk-test", client=client
            )

        yield Wire(sim, raw, make)


def _settings(identity: str = IDENTITY, context: str = CONTEXT) -> AgentSettings:
    return AgentSettings(identity=identity, context=context, date_in_prompt=False)


def _strip(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _markers(body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(where, part)`` for every content part carrying ``cache_control``."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    system = body.get("system")
    for part in system if isinstance(system, list) else ():
        if "cache_control" in part:
            found.append(("system", part))
    for message in body.get("messages") or ():
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if "cache_control" in part:
                found.append((message["role"], part))
    return found


def _json_text(text: str) -> bytes:
    """``text`` as it appears inside a compact JSON string."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode()


# -- the second call reads what the first one wrote ---------------------------------------


@leakproof
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_second_call_reads_the_cache(backend: str, stream: bool) -> None:
    chunks: list[str] = []
    callback = chunks.append if stream else None
    async with _wire(backend) as wire:
        wire.sim.play(TextReply("Hello."), TextReply("Still here."))
        model = wire.make()
        async with Agent(model, [add_tool()], settings=_settings(), owned=[model]) as agent:
            first = await agent.run_conversation("Hi!", stream_callback=callback)
            second = await agent.run_conversation("Are you there?", stream_callback=callback)
            prompt = agent.system_prompt
    assert prompt is not None
    assert first["final_response"] == "Hello." and second["final_response"] == "Still here."
    assert first["api_calls"] == 1 and second["api_calls"] == 1

    assert first["cache_read_tokens"] == 0
    if backend in EXPLICIT:
        assert first["cache_write_tokens"] >= len(prompt) // 4, "the first call writes"
    assert second["cache_read_tokens"] >= len(prompt) // 4, "the whole system prompt is read"
    if backend in EXPLICIT:
        assert 0 < second["cache_write_tokens"] < second["cache_read_tokens"], "only the new turn"


@leakproof
@pytest.mark.parametrize("backend", BACKENDS)
async def test_tool_loop_reads_the_cache_on_its_second_call(backend: str) -> None:
    """Within one turn too: the call after the tool result repeats the first call's prefix."""
    async with _wire(backend) as wire:
        wire.sim.play(ToolCallReply([("call_1", "add", '{"a": 2, "b": 3}')]), TextReply("5."))
        model = wire.make()
        async with Agent(model, [add_tool()], settings=_settings(), owned=[model]) as agent:
            result = await agent.run_conversation("What is 2+3?")
    assert result["final_response"] == "5." and result["api_calls"] == 2
    assert result["cache_read_tokens"] > 0


# -- the prefix is byte-identical --------------------------------------------------------


@leakproof
@pytest.mark.parametrize("backend", BACKENDS)
async def test_consecutive_requests_share_a_byte_identical_prefix(backend: str) -> None:
    async with _wire(backend) as wire:
        wire.sim.play(TextReply("One."), TextReply("Two."))
        model = wire.make()
        async with Agent(model, [add_tool()], settings=_settings(), owned=[model]) as agent:
            await agent.run_conversation("First question?")
            await agent.run_conversation("Second question?")
            prompt = agent.system_prompt
    assert prompt is not None
    first, second = wire.raw
    shared = next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), len(first)
    )
    # everything up to the end of the system prompt (and the first user turn) went out
    # byte for byte the same: no timestamp, no reordered key, no moved marker
    end_of_system = first.index(_json_text(prompt[-200:])) + len(_json_text(prompt[-200:]))
    assert shared > end_of_system
    one, two = (_strip(b) for b in wire.bodies())
    assert one.get("tools") == two.get("tools")
    if backend == "responses":
        assert two["input"][: len(one["input"])] == one["input"]
        assert one["prompt_cache_key"] == two["prompt_cache_key"]
    elif backend == "anthropic":
        assert two["system"] == one["system"]
        assert two["messages"][: len(one["messages"])] == one["messages"]
    else:  # the envelope wraps only the marked messages' strings; the system is stable
        assert two["messages"][0] == one["messages"][0]


# -- where the envelope puts its markers -------------------------------------------------


@leakproof
async def test_envelope_markers_on_the_right_parts() -> None:
    async with _wire("openrouter") as wire:
        wire.sim.play(
            ToolCallReply([("call_1", "add", '{"a": 2, "b": 3}')]),
            TextReply("5."),
            TextReply("Bye."),
        )
        model = wire.make()
        async with Agent(model, [add_tool()], settings=_settings(), owned=[model]) as agent:
            await agent.run_conversation("What is 2+3?")
            await agent.run_conversation("Thanks!")
            prompt = agent.system_prompt
    assert prompt is not None
    bodies = wire.bodies()
    assert len(bodies) == 3
    for body in bodies:
        markers = _markers(body)
        assert 0 < len(markers) <= 4
        assert all(part["cache_control"] == MARKER for _, part in markers)
        # the system prompt: two text parts split at the end of the stable tier
        system = body["messages"][0]
        assert system["role"] == "system" and len(system["content"]) == 2
        stable, rest = (part["text"] for part in system["content"])
        assert stable + rest == prompt
        assert stable.startswith(IDENTITY.strip()) and rest.startswith("\n\n# Project Context")
        assert CONTEXT.strip() not in stable
        # never on a message itself, and never on an empty part
        assert all("cache_control" not in message for message in body["messages"])
        assert all(part.get("text", "x").strip() for _, part in markers)

    # call 2 (user, tool-call-only assistant, tool): the empty assistant is skipped
    second = bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["content"] is None and "tool_calls" in second[2]
    assert second[1]["content"] == [
        {"type": "text", "text": "What is 2+3?", "cache_control": MARKER}
    ]
    assert second[3]["content"][0]["cache_control"] == MARKER
    assert [where for where, _ in _markers(bodies[1])] == ["system", "system", "user", "tool"]

    # call 3: the last two markable messages are the answer and the new question
    third = bodies[2]["messages"]
    assert [where for where, _ in _markers(bodies[2])] == [
        "system",
        "system",
        "assistant",
        "user",
    ]
    assert third[1]["content"] == "What is 2+3?", "older turns go back to plain strings"
    assert third[-1]["content"] == [{"type": "text", "text": "Thanks!", "cache_control": MARKER}]


def test_envelope_part_key_order_and_ttl_are_stable() -> None:
    model = OpenAIChatModel("anthropic/claude-opus-4.1", provider="openrouter")
    request = ModelRequest(
        messages=(SystemMessage(content="Stable.\n\nVolatile."), UserMessage(content="Hi")),
        cache=CacheHints(stable_system_chars=len("Stable."), cache_key="k", ttl="1h"),
    )
    encoded = json.dumps(model.build_body(request)["messages"], separators=(",", ":"))
    marker = '"cache_control":{"type":"ephemeral","ttl":"1h"}'
    assert encoded == (
        '[{"role":"system","content":['
        f'{{"type":"text","text":"Stable.",{marker}}},'
        f'{{"type":"text","text":"\\n\\nVolatile.",{marker}}}]}},'
        f'{{"role":"user","content":[{{"type":"text","text":"Hi",{marker}}}]}}]'
    )
    assert json.dumps(model.build_body(request)) == json.dumps(model.build_body(request))


def test_envelope_applies_only_where_configured() -> None:
    request = ModelRequest(messages=(SystemMessage(content="S"), UserMessage(content="Hi")))

    def marked(model: OpenAIChatModel) -> bool:
        return bool(_markers(model.build_body(request)))

    assert marked(OpenAIChatModel("anthropic/claude-sonnet-4.5", provider="openrouter"))
    assert not marked(OpenAIChatModel("openai/gpt-5", provider="openrouter"))
    assert not marked(OpenAIChatModel("claude-sonnet-4-5", provider="openai"))
    assert not marked(
        OpenAIChatModel("anthropic/claude-sonnet-4.5", provider="openrouter", cache_control="off")
    )
    assert marked(OpenAIChatModel("qwen3-coder", provider="dashscope", cache_control="envelope"))


def test_envelope_never_exceeds_four_breakpoints() -> None:
    given = {"type": "text", "text": "pinned", "cache_control": MARKER}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Stable. Volatile."},
        {"role": "user", "content": [given]},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": [dict(given), {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": ""},
        {"role": "tool", "tool_call_id": "c", "content": ""},
        {"role": "user", "content": "c"},
    ]
    out = envelope_cache_control(messages, stable_chars=len("Stable."))
    assert sum(len(_markers({"messages": [m]})) for m in out) == 4
    assert out[0]["content"][-1]["cache_control"] == MARKER  # the system prompt's end
    assert out[4] == messages[4] and out[5] == messages[5]  # empty ones are never marked
    assert messages[0]["content"] == "Stable. Volatile.", "the input is not modified"
    fresh = envelope_cache_control(
        [{"role": "system", "content": "Stable. Volatile."}, *messages[2:3], messages[6]],
        stable_chars=len("Stable."),
    )
    assert sum(len(_markers({"messages": [m]})) for m in fresh) == 4


# -- a changed system prompt misses --------------------------------------------------------


def _request(system: str, cache_key: str = "conv-1") -> ModelRequest:
    return ModelRequest(
        messages=(
            SystemMessage(content=system),
            UserMessage(content="What is 2+3?"),
            AssistantMessage(
                content=None, tool_calls=(ToolCall(id="call_1", name="add", arguments="{}"),)
            ),
            ToolMessage(tool_call_id="call_1", content='{"sum": 5}'),
        ),
        tools=(add_tool().spec,),
        cache=CacheHints(stable_system_chars=len(IDENTITY), cache_key=cache_key),
    )


@leakproof
@pytest.mark.parametrize("backend", BACKENDS)
async def test_changed_system_prompt_gives_no_cache_read(backend: str) -> None:
    async with _wire(backend) as wire:
        wire.sim.play(TextReply("5."), TextReply("5."), TextReply("5."))
        model = wire.make()
        try:
            before = await model.complete(_request(IDENTITY + "\n\n" + CONTEXT))
            control = await model.complete(_request(IDENTITY + "\n\n" + CONTEXT))
            changed = await model.complete(_request("Today is 12:00:01. " + IDENTITY))
        finally:
            await model.aclose()
    assert before.usage.cache_read_tokens == 0
    assert control.usage.cache_read_tokens > 0, "an identical request is a hit"
    assert changed.usage.cache_read_tokens == 0, "a byte change at the top misses everything"
    if backend in EXPLICIT:
        assert changed.usage.cache_write_tokens > 0


@leakproof
@pytest.mark.parametrize("backend", ["anthropic", "openrouter"])
async def test_volatile_tail_change_still_reads_the_stable_tier(backend: str) -> None:
    """The stable-tier breakpoint is why the system text is split: a new context (or date)
    after it loses only the rest of the prompt."""
    async with _wire(backend) as wire:
        wire.sim.play(TextReply("5."), TextReply("5."))
        model = wire.make()
        try:
            await model.complete(_request(IDENTITY + "\n\n" + CONTEXT))
            other = await model.complete(_request(IDENTITY + "\n\nAnother project entirely."))
        finally:
            await model.aclose()
    assert len(IDENTITY) // 4 <= other.usage.cache_read_tokens
    assert other.usage.cache_read_tokens < (len(IDENTITY) + len(CONTEXT)) // 4


@leakproof
@pytest.mark.parametrize("backend", BACKENDS)
async def test_new_identity_across_agents_gives_no_cache_read(backend: str) -> None:
    async with _wire(backend) as wire:
        wire.sim.play(TextReply("One."), TextReply("Two."))
        for identity in (IDENTITY, "You are Otherbot. " * 40):
            model = wire.make()
            settings = _settings(identity=identity)
            async with Agent(model, [add_tool()], settings=settings, owned=[model]) as agent:
                result = await agent.run_conversation("Hi!")
            assert result["cache_read_tokens"] == 0


@leakproof
async def test_responses_caches_only_under_the_same_prompt_cache_key() -> None:
    async with _wire("responses") as wire:
        wire.sim.play(TextReply("5."), TextReply("5."))
        model = wire.make()
        try:
            await model.complete(_request(IDENTITY, cache_key="conv-1"))
            other = await model.complete(_request(IDENTITY, cache_key="conv-2"))
        finally:
            await model.aclose()
    assert other.usage.cache_read_tokens == 0
    assert [b["prompt_cache_key"] for b in wire.bodies()] == ["conv-1", "conv-2"]


@leakproof
async def test_simulators_leave_scripted_usage_alone_by_default() -> None:
    sim = OpenAIChatSimulator("openrouter")
    sim.play(TextReply("5."), TextReply("5."))
    async with sim.mock_client() as client:
        model = OpenAIChatModel(
            "anthropic/claude-sonnet-4.5",
            base_url="https://openrouter.test/api/v1",
            client=client,
            provider="openrouter",
        )
        first = await model.complete(_request(IDENTITY))
        second = await model.complete(_request(IDENTITY))
        await model.aclose()
    assert first.usage == second.usage
    assert second.usage.cache_read_tokens == 0 and second.usage.input_tokens == 12
