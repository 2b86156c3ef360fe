"""Scripted and function-backed models: test doubles that are real adapters.

``ScriptedModel`` plays a FIFO script of steps (reply, reply with tool calls, stream,
raise), records every request, and fails loudly on a call past its script, so a test
says exactly what the model does and then checks the engine's behaviour. It is also the
offline ``scripted`` provider that ``make demo`` runs. ``FunctionModel`` hands each request
to a function, for tests whose replies depend on what the engine sent.
"""

from __future__ import annotations

import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from hermes_core.errors import UnexpectedModelCall
from hermes_core.messages import AssistantMessage, ToolCall, Usage
from hermes_core.ports.llm import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)

__all__ = [
    "FunctionModel",
    "ModelStep",
    "ScriptedModel",
    "UnconsumedModelSteps",
    "call",
    "raise_error",
    "reply",
    "tool_calls",
]


class UnconsumedModelSteps(AssertionError):
    """``assert_complete()`` found steps the engine never asked for."""


@dataclass(frozen=True, slots=True)
class ModelStep:
    """One scripted model call: a response to return, or an error to raise.

    ``delay`` sleeps first (to test concurrency and cancellation); ``chunk`` splits streamed
    text into pieces of that size.
    """

    response: ModelResponse | None = None
    error: BaseException | None = None
    delay: float = 0.0
    chunk: int = 8


def call(
    name: str, arguments: dict[str, Any] | str | None = None, id: str | None = None
) -> ToolCall:
    """A tool call for a script; ``id`` defaults to ``call_<name>``."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id=id or f"call_{name}", name=name, arguments=args)


def reply(
    text: str | None = None,
    *,
    reasoning: str | None = None,
    usage: Usage | None = None,
    finish_reason: FinishReason = "stop",
    delay: float = 0.0,
    provider_data: dict[str, Any] | None = None,
) -> ModelStep:
    """A plain answer."""
    message = AssistantMessage(
        content=text,
        reasoning=reasoning,
        finish_reason=finish_reason,
        provider_data=provider_data or {},
    )
    return ModelStep(ModelResponse(message, finish_reason, usage or Usage()), delay=delay)


def tool_calls(
    *calls: ToolCall,
    text: str | None = None,
    reasoning: str | None = None,
    usage: Usage | None = None,
    delay: float = 0.0,
) -> ModelStep:
    """An answer that asks for tools."""
    message = AssistantMessage(
        content=text, reasoning=reasoning, tool_calls=tuple(calls), finish_reason="tool_calls"
    )
    return ModelStep(ModelResponse(message, "tool_calls", usage or Usage()), delay=delay)


def raise_error(error: BaseException, *, delay: float = 0.0) -> ModelStep:
    """A call that fails with ``error`` (a ``hermes_core.errors.ModelError`` usually)."""
    return ModelStep(error=error, delay=delay)


async def _events_of(response: ModelResponse, chunk: int) -> AsyncIterator[StreamEvent]:
    message = response.message
    if message.reasoning:
        yield ReasoningDelta(message.reasoning)
    text = message.content or ""
    for start in range(0, len(text), max(1, chunk)):
        yield TextDelta(text[start : start + chunk])
        await anyio.lowlevel.checkpoint()
    for index, tc in enumerate(message.tool_calls):
        yield ToolCallDelta(index=index, id=tc.id, name=tc.name)
        yield ToolCallDelta(index=index, arguments=tc.arguments)
    yield ResponseComplete(response)


class _BaseFake:
    """Identity and lifecycle shared by the fakes."""

    def __init__(self, model_name: str, provider: str) -> None:
        self._model_name = model_name
        self._provider = provider
        self.closed = False
        self.requests: list[ModelRequest] = []

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def api_mode(self) -> str:
        return "scripted"

    @property
    def last_request(self) -> ModelRequest:
        if not self.requests:
            raise AssertionError("the model was never called")
        return self.requests[-1]

    async def aclose(self) -> None:
        self.closed = True


class ScriptedModel(_BaseFake):
    """Plays ``steps`` in order, one per call, streaming or not."""

    def __init__(
        self,
        steps: Iterable[ModelStep] = (),
        *,
        model_name: str = "scripted-model",
        provider: str = "scripted",
    ) -> None:
        super().__init__(model_name, provider)
        self._steps: deque[ModelStep] = deque(steps)

    @property
    def calls(self) -> list[ModelRequest]:
        """Every request received, in order (alias of ``requests``)."""
        return self.requests

    def add(self, *steps: ModelStep) -> None:
        self._steps.extend(steps)

    def assert_complete(self) -> None:
        """Fail if any scripted step was never played."""
        if self._steps:
            raise UnconsumedModelSteps(f"{len(self._steps)} scripted step(s) were never used")

    async def _next(self, request: ModelRequest) -> ModelStep:
        self.requests.append(request)
        if not self._steps:
            raise UnexpectedModelCall(
                f"ScriptedModel was called {len(self.requests)} time(s) but the script had "
                f"only {len(self.requests) - 1} step(s); add a step for this call",
                provider=self.provider,
            )
        step = self._steps.popleft()
        if step.delay:
            await anyio.sleep(step.delay)
        if step.error is not None:
            raise step.error
        assert step.response is not None
        return step

    async def complete(self, request: ModelRequest) -> ModelResponse:
        step = await self._next(request)
        assert step.response is not None
        return step.response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        step = await self._next(request)
        assert step.response is not None
        async for event in _events_of(step.response, step.chunk):
            yield event


Responder = Callable[
    [ModelRequest], ModelResponse | ModelStep | Awaitable[ModelResponse | ModelStep]
]


class FunctionModel(_BaseFake):
    """Answers each request with ``fn(request)`` (sync or async)."""

    def __init__(
        self, fn: Responder, *, model_name: str = "function-model", provider: str = "function"
    ) -> None:
        super().__init__(model_name, provider)
        self._fn = fn

    async def _respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        outcome = self._fn(request)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if isinstance(outcome, ModelStep):
            if outcome.delay:
                await anyio.sleep(outcome.delay)
            if outcome.error is not None:
                raise outcome.error
            assert outcome.response is not None
            return outcome.response
        return outcome

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self._respond(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self._respond(request)
        async for event in _events_of(response, 8):
            yield event
