"""The plumbing the HTTP chat adapters share (:mod:`.openai_chat`, :mod:`.openai_responses`,
:mod:`.anthropic_messages`).

:class:`_HttpChatModel` holds the identity properties, the :class:`~._http.Endpoint` and
:class:`~._http.RetryPolicy` wiring and the ``complete``/``stream`` skeletons; a wire
format supplies the hooks: :meth:`~_HttpChatModel.build_body` (the request JSON),
:meth:`~_HttpChatModel._parse` (a non-streamed reply), :meth:`~_HttpChatModel._assembler`
(a streamed one) and, optionally, :meth:`~_HttpChatModel._fallback` (a second body to try
when the server rejects the first). The request JSON is built and encoded once per call,
so retries send byte-identical bodies.

Every adapter is used the same way, and closed when done::

    try:
        response = await model.complete(ModelRequest(messages=(UserMessage(content="hi"),)))
    finally:
        await model.aclose()
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Protocol, cast

import anyio
import httpx

from hermes_adapters.llm._http import (
    Endpoint,
    RetryPolicy,
    SSEEvent,
    Transport,
    error_from_transport,
    iter_sse,
)
from hermes_adapters.llm._wire import sse_lines
from hermes_core.errors import ModelError
from hermes_core.ports.llm import ModelRequest, ModelResponse, ResponseComplete, StreamEvent

__all__ = ["DRAIN_SECONDS", "StreamAssembler", "encode_body"]

DRAIN_SECONDS = 2.0


class StreamAssembler(Protocol):
    """Turns a format's SSE events into deltas and, at the end, one response."""

    done: bool
    """True once the format's terminal event arrived."""

    def feed(self, event: SSEEvent) -> Iterable[StreamEvent]:
        """Deltas carried by one event; raises the mapped error of an in-band error."""
        ...

    def finish(self) -> ModelResponse:
        """The assembled response; raises ``IncompleteStream`` before the terminal event."""
        ...


def encode_body(body: Mapping[str, Any]) -> bytes:
    """The compact UTF-8 JSON sent on the wire."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def _drain(events: AsyncIterator[object], seconds: float = DRAIN_SECONDS) -> None:
    """Read to the end of the body (it is due right away after the terminal event or an
    in-band error) so httpx's nested byte iterators finish here instead of being finalised
    later by the garbage collector in stray tasks; bounded by ``seconds``, so a server that
    keeps the connection open cannot hold the caller."""
    with anyio.move_on_after(seconds):
        try:
            async for _ in events:
                pass
        except httpx.HTTPError:
            pass


class _HttpChatModel(ABC):
    """A :class:`hermes_core.ports.llm.ChatModel` over ``POST {base_url}/{_path}``.

    Subclasses set :attr:`_api_mode` and :attr:`_path` (and :attr:`_auth_header`/
    :attr:`_auth_prefix` when the key does not travel as ``Authorization: Bearer``),
    keep their own public constructor and implement the hooks.
    """

    _api_mode: ClassVar[str]
    _path: ClassVar[str]
    _auth_header: ClassVar[str] = "authorization"
    _auth_prefix: ClassVar[str] = "Bearer "

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        client: httpx.AsyncClient | None,
        provider: str,
        headers: Mapping[str, str] | None,
        max_retries: int,
        backoff: tuple[float, float],
        timeout: httpx.Timeout | float | None,
        transport: Transport | None = None,
    ) -> None:
        self._model = model
        self._provider = provider
        self._endpoint = Endpoint(
            base_url,
            api_key=api_key,
            provider=provider,
            headers=headers,
            client=client,
            auth_header=self._auth_header,
            auth_prefix=self._auth_prefix,
            timeout=timeout,
            transport=transport,
        )
        self._policy = RetryPolicy(
            max_retries=max_retries, base_delay=backoff[0], max_delay=backoff[1]
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._model!r}, provider={self._provider!r})"

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def api_mode(self) -> str:
        return self._api_mode

    @property
    def transport(self) -> str:
        """What carries the requests: ``"aiohttp"`` or ``"httpx"`` (the wire the model
        opened or will open), or ``"client"`` for an injected ``httpx.AsyncClient``."""
        return self._endpoint.transport

    # -- per-format hooks --------------------------------------------------------------

    @abstractmethod
    def build_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON this model would send for ``request``; public so hosts can inspect it."""

    @abstractmethod
    def _parse(self, data: Any) -> ModelResponse:
        """The response of a non-streamed reply's parsed JSON (raising its mapped error)."""

    @abstractmethod
    def _assembler(self) -> StreamAssembler:
        """A fresh assembler for one streamed reply."""

    def _fallback(
        self, request: ModelRequest, content: bytes, error: ModelError, *, stream: bool
    ) -> bytes | None:
        """Another body to send once when ``content`` was rejected with ``error`` before
        any output; ``None`` (the default) lets the error surface."""
        return None

    def _drain_seconds(self) -> float:
        """How long to keep reading after the terminal event or an in-band error."""
        return DRAIN_SECONDS

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        return encode_body(self.build_body(request, stream=stream))

    # -- the calls ---------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One non-streamed call.

        Raises:
            ModelError: mapped from the HTTP status, transport failure or in-band error
                (``ContextTooLong``, ``ModelAuthError``, ``ModelRateLimited``,
                ``ModelUnavailable``, ``ModelProtocolError``), after retries.
        """
        content = self._encode(request, stream=False)
        try:
            data = await self._endpoint.post_json(self._path, content, self._policy)
        except ModelError as exc:
            fallback = self._fallback(request, content, exc, stream=False)
            if fallback is None:
                raise
            data = await self._endpoint.post_json(self._path, fallback, self._policy)
        return self._parse(data)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream deltas, then one :class:`ResponseComplete`.

        Retries happen only before the first byte; once deltas flow a failure surfaces.
        Close the iterator (``contextlib.aclosing``) when stopping early.

        Raises:
            IncompleteStream: the stream ended or broke before the format's terminal event.
            ModelError: as for :meth:`complete`, including errors sent inside the stream.
        """
        content = self._encode(request, stream=True)
        started = False
        try:
            async with aclosing(self._stream_body(content)) as events:
                async for event in events:
                    started = True
                    yield event
        except ModelError as exc:
            # a rejection arrives as an HTTP error before any event, so nothing was yielded
            fallback = None if started else self._fallback(request, content, exc, stream=True)
            if fallback is None:
                raise
            async with aclosing(self._stream_body(fallback)) as events:
                async for event in events:
                    yield event

    async def _stream_body(self, content: bytes) -> AsyncGenerator[StreamEvent, None]:
        assembler = self._assembler()
        async with self._endpoint.stream(self._path, content, self._policy) as response:
            try:
                async with (
                    aclosing(cast(AsyncGenerator[bytes, None], response.aiter_bytes())) as raw,
                    aclosing(cast(AsyncGenerator[str, None], sse_lines(raw))) as lines,
                    aclosing(iter_sse(lines)) as events,
                ):
                    try:
                        async for event in events:
                            for delta in assembler.feed(event):
                                yield delta
                            if assembler.done:
                                break
                    except ModelError:
                        # an in-band error is the server's last word
                        await _drain(events, self._drain_seconds())
                        raise
                    await _drain(events, self._drain_seconds())
            except httpx.HTTPError as exc:
                raise error_from_transport(
                    exc, provider=self._provider, during_stream=True
                ) from exc
        yield ResponseComplete(assembler.finish())

    async def aclose(self) -> None:
        """Release the owned HTTP client; idempotent, and a borrowed client stays open."""
        await self._endpoint.aclose()
