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
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import aiosqlite
import anyio

from hermes_adapters.sessions import _fts
from hermes_adapters.sessions._sqlite_schema import (
    INSERT_MESSAGE,
    MESSAGE_COLUMNS,
    EncodedMessage,
    check_readable,
    decode_message,
    encode_message,
    migrate,
)
from hermes_core import invariants
from hermes_core.errors import (
    CompressionInProgress,
    ReadOnlyStore,
    SessionClosedForAppend,
    SessionNotFound,
    SessionStoreError,
    StoreClosed,
)
from hermes_core.messages import Message, Usage
from hermes_core.ports.sessions import (
    IDENTITY_FIELDS,
    SearchHit,
    SessionInfo,
    SortOrder,
    StoredMessage,
)

__all__ = ["SQLiteSessionStore"]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Body = Callable[[aiosqlite.Connection], Awaitable[_T]]

COMPRESSION = "compression"
_BRANCHED = "branched"
_FORK_MARKERS = ("_branched_from", "_delegate_from", "_reset_from")
_WORKSPACE_FIELDS = ("cwd", "git_branch", "git_repo_root", "profile_name")
"""Inherited by every child from its parent."""
_CHAT_FIELDS = (
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
)
"""Inherited by a compression child on top of the workspace fields: it is the same chat."""
_CREATE_FIELDS = frozenset({"model", "model_config", "system_prompt", "parent_session_id"})
_METADATA_FIELDS = frozenset({"title", "model", "model_config"})
_JOURNAL_MODES = frozenset({"wal", "delete", "truncate", "persist"})

_COMPRESSION_HOPS = 100
_CONTINUATION_HOPS = 32
_BATCH_STEP = 1e-6
_CONTEXT_CHARS = 200
_CHECKPOINT_EVERY = 50
_JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_FAST_RETRIES = 5
"""Attempts that wait 20-150 ms before the retry switches to 0.25-1 s waits."""

_SESSION_SELECT = (
    "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS prompt_text, "
    "(SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id) AS last_message_at "
    "FROM sessions s LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash"
)
_LAST_ACTIVE = (
    "COALESCE(MAX(COALESCE(last_activity_at, last_message_at), "
    "COALESCE(last_message_at, last_activity_at)), started_at)"
)
_ACTIVE_TOOL_CALLS = (
    "SELECT COALESCE(SUM(CASE WHEN json_valid(tool_calls) THEN json_array_length(tool_calls) "
    "ELSE 0 END), 0) FROM messages WHERE session_id = ?1 AND active = 1"
)


# -- small helpers --------------------------------------------------------------------------


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


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON round trip of ``value``: what the database will hand back; refuses non-JSON."""
    try:
        copied: dict[str, Any] = json.loads(_dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(f"{what} must be JSON-serialisable: {exc}") from exc
    return copied


def _config_of(row: sqlite3.Row) -> dict[str, Any]:
    raw = row["model_config"]
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise SessionStoreError(
            f"session {row['id']!r} has a model_config that is not JSON: {exc}"
        ) from exc
    return value if isinstance(value, dict) else {}


def _batch_timestamps(start: float, count: int) -> list[float]:
    """``count`` timestamps from ``start``, each strictly greater than the one before."""
    stamps: list[float] = []
    now = start
    for _ in range(count):
        stamps.append(now)
        step = now + _BATCH_STEP
        now = step if step > now else math.nextafter(now, math.inf)
    return stamps


def _placeholders(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


async def _rows(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[sqlite3.Row]:
    return list(await conn.execute_fetchall(sql, params))


async def _row(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> sqlite3.Row | None:
    rows = await _rows(conn, sql, params)
    return rows[0] if rows else None


async def _exec(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement and return its row count (cursor closed at once)."""
    async with conn.execute(sql, params) as cursor:
        return cursor.rowcount


async def _insert(conn: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> int:
    async with conn.execute(sql, params) as cursor:
        new_id = cursor.lastrowid
    if new_id is None:  # pragma: no cover - an INSERT always sets it
        raise SessionStoreError("insert returned no row id")
    return new_id


def _dedupe_replayed_users(segments: Sequence[Sequence[Message]]) -> list[Message]:
    """Join a lineage's transcripts, dropping the user messages a later segment replays.

    A rotation copies the recent tail into the child, so a user message of a later segment
    equal to one of an earlier segment is that copy: each earlier user message absorbs at
    most one copy, and it stays in its original place.
    """
    joined: list[Message] = []
    for index, segment in enumerate(segments):
        unmatched = [m for m in joined if m.role == "user"] if index else []
        for message in segment:
            if message.role == "user" and message in unmatched:
                unmatched.remove(message)
                continue
            joined.append(message)
    return joined


# -- lineage nodes --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Node:
    """What the lineage walks need of a session row."""

    id: str
    source: str
    parent_id: str | None
    end_reason: str | None
    markers: frozenset[str]
    started_at: float

    @property
    def is_delegate(self) -> bool:
        return "_delegate_from" in self.markers or self.source == "tool"

    def is_fork(self, parent: _Node | None) -> bool:
        """A branch, reset or subagent child: not a continuation of ``parent``."""
        return (
            bool(self.markers)
            or self.source == "tool"
            or (parent is not None and parent.end_reason == _BRANCHED)
        )


_NODE_SELECT = (
    "SELECT id, source, parent_session_id, end_reason, model_config, started_at FROM sessions"
)


def _node(row: sqlite3.Row) -> _Node:
    markers = frozenset(m for m in _FORK_MARKERS if m in _config_of(row))
    return _Node(
        row["id"],
        row["source"],
        row["parent_session_id"],
        row["end_reason"],
        markers,
        row["started_at"],
    )


async def _fetch_node(conn: aiosqlite.Connection, session_id: str | None) -> _Node | None:
    if session_id is None:
        return None
    row = await _row(conn, f"{_NODE_SELECT} WHERE id = ?", (session_id,))
    return _node(row) if row is not None else None


async def _children(conn: aiosqlite.Connection, session_id: str) -> list[_Node]:
    rows = await _rows(
        conn, f"{_NODE_SELECT} WHERE parent_session_id = ? ORDER BY started_at, id", (session_id,)
    )
    return [_node(row) for row in rows]


async def _lineage(conn: aiosqlite.Connection, session_id: str) -> list[str]:
    """The compression lineage ending at ``session_id``, root first; a fork stands alone."""
    chain = [session_id]
    node = await _fetch_node(conn, session_id)
    while node is not None and len(chain) <= _COMPRESSION_HOPS:
        parent = await _fetch_node(conn, node.parent_id)
        if parent is None or parent.end_reason != COMPRESSION or node.is_fork(parent):
            break
        if parent.id in chain:
            break
        chain.append(parent.id)
        node = parent
    chain.reverse()
    return chain


async def _compression_tip(conn: aiosqlite.Connection, session_id: str) -> str:
    """Follow compression children (the first published one at each hop) to the tip."""
    current = session_id
    seen = {current}
    for _ in range(_COMPRESSION_HOPS):
        node = await _fetch_node(conn, current)
        if node is None or node.end_reason != COMPRESSION:
            break
        children = [c for c in await _children(conn, current) if not c.is_fork(node)]
        if not children or children[0].id in seen:
            break
        current = children[0].id
        seen.add(current)
    return current


# -- session rows ---------------------------------------------------------------------------


def _info(row: sqlite3.Row) -> SessionInfo:
    marks = [v for v in (row["last_activity_at"], row["last_message_at"]) if v is not None]
    return SessionInfo(
        id=row["id"],
        source=row["source"],
        started_at=row["started_at"],
        model=row["model"],
        model_config=_config_of(row),
        system_prompt=row["prompt_text"],
        parent_session_id=row["parent_session_id"],
        ended_at=row["ended_at"],
        end_reason=row["end_reason"],
        title=row["title"],
        message_count=row["message_count"],
        tool_call_count=row["tool_call_count"],
        api_call_count=row["api_call_count"],
        usage=Usage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_read_tokens=row["cache_read_tokens"],
            cache_write_tokens=row["cache_write_tokens"],
            reasoning_tokens=row["reasoning_tokens"],
        ),
        last_active=max(marks) if marks else row["started_at"],
        identity={name: row[name] for name in IDENTITY_FIELDS if row[name] is not None},
    )


async def _require(conn: aiosqlite.Connection, session_id: str, operation: str) -> sqlite3.Row:
    row = await _row(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,))
    if row is None:
        raise SessionNotFound(f"{operation}: no session {session_id!r}")
    return row


def _check_appendable(row: sqlite3.Row, operation: str) -> None:
    if row["end_reason"] == COMPRESSION:
        raise SessionClosedForAppend(
            f"{operation}: session {row['id']!r} was ended by compression; "
            "write to its continuation (resolve_resume_session_id) instead"
        )


async def _update(conn: aiosqlite.Connection, session_id: str, values: Mapping[str, Any]) -> None:
    """``UPDATE sessions`` with ``values``; column names come from this module only."""
    if values:
        assignments = ", ".join(f"{name} = ?" for name in values)
        await _exec(
            conn,
            f"UPDATE sessions SET {assignments} WHERE id = ?",
            (*values.values(), session_id),
        )


async def _check_parent(
    conn: aiosqlite.Connection, session_id: str, parent_id: str, operation: str
) -> None:
    """The parent exists and linking it would not make a cycle."""
    await _require(conn, parent_id, f"{operation}(parent_session_id)")
    cursor: str | None = parent_id
    seen: set[str] = set()
    while cursor is not None and cursor not in seen:
        if cursor == session_id:
            raise SessionStoreError(
                f"{operation}: making {parent_id!r} the parent of {session_id!r} "
                "would create a cycle"
            )
        seen.add(cursor)
        row = await _row(conn, "SELECT parent_session_id FROM sessions WHERE id = ?", (cursor,))
        cursor = row[0] if row is not None else None


async def _inherit(conn: aiosqlite.Connection, session_id: str) -> None:
    """Fill the child's missing workspace (and, under a compression parent, chat) fields."""
    child = await _require(conn, session_id, "inherit")
    parent_id = child["parent_session_id"]
    parent = await _row(conn, "SELECT * FROM sessions WHERE id = ?", (parent_id,))
    if parent is None:
        return
    names = _WORKSPACE_FIELDS + (_CHAT_FIELDS if parent["end_reason"] == COMPRESSION else ())
    await _update(
        conn,
        session_id,
        {n: parent[n] for n in names if child[n] is None and parent[n] is not None},
    )


async def _store_prompt(conn: aiosqlite.Connection, prompt: str) -> str:
    """Keep ``prompt`` once, under its sha256; return the hash."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    await _exec(
        conn, "INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, prompt)
    )
    return digest


async def _gc_prompts(conn: aiosqlite.Connection) -> None:
    await _exec(
        conn,
        "DELETE FROM system_prompts WHERE NOT EXISTS "
        "(SELECT 1 FROM sessions s WHERE s.system_prompt_hash = system_prompts.hash)",
    )


async def _recount(conn: aiosqlite.Connection, session_id: str) -> int:
    """Recompute the counters from the active rows; return the message count."""
    await _exec(
        conn,
        "UPDATE sessions SET "
        "message_count = (SELECT COUNT(*) FROM messages WHERE session_id = ?1 AND active = 1), "
        f"tool_call_count = ({_ACTIVE_TOOL_CALLS}) WHERE id = ?1",
        (session_id,),
    )
    row = await _require(conn, session_id, "recount")
    return int(row["message_count"])


async def _insert_batch(
    conn: aiosqlite.Connection, session_id: str, encoded: Sequence[EncodedMessage]
) -> list[int]:
    """Insert ``encoded`` with strictly increasing timestamps from now; return the ids."""
    stamps = _batch_timestamps(time.time(), len(encoded))
    return [
        await _insert(conn, INSERT_MESSAGE, enc.params(session_id, stamp))
        for enc, stamp in zip(encoded, stamps, strict=True)
    ]


async def _check_lease(
    conn: aiosqlite.Connection, session_id: str, lock_holder: str | None, operation: str
) -> None:
    """Refuse a compaction when another holder owns (or has taken) the compression lock."""
    lock = await _row(
        conn, "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (session_id,)
    )
    if lock_holder is None:
        if lock is not None and lock["expires_at"] >= time.time():
            raise CompressionInProgress(
                f"{operation}: session {session_id!r} is being compressed by {lock['holder']!r}"
            )
        return
    if lock is None or lock["holder"] != lock_holder:
        owner = f"held by {lock['holder']!r}" if lock is not None else "not held"
        raise CompressionInProgress(
            f"{operation}: compression lock of session {session_id!r} is {owner}, "
            f"not by {lock_holder!r}"
        )


# -- message reads --------------------------------------------------------------------------

_SCOPE_ACTIVE = " AND active = 1"
_SCOPE_SEARCH = " AND (active = 1 OR compacted = 1)"


async def _scoped_messages(
    conn: aiosqlite.Connection, session_id: str, *, include_inactive: bool
) -> list[Message]:
    scope = "" if include_inactive else _SCOPE_ACTIVE
    rows = await _rows(
        conn, f"SELECT * FROM messages WHERE session_id = ?{scope} ORDER BY id", (session_id,)
    )
    return [decode_message(row) for row in rows]


async def _display_messages(conn: aiosqlite.Connection, session_id: str) -> list[Message]:
    """Active and compaction-archived rows, minus originals that were re-cloned."""
    rows = await _rows(
        conn,
        "SELECT * FROM messages WHERE session_id = ?1 AND (active = 1 OR compacted = 1) "
        "AND id NOT IN (SELECT origin_id FROM messages "
        "WHERE session_id = ?1 AND active = 1 AND origin_id IS NOT NULL) ORDER BY id",
        (session_id,),
    )
    return [decode_message(row) for row in rows]


def _context_entry(row: sqlite3.Row | None) -> list[dict[str, str]]:
    if row is None:
        return []
    return [{"role": row["role"], "content": (row["content"] or "")[:_CONTEXT_CHARS]}]


# -- the store ------------------------------------------------------------------------------


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
            await _exec(conn, f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            await _exec(conn, "PRAGMA foreign_keys = ON")
            if self._read_only:
                await self._attempt(conn, self._check_readable, write=False)
            else:
                await self._set_journal_mode(conn)
                await self._attempt(conn, self._migrate, write=True)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.close()
            raise
        self._conn = conn
        return conn

    async def _check_readable(self, conn: aiosqlite.Connection) -> None:
        await check_readable(conn, str(self._path))

    async def _migrate(self, conn: aiosqlite.Connection) -> None:
        await migrate(conn, str(self._path))

    async def _set_journal_mode(self, conn: aiosqlite.Connection) -> None:
        row = await _row(conn, f"PRAGMA journal_mode = {self._journal_mode}")
        mode = str(row[0]).lower() if row is not None else ""
        if self._journal_mode == "wal" and mode != "wal":
            # WAL needs shared memory that network filesystems do not offer; DELETE works
            # everywhere, at the cost of readers waiting for writers.
            _log.warning("%s: WAL journal refused (got %r); using DELETE", self._path, mode)
            row = await _row(conn, "PRAGMA journal_mode = delete")
            mode = str(row[0]).lower() if row is not None else ""
        self._wal = mode == "wal"
        await _exec(conn, f"PRAGMA journal_size_limit = {_JOURNAL_SIZE_LIMIT}")

    async def _attempt(self, conn: aiosqlite.Connection, body: _Body[_T], *, write: bool) -> _T:
        """One transaction: ``BEGIN IMMEDIATE`` for writes (the write lock is taken up front,
        so it cannot fail half-way on an upgrade), a deferred ``BEGIN`` for a consistent read."""
        try:
            # BEGIN inside the try: if cancelled while it is queued, it still runs on the
            # connection's thread, and the ROLLBACK queued behind it must undo it.
            await _exec(conn, "BEGIN IMMEDIATE" if write else "BEGIN")
            result = await body(conn)
            await _exec(conn, "COMMIT")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._rollback(conn)
            raise
        return result

    async def _rollback(self, conn: aiosqlite.Connection) -> None:
        try:
            await _exec(conn, "ROLLBACK")
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

    async def _after_write(self, conn: aiosqlite.Connection) -> None:
        """Every 50 writes, a PASSIVE checkpoint keeps the WAL from growing without bound."""
        self._writes += 1
        if not self._wal or self._writes % _CHECKPOINT_EVERY:
            return
        try:
            await _exec(conn, "PRAGMA wal_checkpoint(PASSIVE)")
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
        unknown = sorted(set(fields) - _CREATE_FIELDS - set(IDENTITY_FIELDS))
        if unknown:
            raise TypeError(f"create_session() got unknown field(s): {', '.join(unknown)}")
        if not session_id:
            raise SessionStoreError("create_session: the session id must not be empty")
        given = fields.get("model_config")
        config = _json_object(given, "model_config") if given is not None else None
        prompt: str | None = fields.get("system_prompt")
        parent_id: str | None = fields.get("parent_session_id")

        async def body(conn: aiosqlite.Connection) -> None:
            if parent_id is not None:
                await _check_parent(conn, session_id, parent_id, "create_session")
            await _exec(
                conn,
                "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                (session_id, source, time.time()),
            )
            row = await _require(conn, session_id, "create_session")
            values: dict[str, Any] = {}
            if row["model"] is None and fields.get("model") is not None:
                values["model"] = fields["model"]
            if config and not _config_of(row):
                values["model_config"] = _dumps(config)
            has_prompt = row["system_prompt_hash"] is not None or row["system_prompt"] is not None
            if prompt is not None and not has_prompt:
                values["system_prompt_hash"] = await _store_prompt(conn, prompt)
            for name in IDENTITY_FIELDS:
                if row[name] is None and fields.get(name) is not None:
                    values[name] = fields[name]
            if row["parent_session_id"] is None and parent_id is not None:
                values["parent_session_id"] = parent_id
            await _update(conn, session_id, values)
            if "parent_session_id" in values:
                await _inherit(conn, session_id)
            await _gc_prompts(conn)

        await self._run("create_session", body, write=True)
        return session_id

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """The same upsert as :meth:`create_session`."""
        return await self.create_session(session_id, source, model=model, **fields)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        async def body(conn: aiosqlite.Connection) -> SessionInfo | None:
            row = await _row(conn, f"{_SESSION_SELECT} WHERE s.id = ?", (session_id,))
            return _info(row) if row is not None else None

        return await self._run("get_session", body, write=False)

    async def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """The exact id, or the only id starting with the prefix, else ``None``."""

        async def body(conn: aiosqlite.Connection) -> str | None:
            if not id_or_prefix:
                return None
            if await _row(conn, "SELECT 1 FROM sessions WHERE id = ?", (id_or_prefix,)):
                return id_or_prefix
            rows = await _rows(
                conn,
                "SELECT id FROM sessions WHERE substr(id, 1, ?) = ? LIMIT 2",
                (len(id_or_prefix), id_or_prefix),
            )
            return str(rows[0][0]) if len(rows) == 1 else None

        return await self._run("resolve_session_id", body, write=False)

    async def update_system_prompt(self, session_id: str, prompt: str) -> None:
        async def body(conn: aiosqlite.Connection) -> None:
            await _require(conn, session_id, "update_system_prompt")
            digest = await _store_prompt(conn, prompt)
            await _update(conn, session_id, {"system_prompt_hash": digest, "system_prompt": None})
            await _gc_prompts(conn)

        await self._run("update_system_prompt", body, write=True)

    async def update_metadata(self, session_id: str, **fields: Any) -> None:
        """Set ``title``, ``model``, ``model_config`` keys (``None`` deletes) or identity
        fields (``None`` clears).

        Raises:
            TypeError: an unknown field was given.
            SessionStoreError: the title is already used by another session.
        """
        self._check_writable("update_metadata")
        unknown = sorted(set(fields) - _METADATA_FIELDS - set(IDENTITY_FIELDS))
        if unknown:
            raise TypeError(f"update_metadata() got unknown field(s): {', '.join(unknown)}")
        given = fields.get("model_config")
        patch = _json_object(given, "model_config") if given is not None else None

        async def body(conn: aiosqlite.Connection) -> None:
            row = await _require(conn, session_id, "update_metadata")
            title = fields.get("title")
            if title is not None:
                owner = await _row(
                    conn, "SELECT id FROM sessions WHERE title = ? AND id != ?", (title, session_id)
                )
                if owner is not None:
                    raise SessionStoreError(
                        f"update_metadata: title {title!r} is already used by session {owner[0]!r}"
                    )
            values: dict[str, Any] = {
                name: fields[name]
                for name in ("title", "model", *IDENTITY_FIELDS)
                if name in fields
            }
            if patch is not None:
                config = _config_of(row)
                for key, value in patch.items():
                    if value is None:
                        config.pop(key, None)
                    else:
                        config[key] = value
                values["model_config"] = _dumps(config)
            await _update(conn, session_id, values)

        await self._run("update_metadata", body, write=True)

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
        buckets = (
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "api_call_count",
        )
        values = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
            api_calls,
        )
        template = "{0} = ?" if absolute else "{0} = {0} + ?"
        assignments = ", ".join(template.format(name) for name in buckets)

        async def body(conn: aiosqlite.Connection) -> None:
            changed = await _exec(
                conn,
                f"UPDATE sessions SET {assignments}, model = COALESCE(model, ?), "
                "last_activity_at = ? WHERE id = ?",
                (*values, model, time.time(), session_id),
            )
            if not changed:
                raise SessionNotFound(f"update_token_counts: no session {session_id!r}")

        await self._run("update_token_counts", body, write=True)

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session; one already ended keeps its first end time and reason."""

        async def body(conn: aiosqlite.Connection) -> None:
            await _require(conn, session_id, "end_session")
            await _exec(
                conn,
                "UPDATE sessions SET ended_at = ?, end_reason = ? "
                "WHERE id = ? AND ended_at IS NULL",
                (time.time(), end_reason, session_id),
            )

        await self._run("end_session", body, write=True)

    async def reopen_session(self, session_id: str) -> None:
        async def body(conn: aiosqlite.Connection) -> None:
            await _require(conn, session_id, "reopen_session")
            await _update(conn, session_id, {"ended_at": None, "end_reason": None})

        await self._run("reopen_session", body, write=True)

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: delegate children go too, other children are orphaned."""

        async def body(conn: aiosqlite.Connection) -> bool:
            if await _fetch_node(conn, session_id) is None:
                return False
            await self._delete_tree(conn, session_id, {session_id})
            await _gc_prompts(conn)
            return True

        return await self._run("delete_session", body, write=True)

    async def _delete_tree(
        self, conn: aiosqlite.Connection, session_id: str, doomed: set[str]
    ) -> None:
        for child in await _children(conn, session_id):
            if child.is_delegate and child.id not in doomed:
                doomed.add(child.id)
                await self._delete_tree(conn, child.id, doomed)
            else:
                await _update(conn, child.id, {"parent_session_id": None})
        await _exec(conn, "DELETE FROM messages WHERE session_id = ?", (session_id,))
        await _exec(conn, "DELETE FROM compression_locks WHERE session_id = ?", (session_id,))
        await _exec(conn, "DELETE FROM sessions WHERE id = ?", (session_id,))

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

        async def body(conn: aiosqlite.Connection) -> int:
            row = await _require(conn, session_id, "append_message")
            _check_appendable(row, "append_message")
            stamp = time.time() if timestamp is None else float(timestamp)
            new_id = await _insert(
                conn, INSERT_MESSAGE, encoded.params(session_id, stamp, token_count)
            )
            await _exec(
                conn,
                "UPDATE sessions SET message_count = message_count + 1, "
                "tool_call_count = tool_call_count + ? WHERE id = ?",
                (encoded.tool_call_count, session_id),
            )
            return new_id

        return await self._run("append_message", body, write=True)

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]:
        """Append atomically; timestamps inside the batch strictly increase."""
        self._check_writable("append_messages")
        encoded = [encode_message(m) for m in messages]

        async def body(conn: aiosqlite.Connection) -> list[int]:
            row = await _require(conn, session_id, "append_messages")
            _check_appendable(row, "append_messages")
            ids = await _insert_batch(conn, session_id, encoded)
            await _exec(
                conn,
                "UPDATE sessions SET message_count = message_count + ?, "
                "tool_call_count = tool_call_count + ? WHERE id = ?",
                (len(encoded), sum(e.tool_call_count for e in encoded), session_id),
            )
            return ids

        return await self._run("append_messages", body, write=True)

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole transcript (archived rows included) with ``messages``."""
        self._check_writable("replace_messages")
        encoded = [encode_message(m) for m in messages]

        async def body(conn: aiosqlite.Connection) -> None:
            await _require(conn, session_id, "replace_messages")
            await _exec(conn, "DELETE FROM messages WHERE session_id = ?", (session_id,))
            await _insert_batch(conn, session_id, encoded)
            await _recount(conn, session_id)

        await self._run("replace_messages", body, write=True)

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
        sql = "SELECT * FROM messages WHERE session_id = ?"
        params: list[Any] = [session_id]
        if not include_inactive:
            sql += _SCOPE_ACTIVE
        if after_id is not None:
            sql += " AND id > ?"
            params.append(after_id)
        sql += " ORDER BY id LIMIT ? OFFSET ?"
        params += [-1 if limit is None else max(limit, 0), max(offset, 0)]

        async def body(conn: aiosqlite.Connection) -> list[StoredMessage]:
            return [
                StoredMessage(
                    id=row["id"],
                    session_id=row["session_id"],
                    message=decode_message(row),
                    timestamp=row["timestamp"],
                    active=bool(row["active"]),
                    compacted=bool(row["compacted"]),
                    token_count=row["token_count"],
                )
                for row in await _rows(conn, sql, params)
            ]

        return await self._run("get_messages", body, write=False)

    async def get_conversation(
        self,
        session_id: str,
        *,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair: bool = False,
    ) -> list[Message]:
        """The transcript as messages; with ancestors, its compression lineage root first."""

        async def body(conn: aiosqlite.Connection) -> list[Message]:
            lineage = await _lineage(conn, session_id) if include_ancestors else [session_id]
            segments = [
                await _scoped_messages(conn, sid, include_inactive=include_inactive)
                for sid in lineage
            ]
            return _dedupe_replayed_users(segments)

        messages = await self._run("get_conversation", body, write=False)
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
        terms = _fts.query_terms(query)
        words = _fts.match_expression(terms)
        substrings = _fts.trigram_expression(terms)
        filters = "" if include_inactive else " AND (m.active = 1 OR m.compacted = 1)"
        params: list[Any] = []
        if source_filter:
            filters += f" AND s.source IN ({_placeholders(source_filter)})"
            params += source_filter
        if exclude_sources:
            filters += f" AND s.source NOT IN ({_placeholders(exclude_sources)})"
            params += exclude_sources
        if role_filter:
            filters += f" AND m.role IN ({_placeholders(role_filter)})"
            params += role_filter
        direction = "ASC" if sort == "oldest" else "DESC"
        start = max(offset, 0)

        def sql(index: str, column: int) -> str:
            return (
                "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, "
                f"snippet({index}, {column}, '>>>', '<<<', '...', 40) AS snippet, "
                "s.source, s.model, s.started_at "
                f"FROM {index} JOIN messages m ON m.id = {index}.rowid "
                "JOIN sessions s ON s.id = m.session_id "
                f"WHERE {index} MATCH ?{filters} "
                f"ORDER BY m.timestamp {direction}, m.id {direction} LIMIT ? OFFSET ?"
            )

        async def body(conn: aiosqlite.Connection) -> list[SearchHit]:
            if limit <= 0 or not terms:
                return []
            rows: list[sqlite3.Row] = []
            if words is not None:
                rows = await _rows(conn, sql("messages_fts", -1), [words, *params, limit, start])
                if (
                    not rows
                    and start
                    and await _rows(conn, sql("messages_fts", -1), [words, *params, 1, 0])
                ):
                    return []  # past the last page of word matches: no fallback
            if not rows and substrings is not None:
                rows = await _rows(
                    conn, sql("messages_fts_trigram", 0), [substrings, *params, limit, start]
                )
            return [await self._hit(conn, row, include_inactive) for row in rows]

        return await self._run("search_messages", body, write=False)

    async def _hit(
        self, conn: aiosqlite.Connection, row: sqlite3.Row, include_inactive: bool
    ) -> SearchHit:
        """The hit with its previous and next message (in search scope) as context."""
        scope = "" if include_inactive else _SCOPE_SEARCH
        around = "SELECT role, content FROM messages WHERE session_id = ? AND id {} ?{} ORDER BY id {} LIMIT 1"
        before = await _row(conn, around.format("<", scope, "DESC"), (row["session_id"], row["id"]))
        own = await _row(conn, "SELECT role, content FROM messages WHERE id = ?", (row["id"],))
        after = await _row(conn, around.format(">", scope, "ASC"), (row["session_id"], row["id"]))
        return SearchHit(
            id=row["id"],
            session_id=row["session_id"],
            role=row["role"],
            snippet=row["snippet"] or "",
            timestamp=row["timestamp"],
            source=row["source"],
            model=row["model"],
            session_started=row["started_at"],
            tool_name=row["tool_name"],
            context=tuple(_context_entry(before) + _context_entry(own) + _context_entry(after)),
        )

    async def search_sessions(
        self, *, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions, most recently active first."""
        where = " WHERE s.source = ?" if source is not None else ""
        params: list[Any] = [source] if source is not None else []

        async def body(conn: aiosqlite.Connection) -> list[SessionInfo]:
            rows = await _rows(
                conn,
                f"SELECT * FROM ({_SESSION_SELECT}{where}) "
                f"ORDER BY {_LAST_ACTIVE} DESC, started_at DESC, id DESC LIMIT ? OFFSET ?",
                [*params, max(limit, 0), max(offset, 0)],
            )
            return [_info(row) for row in rows]

        return await self._run("search_sessions", body, write=False)

    # -- lineage and compression ----------------------------------------------------------

    async def resolve_resume_session_id(self, session_id: str) -> str:
        """Where a resume of ``session_id`` should land.

        Follows the compression chain to its tip, then walks the newest non-fork child
        (branches, resets and subagents are skipped) and returns the deepest session with
        messages on that walk, else the compression tip.
        """

        async def body(conn: aiosqlite.Connection) -> str:
            if not session_id:
                return session_id
            tip = await _compression_tip(conn, session_id)
            current, seen, best = tip, {tip}, None
            for _ in range(_CONTINUATION_HOPS):
                if await _row(
                    conn, "SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (current,)
                ):
                    best = current
                node = await _fetch_node(conn, current)
                children = [c for c in await _children(conn, current) if not c.is_fork(node)]
                if not children:
                    break
                newest = max(children, key=lambda c: (c.started_at, c.id))
                if newest.id in seen:
                    break
                current = newest.id
                seen.add(current)
            return best if best is not None else tip

        return await self._run("resolve_resume_session_id", body, write=False)

    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]:
        """(model history of the tip, repaired; full display history of the lineage)."""

        async def body(conn: aiosqlite.Connection) -> tuple[list[Message], list[Message]]:
            model = await _scoped_messages(conn, session_id, include_inactive=False)
            segments = [
                await _display_messages(conn, sid) for sid in await _lineage(conn, session_id)
            ]
            return model, _dedupe_replayed_users(segments)

        model, display = await self._run("get_resume_conversations", body, write=False)
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

        async def body(conn: aiosqlite.Connection) -> bool:
            now = time.time()
            await _exec(
                conn,
                "DELETE FROM compression_locks WHERE session_id = ? AND expires_at < ?",
                (session_id, now),
            )
            await _exec(
                conn,
                "INSERT OR IGNORE INTO compression_locks "
                "(session_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
                (session_id, holder, now, now + ttl_seconds),
            )
            owner = await _row(
                conn, "SELECT holder FROM compression_locks WHERE session_id = ?", (session_id,)
            )
            return owner is not None and owner[0] == holder

        return await self._run("try_acquire_compression_lock", body, write=True)

    async def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
        self._check_writable("refresh_compression_lock")
        if not holder:
            return False

        async def body(conn: aiosqlite.Connection) -> bool:
            changed = await _exec(
                conn,
                "UPDATE compression_locks SET expires_at = ? WHERE session_id = ? AND holder = ?",
                (time.time() + ttl_seconds, session_id, holder),
            )
            return changed > 0

        return await self._run("refresh_compression_lock", body, write=True)

    async def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` owns it; otherwise do nothing."""

        async def body(conn: aiosqlite.Connection) -> None:
            await _exec(
                conn,
                "DELETE FROM compression_locks WHERE session_id = ? AND holder = ?",
                (session_id, holder),
            )

        await self._run("release_compression_lock", body, write=True)

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        async def body(conn: aiosqlite.Connection) -> str | None:
            row = await _row(
                conn,
                "SELECT holder FROM compression_locks WHERE session_id = ? AND expires_at >= ?",
                (session_id, time.time()),
            )
            return str(row[0]) if row is not None else None

        return await self._run("get_compression_lock_holder", body, write=False)

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
        patch = _json_object(model_config_patch, "model_config_patch") if model_config_patch else {}
        clone_columns = ", ".join(MESSAGE_COLUMNS)
        clone_values = ", ".join("id" if c == "origin_id" else c for c in MESSAGE_COLUMNS)

        async def body(conn: aiosqlite.Connection) -> int:
            row = await _require(conn, session_id, "archive_and_compact")
            await _check_lease(conn, session_id, lock_holder, "archive_and_compact")
            _check_appendable(row, "archive_and_compact")
            late: list[int] = []
            if watermark is not None:
                late = [
                    r[0]
                    for r in await _rows(
                        conn,
                        "SELECT id FROM messages WHERE session_id = ? AND active = 1 AND id > ? "
                        "ORDER BY id",
                        (session_id, watermark),
                    )
                ]
            await _exec(
                conn,
                "UPDATE messages SET active = 0, compacted = 1 WHERE session_id = ? AND active = 1",
                (session_id,),
            )
            await _insert_batch(conn, session_id, encoded)
            for origin in late:
                await _exec(
                    conn,
                    f"INSERT INTO messages ({clone_columns}) "
                    f"SELECT {clone_values} FROM messages WHERE id = ?",
                    (origin,),
                )
            if patch:
                config = _config_of(row)
                for key, value in patch.items():
                    if value is None:
                        config.pop(key, None)
                    else:
                        config[key] = value
                await _update(conn, session_id, {"model_config": _dumps(config)})
            return await _recount(conn, session_id)

        return await self._run("archive_and_compact", body, write=True)

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
        operation = "publish_compression_child"
        self._check_writable(operation)
        encoded = [encode_message(m) for m in messages]
        parent_id, child_id = parent_session_id, child_session_id

        async def body(conn: aiosqlite.Connection) -> str:
            parent = await _require(conn, parent_id, operation)
            await _check_lease(conn, parent_id, lock_holder, operation)
            _check_appendable(parent, operation)
            if not child_id or child_id == parent_id:
                raise SessionStoreError(
                    f"{operation}: invalid child id {child_id!r} for parent {parent_id!r}"
                )
            existing = await _row(conn, "SELECT * FROM sessions WHERE id = ?", (child_id,))
            if existing is not None:
                if existing["parent_session_id"] not in (None, parent_id):
                    raise SessionStoreError(
                        f"{operation}: session {child_id!r} already exists as a child of "
                        f"{existing['parent_session_id']!r}"
                    )
                await _check_parent(conn, child_id, parent_id, operation)
            now = time.time()
            await _exec(
                conn,
                "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                (child_id, source or parent["source"], now),
            )
            child = await _require(conn, child_id, operation)
            values: dict[str, Any] = {"parent_session_id": parent_id}
            if child["model"] is None:
                values["model"] = parent["model"]
            if not _config_of(child):
                inherited = {k: v for k, v in _config_of(parent).items() if k not in _FORK_MARKERS}
                values["model_config"] = _dumps(inherited)
            if child["system_prompt_hash"] is None and child["system_prompt"] is None:
                values["system_prompt_hash"] = parent["system_prompt_hash"]
            await _update(conn, child_id, values)
            await _update(conn, parent_id, {"ended_at": now, "end_reason": COMPRESSION})
            await _inherit(conn, child_id)
            await _insert_batch(conn, child_id, encoded)
            await _recount(conn, child_id)
            await _gc_prompts(conn)
            return child_id

        return await self._run(operation, body, write=True)
