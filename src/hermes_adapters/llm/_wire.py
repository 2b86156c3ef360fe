"""The wire under :class:`~hermes_adapters.llm._http.Endpoint`: POST bytes, get a response.

Why this module exists: the adapters are written against one small surface (status,
headers, the body or its lines, close) so the HTTP library underneath is a swappable
detail, chosen by what it costs per request rather than by what the adapters call:

* :class:`HttpxWire` sends through an ``httpx.AsyncClient``. A client the caller injected
  (a ``MockTransport`` in tests, a proxy setup, event hooks) is used through
  ``client.send`` so everything configured on it applies. A client the wire built itself
  has nothing configured that ``send`` would add (no auth, cookies, hooks or redirects),
  so the wire hands requests straight to its transport and skips that machinery.
* :class:`AiohttpWire` speaks aiohttp's own ``ClientSession`` API, the default. Measured
  in ``bench/`` on loopback: httpx's API layered over aiohttp (httpx-aiohttp) costs about
  0.2 ms of CPU per request on this 2-core machine converting requests, headers and body
  streams between the two libraries, as much as the whole harness does per model round.
  aiohttp's failures are mapped onto the httpx exception classes at this boundary, so
  retries and error mapping in ``_http`` stay one policy whatever the wire.

Both wires split event streams into lines the way the SSE specification says (``\\r\\n``,
``\\r`` or ``\\n``) and nowhere else: ``str.splitlines`` (which httpx's ``aiter_lines``
follows) also breaks on U+2028 and other separators that JSON strings may carry raw, and
that would cut a ``data:`` line in two.
"""

from __future__ import annotations

import asyncio
import codecs
import ssl
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp
import httpx

__all__ = [
    "AiohttpWire",
    "HttpxWire",
    "Wire",
    "WireResponse",
    "aiohttp_timeout",
    "env_proxy",
    "sse_lines",
]


class WireResponse(Protocol):
    """What the adapters read from a response; ``httpx.Response`` already is one."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class Wire(ABC):
    """Sends one POST. Transport failures raise ``httpx.TransportError`` subclasses."""

    @abstractmethod
    async def post(
        self, url: httpx.URL, headers: Mapping[str, str], content: bytes, *, stream: bool
    ) -> WireResponse:
        """The response; its body already read unless ``stream`` (then the caller closes it)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections the wire owns; a borrowed client is left to its owner."""


async def sse_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """Lines of an event stream: decoded as UTF-8 (what the SSE specification prescribes,
    whatever charset the response claims), split only at CRLF, CR or LF.

    Linear in the stream: each chunk is scanned once, and a line spread over many chunks
    is joined once, when it ends. A CR ending one chunk may be the first half of a CRLF,
    so an LF opening the next chunk is dropped.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    partial: list[str] = []  # the pieces of a line not ended yet
    after_cr = False
    async for raw in chunks:
        chunk = decoder.decode(raw)
        if not chunk:
            continue
        if after_cr and chunk[0] == "\n":
            chunk = chunk[1:]
            after_cr = False
            if not chunk:
                continue
        after_cr = chunk[-1] == "\r"
        lines = chunk.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        partial.append(lines[0])
        if len(lines) == 1:
            continue
        yield "".join(partial)
        for line in lines[1:-1]:
            yield line
        partial = [lines[-1]]
    partial.append(decoder.decode(b"", final=True))
    last = "".join(partial)
    if last:
        yield last


# -- httpx ------------------------------------------------------------------------------


class HttpxWire(Wire):
    """An ``httpx.AsyncClient``: borrowed (sent through ``client.send``) or owned (sent
    straight to the transport, see the module docstring)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        owned_transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> None:
        self._client = client
        self._transport = owned_transport
        self._extensions = {"timeout": (timeout or httpx.Timeout(None)).as_dict()}

    @classmethod
    def owned(
        cls,
        timeout: httpx.Timeout,
        ssl_context: ssl.SSLContext,
        *,
        proxy: str | None = None,
        max_connections: int = 100,
    ) -> HttpxWire:
        """A wire over a client of its own on httpx's connection pool. httpx keeps at most
        20 idle connections; keeping more (measured at 50 in flight) halves its throughput,
        since its pool does work quadratic in open connections."""
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=20)
        transport = httpx.AsyncHTTPTransport(verify=ssl_context, limits=limits, proxy=proxy)
        client = httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False)
        return cls(client, owned_transport=transport, timeout=timeout)

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client

    async def post(
        self, url: httpx.URL, headers: Mapping[str, str], content: bytes, *, stream: bool
    ) -> WireResponse:
        if self._transport is None:
            request = self._client.build_request("POST", url, content=content, headers=headers)
            return await self._client.send(request, stream=stream, follow_redirects=False)
        request = httpx.Request(
            "POST", url, headers=headers, content=content, extensions=self._extensions
        )
        response = await self._transport.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._client.aclose()


# -- aiohttp ----------------------------------------------------------------------------


def aiohttp_timeout(timeout: httpx.Timeout) -> aiohttp.ClientTimeout:
    """httpx's timeouts in aiohttp's terms: ``read`` bounds each wait for bytes, ``connect``
    the TCP/TLS set-up, and ``pool`` everything before it, the wait for a free connection
    and the DNS lookup included (aiohttp has no separate bound for either). No total: a
    long stream is fine as long as it keeps moving. aiohttp has no write timeout."""
    return aiohttp.ClientTimeout(
        total=None, connect=timeout.pool, sock_connect=timeout.connect, sock_read=timeout.read
    )


def _httpx_error(exc: Exception) -> httpx.TransportError:
    """The httpx exception that means what an aiohttp (or timeout) failure means."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(text)
    if isinstance(exc, TimeoutError):  # SocketTimeoutError and ServerTimeoutError included
        return httpx.ReadTimeout(text)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(text)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(text)
    if isinstance(exc, aiohttp.ClientResponseError):  # a malformed status line or header
        return httpx.RemoteProtocolError(text)
    if isinstance(exc, aiohttp.ClientConnectionError | OSError):
        return httpx.ReadError(text)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(text)
    if isinstance(exc, ValueError):  # e.g. a header value with a line break in it
        return httpx.LocalProtocolError(text)
    return httpx.TransportError(text)


_FAILURES = (aiohttp.ClientError, TimeoutError, OSError)


class _AiohttpResponse:
    """An aiohttp response with the surface the adapters read (see :class:`WireResponse`)."""

    __slots__ = ("_body", "_response", "headers", "status_code")

    def __init__(self, response: aiohttp.ClientResponse, body: bytes | None) -> None:
        self._response = response
        self._body = body
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers

    async def aread(self) -> bytes:
        if self._body is None:
            try:
                self._body = await self._response.read()
            except _FAILURES as exc:
                raise _httpx_error(exc) from exc
            finally:
                self._response.release()
        return self._body

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except _FAILURES as exc:
            raise _httpx_error(exc) from exc

    async def aclose(self) -> None:
        # Read to the end: the connection goes back to the pool. Not read to the end (a
        # stream abandoned midway): the connection is closed, since unread bytes would
        # be taken for the next response.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


def env_proxy(url: str) -> str | None:
    """The proxy the environment sets for ``url`` (``HTTPS_PROXY``/``HTTP_PROXY``/
    ``ALL_PROXY``, unless ``NO_PROXY`` covers the host), as httpx would pick it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if urllib.request.proxy_bypass_environment(host):
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parts.scheme) or proxies.get("all") or None


class AiohttpWire(Wire):
    """An aiohttp ``ClientSession`` of its own, opened on the first request (aiohttp needs a
    running event loop).

    The proxy is decided once, from the environment, by the caller (:func:`env_proxy`):
    the session's own ``trust_env`` would instead look up proxies and ``~/.netrc`` on a
    worker thread for every request, two thread hand-offs that cost more than the rest of
    the request's client-side work."""

    def __init__(
        self,
        timeout: httpx.Timeout,
        ssl_context: ssl.SSLContext,
        *,
        proxy: str | None = None,
        max_connections: int = 100,
    ) -> None:
        self._timeout = aiohttp_timeout(timeout)
        self._ssl = ssl_context
        self._proxy = proxy
        self._limit = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None:
            session = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._limit),
                timeout=self._timeout,
            )
        return session

    async def post(
        self, url: httpx.URL, headers: Mapping[str, str], content: bytes, *, stream: bool
    ) -> WireResponse:
        try:
            response = await self._open().post(
                str(url), data=content, headers=headers, allow_redirects=False, proxy=self._proxy
            )
        except (*_FAILURES, ValueError) as exc:
            raise _httpx_error(exc) from exc
        if stream:
            return _AiohttpResponse(response, None)
        try:
            body = await response.read()
        except BaseException as exc:
            response.close()
            if isinstance(exc, _FAILURES):
                raise _httpx_error(exc) from exc
            raise
        response.release()
        return _AiohttpResponse(response, body)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def current_loop_is_asyncio() -> bool:
    """aiohttp runs on asyncio only; under another event loop (trio) httpx serves."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
