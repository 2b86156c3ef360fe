"""Registering tools from dynamic sources (MCP servers) into an agent's registry.

A source's tools enter the registry like any other tool, so scheduling, limits and error
handling apply unchanged. A name that collides with a tool already registered fails
closed: the existing owner keeps the name and the newcomer is skipped with a logged
reason, never silently replacing a built-in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hermes_core.ports.mcp import ToolSource
from hermes_core.ports.tools import ToolContext, ToolResult, ToolSpec
from hermes_core.registry import ToolRegistry

__all__ = ["SourceTool", "register_sources"]

log = logging.getLogger("hermes.sources")


class SourceTool:
    """One tool of a :class:`ToolSource`, callable like a built-in."""

    def __init__(self, source: ToolSource, spec: ToolSpec) -> None:
        self._source = source
        self._spec = spec

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def available(self) -> bool:
        return True

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await self._source.call(self._spec.name, args)


async def register_sources(registry: ToolRegistry, sources: Sequence[ToolSource]) -> list[str]:
    """List every source's tools into ``registry``; returns the names that were skipped.

    A source that fails to list is skipped whole (logged): one dead server must not take
    the agent down.
    """
    skipped: list[str] = []
    for source in sources:
        try:
            specs = await source.list_tools()
        except Exception:
            log.exception("tool source %r could not list its tools; skipped", source.name)
            continue
        for spec in specs:
            if spec.name in registry:
                log.warning(
                    "tool %r from source %r collides with a registered tool; skipped",
                    spec.name,
                    source.name,
                )
                skipped.append(spec.name)
                continue
            registry.register(SourceTool(source, spec))
    return skipped
