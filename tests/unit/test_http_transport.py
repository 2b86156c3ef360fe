"""The wire is an adapter detail: aiohttp by default, httpx's pool selectable, an injected
httpx client always honoured; failures look the same whichever wire carried them."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import re
import socket
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_adapters.llm._http import Endpoint, default_transport, max_connections
from hermes_adapters.llm._wire import sse_lines
from hermes_adapters.llm.openai_chat import OpenAIChatModel
from hermes_adapters.testing.openai_chat_sim import OpenAIChatSimulator
from hermes_core.errors import ConfigError, ContextTooLong, ModelError, ModelUnavailable
from hermes_core.messages import UserMessage
from hermes_core.ports.llm import ModelRequest
from hermes_core.testing.llm import (
    HttpError,
    Scenario,
    Slow,
    TextReply,
    TruncatedStream,
    collect_stream,
)

WIRES = ["aiohttp", "httpx"]


@pytest.fixture(params=WIRES)
def wire(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test using it runs once per wire, selected the way users select it."""
    name: str = request.param
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", name)
    return name


def _request() -> ModelRequest:
    return ModelRequest(messages=(UserMessage(content="hi"),))


def _model(base_url: str, **kw: Any) -> OpenAIChatModel:
    options: dict[str, Any] = {"api_key": "sk-test", "backoff": (0.001, 0.002), **kw}
    return OpenAIChatModel("gpt-sim", base_url=base_url, **options)


# -- which wire ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_default_is_aiohttp_and_httpx_is_selectable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HERMES_HTTP_TRANSPORT", raising=False)
    sim = OpenAIChatSimulator("openai")
    sim.play(TextReply("one"), TextReply("two"), TextReply("three"))
    async with sim.serve() as base_url:
        default = _model(base_url)
        assert (await default.complete(_request())).message.content == "one"
        assert default.transport == "aiohttp"
        await default.aclose()

        monkeypatch.setenv("HERMES_HTTP_TRANSPORT", "httpx")
        pooled = _model(base_url)
        assert (await pooled.complete(_request())).message.content == "two"
        assert pooled.transport == "httpx"
        await pooled.aclose()

        explicit = Endpoint(base_url, transport="aiohttp")
        assert explicit.transport == "aiohttp"
        await explicit.aclose()
    assert len(sim.requests) == 2


@pytest.mark.anyio
async def test_an_injected_client_is_used_through_send_and_left_open() -> None:
    sim = OpenAIChatSimulator("openai")
    sim.play(TextReply("hooked"))
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async with sim.mock_client(event_hooks={"request": [hook]}) as client:
        model = _model("https://llm.example.test/v1", client=client)
        assert (await model.complete(_request())).message.content == "hooked"
        assert model.transport == "client"
        await model.aclose()
        assert not client.is_closed
    assert seen == ["https://llm.example.test/v1/chat/completions"]


def test_unknown_transport_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", "curl")
    with pytest.raises(ConfigError, match="HERMES_HTTP_TRANSPORT='curl'"):
        default_transport()


@pytest.mark.anyio
async def test_use_after_close_is_a_model_error(wire: str) -> None:
    model = _model("http://127.0.0.1:9/v1")
    await model.aclose()
    with pytest.raises(ModelError, match="after aclose"):
        await model.complete(_request())


# -- the same failures on every wire ------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.anyio
async def test_connection_refused_is_unavailable_after_retries(wire: str) -> None:
    model = _model(f"http://127.0.0.1:{_closed_port()}/v1", max_retries=1)
    with pytest.raises(ModelUnavailable, match="could not reach the server") as info:
        await model.complete(_request())
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    await model.aclose()


@asynccontextmanager
async def _served(*scenarios: Scenario, **model_options: Any) -> AsyncIterator[OpenAIChatModel]:
    """A model on the selected wire, talking to a loopback simulator playing ``scenarios``."""
    sim = OpenAIChatSimulator("openai")
    sim.play(*scenarios)
    async with sim.serve() as base_url:
        model = _model(base_url, max_retries=0, **model_options)
        try:
            yield model
        finally:
            await model.aclose()


@pytest.mark.anyio
async def test_read_timeout_is_unavailable(wire: str) -> None:
    async with _served(Slow(2.0), timeout=httpx.Timeout(0.2, connect=5.0)) as model:
        with pytest.raises(ModelUnavailable, match="timed out") as info:
            await model.complete(_request())
        assert isinstance(info.value.__cause__, httpx.TimeoutException)


@pytest.mark.anyio
async def test_status_errors_carry_the_same_cause(wire: str) -> None:
    async with _served(HttpError(418, "short and stout")) as model:
        with pytest.raises(ModelError, match="HTTP 418: short and stout") as info:
            await model.complete(_request())
        cause = info.value.__cause__
        assert isinstance(cause, httpx.HTTPStatusError)
        assert cause.response.status_code == 418


@pytest.mark.anyio
async def test_connection_is_reused_after_an_abandoned_stream(wire: str) -> None:
    # A stream cut by the server must not leave its broken connection to the next call.
    replies = (TruncatedStream(abort=True), TextReply("after the break"), TextReply("again"))
    async with _served(*replies) as model:
        with pytest.raises(ModelError):
            await collect_stream(model, _request())
        assert (await model.complete(_request())).message.content == "after the break"
        _, streamed = await collect_stream(model, _request())
        assert streamed.message.content == "again"


@pytest.mark.anyio
async def test_a_stream_left_midway_does_not_poison_the_next_call(wire: str) -> None:
    # A stream the client hangs up on must not leave unread bytes for the next response.
    paused = Slow(0.5, TextReply("first part, then a pause, then the rest"))
    async with _served(paused, TextReply("next")) as model:
        async with aclosing(model.stream(_request())) as events:
            async for _ in events:
                break
        assert (await model.complete(_request())).message.content == "next"


# -- event-stream lines -------------------------------------------------------------------


async def _chunks(parts: list[str]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part.encode()


async def _lines(parts: list[str]) -> list[str]:
    return [line async for line in sse_lines(_chunks(parts))]


@pytest.mark.anyio
async def test_lines_split_only_at_cr_and_lf() -> None:
    assert await _lines(["data: a\u2028b\x85c\x0cd\x1ce\r\n", "\r\nx"]) == [
        "data: a\u2028b\x85c\x0cd\x1ce",
        "",
        "x",
    ]
    # a CRLF cut between two chunks is one line break, not two
    assert await _lines(["a\r", "\nb\r", "c\n", "\n"]) == ["a", "b", "c", ""]
    assert await _lines(["tail\r"]) == ["tail"]
    assert await _lines(["", "", "only"]) == ["only"]


def _reference(text: str) -> list[str]:
    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines[-1] == "" else lines


@given(
    text=st.text(
        alphabet=st.sampled_from(["a", "é", "中", "\r", "\n", "\u2028", " "]), max_size=40
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=6),
)
def test_lines_do_not_depend_on_chunking(text: str, cuts: list[int]) -> None:
    # Cut the UTF-8 bytes anywhere, inside a character or between CR and LF included.
    data = text.encode()
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})

    async def chunks() -> AsyncIterator[bytes]:
        for a, b in itertools.pairwise(bounds):
            yield data[a:b]

    async def lines() -> list[str]:
        return [line async for line in sse_lines(chunks())]

    assert anyio.run(lines) == _reference(text)


class _CountingServer:
    """Answers every chat completion after a pause and records the most requests it
    was ever serving at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "gpt-sim",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
            }
        ).encode()
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1))  # type: ignore[union-attr]
                await reader.readexactly(length)
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
                await asyncio.sleep(0.05)
                self.in_flight -= 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.anyio
async def test_connection_limit_bounds_requests_in_flight(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = _CountingServer()
    server = await asyncio.start_server(counting.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        for limit, calls in ((2, 6), (5, 6)):
            monkeypatch.setenv("HERMES_HTTP_MAX_CONNECTIONS", str(limit))
            counting.most = 0
            model = _model(f"http://127.0.0.1:{port}/v1", max_retries=0)
            async with anyio.create_task_group() as group:
                for _ in range(calls):
                    group.start_soon(model.complete, _request())
            await model.aclose()
            assert counting.most == limit


@pytest.mark.parametrize("raw", ["0", "-3", "lots"])
def test_a_bad_connection_limit_is_a_config_error(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HTTP_MAX_CONNECTIONS", raw)
    with pytest.raises(ConfigError, match="HERMES_HTTP_MAX_CONNECTIONS"):
        max_connections()


# -- what goes on the wire, and odd answers -----------------------------------------------


class _RecordingServer:
    """Answers every request with one canned response and records each request's head."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.heads: list[str] = []
        self.connections = 0
        self._answer = (
            f"HTTP/1.1 {status} X\r\n".encode()
            + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers)
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                self.heads.append(head.decode("latin-1"))
                found = re.search(rb"content-length: *(\d+)", head, re.I)
                await reader.readexactly(int(found.group(1)) if found else 0)
                writer.write(self._answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        async with server:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


_COMPLETION = json.dumps(
    {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ]
    }
).encode()


@pytest.mark.anyio
async def test_a_compressed_error_body_still_maps_to_a_hermes_error(wire: str) -> None:
    body = json.dumps({"error": {"message": "maximum context length exceeded"}}).encode()
    server = _RecordingServer(
        400,
        [("content-type", "application/json"), ("content-encoding", "gzip")],
        gzip.compress(body),
    )
    async with server.serve() as base_url:
        model = _model(f"{base_url}/v1", max_retries=0)
        with pytest.raises(ContextTooLong) as info:
            await model.complete(_request())
        assert isinstance(info.value.__cause__, httpx.HTTPStatusError)
        assert "maximum context length" in info.value.__cause__.response.text
        await model.aclose()


@pytest.mark.anyio
async def test_environment_proxy_and_one_user_agent_on_every_wire(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = _RecordingServer(200, [("content-type", "application/json")], _COMPLETION)
    async with proxy.serve() as proxy_url:
        for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.setenv("http_proxy", proxy_url)
        model = _model("http://llm.upstream.invalid/v1")
        assert (await model.complete(_request())).message.content == "ok"
        await model.aclose()
    [head] = proxy.heads
    # An HTTP proxy gets the absolute URL in the request line.
    assert head.startswith("POST http://llm.upstream.invalid/v1/chat/completions HTTP/1.1")
    assert re.search(r"(?im)^user-agent: hermes-harness/", head)


@pytest.mark.anyio
async def test_a_header_that_cannot_be_sent_is_a_model_error(wire: str) -> None:
    model = _model("http://127.0.0.1:9/v1", api_key="sk-pasted\r\nX-Injected: 1")
    with pytest.raises(ModelError):
        await model.complete(_request())
    await model.aclose()


@pytest.mark.anyio
async def test_an_event_stream_is_utf8_whatever_charset_it_claims(wire: str) -> None:
    events = (
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"caf\xc3\xa9"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    server = _RecordingServer(200, [("content-type", "text/event-stream; charset=utf8mb4")], events)
    async with server.serve() as base_url:
        model = _model(f"{base_url}/v1", max_retries=0)
        _, response = await collect_stream(model, _request())
        assert response.message.content == "café"
        await model.aclose()


@pytest.mark.anyio
async def test_a_model_reuses_its_connection_across_calls(wire: str) -> None:
    # No client per call: one model, many requests, one kept-alive connection.
    server = _RecordingServer(200, [("content-type", "application/json")], _COMPLETION)
    async with server.serve() as base_url:
        model = _model(f"{base_url}/v1", max_retries=0)
        for _ in range(5):
            assert (await model.complete(_request())).message.content == "ok"
        await model.aclose()
    assert (len(server.heads), server.connections) == (5, 1)
