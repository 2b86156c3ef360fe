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

from collections.abc import Mapping
from typing import Any

import httpx

from hermes_adapters.llm._base import DRAIN_SECONDS, StreamAssembler, _HttpChatModel
from hermes_adapters.llm._cache_envelope import (
    CacheControlMode,
    envelope_cache_control,
    wants_envelope,
)
from hermes_adapters.llm._openai_mapping import (
    ChatStreamAssembler,
    ReasoningEcho,
    chat_body,
    parse_chat_completion,
)
from hermes_core.ports.llm import ModelRequest, ModelResponse

__all__ = ["CacheControlMode", "OpenAIChatModel", "ReasoningEcho"]

# read on every stream, so it can be shortened where a bounded drain is tested
_DRAIN_SECONDS = DRAIN_SECONDS


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
        )
        self._echo: ReasoningEcho = reasoning_echo
        self._max_tokens_field = max_tokens_field
        self._keep_extra_content = (
            "gemini" in model.lower() if keep_extra_content is None else keep_extra_content
        )
        self._cache_control: CacheControlMode = cache_control

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

    def _parse(self, data: Any) -> ModelResponse:
        return parse_chat_completion(data, provider=self._provider)

    def _assembler(self) -> StreamAssembler:
        """Ends on ``finish_reason`` and ``[DONE]``; in-band errors raise mapped."""
        return ChatStreamAssembler(provider=self._provider)

    def _drain_seconds(self) -> float:
        return _DRAIN_SECONDS
