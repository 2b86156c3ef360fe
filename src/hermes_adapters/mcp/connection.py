"""One MCP server's connection across sessions: healed on failure, parked when hopeless.

- **Dead sessions heal.** A closed stream, ``ClosedResourceError``, "Session terminated"
  (HTTP 404 on a known session id) or a crashed child marks the session dead; the caller
  reconnects under a lock (concurrent callers do not stampede: the first reconnects, the
  rest reuse its session) with jittered exponential backoff, then retries the call once.
  The old session, and a stdio server's process group, is reaped before a new one starts.
- **Hopeless servers park.** After the configured attempts the server is parked: calls
  fail fast with a clear error until ``park_seconds`` pass, then one probe is allowed.
- **Close means gone.** :meth:`MCPConnection.aclose` cancels a connect in progress and
  waits for the session's owner task, so nothing outlives it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from hermes_adapters.mcp.config import MCPServerConfig
from hermes_adapters.mcp.errors import (
    ConnectFailed,
    ConnectionClosed,
    ServerParked,
    describe,
    is_dead_session,
)
from hermes_adapters.mcp.link import Link, SessionCallbacks

__all__ = ["MCPConnection"]

log = logging.getLogger("hermes.mcp")

T = TypeVar("T")


class MCPConnection:
    """The connection to one server, across reconnects. See the module docstring."""

    def __init__(
        self, server: str, config: MCPServerConfig, callbacks: SessionCallbacks | None = None
    ) -> None:
        self.server = server
        self.config = config
        self._callbacks = callbacks or SessionCallbacks()
        self._lock = anyio.Lock()
        self._tg: TaskGroup | None = None
        self._link: Link | None = None
        self._connecting: anyio.CancelScope | None = None
        self._closed = False
        self._parked_until: float | None = None
        self.park_reason: str | None = None
        self.generation = 0
        """How many sessions were opened; a reconnect increments it."""
        self.spawned_pids: list[int] = []
        """Every stdio server process started, in order (each one a process group id)."""

    def attach(self, task_group: TaskGroup) -> None:
        """Host owner tasks in ``task_group`` (the pool's or the source's own)."""
        self._tg = task_group

    @property
    def parked(self) -> bool:
        return self._parked_until is not None

    @property
    def connected(self) -> bool:
        """Whether a live session is open right now (calls open one when it is not)."""
        link = self._link
        return link is not None and link.usable

    @property
    def pid(self) -> int | None:
        """The stdio server's pid (its process group id), while a session is open."""
        link = self._link
        return link.pid if link is not None and link.usable else None

    @property
    def initialize_result(self) -> types.InitializeResult | None:
        link = self._link
        return link.initialize_result if link is not None else None

    async def use(self, op: Callable[[ClientSession], Awaitable[T]]) -> T:
        """Run ``op`` on a live session; on a dead session reconnect and retry it once.

        Raises:
            ServerParked: the server is parked (or just got parked).
            ConnectionClosed: the connection was closed.
            Exception: whatever ``op`` raised, when it is not a dead session.
        """
        link = await self._ensure()
        try:
            return await self._run(link, op)
        except Exception as exc:
            if not is_dead_session(exc):
                raise
            reason = describe(exc)
        link.stop(reason)
        log.warning(
            "MCP %s: session lost (%s); reconnecting, then retrying once", self.server, reason
        )
        link = await self._reconnect(link)
        try:
            return await self._run(link, op)
        except Exception as exc:
            if is_dead_session(exc):
                link.stop(describe(exc))
            raise

    async def aclose(self) -> None:
        """Stop the session (and a stdio server's process group); idempotent."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        async with self._lock:
            link, self._link = self._link, None
            if link is not None:
                await link.close()

    # -- internals -------------------------------------------------------------------

    async def _run(self, link: Link, op: Callable[[ClientSession], Awaitable[T]]) -> T:
        session = link.session
        if session is None:
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed")
        link.begin()
        try:
            return await op(session)
        finally:
            link.end()

    async def _ensure(self) -> Link:
        link = self._link
        if link is not None and link.usable and not self._closed:
            return link
        async with self._lock:
            if self._closed:
                raise ConnectionClosed(f"the connection to MCP server {self.server!r} is closed")
            link = self._link
            if link is not None and link.usable:
                return link
            if self._check_parked():
                return await self._connect(1)
            first = self.generation == 0
            attempts = (
                self.config.initial_connect_attempts if first else self.config.reconnect_attempts
            )
            return await self._connect(attempts)

    async def _reconnect(self, failed: Link) -> Link:
        async with self._lock:
            if self._closed:
                raise ConnectionClosed(f"the connection to MCP server {self.server!r} is closed")
            link = self._link
            if link is not None and link is not failed and link.usable:
                return link  # another caller already reconnected
            return await self._connect(
                1 if self._check_parked() else self.config.reconnect_attempts
            )

    def park_message(self) -> str:
        """Why calls fail while the server is parked, and when it will be tried again."""
        left = max((self._parked_until or 0.0) - anyio.current_time(), 0.0)
        return (
            f"MCP server {self.server!r} is unavailable ({self.park_reason}); it is parked "
            f"and will be tried again in {left:.0f} s"
        )

    def _check_parked(self) -> bool:
        """True when parked but due for a probe; raises while the park lasts."""
        if self._parked_until is None:
            return False
        if anyio.current_time() < self._parked_until:
            raise ServerParked(self.park_message())
        return True

    async def _connect(self, attempts: int) -> Link:
        """Replace the session; the caller holds the lock."""
        if self._tg is None:
            raise RuntimeError(
                "an MCP source must be entered (`async with source:`) or acquired from an "
                "entered MCPPool before use"
            )
        old, self._link = self._link, None
        with anyio.CancelScope() as scope:
            self._connecting = scope
            try:
                if old is not None:
                    await old.close()  # reap the old session (and child) before a new one
                failure: str = "no attempt was made"
                for attempt in range(attempts):
                    if attempt:
                        await anyio.sleep(self._backoff(attempt))
                    link = Link(self.server, self.config, self._callbacks, self.spawned_pids.append)
                    try:
                        await self._tg.start(link.run)
                    except ConnectFailed as exc:
                        failure = str(exc)
                        log.warning(
                            "MCP %s: connect attempt %d/%d failed: %s",
                            self.server,
                            attempt + 1,
                            attempts,
                            failure,
                        )
                        continue
                    self._link = link
                    self.generation += 1
                    self._parked_until = self.park_reason = None
                    return link
                self._park(failure)
                raise ServerParked(
                    f"MCP server {self.server!r} is unavailable after {attempts} connect "
                    f"attempt(s): {failure}"
                )
            finally:
                self._connecting = None
        raise ConnectionClosed(f"the connection to MCP server {self.server!r} was closed")

    def _park(self, reason: str) -> None:
        self._parked_until = anyio.current_time() + self.config.park_seconds
        self.park_reason = reason
        log.error(
            "MCP %s: parked for %.0f s after repeated failures: %s",
            self.server,
            self.config.park_seconds,
            reason,
        )

    def _backoff(self, attempt: int) -> float:
        """Exponential from ``backoff_initial``, capped at ``backoff_max``, with ±20% jitter."""
        base = min(self.config.backoff_initial * 2 ** (attempt - 1), self.config.backoff_max)
        return float(base * random.uniform(0.8, 1.2))
