"""The ``messages`` table of the SQLite store: appends, transcripts and lineage reads.

Why this module exists: writing messages (one, a batch with strictly increasing
timestamps, a whole replacement) and reading them back (the active transcript, the display
history that hides re-cloned originals, a compression lineage joined without replayed user
messages) is one job with its own rules, separate from the session rows and from the
connection handling in ``sqlite.py``. Every function runs inside the store's transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import aiosqlite

from hermes_adapters.sessions import _lineage
from hermes_adapters.sessions._sqlite_rows import execute, fetch_all, insert, stored_message
from hermes_adapters.sessions._sqlite_schema import (
    INSERT_MESSAGE,
    INSERT_ROWS_MAX,
    EncodedMessage,
    decode_message,
    insert_messages_sql,
)
from hermes_adapters.sessions._sqlite_sessions import Nodes, recount, require
from hermes_adapters.sessions._store_common import batch_timestamps, check_appendable
from hermes_core.errors import SessionNotFound
from hermes_core.messages import Message
from hermes_core.ports.sessions import StoredMessage

__all__ = [
    "append",
    "append_batch",
    "conversation",
    "insert_batch",
    "replace",
    "resume_conversations",
    "stored_messages",
]

_SCOPE_ACTIVE = " AND active = 1"


async def insert_batch(
    conn: aiosqlite.Connection, session_id: str, encoded: Sequence[EncodedMessage]
) -> list[int]:
    """Insert ``encoded`` with strictly increasing timestamps from now; return the ids.

    One multi-row ``INSERT ... RETURNING id`` per thousand rows: one hop to the
    connection's thread per statement. The ids come back in no promised order; they are
    in insertion order once sorted (``id`` is ``AUTOINCREMENT`` and the caller holds the
    write lock inside ``BEGIN IMMEDIATE``).
    """
    stamps = batch_timestamps(time.time(), len(encoded))
    ids: list[int] = []
    for start in range(0, len(encoded), INSERT_ROWS_MAX):
        end = start + INSERT_ROWS_MAX
        part = list(zip(encoded[start:end], stamps[start:end], strict=True))
        values = [value for enc, stamp in part for value in enc.params(session_id, stamp)]
        rows = await fetch_all(conn, insert_messages_sql(len(part)), values)
        ids += sorted(int(row[0]) for row in rows)
    return ids


# -- writes ---------------------------------------------------------------------------------


async def _count(
    conn: aiosqlite.Connection, session_id: str, messages: int, tool_calls: int, operation: str
) -> None:
    """Add to the session's counters, refusing a missing session or one ended by
    compression: one statement finds the session, its end reason and bumps the counters
    (instead of a read and an update). Run before the insert; a refusal raises and the
    store rolls the transaction back."""
    found = await fetch_all(
        conn,
        "UPDATE sessions SET message_count = message_count + ?, "
        "tool_call_count = tool_call_count + ? WHERE id = ? RETURNING end_reason",
        (messages, tool_calls, session_id),
    )
    if not found:
        raise SessionNotFound(f"{operation}: no session {session_id!r}")
    check_appendable(session_id, found[0]["end_reason"], operation)


async def append(
    conn: aiosqlite.Connection,
    session_id: str,
    encoded: EncodedMessage,
    timestamp: float | None,
    token_count: int | None,
) -> int:
    """Append one message and count it; return its row id."""
    await _count(conn, session_id, 1, encoded.tool_call_count, "append_message")
    stamp = time.time() if timestamp is None else float(timestamp)
    return await insert(conn, INSERT_MESSAGE, encoded.params(session_id, stamp, token_count))


async def append_batch(
    conn: aiosqlite.Connection, session_id: str, encoded: Sequence[EncodedMessage]
) -> list[int]:
    """Append ``encoded`` and count them; return the row ids in order."""
    tool_calls = sum(e.tool_call_count for e in encoded)
    await _count(conn, session_id, len(encoded), tool_calls, "append_messages")
    return await insert_batch(conn, session_id, encoded)


async def replace(
    conn: aiosqlite.Connection, session_id: str, encoded: Sequence[EncodedMessage]
) -> None:
    """Replace the whole transcript (archived rows included) and recount."""
    await require(conn, session_id, "replace_messages")
    await execute(conn, "DELETE FROM messages WHERE session_id = ?", (session_id,))
    await insert_batch(conn, session_id, encoded)
    await recount(conn, session_id)


# -- reads ----------------------------------------------------------------------------------


async def stored_messages(
    conn: aiosqlite.Connection,
    session_id: str,
    include_inactive: bool,
    limit: int | None,
    offset: int,
    after_id: int | None,
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
    return [stored_message(row) for row in await fetch_all(conn, sql, params)]


async def _scoped_messages(
    conn: aiosqlite.Connection, session_id: str, *, include_inactive: bool
) -> list[Message]:
    scope = "" if include_inactive else _SCOPE_ACTIVE
    rows = await fetch_all(
        conn, f"SELECT * FROM messages WHERE session_id = ?{scope} ORDER BY id", (session_id,)
    )
    return [decode_message(row) for row in rows]


async def _display_messages(conn: aiosqlite.Connection, session_id: str) -> list[Message]:
    """Active and compaction-archived rows, minus originals that were re-cloned."""
    rows = await fetch_all(
        conn,
        "SELECT * FROM messages WHERE session_id = ?1 AND (active = 1 OR compacted = 1) "
        "AND id NOT IN (SELECT origin_id FROM messages "
        "WHERE session_id = ?1 AND active = 1 AND origin_id IS NOT NULL) ORDER BY id",
        (session_id,),
    )
    return [decode_message(row) for row in rows]


async def conversation(
    conn: aiosqlite.Connection,
    session_id: str,
    include_ancestors: bool,
    include_inactive: bool,
) -> list[Message]:
    """The transcript as messages; with ancestors, its compression lineage root first."""

    async def read(sid: str) -> list[Message]:
        return await _scoped_messages(conn, sid, include_inactive=include_inactive)

    return await _lineage.joined_transcripts(
        Nodes(conn), session_id, read, ancestors=include_ancestors
    )


async def resume_conversations(
    conn: aiosqlite.Connection, session_id: str
) -> tuple[list[Message], list[Message]]:
    """(model history of the session, unrepaired; full display history of its lineage)."""
    model = await _scoped_messages(conn, session_id, include_inactive=False)
    display = await _lineage.joined_transcripts(
        Nodes(conn), session_id, lambda sid: _display_messages(conn, sid)
    )
    return model, display
