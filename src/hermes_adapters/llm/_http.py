"""HTTP plumbing shared by the model adapters: endpoint, retries, error mapping, SSE.

Every wire-format adapter (Chat Completions, Anthropic Messages, Responses) talks HTTP the
same way, so the parts that are easy to get subtly wrong live here once:

* :class:`Endpoint` owns the base URL, the credential and ONE wire (``_wire``: aiohttp or
  httpx, opened lazily, or an injected ``httpx.AsyncClient`` that stays borrowed). It
  refuses to attach the key to any host but the configured one and never follows
  redirects, so a key cannot leak.
* :class:`RetryPolicy` is the policy of the official Stainless SDKs (WIRE.md §2.4), with
  two deliberate differences: 400/401/403/404/422 and context overflow are never retried
  even if ``x-should-retry: true`` says so (retrying cannot change the answer), and a 429
  whose code is ``insufficient_quota`` is not retried (waiting does not refill a balance).
* :func:`error_from_status`, :func:`error_from_payload` and :func:`error_from_transport`
  map every failure to :mod:`hermes_core.errors`; callers raise ``from`` the httpx error so
  the cause stays visible while hosts only ever catch Hermes errors.
* :func:`iter_sse` parses ``text/event-stream`` lines; it marks an event cut off by the
  end of the stream so adapters can tell a truncated stream from a complete one.
"""

from __future__ import annotations

import functools
import json
import os
import random
import ssl
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from importlib.metadata import version as _version
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx

from hermes_adapters.llm._wire import (
    AiohttpWire,
    HttpxWire,
    Wire,
    WireResponse,
    current_loop_is_asyncio,
    env_proxy,
)
from hermes_core.errors import (
    ConfigError,
    ContextTooLong,
    IncompleteStream,
    ModelAuthError,
    ModelError,
    ModelProtocolError,
    ModelRateLimited,
    ModelUnavailable,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "Endpoint",
    "RetryPolicy",
    "SSEEvent",
    "error_from_payload",
    "error_from_status",
    "error_from_transport",
    "error_parts",
    "is_context_overflow",
    "iter_sse",
    "parse_retry_after",
    "should_retry",
]

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""Generous read timeout: a reasoning model can think for minutes before its first byte."""

USER_AGENT = f"hermes-harness/{_version('hermes-harness')}"
"""The same on every wire (httpx and aiohttp would each send their own)."""
_BODY_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})

NEVER_RETRY = frozenset({400, 401, 403, 404, 422})
RETRY_STATUSES = frozenset({408, 409, 429})
_BODY_LIMIT = 4000

OVERFLOW_PATTERNS: tuple[str, ...] = (
    "maximum context length",
    "context_length_exceeded",
    "prompt is too long",
    "input length and `max_tokens` exceed context limit",
    "model_context_window_exceeded",
    "too many tokens",
    "context window",
    "context length",
)
"""Phrasings of a context overflow across OpenAI, Anthropic and OpenAI-compatible hosts."""


# -- retry policy -----------------------------------------------------------------------


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, else ``retry-after``.

    ``retry-after`` may be seconds (a float is accepted) or an HTTP date. Returns ``None``
    when neither header is present or parseable, or the wait is not positive.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = 0.0
        if ms > 0:
            return ms / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return seconds if seconds > 0 else None


def should_retry(status: int, headers: Mapping[str, str], body: str = "") -> bool:
    """Whether an HTTP error status is worth another attempt (see the module docstring)."""
    if status in NEVER_RETRY or status < 400:
        return False
    message, code, _ = error_parts(body)
    if code == "insufficient_quota" or is_context_overflow(status, message, code):
        return False
    verdict = {k.lower(): v for k, v in headers.items()}.get("x-should-retry", "").lower()
    if verdict in {"true", "false"}:
        return verdict == "true"
    return status in RETRY_STATUSES or status >= 500


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait between attempts.

    ``jitter`` returns a number in [0, 1); injecting it makes backoff deterministic in tests.
    A server-given wait longer than ``max_retry_after`` is ignored in favour of backoff, as
    the SDKs do, so a bogus header cannot stall an agent for an hour.
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    jitter: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.base_delay < 0 or self.max_delay < 0:
            raise ConfigError("retry settings must not be negative")

    def backoff(self, retry: int) -> float:
        """Exponential backoff for the ``retry``-th retry (0-based) with negative jitter."""
        delay = min(self.base_delay * (2.0**retry), self.max_delay)
        return delay * (1.0 - 0.25 * self.jitter())

    def delay(self, retry: int, headers: Mapping[str, str] | None = None) -> float:
        """The wait before the ``retry``-th retry: the server's word if sane, else backoff."""
        if headers:
            wait = parse_retry_after(headers)
            if wait is not None and wait <= self.max_retry_after:
                return wait
        return self.backoff(retry)


# -- error mapping ----------------------------------------------------------------------


def error_parts(body: str | Mapping[str, Any] | None) -> tuple[str, str | None, str | None]:
    """``(message, code, type)`` from an error body of either vendor, or the raw text.

    Understands ``{"error": {"message", "code", "type"}}`` (OpenAI, Anthropic) and
    ``{"error": "text"}`` / ``{"message": ...}`` (assorted compatible hosts).
    """
    data: Any = body
    if isinstance(body, str):
        try:
            data = json.loads(body) if body.strip() else None
        except ValueError:
            return body.strip()[:_BODY_LIMIT], None, None
    if not isinstance(data, Mapping):
        return ("" if data is None else str(data)), None, None
    error = data.get("error", data)
    if isinstance(error, str):
        return error, None, None
    if not isinstance(error, Mapping):
        return str(error), None, None
    message = error.get("message") or data.get("message") or ""
    code = error.get("code")
    kind = error.get("type")
    return (
        str(message),
        None if code is None else str(code),
        None if kind is None else str(kind),
    )


def is_context_overflow(status: int | None, message: str, code: str | None = None) -> bool:
    """Whether an error says the prompt does not fit the model's context window."""
    if code in {"context_length_exceeded", "model_context_window_exceeded"}:
        return True
    if status not in {None, 400, 413, 422}:
        return False
    lowered = message.lower()
    return any(pattern in lowered for pattern in OVERFLOW_PATTERNS)


def _status_error(
    status: int, message: str, *, provider: str, body: str, retry_after: float | None
) -> ModelError:
    detail = f"{provider} returned HTTP {status}: {message or '(no message)'}"
    kw: dict[str, Any] = {"status": status, "provider": provider, "body": body[:_BODY_LIMIT]}
    if status in {401, 403}:
        return ModelAuthError(f"{detail}; check the API key for {provider}", **kw)
    if status == 429:
        return ModelRateLimited(detail, retry_after=retry_after, **kw)
    if status in {408, 409} or status >= 500:
        return ModelUnavailable(detail, **kw)
    return ModelError(detail, **kw)


def error_from_status(
    status: int, headers: Mapping[str, str], body: str, *, provider: str
) -> ModelError:
    """The Hermes error for a non-2xx response."""
    message, code, _ = error_parts(body)
    if is_context_overflow(status, message, code):
        return ContextTooLong(
            f"{provider}: the request does not fit the model's context window ({message}); "
            "compress or shorten the conversation",
            status=status,
            provider=provider,
            body=body[:_BODY_LIMIT],
        )
    return _status_error(
        status, message, provider=provider, body=body, retry_after=parse_retry_after(headers)
    )


_AUTH_CODES = {"invalid_api_key", "authentication_error", "permission_error", "unauthorized"}
_RATE_CODES = {"rate_limit_exceeded", "rate_limit_error", "insufficient_quota"}
_UNAVAILABLE_CODES = {"server_error", "overloaded", "overloaded_error", "api_error", "timeout"}


def error_from_payload(error: Any, *, provider: str, status: int | None = None) -> ModelError:
    """The Hermes error for an error object delivered in-band (a 200 body or an SSE event)."""
    wrapped = error if isinstance(error, Mapping) and "error" in error else {"error": error}
    message, code, kind = error_parts(wrapped)
    body = json.dumps(wrapped, ensure_ascii=False, default=str)[:_BODY_LIMIT]
    if is_context_overflow(status, message, code):
        return ContextTooLong(
            f"{provider}: the request does not fit the model's context window ({message})",
            status=status,
            provider=provider,
            body=body,
        )
    tags = {code, kind}
    detail = f"{provider} reported an error: {message or kind or code or '(no message)'}"
    if tags & _AUTH_CODES:
        return ModelAuthError(detail, status=status, provider=provider, body=body)
    if tags & _RATE_CODES:
        return ModelRateLimited(detail, status=status, provider=provider, body=body)
    if tags & _UNAVAILABLE_CODES or (status is not None and status >= 500):
        return ModelUnavailable(detail, status=status, provider=provider, body=body)
    return ModelError(detail, status=status, provider=provider, body=body)


_RETRYABLE_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def error_from_transport(
    exc: httpx.HTTPError, *, provider: str, during_stream: bool = False
) -> ModelError:
    """The Hermes error for a transport failure.

    While a stream is being read, a cut connection means the reply ended before its
    terminal event, so it is an :class:`IncompleteStream`; before any byte arrived the
    same failure is transient, a :class:`ModelUnavailable`.
    """
    name = type(exc).__name__
    if during_stream and isinstance(exc, _RETRYABLE_TRANSPORT):
        return IncompleteStream(
            f"{provider}: the stream broke off before it finished ({name}: {exc})",
            provider=provider,
        )
    if isinstance(exc, httpx.TimeoutException):
        return ModelUnavailable(f"{provider}: the request timed out ({name})", provider=provider)
    if isinstance(exc, _RETRYABLE_TRANSPORT):
        return ModelUnavailable(
            f"{provider}: could not reach the server ({name}: {exc})", provider=provider
        )
    if isinstance(exc, httpx.DecodingError):
        return ModelProtocolError(
            f"{provider}: the response could not be decoded ({exc})", provider=provider
        )
    return ModelError(f"{provider}: the HTTP request failed ({name}: {exc})", provider=provider)


# -- endpoint ---------------------------------------------------------------------------


class Endpoint:
    """Base URL, credential and the one wire (HTTP client) of a provider.

    ``auth_header``/``auth_prefix`` say how the key travels (``Authorization: Bearer`` for
    OpenAI-style hosts, ``x-api-key`` with no prefix for Anthropic). An injected ``client``
    is borrowed: requests go through its ``send`` (so its hooks, proxies and transport
    apply) and :meth:`aclose` leaves it open for its owner. Without one, the endpoint
    opens its own wire on first use: ``transport`` (else ``$HERMES_HTTP_TRANSPORT``)
    picks aiohttp, the default, or httpx's pool (see ``_wire``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        provider: str = "provider",
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        auth_header: str = "authorization",
        auth_prefix: str = "Bearer ",
        timeout: httpx.Timeout | float | None = None,
        transport: Transport | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ConfigError(f"base_url {base_url!r} must be an absolute http(s) URL")
        self.base_url = base_url.rstrip("/")
        self.provider = provider
        self._host = (parts.hostname.lower(), parts.port)
        self._api_key = api_key
        self._headers = dict(headers or {})
        self._auth_header = auth_header
        self._auth_prefix = auth_prefix
        self._timeout = httpx.Timeout(DEFAULT_TIMEOUT if timeout is None else timeout)
        self._transport: Transport = transport or default_transport()
        self._wire_: Wire | None = None if client is None else HttpxWire(client)
        self._owns_wire = client is None
        self._closed = False
        self._prepared: dict[tuple[str, bool], tuple[httpx.URL, dict[str, str]]] = {}

    def __repr__(self) -> str:  # never show the key
        return f"Endpoint({self.base_url!r}, provider={self.provider!r})"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def transport(self) -> str:
        """What carries the requests: ``"client"`` (an injected httpx client), else the
        wire this endpoint opens or opened: ``"aiohttp"`` or ``"httpx"``."""
        if not self._owns_wire:
            return "client"
        if isinstance(self._wire_, AiohttpWire):
            return "aiohttp"
        if isinstance(self._wire_, HttpxWire):
            return "httpx"
        return self._transport

    def url(self, path: str) -> str:
        """``path`` joined to the base URL; absolute URLs must stay on the configured host.

        Raises:
            ConfigError: ``path`` points at another host, which must never see the key.
        """
        if "://" not in path:
            return f"{self.base_url}/{path.lstrip('/')}"
        parts = urlsplit(path)
        if ((parts.hostname or "").lower(), parts.port) != self._host:
            raise ConfigError(
                f"refusing to send the {self.provider} credential to {parts.hostname!r}; "
                f"only {self._host[0]!r} (from base_url) may receive it"
            )
        return path

    def _wire(self) -> Wire:
        if self._closed:
            raise ModelError(f"the {self.provider} model was used after aclose()")
        wire = self._wire_
        if wire is None:
            limit = max_connections()
            if self._transport == "aiohttp" and current_loop_is_asyncio():
                wire = AiohttpWire(
                    self._timeout,
                    _ssl_context(),
                    proxy=env_proxy(self.base_url),
                    max_connections=limit,
                )
            else:
                wire = HttpxWire.owned(
                    self._timeout,
                    _ssl_context(),
                    proxy=env_proxy(self.base_url),
                    max_connections=limit,
                )
            self._wire_ = wire
        return wire

    def _prepare(self, path: str, stream: bool) -> tuple[httpx.URL, dict[str, str]]:
        # Parsing the URL and assembling the headers depend only on (path, stream): done
        # once per pair instead of per request.
        prepared = self._prepared.get((path, stream))
        if prepared is None:
            headers = {
                "content-type": "application/json",
                "accept": "text/event-stream" if stream else "application/json",
                "accept-encoding": "gzip, deflate",
                "user-agent": USER_AGENT,
                **self._headers,
            }
            if self._api_key:
                headers[self._auth_header] = f"{self._auth_prefix}{self._api_key}"
            prepared = (httpx.URL(self.url(path)), headers)
            self._prepared[(path, stream)] = prepared
        return prepared

    async def _send(
        self, path: str, content: bytes, stream: bool, policy: RetryPolicy
    ) -> WireResponse:
        """POST with retries; returns a 2xx response (open and unread when ``stream``)."""
        url, headers = self._prepare(path, stream)
        retry = 0
        while True:
            try:
                response = await self._wire().post(url, headers, content, stream=stream)
            except httpx.HTTPError as exc:
                if retry < policy.max_retries and isinstance(exc, _RETRYABLE_TRANSPORT):
                    await anyio.sleep(policy.backoff(retry))
                    retry += 1
                    continue
                raise error_from_transport(exc, provider=self.provider) from exc
            status = response.status_code
            if 200 <= status < 300:
                return response
            body = await _read_and_close(response)
            response_headers = dict(response.headers)
            if retry < policy.max_retries and should_retry(status, response_headers, body):
                await anyio.sleep(policy.delay(retry, response_headers))
                retry += 1
                continue
            # The body is already decoded: the cause's response must not claim an
            # encoding, or httpx would try to decompress it again.
            plain = {k: v for k, v in response_headers.items() if k.lower() not in _BODY_FRAMING}
            cause = httpx.HTTPStatusError(
                f"HTTP {status}",
                request=httpx.Request("POST", url),
                response=httpx.Response(status, headers=plain, text=body),
            )
            error = error_from_status(status, response_headers, body, provider=self.provider)
            raise error from cause

    async def post_json(self, path: str, content: bytes, policy: RetryPolicy) -> Any:
        """POST ``content`` and return the parsed JSON reply.

        Raises:
            ModelError: a mapped HTTP or transport failure (after retries).
            ModelProtocolError: the 2xx body is not JSON.
        """
        response = await self._send(path, content, False, policy)
        try:
            raw = await response.aread()
        except httpx.HTTPError as exc:
            raise error_from_transport(exc, provider=self.provider) from exc
        try:
            return json.loads(raw)
        except ValueError as exc:
            text = raw.decode("utf-8", "replace")
            raise ModelProtocolError(
                f"{self.provider} answered HTTP {response.status_code} with a body that is "
                f"not JSON: {text[:200]!r}",
                status=response.status_code,
                provider=self.provider,
                body=text[:_BODY_LIMIT],
            ) from exc

    @asynccontextmanager
    async def stream(
        self, path: str, content: bytes, policy: RetryPolicy
    ) -> AsyncIterator[WireResponse]:
        """POST ``content`` for a streamed reply; the response is closed on exit, always."""
        response = await self._send(path, content, True, policy)
        try:
            yield response
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def aclose(self) -> None:
        """Close the owned wire; idempotent, and a borrowed client is left open."""
        if self._closed:
            return
        self._closed = True
        wire, self._wire_ = self._wire_, None
        if wire is not None and self._owns_wire:
            await wire.aclose()


Transport = Literal["httpx", "aiohttp"]
TRANSPORT_ENV = "HERMES_HTTP_TRANSPORT"


def default_transport() -> Transport:
    """``$HERMES_HTTP_TRANSPORT`` (``aiohttp`` or ``httpx``), else aiohttp.

    aiohttp scales far better with many open connections (httpx 0.28's own pool does work
    quadratic in them) and costs less per request; measured in ``bench/``
    (docs/performance.md). httpx's pool stays selectable, and serves under event loops
    other than asyncio.
    """
    value = os.environ.get(TRANSPORT_ENV, "aiohttp").strip().lower()
    if value not in {"httpx", "aiohttp"}:
        raise ConfigError(f"{TRANSPORT_ENV}={value!r}: use 'httpx' or 'aiohttp'")
    return "aiohttp" if value == "aiohttp" else "httpx"


MAX_CONNECTIONS_ENV = "HERMES_HTTP_MAX_CONNECTIONS"


def max_connections() -> int:
    """``$HERMES_HTTP_MAX_CONNECTIONS``, else 100: connections a model keeps to its host.

    Requests beyond it wait in the client for a free connection. Against a local inference
    server that batches requests (vLLM, SGLang), raise it to the concurrency you run, as
    far as the server batches usefully; against a hosted API, 100 is plenty.
    """
    raw = os.environ.get(MAX_CONNECTIONS_ENV, "").strip()
    if not raw:
        return 100
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{MAX_CONNECTIONS_ENV}={raw!r}: use a whole number of at least 1")
    return value


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One verified TLS context per process: building one costs ~40 ms per client."""
    return httpx.create_ssl_context()


async def _read_and_close(response: WireResponse) -> str:
    """The error body of a failed response (best effort), closing it either way."""
    try:
        return (await response.aread()).decode("utf-8", "replace")
    except httpx.HTTPError:
        return ""
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()


# -- server-sent events -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One server-sent event. ``complete`` is false for an event cut off by end of stream."""

    data: str
    event: str | None = None
    id: str | None = None
    complete: bool = True


async def iter_sse(lines: AsyncIterable[str]) -> AsyncGenerator[SSEEvent, None]:
    """Parse SSE fields from text lines (``response.aiter_lines()``).

    Follows the HTML spec's rules for ``data``/``event``/``id`` and ``:`` comments; an event
    still open when the lines run out is yielded with ``complete=False`` so the adapter can
    decide whether it is a terminal marker sent without its blank line or a truncation.
    """
    data: list[str] = []
    event: str | None = None
    event_id: str | None = None
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data or event is not None:
                yield SSEEvent("\n".join(data), event, event_id)
            data, event = [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            event_id = value
    if data or event is not None:
        yield SSEEvent("\n".join(data), event, event_id, complete=False)
