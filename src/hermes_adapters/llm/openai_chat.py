"""The OpenAI Chat Completions adapter (``api_mode = "chat_completions"``).

One class serves OpenAI and every OpenAI-compatible host (DeepSeek, OpenRouter, vLLM,
Ollama, LM Studio...): the wire format lives in :mod:`._openai_mapping`, the endpoint,
retries and the ``complete``/``stream`` plumbing in :mod:`._base`, and the few per-host
differences are constructor options rather than subclasses. The request JSON is built and
encoded once per call, so retries send byte-identical bodies.

Example (then used and closed like every :mod:`._base` model)::

    model = OpenAIChatModel("deepseek-chat", base_url="https://api.deepseek.com/v1",
                            api_key=key, provider="deepseek",
                            reasoning_echo="reasoning_content")
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any

import httpx

from hermes_adapters.llm._base import DRAIN_SECONDS, StreamAssembler, _HttpChatModel, encode_body
from hermes_adapters.llm._cache_envelope import (
    CacheControlMode,
    envelope_cache_control,
    wants_envelope,
)
from hermes_adapters.llm._http import Transport
from hermes_adapters.llm._openai_mapping import (
    ChatStreamAssembler,
    ReasoningEcho,
    chat_body,
    chat_messages,
    parse_chat_completion,
)
from hermes_core.messages import Message
from hermes_core.ports.llm import ModelRequest, ModelResponse
from hermes_core.ports.tools import ToolSpec

__all__ = ["CacheControlMode", "OpenAIChatModel", "ReasoningEcho"]

# read on every stream, so it can be shortened where a bounded drain is tested
_DRAIN_SECONDS = DRAIN_SECONDS
_MESSAGES = "\x00hermes-messages\x00"
_TOOLS = "\x00hermes-tools\x00"
_MESSAGES_JSON = json.dumps(_MESSAGES).encode()
_TOOLS_JSON = json.dumps(_TOOLS).encode()


class OpenAIChatModel(_HttpChatModel):
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
        transport: ``"aiohttp"`` or ``"httpx"``: the wire the model opens when no
            ``client`` is given; default ``$HERMES_HTTP_TRANSPORT``, else aiohttp.
        cache_control: Anthropic prompt-cache breakpoints in the envelope layout
            (REFERENCE.md §7, :mod:`._cache_envelope`): ``"auto"`` places them for Claude
            models on OpenRouter, ``"envelope"`` always, ``"off"`` never.
    """

    _api_mode = "chat_completions"
    _path = "chat/completions"

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
        transport: Transport | None = None,
        cache_control: CacheControlMode = "auto",
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            provider=provider,
            headers=headers,
            max_retries=max_retries,
            backoff=backoff,
            timeout=timeout,
            transport=transport,
        )
        self._echo: ReasoningEcho = reasoning_echo
        self._max_tokens_field = max_tokens_field
        self._keep_extra_content = (
            "gemini" in model.lower() if keep_extra_content is None else keep_extra_content
        )
        self._cache_control: CacheControlMode = cache_control
        self._fragments: dict[int, tuple[weakref.ref[Message], bytes]] = {}
        self._tools_cache: tuple[tuple[ToolSpec, ...], bytes] | None = None

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
        """The request bytes, re-encoding only what earlier calls have not seen.

        Messages are frozen and the agent hands the same objects back every round, so each
        message's JSON is cached by identity (the cache holds the message, so its id cannot
        be reused while cached) and the tool schemas by the identity of the specs tuple;
        the rest of the body is encoded per call around placeholders. The bytes equal
        ``encode_body(self.build_body(request))``; the cache-envelope layout (its markers
        move every round) and an ``extra_body`` replacing messages or tools take that path.
        """
        body = chat_body(
            request,
            model=self._model,
            stream=stream,
            reasoning_echo=self._echo,
            max_tokens_field=self._max_tokens_field,
            keep_extra_content=self._keep_extra_content,
            messages=_MESSAGES,
            tools=_TOOLS if request.tools else None,
        )
        model = str(body.get("model") or self._model)
        if (
            body.get("messages") is not _MESSAGES
            or (request.tools and body.get("tools") is not _TOOLS)
            or wants_envelope(self._cache_control, provider=self._provider, model=model)
        ):
            return encode_body(self.build_body(request, stream=stream))
        head = encode_body(body)
        if request.tools:  # before the messages go in, so no message text can match
            head = head.replace(_TOOLS_JSON, self._tools_json(request.tools), 1)
        before, _, after = head.partition(_MESSAGES_JSON)
        parts = b",".join([self._fragment(m) for m in request.messages])
        return b"".join((before, b"[", parts, b"]", after))

    def _fragment(self, message: Message) -> bytes:
        """One message's wire JSON, cached for as long as the message object lives."""
        key = id(message)
        hit = self._fragments.get(key)
        if hit is not None and hit[0]() is message:
            return hit[1]
        (wire,) = chat_messages(
            (message,), reasoning_echo=self._echo, keep_extra_content=self._keep_extra_content
        )
        encoded = encode_body(wire)
        cache = self._fragments

        def forget(ref: weakref.ref[Message], key: int = key) -> None:
            entry = cache.get(key)
            if entry is not None and entry[0] is ref:
                del cache[key]

        cache[key] = (weakref.ref(message, forget), encoded)
        return encoded

    def _tools_json(self, tools: tuple[ToolSpec, ...]) -> bytes:
        cached = self._tools_cache
        if cached is not None and cached[0] is tools:
            return cached[1]
        encoded = json.dumps(
            [s.function_schema() for s in tools], ensure_ascii=False, separators=(",", ":")
        ).encode()
        self._tools_cache = (tools, encoded)
        return encoded

    def _parse(self, data: Any) -> ModelResponse:
        return parse_chat_completion(data, provider=self._provider)

    def _assembler(self) -> StreamAssembler:
        """Ends on ``finish_reason`` and ``[DONE]``; in-band errors raise mapped."""
        return ChatStreamAssembler(provider=self._provider)

    def _drain_seconds(self) -> float:
        return _DRAIN_SECONDS
