"""Helpers for the MCP integration tests: real servers, no mocks, loopback only.

Three servers are used: our own (``tests/mcp_servers/hermes_test_server.py``) over stdio,
Streamable HTTP and SSE; ``@modelcontextprotocol/server-everything`` (npm, installed into
``.node`` by ``scripts/install-mcp-test-servers.sh``) over the same three; and
``mcp-server-time`` (PyPI) over stdio. A missing server FAILS the tests that need it, with
the install command in the message: a skipped MCP suite would hide a broken CI setup.

HTTP servers are started once per session on free loopback ports (server-everything
listens on every interface, so only 127.0.0.1 is ever connected to) and stopped with
their whole process group at the end.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from hermes_adapters.mcp import MCPServerConfig

ROOT = Path(__file__).resolve().parents[2]
HERMES_SERVER = ROOT / "tests" / "mcp_servers" / "hermes_test_server.py"
EVERYTHING = (
    ROOT / ".node" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist"
) / "index.js"
INSTALL_HINT = "run `scripts/install-mcp-test-servers.sh` (it installs the MCP test servers)"
READY_TIMEOUT = 30.0

FAST = {"backoff_initial": 0.05, "backoff_max": 0.2, "connect_timeout": 20.0}
"""Config overrides that keep reconnect tests quick."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_everything() -> Path:
    if not EVERYTHING.is_file():
        pytest.fail(f"@modelcontextprotocol/server-everything is not installed; {INSTALL_HINT}")
    return EVERYTHING


def require_time_server() -> None:
    if importlib.util.find_spec("mcp_server_time") is None:
        pytest.fail(f"mcp-server-time is not installed in this environment; {INSTALL_HINT}")


def hermes_stdio(*extra: str, **overrides: object) -> MCPServerConfig:
    """Our test server over stdio."""
    return MCPServerConfig.model_validate(
        {
            "command": sys.executable,
            "args": [str(HERMES_SERVER), "stdio", *extra],
            **FAST,
            **overrides,
        }
    )


def everything_stdio(**overrides: object) -> MCPServerConfig:
    return MCPServerConfig.model_validate(
        {"command": "node", "args": [str(require_everything()), "stdio"], **FAST, **overrides}
    )


class HttpServer:
    """A server process listening on a loopback port, in its own process group."""

    def __init__(self, argv: list[str], port: int, log_path: Path, env: dict[str, str]) -> None:
        self.argv = argv
        self.port = port
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Wait until the port accepts connections; fail fast if the server exits."""
        assert self.process is not None
        for _ in range(int(READY_TIMEOUT / 0.05)):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                pass
            try:
                code = self.process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(f"{self.argv} exited with {code}: {self.log_path.read_text()[-2000:]}")
        pytest.fail(f"{self.argv} did not listen on port {self.port} within {READY_TIMEOUT} s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(timeout=2)
                    break
                except subprocess.TimeoutExpired:
                    continue
            process.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        self.stop()
        self.start()


def hermes_http_server(transport: str, tmp: Path, *extra: str) -> Iterator[HttpServer]:
    port = free_port()
    server = HttpServer(
        [sys.executable, str(HERMES_SERVER), transport, "--port", str(port), *extra],
        port,
        tmp / f"hermes-{transport}-{port}.log",
        dict(os.environ),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def everything_http_server(mode: str, tmp: Path) -> Iterator[HttpServer]:
    port = free_port()
    server = HttpServer(
        ["node", str(require_everything()), mode],
        port,
        tmp / f"everything-{mode}-{port}.log",
        {**os.environ, "PORT": str(port)},
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def http_config(server: HttpServer, transport: str, **overrides: object) -> MCPServerConfig:
    """A client config for ``server``: ``/mcp`` for Streamable HTTP, ``/sse`` for SSE."""
    path = "/sse" if transport == "sse" else "/mcp"
    return MCPServerConfig.model_validate(
        {
            "url": f"http://127.0.0.1:{server.port}{path}",
            "transport": transport,
            **FAST,
            **overrides,
        }
    )


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in process group ``pgid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
