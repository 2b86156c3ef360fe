"""Statements on the PostgreSQL store's connection, and message rows out of it.

Why this module exists: every part of the PostgreSQL store (session upserts, message
writes, compaction, search) runs single ``text()`` statements with named parameters on a
SQLAlchemy ``AsyncConnection`` and decodes ``message_json``; keeping those few helpers in
one place keeps them identical everywhere, and keeps ``postgres.py`` about the engine,
transactions and retries. Session rows become port values through ``_store_common``
(shared with SQLite).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import RowMapping, text
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_core.errors import SessionStoreError, TranscriptError
from hermes_core.messages import Message, message_from_dict
from hermes_core.ports.sessions import StoredMessage

__all__ = [
    "decode",
    "execute",
    "fetch_all",
    "fetch_one",
    "like_escape",
    "pg_text",
    "stored_message",
]


async def fetch_all(conn: AsyncConnection, sql: str, **params: Any) -> list[RowMapping]:
    return list((await conn.execute(text(sql), params)).mappings())


async def fetch_one(conn: AsyncConnection, sql: str, **params: Any) -> RowMapping | None:
    return (await conn.execute(text(sql), params)).mappings().first()


async def execute(conn: AsyncConnection, sql: str, **params: Any) -> int:
    """Run one statement; return its row count."""
    return (await conn.execute(text(sql), params)).rowcount


def pg_text(value: str | None) -> str | None:
    """PostgreSQL ``text`` cannot hold NUL; the searchable columns get U+FFFD instead.

    ``message_json`` is unaffected (JSON escapes NUL), so the message round-trips exactly.
    """
    return value.replace("\x00", "\ufffd") if value else value


def like_escape(value: str) -> str:
    """``value`` as a literal inside a ``LIKE`` pattern (backslash is the escape)."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def decode(row: RowMapping) -> Message:
    """The message of a ``messages`` row (at least ``id, session_id, message_json``)."""
    try:
        return message_from_dict(json.loads(row["message_json"]))
    except (ValueError, TypeError, TranscriptError) as exc:
        raise SessionStoreError(
            f"message row {row['id']} of session {row['session_id']!r} cannot be decoded: {exc}"
        ) from exc


def stored_message(row: RowMapping) -> StoredMessage:
    """A ``messages`` row as the port's ``StoredMessage``."""
    return StoredMessage(
        id=row["id"],
        session_id=row["session_id"],
        message=decode(row),
        timestamp=row["timestamp"],
        active=row["active"],
        compacted=row["compacted"],
        token_count=row["token_count"],
    )
