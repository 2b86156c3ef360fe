"""The SQLite session store: the reference SessionDB (REFERENCE.md §2) on aiosqlite.

Built around what went wrong in the reference (WIRE.md §4 items 18-19):

- one connection per store and one writer at a time (an ``anyio.Lock``), every write in a
  ``BEGIN IMMEDIATE`` transaction, so a write never deadlocks half-way on a lock upgrade;
- a short ``busy_timeout`` plus a jittered retry (20-150 ms, then 0.25-1 s) bounded to about
  20 s, after which the write *fails* with ``SessionStoreError``: a lost write is never
  silent, because a swallowed "database is locked" is a session missing from the index;
- WAL (falling back to DELETE where WAL cannot work, e.g. network filesystems) with a
  ``wal_checkpoint(PASSIVE)`` every 50 writes so a busy store cannot grow its WAL forever;
- every search term is quoted for FTS5 and any error from ``MATCH`` is raised, never
  turned into "no results" (the agent would believe its history is empty).

aiosqlite runs each call on its own thread: that thread is the one documented exception to
"no hidden threads" (DESIGN.md §6). The store therefore needs the asyncio backend of anyio.
Semantics match :class:`~hermes_adapters.sessions.memory.InMemorySessionStore`; both pass
``hermes_core.testing.SessionStoreContract``.

This module owns the connection, the writer lock and the retries; each operation's SQL is
in ``_sqlite_sessions``, ``_sqlite_messages``, ``_sqlite_compaction`` and ``_sqlite_search``,
run in the transaction opened here; rules all stores share: ``_lineage``, ``_store_common``.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import aiosqlite
import anyio

from hermes_adapters.sessions import _lineage, _store_common
from hermes_adapters.sessions import _sqlite_compaction as _compaction
from hermes_adapters.sessions import _sqlite_messages as _messages
from hermes_adapters.sessions import _sqlite_search as _search
from hermes_adapters.sessions import _sqlite_sessions as _sessions
from hermes_adapters.sessions._sqlite_rows import execute, fetch_one
from hermes_adapters.sessions._sqlite_schema import check_readable, encode_message, migrate
from hermes_core import invariants
from hermes_core.errors import ReadOnlyStore, SessionStoreError, StoreClosed
from hermes_core.messages import Message, Usage
from hermes_core.ports.sessions import SearchHit, SessionInfo, SortOrder, StoredMessage

__all__ = ["SQLiteSessionStore"]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Body = Callable[[aiosqlite.Connection], Awaitable[_T]]

_JOURNAL_MODES = frozenset({"wal", "delete", "truncate", "persist"})
_CHECKPOINT_EVERY = 50
_JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_FAST_RETRIES = 5
"""Attempts that wait 20-150 ms before the retry switches to 0.25-1 s waits."""


def _is_busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (any extended code): another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _backoff(attempt: int) -> float:
    """Jittered wait before retry ``attempt``: short while a writer is likely almost done."""
    if attempt <= _FAST_RETRIES:
        return random.uniform(0.020, 0.150)
    return random.uniform(0.25, 1.0)


class SQLiteSessionStore:
    """A :class:`~hermes_core.ports.SessionStore` in one SQLite file.

    The connection opens (and the schema is created or migrated) on first use, so building
    a store costs nothing and never touches the disk.

    Args:
        path: the database file; its directory must exist.
        read_only: open ``file:...?mode=ro`` and refuse every write with ``ReadOnlyStore``.
        busy_timeout_ms: how long SQLite itself waits for a lock before reporting busy.
        journal_mode: ``"wal"`` (falls back to ``"delete"`` where WAL is refused),
            ``"delete"``, ``"truncate"`` or ``"persist"``.
        retry_budget_seconds: how long busy transactions are retried before the operation
            fails with ``SessionStoreError``.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        read_only: bool = False,
        busy_timeout_ms: int = 1000,
        journal_mode: str = "wal",
        retry_budget_seconds: float = 20.0,
    ) -> None:
        mode = journal_mode.lower()
        if mode not in _JOURNAL_MODES:
            raise ValueError(
                f"journal_mode must be one of {', '.join(sorted(_JOURNAL_MODES))}, "
                f"not {journal_mode!r}"
            )
        if busy_timeout_ms < 0 or retry_budget_seconds < 0:
            raise ValueError("busy_timeout_ms and retry_budget_seconds must not be negative")
        self._path = Path(path)
        self._read_only = read_only
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._journal_mode = mode
        self._retry_budget = float(retry_budget_seconds)
        self._conn: aiosqlite.Connection | None = None
        self._lock = anyio.Lock()
        self._closed = False
        self._wal = False
        self._writes = 0

    @property
    def path(self) -> Path:
        return self._path

    async def __aenter__(self) -> SQLiteSessionStore:
        self._check_open("__aenter__")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection after any operation in flight; later calls raise
        ``StoreClosed``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Shielded: a cancelled close would leave the connection (and its thread) open.
        with anyio.CancelScope(shield=True):
            async with self._lock:
                conn, self._conn = self._conn, None
                if conn is not None:
                    try:
                        await conn.close()
                    except sqlite3.Error as exc:
                        raise SessionStoreError(f"close {self._path}: {exc}") from exc

    # -- connection and transactions ----------------------------------------------------

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosed(f"{operation}: the session store {self._path} was closed")

    def _check_writable(self, operation: str) -> None:
        self._check_open(operation)
        if self._read_only:
            raise ReadOnlyStore(f"{operation}: the session store {self._path} is read-only")

    def _uri(self) -> str:
        mode = "ro" if self._read_only else "rwc"
        return f"{self._path.absolute().as_uri()}?mode={mode}"

    async def _connection(self) -> aiosqlite.Connection:
        """The open connection; the first call opens it and prepares the schema."""
        if self._conn is not None:
            return self._conn
        if not self._read_only:  # a fresh HERMES_HOME may not exist yet
            await anyio.Path(self._path.absolute().parent).mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(
            self._uri(), uri=True, isolation_level=None, timeout=self._busy_timeout_ms / 1000
        )
        try:
            conn.row_factory = sqlite3.Row
            await execute(conn, f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            await execute(conn, "PRAGMA foreign_keys = ON")
            where = str(self._path)
            if self._read_only:
                await self._attempt(conn, lambda c: check_readable(c, where), write=False)
            else:
                await self._set_journal_mode(conn)
                await self._attempt(conn, lambda c: migrate(c, where), write=True)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.close()
            raise
        self._conn = conn
        return conn

    async def _set_journal_mode(self, conn: aiosqlite.Connection) -> None:
        row = await fetch_one(conn, f"PRAGMA journal_mode = {self._journal_mode}")
        mode = str(row[0]).lower() if row is not None else ""
        if self._journal_mode == "wal" and mode != "wal":
            # WAL needs shared memory that network filesystems do not offer; DELETE works
            # everywhere, at the cost of readers waiting for writers.
            _log.warning("%s: WAL journal refused (got %r); using DELETE", self._path, mode)
            row = await fetch_one(conn, "PRAGMA journal_mode = delete")
            mode = str(row[0]).lower() if row is not None else ""
        self._wal = mode == "wal"
        await execute(conn, f"PRAGMA journal_size_limit = {_JOURNAL_SIZE_LIMIT}")

    async def _attempt(self, conn: aiosqlite.Connection, body: _Body[_T], *, write: bool) -> _T:
        """One transaction: ``BEGIN IMMEDIATE`` for writes (the write lock is taken up front,
        so it cannot fail half-way on an upgrade), a deferred ``BEGIN`` for a consistent read."""
        try:
            # BEGIN inside the try: if cancelled while it is queued, it still runs on the
            # connection's thread, and the ROLLBACK queued behind it must undo it.
            await execute(conn, "BEGIN IMMEDIATE" if write else "BEGIN")
            result = await body(conn)
            await execute(conn, "COMMIT")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._rollback(conn)
            raise
        return result

    async def _rollback(self, conn: aiosqlite.Connection) -> None:
        try:
            await execute(conn, "ROLLBACK")
        except sqlite3.Error:
            if conn.in_transaction:
                # The connection is stuck in a transaction it cannot end: drop it, so the
                # next operation starts on a fresh one instead of failing forever.
                _log.warning("%s: rollback failed; reopening the connection", self._path)
                self._conn = None
                await conn.close()

    async def _run(self, operation: str, body: _Body[_T], *, write: bool) -> _T:
        """Run ``body`` in a transaction, retrying while the database is locked.

        Raises:
            StoreClosed, ReadOnlyStore: the store is closed, or read-only and this writes.
            SessionStoreError: any SQLite error, or the lock outlived the retry budget.
        """
        if write:
            self._check_writable(operation)
        else:
            self._check_open(operation)
        async with self._lock:
            self._check_open(operation)
            deadline = time.monotonic() + self._retry_budget
            attempt = 0
            while True:
                try:
                    conn = await self._connection()
                    result = await self._attempt(conn, body, write=write)
                    break
                except sqlite3.Error as exc:
                    if not _is_busy(exc):
                        raise SessionStoreError(f"{operation} on {self._path}: {exc}") from exc
                    attempt += 1
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise SessionStoreError(
                            f"{operation}: {self._path} stayed locked by another connection "
                            f"for {self._retry_budget:g} s ({attempt} attempts), so nothing was "
                            "done. Is another process holding a long transaction?"
                        ) from exc
                    await anyio.sleep(min(_backoff(attempt), remaining))
            if write:
                await self._after_write(conn)
            return result

    async def _read(self, operation: str, body: _Body[_T]) -> _T:
        return await self._run(operation, body, write=False)

    async def _write(self, operation: str, body: _Body[_T]) -> _T:
        return await self._run(operation, body, write=True)

    async def _after_write(self, conn: aiosqlite.Connection) -> None:
        """Every 50 writes, a PASSIVE checkpoint keeps the WAL from growing without bound."""
        self._writes += 1
        if not self._wal or self._writes % _CHECKPOINT_EVERY:
            return
        try:
            await execute(conn, "PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            # The write itself is committed; reporting it as failed would invite a duplicate.
            _log.warning("%s: wal_checkpoint(PASSIVE) failed: %s", self._path, exc)

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
            "create_session", lambda c: _sessions.upsert(c, session_id, source, fields, config)
        )
        return session_id

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """The same upsert as :meth:`create_session`."""
        return await self.create_session(session_id, source, model=model, **fields)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        return await self._read("get_session", lambda c: _sessions.get_info(c, session_id))

    async def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """The exact id, or the only id starting with the prefix, else ``None``."""
        return await self._read(
            "resolve_session_id", lambda c: _sessions.resolve_id(c, id_or_prefix)
        )

    async def update_system_prompt(self, session_id: str, prompt: str) -> None:
        await self._write(
            "update_system_prompt", lambda c: _sessions.set_system_prompt(c, session_id, prompt)
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
            "update_metadata", lambda c: _sessions.set_metadata(c, session_id, fields, patch)
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
            lambda c: _sessions.add_usage(
                c, session_id, usage, api_calls, model, absolute=absolute
            ),
        )

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session; one already ended keeps its first end time and reason."""
        await self._write("end_session", lambda c: _sessions.end(c, session_id, end_reason))

    async def reopen_session(self, session_id: str) -> None:
        await self._write("reopen_session", lambda c: _sessions.reopen(c, session_id))

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: delegate children go too, other children are orphaned."""
        return await self._write("delete_session", lambda c: _sessions.delete(c, session_id))

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
        encoded = encode_message(message)
        return await self._write(
            "append_message",
            lambda c: _messages.append(c, session_id, encoded, timestamp, token_count),
        )

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]:
        """Append atomically; timestamps inside the batch strictly increase."""
        self._check_writable("append_messages")
        encoded = [encode_message(m) for m in messages]
        return await self._write(
            "append_messages", lambda c: _messages.append_batch(c, session_id, encoded)
        )

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole transcript (archived rows included) with ``messages``."""
        self._check_writable("replace_messages")
        encoded = [encode_message(m) for m in messages]
        await self._write("replace_messages", lambda c: _messages.replace(c, session_id, encoded))

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
            lambda c: _messages.stored_messages(
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
            lambda c: _messages.conversation(c, session_id, include_ancestors, include_inactive),
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

        Words are matched by the unicode61 index; when that finds nothing, the same words
        are tried as substrings on the trigram index (CJK text, word fragments). Default
        scope: active rows and rows archived by compaction.

        Raises:
            SessionStoreError: the full-text query failed (never reported as no results).
        """
        self._check_open("search_messages")
        body = _search.message_search(
            query,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            role_filter=role_filter,
            limit=limit,
            offset=offset,
            sort=sort,
            include_inactive=include_inactive,
        )
        return await self._read("search_messages", body)

    async def search_sessions(
        self, *, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions, most recently active first."""
        return await self._read(
            "search_sessions", lambda c: _search.search_sessions(c, source, limit, offset)
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
            lambda c: _lineage.resume_target(_sessions.Nodes(c), session_id),
        )

    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]:
        """(model history of the tip, repaired; full display history of the lineage)."""
        model, display = await self._read(
            "get_resume_conversations", lambda c: _messages.resume_conversations(c, session_id)
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
            lambda c: _compaction.acquire_lock(c, session_id, holder, ttl_seconds),
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
            lambda c: _compaction.refresh_lock(c, session_id, holder, ttl_seconds),
        )

    async def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` owns it; otherwise do nothing."""
        await self._write(
            "release_compression_lock", lambda c: _compaction.release_lock(c, session_id, holder)
        )

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        return await self._read(
            "get_compression_lock_holder", lambda c: _compaction.lock_holder(c, session_id)
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

        In one transaction: every active row becomes ``active=0, compacted=1``;
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
        encoded = [encode_message(m) for m in compacted]
        patch = _store_common.config_patch(model_config_patch)
        return await self._write(
            "archive_and_compact",
            lambda c: _compaction.archive_and_compact(
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
        encoded = [encode_message(m) for m in messages]
        return await self._write(
            "publish_compression_child",
            lambda c: _compaction.publish_child(
                c, parent_session_id, child_session_id, encoded, source, lock_holder
            ),
        )
