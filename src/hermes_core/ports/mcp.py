"""The tool-source port: a dynamic catalogue of tools, such as an MCP server.

Unlike a static :class:`~hermes_core.ports.tools.Tool`, a source discovers its tools at
run time, may lose its connection, and owns resources that must be released.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from hermes_core.ports.tools import ToolResult, ToolSpec

__all__ = ["ToolSource"]


@runtime_checkable
class ToolSource(Protocol):
    """A named, connectable catalogue of tools (its toolset is ``mcp-<name>``)."""

    @property
    def name(self) -> str: ...

    async def list_tools(self) -> list[ToolSpec]: ...

    async def call(self, name: str, args: Mapping[str, Any]) -> ToolResult: ...

    async def aclose(self) -> None: ...
