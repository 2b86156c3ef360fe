"""MCP adapter: external tool servers over stdio, Streamable HTTP and SSE.

:class:`MCPToolSource` is one server as a :class:`~hermes_core.ports.mcp.ToolSource`;
:class:`MCPPool` shares sources across agents by reference count; :class:`MCPServerConfig`
is the ``mcp_servers.<name>`` configuration. See ``docs/mcp.md``.
"""

from hermes_adapters.mcp.config import MCPConfigError, MCPServerConfig, SamplingConfig, ToolFilter
from hermes_adapters.mcp.errors import (
    ConnectFailed,
    ConnectionClosed,
    MCPConnectionError,
    ServerParked,
)
from hermes_adapters.mcp.naming import normalize_schema, registered_name, sanitize
from hermes_adapters.mcp.pool import MCPPool
from hermes_adapters.mcp.results import scrub
from hermes_adapters.mcp.source import MCPToolSource

__all__ = [
    "ConnectFailed",
    "ConnectionClosed",
    "MCPConfigError",
    "MCPConnectionError",
    "MCPPool",
    "MCPServerConfig",
    "MCPToolSource",
    "SamplingConfig",
    "ServerParked",
    "ToolFilter",
    "normalize_schema",
    "registered_name",
    "sanitize",
    "scrub",
]
