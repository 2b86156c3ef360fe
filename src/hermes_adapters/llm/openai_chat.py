"""The OpenAI Chat Completions adapter (``api_mode = "chat_completions"``).

One class serves OpenAI and every OpenAI-compatible host (DeepSeek, OpenRouter, vLLM,
Ollama, LM Studio...): the wire format lives in :mod:`._openai_mapping`, the endpoint and
retry policy in :mod:`._http`, and the few per-host differences are constructor options
rather than subclasses. The request JSON is built and encoded once per call, so retries
send byte-identical bodies.

Example::

    model = OpenAIChatModel("deepseek-chat", base_url="https://api.deepseek.com/v1",
                            api_key=key, provider="deepseek",
                            reasoning_echo="reasoning_content")
    try:
        response = await model.complete(ModelRequest(messages=(UserMessage(content="hi"),)))
    finally:
        await model.aclose()
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, cast

import anyio
import httpx

from hermes_adapters.llm._cache_envelope import (
    CacheControlMode,
    envelope_cache_control,
    wants_envelope,
)
from hermes_adapters.llm._http import Endpoint, RetryPolicy, error_from_transport, iter_sse
from hermes_adapters.llm._openai_mapping import (
    ChatStreamAssembler,
    ReasoningEcho,
    chat_body,
    parse_chat_completion,
)
from hermes_core.errors import ModelError
from hermes_core.ports.llm import ModelRequest, ModelResponse, ResponseComplete, StreamEvent

__all__ = ["CacheControlMode", "OpenAIChatModel", "ReasoningEcho"]

_DRAIN_SECONDS = 2.0


async def _drain(events: AsyncIterator[object]) -> None:
    """Read to the end of the body (it is due right away after ``[DONE]`` or an in-band
    error) so httpx's nested byte iterators finish here instead of being finalised later
    by the garbage collector in stray tasks; bounded, so a server that keeps the
    connection open cannot hold the caller."""
    with anyio.move_on_after(_DRAIN_SECONDS):
        try:
            async for _ in events:
                pass
        except httpx.HTTPError:
            pass


class OpenAIChatModel:
    """A :class:`hermes_core.ports.llm.ChatModel` over ``POST {base_url}/chat/completions``.

    Args:
        model: the model name sent when a request does not name one.
        base_url: the API root, ending before ``/chat/completions``.
        api_key: sent as ``Authorization: Bearer`` to ``base_url``'s host only; ``None``
            for local servers that need no key.
        client: an ``httpx.AsyncClient`` to borrow (its owner closes it); by default the
            model creates and owns one.
        provider: the name used in errors and ``ModelResponse`` bookkeeping.
        headers: extra headers on every request (``HTTP-Referer`` for OpenRouter, say).
        max_retries: retries after the first attempt, per WIRE.md §2.4.
        backoff: ``(base, cap)`` seconds of the exponential backoff.
        reasoning_echo: how reasoning is replayed on assistant turns: ``"none"`` (strict
            gateways reject unknown keys), ``"reasoning_content"`` (DeepSeek, Kimi: on
            tool-call turns, ``" "`` when empty) or ``"reasoning_details"`` (OpenRouter).
        max_tokens_field: ``max_completion_tokens`` (OpenAI) or legacy ``max_tokens``.
        keep_extra_content: send tool calls' ``extra_content`` (Gemini thought signatures);
            default: only when the model name mentions Gemini.
        timeout: read/connect timeout of the owned client.
        cache_control: Anthropic prompt-cache breakpoints in the envelope layout
            (REFERENCE.md §7, :mod:`._cache_envelope`): ``"auto"`` places them for Claude
            models on OpenRouter, ``"envelope"`` always, ``"off"`` never.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        provider: str = "openai",
        headers: Mapping[str, str] | None = None,
        max_retries: int = 2,
        backoff: tuple[float, float] = (0.5, 8.0),
        reasoning_echo: ReasoningEcho = "none",
        max_tokens_field: str = "max_completion_tokens",
        keep_extra_content: bool | None = None,
        timeout: httpx.Timeout | float | None = None,
        cache_control: CacheControlMode = "auto",
    ) -> None:
        self._model = model
        self._provider = provider
        self._endpoint = Endpoint(
            base_url,
            api_key=api_key,
            provider=provider,
            headers=headers,
            client=client,
            timeout=timeout,
        )
        self._policy = RetryPolicy(
            max_retries=max_retries, base_delay=backoff[0], max_delay=backoff[1]
        )
        self._echo: ReasoningEcho = reasoning_echo
        self._max_tokens_field = max_tokens_field
        self._keep_extra_content = (
            "gemini" in model.lower() if keep_extra_content is None else keep_extra_content
        )
        self._cache_control: CacheControlMode = cache_control

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self._model!r}, provider={self._provider!r})"

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def api_mode(self) -> str:
        return "chat_completions"

    def build_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON this model would send for ``request``; public so hosts can inspect it."""
        body = chat_body(
            request,
            model=self._model,
            stream=stream,
            reasoning_echo=self._echo,
            max_tokens_field=self._max_tokens_field,
            keep_extra_content=self._keep_extra_content,
        )
        model = str(body.get("model") or self._model)
        messages = body.get("messages")
        if isinstance(messages, list) and wants_envelope(
            self._cache_control, provider=self._provider, model=model
        ):
            hints = request.cache
            body["messages"] = envelope_cache_control(
                messages,
                stable_chars=hints.stable_system_chars if hints is not None else None,
                ttl=hints.ttl if hints is not None else None,
            )
        return body

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        body = self.build_body(request, stream=stream)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One non-streamed call.

        Raises:
            ModelError: mapped from the HTTP status, transport failure or in-band error
                (``ContextTooLong``, ``ModelAuthError``, ``ModelRateLimited``,
                ``ModelUnavailable``, ``ModelProtocolError``), after retries.
        """
        content = self._encode(request, stream=False)
        data = await self._endpoint.post_json("chat/completions", content, self._policy)
        return parse_chat_completion(data, provider=self._provider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream deltas, then one :class:`ResponseComplete`.

        Retries happen only before the first byte; once deltas flow a failure surfaces.
        Close the iterator (``contextlib.aclosing``) when stopping early.

        Raises:
            IncompleteStream: the stream ended or broke before ``finish_reason`` and
                ``[DONE]``.
            ModelError: as for :meth:`complete`, including errors sent inside the stream.
        """
        content = self._encode(request, stream=True)
        assembler = ChatStreamAssembler(provider=self._provider)
        async with self._endpoint.stream("chat/completions", content, self._policy) as response:
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
                        await _drain(events)  # an in-band error is the server's last word
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
