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
  turned into "no results" (the agent would believe its history is empty);
- full-text indexing is deferred (``_sqlite_fts``): an append only inserts rows; they are
  indexed in batches by a background task once writes go quiet (``_idle_indexer``), by
  :meth:`SQLiteSessionStore.index_pending`, or by a search on a writable store, which
  catches up before it searches, so a store always finds what it wrote. A read-only store
  cannot index; it searches rows not indexed yet through a temporary index of its own, and
  so does a writable store whose catch-up finds another connection holding the write lock
  (a search must not wait for someone else's write: in WAL mode it is a plain read).

aiosqlite runs each call on its own thread: that thread is the one documented exception to
"no hidden threads" (DESIGN.md §6). The store therefore needs the asyncio backend of anyio.
Semantics match :class:`~hermes_adapters.sessions.memory.InMemorySessionStore`; both pass
``hermes_core.testing.SessionStoreContract``.

This module owns the connection, the writer lock, the retries and the background indexer;
each operation's SQL is in ``_sqlite_sessions``, ``_sqlite_messages``, ``_sqlite_compaction``,
``_sqlite_search`` and ``_sqlite_fts``, run in the transaction opened here; rules all stores
share: ``_lineage``, ``_store_common``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable
from functools import partial
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import aiosqlite
import anyio

from hermes_adapters.sessions import _sqlite_compaction as _compaction
from hermes_adapters.sessions import _sqlite_fts as _fts_index
from hermes_adapters.sessions import _sqlite_messages as _messages
from hermes_adapters.sessions import _sqlite_search as _search
from hermes_adapters.sessions import _sqlite_sessions as _sessions
from hermes_adapters.sessions._idle_indexer import IdleIndexer
from hermes_adapters.sessions._sql_store import _SqlSessionStore
from hermes_adapters.sessions._sqlite_rows import execute, fetch_one, run
from hermes_adapters.sessions._sqlite_schema import check_readable, migrate
from hermes_core.errors import ReadOnlyStore, SessionStoreError, StoreClosed
from hermes_core.ports.sessions import SearchHit

__all__ = ["SQLiteSessionStore"]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Body = Callable[[aiosqlite.Connection], Awaitable[_T]]

_JOURNAL_MODES = frozenset({"wal", "delete", "truncate", "persist"})
_SYNCHRONOUS = frozenset({"full", "normal"})
_CHECKPOINT_EVERY = 50
_JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_FAST_RETRIES = 5
"""Attempts that wait 20-150 ms before the retry switches to 0.25-1 s waits."""
_INDEX_CHUNK = 2_000
"""Ids indexed per transaction (about 0.1 s of work on the development machine): the
longest an append waits for the background indexer."""
_INDEX_IDLE_DELAY = 0.2
"""Seconds without a message write before the background indexer starts."""
_INDEX_FORCE_BACKLOG = 50_000
"""A backlog this large is indexed even while writes continue, so it stays bounded."""
_SEARCH_CATCH_UP_WAIT_MS = 100
"""The longest a search's catch-up waits for another connection's write lock (one attempt)
before the search reads the pending rows through its temporary index instead."""
_MESSAGE_WRITES = frozenset(
    {
        "append_message",
        "append_messages",
        "replace_messages",
        "archive_and_compact",
        "publish_compression_child",
    }
)
"""The operations that insert message rows, i.e. leave work for the indexer."""


def _is_busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (any extended code): another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class _Locked(Exception):
    """An impatient transaction (``_run(..., patient=False)``) found the database locked by
    another connection; internal, never leaves the store."""


def _backoff(attempt: int) -> float:
    """Jittered wait before retry ``attempt``: short while a writer is likely almost done."""
    if attempt <= _FAST_RETRIES:
        return random.uniform(0.020, 0.150)
    return random.uniform(0.25, 1.0)


class SQLiteSessionStore(_SqlSessionStore):
    """A :class:`~hermes_core.ports.SessionStore` in one SQLite file.

    The connection opens (and the schema is created or migrated) on first use, so building
    a store costs nothing and never touches the disk.

    Appends do not update the full-text indexes; a background task indexes new messages
    once writes have been quiet for a moment, a search indexes what is pending before it
    runs, and :meth:`index_pending` does it on demand (see ``docs/sessions.md``).

    Args:
        path: the database file; its directory must exist.
        read_only: open ``file:...?mode=ro`` and refuse every write with ``ReadOnlyStore``.
        busy_timeout_ms: how long SQLite itself waits for a lock before reporting busy.
        journal_mode: ``"wal"`` (falls back to ``"delete"`` where WAL is refused),
            ``"delete"``, ``"truncate"`` or ``"persist"``.
        retry_budget_seconds: how long busy transactions are retried before the operation
            fails with ``SessionStoreError``.
        synchronous: ``"full"`` (default) syncs the disk at every commit, so a commit
            reported done survives a power cut; ``"normal"`` syncs only at WAL
            checkpoints: a power cut may lose the last commits (never corrupt the file),
            for more append throughput (5-50 % measured, disk-bound). For bulk data.
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
        synchronous: str = "full",
    ) -> None:
        sync = synchronous.lower()
        if sync not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
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
        self._synchronous = sync
        self._retry_budget = float(retry_budget_seconds)
        self._conn: aiosqlite.Connection | None = None
        self._lock = anyio.Lock()
        self._closed = False
        self._wal = False
        self._writes = 0
        self._indexer = IdleIndexer(
            backlog=self._backlog,
            index_chunk=self._index_chunk,
            idle_delay=_INDEX_IDLE_DELAY,
            force_backlog=_INDEX_FORCE_BACKLOG,
            name=f"hermes-fts-indexer:{self._path.name}",
        )

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
        ``StoreClosed``. Idempotent.

        Background indexing in progress is cancelled (its chunk is rolled back); rows not
        indexed yet are indexed by the next writable store on the file.
        """
        if self._closed:
            return
        self._closed = True
        # Shielded: a cancelled close would leave the connection (and its thread) open.
        with anyio.CancelScope(shield=True):
            await self._indexer.aclose()
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
                backlog = 0
            else:
                await self._set_journal_mode(conn)
                backlog = await self._attempt(conn, lambda c: _migrated(c, where), write=True)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.close()
            raise
        self._conn = conn
        if backlog:  # left by a writer that closed or died before indexing it
            self._indexer.wake()
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
        await execute(conn, f"PRAGMA synchronous = {self._synchronous}")

    async def _attempt(self, conn: aiosqlite.Connection, body: _Body[_T], *, write: bool) -> _T:
        """One transaction: ``BEGIN IMMEDIATE`` for writes (the write lock is taken up front,
        so it cannot fail half-way on an upgrade), a deferred ``BEGIN`` for a consistent read."""
        try:
            # BEGIN inside the try: if cancelled while it is queued, it still runs on the
            # connection's thread, and the ROLLBACK queued behind it must undo it.
            await run(conn, "BEGIN IMMEDIATE" if write else "BEGIN")
            result = await body(conn)
            await run(conn, "COMMIT")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._rollback(conn)
            raise
        return result

    async def _attempt_briefly(
        self, conn: aiosqlite.Connection, body: _Body[_T], *, write: bool
    ) -> _T:
        """:meth:`_attempt` with SQLite's own lock wait cut to ``_SEARCH_CATCH_UP_WAIT_MS``
        (the connection's ``busy_timeout`` alone would make one attempt wait 1 s)."""
        brief = min(self._busy_timeout_ms, _SEARCH_CATCH_UP_WAIT_MS)
        await execute(conn, f"PRAGMA busy_timeout = {brief}")
        try:
            return await self._attempt(conn, body, write=write)
        finally:
            if self._conn is conn:  # not dropped by a failed rollback
                with anyio.CancelScope(shield=True):
                    await execute(conn, f"PRAGMA busy_timeout = {self._busy_timeout_ms}")

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

    async def _run(
        self, operation: str, body: _Body[_T], *, write: bool, patient: bool = True
    ) -> _T:
        """Run ``body`` in a transaction, retrying while the database is locked.

        ``patient=False`` is for work that can be skipped (a search's catch-up): one attempt
        that waits at most ``_SEARCH_CATCH_UP_WAIT_MS`` for another connection's lock, then
        raises ``_Locked`` instead of retrying for the whole budget.

        Raises:
            StoreClosed, ReadOnlyStore: the store is closed, or read-only and this writes.
            SessionStoreError: any SQLite error, or the lock outlived the retry budget.
            _Locked: not ``patient``, and another connection held the lock.
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
                    if patient:
                        result = await self._attempt(conn, body, write=write)
                    else:
                        result = await self._attempt_briefly(conn, body, write=write)
                    break
                except sqlite3.Error as exc:
                    if not _is_busy(exc):
                        raise SessionStoreError(f"{operation} on {self._path}: {exc}") from exc
                    if not patient:
                        raise _Locked(f"{operation}: {self._path} is locked") from exc
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
                if operation in _MESSAGE_WRITES:
                    self._indexer.note_write()
            return result

    async def _read(self, operation: str, body: _Body[_T]) -> _T:
        return await self._run(operation, body, write=False)

    async def _write(self, operation: str, body: _Body[_T], *, patient: bool = True) -> _T:
        return await self._run(operation, body, write=True, patient=patient)

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

    # -- deferred full-text indexing -----------------------------------------------------

    async def index_pending(self) -> int:
        """Index every message committed before this call that the full-text indexes do not
        hold yet; return how many rows this call indexed (the background task may index
        some of them meanwhile).

        Appends do not index (that is what makes them fast); a background task does it
        once writes have been quiet for a moment, and a search catches up first. A host
        that would rather pay at a time of its choosing (after a bulk import, before
        handing the file to read-only readers) calls this. It works in chunks, each its own
        transaction, so appends from other tasks interleave.

        Raises:
            StoreClosed, ReadOnlyStore: the store is closed, or read-only.
            SessionStoreError: SQLite failed, or the lock outlived the retry budget.
        """
        self._check_writable("index_pending")
        return await self._index_pending("index_pending")

    async def _index_pending(self, operation: str, *, patient: bool = True) -> int:
        """Index, chunk by chunk, what was committed when the first chunk ran; with
        ``patient=False`` each chunk is one brief attempt (``_Locked`` if it finds the lock
        taken: the chunks already done stay done)."""
        total = 0
        until: int | None = None
        while True:
            step = await self._write(
                operation,
                partial(_fts_index.catch_up, limit=_INDEX_CHUNK, until=until),
                patient=patient,
            )
            total += step.indexed
            until = step.top if until is None else until
            if step.watermark >= until:
                return total

    async def _run_search(self, body: _search.SearchBody) -> list[SearchHit]:
        """Read-your-writes: a writable store indexes what is pending, then searches; a
        read-only one searches the pending rows through its temporary tail index.

        The catch-up needs the write lock. If another connection holds it (a bulk append,
        its own catch-up, a compaction), the search does not wait for it: in WAL mode a
        search is a read that never blocks on a writer, and waiting out the retry budget
        would turn someone else's long write into a failed search. It searches like a
        read-only store instead; the read's snapshot holds every committed row, so it still
        finds what this store (or anyone) wrote.
        """
        if not self._read_only:
            hits = await self._read("search_messages", lambda c: body(c, catch_up_first=True))
            if hits is not None:
                return hits
            with contextlib.suppress(_Locked):  # the tail index below covers the rest
                await self._index_pending("search_messages", patient=False)
        hits = await self._read("search_messages", lambda c: body(c, catch_up_first=False))
        if hits is None:  # pragma: no cover - without catch_up_first a body always searches
            raise SessionStoreError("search_messages: the search body did not search")
        return hits

    async def _backlog(self) -> int:
        return await self._read("fts_backlog", _fts_index.backlog)

    async def _index_chunk(self) -> int:
        """One chunk for the background indexer; the rows (ids) still pending after it."""
        step = await self._write("fts_index", lambda c: _fts_index.catch_up(c, limit=_INDEX_CHUNK))
        return step.remaining


async def _migrated(conn: aiosqlite.Connection, where: str) -> int:
    """Create or upgrade the schema; return the full-text backlog found."""
    await migrate(conn, where)
    return await _fts_index.backlog(conn)
