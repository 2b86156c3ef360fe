"""The ``messages`` table of the PostgreSQL store: appends, transcripts and lineage reads.

Why this module exists: writing messages (one, a batch with strictly increasing
timestamps, a whole replacement) and reading them back (the active transcript, the display
history that hides re-cloned originals, a compression lineage joined without replayed user
messages) is one job with its own rules, as in ``_sqlite_messages``, separate from the
session rows and from the engine handling in ``postgres.py``. A batch is one ``INSERT``
of unnested arrays; an append counts itself first, which takes the session's row lock, so
within a session a higher row id is always committed after a lower one. Every function
runs inside the store's transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_adapters.sessions import _lineage
from hermes_adapters.sessions._pg_rows import (
    decode,
    execute,
    fetch_all,
    fetch_one,
    pg_text,
    stored_message,
)
from hermes_adapters.sessions._pg_schema import MESSAGE_COLUMNS
from hermes_adapters.sessions._pg_sessions import Nodes, recount, require
from hermes_adapters.sessions._sqlite_schema import EncodedMessage
from hermes_adapters.sessions._store_common import batch_timestamps, check_appendable
from hermes_core.errors import SessionNotFound, SessionStoreError
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

_SCOPE_ACTIVE = " AND active"

# One INSERT for a whole batch: parallel arrays unnested in order. RETURNING gives no
# order guarantee, so rows are matched back by their (strictly increasing) timestamps.
_BATCH_COLUMNS = tuple(c for c in MESSAGE_COLUMNS if c != "session_id")
_BATCH_TYPES = {"timestamp": "float8[]", "token_count": "bigint[]", "origin_id": "bigint[]"}
_INSERT_BATCH = (
    f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) "
    f"SELECT :sid, {', '.join(f'u.{c}' for c in _BATCH_COLUMNS)} FROM unnest("
    + ", ".join(f"CAST(:{c} AS {_BATCH_TYPES.get(c, 'text[]')})" for c in _BATCH_COLUMNS)
    + f") WITH ORDINALITY AS u({', '.join(_BATCH_COLUMNS)}, ord) ORDER BY u.ord "
    "RETURNING id, timestamp"
)


async def insert_batch(
    conn: AsyncConnection,
    session_id: str,
    encoded: Sequence[EncodedMessage],
    stamps: Sequence[float] | None = None,
    token_counts: Sequence[int | None] | None = None,
) -> list[int]:
    """Insert ``encoded`` in order (timestamps strictly increasing from now unless given);
    return the new ids in the same order."""
    if not encoded:
        return []
    stamps = list(stamps) if stamps is not None else batch_timestamps(time.time(), len(encoded))
    columns: dict[str, list[Any]] = {
        "role": [e.role for e in encoded],
        "content": [pg_text(e.content) for e in encoded],
        "tool_call_id": [pg_text(e.tool_call_id) for e in encoded],
        "tool_calls": [pg_text(e.tool_calls) for e in encoded],
        "tool_name": [pg_text(e.tool_name) for e in encoded],
        "finish_reason": [pg_text(e.finish_reason) for e in encoded],
        "reasoning": [pg_text(e.reasoning) for e in encoded],
        "reasoning_content": [pg_text(e.reasoning_content) for e in encoded],
        "reasoning_details": [pg_text(e.reasoning_details) for e in encoded],
        "codex_reasoning_items": [pg_text(e.codex_reasoning_items) for e in encoded],
        "codex_message_items": [pg_text(e.codex_message_items) for e in encoded],
        "message_json": [e.message_json for e in encoded],
        "timestamp": stamps,
        "token_count": list(token_counts) if token_counts is not None else [None] * len(encoded),
        "origin_id": [None] * len(encoded),
    }
    result = await conn.execute(text(_INSERT_BATCH), {"sid": session_id, **columns})
    by_stamp = {float(row.timestamp): int(row.id) for row in result}
    if len(by_stamp) != len(stamps):  # pragma: no cover - stamps are distinct by design
        raise SessionStoreError(f"inserting {len(stamps)} messages returned {len(by_stamp)} ids")
    return [by_stamp[stamp] for stamp in stamps]


# -- writes ---------------------------------------------------------------------------------


async def _count_appended(
    conn: AsyncConnection, session_id: str, encoded: Sequence[EncodedMessage], operation: str
) -> None:
    """Count the messages about to be appended, taking the session's row lock first.

    One statement does both: the counters move, and the lock it takes (held to commit)
    makes appenders of one session take turns, so the rows inserted next get ids in commit
    order. Raising afterwards rolls the counters back with everything else.
    """
    row = await fetch_one(
        conn,
        "UPDATE sessions SET message_count = message_count + :count, "
        "tool_call_count = tool_call_count + :calls WHERE id = :id RETURNING id, end_reason",
        count=len(encoded),
        calls=sum(e.tool_call_count for e in encoded),
        id=session_id,
    )
    if row is None:
        raise SessionNotFound(f"{operation}: no session {session_id!r}")
    check_appendable(row["id"], row["end_reason"], operation)


async def append(
    conn: AsyncConnection,
    session_id: str,
    encoded: EncodedMessage,
    timestamp: float | None,
    token_count: int | None,
) -> int:
    """Append one message and count it; return its row id."""
    await _count_appended(conn, session_id, [encoded], "append_message")
    stamp = time.time() if timestamp is None else float(timestamp)
    [new_id] = await insert_batch(conn, session_id, [encoded], [stamp], [token_count])
    return new_id


async def append_batch(
    conn: AsyncConnection, session_id: str, encoded: Sequence[EncodedMessage]
) -> list[int]:
    """Append ``encoded`` and count them; return the row ids in order."""
    await _count_appended(conn, session_id, encoded, "append_messages")
    return await insert_batch(conn, session_id, encoded)


async def replace(
    conn: AsyncConnection, session_id: str, encoded: Sequence[EncodedMessage]
) -> None:
    """Replace the whole transcript (archived rows included) and recount."""
    await require(conn, session_id, "replace_messages", lock=True)
    await execute(conn, "DELETE FROM messages WHERE session_id = :id", id=session_id)
    await insert_batch(conn, session_id, encoded)
    await recount(conn, session_id)


# -- reads ----------------------------------------------------------------------------------


async def stored_messages(
    conn: AsyncConnection,
    session_id: str,
    include_inactive: bool,
    limit: int | None,
    offset: int,
    after_id: int | None,
) -> list[StoredMessage]:
    """Stored rows in insertion (id) order; archived rows only with ``include_inactive``."""
    sql = (
        "SELECT id, session_id, message_json, timestamp, active, compacted, token_count "
        "FROM messages WHERE session_id = :sid"
        + ("" if include_inactive else _SCOPE_ACTIVE)
        + ("" if after_id is None else " AND id > :after")
        + " ORDER BY id LIMIT :limit OFFSET :offset"
    )
    params: dict[str, Any] = {
        "sid": session_id,
        "limit": None if limit is None else max(limit, 0),
        "offset": max(offset, 0),
    }
    if after_id is not None:
        params["after"] = after_id
    return [stored_message(row) for row in await fetch_all(conn, sql, **params)]


async def _scoped_messages(
    conn: AsyncConnection, session_id: str, *, include_inactive: bool
) -> list[Message]:
    scope = "" if include_inactive else _SCOPE_ACTIVE
    rows = await fetch_all(
        conn,
        f"SELECT id, session_id, message_json FROM messages WHERE session_id = :sid{scope} "
        "ORDER BY id",
        sid=session_id,
    )
    return [decode(row) for row in rows]


async def _display_messages(conn: AsyncConnection, session_id: str) -> list[Message]:
    """Active and compaction-archived rows, minus originals that were re-cloned."""
    rows = await fetch_all(
        conn,
        "SELECT id, session_id, message_json FROM messages "
        "WHERE session_id = :sid AND (active OR compacted) "
        "AND id NOT IN (SELECT origin_id FROM messages "
        "WHERE session_id = :sid AND active AND origin_id IS NOT NULL) ORDER BY id",
        sid=session_id,
    )
    return [decode(row) for row in rows]


async def conversation(
    conn: AsyncConnection,
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
    conn: AsyncConnection, session_id: str
) -> tuple[list[Message], list[Message]]:
    """(model history of the session, unrepaired; full display history of its lineage)."""
    model = await _scoped_messages(conn, session_id, include_inactive=False)
    display = await _lineage.joined_transcripts(
        Nodes(conn), session_id, lambda sid: _display_messages(conn, sid)
    )
    return model, display
