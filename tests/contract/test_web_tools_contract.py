"""The ``web`` toolset's tools pass :class:`ToolContract`, offline (``httpx.MockTransport``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hermes_adapters.tools.ssrf import UrlPolicy
from hermes_adapters.tools.web import TavilyBackend, WebExtractTool, WebSearchTool
from hermes_core.ports.tools import Tool
from hermes_core.testing.tools import ToolContract


def _page(request: httpx.Request) -> httpx.Response:
    html = "<html><head><title>Example</title></head><body><p>Example page.</p></body></html>"
    return httpx.Response(200, html=html)


def _search(request: httpx.Request) -> httpx.Response:
    results = [{"title": "Example", "url": "https://example.com/", "content": "An example."}]
    return httpx.Response(200, json={"results": results})


class TestWebExtractContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return WebExtractTool(
            lambda policy: httpx.AsyncClient(transport=httpx.MockTransport(_page)), UrlPolicy()
        )

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"urls": ["https://example.com/"], "char_limit": 2000}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {},
            {"urls": []},
            {"urls": "   "},
            {"urls": [None]},
            {"urls": [f"https://example.com/{i}" for i in range(6)]},
            {"urls": ["https://example.com/"], "char_limit": 1999},
            {"urls": ["https://example.com/"], "char_limit": True},
        ]


class TestWebSearchContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return WebSearchTool(
            TavilyBackend("tvly-test"),
            client_factory=lambda: httpx.AsyncClient(transport=httpx.MockTransport(_search)),
        )

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"query": "example", "limit": 3}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [{}, {"query": ""}, {"query": 3}, {"query": "q", "limit": 0}, {"limit": 5}]


class TestUnconfiguredWebSearchContract(ToolContract):
    """With no backend the tool is hidden, and a direct call is still an error, not a crash."""

    @pytest.fixture
    def tool(self) -> Tool:
        return WebSearchTool(None)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"query": "example"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [{}, {"query": "example"}]
