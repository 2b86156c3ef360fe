"""Why an MCP server cannot be used, and which failures mean its session is dead.

Kept apart so the link, the connection and the source agree on one definition of a dead
session: the retry-once rule depends on telling "the server went away" from "the request
failed", and a request failure must never be retried behind the model's back.
"""

from __future__ import annotations

import re

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError

from hermes_adapters.mcp.results import scrub

__all__ = [
    "ConnectFailed",
    "ConnectionClosed",
    "MCPConnectionError",
    "ServerParked",
    "describe",
    "is_dead_session",
]

_LOST_SESSION = re.compile(
    r"(?i)session (?:not found|terminated|expired)|(?:unknown|invalid|no valid) session"
)
"""How servers word "I do not know your session": the SDK's "Session terminated" (HTTP 404),
the Python server's "Session not found", the TypeScript server's "No valid session ID"."""
_HTTP_FAILURE = "Server returned an error response"
"""What the SDK reports for an HTTP error status whose body is not a JSON-RPC error, as
server-everything's 400 for an unknown session id is. A tool failure arrives as an
``isError`` result with status 200, so such an error means the exchange itself failed: it
is treated as a dead session (one reconnect and one retry; a second failure is final)."""


class MCPConnectionError(Exception):
    """The server cannot be used right now."""


class ConnectFailed(MCPConnectionError):
    """Starting the server or ``initialize`` failed or timed out."""


class ServerParked(MCPConnectionError):
    """The server failed too often and is left alone for a while."""


class ConnectionClosed(MCPConnectionError):
    """The source was closed; no more calls."""


def describe(exc: BaseException) -> str:
    """A one-line, scrubbed description; exception groups are reduced to their first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, MCPConnectionError | MCPError):
        text = f"{type(exc).__name__}: {text}"
    return scrub(text)


def is_dead_session(exc: BaseException) -> bool:
    """Whether ``exc`` means the session is gone (as opposed to a failed request)."""
    if isinstance(exc, MCPError):
        if exc.code == types.CONNECTION_CLOSED and exc.message == "Connection closed":
            return True
        if exc.code == types.INTERNAL_ERROR and exc.message == _HTTP_FAILURE:
            return True
        return _LOST_SESSION.search(exc.message) is not None
    if isinstance(exc, BaseExceptionGroup):
        return any(is_dead_session(e) for e in exc.exceptions)
    dead = (
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
        anyio.EndOfStream,
        httpx2.TransportError,
        ConnectionError,
    )
    return isinstance(exc, dead)
