"""The PostgreSQL session store: the SessionDB twin (REFERENCE.md §2) on SQLAlchemy + asyncpg.

For several processes (gateway workers, a fleet of agents) sharing one history, where
SQLite's single writer is the bottleneck. Same methods, same results: it passes
``hermes_core.testing.SessionStoreContract`` unchanged, like the in-memory and SQLite
stores, so switching storage is a URL (``postgresql+asyncpg://user@host/db``).

How it keeps the lessons of WIRE.md §4 items 18-20:

- every operation is one transaction on a pooled connection. Writes run at READ COMMITTED
  and first lock the session row (``FOR NO KEY UPDATE``, or the counter ``UPDATE`` of an
  append), so writers of one session take turns: counters stay exact, batch timestamps
  strictly increase, and within a session a higher row id is always committed after a
  lower one (``get_messages(after_id=...)`` cannot skip a row). Reads run READ ONLY at
  REPEATABLE READ: a lineage walk sees one snapshot. Deadlocks, serialisation failures and
  prepared statements made stale by another process's DDL (PostgreSQL rolled the
  transaction back, so a rerun cannot duplicate anything) are retried with jitter;
  everything else fails loudly as ``SessionStoreError``, never as an empty result;
- the schema is created or reconciled under ``pg_advisory_xact_lock`` (``_pg_schema``), so
  two processes starting on an empty database at once do not race;
- search never turns user text into query syntax: each term goes through
  ``phraseto_tsquery`` as a bound parameter, so ``it's``, ``a/b.py``, ``NEAR``,
  ``"unbalanced`` or ``-minus`` are words to find, never an error or silent ``[]``;
- a cancelled operation rolls back, or, if cancelled mid-statement, its connection is
  invalidated (shielded, so the cleanup itself cannot be cancelled) and never reused.

Search (``_pg_search``) uses the ``simple`` text-search configuration where SQLite uses FTS5
``unicode61``, with a substring fallback where SQLite retries on its trigram index; that
module lists where the two differ. A read-only store's connections also set
``default_transaction_read_only``, so PostgreSQL refuses any write that reaches them.

Pool and driver options (``pool_size``, ``max_overflow``, ``pool_timeout``,
``pool_recycle``, ``pool_pre_ping``, ``connect_args``) go to
:func:`sqlalchemy.ext.asyncio.create_async_engine`; behind PgBouncer in transaction mode
pass ``connect_args={"statement_cache_size": 0, "prepared_statement_cache_size": 0}``.
Connections carry ``application_name=hermes`` unless ``connect_args`` sets one.

This module owns the engine, the transactions, the retries and the error mapping; each
operation's SQL is in ``_pg_sessions``, ``_pg_messages``, ``_pg_compaction`` and
``_pg_search``, run in the transaction opened here; rules all stores share: ``_lineage``,
``_store_common``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import anyio
import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from hermes_adapters.sessions import _pg_compaction as _compaction
from hermes_adapters.sessions import _pg_messages as _messages
from hermes_adapters.sessions import _pg_search as _search
from hermes_adapters.sessions import _pg_sessions as _sessions
from hermes_adapters.sessions._pg_schema import (
    SCHEMA_VERSION,
    check_readable,
    migrate,
    read_schema_version,
)
from hermes_adapters.sessions._sql_store import _SqlSessionStore
from hermes_core.errors import ReadOnlyStore, SessionStoreError, StoreClosed

__all__ = ["PostgresSessionStore"]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Body = Callable[[AsyncConnection], Awaitable[_T]]

_RETRIES = 5
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})
"""serialization_failure and deadlock_detected."""
_READ_ONLY_SQLSTATE = "25006"
_UNIQUE_VIOLATION = "23505"
_TITLE_INDEX = "idx_sessions_title"
_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    SQLAlchemyError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    OSError,
    UnicodeError,
)
"""What the driver stack raises: mapped to ``SessionStoreError`` at the boundary."""


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def _retryable(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled the transaction back in a way a rerun can fix.

    Serialisation failures and deadlocks; and a prepared statement gone stale because
    another process changed the schema (the dialect has already dropped its caches).
    """
    cause = getattr(getattr(exc, "orig", None), "__cause__", None)
    return _sqlstate(exc) in _RETRY_SQLSTATES or isinstance(
        cause, asyncpg.exceptions.InvalidCachedStatementError
    )


def _backoff(attempt: int) -> float:
    return random.uniform(0.01, 0.05) * attempt


async def _checkout(engine: AsyncEngine) -> AsyncConnection:
    """A pooled connection. Shielded: asyncpg cancelled mid-handshake leaks a failed
    future and a half-open socket; connecting is short and bounded by its timeout."""
    with anyio.CancelScope(shield=True):
        conn = await engine.connect()
    return conn


# -- the store ------------------------------------------------------------------------------


class PostgresSessionStore(_SqlSessionStore):
    """A :class:`~hermes_core.ports.SessionStore` in a PostgreSQL database.

    Nothing connects until the first operation, which creates the engine and creates or
    reconciles the schema (or, read-only, checks it exists). Use ``async with`` or call
    :meth:`close`, which waits for operations in flight and disposes the engine.

    Args:
        url: ``postgresql+asyncpg://user:password@host:port/database``; ``postgresql://``
            and ``postgres://`` are read as asyncpg URLs too.
        read_only: run every operation in a READ ONLY transaction, refuse writes with
            ``ReadOnlyStore``, and never create or migrate the schema.
        pool_size, max_overflow, pool_timeout, pool_recycle, pool_pre_ping, connect_args:
            passed to SQLAlchemy's engine (and ``connect_args`` on to ``asyncpg.connect``).
        engine: an engine to use instead of making one from ``url``; the caller keeps
            owning it (``close`` does not dispose it) and ``url`` only names the store.
    """

    _sessions_sql = _sessions
    _messages_sql = _messages
    _compaction_sql = _compaction
    _search_sql = _search

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        pool_size: int = 5,
        max_overflow: int = 10,
        pool_timeout: float = 30,
        pool_recycle: int = 1800,
        pool_pre_ping: bool = True,
        connect_args: Mapping[str, Any] | None = None,
        engine: AsyncEngine | None = None,
    ) -> None:
        if pool_size < 1 or max_overflow < -1 or pool_timeout < 0:
            raise ValueError(
                "pool_size must be at least 1, max_overflow at least -1 (no limit) and "
                "pool_timeout not negative"
            )
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise ValueError(f"not a database URL: {exc}") from exc
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+asyncpg")
        if engine is None and parsed.drivername != "postgresql+asyncpg":
            raise ValueError(
                f"PostgresSessionStore needs a postgresql+asyncpg:// URL, not {parsed.drivername}"
            )
        self._url = parsed
        self._where = parsed.render_as_string(hide_password=True)
        self._read_only = read_only
        args: dict[str, Any] = dict(connect_args or {})
        settings = dict(args.get("server_settings") or {})
        settings.setdefault("application_name", "hermes")
        if read_only:
            # Defence in depth: PostgreSQL itself refuses writes on these connections,
            # whatever SQL reaches them, on top of each transaction being READ ONLY.
            settings["default_transaction_read_only"] = "on"
        args["server_settings"] = settings
        self._engine_options: dict[str, Any] = {
            "pool_size": pool_size,
            "max_overflow": max_overflow,
            "pool_timeout": pool_timeout,
            "pool_recycle": pool_recycle,
            "pool_pre_ping": pool_pre_ping,
            "connect_args": args,
        }
        self._engine = engine
        self._owns_engine = engine is None
        self._ready = False
        self._ready_lock = anyio.Lock()
        self._closed = False
        self._in_flight = 0
        self._drained = anyio.Event()

    @property
    def url(self) -> str:
        """The database URL with the password masked."""
        return self._where

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def engine(self) -> AsyncEngine | None:
        """The SQLAlchemy engine, once the first operation has created it."""
        return self._engine

    async def __aenter__(self) -> PostgresSessionStore:
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
        """Wait for operations in flight, then dispose the engine (if the store made it);
        later calls raise ``StoreClosed``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Shielded: a cancelled close would leave pooled connections open.
        with anyio.CancelScope(shield=True):
            if self._in_flight:
                await self._drained.wait()
            engine = self._engine
            if engine is not None and self._owns_engine:
                self._engine = None
                try:
                    await engine.dispose()
                except _DRIVER_ERRORS as exc:
                    raise SessionStoreError(f"close {self._where}: {exc}") from exc

    # -- connection and transactions ----------------------------------------------------

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosed(f"{operation}: the session store {self._where} was closed")

    def _check_writable(self, operation: str) -> None:
        self._check_open(operation)
        if self._read_only:
            raise ReadOnlyStore(f"{operation}: the session store {self._where} is read-only")

    def _error(self, operation: str, exc: BaseException) -> SessionStoreError:
        """The Hermes error for a driver error raised by ``operation``."""
        state = _sqlstate(exc)
        detail = str(getattr(exc, "orig", None) or exc).strip()
        if state == _READ_ONLY_SQLSTATE:
            return ReadOnlyStore(f"{operation}: {self._where} refused a write: {detail}")
        if state == _UNIQUE_VIOLATION and _TITLE_INDEX in detail:
            return SessionStoreError(f"{operation}: that title is already used ({detail})")
        if isinstance(exc, OSError | asyncpg.InterfaceError) or (
            isinstance(exc, DBAPIError) and exc.connection_invalidated
        ):
            return SessionStoreError(
                f"{operation}: lost or could not open the connection to {self._where}: "
                f"{detail}. Is the server running and reachable?"
            )
        return SessionStoreError(f"{operation} on {self._where}: {detail}")

    async def _engine_ready(self) -> AsyncEngine:
        """The engine, created on first use with the schema prepared (once per store)."""
        if self._ready and self._engine is not None:
            return self._engine
        async with self._ready_lock:
            if self._engine is None:
                self._engine = create_async_engine(self._url, **self._engine_options)
            if not self._ready:
                if self._read_only:
                    await self._attempt(self._engine, self._check_readable, write=False)
                else:
                    await self._prepare_schema(self._engine)
                self._ready = True
        return self._engine

    async def _check_readable(self, conn: AsyncConnection) -> None:
        await check_readable(conn, self._where)

    async def _prepare_schema(self, engine: AsyncEngine) -> None:
        """Migrate unless the schema is current: the common case takes no lock."""

        async def current(conn: AsyncConnection) -> bool:
            return await read_schema_version(conn) == SCHEMA_VERSION

        if not await self._attempt(engine, current, write=False):
            await self._attempt(engine, self._migrate, write=True)

    async def _migrate(self, conn: AsyncConnection) -> None:
        await migrate(conn, self._where)

    async def _attempt(self, engine: AsyncEngine, body: _Body[_T], *, write: bool) -> _T:
        """One transaction on a pooled connection: READ COMMITTED for writes, READ ONLY
        REPEATABLE READ (one snapshot) for reads and for every read-only store operation.

        On any failure the transaction is rolled back; if that is not possible (cancelled
        mid-statement, connection lost) the connection is invalidated so the pool never
        hands out a connection in an unknown state. Cleanup is shielded from cancellation.
        """
        conn: AsyncConnection | None = None
        try:
            conn = await _checkout(engine)
            if write and not self._read_only:
                await conn.execution_options(isolation_level="READ COMMITTED")
            else:
                await conn.execution_options(
                    isolation_level="REPEATABLE READ", postgresql_readonly=True
                )
            await conn.begin()
            result = await body(conn)
            await conn.commit()
        except BaseException as exc:
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await self._discard(conn, exc)
            raise
        with anyio.CancelScope(shield=True):
            try:
                await conn.close()
            except _DRIVER_ERRORS as exc:
                # Committed already: reporting a failure now would invite a duplicate write.
                _log.warning("%s: returning a connection to the pool failed: %s", self._where, exc)
        return result

    async def _discard(self, conn: AsyncConnection, exc: BaseException) -> None:
        """Roll back after ``exc``; when that is not possible (a cancellation mid-statement,
        a lost connection) invalidate the connection so the pool closes it. Never raises:
        ``exc`` is what the caller must see."""
        healthy = isinstance(exc, Exception) and not conn.invalidated
        if healthy:
            try:
                await conn.rollback()
            except _DRIVER_ERRORS as cleanup:
                _log.warning(
                    "%s: rollback failed (%s); dropping the connection", self._where, cleanup
                )
                healthy = False
        try:
            if not healthy and not conn.invalidated:
                await conn.invalidate()
        except _DRIVER_ERRORS as cleanup:  # the connection is gone either way
            _log.debug("%s: invalidating a connection failed: %s", self._where, cleanup)
        finally:
            try:
                await conn.close()
            except _DRIVER_ERRORS as cleanup:
                _log.debug("%s: closing a connection failed: %s", self._where, cleanup)

    async def _run(self, operation: str, body: _Body[_T], *, write: bool) -> _T:
        """Run ``body`` in a transaction; retry the ones PostgreSQL rolled back for us.

        Raises:
            StoreClosed, ReadOnlyStore: the store is closed, or read-only and this writes.
            SessionStoreError: any database or connection error.
        """
        if write:
            self._check_writable(operation)
        else:
            self._check_open(operation)
        self._in_flight += 1
        try:
            engine = await self._engine_ready()
            attempt = 0
            while True:
                attempt += 1
                try:
                    return await self._attempt(engine, body, write=write)
                except _DRIVER_ERRORS as exc:
                    if _retryable(exc) and attempt < _RETRIES:
                        await anyio.sleep(_backoff(attempt))
                        continue
                    raise self._error(operation, exc) from exc
        except _DRIVER_ERRORS as exc:  # from creating the engine or preparing the schema
            raise self._error(operation, exc) from exc
        finally:
            self._in_flight -= 1
            if self._closed and not self._in_flight:
                self._drained.set()

    async def _read(self, operation: str, body: _Body[_T]) -> _T:
        return await self._run(operation, body, write=False)

    async def _write(self, operation: str, body: _Body[_T]) -> _T:
        return await self._run(operation, body, write=True)
