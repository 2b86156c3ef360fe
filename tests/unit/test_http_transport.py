"""The HTTP transport is an adapter detail: aiohttp by default, httpx's pool selectable."""

from __future__ import annotations

import httpx
import pytest
from httpx_aiohttp import AiohttpTransport

from hermes_adapters.llm._http import Endpoint, default_transport
from hermes_core.errors import ConfigError


def _transport_of(endpoint: Endpoint) -> object:
    return endpoint._http()._transport


@pytest.mark.anyio
async def test_default_is_the_aiohttp_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_HTTP_TRANSPORT", raising=False)
    endpoint = Endpoint("http://127.0.0.1:9/v1")
    assert isinstance(_transport_of(endpoint), AiohttpTransport)
    await endpoint.aclose()


@pytest.mark.anyio
async def test_httpx_pool_is_selectable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", "httpx")
    endpoint = Endpoint("http://127.0.0.1:9/v1")
    assert isinstance(_transport_of(endpoint), httpx.AsyncHTTPTransport)
    await endpoint.aclose()
    explicit = Endpoint("http://127.0.0.1:9/v1", transport="aiohttp")
    assert isinstance(_transport_of(explicit), AiohttpTransport)
    await explicit.aclose()


def test_unknown_transport_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HTTP_TRANSPORT", "curl")
    with pytest.raises(ConfigError, match="HERMES_HTTP_TRANSPORT='curl'"):
        default_transport()
