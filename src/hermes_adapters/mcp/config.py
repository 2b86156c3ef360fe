"""Configuration of one MCP server (``mcp_servers.<name>`` in the user's config).

The model is strict (unknown keys are errors) because a typo in a security-relevant key,
say ``tool.exclude``, must not silently widen what a server may do. Secrets are written as
``${env:VAR}`` or ``${VAR}`` references in ``env`` and ``headers`` and resolved only when
the server is started (:meth:`MCPServerConfig.resolved_env`): the model itself, its
``repr`` and any log line that prints it hold the reference, never the secret, and a
disabled server with a missing variable never fails.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "KEEPALIVE_FLOOR",
    "MCPConfigError",
    "MCPServerConfig",
    "SamplingConfig",
    "ToolFilter",
    "Transport",
    "interpolate",
]

Transport = Literal["stdio", "streamable_http", "sse"]

KEEPALIVE_FLOOR = 5.0
"""Seconds; a shorter keepalive would turn pings into load on the server."""

_REFERENCE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")


class MCPConfigError(ValueError):
    """A server's configuration cannot be used (missing variable, wrong transport keys)."""


def interpolate(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace ``${env:VAR}`` and ``${VAR}`` in ``value`` with the variable's value.

    Raises:
        MCPConfigError: a referenced variable is not set; the message names the variable,
            never a value, so it is safe to log.
    """
    source = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in source:
            raise MCPConfigError(f"environment variable {name!r} is not set")
        return source[name]

    return _REFERENCE.sub(replace, value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolFilter(_Strict):
    """Which server tools become agent tools, by ``fnmatch`` pattern on the server's name.

    When ``include`` is non-empty it alone decides (include wins over exclude): an allow
    list is the safer reading of a config that has both.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def allows(self, tool_name: str) -> bool:
        if self.include:
            return any(fnmatch.fnmatchcase(tool_name, p) for p in self.include)
        return not any(fnmatch.fnmatchcase(tool_name, p) for p in self.exclude)


class SamplingConfig(_Strict):
    """Limits on serving a server's ``sampling/createMessage`` with the host's model.

    Sampling spends the user's tokens on the server's behalf, so it is capped per request
    (``max_tokens_cap``), per minute (``max_rpm``) and in time (``timeout``).
    """

    enabled: bool = True
    model: str | None = None
    max_tokens_cap: int = Field(default=4096, gt=0)
    timeout: float = Field(default=30.0, gt=0)
    max_rpm: int = Field(default=10, ge=0)
    allowed_models: tuple[str, ...] = ()
    log_level: Literal["debug", "info", "warning"] = "info"


class MCPServerConfig(_Strict):
    """One server: how to reach it, how long to wait, and what to expose.

    ``transport`` defaults from the keys given: ``command`` means stdio, ``url`` means
    Streamable HTTP; set ``transport: sse`` for the older SSE transport.
    """

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    transport: Transport | None = None
    enabled: bool = True

    timeout: float = Field(default=300.0, gt=0)
    """Seconds one tool call may take."""
    connect_timeout: float = Field(default=60.0, gt=0)
    """Seconds to start the server (or open the connection) and finish ``initialize``."""
    keepalive_interval: float = Field(default=180.0, ge=0)
    """Seconds between pings on an idle connection (0 = off, else at least 5)."""
    idle_timeout_seconds: float = Field(default=0.0, ge=0)
    """Close a connection unused this long; the next call reconnects (0 = never)."""
    max_lifetime_seconds: float = Field(default=0.0, ge=0)
    """Recycle a connection this old once it is idle (0 = never)."""

    supports_parallel_tool_calls: bool = False
    tools: ToolFilter = Field(default_factory=ToolFilter)
    resources: bool = True
    """Offer ``list_resources``/``read_resource`` when the server advertises resources."""
    prompts: bool = True
    """Offer ``list_prompts``/``get_prompt`` when the server advertises prompts."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)

    reconnect_attempts: int = Field(default=5, ge=1)
    """Connection attempts after a live session dies, before the server is parked."""
    initial_connect_attempts: int = Field(default=3, ge=1)
    """Connection attempts for the very first connect, before the server is parked."""
    backoff_initial: float = Field(default=1.0, ge=0)
    backoff_max: float = Field(default=60.0, ge=0)
    park_seconds: float = Field(default=300.0, ge=0)
    """How long a parked server is left alone before the next use probes it again."""

    @model_validator(mode="after")
    def _check_transport(self) -> MCPServerConfig:
        transport = self.effective_transport
        if transport == "stdio":
            if not self.command:
                raise ValueError("a stdio MCP server needs 'command'")
            if self.url or self.headers:
                raise ValueError("'url'/'headers' do not apply to a stdio MCP server")
        else:
            if not self.url:
                raise ValueError(f"an MCP server over {transport} needs 'url'")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError("an MCP server 'url' must be http:// or https://")
            if self.command or self.args or self.env or self.cwd:
                raise ValueError("'command'/'args'/'env'/'cwd' apply only to stdio servers")
        if 0 < self.keepalive_interval < KEEPALIVE_FLOOR:
            raise ValueError(f"keepalive_interval must be 0 or at least {KEEPALIVE_FLOOR} s")
        return self

    @property
    def effective_transport(self) -> Transport:
        if self.transport is not None:
            return self.transport
        return "stdio" if self.command else "streamable_http"

    def resolved_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The server's own ``env`` with references resolved (see :func:`interpolate`)."""
        return {k: interpolate(v, environ) for k, v in self.env.items()}

    def resolved_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The HTTP ``headers`` with references resolved (see :func:`interpolate`)."""
        return {k: interpolate(v, environ) for k, v in self.headers.items()}
