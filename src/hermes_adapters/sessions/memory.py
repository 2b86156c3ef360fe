"""The in-memory session store: the trusted fake of :class:`~hermes_core.ports.SessionStore`.

Plain dicts and lists, no I/O. Every method is ``async def`` and never suspends (the shared
lineage walks it awaits only read dicts), so under one event loop each call is atomic, which
is what a transaction gives the SQL stores. The fake is meant to behave like them in
everything a caller can observe (REFERENCE.md §2), and is held to that by the same contract
suite:

- row ids strictly increase across the whole store; transcripts are ordered by id;
- messages are stored as the JSON of their dict codec and decoded on every read, so what
  a SQL store could not keep (a non-JSON value, say) is refused here too, and a caller
  mutating a returned message cannot touch the stored one;
- system prompts are kept once per sha256 and garbage-collected when no session uses them;
- search matches every query word as a case-insensitive substring (a stand-in for FTS5
  that also finds ``it's``, ``a/b.py`` or ``user@host`` literally) and ranks newest first.

This module holds the port's methods; the records and row rules are in ``_memory_rows``,
search in ``_memory_search`` and compression in ``_memory_compaction``; rules all stores
share: ``_lineage``, ``_store_common``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

from hermes_adapters.sessions import _lineage, _store_common
from hermes_adapters.sessions import _memory_compaction as _compaction
from hermes_adapters.sessions import _memory_search as _search
from hermes_adapters.sessions._lineage import COMPRESSION as COMPRESSION  # re-exported
from hermes_adapters.sessions._memory_rows import Row, Session, Shared, decode, encode
from hermes_core import invariants
from hermes_core.errors import ReadOnlyStore, SessionStoreError, StoreClosed
from hermes_core.messages import Message, Usage
from hermes_core.ports.sessions import (
    IDENTITY_FIELDS,
    SearchHit,
    SessionInfo,
    SortOrder,
    StoredMessage,
)

__all__ = ["IDENTITY_FIELDS", "InMemorySessionStore", "new_session_id"]


def new_session_id(now: datetime | None = None) -> str:
    """A fresh session id, ``YYYYMMDD_HHMMSS_<6hex>`` in local time."""
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
    return f"{stamp}_{secrets.token_hex(3)}"


class InMemorySessionStore:
    """A :class:`~hermes_core.ports.SessionStore` held in memory.

    Args:
        read_only: refuse every write with ``ReadOnlyStore``.
        clock: the time source (epoch seconds) for start, end, message and lock times;
            inject one to test lock expiry or ordering without sleeping.
    """

    def __init__(
        self,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
        *,
        _shared: Shared | None = None,
    ) -> None:
        self._read_only = read_only
        self._clock = clock
        self._closed = False
        self._shared = _shared or Shared()
        self._sessions: dict[str, Session] = self._shared.sessions
        self._rows: dict[str, list[Row]] = self._shared.rows

    def reopen(self, *, read_only: bool = False) -> InMemorySessionStore:
        """Another handle on the same data, as reopening a database file gives."""
        return InMemorySessionStore(read_only, self._clock, _shared=self._shared)

    async def __aenter__(self) -> InMemorySessionStore:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- guards -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the in-memory session store was used after close()")

    def _check_writable(self, operation: str) -> None:
        self._check_open()
        if self._read_only:
            raise ReadOnlyStore(f"{operation}: the session store was opened read-only")

    def prompt_count(self) -> int:
        """How many distinct system prompts are stored (for tests of dedup and GC)."""
        return len(self._shared.prompts)

    # -- sessions -------------------------------------------------------------------------

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Create a session, or fill only the fields the existing one lacks (an upsert).

        Fields: ``model``, ``model_config``, ``system_prompt``, ``parent_session_id`` and the
        identity fields (``IDENTITY_FIELDS``). A child inherits cwd, git and profile from its
        parent; a compression child also inherits the chat identity.

        Raises:
            TypeError: an unknown field was given.
            SessionNotFound: ``parent_session_id`` names no session.
            SessionStoreError: the id is empty, or the parent link would make a cycle.
        """
        self._check_writable("create_session")
        _store_common.check_fields(fields, _store_common.CREATE_FIELDS, "create_session")
        if not session_id:
            raise SessionStoreError("create_session: the session id must not be empty")
        parent_id = fields.get("parent_session_id")
        if parent_id is not None:
            await self._shared.check_parent(session_id, parent_id)
        config = _store_common.json_config(fields)

        session = self._sessions.get(session_id)
        if session is None:
            session = Session(id=session_id, source=source, started_at=self._clock())
            self._sessions[session_id] = session
            self._rows[session_id] = []
        if session.model is None and fields.get("model") is not None:
            session.model = fields["model"]
        if not session.model_config and config:
            session.model_config = config
        if session.prompt_hash is None and fields.get("system_prompt") is not None:
            session.prompt_hash = self._shared.store_prompt(fields["system_prompt"])
        for name in IDENTITY_FIELDS:
            if session.identity.get(name) is None and fields.get(name) is not None:
                session.identity[name] = fields[name]
        if session.parent_session_id is None and parent_id is not None:
            session.parent_session_id = parent_id
            self._shared.inherit(session)
        self._shared.gc_prompts()
        return session_id

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """The same upsert as :meth:`create_session`."""
        return await self.create_session(session_id, source, model=model, **fields)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        self._check_open()
        session = self._sessions.get(session_id)
        return self._shared.info(session) if session is not None else None

    async def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """The exact id, or the only id starting with the prefix, else ``None``."""
        self._check_open()
        if not id_or_prefix:
            return None
        if id_or_prefix in self._sessions:
            return id_or_prefix
        matches = [sid for sid in self._sessions if sid.startswith(id_or_prefix)]
        return matches[0] if len(matches) == 1 else None

    async def update_system_prompt(self, session_id: str, prompt: str) -> None:
        self._check_writable("update_system_prompt")
        session = self._shared.require(session_id, "update_system_prompt")
        session.prompt_hash = self._shared.store_prompt(prompt)
        self._shared.gc_prompts()

    async def update_metadata(self, session_id: str, **fields: Any) -> None:
        """Set ``title``, ``model``, ``model_config`` keys (``None`` deletes) or identity fields.

        Raises:
            TypeError: an unknown field was given.
            SessionStoreError: the title is already used by another session.
        """
        self._check_writable("update_metadata")
        _store_common.check_fields(fields, _store_common.METADATA_FIELDS, "update_metadata")
        session = self._shared.require(session_id, "update_metadata")
        title = fields.get("title")
        if title is not None:
            owner = next(
                (s.id for s in self._sessions.values() if s.title == title and s.id != session_id),
                None,
            )
            if owner is not None:
                raise SessionStoreError(
                    f"update_metadata: title {title!r} is already used by session {owner!r}"
                )
        patch = fields.get("model_config")
        config = dict(session.model_config)
        if patch is not None:
            _store_common.apply_patch(config, _store_common.json_object(patch, "model_config"))
        if "title" in fields:
            session.title = title
        if "model" in fields:
            session.model = fields["model"]
        session.model_config = config
        for name in IDENTITY_FIELDS:
            if name in fields:
                if fields[name] is None:
                    session.identity.pop(name, None)
                else:
                    session.identity[name] = fields[name]

    async def update_token_counts(
        self,
        session_id: str,
        usage: Usage,
        *,
        api_calls: int = 0,
        model: str | None = None,
        absolute: bool = False,
    ) -> None:
        """Add ``usage`` and ``api_calls`` (or set them when ``absolute``); fill a missing model."""
        self._check_writable("update_token_counts")
        session = self._shared.require(session_id, "update_token_counts")
        if absolute:
            session.usage = usage
            session.api_call_count = api_calls
        else:
            session.usage = session.usage + usage
            session.api_call_count += api_calls
        if session.model is None and model is not None:
            session.model = model
        session.activity_at = self._clock()

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session; a session already ended keeps its first end time and reason."""
        self._check_writable("end_session")
        session = self._shared.require(session_id, "end_session")
        if session.ended_at is None:
            session.ended_at = self._clock()
            session.end_reason = end_reason

    async def reopen_session(self, session_id: str) -> None:
        self._check_writable("reopen_session")
        session = self._shared.require(session_id, "reopen_session")
        session.ended_at = None
        session.end_reason = None

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: delegate children go too, other children are orphaned."""
        self._check_writable("delete_session")
        if session_id not in self._sessions:
            return False
        await self._shared.delete(session_id)
        self._shared.gc_prompts()
        return True

    # -- messages -------------------------------------------------------------------------

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
        session = self._shared.require(session_id, "append_message")
        _store_common.check_appendable(session.id, session.end_reason, "append_message")
        encoded = encode(message)
        stamp = self._clock() if timestamp is None else float(timestamp)
        row = self._shared.insert(session_id, encoded, stamp, token_count=token_count)
        session.message_count += 1
        session.tool_call_count += encoded.tool_calls
        return row.id

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]:
        """Append atomically; timestamps inside the batch strictly increase."""
        self._check_writable("append_messages")
        session = self._shared.require(session_id, "append_messages")
        _store_common.check_appendable(session.id, session.end_reason, "append_messages")
        encoded = [encode(m) for m in messages]
        rows = self._shared.insert_batch(session_id, encoded, self._clock())
        session.message_count += len(encoded)
        session.tool_call_count += sum(enc.tool_calls for enc in encoded)
        return [row.id for row in rows]

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole transcript (archived rows included) with ``messages``."""
        self._check_writable("replace_messages")
        session = self._shared.require(session_id, "replace_messages")
        encoded = [encode(m) for m in messages]
        self._rows[session_id] = []
        self._shared.insert_batch(session_id, encoded, self._clock())
        self._shared.recount(session)

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
        self._check_open()
        rows = self._shared.scoped_rows(session_id, include_inactive=include_inactive)
        if after_id is not None:
            rows = [r for r in rows if r.id > after_id]
        rows = rows[max(offset, 0) :]
        if limit is not None:
            rows = rows[: max(limit, 0)]
        return [
            StoredMessage(
                id=r.id,
                session_id=r.session_id,
                message=decode(r.raw),
                timestamp=r.timestamp,
                active=r.active,
                compacted=r.compacted,
                token_count=r.token_count,
            )
            for r in rows
        ]

    async def get_conversation(
        self,
        session_id: str,
        *,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair: bool = False,
    ) -> list[Message]:
        """The transcript as messages; with ancestors, its compression lineage root first."""
        self._check_open()

        async def read(sid: str) -> list[Message]:
            rows = self._shared.scoped_rows(sid, include_inactive=include_inactive)
            return [decode(r.raw) for r in rows]

        nodes = self._shared.nodes()
        messages = await _lineage.joined_transcripts(
            nodes, session_id, read, ancestors=include_ancestors
        )
        return invariants.repair(messages) if repair else messages

    # -- search ---------------------------------------------------------------------------

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
        """Messages containing every query word (case-insensitive), newest first by default.

        Newest means the highest row id (the order messages were recorded), not the latest
        caller-supplied ``timestamp``. Default scope: active rows and rows archived by
        compaction.
        """
        self._check_open()
        return _search.search_messages(
            self._shared,
            query,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            role_filter=role_filter,
            limit=limit,
            offset=offset,
            sort=sort,
            include_inactive=include_inactive,
        )

    async def search_sessions(
        self, *, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions, most recently active first."""
        self._check_open()
        return _search.search_sessions(self._shared, source, limit, offset)

    # -- lineage and compression ------------------------------------------------------------

    async def resolve_resume_session_id(self, session_id: str) -> str:
        """Where a resume of ``session_id`` should land.

        Follows the compression chain to its tip, then walks the newest non-fork child
        (branches, resets and subagents are skipped) and returns the deepest session with
        messages on that walk, else the compression tip.
        """
        self._check_open()
        return await _lineage.resume_target(self._shared.nodes(), session_id)

    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]:
        """(model history of the tip, repaired; full display history of the lineage)."""
        self._check_open()
        model = invariants.repair(
            [decode(r.raw) for r in self._shared.scoped_rows(session_id, include_inactive=False)]
        )

        async def read(sid: str) -> list[Message]:
            return [decode(r.raw) for r in self._shared.display_rows(sid)]

        return model, await _lineage.joined_transcripts(self._shared.nodes(), session_id, read)

    async def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Take the lock unless another holder has a live one; an expired lock is reclaimed.

        Re-acquiring a lock one already holds succeeds without extending it.
        """
        self._check_writable("try_acquire_compression_lock")
        if not session_id or not holder:
            return False
        return _compaction.acquire_lock(self._shared, session_id, holder, ttl_seconds, self._clock)

    async def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
        self._check_writable("refresh_compression_lock")
        return _compaction.refresh_lock(self._shared, session_id, holder, ttl_seconds, self._clock)

    async def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` owns it; otherwise do nothing."""
        self._check_writable("release_compression_lock")
        _compaction.release_lock(self._shared, session_id, holder)

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        self._check_open()
        return _compaction.lock_holder(self._shared, session_id, self._clock)

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

        In one step: every active row becomes ``active=False, compacted=True``; ``compacted``
        is inserted as the new active transcript; active rows with an id above ``watermark``
        (they arrived while the summary was being written) are inserted again after it;
        counters are recomputed and ``model_config_patch`` is merged (``None`` deletes).

        Returns:
            The number of active rows afterwards (the new ``message_count``).

        Raises:
            CompressionInProgress: the lock is held by someone other than ``lock_holder``.
            SessionClosedForAppend: the session was ended by compression.
        """
        self._check_writable("archive_and_compact")
        return _compaction.archive_and_compact(
            self._shared,
            session_id,
            compacted,
            model_config_patch,
            watermark,
            lock_holder,
            self._clock,
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
        fork markers), system prompt, workspace and chat identity.

        Raises:
            CompressionInProgress: the parent's lock is held by someone other than
                ``lock_holder``.
            SessionClosedForAppend: the parent was already ended by compression.
            SessionStoreError: the child id is empty or equals the parent's.
        """
        self._check_writable("publish_compression_child")
        return await _compaction.publish_child(
            self._shared,
            parent_session_id,
            child_session_id,
            messages,
            source,
            lock_holder,
            self._clock,
        )

    async def close(self) -> None:
        """Close the store; later calls raise ``StoreClosed``. Idempotent."""
        self._closed = True
