"""Lifecycle guarantees with real processes: reconnect + retry, cancelled connects, parking,
and the pool's reference counting. Process checks read /proc, so a zombie counts as dead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketListener, SocketStream
from anyio.streams.stapled import MultiListener
from mcp_support import (
    HttpServer,
    everything_http_server,
    everything_stdio,
    group_alive,
    hermes_http_server,
    hermes_stdio,
    http_config,
    process_alive,
)

from hermes_adapters.mcp import MCPPool, MCPServerConfig, MCPToolSource

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


def text(result: object) -> str:
    return str(json.loads(result.content)["result"])  # type: ignore[attr-defined]


async def test_stdio_server_that_crashes_or_is_killed_is_restarted_and_the_call_retried(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "crashed-once"
    async with MCPToolSource("crashy", hermes_stdio()) as source:
        await source.list_tools()
        first_pid = source.connection.pid
        assert first_pid is not None
        # the server dies in the middle of this call; the retry reaches a new server
        result = await source.call("mcp__crashy__crash", {"marker": str(marker)})
        assert not result.is_error, result
        assert text(result) == "recovered after crash"
        assert marker.read_text() == str(first_pid)
        assert source.connection.generation == 2
        second_pid = source.connection.pid
        assert second_pid not in (None, first_pid)
        assert not process_alive(first_pid)

        # killed from outside between calls: the next call reconnects first
        os.killpg(second_pid, signal.SIGKILL)
        assert text(await source.call("mcp__crashy__echo", {"text": "two"})) == "Echo: two"
        assert source.connection.generation == 3
        third_pid = source.connection.pid
        assert third_pid not in (None, second_pid)
    assert not group_alive(third_pid)
    assert source.connection.spawned_pids == [first_pid, second_pid, third_pid]


@pytest.fixture
def own_http_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HttpServer]:
    """A private server (the test restarts it): ours or server-everything, per transport."""
    kind, mode = request.param
    if kind == "hermes":
        yield from hermes_http_server(mode, tmp_path)
    else:
        yield from everything_http_server(mode, tmp_path)


@pytest.mark.parametrize(
    ("own_http_server", "transport"),
    [
        (("hermes", "streamable-http"), "streamable_http"),  # 404 "Session not found"
        (("everything", "streamableHttp"), "streamable_http"),  # 400 "No valid session ID"
        (("everything", "sse"), "sse"),  # the event stream ends
    ],
    indirect=["own_http_server"],
    ids=["hermes-http", "everything-http", "everything-sse"],
)
async def test_http_server_restart_reconnects_and_retries(
    own_http_server: HttpServer, transport: str
) -> None:
    config = http_config(own_http_server, transport)
    async with MCPToolSource("remote", config) as source:
        names = {s.name for s in await source.list_tools()}
        echo = "mcp__remote__echo"
        assert echo in names
        arg = "text" if "mcp__remote__crash" in names else "message"
        assert text(await source.call(echo, {arg: "before"})) == "Echo: before"
        own_http_server.restart()  # the new process knows nothing of our session
        result = await source.call(echo, {arg: "after"})
        assert not result.is_error, result
        assert text(result) == "Echo: after"
        assert source.connection.generation == 2


SLEEPER = """
import os, socket, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as report:
    report.sendall(f"{os.getpid()} {child.pid}".encode())
time.sleep(600)
"""
"""A "server" that never answers initialize, has a child of its own, and reports both pids
over TCP (stdout belongs to the protocol), so the test waits on an event, not a timer."""


async def test_cancelled_connect_leaves_no_process_behind() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(SocketAttribute.local_port)
        async with MCPToolSource("hung", sleeper(port)) as source:
            async with anyio.create_task_group() as tg:
                tg.start_soon(source.list_tools)
                leader, child = await reported_pids(listener)
                assert process_alive(leader) and process_alive(child)
                tg.cancel_scope.cancel()
            assert not group_alive(leader)
            assert not process_alive(leader) and not process_alive(child)
            assert source.connection.spawned_pids == [leader]


async def test_connect_timeout_kills_the_group_and_parks_the_server() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(SocketAttribute.local_port)
        config = sleeper(port, connect_timeout=1.0, initial_connect_attempts=1)
        async with MCPToolSource("slowpoke", config) as source:
            async with anyio.create_task_group() as tg:
                tg.start_soon(source.list_tools)
                leader, child = await reported_pids(listener)
            assert await source.list_tools() == []  # parked
            assert not group_alive(leader) and not process_alive(child)
            assert source.parked and "timed out" in (source.connection.park_reason or "")
            result = await source.call("mcp__slowpoke__anything", {})
            assert result.is_error


def sleeper(port: int, **overrides: object) -> MCPServerConfig:
    return MCPServerConfig.model_validate(
        {"command": sys.executable, "args": ["-c", SLEEPER, str(port)], **overrides}
    )


async def reported_pids(listener: MultiListener[SocketStream]) -> list[int]:
    with anyio.fail_after(15):
        first = listener.listeners[0]
        assert isinstance(first, SocketListener)
        async with await first.accept() as stream:
            data = b""
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    data += await stream.receive()
    return [int(p) for p in data.split()]


def failing(park_seconds: float) -> MCPServerConfig:
    """A server that writes a secret-bearing line to stderr and exits at once."""
    return MCPServerConfig(
        command=sys.executable,
        args=["-c", "import sys; sys.stderr.write('boom: bad token=abc123\\n'); sys.exit(3)"],
        initial_connect_attempts=3,
        backoff_initial=0.01,
        park_seconds=park_seconds,
    )


async def test_repeated_failures_park_the_server() -> None:
    async with MCPToolSource("flaky", failing(park_seconds=300)) as source:
        assert await source.list_tools() == []
        assert source.parked and len(source.connection.spawned_pids) == 3
        reason = source.connection.park_reason or ""
        assert "boom" in reason and "abc123" not in reason and "[REDACTED]" in reason
        assert await source.list_tools() == []  # parked: no new process is started
        result = await source.call("mcp__flaky__echo", {})
        assert result.is_error and "parked" in result.content
        assert len(source.connection.spawned_pids) == 3


async def test_a_parked_server_is_probed_once_when_the_park_ends() -> None:
    async with MCPToolSource("flaky", failing(park_seconds=0)) as source:
        assert await source.list_tools() == []
        assert len(source.connection.spawned_pids) == 3
        assert await source.list_tools() == []  # one probe, which fails and parks again
        assert len(source.connection.spawned_pids) == 4
        assert source.parked


async def test_pool_shares_a_server_and_the_last_release_stops_its_group() -> None:
    config = everything_stdio()
    async with MCPPool() as pool:
        first = await pool.acquire("shared", config)
        second = await pool.acquire("shared", config)
        assert first is second and pool.refcount("shared") == 2
        with pytest.raises(ValueError, match="different configuration"):
            await pool.acquire("shared", everything_stdio(timeout=5))
        await first.list_tools()
        assert text(await first.call("mcp__shared__echo", {"message": "a"})) == "Echo: a"
        pid = first.connection.pid
        assert pid is not None
        await pool.release("shared")
        assert process_alive(pid)
        assert text(await second.call("mcp__shared__echo", {"message": "b"})) == "Echo: b"
        await pool.release(second)
        assert pool.refcount("shared") == 0
        assert not group_alive(pid)
        closed = await second.call("mcp__shared__echo", {"message": "c"})
        assert closed.is_error and "closed" in closed.content
        other = await pool.acquire("other", everything_stdio())
        await other.list_tools()
        other_pid = other.connection.pid
        assert other_pid is not None
    assert not group_alive(other_pid)  # leaving the pool closes what is still held
