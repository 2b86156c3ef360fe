"""The ``sessions`` table of the PostgreSQL store: upserts, inheritance, prompts, counters.

Why this module exists: the session-row rules (a create is an upsert that fills only what
is missing, a child inherits workspace and chat fields, a parent link may not make a
cycle, system prompts are kept once per sha256 and collected when unused, a delete takes
delegate children along) are the bulk of the store's SQL, as in ``_sqlite_sessions``. They
live here as functions of an open connection, called inside the transaction the store
opened, so ``postgres.py`` keeps to the engine, the transactions and the retries. Writers
lock the session row first (``FOR NO KEY UPDATE``) so writers of one session take turns.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_adapters.sessions._lineage import Node, cascade
from hermes_adapters.sessions._pg_rows import execute, fetch_all, fetch_one, like_escape
from hermes_adapters.sessions._store_common import (
    NODE_SELECT,
    SESSION_SELECT,
    check_no_cycle,
    filled_columns,
    inherited_values,
    lineage_node,
    metadata_values,
    prompt_hash,
    prompt_to_store,
    session_info,
    usage_columns,
)
from hermes_core.errors import SessionNotFound, SessionStoreError
from hermes_core.messages import Usage
from hermes_core.ports.sessions import SessionInfo

__all__ = [
    "Nodes",
    "add_usage",
    "check_parent",
    "delete",
    "end",
    "gc_prompts",
    "get_info",
    "inherit",
    "recount",
    "reopen",
    "require",
    "resolve_id",
    "set_metadata",
    "set_system_prompt",
    "update",
    "upsert",
]

_ACTIVE_TOOL_CALLS = (
    "SELECT COALESCE(SUM(json_array_length(tool_calls::json)), 0) FROM messages "
    "WHERE session_id = :sid AND active AND tool_calls IS NOT NULL"
)


# -- lineage view ---------------------------------------------------------------------------


class Nodes:
    """The sessions table as the lineage walks see it (a ``_lineage.NodeReader``)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def node(self, session_id: str) -> Node | None:
        row = await fetch_one(self._conn, f"{NODE_SELECT} WHERE id = :id", id=session_id)
        return lineage_node(row) if row is not None else None

    async def children(self, session_id: str) -> list[Node]:
        rows = await fetch_all(
            self._conn,
            f"{NODE_SELECT} WHERE parent_session_id = :id ORDER BY started_at, id",
            id=session_id,
        )
        return [lineage_node(row) for row in rows]

    async def has_messages(self, session_id: str) -> bool:
        row = await fetch_one(
            self._conn, "SELECT 1 FROM messages WHERE session_id = :id LIMIT 1", id=session_id
        )
        return row is not None


# -- row helpers ----------------------------------------------------------------------------


async def require(
    conn: AsyncConnection, session_id: str, operation: str, *, lock: bool = False
) -> RowMapping:
    """The session row; with ``lock``, held until commit so writers of it take turns."""
    sql = "SELECT * FROM sessions WHERE id = :id" + (" FOR NO KEY UPDATE" if lock else "")
    row = await fetch_one(conn, sql, id=session_id)
    if row is None:
        raise SessionNotFound(f"{operation}: no session {session_id!r}")
    return row


async def update(conn: AsyncConnection, session_id: str, values: Mapping[str, Any]) -> None:
    """``UPDATE sessions`` with ``values``; column names come from this package only."""
    if values:
        assignments = ", ".join(f"{name} = :v_{name}" for name in values)
        await execute(
            conn,
            f"UPDATE sessions SET {assignments} WHERE id = :id",
            id=session_id,
            **{f"v_{name}": value for name, value in values.items()},
        )


async def check_parent(
    conn: AsyncConnection, session_id: str, parent_id: str, operation: str
) -> None:
    """The parent exists and linking it would not make a cycle."""
    await require(conn, parent_id, f"{operation}(parent_session_id)")

    async def parent_of(session: str) -> str | None:
        row = await fetch_one(
            conn, "SELECT parent_session_id FROM sessions WHERE id = :id", id=session
        )
        return row["parent_session_id"] if row is not None else None

    await check_no_cycle(session_id, parent_id, operation, parent_of)


async def inherit(conn: AsyncConnection, session_id: str) -> None:
    """Fill the child's missing workspace (and, under a compression parent, chat) fields."""
    child = await require(conn, session_id, "inherit")
    parent = await fetch_one(
        conn, "SELECT * FROM sessions WHERE id = :id", id=child["parent_session_id"]
    )
    if parent is None:
        return
    await update(conn, session_id, inherited_values(parent, child))


async def _store_prompt(conn: AsyncConnection, prompt: str) -> str:
    """Keep ``prompt`` once, under its sha256; return the hash.

    ``DO UPDATE`` (not ``DO NOTHING``) locks the row until commit, so a concurrent prompt
    collection skips it instead of deleting a prompt this transaction is about to use.
    """
    digest = prompt_hash(prompt)
    await execute(
        conn,
        "INSERT INTO system_prompts(hash, prompt) VALUES (:hash, :prompt) "
        "ON CONFLICT (hash) DO UPDATE SET prompt = EXCLUDED.prompt",
        hash=digest,
        prompt=prompt,
    )
    return digest


async def gc_prompts(conn: AsyncConnection) -> None:
    """Delete prompts no session uses; rows another transaction holds are left for later."""
    await execute(
        conn,
        "DELETE FROM system_prompts WHERE hash IN (SELECT sp.hash FROM system_prompts sp "
        "WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.system_prompt_hash = sp.hash) "
        "FOR UPDATE SKIP LOCKED)",
    )


async def recount(conn: AsyncConnection, session_id: str) -> int:
    """Recompute the counters from the active rows; return the message count."""
    row = await fetch_one(
        conn,
        "UPDATE sessions SET "
        "message_count = (SELECT COUNT(*) FROM messages WHERE session_id = :sid AND active), "
        f"tool_call_count = ({_ACTIVE_TOOL_CALLS}) WHERE id = :sid RETURNING message_count",
        sid=session_id,
    )
    if row is None:
        raise SessionNotFound(f"recount: no session {session_id!r}")
    return int(row["message_count"])


# -- operations -----------------------------------------------------------------------------


async def upsert(
    conn: AsyncConnection,
    session_id: str,
    source: str,
    fields: Mapping[str, Any],
    config: dict[str, Any] | None,
) -> None:
    """Create the session or fill only the fields it lacks (``create_session``)."""
    parent_id: str | None = fields.get("parent_session_id")
    if parent_id is not None:
        await check_parent(conn, session_id, parent_id, "create_session")
    await execute(
        conn,
        "INSERT INTO sessions (id, source, started_at) VALUES (:id, :source, :now) "
        "ON CONFLICT (id) DO NOTHING",
        id=session_id,
        source=source,
        now=time.time(),
    )
    row = await require(conn, session_id, "create_session", lock=True)
    values = filled_columns(row, fields, config)
    prompt = prompt_to_store(row, fields)
    if prompt is not None:
        values["system_prompt_hash"] = await _store_prompt(conn, prompt)
    await update(conn, session_id, values)
    if "parent_session_id" in values:
        await inherit(conn, session_id)
    await gc_prompts(conn)


async def get_info(conn: AsyncConnection, session_id: str) -> SessionInfo | None:
    row = await fetch_one(conn, f"{SESSION_SELECT} WHERE s.id = :id", id=session_id)
    return session_info(row) if row is not None else None


async def resolve_id(conn: AsyncConnection, id_or_prefix: str) -> str | None:
    """The exact id, or the only id starting with the prefix, else ``None``."""
    if not id_or_prefix:
        return None
    if await fetch_one(conn, "SELECT 1 FROM sessions WHERE id = :id", id=id_or_prefix):
        return id_or_prefix
    rows = await fetch_all(
        conn,
        "SELECT id FROM sessions WHERE id LIKE :pattern LIMIT 2",
        pattern=like_escape(id_or_prefix) + "%",
    )
    return str(rows[0]["id"]) if len(rows) == 1 else None


async def set_system_prompt(conn: AsyncConnection, session_id: str, prompt: str) -> None:
    await require(conn, session_id, "update_system_prompt", lock=True)
    digest = await _store_prompt(conn, prompt)
    await update(conn, session_id, {"system_prompt_hash": digest, "system_prompt": None})
    await gc_prompts(conn)


async def set_metadata(
    conn: AsyncConnection,
    session_id: str,
    fields: Mapping[str, Any],
    patch: dict[str, Any] | None,
) -> None:
    """Title, model, identity fields and a ``model_config`` patch (``update_metadata``)."""
    row = await require(conn, session_id, "update_metadata", lock=True)
    title = fields.get("title")
    if title is not None:
        owner = await fetch_one(
            conn,
            "SELECT id FROM sessions WHERE title = :title AND id <> :id",
            title=title,
            id=session_id,
        )
        if owner is not None:
            raise SessionStoreError(
                f"update_metadata: title {title!r} is already used by session {owner['id']!r}"
            )
    values = metadata_values(row, fields, patch)
    await update(conn, session_id, values)


async def add_usage(
    conn: AsyncConnection,
    session_id: str,
    usage: Usage,
    api_calls: int,
    model: str | None,
    *,
    absolute: bool,
) -> None:
    """Add (or set) the token and call counters; fill a missing model; mark it active."""
    counters = usage_columns(usage, api_calls)
    template = "{0} = :{0}" if absolute else "{0} = {0} + :{0}"
    assignments = ", ".join(template.format(name) for name in counters)
    changed = await execute(
        conn,
        f"UPDATE sessions SET {assignments}, model = COALESCE(model, :model), "
        "last_activity_at = :now WHERE id = :id",
        id=session_id,
        model=model,
        now=time.time(),
        **counters,
    )
    if not changed:
        raise SessionNotFound(f"update_token_counts: no session {session_id!r}")


async def end(conn: AsyncConnection, session_id: str, end_reason: str) -> None:
    """End the session; one already ended keeps its first end time and reason."""
    await require(conn, session_id, "end_session", lock=True)
    await execute(
        conn,
        "UPDATE sessions SET ended_at = :now, end_reason = :reason "
        "WHERE id = :id AND ended_at IS NULL",
        now=time.time(),
        reason=end_reason,
        id=session_id,
    )


async def reopen(conn: AsyncConnection, session_id: str) -> None:
    await require(conn, session_id, "reopen_session", lock=True)
    await update(conn, session_id, {"ended_at": None, "end_reason": None})


async def delete(conn: AsyncConnection, session_id: str) -> bool:
    """Delete a session: delegate children go too, other children are orphaned."""
    if not await fetch_one(conn, "SELECT 1 FROM sessions WHERE id = :id FOR UPDATE", id=session_id):
        return False
    doomed, orphans = await cascade(Nodes(conn), session_id)
    for orphan in orphans:
        await update(conn, orphan, {"parent_session_id": None})
    for sid in doomed:
        await execute(conn, "DELETE FROM messages WHERE session_id = :id", id=sid)
        await execute(conn, "DELETE FROM compression_locks WHERE session_id = :id", id=sid)
        await execute(conn, "DELETE FROM sessions WHERE id = :id", id=sid)
    await gc_prompts(conn)
    return True
