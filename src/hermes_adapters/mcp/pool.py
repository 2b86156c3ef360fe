"""Shared MCP servers: one connection per server name, reference-counted across agents.

Starting a stdio server per agent would multiply processes (and their memory) by the
number of agents, and a parent and its delegated children usually want the same servers.
So agents *acquire* a source by name and *release* it when done; the first acquire creates
it (the connection itself opens lazily, on first use), the last release closes it, which
for a stdio server stops its whole process group. The pool's task group owns every
connection's task, so ``async with MCPPool() as pool`` is the one place where they live
and die.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from hermes_adapters.mcp.config import MCPServerConfig
from hermes_adapters.mcp.source import MCPToolSource
from hermes_core.ports.interaction import Clarifier
from hermes_core.ports.llm import ChatModel

__all__ = ["MCPPool"]

log = logging.getLogger("hermes.mcp")


@dataclass(slots=True)
class _Lease:
    source: MCPToolSource
    config: MCPServerConfig
    refs: int


class MCPPool:
    """Reference-counted MCP sources, shared by the agents of one host.

    The clarifier, sampler and event listener given here serve every source the pool
    creates (a server is shared, so its callbacks are the host's, not one agent's).
    """

    def __init__(
        self,
        *,
        clarifier: Clarifier | None = None,
        sampler: ChatModel | None = None,
        on_event: Callable[[Any], None] | None = None,
    ) -> None:
        self._clarifier = clarifier
        self._sampler = sampler
        self._on_event = on_event
        self._leases: dict[str, _Lease] = {}
        self._lock = anyio.Lock()
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> MCPPool:
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.aclose()
        finally:
            stack, self._stack, self._tg = self._stack, None, None
            if stack is not None:
                # the body's exception is not handed to the task group, which would wrap it
                # in an ExceptionGroup; the connections' tasks never raise into the group
                await stack.aclose()

    def refcount(self, name: str) -> int:
        lease = self._leases.get(name)
        return lease.refs if lease is not None else 0

    @property
    def names(self) -> list[str]:
        return list(self._leases)

    async def acquire(self, name: str, config: MCPServerConfig) -> MCPToolSource:
        """The shared source for ``name``, created on first acquire.

        Raises:
            RuntimeError: the pool was not entered.
            ValueError: ``name`` is held with a different configuration (two meanings for
                one server name would route calls to the wrong server).
        """
        if self._tg is None:
            raise RuntimeError("enter the pool (`async with MCPPool() as pool`) before acquiring")
        async with self._lock:
            lease = self._leases.get(name)
            if lease is not None:
                if lease.config != config:
                    raise ValueError(
                        f"MCP server {name!r} is already in use with a different configuration"
                    )
                lease.refs += 1
                return lease.source
            source = MCPToolSource(
                name,
                config,
                clarifier=self._clarifier,
                sampler=self._sampler,
                on_event=self._on_event,
            )
            source.attach(self._tg)
            self._leases[name] = _Lease(source, config, 1)
            return source

    async def release(self, name: str | MCPToolSource) -> None:
        """Drop one reference; the last one closes the source (and its server).

        Raises:
            KeyError: nothing is held under that name.
        """
        key = name if isinstance(name, str) else name.name
        async with self._lock:
            lease = self._leases.get(key)
            if lease is None:
                raise KeyError(f"MCP server {key!r} is not held by this pool")
            lease.refs -= 1
            if lease.refs > 0:
                return
            del self._leases[key]
        log.info("MCP %s: last reference released; closing", key)
        await lease.source.aclose()

    async def aclose(self) -> None:
        """Close every source, whatever its count; idempotent."""
        async with self._lock:
            leases, self._leases = list(self._leases.values()), {}
        async with anyio.create_task_group() as tg:
            for lease in leases:
                tg.start_soon(_close, lease.source)


async def _close(source: MCPToolSource) -> None:
    """Close one source; servers stop side by side, and one failure spares the rest."""
    try:
        await source.aclose()
    except Exception:
        log.exception("MCP %s: closing failed", source.name)
