"""The Anthropic Messages adapter (``api_mode = "anthropic_messages"``).

One class serves the native API and Messages-compatible gateways: the wire format lives
in :mod:`._anthropic_mapping`, the endpoint, retries and the ``complete``/``stream``
plumbing in :mod:`._base` (shared with the OpenAI adapters, so 429/529 handling and error
mapping cannot drift). The request JSON is built and encoded once per call, so retries
send byte-identical bodies and the prompt-cache prefix stays stable across turns.

Example (then used and closed like every :mod:`._base` model)::

    model = AnthropicMessagesModel("claude-sonnet-4-5", api_key=key, cache_ttl="1h")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import httpx

from hermes_adapters.llm._anthropic_mapping import (
    AnthropicStreamAssembler,
    messages_body,
    parse_message,
)
from hermes_adapters.llm._base import StreamAssembler, _HttpChatModel, encode_body
from hermes_adapters.llm._http import Transport, error_parts
from hermes_core.errors import ModelError
from hermes_core.ports.llm import ModelRequest, ModelResponse

__all__ = ["ANTHROPIC_VERSION", "AnthropicMessagesModel", "is_thinking_rejection"]

ANTHROPIC_VERSION = "2023-06-01"


def is_thinking_rejection(error: ModelError) -> bool:
    """Whether a 400 says replayed thinking blocks are not acceptable (WIRE.md §4 item 10):
    a signature damaged or minted for another model, or a latest-turn block altered."""
    if error.status != 400:
        return False
    message = error_parts(error.body or "")[0].lower()
    return ("signature" in message and "thinking" in message) or (
        "thinking" in message and "cannot be modified" in message
    )


class AnthropicMessagesModel(_HttpChatModel):
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
        transport: ``"aiohttp"`` or ``"httpx"``: the wire the model opens when no
            ``client`` is given; default ``$HERMES_HTTP_TRANSPORT``, else aiohttp.
    """

    _api_mode = "anthropic_messages"
    _path = "v1/messages"
    _auth_header = "x-api-key"
    _auth_prefix = ""

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
        transport: Transport | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            provider=provider,
            headers={"anthropic-version": ANTHROPIC_VERSION, **(headers or {})},
            max_retries=max_retries,
            backoff=backoff,
            timeout=timeout,
            transport=transport,
        )
        self._max_tokens_default = max_tokens_default
        self._cache_ttl = cache_ttl
        self._prompt_caching = prompt_caching
        self._thinking_recovery = thinking_recovery

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

    def _encode(
        self, request: ModelRequest, *, stream: bool, replay_thinking: bool = True
    ) -> bytes:
        return encode_body(self.build_body(request, stream=stream, replay_thinking=replay_thinking))

    def _fallback(
        self, request: ModelRequest, content: bytes, error: ModelError, *, stream: bool
    ) -> bytes | None:
        """The body without thinking blocks, when the server rejected the replayed ones,
        recovery is on and the body differs at all."""
        if not self._thinking_recovery or not is_thinking_rejection(error):
            return None
        stripped = self._encode(request, stream=stream, replay_thinking=False)
        return None if stripped == content else stripped

    def _parse(self, data: Any) -> ModelResponse:
        return parse_message(data, provider=self._provider)

    def _assembler(self) -> StreamAssembler:
        """Ends on ``message_stop``; ``event: error`` raises mapped."""
        return AnthropicStreamAssembler(provider=self._provider)
