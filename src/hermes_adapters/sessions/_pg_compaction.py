"""Compression in the PostgreSQL store: the compression lock, compaction and rotation.

Why this module exists: compressing a session is the store's most delicate write, as in
``_sqlite_compaction``. A lock with a lease (``compression_locks``) keeps two compressors
apart; ``archive_and_compact`` archives the active rows and re-clones the ones that arrived
while the summary was being written; ``publish_compression_child`` rotates into a child
that inherits the parent's settings. Each is one transaction of several statements (the
session rows locked first), kept here together, so ``postgres.py`` only opens the
transaction; the lease rule itself is shared by every store (``_store_common``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_adapters.sessions._lineage import COMPRESSION
from hermes_adapters.sessions._pg_messages import insert_batch
from hermes_adapters.sessions._pg_rows import execute, fetch_all, fetch_one
from hermes_adapters.sessions._pg_schema import MESSAGE_COLUMNS
from hermes_adapters.sessions._pg_sessions import (
    check_parent,
    gc_prompts,
    inherit,
    recount,
    require,
    update,
)
from hermes_adapters.sessions._sqlite_schema import EncodedMessage
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

_CLONE = (
    f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) "
    f"SELECT {', '.join('id' if c == 'origin_id' else c for c in MESSAGE_COLUMNS)} "
    "FROM messages WHERE id = :id"
)


# -- the lock -------------------------------------------------------------------------------


async def acquire_lock(
    conn: AsyncConnection, session_id: str, holder: str, ttl_seconds: float
) -> bool:
    """Take the lock unless another holder has a live one; an expired lock is reclaimed."""
    now = time.time()
    await execute(
        conn,
        "DELETE FROM compression_locks WHERE session_id = :sid AND expires_at < :now",
        sid=session_id,
        now=now,
    )
    await execute(
        conn,
        "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) "
        "VALUES (:sid, :holder, :now, :expires) ON CONFLICT (session_id) DO NOTHING",
        sid=session_id,
        holder=holder,
        now=now,
        expires=now + ttl_seconds,
    )
    owner = await fetch_one(
        conn, "SELECT holder FROM compression_locks WHERE session_id = :sid", sid=session_id
    )
    return owner is not None and owner["holder"] == holder


async def refresh_lock(
    conn: AsyncConnection, session_id: str, holder: str, ttl_seconds: float
) -> bool:
    """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
    changed = await execute(
        conn,
        "UPDATE compression_locks SET expires_at = :expires "
        "WHERE session_id = :sid AND holder = :holder",
        expires=time.time() + ttl_seconds,
        sid=session_id,
        holder=holder,
    )
    return changed > 0


async def release_lock(conn: AsyncConnection, session_id: str, holder: str) -> None:
    await execute(
        conn,
        "DELETE FROM compression_locks WHERE session_id = :sid AND holder = :holder",
        sid=session_id,
        holder=holder,
    )


async def lock_holder(conn: AsyncConnection, session_id: str) -> str | None:
    row = await fetch_one(
        conn,
        "SELECT holder FROM compression_locks WHERE session_id = :sid AND expires_at >= :now",
        sid=session_id,
        now=time.time(),
    )
    return str(row["holder"]) if row is not None else None


async def _check_lease(
    conn: AsyncConnection, session_id: str, holder: str | None, operation: str
) -> None:
    """Refuse a compaction when another holder owns (or has taken) the compression lock."""
    lock = await fetch_one(
        conn,
        "SELECT holder, expires_at FROM compression_locks WHERE session_id = :sid",
        sid=session_id,
    )
    current = (lock["holder"], lock["expires_at"]) if lock is not None else None
    check_lease(session_id, current, holder, time.time, operation)


# -- compaction and rotation ----------------------------------------------------------------


async def archive_and_compact(
    conn: AsyncConnection,
    session_id: str,
    encoded: Sequence[EncodedMessage],
    patch: dict[str, Any],
    watermark: int | None,
    holder: str | None,
) -> int:
    """Archive the active rows, insert ``encoded``, re-clone rows above ``watermark``,
    merge ``patch`` into ``model_config``; return the new message count."""
    row = await require(conn, session_id, "archive_and_compact", lock=True)
    await _check_lease(conn, session_id, holder, "archive_and_compact")
    check_appendable(session_id, row["end_reason"], "archive_and_compact")
    late: list[int] = []
    if watermark is not None:
        late = [
            r["id"]
            for r in await fetch_all(
                conn,
                "SELECT id FROM messages WHERE session_id = :sid AND active "
                "AND id > :mark ORDER BY id",
                sid=session_id,
                mark=watermark,
            )
        ]
    await execute(
        conn,
        "UPDATE messages SET active = false, compacted = true WHERE session_id = :sid AND active",
        sid=session_id,
    )
    await insert_batch(conn, session_id, encoded)
    for origin in late:
        await execute(conn, _CLONE, id=origin)
    if patch:
        await update(conn, session_id, {"model_config": merge_config(row, patch)})
    return await recount(conn, session_id)


async def publish_child(
    conn: AsyncConnection,
    parent_id: str,
    child_id: str,
    encoded: Sequence[EncodedMessage],
    source: str | None,
    holder: str | None,
) -> str:
    """Rotation: the child, holding ``encoded``, continues the parent, which ends."""
    operation = "publish_compression_child"
    parent = await require(conn, parent_id, operation, lock=True)
    await _check_lease(conn, parent_id, holder, operation)
    check_appendable(parent_id, parent["end_reason"], operation)
    existing = await fetch_one(conn, "SELECT * FROM sessions WHERE id = :id", id=child_id)
    current = existing["parent_session_id"] if existing is not None else None
    check_rotation(parent_id, child_id, current, operation)
    if existing is not None:
        await check_parent(conn, child_id, parent_id, operation)
    now = time.time()
    await execute(
        conn,
        "INSERT INTO sessions (id, source, started_at) VALUES (:id, :source, :now) "
        "ON CONFLICT (id) DO NOTHING",
        id=child_id,
        source=source or parent["source"],
        now=now,
    )
    child = await require(conn, child_id, operation, lock=True)
    await update(conn, child_id, rotation_values(parent, child))
    await update(conn, parent_id, {"ended_at": now, "end_reason": COMPRESSION})
    await inherit(conn, child_id)
    await insert_batch(conn, child_id, encoded)
    await recount(conn, child_id)
    await gc_prompts(conn)
    return child_id
