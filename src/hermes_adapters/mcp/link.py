"""One MCP session, from connect to close, owned by the single task that runs it.

The SDK's transports and ``ClientSession`` are context managers holding cancel scopes;
entering them in one task and leaving them in another raises "exited cancel scope in a
different task" (python-sdk #79, #577, #922). So :meth:`Link.run` enters and exits them
itself, in one task; everyone else talks to it through events (stop, finished) and the
session's request methods, which are safe from any task. Starting the server and
``initialize`` share one deadline, ``connect_timeout``, so a hung server cannot hang the
agent; an idle session is pinged (``keepalive_interval``) so a dead one is noticed early,
and recycled after ``idle_timeout_seconds``/``max_lifetime_seconds``.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import httpx2
import mcp_types as types
from anyio.abc import TaskStatus
from mcp.client.session import ClientSession, ElicitationFnT, LoggingFnT, SamplingFnT
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from hermes_adapters.mcp._stdio import STDIN_GRACE, child_environment, stdio_transport
from hermes_adapters.mcp.config import MCPServerConfig
from hermes_adapters.mcp.errors import ConnectFailed, describe

__all__ = ["Link", "SessionCallbacks"]

log = logging.getLogger("hermes.mcp")

CLIENT_INFO = types.Implementation(name="hermes", version="0.1.0")
CLOSE_GRACE = 10.0
"""Seconds a session gets to shut down politely before its owner task is cancelled."""
HTTP_TIMEOUT = 30.0
"""Seconds for an HTTP connect, write or pool wait (reads get the call timeout)."""
PING_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class SessionCallbacks:
    """What the session answers with; ``None`` leaves the capability unadvertised."""

    sampling: SamplingFnT | None = None
    elicitation: ElicitationFnT | None = None
    logging: LoggingFnT | None = None
    on_tools_changed: Callable[[], None] | None = None


class _WatchedStream:
    """The session's read stream, reporting end-of-stream (the server went away) to its link."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_eof()
            raise

    def __aiter__(self) -> _WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedStream:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Link:
    """One session, from connect to close, owned by the task running :meth:`run`."""

    def __init__(
        self,
        server: str,
        config: MCPServerConfig,
        callbacks: SessionCallbacks,
        on_spawn: Callable[[int], None],
    ) -> None:
        self._server = server
        self._on_spawn = on_spawn
        self._config = config
        self._callbacks = callbacks
        self.session: ClientSession | None = None
        self.initialize_result: types.InitializeResult | None = None
        self.pid: int | None = None
        self.stop_reason: str | None = None
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.inflight = 0
        self.last_used = self.started_at = 0.0
        self._stop = anyio.Event()
        self._finished = anyio.Event()
        self._scope = anyio.CancelScope()
        self._forced = False

    @property
    def usable(self) -> bool:
        return self.session is not None and not self._stop.is_set()

    def stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()

    def begin(self) -> None:
        self.inflight += 1
        self.last_used = anyio.current_time()

    def end(self) -> None:
        self.inflight -= 1
        self.last_used = anyio.current_time()

    async def close(self) -> None:
        """Ask the owner task to shut down; force it after :data:`CLOSE_GRACE`."""
        self.stop("closed by the client")
        with anyio.move_on_after(CLOSE_GRACE):
            await self._finished.wait()
        if not self._finished.is_set():
            self._forced = True
            self._scope.cancel()
            await self._finished.wait()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The owner task: connect, report ready, serve until stopped, then unwind."""
        started = False
        try:
            with self._scope:
                self._scope.deadline = anyio.current_time() + self._config.connect_timeout
                async with self._open() as (read, write):
                    watched = _WatchedStream(
                        read, lambda: self.stop("the server closed the stream")
                    )
                    async with self._session(watched, write) as session:
                        self.initialize_result = await session.initialize()
                        self._scope.deadline = math.inf
                        self.session = session
                        self.started_at = self.last_used = anyio.current_time()
                        started = True
                        task_status.started()
                        await self._serve(session)
            if not started:
                why = "was closed" if self._forced else "timed out"
                raise ConnectFailed(f"connect {why} after {self._config.connect_timeout} s")
        except ConnectFailed as exc:
            raise ConnectFailed(self._with_stderr(str(exc))) from exc
        except Exception as exc:
            if not started:
                raise ConnectFailed(self._with_stderr(describe(exc))) from exc
            self.stop(describe(exc))
        finally:
            self.stop(self.stop_reason or "closed")
            self.session = None
            self._finished.set()
            if started:
                log.info("MCP %s: session ended (%s)", self._server, self.stop_reason)

    def _with_stderr(self, message: str) -> str:
        if not self.stderr_tail:
            return message
        return f"{message}; server stderr: {' | '.join(list(self.stderr_tail)[-5:])}"

    def _session(self, read: Any, write: Any) -> ClientSession:
        callbacks = self._callbacks
        return ClientSession(
            read,
            write,
            sampling_callback=callbacks.sampling,
            elicitation_callback=callbacks.elicitation,
            logging_callback=callbacks.logging,
            message_handler=self._on_message,
            client_info=CLIENT_INFO,
        )

    async def _on_message(self, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, Exception):
            log.debug("MCP %s: transport reported %s", self._server, describe(message))
        elif (
            isinstance(message, types.ToolListChangedNotification)
            and self._callbacks.on_tools_changed is not None
        ):
            self._callbacks.on_tools_changed()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self._config
        transport = config.effective_transport
        if transport == "stdio":
            assert config.command is not None
            env = child_environment(config.resolved_env())

            def remember(pid: int) -> None:
                self.pid = pid
                self._on_spawn(pid)

            async with stdio_transport(
                config.command,
                config.args,
                env,
                cwd=config.cwd,
                label=f"MCP {self._server}",
                on_spawn=remember,
                stderr_tail=self.stderr_tail,
                stdin_grace=lambda: STDIN_GRACE if self.initialize_result else 0.0,
            ) as streams:
                yield streams
            return
        assert config.url is not None
        read_timeout = max(config.timeout, 2 * config.keepalive_interval, HTTP_TIMEOUT)
        if transport == "sse":
            async with sse_client(
                config.url,
                headers=config.resolved_headers(),
                timeout=HTTP_TIMEOUT,
                sse_read_timeout=read_timeout,
            ) as (read, write):
                yield read, write
            return
        timeout = httpx2.Timeout(HTTP_TIMEOUT, read=read_timeout)
        async with (
            httpx2.AsyncClient(headers=config.resolved_headers(), timeout=timeout) as client,
            streamable_http_client(config.url, http_client=client) as (read, write),
        ):
            yield read, write

    async def _serve(self, session: ClientSession) -> None:
        async with anyio.create_task_group() as tg:
            if self._config.keepalive_interval:
                tg.start_soon(self._keepalive, session)
            if self._config.idle_timeout_seconds or self._config.max_lifetime_seconds:
                tg.start_soon(self._recycle)
            await self._stop.wait()
            tg.cancel_scope.cancel()

    async def _keepalive(self, session: ClientSession) -> None:
        """Ping an idle session so a dead one is noticed before the next call needs it."""
        interval = self._config.keepalive_interval
        while True:
            await anyio.sleep(interval)
            if self.inflight:
                continue
            try:
                with anyio.fail_after(min(PING_TIMEOUT, interval)):
                    await session.send_ping()
            except Exception as exc:
                self.stop(f"keepalive ping failed: {describe(exc)}")
                return

    async def _recycle(self) -> None:
        """Close an idle or old session between calls; the next call starts a fresh one."""
        idle = self._config.idle_timeout_seconds
        lifetime = self._config.max_lifetime_seconds
        while True:
            due = math.inf
            if idle:
                due = self.last_used + idle
            if lifetime:
                due = min(due, self.started_at + lifetime)
            now = anyio.current_time()
            if now >= due and not self.inflight:
                self.stop(
                    "idle timeout" if idle and now >= self.last_used + idle else "max lifetime"
                )
                return
            await anyio.sleep(max(due - now, 0.5))
