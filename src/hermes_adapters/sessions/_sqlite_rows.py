"""Statements on the SQLite store's connection, and message rows out of it.

Why this module exists: every part of the SQLite store (session upserts, message writes,
compaction, search) runs single statements on an ``aiosqlite`` connection; keeping those
few helpers in one place keeps the statement handling identical everywhere, and keeps the
store module about connections and transactions. Session rows become port values through
``_store_common`` (shared with PostgreSQL); messages are encoded and decoded by
``_sqlite_schema``, which owns the column layout.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import aiosqlite

from hermes_adapters.sessions._sqlite_schema import decode_message
from hermes_core.errors import SessionStoreError
from hermes_core.ports.sessions import StoredMessage

__all__ = ["execute", "fetch_all", "fetch_one", "insert", "run", "stored_message"]


async def fetch_all(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[sqlite3.Row]:
    return list(await conn.execute_fetchall(sql, params))


async def fetch_one(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> sqlite3.Row | None:
    rows = await fetch_all(conn, sql, params)
    return rows[0] if rows else None


async def execute(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
) -> int:
    """Run one statement and return its row count (cursor closed at once)."""
    async with conn.execute(sql, params) as cursor:
        return cursor.rowcount


async def run(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> None:
    """Run one statement whose row count nobody needs, in one hop to the connection's
    thread (``execute`` takes two: the statement, then closing its cursor). For the
    statements every write runs (``BEGIN``, ``COMMIT``, counters)."""
    await conn.execute_fetchall(sql, params)


async def insert(conn: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> int:
    """Run one ``INSERT`` and return the new row id, in one hop to the connection's thread."""
    row = await conn.execute_insert(sql, params)
    if row is None or row[0] is None:  # pragma: no cover - an INSERT always sets it
        raise SessionStoreError("insert returned no row id")
    return int(row[0])


def stored_message(row: sqlite3.Row) -> StoredMessage:
    """A ``messages`` row as the port's ``StoredMessage``."""
    return StoredMessage(
        id=row["id"],
        session_id=row["session_id"],
        message=decode_message(row),
        timestamp=row["timestamp"],
        active=bool(row["active"]),
        compacted=bool(row["compacted"]),
        token_count=row["token_count"],
    )
