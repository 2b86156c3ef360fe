"""Session-wide real MCP servers for the integration tests (see ``mcp_support``).

HTTP servers start once per session on free loopback ports and stop with their whole
process group at the end; a missing server fails the tests that need it. Our server runs
with ``--collide`` here, so every HTTP listing also exercises the collision rule. Tests use
these shared servers wherever the transport does not matter: starting a Python MCP server
costs seconds (importing the SDK), a new HTTP session costs milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import HttpServer, everything_http_server, hermes_http_server


@pytest.fixture(scope="session")
def server_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-server-logs")


@pytest.fixture(scope="session")
def hermes_http(server_logs: Path) -> Iterator[HttpServer]:
    yield from hermes_http_server("streamable-http", server_logs, "--collide")


@pytest.fixture(scope="session")
def hermes_sse(server_logs: Path) -> Iterator[HttpServer]:
    yield from hermes_http_server("sse", server_logs, "--collide")


@pytest.fixture(scope="session")
def everything_http(server_logs: Path) -> Iterator[HttpServer]:
    yield from everything_http_server("streamableHttp", server_logs)


@pytest.fixture(scope="session")
def everything_sse(server_logs: Path) -> Iterator[HttpServer]:
    yield from everything_http_server("sse", server_logs)
