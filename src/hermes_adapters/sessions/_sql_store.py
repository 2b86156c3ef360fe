"""The SessionStore port methods shared by the SQL session stores (SQLite, PostgreSQL).

:class:`_SqlSessionStore` holds the signatures, docstrings and argument checks once; each
operation runs a function of the backend's helper modules (class attributes
``_sessions_sql``, ``_messages_sql``, ``_compaction_sql``, ``_search_sql``) through the
subclass's ``_read``/``_write``, which own the connection, transactions and retries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

from hermes_adapters.sessions import _lineage, _store_common
from hermes_adapters.sessions._sqlite_schema import encode_message
from hermes_core import invariants
from hermes_core.errors import SessionStoreError
from hermes_core.messages import Message, Usage
from hermes_core.ports.sessions import SearchHit, SessionInfo, SortOrder, StoredMessage

_T = TypeVar("_T")


class _SqlSessionStore:
    """The port methods of a SQL session store; subclasses provide the hooks below."""

    _sessions_sql: ModuleType
    _messages_sql: ModuleType
    _compaction_sql: ModuleType
    _search_sql: ModuleType
    _encode_message = staticmethod(encode_message)

    def _check_open(self, operation: str) -> None:
        raise NotImplementedError

    def _check_writable(self, operation: str) -> None:
        raise NotImplementedError

    async def _read(self, operation: str, body: Callable[[Any], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    async def _write(self, operation: str, body: Callable[[Any], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    async def _run_search(self, body: Any) -> list[SearchHit]:
        """Run the body ``_search_sql.message_search`` built, in a read transaction; a
        store whose full-text index may lag its writes overrides this."""
        return await self._read("search_messages", body)

    # -- sessions -----------------------------------------------------------------------

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Create a session, or fill only the fields the existing one lacks (an upsert).

        Fields: ``model``, ``model_config``, ``system_prompt``, ``parent_session_id`` and
        ``IDENTITY_FIELDS``. A child inherits cwd, git and profile from its parent; a
        compression child also inherits the chat identity.

        Raises:
            TypeError: an unknown field was given.
            SessionNotFound: ``parent_session_id`` names no session.
            SessionStoreError: the id is empty, or the parent link would make a cycle.
        """
        self._check_writable("create_session")
        _store_common.check_fields(fields, _store_common.CREATE_FIELDS, "create_session")
        if not session_id:
            raise SessionStoreError("create_session: the session id must not be empty")
        config = _store_common.json_config(fields)
        await self._write(
            "create_session",
            lambda c: self._sessions_sql.upsert(c, session_id, source, fields, config),
        )
        return session_id

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """The same upsert as :meth:`create_session`."""
        return await self.create_session(session_id, source, model=model, **fields)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        return await self._read("get_session", lambda c: self._sessions_sql.get_info(c, session_id))

    async def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """The exact id, or the only id starting with the prefix, else ``None``."""
        return await self._read(
            "resolve_session_id", lambda c: self._sessions_sql.resolve_id(c, id_or_prefix)
        )

    async def update_system_prompt(self, session_id: str, prompt: str) -> None:
        await self._write(
            "update_system_prompt",
            lambda c: self._sessions_sql.set_system_prompt(c, session_id, prompt),
        )

    async def update_metadata(self, session_id: str, **fields: Any) -> None:
        """Set ``title``, ``model``, ``model_config`` keys (``None`` deletes) or identity
        fields (``None`` clears).

        Raises:
            TypeError: an unknown field was given.
            SessionStoreError: the title is already used by another session.
        """
        self._check_writable("update_metadata")
        _store_common.check_fields(fields, _store_common.METADATA_FIELDS, "update_metadata")
        patch = _store_common.json_config(fields)
        await self._write(
            "update_metadata",
            lambda c: self._sessions_sql.set_metadata(c, session_id, fields, patch),
        )

    async def update_token_counts(
        self,
        session_id: str,
        usage: Usage,
        *,
        api_calls: int = 0,
        model: str | None = None,
        absolute: bool = False,
    ) -> None:
        """Add ``usage`` and ``api_calls`` (or set them when ``absolute``); fill a missing
        model; mark the session active now."""
        await self._write(
            "update_token_counts",
            lambda c: self._sessions_sql.add_usage(
                c, session_id, usage, api_calls, model, absolute=absolute
            ),
        )

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session; one already ended keeps its first end time and reason."""
        await self._write(
            "end_session", lambda c: self._sessions_sql.end(c, session_id, end_reason)
        )

    async def reopen_session(self, session_id: str) -> None:
        await self._write("reopen_session", lambda c: self._sessions_sql.reopen(c, session_id))

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: delegate children go too, other children are orphaned."""
        return await self._write(
            "delete_session", lambda c: self._sessions_sql.delete(c, session_id)
        )

    # -- messages -----------------------------------------------------------------------

    async def append_message(
        self,
        session_id: str,
        message: Message,
        *,
        timestamp: float | None = None,
        token_count: int | None = None,
    ) -> int:
        """Append one message and return its row id.

        Raises:
            SessionNotFound: no such session.
            SessionClosedForAppend: the session was ended by compression.
        """
        self._check_writable("append_message")
        encoded = self._encode_message(message)
        return await self._write(
            "append_message",
            lambda c: self._messages_sql.append(c, session_id, encoded, timestamp, token_count),
        )

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]:
        """Append atomically; timestamps inside the batch strictly increase."""
        self._check_writable("append_messages")
        encoded = [self._encode_message(m) for m in messages]
        return await self._write(
            "append_messages", lambda c: self._messages_sql.append_batch(c, session_id, encoded)
        )

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole transcript (archived rows included) with ``messages``."""
        self._check_writable("replace_messages")
        encoded = [self._encode_message(m) for m in messages]
        await self._write(
            "replace_messages", lambda c: self._messages_sql.replace(c, session_id, encoded)
        )

    async def get_messages(
        self,
        session_id: str,
        *,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
        after_id: int | None = None,
    ) -> list[StoredMessage]:
        """Stored rows in insertion (id) order; archived rows only with ``include_inactive``."""
        return await self._read(
            "get_messages",
            lambda c: self._messages_sql.stored_messages(
                c, session_id, include_inactive, limit, offset, after_id
            ),
        )

    async def get_conversation(
        self,
        session_id: str,
        *,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair: bool = False,
    ) -> list[Message]:
        """The transcript as messages; with ancestors, its compression lineage root first."""
        messages = await self._read(
            "get_conversation",
            lambda c: self._messages_sql.conversation(
                c, session_id, include_ancestors, include_inactive
            ),
        )
        return invariants.repair(messages) if repair else messages

    # -- search -------------------------------------------------------------------------

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
        """Messages matching every query word, newest first unless ``sort="oldest"``.

        "Newest" is the order messages were recorded in (their id), not the ``timestamp``
        a caller may have supplied. Words are matched by the backend's full-text index;
        when that finds nothing, the same words are tried as substrings (see the backend's
        search module). Default scope: active rows and rows archived by compaction.

        Raises:
            SessionStoreError: the query failed (never reported as no results).
        """
        self._check_open("search_messages")
        body = self._search_sql.message_search(
            query,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            role_filter=role_filter,
            limit=limit,
            offset=offset,
            sort=sort,
            include_inactive=include_inactive,
        )
        return [] if body is None else await self._run_search(body)

    async def search_sessions(
        self, *, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions, most recently active first."""
        return await self._read(
            "search_sessions", lambda c: self._search_sql.search_sessions(c, source, limit, offset)
        )

    # -- lineage and compression ----------------------------------------------------------

    async def resolve_resume_session_id(self, session_id: str) -> str:
        """Where a resume of ``session_id`` should land.

        Follows the compression chain to its tip, then walks the newest non-fork child
        (branches, resets and subagents are skipped) and returns the deepest session with
        messages on that walk, else the compression tip.
        """
        return await self._read(
            "resolve_resume_session_id",
            lambda c: _lineage.resume_target(self._sessions_sql.Nodes(c), session_id),
        )

    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]:
        """(model history of the tip, repaired; full display history of the lineage)."""
        model, display = await self._read(
            "get_resume_conversations",
            lambda c: self._messages_sql.resume_conversations(c, session_id),
        )
        return invariants.repair(model), display

    async def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Take the lock unless another holder has a live one; an expired lock is reclaimed.

        Re-acquiring a lock one already holds succeeds without extending it.
        """
        self._check_writable("try_acquire_compression_lock")
        if not session_id or not holder:
            return False
        return await self._write(
            "try_acquire_compression_lock",
            lambda c: self._compaction_sql.acquire_lock(c, session_id, holder, ttl_seconds),
        )

    async def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
        self._check_writable("refresh_compression_lock")
        if not holder:
            return False
        return await self._write(
            "refresh_compression_lock",
            lambda c: self._compaction_sql.refresh_lock(c, session_id, holder, ttl_seconds),
        )

    async def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` owns it; otherwise do nothing."""
        await self._write(
            "release_compression_lock",
            lambda c: self._compaction_sql.release_lock(c, session_id, holder),
        )

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        return await self._read(
            "get_compression_lock_holder", lambda c: self._compaction_sql.lock_holder(c, session_id)
        )

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

        In one transaction: every active row is marked inactive and compacted;
        ``compacted`` is inserted as the new active transcript; active rows with an id above
        ``watermark`` (they arrived while the summary was being written) are inserted again
        after it; counters are recomputed and ``model_config_patch`` merged (``None``
        deletes a key).

        Returns:
            The number of active rows afterwards (the new ``message_count``).

        Raises:
            CompressionInProgress: the lock is held by someone other than ``lock_holder``.
            SessionClosedForAppend: the session was ended by compression.
        """
        self._check_writable("archive_and_compact")
        encoded = [self._encode_message(m) for m in compacted]
        patch = _store_common.config_patch(model_config_patch)
        return await self._write(
            "archive_and_compact",
            lambda c: self._compaction_sql.archive_and_compact(
                c, session_id, encoded, patch, watermark, lock_holder
            ),
        )

    async def publish_compression_child(
        self,
        parent_session_id: str,
        child_session_id: str,
        messages: Sequence[Message],
        *,
        source: str | None = None,
        lock_holder: str | None = None,
    ) -> str:
        """Rotation: a child holding ``messages``; the parent ends with 'compression'.

        The child inherits the parent's source (unless given), model, model_config (without
        fork markers), system prompt, workspace and chat identity; all in one transaction,
        so a reader sees either the live parent or the ended parent with its whole child.

        Raises:
            CompressionInProgress: the parent's lock is held by someone other than
                ``lock_holder``.
            SessionClosedForAppend: the parent was already ended by compression.
            SessionStoreError: the child id is empty, equals the parent's, or names a
                session that already has another parent.
        """
        self._check_writable("publish_compression_child")
        encoded = [self._encode_message(m) for m in messages]
        return await self._write(
            "publish_compression_child",
            lambda c: self._compaction_sql.publish_child(
                c, parent_session_id, child_session_id, encoded, source, lock_holder
            ),
        )
