"""The session store port: the SessionDB surface users know, typed.

One port, three adapters (memory, SQLite, PostgreSQL) proven by one contract suite, so a
user swaps storage by changing one URL. Messages go in and come out as
:mod:`hermes_core.messages` objects; reasoning and provider replay data round-trip
losslessly because the next request to a strict provider depends on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from hermes_core.messages import Message, Usage

__all__ = [
    "IDENTITY_FIELDS",
    "SearchHit",
    "SessionInfo",
    "SessionStore",
    "SortOrder",
    "StoredMessage",
]

IDENTITY_FIELDS: tuple[str, ...] = (
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "cwd",
    "git_branch",
    "git_repo_root",
    "profile_name",
    "origin_json",
)
"""Identity fields ``create_session``/``update_metadata`` accept besides model, model_config,
system_prompt, parent_session_id and title; unknown keywords raise ``TypeError``."""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session row: identity, lineage, counters and timestamps (epoch seconds)."""

    id: str
    source: str
    started_at: float
    model: str | None = None
    model_config: Mapping[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    parent_session_id: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    title: str | None = None
    message_count: int = 0
    tool_call_count: int = 0
    api_call_count: int = 0
    usage: Usage = field(default_factory=Usage)
    last_active: float | None = None
    identity: Mapping[str, Any] = field(default_factory=dict)
    """user_id, session_key, chat_id, chat_type, thread_id, display_name, cwd, git_branch,
    git_repo_root, profile_name: whatever was given at creation."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as stored: its row id (insertion order), time and archive flags."""

    id: int
    session_id: str
    message: Message
    timestamp: float
    active: bool = True
    compacted: bool = False
    token_count: int | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A full-text match with ``>>>``/``<<<``-marked snippet and its neighbours."""

    id: int
    session_id: str
    role: str
    snippet: str
    timestamp: float
    source: str
    model: str | None = None
    session_started: float | None = None
    tool_name: str | None = None
    context: Sequence[Mapping[str, str]] = ()


SortOrder = Literal["newest", "oldest"]
"""Search order by message id, the order messages were recorded: ``"newest"`` (the
default) puts the last recorded first. A caller-supplied ``timestamp`` does not reorder."""


@runtime_checkable
class SessionStore(Protocol):
    """Durable sessions and transcripts. Every method may raise ``SessionStoreError``.

    Write methods on a read-only store raise ``ReadOnlyStore``; any method after
    ``close()`` raises ``StoreClosed``; ``close()`` itself is idempotent. Writes to a
    session that does not exist raise ``SessionNotFound``; reads return ``None`` or ``[]``.
    Titles are unique across sessions.
    """

    # -- sessions ----------------------------------------------------------------------
    async def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Create, or fill only the missing fields of, a session (an upsert)."""
        ...

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str: ...

    async def get_session(self, session_id: str) -> SessionInfo | None: ...

    async def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """The exact id, or the only id starting with the prefix, else ``None``."""
        ...

    async def update_system_prompt(self, session_id: str, prompt: str) -> None: ...

    async def update_metadata(self, session_id: str, **fields: Any) -> None:
        """Set title, model, model_config keys (``None`` deletes) or identity fields."""
        ...

    async def update_token_counts(
        self,
        session_id: str,
        usage: Usage,
        *,
        api_calls: int = 0,
        model: str | None = None,
        absolute: bool = False,
    ) -> None: ...

    async def end_session(self, session_id: str, end_reason: str) -> None: ...

    async def reopen_session(self, session_id: str) -> None: ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: delegate children go too, other children are orphaned."""
        ...

    # -- messages ----------------------------------------------------------------------
    async def append_message(
        self,
        session_id: str,
        message: Message,
        *,
        timestamp: float | None = None,
        token_count: int | None = None,
    ) -> int: ...

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]:
        """Append atomically; timestamps inside the batch strictly increase."""
        ...

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None: ...

    async def get_messages(
        self,
        session_id: str,
        *,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
        after_id: int | None = None,
    ) -> list[StoredMessage]: ...

    async def get_conversation(
        self,
        session_id: str,
        *,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair: bool = False,
    ) -> list[Message]: ...

    # -- search ------------------------------------------------------------------------
    async def search_messages(
        self,
        query: str,
        *,
        source_filter: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        role_filter: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: SortOrder | None = None,
        include_inactive: bool = False,
    ) -> list[SearchHit]:
        """Messages matching every word of ``query``, with a ``>>>match<<<`` snippet and the
        previous and next message as context.

        Hits come in the order the messages were recorded (their id): newest first, or
        oldest first with ``sort="oldest"``; the ``timestamp`` a caller passed to
        ``append_message`` does not change that order. Default scope: active rows and rows
        archived by compaction; ``include_inactive`` searches inactive rows too.
        """
        ...

    async def search_sessions(
        self, *, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionInfo]: ...

    # -- lineage and compression --------------------------------------------------------
    async def resolve_resume_session_id(self, session_id: str) -> str: ...

    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]:
        """(model history of ``session_id`` taken as the tip, repaired; display history of
        the whole compression lineage). Call ``resolve_resume_session_id`` first."""
        ...

    async def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool: ...

    async def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool: ...

    async def release_compression_lock(self, session_id: str, holder: str) -> None: ...

    async def get_compression_lock_holder(self, session_id: str) -> str | None: ...

    async def archive_and_compact(
        self,
        session_id: str,
        compacted: Sequence[Message],
        *,
        model_config_patch: Mapping[str, Any] | None = None,
        watermark: int | None = None,
        lock_holder: str | None = None,
    ) -> int:
        """Archive active rows, insert ``compacted``, re-clone rows newer than ``watermark``.

        Returns the number of active rows afterwards (the new message count).
        """
        ...

    async def publish_compression_child(
        self,
        parent_session_id: str,
        child_session_id: str,
        messages: Sequence[Message],
        *,
        source: str | None = None,
        lock_holder: str | None = None,
    ) -> str:
        """Rotation: a child holding ``messages``; the parent ends with 'compression'."""
        ...

    async def close(self) -> None: ...
