"""Compression in the SQLite store: the compression lock, compaction and rotation.

Why this module exists: compressing a session is the store's most delicate write. A lock
with a lease (``compression_locks``) keeps two compressors apart; ``archive_and_compact``
archives the active rows and re-clones the ones that arrived while the summary was being
written; ``publish_compression_child`` rotates into a child that inherits the parent's
settings. Each is one transaction of several statements, kept here together with the
lease rule they share, so ``sqlite.py`` only opens the transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import aiosqlite

from hermes_adapters.sessions._lineage import COMPRESSION
from hermes_adapters.sessions._sqlite_messages import insert_batch
from hermes_adapters.sessions._sqlite_rows import execute, fetch_all, fetch_one
from hermes_adapters.sessions._sqlite_schema import MESSAGE_COLUMNS, EncodedMessage
from hermes_adapters.sessions._sqlite_sessions import (
    check_parent,
    gc_prompts,
    inherit,
    recount,
    require,
    update,
)
from hermes_adapters.sessions._store_common import (
    check_appendable,
    check_lease,
    check_rotation,
    merge_config,
    rotation_values,
)

__all__ = [
    "acquire_lock",
    "archive_and_compact",
    "lock_holder",
    "publish_child",
    "refresh_lock",
    "release_lock",
]

_CLONE_COLUMNS = ", ".join(MESSAGE_COLUMNS)
_CLONE_VALUES = ", ".join("id" if c == "origin_id" else c for c in MESSAGE_COLUMNS)


# -- the lock -------------------------------------------------------------------------------


async def acquire_lock(
    conn: aiosqlite.Connection, session_id: str, holder: str, ttl_seconds: float
) -> bool:
    """Take the lock unless another holder has a live one; an expired lock is reclaimed."""
    now = time.time()
    await execute(
        conn,
        "DELETE FROM compression_locks WHERE session_id = ? AND expires_at < ?",
        (session_id, now),
    )
    await execute(
        conn,
        "INSERT OR IGNORE INTO compression_locks "
        "(session_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
        (session_id, holder, now, now + ttl_seconds),
    )
    owner = await fetch_one(
        conn, "SELECT holder FROM compression_locks WHERE session_id = ?", (session_id,)
    )
    return owner is not None and owner[0] == holder


async def refresh_lock(
    conn: aiosqlite.Connection, session_id: str, holder: str, ttl_seconds: float
) -> bool:
    """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
    changed = await execute(
        conn,
        "UPDATE compression_locks SET expires_at = ? WHERE session_id = ? AND holder = ?",
        (time.time() + ttl_seconds, session_id, holder),
    )
    return changed > 0


async def release_lock(conn: aiosqlite.Connection, session_id: str, holder: str) -> None:
    await execute(
        conn,
        "DELETE FROM compression_locks WHERE session_id = ? AND holder = ?",
        (session_id, holder),
    )


async def lock_holder(conn: aiosqlite.Connection, session_id: str) -> str | None:
    row = await fetch_one(
        conn,
        "SELECT holder FROM compression_locks WHERE session_id = ? AND expires_at >= ?",
        (session_id, time.time()),
    )
    return str(row[0]) if row is not None else None


async def _check_lease(
    conn: aiosqlite.Connection, session_id: str, holder: str | None, operation: str
) -> None:
    """Refuse a compaction when another holder owns (or has taken) the compression lock."""
    lock = await fetch_one(
        conn, "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (session_id,)
    )
    current = (lock["holder"], lock["expires_at"]) if lock is not None else None
    check_lease(session_id, current, holder, time.time, operation)


# -- compaction and rotation ----------------------------------------------------------------


async def archive_and_compact(
    conn: aiosqlite.Connection,
    session_id: str,
    encoded: Sequence[EncodedMessage],
    patch: dict[str, Any],
    watermark: int | None,
    holder: str | None,
) -> int:
    """Archive the active rows, insert ``encoded``, re-clone rows above ``watermark``,
    merge ``patch`` into ``model_config``; return the new message count."""
    row = await require(conn, session_id, "archive_and_compact")
    await _check_lease(conn, session_id, holder, "archive_and_compact")
    check_appendable(session_id, row["end_reason"], "archive_and_compact")
    late: list[int] = []
    if watermark is not None:
        late = [
            r[0]
            for r in await fetch_all(
                conn,
                "SELECT id FROM messages WHERE session_id = ? AND active = 1 AND id > ? "
                "ORDER BY id",
                (session_id, watermark),
            )
        ]
    await execute(
        conn,
        "UPDATE messages SET active = 0, compacted = 1 WHERE session_id = ? AND active = 1",
        (session_id,),
    )
    await insert_batch(conn, session_id, encoded)
    for origin in late:
        await execute(
            conn,
            f"INSERT INTO messages ({_CLONE_COLUMNS}) "
            f"SELECT {_CLONE_VALUES} FROM messages WHERE id = ?",
            (origin,),
        )
    if patch:
        await update(conn, session_id, {"model_config": merge_config(row, patch)})
    return await recount(conn, session_id)


async def publish_child(
    conn: aiosqlite.Connection,
    parent_id: str,
    child_id: str,
    encoded: Sequence[EncodedMessage],
    source: str | None,
    holder: str | None,
) -> str:
    """Rotation: the child, holding ``encoded``, continues the parent, which ends."""
    operation = "publish_compression_child"
    parent = await require(conn, parent_id, operation)
    await _check_lease(conn, parent_id, holder, operation)
    check_appendable(parent_id, parent["end_reason"], operation)
    existing = await fetch_one(conn, "SELECT * FROM sessions WHERE id = ?", (child_id,))
    current = existing["parent_session_id"] if existing is not None else None
    check_rotation(parent_id, child_id, current, operation)
    if existing is not None:
        await check_parent(conn, child_id, parent_id, operation)
    now = time.time()
    await execute(
        conn,
        "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
        (child_id, source or parent["source"], now),
    )
    child = await require(conn, child_id, operation)
    await update(conn, child_id, rotation_values(parent, child))
    await update(conn, parent_id, {"ended_at": now, "end_reason": COMPRESSION})
    await inherit(conn, child_id)
    await insert_batch(conn, child_id, encoded)
    await recount(conn, child_id)
    await gc_prompts(conn)
    return child_id
