"""The provider contract kit: a wire-neutral scenario vocabulary and ``ChatModelContract``.

A chat-model adapter is only as good as its handling of what real servers send: fragmented
and interleaved tool calls, reasoning that must be replayed, usage with cache buckets,
status codes that must or must not be retried, streams that stop early. This module says
all of that once, independent of any wire format:

* **Scenarios** (frozen dataclasses) describe what the fake server should do for one
  request: :class:`TextReply`, :class:`ToolCallReply`, :class:`HttpError`,
  :class:`ContextOverflow`, :class:`MalformedBody`, :class:`TruncatedStream`,
  :class:`MidStreamError` and :class:`Slow`; :class:`StreamShape` says how a stream is cut
  into events. Usage is given in the canonical :class:`~hermes_core.messages.Usage`
  buckets; each simulator encodes it the way its vendor reports it.
* :class:`WireSimulator` is what a per-format fake server offers: it plays queued
  scenarios in its exact wire format, records requests, and answers format-specific
  questions neutrally (:meth:`WireSimulator.request_summary`,
  :meth:`WireSimulator.replayed_reasoning`, :meth:`WireSimulator.supports`).
* :class:`ChatModelContract` is an abstract pytest class: subclass it, provide a
  ``harness`` fixture returning a :class:`ContractHarness`, and the adapter is held to the
  same behaviour as every other adapter.

Nothing here touches HTTP; the simulators live with the adapters.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeAlias

import anyio
import anyio.lowlevel
import pytest

from hermes_core.errors import (
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
    ChatModel,
    FinishReason,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hermes_core.ports.tools import ToolSpec

__all__ = [
    "DEFAULT_USAGE",
    "FEATURES",
    "CallSpec",
    "ChatModelContract",
    "ContextOverflow",
    "ContractHarness",
    "Feature",
    "Harness",
    "HttpError",
    "MalformedBody",
    "MidStreamError",
    "MidStreamErrorKind",
    "RecordedRequest",
    "Reply",
    "RequestSummary",
    "Scenario",
    "Slow",
    "StreamShape",
    "TextReply",
    "ToolCallReply",
    "TruncatedStream",
    "WireSimulator",
    "auth_error",
    "closing_stream",
    "collect_stream",
    "rate_limited",
    "server_error",
]

# -- scenario vocabulary -----------------------------------------------------------------

CallSpec: TypeAlias = tuple[str, str, str]
"""One tool call a scenario plays: ``(id, name, arguments_json)``; ``""`` = no arguments."""

DEFAULT_USAGE = Usage(input_tokens=12, output_tokens=7)

Feature: TypeAlias = Literal[
    "reasoning",
    "reasoning_replay",
    "all_index_zero",
    "interleave",
    "text_with_tool_deltas",
    "usage.cache_write_tokens",
    "usage.reasoning_tokens",
    "abort",
]
FEATURES: tuple[Feature, ...] = (
    "reasoning",
    "reasoning_replay",
    "all_index_zero",
    "interleave",
    "text_with_tool_deltas",
    "usage.cache_write_tokens",
    "usage.reasoning_tokens",
    "abort",
)
"""What a simulator may or may not be able to express in its format (see ``supports``).

``reasoning``: replies can carry reasoning text; ``reasoning_replay``: the adapter sends it
back and :meth:`WireSimulator.replayed_reasoning` can find it; ``all_index_zero``,
``interleave``, ``text_with_tool_deltas``: the :class:`StreamShape` options of those names;
``usage.*``: the vendor reports that usage bucket; ``abort``: a stream can be cut at the
transport level (:attr:`TruncatedStream.abort`).
"""


@dataclass(frozen=True, slots=True)
class StreamShape:
    """How a simulator cuts a streamed reply into wire events.

    Args:
        fragment: characters per text, reasoning and argument fragment.
        all_index_zero: send every parallel call at index 0, as some OpenAI-compatible
            servers do (WIRE.md §4 item 7).
        interleave: alternate fragments of parallel calls (item 6).
        text_with_tool_deltas: one event carries the last text fragment and the first
            fragment of each tool call (item 9).
    """

    fragment: int = 8
    all_index_zero: bool = False
    interleave: bool = False
    text_with_tool_deltas: bool = False

    def __post_init__(self) -> None:
        if self.fragment < 1:
            raise ValueError("fragment must be at least 1 character")
        if self.all_index_zero and self.interleave:
            raise ValueError("interleaved calls that all say index 0 cannot be reassembled")


@dataclass(frozen=True, slots=True)
class TextReply:
    """A plain answer, optionally with reasoning."""

    text: str
    reasoning: str | None = None
    usage: Usage = DEFAULT_USAGE
    finish: FinishReason = "stop"
    shape: StreamShape = StreamShape()


@dataclass(frozen=True, slots=True)
class ToolCallReply:
    """An answer asking for tools; ``calls`` are ``(id, name, arguments_json)`` triples."""

    calls: Sequence[CallSpec]
    text: str | None = None
    reasoning: str | None = None
    usage: Usage = DEFAULT_USAGE
    shape: StreamShape = StreamShape()

    def __post_init__(self) -> None:
        object.__setattr__(self, "calls", tuple(tuple(c) for c in self.calls))
        if not self.calls:
            raise ValueError("a ToolCallReply needs at least one call")


Reply: TypeAlias = TextReply | ToolCallReply


@dataclass(frozen=True, slots=True)
class HttpError:
    """An HTTP error status; the simulator renders ``message``/``code`` in its vendor's body.

    An empty ``message`` lets the simulator use its vendor's usual text for ``status``.
    """

    status: int
    message: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    code: str | None = None


@dataclass(frozen=True, slots=True)
class ContextOverflow:
    """The vendor's "prompt too long" error, in its own words, at ``status``."""

    status: int = 400


@dataclass(frozen=True, slots=True)
class MalformedBody:
    """A 2xx reply whose body does not follow the format (for streams: a bad event)."""

    body: str = "<html><body>upstream returned garbage</body></html>"


@dataclass(frozen=True, slots=True)
class TruncatedStream:
    """A stream that stops before its terminal event.

    ``keep_finish`` sends the finish signal but not the final terminator (``[DONE]``,
    ``message_stop``...); ``abort`` breaks the connection instead of ending the body
    cleanly. Non-streamed, the simulator sends a body cut in half.
    """

    reply: Reply = TextReply("The answer is forty")
    keep_finish: bool = False
    abort: bool = False


MidStreamErrorKind: TypeAlias = Literal["server", "overloaded", "rate_limit", "context_overflow"]


@dataclass(frozen=True, slots=True)
class MidStreamError:
    """A stream that starts with ``partial`` text and then carries an in-band error event.

    Non-streamed, the simulator answers 200 with the error object as the body, as some
    compatible gateways do.
    """

    error: MidStreamErrorKind = "server"
    partial: str = "Partial answer "
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Slow:
    """``reply``, but slow: for cancellation tests.

    Streamed, the simulator sends everything up to and including the first text fragment,
    then waits ``delay`` seconds; non-streamed it waits before answering.
    """

    delay: float
    reply: Reply = TextReply("This answer arrives far too late.")


Scenario: TypeAlias = (
    TextReply
    | ToolCallReply
    | HttpError
    | ContextOverflow
    | MalformedBody
    | TruncatedStream
    | MidStreamError
    | Slow
)


def rate_limited(retry_after: float = 0.01, *, header: str = "retry-after") -> HttpError:
    """A 429 asking to wait ``retry_after`` seconds (``retry-after-ms`` takes milliseconds)."""
    value = retry_after * 1000 if header == "retry-after-ms" else retry_after
    return HttpError(429, "Rate limit reached", {header: f"{value:g}"}, "rate_limit_exceeded")


def server_error(status: int = 500) -> HttpError:
    return HttpError(status)


def auth_error(status: int = 401) -> HttpError:
    return HttpError(status, "Incorrect API key provided", code="invalid_api_key")


# -- the simulator port -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the simulator received; ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RequestSummary:
    """A wire-neutral reading of one request body, so the contract can assert on it.

    ``message_roles`` lists the core role each wire message (or Anthropic content block)
    stands for, in order: a top-level system prompt counts as ``"system"``, each tool
    result as ``"tool"``. ``tool_call_ids`` are the ids of replayed assistant tool calls,
    ``tool_result_ids`` the ids tool results answer.
    """

    model: str
    stream: bool
    system: str | None
    message_roles: tuple[str, ...]
    user_texts: tuple[str, ...]
    tool_names: tuple[str, ...]
    tool_call_ids: tuple[str, ...]
    tool_result_ids: tuple[str, ...]


class WireSimulator(Protocol):
    """A fake server for one wire format, driven by scenarios."""

    @property
    def requests(self) -> Sequence[RecordedRequest]:
        """Every request received, in order."""
        ...

    @property
    def pending(self) -> int:
        """Scenarios queued but not yet played."""
        ...

    def play(self, *scenarios: Scenario) -> None:
        """Queue one scenario per expected request, in order."""
        ...

    def supports(self, feature: Feature) -> bool:
        """Whether this format can express ``feature`` (see :data:`FEATURES`)."""
        ...

    def request_summary(self, index: int) -> RequestSummary:
        """The neutral reading of request ``index``."""
        ...

    def replayed_reasoning(self, index: int) -> str | None:
        """The reasoning text request ``index`` replayed for its last assistant tool turn."""
        ...


class ContractHarness(Protocol):
    """What a ``harness`` fixture returns: the model under test wired to its simulator.

    Build the model with tiny backoff delays (milliseconds) so retry tests stay fast, and
    with reasoning replay switched on when the simulator ``supports("reasoning_replay")``.
    """

    @property
    def model(self) -> ChatModel: ...

    @property
    def sim(self) -> WireSimulator: ...

    @property
    def max_retries(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Harness:
    """A plain :class:`ContractHarness`."""

    model: ChatModel
    sim: WireSimulator
    max_retries: int


# -- helpers ------------------------------------------------------------------------------


@asynccontextmanager
async def closing_stream(
    events: AsyncIterator[StreamEvent],
) -> AsyncIterator[AsyncIterator[StreamEvent]]:
    """``contextlib.aclosing`` for a ``ChatModel.stream`` iterator (typed as AsyncIterator)."""
    try:
        yield events
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


async def collect_stream(
    model: ChatModel, request: ModelRequest
) -> tuple[list[StreamEvent], ModelResponse]:
    """All events of one stream and its response; checks the terminal-event rule."""
    events: list[StreamEvent] = []
    async with closing_stream(model.stream(request)) as stream:
        async for event in stream:
            events.append(event)
    assert events, "the stream yielded nothing"
    finals = [e for e in events if isinstance(e, ResponseComplete)]
    assert len(finals) == 1, f"expected one ResponseComplete, got {len(finals)}"
    assert isinstance(events[-1], ResponseComplete), "ResponseComplete must be the last event"
    return events, finals[0].response


def _ask(text: str = "Hello?", *, tools: tuple[ToolSpec, ...] = ()) -> ModelRequest:
    return ModelRequest(messages=(UserMessage(content=text),), tools=tools)


def _spec(name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"The {name} tool.",
        parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
    )


_TOOLS = (_spec("add"), _spec("echo"), _spec("ping"))


def _calls(response: ModelResponse) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, c.arguments) for c in response.message.tool_calls]


def _expected_calls(calls: Sequence[CallSpec]) -> list[tuple[str, str, str]]:
    return [(i, n, a if a.strip() else "{}") for i, n, a in calls]


def _check_deltas(events: Sequence[StreamEvent], response: ModelResponse) -> None:
    """The deltas must add up to the final response (text, reasoning, each tool call)."""
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == (response.message.content or ""), "text deltas differ from the content"
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    if response.message.reasoning:
        assert reasoning, "reasoning arrived without ReasoningDelta events"
    grouped: dict[int, list[ToolCallDelta]] = {}
    for event in events:
        if isinstance(event, ToolCallDelta):
            grouped.setdefault(event.index, []).append(event)
    assembled = []
    for fragments in grouped.values():
        ids = [f.id for f in fragments if f.id]
        names = [f.name for f in fragments if f.name]
        assert len(set(ids)) <= 1 and len(set(names)) <= 1, f"one index, two calls: {fragments}"
        args = "".join(f.arguments for f in fragments)
        assembled.append((ids[0] if ids else None, names[0] if names else None, args))
    final = response.message.tool_calls
    assert len(assembled) == len(final), f"{len(assembled)} delta groups, {len(final)} calls"
    for (call_id, name, args), call in zip(assembled, final, strict=True):
        assert call_id in {None, call.id} and name == call.name
        assert (args.strip() or "{}") == call.arguments


async def _task_ids() -> set[int]:
    await anyio.lowlevel.checkpoint()
    return {t.id for t in anyio.get_running_tasks()}


async def _assert_no_new_tasks(before: set[int], grace: float = 2.0) -> None:
    """Tasks started since ``before`` must finish within ``grace`` seconds."""
    for _ in range(max(1, int(grace / 0.01))):
        if not (await _task_ids()) - before:
            break
        await anyio.sleep(0.01)
    leaked = [t for t in anyio.get_running_tasks() if t.id not in before]
    assert not leaked, f"tasks outlived the cancelled call: {leaked}"


# -- the contract -------------------------------------------------------------------------


class ChatModelContract:
    """Abstract contract for :class:`~hermes_core.ports.llm.ChatModel` adapters.

    Subclass it and provide an (async) ``harness`` fixture; see :class:`ContractHarness`.
    Requires the ``anyio_backend`` fixture. Tests that need a feature the simulator
    cannot express are skipped, never silently passed.
    """

    @pytest.fixture
    def harness(self) -> ContractHarness:
        raise NotImplementedError("provide a `harness` fixture (model + simulator)")

    # identity and lifecycle

    @pytest.mark.anyio
    async def test_identity_is_declared(self, harness: ContractHarness) -> None:
        model = harness.model
        assert isinstance(model, ChatModel)
        for value in (model.model_name, model.provider, model.api_mode):
            assert isinstance(value, str) and value

    @pytest.mark.anyio
    async def test_aclose_is_idempotent(self, harness: ContractHarness) -> None:
        await harness.model.aclose()
        await harness.model.aclose()

    # plain replies

    @pytest.mark.anyio
    async def test_plain_text(self, harness: ContractHarness) -> None:
        harness.sim.play(TextReply("Hello, world!"))
        response = await harness.model.complete(_ask())
        assert response.message.content == "Hello, world!"
        assert response.message.tool_calls == ()
        assert response.finish_reason == "stop"
        assert len(harness.sim.requests) == 1

    @pytest.mark.anyio
    async def test_plain_text_streams_as_deltas(self, harness: ContractHarness) -> None:
        harness.sim.play(TextReply("Hello, streaming world!", shape=StreamShape(fragment=4)))
        events, response = await collect_stream(harness.model, _ask())
        assert response.message.content == "Hello, streaming world!"
        assert len([e for e in events if isinstance(e, TextDelta)]) > 1, "text did not stream"
        _check_deltas(events, response)

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_one_tool_call(self, harness: ContractHarness, stream: bool) -> None:
        harness.sim.play(ToolCallReply([("call_1", "add", '{"a": 2, "b": 3}')]))
        response = await self._call(harness, _ask(tools=_TOOLS), stream)
        assert _calls(response) == [("call_1", "add", '{"a": 2, "b": 3}')]
        assert response.finish_reason == "tool_calls"
        assert response.message.tool_calls[0].parsed_arguments() == {"a": 2, "b": 3}

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_parallel_tool_calls(self, harness: ContractHarness, stream: bool) -> None:
        calls = [
            ("call_a", "add", '{"a": 1}'),
            ("call_b", "echo", '{"a": 22}'),
            ("call_c", "add", '{"a": 333}'),
        ]
        harness.sim.play(ToolCallReply(calls, text="Working on it."))
        response = await self._call(harness, _ask(tools=_TOOLS), stream)
        assert _calls(response) == calls
        assert response.message.content == "Working on it."

    # streaming shapes

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        "reply",
        [
            TextReply("Plain answer.", reasoning="Let me think about it."),
            ToolCallReply(
                [("c1", "add", '{"a": 1, "b": 2}'), ("c2", "echo", '{"text": "hi there"}')],
                text="Let me check.",
                reasoning="Two tools are needed.",
            ),
            ToolCallReply([("c1", "ping", "")]),
        ],
        ids=["text", "tool_calls", "no_args"],
    )
    async def test_stream_equals_complete(self, harness: ContractHarness, reply: Reply) -> None:
        harness.sim.play(reply, reply)
        request = _ask(tools=_TOOLS)
        plain = await harness.model.complete(request)
        events, streamed = await collect_stream(harness.model, request)
        _check_deltas(events, streamed)
        assert streamed.message.content == plain.message.content
        assert streamed.message.reasoning == plain.message.reasoning
        assert _calls(streamed) == _calls(plain)
        assert streamed.message.provider_data == plain.message.provider_data
        assert streamed.finish_reason == plain.finish_reason
        assert streamed.usage == plain.usage

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_text_with_unicode_line_separators_arrives_whole(
        self, harness: ContractHarness, stream: bool
    ) -> None:
        # Providers send JSON as raw UTF-8, and JSON strings may hold U+2028, U+2029, NEL
        # and form feeds unescaped: an SSE reader that splits lines like str.splitlines
        # cuts such a data line in two and loses the event.
        text = "one\u2028two\u2029three\x85four\x0cfive\x1csix \u00e9\u4e2d\U0001f600"
        harness.sim.play(TextReply(text, reasoning="why\u2028not"))
        response = await self._call(harness, _ask(), stream)
        assert response.message.content == text

    @pytest.mark.anyio
    @pytest.mark.parametrize("fragment", [1, 3])
    async def test_fragmented_tool_call_deltas(
        self, harness: ContractHarness, fragment: int
    ) -> None:
        calls = [("c1", "add", '{"a": 12, "nested": {"b": [1, 2, 3]}}'), ("c2", "echo", "{}")]
        harness.sim.play(ToolCallReply(calls, text="ok", shape=StreamShape(fragment=fragment)))
        events, response = await collect_stream(harness.model, _ask(tools=_TOOLS))
        assert _calls(response) == calls
        assert len([e for e in events if isinstance(e, ToolCallDelta)]) > len(calls)
        _check_deltas(events, response)

    @pytest.mark.anyio
    async def test_interleaved_parallel_deltas(self, harness: ContractHarness) -> None:
        calls = [("c1", "add", '{"a": 1111}'), ("c2", "echo", '{"a": 2222}')]
        shape = self._shape(harness, "interleave", StreamShape(fragment=2, interleave=True))
        harness.sim.play(ToolCallReply(calls, shape=shape))
        events, response = await collect_stream(harness.model, _ask(tools=_TOOLS))
        assert _calls(response) == calls
        _check_deltas(events, response)

    @pytest.mark.anyio
    @pytest.mark.parametrize("fragment", [3, 100], ids=["fragmented", "whole"])
    async def test_all_index_zero_parallel_calls(
        self, harness: ContractHarness, fragment: int
    ) -> None:
        calls = [("c1", "add", '{"a": 1}'), ("c2", "add", '{"a": 2}'), ("c3", "echo", "{}")]
        shape = self._shape(
            harness, "all_index_zero", StreamShape(fragment=fragment, all_index_zero=True)
        )
        harness.sim.play(ToolCallReply(calls, shape=shape))
        events, response = await collect_stream(harness.model, _ask(tools=_TOOLS))
        assert _calls(response) == calls, "parallel calls at index 0 were merged"
        _check_deltas(events, response)

    @pytest.mark.anyio
    async def test_text_and_tool_deltas_in_one_event(self, harness: ContractHarness) -> None:
        calls = [("c1", "add", '{"a": 5}'), ("c2", "echo", '{"a": 6}')]
        shape = self._shape(
            harness, "text_with_tool_deltas", StreamShape(fragment=5, text_with_tool_deltas=True)
        )
        harness.sim.play(ToolCallReply(calls, text="Calling tools now.", shape=shape))
        events, response = await collect_stream(harness.model, _ask(tools=_TOOLS))
        assert response.message.content == "Calling tools now."
        assert _calls(response) == calls
        _check_deltas(events, response)

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_empty_tool_arguments_become_empty_object(
        self, harness: ContractHarness, stream: bool
    ) -> None:
        harness.sim.play(ToolCallReply([("c1", "ping", ""), ("c2", "ping", "")]))
        response = await self._call(harness, _ask(tools=_TOOLS), stream)
        assert [c.arguments for c in response.message.tool_calls] == ["{}", "{}"]
        assert all(c.parsed_arguments() == {} for c in response.message.tool_calls)

    # reasoning

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_reasoning_is_kept_and_replayed(
        self, harness: ContractHarness, stream: bool
    ) -> None:
        expressible = harness.sim.supports("reasoning")
        thought = "The user wants a sum, so call add."
        harness.sim.play(
            ToolCallReply([("c1", "add", '{"a": 2}')], reasoning=thought),
            TextReply("The sum is 2."),
        )
        first_request = _ask("add 2", tools=_TOOLS)
        response = await self._call(harness, first_request, stream)
        # a format that cannot carry reasoning must not invent any
        assert response.message.reasoning == (thought if expressible else None)
        follow_up = ModelRequest(
            messages=(
                *first_request.messages,
                response.message,
                ToolMessage(tool_call_id="c1", content='{"sum": 2}'),
            ),
            tools=_TOOLS,
        )
        final = await self._call(harness, follow_up, stream)
        assert final.message.content == "The sum is 2."
        replayed = harness.sim.replayed_reasoning(1)
        if harness.sim.supports("reasoning_replay"):
            assert replayed == thought
        else:
            assert replayed is None

    @pytest.mark.anyio
    async def test_reasoning_survives_the_message_codec(self, harness: ContractHarness) -> None:
        """Provider replay data must survive a store round trip (dict codec) unchanged."""
        harness.sim.play(ToolCallReply([("c1", "add", "{}")], reasoning="Thinking hard."))
        response = await harness.model.complete(_ask(tools=_TOOLS))
        restored = message_from_dict(json.loads(json.dumps(message_to_dict(response.message))))
        assert restored == response.message

    # usage

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_usage_maps_to_canonical_buckets(
        self, harness: ContractHarness, stream: bool
    ) -> None:
        usage = Usage(
            input_tokens=100,
            output_tokens=20,
            cache_read_tokens=30,
            cache_write_tokens=5,
            reasoning_tokens=7,
        )
        expected = usage.model_copy(
            update={
                "cache_write_tokens": (
                    5 if harness.sim.supports("usage.cache_write_tokens") else 0
                ),
                "reasoning_tokens": 7 if harness.sim.supports("usage.reasoning_tokens") else 0,
            }
        )
        harness.sim.play(TextReply("counted", usage=usage))
        response = await self._call(harness, _ask(), stream)
        assert response.usage == expected, "input_tokens must exclude cached input"

    # errors and retries

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_context_overflow_is_not_retried(
        self, harness: ContractHarness, stream: bool
    ) -> None:
        harness.sim.play(ContextOverflow(), TextReply("never sent"))
        with pytest.raises(ContextTooLong):
            await self._call(harness, _ask(), stream)
        assert len(harness.sim.requests) == 1

    @pytest.mark.anyio
    @pytest.mark.parametrize("status", [401, 403])
    async def test_auth_error_is_not_retried(self, harness: ContractHarness, status: int) -> None:
        harness.sim.play(auth_error(status), TextReply("never sent"))
        with pytest.raises(ModelAuthError) as info:
            await harness.model.complete(_ask())
        assert info.value.status == status
        assert len(harness.sim.requests) == 1

    @pytest.mark.anyio
    @pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_rate_limit_waits_then_succeeds(
        self, harness: ContractHarness, header: str, stream: bool
    ) -> None:
        harness.sim.play(rate_limited(0.01, header=header), TextReply("after the wait"))
        with anyio.fail_after(5):
            response = await self._call(harness, _ask(), stream)
        assert response.message.content == "after the wait"
        requests = harness.sim.requests
        assert len(requests) == 2
        assert requests[0].body == requests[1].body, "a retry must resend the same body"

    @pytest.mark.anyio
    async def test_rate_limit_exhausted(self, harness: ContractHarness) -> None:
        harness.sim.play(*[rate_limited(0.01)] * (harness.max_retries + 1))
        with pytest.raises(ModelRateLimited) as info:
            await harness.model.complete(_ask())
        assert info.value.retry_after == pytest.approx(0.01)
        assert len(harness.sim.requests) == harness.max_retries + 1

    @pytest.mark.anyio
    @pytest.mark.parametrize("status", [500, 503, 529])
    async def test_server_errors_exhaust_retries(
        self, harness: ContractHarness, status: int
    ) -> None:
        harness.sim.play(*[server_error(status)] * (harness.max_retries + 1))
        with pytest.raises(ModelUnavailable) as info:
            await harness.model.complete(_ask())
        assert info.value.status == status
        assert len(harness.sim.requests) == harness.max_retries + 1
        assert harness.sim.pending == 0

    @pytest.mark.anyio
    async def test_server_error_then_success(self, harness: ContractHarness) -> None:
        harness.sim.play(server_error(502), TextReply("recovered"))
        _, response = await collect_stream(harness.model, _ask())
        assert response.message.content == "recovered"
        assert len(harness.sim.requests) == 2

    @pytest.mark.anyio
    async def test_should_retry_header_is_honoured(self, harness: ContractHarness) -> None:
        harness.sim.play(HttpError(500, headers={"x-should-retry": "false"}), TextReply("no"))
        with pytest.raises(ModelUnavailable):
            await harness.model.complete(_ask())
        assert len(harness.sim.requests) == 1

    @pytest.mark.anyio
    @pytest.mark.parametrize("status", [400, 404, 422])
    async def test_client_errors_are_not_retried(
        self, harness: ContractHarness, status: int
    ) -> None:
        harness.sim.play(HttpError(status, "bad request"), TextReply("never sent"))
        with pytest.raises(ModelError) as info:
            await harness.model.complete(_ask())
        assert type(info.value) is ModelError and info.value.status == status
        assert len(harness.sim.requests) == 1

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_malformed_body_is_a_protocol_error(
        self, harness: ContractHarness, stream: bool
    ) -> None:
        harness.sim.play(MalformedBody())
        with pytest.raises(ModelProtocolError):
            await self._call(harness, _ask(), stream)
        assert len(harness.sim.requests) == 1

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        "scenario",
        [
            TruncatedStream(),
            TruncatedStream(keep_finish=True),
            TruncatedStream(ToolCallReply([("c1", "add", '{"a": 1, "b": 2}')])),
            TruncatedStream(abort=True),
        ],
        ids=["before_finish", "before_terminator", "tool_call", "abort"],
    )
    async def test_truncated_stream_is_incomplete(
        self, harness: ContractHarness, scenario: TruncatedStream
    ) -> None:
        if scenario.abort and not harness.sim.supports("abort"):
            scenario = replace(scenario, abort=False)
        harness.sim.play(scenario)
        events: list[StreamEvent] = []
        with pytest.raises(IncompleteStream):
            async with closing_stream(harness.model.stream(_ask(tools=_TOOLS))) as stream:
                async for event in stream:
                    events.append(event)
        assert not any(isinstance(e, ResponseComplete) for e in events)
        assert len(harness.sim.requests) == 1

    @pytest.mark.anyio
    async def test_truncated_body_is_a_protocol_error(self, harness: ContractHarness) -> None:
        harness.sim.play(TruncatedStream())
        with pytest.raises(ModelProtocolError):
            await harness.model.complete(_ask())

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        ("kind", "error"),
        [
            ("server", ModelUnavailable),
            ("overloaded", ModelUnavailable),
            ("rate_limit", ModelRateLimited),
            ("context_overflow", ContextTooLong),
        ],
    )
    async def test_mid_stream_error_is_mapped(
        self,
        harness: ContractHarness,
        kind: MidStreamErrorKind,
        error: type[ModelError],
    ) -> None:
        harness.sim.play(MidStreamError(kind))
        events: list[StreamEvent] = []
        with pytest.raises(error):
            async with closing_stream(harness.model.stream(_ask())) as stream:
                async for event in stream:
                    events.append(event)
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text == "Partial answer "[: len(text)], "the partial text must stream first"
        assert len(harness.sim.requests) == 1, "a failure after data flowed is not retried"

    # cancellation

    @pytest.mark.anyio
    async def test_cancellation_mid_stream_propagates(self, harness: ContractHarness) -> None:
        harness.sim.play(Slow(30.0), TextReply("still usable"))
        before = await _task_ids()
        received: list[StreamEvent] = []
        with anyio.fail_after(5), anyio.CancelScope() as scope:
            async with closing_stream(harness.model.stream(_ask())) as stream:
                async for event in stream:
                    received.append(event)
                    if isinstance(event, TextDelta):
                        scope.cancel()
        assert scope.cancelled_caught, "the stream did not stop when cancelled"
        assert any(isinstance(e, TextDelta) for e in received)
        assert not any(isinstance(e, ResponseComplete) for e in received)
        await _assert_no_new_tasks(before)
        response = await harness.model.complete(_ask())
        assert response.message.content == "still usable"

    @pytest.mark.anyio
    async def test_cancellation_while_waiting_propagates(self, harness: ContractHarness) -> None:
        harness.sim.play(Slow(30.0))
        before = await _task_ids()
        with anyio.fail_after(5), anyio.move_on_after(0.05) as scope:
            await harness.model.complete(_ask())
        assert scope.cancelled_caught
        await _assert_no_new_tasks(before)

    @pytest.mark.anyio
    async def test_consumer_may_stop_early(self, harness: ContractHarness) -> None:
        harness.sim.play(TextReply("a long answer " * 20, shape=StreamShape(fragment=4)))
        harness.sim.play(TextReply("next"))
        async with closing_stream(harness.model.stream(_ask())) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    break
        assert (await harness.model.complete(_ask())).message.content == "next"

    # the outgoing request

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
    async def test_request_carries_model_messages_and_tools(
        self, harness: ContractHarness, stream: bool
    ) -> None:
        messages: tuple[Message, ...] = (
            SystemMessage(content="Be brief."),
            UserMessage(content="What is 2+3?"),
            AssistantMessage(tool_calls=(ToolCall(id="c1", name="add", arguments='{"a": 2}'),)),
            ToolMessage(tool_call_id="c1", content='{"sum": 5}'),
            UserMessage(content="Thanks. And 3+4?"),
        )
        harness.sim.play(TextReply("7"))
        await self._call(harness, ModelRequest(messages=messages, tools=_TOOLS), stream)
        summary = harness.sim.request_summary(0)
        assert summary.model == harness.model.model_name
        assert summary.stream is stream
        assert summary.system == "Be brief."
        assert summary.message_roles == ("system", "user", "assistant", "tool", "user")
        assert summary.user_texts == ("What is 2+3?", "Thanks. And 3+4?")
        assert summary.tool_names == ("add", "echo", "ping")
        assert summary.tool_call_ids == ("c1",)
        assert summary.tool_result_ids == ("c1",)

    @pytest.mark.anyio
    async def test_tool_free_request_sends_no_tools(self, harness: ContractHarness) -> None:
        harness.sim.play(TextReply("fine"))
        await harness.model.complete(_ask())
        summary = harness.sim.request_summary(0)
        assert summary.tool_names == ()
        assert summary.message_roles == ("user",)

    # plumbing

    @staticmethod
    def _shape(harness: ContractHarness, feature: Feature, shape: StreamShape) -> StreamShape:
        """``shape`` when the wire format can express it, else the plain fragmentation.

        Contract tests never skip: a format that cannot express an oddity still has to
        assemble the same calls from its ordinary stream.
        """
        if harness.sim.supports(feature):
            return shape
        return StreamShape(fragment=shape.fragment)

    @staticmethod
    async def _call(harness: ContractHarness, request: ModelRequest, stream: bool) -> ModelResponse:
        if not stream:
            return await harness.model.complete(request)
        events, response = await collect_stream(harness.model, request)
        _check_deltas(events, response)
        return response
