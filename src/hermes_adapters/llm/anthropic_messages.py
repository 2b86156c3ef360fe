"""The Anthropic Messages adapter (``api_mode = "anthropic_messages"``).

One class serves the native API and Messages-compatible gateways: the wire format lives
in :mod:`._anthropic_mapping`, the endpoint and retry policy in :mod:`._http` (shared with
the Chat Completions adapter, so 429/529 handling and error mapping cannot drift). The
request JSON is built and encoded once per call, so retries send byte-identical bodies
and the prompt-cache prefix stays stable across turns.

Example::

    model = AnthropicMessagesModel("claude-sonnet-4-5", api_key=key, cache_ttl="1h")
    try:
        response = await model.complete(ModelRequest(messages=(UserMessage(content="hi"),)))
    finally:
        await model.aclose()
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, Literal, cast

import anyio
import httpx

from hermes_adapters.llm._anthropic_mapping import (
    AnthropicStreamAssembler,
    messages_body,
    parse_message,
)
from hermes_adapters.llm._http import (
    Endpoint,
    RetryPolicy,
    error_from_transport,
    error_parts,
    iter_sse,
)
from hermes_core.errors import ModelError
from hermes_core.ports.llm import ModelRequest, ModelResponse, ResponseComplete, StreamEvent

__all__ = ["ANTHROPIC_VERSION", "AnthropicMessagesModel", "is_thinking_rejection"]

ANTHROPIC_VERSION = "2023-06-01"
_PATH = "v1/messages"
_DRAIN_SECONDS = 2.0


def is_thinking_rejection(error: ModelError) -> bool:
    """Whether a 400 says replayed thinking blocks are not acceptable (WIRE.md §4 item 10):
    a signature damaged or minted for another model, or a latest-turn block altered."""
    if error.status != 400:
        return False
    message = error_parts(error.body or "")[0].lower()
    return ("signature" in message and "thinking" in message) or (
        "thinking" in message and "cannot be modified" in message
    )


async def _drain(events: AsyncIterator[object]) -> None:
    """Read to the end of the body (it is due right away after ``message_stop`` or an
    ``error`` event) so httpx's nested byte iterators finish here instead of being
    finalised later by the garbage collector in stray tasks."""
    with anyio.move_on_after(_DRAIN_SECONDS):
        try:
            async for _ in events:
                pass
        except httpx.HTTPError:
            pass


class AnthropicMessagesModel:
    """A :class:`hermes_core.ports.llm.ChatModel` over ``POST {base_url}/v1/messages``.

    Args:
        model: the model name sent when a request does not name one.
        base_url: the API root, ending before ``/v1/messages``.
        api_key: sent as ``x-api-key`` to ``base_url``'s host only.
        client: an ``httpx.AsyncClient`` to borrow (its owner closes it); by default the
            model creates and owns one.
        provider: the name used in errors and bookkeeping.
        headers: extra headers on every request (``anthropic-beta``, say); they may
            override ``anthropic-version``.
        max_retries: retries after the first attempt, per WIRE.md §2.4 (529 included).
        backoff: ``(base, cap)`` seconds of the exponential backoff.
        max_tokens_default: ``max_tokens`` when a request sets none (the field is required).
        cache_ttl: ``"5m"`` or ``"1h"`` for the cache breakpoints unless the request's
            :class:`~hermes_core.ports.llm.CacheHints` names one.
        prompt_caching: place ``cache_control`` breakpoints (REFERENCE.md §7); off for
            gateways that reject the field.
        thinking_recovery: when the server rejects replayed thinking blocks (a stale or
            damaged signature, WIRE.md §4 item 10), retry once without them instead of
            leaving the session unusable.
        timeout: read/connect timeout of the owned client.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.anthropic.com",
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        provider: str = "anthropic",
        headers: Mapping[str, str] | None = None,
        max_retries: int = 2,
        backoff: tuple[float, float] = (0.5, 8.0),
        max_tokens_default: int = 16384,
        cache_ttl: Literal["5m", "1h"] | None = None,
        prompt_caching: bool = True,
        thinking_recovery: bool = True,
        timeout: httpx.Timeout | float | None = None,
    ) -> None:
        self._model = model
        self._provider = provider
        self._endpoint = Endpoint(
            base_url,
            api_key=api_key,
            provider=provider,
            headers={"anthropic-version": ANTHROPIC_VERSION, **(headers or {})},
            client=client,
            auth_header="x-api-key",
            auth_prefix="",
            timeout=timeout,
        )
        self._policy = RetryPolicy(
            max_retries=max_retries, base_delay=backoff[0], max_delay=backoff[1]
        )
        self._max_tokens_default = max_tokens_default
        self._cache_ttl = cache_ttl
        self._prompt_caching = prompt_caching
        self._thinking_recovery = thinking_recovery

    def __repr__(self) -> str:
        return f"AnthropicMessagesModel({self._model!r}, provider={self._provider!r})"

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def api_mode(self) -> str:
        return "anthropic_messages"

    def build_body(
        self, request: ModelRequest, *, stream: bool = False, replay_thinking: bool = True
    ) -> dict[str, Any]:
        """The JSON this model would send for ``request``; public so hosts can inspect it."""
        return messages_body(
            request,
            model=self._model,
            stream=stream,
            max_tokens_default=self._max_tokens_default,
            prompt_caching=self._prompt_caching,
            cache_ttl=self._cache_ttl,
            replay_thinking=replay_thinking,
        )

    def _encode(self, request: ModelRequest, *, stream: bool, replay_thinking: bool) -> bytes:
        body = self.build_body(request, stream=stream, replay_thinking=replay_thinking)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    def _recovery(self, request: ModelRequest, content: bytes, stream: bool) -> bytes | None:
        """The body without thinking blocks, when recovery applies and differs at all."""
        if not self._thinking_recovery:
            return None
        stripped = self._encode(request, stream=stream, replay_thinking=False)
        return None if stripped == content else stripped

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One non-streamed call.

        Raises:
            ModelError: mapped from the HTTP status, transport failure or in-band error
                (``ContextTooLong``, ``ModelAuthError``, ``ModelRateLimited``,
                ``ModelUnavailable``, ``ModelProtocolError``), after retries.
        """
        content = self._encode(request, stream=False, replay_thinking=True)
        try:
            data = await self._endpoint.post_json(_PATH, content, self._policy)
        except ModelError as exc:
            fallback = (
                self._recovery(request, content, False) if is_thinking_rejection(exc) else None
            )
            if fallback is None:
                raise
            data = await self._endpoint.post_json(_PATH, fallback, self._policy)
        return parse_message(data, provider=self._provider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream deltas, then one :class:`ResponseComplete`.

        Retries happen only before the first byte; once deltas flow a failure surfaces.
        Close the iterator (``contextlib.aclosing``) when stopping early.

        Raises:
            IncompleteStream: the stream ended or broke before ``message_stop``.
            ModelError: as for :meth:`complete`, including ``event: error`` in the stream.
        """
        content = self._encode(request, stream=True, replay_thinking=True)
        started = False
        try:
            async with aclosing(self._stream_body(content)) as events:
                async for event in events:
                    started = True
                    yield event
        except ModelError as exc:
            # a rejection arrives as an HTTP 400 before any event, so nothing was yielded
            recover = not started and is_thinking_rejection(exc)
            fallback = self._recovery(request, content, True) if recover else None
            if fallback is None:
                raise
            async with aclosing(self._stream_body(fallback)) as events:
                async for event in events:
                    yield event

    async def _stream_body(self, content: bytes) -> AsyncGenerator[StreamEvent, None]:
        assembler = AnthropicStreamAssembler(provider=self._provider)
        async with self._endpoint.stream(_PATH, content, self._policy) as response:
            try:
                async with (
                    aclosing(cast(AsyncGenerator[str, None], response.aiter_lines())) as lines,
                    aclosing(iter_sse(lines)) as events,
                ):
                    try:
                        async for event in events:
                            for delta in assembler.feed(event):
                                yield delta
                            if assembler.done:
                                break
                    except ModelError:
                        await _drain(events)  # an `event: error` is the server's last word
                        raise
                    await _drain(events)
            except httpx.HTTPError as exc:
                raise error_from_transport(
                    exc, provider=self._provider, during_stream=True
                ) from exc
        yield ResponseComplete(assembler.finish())

    async def aclose(self) -> None:
        """Release the owned HTTP client; idempotent, and a borrowed client stays open."""
        await self._endpoint.aclose()
