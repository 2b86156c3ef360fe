"""Rows in and out of the SQLite session store: statements and row conversions.

Why this module exists: every part of the SQLite store (session upserts, message writes,
compaction, search) runs single statements on an ``aiosqlite`` connection and turns
``sqlite3.Row`` objects into port values (``SessionInfo``, ``StoredMessage``, lineage
nodes). Keeping those few helpers in one place keeps the conversions identical wherever a
row is read, and keeps the store module about connections and transactions. Messages
themselves are encoded and decoded by ``_sqlite_schema``, which owns the column layout.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import aiosqlite

from hermes_adapters.sessions._lineage import Node
from hermes_adapters.sessions._sqlite_schema import decode_message
from hermes_core.errors import SessionStoreError
from hermes_core.messages import Usage
from hermes_core.ports.sessions import IDENTITY_FIELDS, SessionInfo, StoredMessage

__all__ = [
    "SESSION_SELECT",
    "config_of",
    "dumps",
    "execute",
    "fetch_all",
    "fetch_one",
    "insert",
    "json_object",
    "lineage_node",
    "merge_config",
    "session_info",
    "stored_message",
]

SESSION_SELECT = (
    "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS prompt_text, "
    "(SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id) AS last_message_at "
    "FROM sessions s LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash"
)
"""Session rows with the columns :func:`session_info` reads on top of the table's own."""


# -- statements -----------------------------------------------------------------------------


async def fetch_all(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[sqlite3.Row]:
    return list(await conn.execute_fetchall(sql, params))


async def fetch_one(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> sqlite3.Row | None:
    rows = await fetch_all(conn, sql, params)
    return rows[0] if rows else None


async def execute(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement and return its row count (cursor closed at once)."""
    async with conn.execute(sql, params) as cursor:
        return cursor.rowcount


async def insert(conn: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> int:
    async with conn.execute(sql, params) as cursor:
        new_id = cursor.lastrowid
    if new_id is None:  # pragma: no cover - an INSERT always sets it
        raise SessionStoreError("insert returned no row id")
    return new_id


# -- JSON columns ---------------------------------------------------------------------------


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON round trip of ``value``: what the database will hand back; refuses non-JSON."""
    try:
        copied: dict[str, Any] = json.loads(dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(f"{what} must be JSON-serialisable: {exc}") from exc
    return copied


def config_of(row: sqlite3.Row) -> dict[str, Any]:
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


def merge_config(row: sqlite3.Row, patch: Mapping[str, Any]) -> str:
    """The row's ``model_config`` with ``patch`` merged (``None`` deletes a key), as JSON."""
    config = config_of(row)
    for key, value in patch.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return dumps(config)


# -- rows to port values --------------------------------------------------------------------


def session_info(row: sqlite3.Row) -> SessionInfo:
    """A row of :data:`SESSION_SELECT` as the port's ``SessionInfo``."""
    marks = [v for v in (row["last_activity_at"], row["last_message_at"]) if v is not None]
    return SessionInfo(
        id=row["id"],
        source=row["source"],
        started_at=row["started_at"],
        model=row["model"],
        model_config=config_of(row),
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


def lineage_node(row: sqlite3.Row) -> Node:
    """A session row (at least ``id, source, parent_session_id, end_reason, model_config,
    started_at``) as a lineage node."""
    return Node.of(
        row["id"],
        row["source"],
        row["parent_session_id"],
        row["end_reason"],
        config_of(row),
        row["started_at"],
    )
