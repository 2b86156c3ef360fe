"""An SSRF guard for tools that fetch URLs chosen by model output.

A URL in a tool call is untrusted text: a prompt-injected page can ask the agent to fetch
``http://169.254.169.254/`` (cloud credentials), ``http://127.1:6379/`` or an intranet
host. So every request a web tool makes goes through three layers:

1. :meth:`UrlPolicy.vet` parses the URL with httpx's own parser (no parser differential
   with the client that sends it), allows only ``http``/``https`` with a host, strips
   userinfo, resolves the host with an injectable async resolver and requires **every**
   address to be public. Literal forms that ``getaddrinfo`` would accept (``2130706433``,
   ``127.1``, ``0x7f.1``, ``0177.0.0.1``) are normalised here too, so a stub resolver in
   tests cannot be tricked by them. IPv4-mapped (``::ffff:a.b.c.d``) and NAT64
   (``64:ff9b::/96``) addresses are judged by the IPv4 address they carry. Cloud metadata
   hosts and addresses are refused even when private addresses are allowed. Any error
   fails closed, as :class:`BlockedUrl`.
2. :class:`PinnedTransport` vets **each request** it sends, so every redirect hop is
   vetted, and then connects to the vetted address itself: DNS is never asked a second
   time, so a rebinding name (public on the first answer, private on the second) cannot
   swap the target between the check and the connection (WIRE.md §5 "SSRF"). The request
   keeps the original ``Host`` header and TLS SNI/certificate name.
3. :func:`safe_client` builds an ``httpx.AsyncClient`` on that transport that ignores
   proxy settings from the environment, and :func:`safe_get` follows at most
   :data:`MAX_REDIRECTS` redirects by hand and stops reading a body at a byte cap.

How the pinning is built: httpx's ``AsyncHTTPTransport`` takes no network backend, but
httpcore's ``AsyncConnectionPool`` does. :class:`PinnedTransport` owns such a pool with a
private network backend and adapts it to httpx itself (a request mapping, an error
mapping and a response stream: public httpx/httpcore API only, no private attributes).
Before handing a request to the pool it records the vetted target in a context variable;
httpcore opens connections inline in the requesting task, so the backend's
``connect_tcp(host, port)`` sees that record and dials the vetted IP instead of the name.
A connection attempt with no matching record is refused, so if httpcore ever connected
from another task the guard would fail closed rather than resolve on its own. TLS still
runs ``start_tls(server_hostname=<the name>)`` in httpcore, which is what keeps SNI and
certificate checks on the name.
"""

from __future__ import annotations

import contextvars
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpcore
import httpx

from hermes_core.errors import ToolError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_REDIRECTS",
    "BlockedUrl",
    "FetchFailed",
    "FetchedPage",
    "PinnedTransport",
    "Resolver",
    "ResponseTooLarge",
    "UrlPolicy",
    "VettedTarget",
    "is_blocked_address",
    "parse_ip_literal",
    "safe_client",
    "safe_get",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Iterable[str]]]
"""``await resolver(host, port)`` returns the IP addresses (as text) the host resolves to."""

MAX_REDIRECTS: Final = 5
DEFAULT_MAX_BODY_BYTES: Final = 10 * 1024 * 1024
"""The transport's hard cap on one response body; :func:`safe_get` stops earlier."""
DEFAULT_TIMEOUT: Final = 20.0
USER_AGENT: Final = "Mozilla/5.0 (compatible; hermes-agent)"

_ALLOWED_SCHEMES: Final = frozenset({"http", "https"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

# Always refused, even with ``allow_private``: instance metadata services hand out cloud
# credentials to anything on the box that asks (REFERENCE.md §8).
_METADATA_HOSTS: Final = frozenset({"metadata.google.internal", "metadata.goog"})
_METADATA_NETS: Final = tuple(
    ipaddress.ip_network(net)
    for net in (
        "169.254.0.0/16",  # link-local v4: AWS/GCP/Azure 169.254.169.254, ECS 169.254.170.2, ...
        "100.100.100.200/32",  # Alibaba Cloud
        "fd00:ec2::254/128",  # AWS IMDS over IPv6
    )
)

# Refused unless ``allow_private``: names that mean "this machine" without DNS (RFC 6761).
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})

# IANA special-purpose ranges, checked on top of ``ip.is_global`` because the stdlib tables
# differ between Python releases and miss a few (benchmarking, 240/4 on some versions).
_SPECIAL_NETS: Final = tuple(
    ipaddress.ip_network(net)
    for net in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",  # CGNAT
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",  # TEST-NET-1
        "192.31.196.0/24",
        "192.52.193.0/24",
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",
        "192.175.48.0/24",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # TEST-NET-2
        "203.0.113.0/24",  # TEST-NET-3
        "224.0.0.0/4",
        "240.0.0.0/4",
        "255.255.255.255/32",
        "::/128",
        "::1/128",
        "::/96",  # deprecated IPv4-compatible addresses
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID)
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4: embeds arbitrary IPv4, never needed to fetch a page
        "3fff::/20",  # documentation
        "5f00::/16",  # SRv6 SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")


class BlockedUrl(ToolError):
    """A URL the policy refuses to fetch; ``reason`` says why, for the model to read."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"refused to fetch {url}: {reason}")
        self.url = url
        self.reason = reason


class FetchFailed(ToolError):
    """A vetted fetch failed: network error, bad redirect, too many redirects."""


class ResponseTooLarge(FetchFailed):
    """A response body passed the transport's hard byte cap."""


# -- judging addresses -----------------------------------------------------------------


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address ``host`` denotes as a literal, in any form ``inet_aton`` accepts, or None.

    ``getaddrinfo`` turns ``2130706433``, ``127.1``, ``0x7f.0.0.1`` and ``0177.0.0.1`` into
    127.0.0.1 without DNS; doing the same here means a stub resolver (or a resolver that
    disagrees with libc) cannot let such a literal through.
    """
    text = host.strip().rstrip(".").strip("[]")
    if not text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    parts = text.split(".")
    if len(parts) > 4:
        return None
    values: list[int] = []
    for part in parts:
        value = _inet_aton_part(part)
        if value is None:
            return None
        values.append(value)
    *leading, last = values
    if any(v > 0xFF for v in leading) or last >= 1 << (8 * (4 - len(leading))):
        return None
    number = 0
    for v in leading:
        number = (number << 8) | v
    number = (number << (8 * (4 - len(leading)))) | last
    return ipaddress.IPv4Address(number)


def _inet_aton_part(part: str) -> int | None:
    lowered = part.lower()
    try:
        if lowered.startswith("0x"):
            return int(lowered[2:], 16) if lowered[2:] else 0
        if len(lowered) > 1 and lowered.startswith("0"):
            return int(lowered[1:], 8)
        return int(lowered, 10) if lowered.isdigit() else None
    except ValueError:
        return None


def _embedded_ipv4(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped or NAT64 IPv6 address stands for, else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def is_blocked_address(ip: IPAddress, *, allow_private: bool = False) -> str | None:
    """Why ``ip`` may not be fetched from, or None if it may.

    Metadata addresses, multicast and unspecified addresses are refused whatever
    ``allow_private`` says; everything else must be globally routable unless it allows it.
    """
    ip = _embedded_ipv4(ip)
    if any(ip in net for net in _METADATA_NETS if net.version == ip.version):
        return f"{ip} is a cloud metadata address"
    if ip.is_multicast or ip.is_unspecified:
        return f"{ip} is not a unicast address"
    if allow_private:
        return None
    special = any(ip in net for net in _SPECIAL_NETS if net.version == ip.version)
    if (
        special
        or not ip.is_global
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_reserved
        or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
    ):
        return f"{ip} is not a public address"
    return None


# -- resolving -------------------------------------------------------------------------


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (``getaddrinfo``, off the event loop)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class VettedTarget:
    """A URL that passed the policy, with the addresses a connection may go to.

    ``host`` is the name exactly as httpcore will ask to connect to it (IDNA form, no
    brackets); ``addresses`` are all vetted, in resolver order, without duplicates.
    """

    url: httpx.URL
    host: str
    port: int
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """Which URLs web tools may fetch.

    ``allow_private=True`` (``security.allow_private_urls``) lets private, loopback and
    link-local IPv6 addresses through, for intranet use; cloud metadata stays refused.
    """

    allow_private: bool = False
    resolve_timeout: float = 10.0

    async def vet(self, url: str | httpx.URL, resolver: Resolver | None = None) -> VettedTarget:
        """Check ``url`` and resolve its host; every address must pass.

        Raises:
            BlockedUrl: the URL is not allowed, or checking it failed in any way.
        """
        shown = _redacted(url)
        try:
            return await self._vet(url, resolver or system_resolver, shown)
        except BlockedUrl:
            raise
        except Exception as exc:  # fail closed: an error while checking is a refusal
            raise BlockedUrl(shown, f"could not be checked ({type(exc).__name__})") from exc

    async def _vet(self, url: str | httpx.URL, resolver: Resolver, shown: str) -> VettedTarget:
        try:
            parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise BlockedUrl(shown, f"not a valid URL ({exc})") from exc
        scheme = parsed.scheme.lower()
        if scheme not in _ALLOWED_SCHEMES:
            raise BlockedUrl(shown, f"only http and https URLs are allowed, not {scheme!r}")
        host = parsed.raw_host.decode("ascii")
        if not host:
            raise BlockedUrl(shown, "the URL has no host")
        port = parsed.port or _DEFAULT_PORTS[scheme]
        clean = parsed.copy_with(userinfo=b"") if parsed.userinfo else parsed
        name = host.lower().rstrip(".")
        if name in _METADATA_HOSTS:
            raise BlockedUrl(shown, f"{name} is a cloud metadata host")
        if not self.allow_private and (name in _LOOPBACK_NAMES or name.endswith(".localhost")):
            raise BlockedUrl(shown, f"{name} names this machine")
        literal = parse_ip_literal(host)
        if literal is not None:
            answers: list[str] = [str(literal)]
        else:
            with anyio.fail_after(self.resolve_timeout):
                answers = [str(a) for a in await resolver(host, port)]
        if not answers:
            raise BlockedUrl(shown, f"{name} did not resolve to any address")
        addresses: list[str] = []
        for answer in answers:
            ip = ipaddress.ip_address(answer)
            reason = is_blocked_address(ip, allow_private=self.allow_private)
            if reason is not None:
                raise BlockedUrl(shown, reason if literal is not None else f"{name}: {reason}")
            if answer not in addresses:
                addresses.append(answer)
        return VettedTarget(url=clean, host=host, port=port, addresses=tuple(addresses))


def _redacted(url: object) -> str:
    """``url`` as text without userinfo, for messages (never echo a password)."""
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(str(url))
        return str(parsed.copy_with(userinfo=b"") if parsed.userinfo else parsed)
    except Exception:
        return "<invalid URL>"


# -- the pinned transport --------------------------------------------------------------

_PINNED: contextvars.ContextVar[VettedTarget | None] = contextvars.ContextVar(
    "hermes_pinned_target", default=None
)

_ERROR_MAP: Final[tuple[tuple[type[Exception], type[httpx.TransportError]], ...]] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


_HTTPCORE_ERRORS: Final = tuple(source for source, _ in _ERROR_MAP)


@contextmanager
def _map_errors() -> Iterator[None]:
    """httpcore errors as the httpx errors that callers of an httpx client expect."""
    try:
        yield
    except _HTTPCORE_ERRORS as exc:
        mapped = next(target for source, target in _ERROR_MAP if isinstance(exc, source))
        raise mapped(str(exc)) from exc


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials the vetted addresses recorded for this request instead of resolving the name."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        target = _PINNED.get()
        if target is None or target.host != host or target.port != port:
            raise BlockedUrl(f"{host}:{port}", "connection was not vetted")
        failure: Exception | None = None
        for address in target.addresses:  # each one was vetted; try them in order
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # a VettedTarget always has an address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedUrl(path, "unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CappedStream(httpx.AsyncByteStream):
    """A response body that maps httpcore errors and refuses to grow past ``limit`` bytes."""

    def __init__(self, stream: AsyncIterable[bytes], limit: int | None, url: str) -> None:
        self._stream = stream
        self._limit = limit
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        with _map_errors():
            async for chunk in self._stream:
                seen += len(chunk)
                if self._limit is not None and seen > self._limit:
                    raise ResponseTooLarge(
                        f"the response from {self._url} is larger than {self._limit} bytes"
                    )
                yield chunk

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            with _map_errors():
                await aclose()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that vets every request and connects only to vetted addresses.

    ``network_backend`` is the backend that finally dials the vetted IP (httpcore's anyio
    backend by default); tests pass one that refuses anything but loopback.
    """

    def __init__(
        self,
        policy: UrlPolicy | None = None,
        resolver: Resolver | None = None,
        *,
        verify: ssl.SSLContext | bool = True,
        max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES,
        max_connections: int = 20,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy or UrlPolicy()
        self._resolver = resolver or system_resolver
        self._max_body_bytes = max_body_bytes
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            http1=True,
            http2=False,
            network_backend=_PinnedBackend(network_backend or httpcore.AnyIOBackend()),
        )

    @property
    def policy(self) -> UrlPolicy:
        return self._policy

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Vet ``request.url``, then send it over a connection to a vetted address.

        Raises:
            BlockedUrl: the URL (or a name it resolves to) is refused.
            httpx.TransportError: the connection or the exchange failed.
        """
        target = await self._policy.vet(request.url, self._resolver)
        headers = request.headers
        if request.url.userinfo:  # credentials in a URL are stripped, not sent as auth
            headers = httpx.Headers(headers)
            headers.pop("authorization", None)
        assert isinstance(request.stream, AsyncIterable)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        token = _PINNED.set(target)
        try:
            with _map_errors():
                response = await self._pool.handle_async_request(core_request)
        finally:
            _PINNED.reset(token)
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._max_body_bytes, str(target.url)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def safe_client(
    policy: UrlPolicy | None = None,
    *,
    resolver: Resolver | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES,
    headers: dict[str, str] | None = None,
    verify: ssl.SSLContext | bool = True,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for untrusted URLs: vetted, pinned, no env proxies.

    Redirects are not followed automatically (use :func:`safe_get`); should a caller turn
    them on per request, every hop is still vetted by the transport and bounded by
    :data:`MAX_REDIRECTS`.
    """
    transport = PinnedTransport(
        policy,
        resolver,
        verify=verify,
        max_body_bytes=max_body_bytes,
        network_backend=network_backend,
    )
    return httpx.AsyncClient(
        transport=transport,
        trust_env=False,
        follow_redirects=False,
        max_redirects=MAX_REDIRECTS,
        timeout=timeout,
        headers={"User-Agent": USER_AGENT, **(headers or {})},
    )


# -- fetching --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchedPage:
    """A fetched response: status, headers and at most ``max_bytes`` of decoded body."""

    url: str
    status_code: int
    headers: httpx.Headers
    content: bytes
    truncated: bool
    redirects: tuple[str, ...] = ()

    @property
    def content_type(self) -> str:
        return str(self.headers.get("content-type", "")).split(";")[0].strip().lower()

    @property
    def charset(self) -> str | None:
        """The charset the ``Content-Type`` header names, if any."""
        for param in str(self.headers.get("content-type", "")).split(";")[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "charset" and value.strip():
                return str(value.strip().strip("\"'"))
        return None


async def safe_get(
    client: httpx.AsyncClient,
    url: str,
    *,
    max_bytes: int = 2 * 1024 * 1024,
    max_redirects: int = MAX_REDIRECTS,
    headers: dict[str, str] | None = None,
) -> FetchedPage:
    """GET ``url``, following at most ``max_redirects`` redirects, reading at most ``max_bytes``.

    Each hop is a new request through the client's transport, so with a
    :func:`safe_client` each one is vetted and pinned again. The body is streamed and
    reading stops at the cap (``truncated`` says so), so a huge page costs no more memory.

    Raises:
        BlockedUrl: the URL or a redirect target is refused.
        FetchFailed: the request failed, a redirect was invalid, or there were too many.
    """
    try:
        parsed = httpx.URL(url)
        request = client.build_request("GET", parsed.copy_with(userinfo=b""), headers=headers)
    except (httpx.InvalidURL, httpx.HTTPError, TypeError, ValueError) as exc:
        raise BlockedUrl(_redacted(url), f"not a valid URL ({exc})") from exc
    hops: list[str] = []
    try:
        for _ in range(max_redirects + 1):
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                next_request = response.next_request if response.has_redirect_location else None
                if next_request is None:
                    body, truncated = await _read_capped(response, max_bytes)
                    return FetchedPage(
                        url=str(response.url),
                        status_code=response.status_code,
                        headers=response.headers,
                        content=body,
                        truncated=truncated,
                        redirects=tuple(hops),
                    )
            finally:
                await response.aclose()
            hops.append(str(request.url))
            request = next_request
            if request.url.userinfo:
                request.url = request.url.copy_with(userinfo=b"")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        detail = str(exc) or type(exc).__name__
        raise FetchFailed(f"fetching {_redacted(url)} failed: {detail}") from exc
    raise FetchFailed(f"fetching {_redacted(url)} failed: more than {max_redirects} redirects")


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        room = max_bytes - size
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False
