"""The SSRF guard refuses what it must, pins what it vets, and lets allowed traffic through.

No test here reaches the network: every resolver is a stub, and every connection goes
through :class:`LoopbackOnly`, a network backend that dials 127.0.0.1 and nothing else
(test addresses that stand for "the internet" are routed to the loopback server).
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpcore
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from hermes_adapters.tools.ssrf import (
    MAX_REDIRECTS,
    BlockedUrl,
    FetchFailed,
    PinnedTransport,
    ResponseTooLarge,
    UrlPolicy,
    is_blocked_address,
    parse_ip_literal,
    safe_client,
    safe_get,
)
from hermes_core.errors import ToolError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

PUBLIC = "93.184.216.34"  # stands for "a public web server"; routed to loopback below

# -- test doubles: a stub resolver, a loopback-only network, a loopback web site ---------


class StubResolver:
    """Answers from a table; each name's answers are consumed in turn (the last repeats)."""

    def __init__(self, table: Mapping[str, Sequence[Sequence[str]]] | None = None) -> None:
        self._table = {name: list(answers) for name, answers in (table or {}).items()}
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answers = self._table.get(host)
        if not answers:
            raise OSError(f"stub resolver: no such host {host!r}")
        return list(answers.pop(0) if len(answers) > 1 else answers[0])


class LoopbackOnly(httpcore.AsyncNetworkBackend):
    """Dials 127.0.0.1 only; ``route`` maps stand-in public addresses onto it."""

    def __init__(self, route: Mapping[str, str] | None = None) -> None:
        self.route = dict(route or {})
        self.dialled: list[str] = []
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.dialled.append(host)
        target = self.route.get(host, host)
        if target != "127.0.0.1":
            raise httpcore.ConnectError(f"test network refuses {host!r}")
        return await self._inner.connect_tcp(
            target, port, timeout=timeout, local_address=local_address
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("test network refuses unix sockets")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Site:
    """A tiny HTTP/1.1 server on 127.0.0.1: ``routes`` by path, ``seen`` requests in order."""

    port: int
    routes: dict[str, Reply | Callable[[], Awaitable[Reply]]] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            try:
                head = await reader.receive_until(b"\r\n\r\n", 65536)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
                return
            line, *fields = head.decode("latin-1").split("\r\n")
            _, path, _ = line.split(" ", 2)
            headers = {}
            for item in fields:
                key, _, value = item.partition(":")
                headers[key.strip().lower()] = value.strip()
            self.seen.append((path, headers))
            route = self.routes.get(path, (404, {}, b"not found"))
            status, extra, body = route if isinstance(route, tuple) else await route()
            lines = [
                f"HTTP/1.1 {status} Whatever",
                f"Content-Length: {len(body)}",
                "Connection: close",
                *(f"{key}: {value}" for key, value in extra.items()),
            ]
            await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


@asynccontextmanager
async def loopback_site() -> AsyncIterator[Site]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    site = Site(port=listener.extra(anyio.abc.SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, site.handle)
        try:
            yield site
        finally:
            group.cancel_scope.cancel()


PAGE = (200, {"Content-Type": "text/html; charset=utf-8"}, b"<h1>hello from loopback</h1>")


# -- vetting: refused literals, names and schemes ----------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://127.1/",
        "http://0x7f.1/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://017700000001/",
        "http://127.0.0.1./",
        "http://0.0.0.0/",
        "http://[::1]/",
        "http://[::]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[64:ff9b::10.0.0.1]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[fd12:3456::1]/",
        "http://[2002:7f00:1::1]/",
        "http://[2001:db8::1]/",
        "http://100.64.0.1/",
        "http://198.18.0.1/",
        "http://240.0.0.1/",
        "http://255.255.255.255/",
        "http://192.0.2.10/",
        "http://203.0.113.7/",
        "http://224.0.0.1/",
        "http://localhost/",
        "http://LOCALHOST./",
        "http://api.localhost/",
    ],
)
async def test_private_and_special_targets_are_refused(url: str) -> None:
    resolver = StubResolver({"localhost": [[PUBLIC]], "api.localhost": [[PUBLIC]]})
    with pytest.raises(BlockedUrl):
        await UrlPolicy().vet(url, resolver)
    assert resolver.calls == []  # literals and loopback names never reach DNS


async def test_a_public_looking_name_that_resolves_private_is_refused() -> None:
    resolver = StubResolver(
        {"intranet.example.test": [["10.0.0.5"]], "mixed.example.test": [[PUBLIC, "10.0.0.5"]]}
    )
    with pytest.raises(BlockedUrl, match=r"10\.0\.0\.5 is not a public address"):
        await UrlPolicy().vet("https://intranet.example.test/admin", resolver)
    with pytest.raises(BlockedUrl, match=r"10\.0\.0\.5"):  # every answer must be public
        await UrlPolicy().vet("https://mixed.example.test/", resolver)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://public.test/x",
        "gopher://public.test:70/",
        "javascript:alert(1)",
        "//public.test/no-scheme",
        "http:///no-host",
        "not a url",
        "http://[::1",
    ],
)
async def test_only_http_and_https_with_a_host_pass(url: str) -> None:
    with pytest.raises(BlockedUrl):
        await UrlPolicy().vet(url, StubResolver({"public.test": [[PUBLIC]]}))


async def test_checking_fails_closed() -> None:
    async def broken(host: str, port: int) -> list[str]:
        raise RuntimeError("resolver exploded")

    async def garbage(host: str, port: int) -> list[str]:
        return ["not-an-address"]

    async def empty(host: str, port: int) -> list[str]:
        return []

    for resolver in (StubResolver(), broken, garbage, empty):
        with pytest.raises(BlockedUrl) as caught:
            await UrlPolicy().vet("http://public.test/", resolver)
        assert isinstance(caught.value, ToolError)


async def test_a_slow_resolver_is_a_refusal_not_a_hang() -> None:
    async def stuck(host: str, port: int) -> list[str]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.fail_after(5), pytest.raises(BlockedUrl, match="TimeoutError"):
        await UrlPolicy(resolve_timeout=0.05).vet("http://slow.test/", stuck)


async def test_userinfo_is_stripped_and_never_echoed() -> None:
    resolver = StubResolver({"public.test": [[PUBLIC]]})
    target = await UrlPolicy().vet("https://alice:s3cret@public.test/p?q=1", resolver)
    assert str(target.url) == "https://public.test/p?q=1"
    assert (target.host, target.port, target.addresses) == ("public.test", 443, (PUBLIC,))
    with pytest.raises(BlockedUrl) as caught:
        await UrlPolicy().vet("http://alice:s3cret@10.0.0.1/")
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.170.2/v2/credentials",
        "http://169.254.169.253/",
        "http://169.254.1.1/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.GOOG./",
        "http://2852039166/",  # 169.254.169.254 as one number
        "http://imds.test/",  # a name that resolves there
    ],
)
async def test_cloud_metadata_is_refused_even_with_allow_private(url: str) -> None:
    resolver = StubResolver(
        {
            "imds.test": [["169.254.169.254"]],
            "metadata.google.internal": [["127.0.0.1"]],
            "METADATA.GOOG.": [["127.0.0.1"]],
        }
    )
    with pytest.raises(BlockedUrl, match="metadata"):
        await UrlPolicy(allow_private=True).vet(url, resolver)


async def test_literal_forms_and_verdicts() -> None:
    as_ip = ipaddress.ip_address
    assert parse_ip_literal("2130706433") == as_ip("127.0.0.1")
    assert parse_ip_literal("127.1") == as_ip("127.0.0.1")
    assert parse_ip_literal("0x7f.1") == as_ip("127.0.0.1")
    assert parse_ip_literal("0177.0.0.01") == as_ip("127.0.0.1")
    assert parse_ip_literal("10.1.257") == as_ip("10.1.1.1")
    assert parse_ip_literal("[::ffff:127.0.0.1]") == as_ip("::ffff:127.0.0.1")
    for name in ("example.com", "256.1.1.1", "1.2.3.4.5", "08.1.1.1", "1.16777216", ""):
        assert parse_ip_literal(name) is None, name
    assert is_blocked_address(as_ip(PUBLIC)) is None
    assert is_blocked_address(as_ip("2606:4700:4700::1111")) is None
    assert is_blocked_address(as_ip("64:ff9b::5db8:d822")) is None  # NAT64 of a public v4
    assert is_blocked_address(as_ip("10.0.0.1"), allow_private=True) is None
    assert is_blocked_address(as_ip("224.0.0.1"), allow_private=True) is not None


# -- the pinned transport against a loopback server --------------------------------------


async def test_the_default_policy_refuses_the_loopback_server() -> None:
    network = LoopbackOnly()
    async with loopback_site() as site, safe_client(network_backend=network) as client:
        site.routes["/page"] = PAGE
        for url in (f"{site.base}/page", f"http://2130706433:{site.port}/page"):
            with pytest.raises(BlockedUrl):
                await client.get(url)
            with pytest.raises(BlockedUrl):
                await safe_get(client, url)
    assert site.seen == [] and network.dialled == []


async def test_allow_private_lets_the_loopback_server_through() -> None:
    resolver = StubResolver({"intranet.test": [["127.0.0.1"]]})
    network = LoopbackOnly()
    policy = UrlPolicy(allow_private=True)
    async with (
        loopback_site() as site,
        safe_client(policy, resolver=resolver, network_backend=network) as client,
    ):
        site.routes["/page"] = PAGE
        page = await safe_get(client, f"{site.base}/page")
        named = await safe_get(client, f"http://user:pw@intranet.test:{site.port}/page")
    assert page.status_code == 200 and page.content == PAGE[2] and not page.truncated
    assert page.content_type == "text/html" and page.charset == "utf-8"
    assert named.content == PAGE[2]
    assert named.url == f"http://intranet.test:{site.port}/page"
    (_, first), (_, second) = site.seen
    assert first["host"] == f"127.0.0.1:{site.port}"
    assert second["host"] == f"intranet.test:{site.port}"  # the name, not the pinned IP
    assert "authorization" not in second  # URL credentials are dropped, not sent
    assert network.dialled == ["127.0.0.1", "127.0.0.1"]


async def test_a_redirect_to_a_private_address_is_refused() -> None:
    resolver = StubResolver({"public.test": [[PUBLIC]], "internal.test": [["10.0.0.5"]]})
    network = LoopbackOnly({PUBLIC: "127.0.0.1"})
    async with (
        loopback_site() as site,
        safe_client(resolver=resolver, network_backend=network) as client,
    ):
        site.routes["/page"] = PAGE
        site.routes["/to-loopback"] = (302, {"Location": f"{site.base}/secret"}, b"")
        site.routes["/to-internal"] = (307, {"Location": "http://internal.test/secret"}, b"")
        site.routes["/to-metadata"] = (301, {"Location": "http://169.254.169.254/"}, b"")
        site.routes["/to-page"] = (302, {"Location": "/page"}, b"")
        public = f"http://public.test:{site.port}"
        for path in ("/to-loopback", "/to-internal", "/to-metadata"):
            with pytest.raises(BlockedUrl):
                await safe_get(client, public + path)
        # the client's own redirect following goes through the same vetting
        with pytest.raises(BlockedUrl):
            await client.get(public + "/to-loopback", follow_redirects=True)
        followed = await safe_get(client, public + "/to-page")
    assert followed.content == PAGE[2]
    assert followed.redirects == (public + "/to-page",)
    assert followed.url == public + "/page"
    assert "/secret" not in site.paths
    assert set(network.dialled) == {PUBLIC}


async def test_redirects_are_bounded() -> None:
    policy = UrlPolicy(allow_private=True)
    async with loopback_site() as site, safe_client(policy, network_backend=LoopbackOnly()) as c:
        site.routes["/loop"] = (302, {"Location": "/loop"}, b"")
        with pytest.raises(FetchFailed, match="redirects"):
            await safe_get(c, f"{site.base}/loop")
    assert site.paths == ["/loop"] * (MAX_REDIRECTS + 1)


async def test_dns_rebinding_cannot_swap_the_vetted_address() -> None:
    """First answer public, second private: the connection uses the first, DNS is asked once."""
    resolver = StubResolver({"rebind.test": [[PUBLIC], ["10.0.0.1"]]})
    network = LoopbackOnly({PUBLIC: "127.0.0.1"})
    async with (
        loopback_site() as site,
        safe_client(resolver=resolver, network_backend=network) as client,
    ):
        site.routes["/page"] = PAGE
        page = await safe_get(client, f"http://rebind.test:{site.port}/page")
        assert resolver.calls == ["rebind.test"]
        assert network.dialled == [PUBLIC]  # the vetted IP, not the name
        assert site.seen[0][1]["host"] == f"rebind.test:{site.port}"
        # the next request is vetted again, sees the private answer and stops
        with pytest.raises(BlockedUrl, match=r"10\.0\.0\.1"):
            await safe_get(client, f"http://rebind.test:{site.port}/page")
    assert page.content == PAGE[2]
    assert network.dialled == [PUBLIC] and len(site.seen) == 1


async def test_the_connection_goes_to_the_vetted_address_not_a_fresh_lookup() -> None:
    """With private addresses allowed, the answer 127.0.0.1 is pinned: 10.0.0.1 is never dialled."""
    resolver = StubResolver({"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
    network = LoopbackOnly()  # refuses anything but 127.0.0.1
    policy = UrlPolicy(allow_private=True)
    async with (
        loopback_site() as site,
        safe_client(policy, resolver=resolver, network_backend=network) as client,
    ):
        site.routes["/page"] = PAGE
        page = await safe_get(client, f"http://rebind.test:{site.port}/page")
    assert page.status_code == 200 and site.paths == ["/page"]
    assert resolver.calls == ["rebind.test"]
    assert network.dialled == ["127.0.0.1"]


async def test_an_unvetted_connection_is_refused() -> None:
    from hermes_adapters.tools.ssrf import _PinnedBackend

    backend = _PinnedBackend(LoopbackOnly())
    with pytest.raises(BlockedUrl, match="not vetted"):
        await backend.connect_tcp("127.0.0.1", 80)
    with pytest.raises(BlockedUrl):
        await backend.connect_unix_socket("/var/run/docker.sock")


async def test_bodies_are_capped() -> None:
    policy = UrlPolicy(allow_private=True)
    big = (200, {"Content-Type": "text/plain"}, b"x" * 100_000)
    async with loopback_site() as site:
        site.routes["/big"] = big
        async with safe_client(policy, network_backend=LoopbackOnly()) as client:
            page = await safe_get(client, f"{site.base}/big", max_bytes=1000)
        assert page.truncated and page.content == b"x" * 1000
        async with safe_client(policy, max_body_bytes=1000, network_backend=LoopbackOnly()) as c:
            with pytest.raises(ResponseTooLarge):
                await c.get(f"{site.base}/big")


async def test_proxy_settings_in_the_environment_are_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://10.9.9.9:3128")
    network = LoopbackOnly()
    policy = UrlPolicy(allow_private=True)
    async with loopback_site() as site, safe_client(policy, network_backend=network) as client:
        site.routes["/page"] = PAGE
        page = await safe_get(client, f"{site.base}/page")
    assert page.content == PAGE[2]
    assert network.dialled == ["127.0.0.1"]


async def test_transport_errors_come_out_as_httpx_and_fetch_errors() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there now
    transport = PinnedTransport(UrlPolicy(allow_private=True), network_backend=LoopbackOnly())
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")
        with pytest.raises(FetchFailed, match="failed"):
            await safe_get(client, f"http://127.0.0.1:{port}/")
