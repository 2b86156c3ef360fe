"""The wire is an adapter detail: aiohttp by default, httpx's pool selectable, an injected
httpx client always honoured; failures look the same whichever wire carried them."""

from __future__ import annotations

import itertools
import re
import socket
from collections.abc import AsyncIterator
from contextlib import aclosing

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_adapters.llm._http import Endpoint, default_transport
from hermes_adapters.llm._wire import sse_lines
from hermes_adapters.llm.openai_chat import OpenAIChatModel
from hermes_adapters.testing.openai_chat_sim import OpenAIChatSimulator
from hermes_core.errors import ConfigError, ModelError, ModelUnavailable
from hermes_core.messages import UserMessage
from hermes_core.ports.llm import ModelRequest
from hermes_core.testing.llm import HttpError, Slow, TextReply, TruncatedStream, collect_stream

WIRES = ["aiohttp", "httpx"]


def _request() -> ModelRequest:
    return ModelRequest(messages=(UserMessage(content="hi"),))


def _model(base_url: str, **kw: object) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-sim", base_url=base_url, api_key="sk-test", backoff=(0.001, 0.002), **kw
    )


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
@pytest.mark.parametrize("wire", WIRES)
async def test_use_after_close_is_a_model_error(wire: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", wire)
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
@pytest.mark.parametrize("wire", WIRES)
async def test_connection_refused_is_unavailable_after_retries(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", wire)
    model = _model(f"http://127.0.0.1:{_closed_port()}/v1", max_retries=1)
    with pytest.raises(ModelUnavailable, match="could not reach the server") as info:
        await model.complete(_request())
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    await model.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("wire", WIRES)
async def test_read_timeout_is_unavailable(wire: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", wire)
    sim = OpenAIChatSimulator("openai")
    sim.play(Slow(2.0))
    async with sim.serve() as base_url:
        model = _model(base_url, max_retries=0, timeout=httpx.Timeout(0.2, connect=5.0))
        with pytest.raises(ModelUnavailable, match="timed out") as info:
            await model.complete(_request())
        assert isinstance(info.value.__cause__, httpx.TimeoutException)
        await model.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("wire", WIRES)
async def test_status_errors_carry_the_same_cause(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", wire)
    sim = OpenAIChatSimulator("openai")
    sim.play(HttpError(418, "short and stout"))
    async with sim.serve() as base_url:
        model = _model(base_url, max_retries=0)
        with pytest.raises(ModelError, match="HTTP 418: short and stout") as info:
            await model.complete(_request())
        cause = info.value.__cause__
        assert isinstance(cause, httpx.HTTPStatusError)
        assert cause.response.status_code == 418
        await model.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("wire", WIRES)
async def test_connection_is_reused_after_an_abandoned_stream(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream closed midway must not leave its unread bytes for the next response.
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", wire)
    sim = OpenAIChatSimulator("openai")
    sim.play(TruncatedStream(abort=True), TextReply("after the break"), TextReply("again"))
    async with sim.serve() as base_url:
        model = _model(base_url, max_retries=0)
        with pytest.raises(ModelError):
            await collect_stream(model, _request())
        assert (await model.complete(_request())).message.content == "after the break"
        _, streamed = await collect_stream(model, _request())
        assert streamed.message.content == "again"
        await model.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("wire", WIRES)
async def test_a_stream_left_midway_does_not_poison_the_next_call(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", wire)
    sim = OpenAIChatSimulator("openai")
    sim.play(Slow(0.5, TextReply("first part, then a pause, then the rest")), TextReply("next"))
    async with sim.serve() as base_url:
        model = _model(base_url, max_retries=0)
        async with aclosing(model.stream(_request())) as events:
            async for _ in events:
                break  # hang up with bytes still due
        assert (await model.complete(_request())).message.content == "next"
        await model.aclose()


# -- event-stream lines -------------------------------------------------------------------


async def _chunks(parts: list[str]) -> AsyncIterator[str]:
    for part in parts:
        yield part


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
    text=st.text(alphabet=st.sampled_from(["a", "é", "\r", "\n", "\u2028", " "]), max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_lines_do_not_depend_on_chunking(text: str, cuts: list[int]) -> None:
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    parts = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert anyio.run(_lines, parts) == _reference(text)
