"""The one error hierarchy of Hermes.

Adapters map every vendor exception (httpx, aiosqlite, asyncpg, mcp, ...) into these
classes at their boundary, raising ``from`` the original, so a host catches Hermes errors
and never a library's. Messages say what was wrong, where, and what to do.

::

    HermesError
    ├── ModelError                      a model provider call failed
    │   ├── ModelAuthError              401/403: the credential is wrong or missing
    │   ├── ModelRateLimited            429: retry_after seconds, when the server said
    │   ├── ContextTooLong              the prompt does not fit; never retried unchanged
    │   ├── ModelUnavailable            transient: 5xx, 529, timeouts, connection errors
    │   ├── ModelProtocolError          the reply does not follow the wire format
    │   │   └── IncompleteStream        a stream ended without its terminal event
    │   └── UnexpectedModelCall         a scripted model was called past its script
    ├── ToolError                       a tool could not be registered or run
    │   ├── ToolNameCollision           two tools claim one name
    │   ├── UnknownTool                 no tool of that name is registered
    │   └── ToolArgumentsInvalid        arguments are not JSON or fail the schema
    ├── SessionStoreError               the session store failed
    │   ├── SessionNotFound             no session with that id
    │   ├── StoreClosed                 the store was used after close()
    │   ├── ReadOnlyStore               a write on a store opened read-only
    │   ├── SessionClosedForAppend      append to a session ended by compression
    │   └── CompressionInProgress       another holder owns the compression lock
    ├── MemoryWriteRejected             a memory write does not fit or matches nothing
    ├── TranscriptError                 a transcript breaks the message invariants
    ├── UsageLimitExceeded              a configured limit (iterations, tokens) was hit
    └── ConfigError                     configuration is invalid or incomplete

Control-flow signals (an interrupt, say) are not errors and live outside this tree.
"""

from __future__ import annotations

__all__ = [
    "CompressionInProgress",
    "ConfigError",
    "ContextTooLong",
    "HermesError",
    "IncompleteStream",
    "MemoryWriteRejected",
    "ModelAuthError",
    "ModelError",
    "ModelProtocolError",
    "ModelRateLimited",
    "ModelUnavailable",
    "ReadOnlyStore",
    "SessionClosedForAppend",
    "SessionNotFound",
    "SessionStoreError",
    "StoreClosed",
    "ToolArgumentsInvalid",
    "ToolError",
    "ToolNameCollision",
    "TranscriptError",
    "UnexpectedModelCall",
    "UnknownTool",
    "UsageLimitExceeded",
]


class HermesError(Exception):
    """Root of every error Hermes raises on purpose."""


# -- model providers -------------------------------------------------------------------


class ModelError(HermesError):
    """A model provider call failed.

    ``status`` is the HTTP status when there was one; ``provider`` names the adapter.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        provider: str | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.provider = provider
        self.body = body


class ModelAuthError(ModelError):
    """The provider refused the credential (401/403) or none was configured."""


class ModelRateLimited(ModelError):
    """The provider asked us to slow down (429); ``retry_after`` in seconds if given."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after = retry_after


class ContextTooLong(ModelError):
    """The request does not fit the model's context window.

    Retrying the same request cannot help: the caller must compress or shorten it.
    """


class ModelUnavailable(ModelError):
    """A transient failure (5xx, overloaded, timeout, connection) that outlived retries."""


class ModelProtocolError(ModelError):
    """The provider's reply does not follow its documented wire format."""


class IncompleteStream(ModelProtocolError):
    """A streamed reply ended before its terminal event (finish reason / message_stop)."""


class UnexpectedModelCall(ModelError):
    """A scripted model was called with no step left to play."""


# -- tools -----------------------------------------------------------------------------


class ToolError(HermesError):
    """A tool could not be registered, found or run."""


class ToolNameCollision(ToolError):
    """Two tools claim the same name; the registry refuses the second."""


class UnknownTool(ToolError):
    """No registered tool has this name."""


class ToolArgumentsInvalid(ToolError):
    """Tool arguments are not valid JSON, or do not satisfy the tool's schema."""


# -- sessions --------------------------------------------------------------------------


class SessionStoreError(HermesError):
    """The session store failed; the message names the operation and the session."""


class SessionNotFound(SessionStoreError):
    """No session with the given id (or id prefix) exists."""


class StoreClosed(SessionStoreError):
    """The store was used after ``close()``."""


class ReadOnlyStore(SessionStoreError):
    """A write was attempted on a store opened with ``read_only=True``."""


class SessionClosedForAppend(SessionStoreError):
    """The session was ended by compression; its continuation is a child session."""


class CompressionInProgress(SessionStoreError):
    """Another holder owns the session's compression lock."""


# -- everything else -------------------------------------------------------------------


class MemoryWriteRejected(HermesError):
    """A memory write was refused; the message is meant for the model to act on.

    ``current_entries`` and ``usage`` let the memory tool show the model what is stored so
    it can consolidate and retry within the same turn.
    """

    def __init__(
        self,
        message: str,
        *,
        current_entries: tuple[str, ...] = (),
        usage: str | None = None,
        matches: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.current_entries = current_entries
        self.usage = usage
        self.matches = matches


class TranscriptError(HermesError):
    """A transcript breaks the message invariants and could not be used as is."""


class UsageLimitExceeded(HermesError):
    """A configured usage limit (iterations, tokens, tool calls) was exceeded."""


class ConfigError(HermesError):
    """Configuration is invalid or incomplete: the message names the file and key path."""
