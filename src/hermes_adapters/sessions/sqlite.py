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
from collections.abc import Awaitable, Callable
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import aiosqlite
import anyio

from hermes_adapters.sessions import _sqlite_compaction as _compaction
from hermes_adapters.sessions import _sqlite_messages as _messages
from hermes_adapters.sessions import _sqlite_search as _search
from hermes_adapters.sessions import _sqlite_sessions as _sessions
from hermes_adapters.sessions._sql_store import _SqlSessionStore
from hermes_adapters.sessions._sqlite_rows import execute, fetch_one
from hermes_adapters.sessions._sqlite_schema import check_readable, migrate
from hermes_core.errors import ReadOnlyStore, SessionStoreError, StoreClosed

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


class SQLiteSessionStore(_SqlSessionStore):
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

    _sessions_sql = _sessions
    _messages_sql = _messages
    _compaction_sql = _compaction
    _search_sql = _search

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
