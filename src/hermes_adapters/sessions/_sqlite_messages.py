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
from hermes_adapters.sessions._sqlite_schema import INSERT_MESSAGE, EncodedMessage, decode_message
from hermes_adapters.sessions._sqlite_sessions import Nodes, recount, require
from hermes_adapters.sessions._store_common import batch_timestamps, check_appendable
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

    One ``executemany`` (one hop to the connection's thread instead of two per row). The
    ids are consecutive: the caller holds the write lock inside ``BEGIN IMMEDIATE`` and
    ``id`` is ``AUTOINCREMENT``, so the batch ends at ``last_insert_rowid()``.
    """
    if not encoded:
        return []
    stamps = batch_timestamps(time.time(), len(encoded))
    rows = [enc.params(session_id, stamp) for enc, stamp in zip(encoded, stamps, strict=True)]
    cursor = await conn.executemany(INSERT_MESSAGE, rows)
    await cursor.close()
    (found,) = await fetch_all(conn, "SELECT last_insert_rowid()")
    last = int(found[0])
    return list(range(last - len(rows) + 1, last + 1))


# -- writes ---------------------------------------------------------------------------------


async def append(
    conn: aiosqlite.Connection,
    session_id: str,
    encoded: EncodedMessage,
    timestamp: float | None,
    token_count: int | None,
) -> int:
    """Append one message and count it; return its row id."""
    row = await require(conn, session_id, "append_message")
    check_appendable(session_id, row["end_reason"], "append_message")
    stamp = time.time() if timestamp is None else float(timestamp)
    new_id = await insert(conn, INSERT_MESSAGE, encoded.params(session_id, stamp, token_count))
    await execute(
        conn,
        "UPDATE sessions SET message_count = message_count + 1, "
        "tool_call_count = tool_call_count + ? WHERE id = ?",
        (encoded.tool_call_count, session_id),
    )
    return new_id


async def append_batch(
    conn: aiosqlite.Connection, session_id: str, encoded: Sequence[EncodedMessage]
) -> list[int]:
    """Append ``encoded`` and count them; return the row ids in order."""
    row = await require(conn, session_id, "append_messages")
    check_appendable(session_id, row["end_reason"], "append_messages")
    ids = await insert_batch(conn, session_id, encoded)
    await execute(
        conn,
        "UPDATE sessions SET message_count = message_count + ?, "
        "tool_call_count = tool_call_count + ? WHERE id = ?",
        (len(encoded), sum(e.tool_call_count for e in encoded), session_id),
    )
    return ids


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
