"""The ``sessions`` table of the SQLite store: upserts, inheritance, prompts, counters.

Why this module exists: the session-row rules (a create is an upsert that fills only what
is missing, a child inherits workspace and chat fields, a parent link may not make a
cycle, system prompts are kept once per sha256 and collected when unused, a delete takes
delegate children along) are the bulk of the store's SQL. They live here as functions of
an open connection, called inside the transaction the store opened, so ``sqlite.py`` keeps
to the connection, the writer lock and the retries.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

import aiosqlite

from hermes_adapters.sessions._lineage import COMPRESSION, Node, inherited_fields
from hermes_adapters.sessions._sqlite_rows import (
    SESSION_SELECT,
    config_of,
    dumps,
    execute,
    fetch_all,
    fetch_one,
    json_object,
    lineage_node,
    merge_config,
    session_info,
)
from hermes_core.errors import SessionClosedForAppend, SessionNotFound, SessionStoreError
from hermes_core.messages import Usage
from hermes_core.ports.sessions import IDENTITY_FIELDS, SessionInfo

__all__ = [
    "CREATE_FIELDS",
    "METADATA_FIELDS",
    "Nodes",
    "add_usage",
    "check_appendable",
    "check_fields",
    "check_parent",
    "delete",
    "end",
    "gc_prompts",
    "get_info",
    "inherit",
    "json_config",
    "recount",
    "reopen",
    "require",
    "resolve_id",
    "set_metadata",
    "set_system_prompt",
    "update",
    "upsert",
]

CREATE_FIELDS = frozenset({"model", "model_config", "system_prompt", "parent_session_id"})
METADATA_FIELDS = frozenset({"title", "model", "model_config"})
_USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
)
_ACTIVE_TOOL_CALLS = (
    "SELECT COALESCE(SUM(CASE WHEN json_valid(tool_calls) THEN json_array_length(tool_calls) "
    "ELSE 0 END), 0) FROM messages WHERE session_id = ?1 AND active = 1"
)
_NODE_SELECT = (
    "SELECT id, source, parent_session_id, end_reason, model_config, started_at FROM sessions"
)


# -- checks outside the transaction ---------------------------------------------------------


def check_fields(fields: Mapping[str, Any], allowed: frozenset[str], operation: str) -> None:
    """Refuse a keyword that is neither in ``allowed`` nor an identity field."""
    unknown = sorted(set(fields) - allowed - set(IDENTITY_FIELDS))
    if unknown:
        raise TypeError(f"{operation}() got unknown field(s): {', '.join(unknown)}")


def json_config(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``model_config`` field as the database will return it, ``None`` when not given."""
    given = fields.get("model_config")
    return json_object(given, "model_config") if given is not None else None


# -- lineage view ---------------------------------------------------------------------------


class Nodes:
    """The sessions table as the lineage walks see it (a ``_lineage.NodeReader``)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def node(self, session_id: str) -> Node | None:
        row = await fetch_one(self._conn, f"{_NODE_SELECT} WHERE id = ?", (session_id,))
        return lineage_node(row) if row is not None else None

    async def children(self, session_id: str) -> list[Node]:
        rows = await fetch_all(
            self._conn,
            f"{_NODE_SELECT} WHERE parent_session_id = ? ORDER BY started_at, id",
            (session_id,),
        )
        return [lineage_node(row) for row in rows]

    async def has_messages(self, session_id: str) -> bool:
        row = await fetch_one(
            self._conn, "SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (session_id,)
        )
        return row is not None


# -- row helpers ----------------------------------------------------------------------------


async def require(conn: aiosqlite.Connection, session_id: str, operation: str) -> sqlite3.Row:
    row = await fetch_one(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,))
    if row is None:
        raise SessionNotFound(f"{operation}: no session {session_id!r}")
    return row


def check_appendable(row: sqlite3.Row, operation: str) -> None:
    if row["end_reason"] == COMPRESSION:
        raise SessionClosedForAppend(
            f"{operation}: session {row['id']!r} was ended by compression; "
            "write to its continuation (resolve_resume_session_id) instead"
        )


async def update(conn: aiosqlite.Connection, session_id: str, values: Mapping[str, Any]) -> None:
    """``UPDATE sessions`` with ``values``; column names come from this package only."""
    if values:
        assignments = ", ".join(f"{name} = ?" for name in values)
        await execute(
            conn,
            f"UPDATE sessions SET {assignments} WHERE id = ?",
            (*values.values(), session_id),
        )


async def check_parent(
    conn: aiosqlite.Connection, session_id: str, parent_id: str, operation: str
) -> None:
    """The parent exists and linking it would not make a cycle."""
    await require(conn, parent_id, f"{operation}(parent_session_id)")
    cursor: str | None = parent_id
    seen: set[str] = set()
    while cursor is not None and cursor not in seen:
        if cursor == session_id:
            raise SessionStoreError(
                f"{operation}: making {parent_id!r} the parent of {session_id!r} "
                "would create a cycle"
            )
        seen.add(cursor)
        row = await fetch_one(
            conn, "SELECT parent_session_id FROM sessions WHERE id = ?", (cursor,)
        )
        cursor = row[0] if row is not None else None


async def inherit(conn: aiosqlite.Connection, session_id: str) -> None:
    """Fill the child's missing workspace (and, under a compression parent, chat) fields."""
    child = await require(conn, session_id, "inherit")
    parent_id = child["parent_session_id"]
    parent = await fetch_one(conn, "SELECT * FROM sessions WHERE id = ?", (parent_id,))
    if parent is None:
        return
    names = inherited_fields(parent["end_reason"])
    await update(
        conn,
        session_id,
        {n: parent[n] for n in names if child[n] is None and parent[n] is not None},
    )


async def _store_prompt(conn: aiosqlite.Connection, prompt: str) -> str:
    """Keep ``prompt`` once, under its sha256; return the hash."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    await execute(
        conn, "INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, prompt)
    )
    return digest


async def gc_prompts(conn: aiosqlite.Connection) -> None:
    await execute(
        conn,
        "DELETE FROM system_prompts WHERE NOT EXISTS "
        "(SELECT 1 FROM sessions s WHERE s.system_prompt_hash = system_prompts.hash)",
    )


async def recount(conn: aiosqlite.Connection, session_id: str) -> int:
    """Recompute the counters from the active rows; return the message count."""
    await execute(
        conn,
        "UPDATE sessions SET "
        "message_count = (SELECT COUNT(*) FROM messages WHERE session_id = ?1 AND active = 1), "
        f"tool_call_count = ({_ACTIVE_TOOL_CALLS}) WHERE id = ?1",
        (session_id,),
    )
    row = await require(conn, session_id, "recount")
    return int(row["message_count"])


# -- operations -----------------------------------------------------------------------------


async def upsert(
    conn: aiosqlite.Connection,
    session_id: str,
    source: str,
    fields: Mapping[str, Any],
    config: dict[str, Any] | None,
) -> None:
    """Create the session or fill only the fields it lacks (``create_session``)."""
    prompt: str | None = fields.get("system_prompt")
    parent_id: str | None = fields.get("parent_session_id")
    if parent_id is not None:
        await check_parent(conn, session_id, parent_id, "create_session")
    await execute(
        conn,
        "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
        (session_id, source, time.time()),
    )
    row = await require(conn, session_id, "create_session")
    values: dict[str, Any] = {}
    if row["model"] is None and fields.get("model") is not None:
        values["model"] = fields["model"]
    if config and not config_of(row):
        values["model_config"] = dumps(config)
    has_prompt = row["system_prompt_hash"] is not None or row["system_prompt"] is not None
    if prompt is not None and not has_prompt:
        values["system_prompt_hash"] = await _store_prompt(conn, prompt)
    for name in IDENTITY_FIELDS:
        if row[name] is None and fields.get(name) is not None:
            values[name] = fields[name]
    if row["parent_session_id"] is None and parent_id is not None:
        values["parent_session_id"] = parent_id
    await update(conn, session_id, values)
    if "parent_session_id" in values:
        await inherit(conn, session_id)
    await gc_prompts(conn)


async def get_info(conn: aiosqlite.Connection, session_id: str) -> SessionInfo | None:
    row = await fetch_one(conn, f"{SESSION_SELECT} WHERE s.id = ?", (session_id,))
    return session_info(row) if row is not None else None


async def resolve_id(conn: aiosqlite.Connection, id_or_prefix: str) -> str | None:
    """The exact id, or the only id starting with the prefix, else ``None``."""
    if not id_or_prefix:
        return None
    if await fetch_one(conn, "SELECT 1 FROM sessions WHERE id = ?", (id_or_prefix,)):
        return id_or_prefix
    rows = await fetch_all(
        conn,
        "SELECT id FROM sessions WHERE substr(id, 1, ?) = ? LIMIT 2",
        (len(id_or_prefix), id_or_prefix),
    )
    return str(rows[0][0]) if len(rows) == 1 else None


async def set_system_prompt(conn: aiosqlite.Connection, session_id: str, prompt: str) -> None:
    await require(conn, session_id, "update_system_prompt")
    digest = await _store_prompt(conn, prompt)
    await update(conn, session_id, {"system_prompt_hash": digest, "system_prompt": None})
    await gc_prompts(conn)


async def set_metadata(
    conn: aiosqlite.Connection,
    session_id: str,
    fields: Mapping[str, Any],
    patch: dict[str, Any] | None,
) -> None:
    """Title, model, identity fields and a ``model_config`` patch (``update_metadata``)."""
    row = await require(conn, session_id, "update_metadata")
    title = fields.get("title")
    if title is not None:
        owner = await fetch_one(
            conn, "SELECT id FROM sessions WHERE title = ? AND id != ?", (title, session_id)
        )
        if owner is not None:
            raise SessionStoreError(
                f"update_metadata: title {title!r} is already used by session {owner[0]!r}"
            )
    values: dict[str, Any] = {
        name: fields[name] for name in ("title", "model", *IDENTITY_FIELDS) if name in fields
    }
    if patch is not None:
        values["model_config"] = merge_config(row, patch)
    await update(conn, session_id, values)


async def add_usage(
    conn: aiosqlite.Connection,
    session_id: str,
    usage: Usage,
    api_calls: int,
    model: str | None,
    *,
    absolute: bool,
) -> None:
    """Add (or set) the token and call counters; fill a missing model; mark it active."""
    values = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
        api_calls,
    )
    template = "{0} = ?" if absolute else "{0} = {0} + ?"
    assignments = ", ".join(template.format(name) for name in _USAGE_COLUMNS)
    changed = await execute(
        conn,
        f"UPDATE sessions SET {assignments}, model = COALESCE(model, ?), "
        "last_activity_at = ? WHERE id = ?",
        (*values, model, time.time(), session_id),
    )
    if not changed:
        raise SessionNotFound(f"update_token_counts: no session {session_id!r}")


async def end(conn: aiosqlite.Connection, session_id: str, end_reason: str) -> None:
    """End the session; one already ended keeps its first end time and reason."""
    await require(conn, session_id, "end_session")
    await execute(
        conn,
        "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
        (time.time(), end_reason, session_id),
    )


async def reopen(conn: aiosqlite.Connection, session_id: str) -> None:
    await require(conn, session_id, "reopen_session")
    await update(conn, session_id, {"ended_at": None, "end_reason": None})


async def delete(conn: aiosqlite.Connection, session_id: str) -> bool:
    """Delete a session: delegate children go too, other children are orphaned."""
    if await Nodes(conn).node(session_id) is None:
        return False
    await _delete_tree(conn, session_id, {session_id})
    await gc_prompts(conn)
    return True


async def _delete_tree(conn: aiosqlite.Connection, session_id: str, doomed: set[str]) -> None:
    for child in await Nodes(conn).children(session_id):
        if child.is_delegate and child.id not in doomed:
            doomed.add(child.id)
            await _delete_tree(conn, child.id, doomed)
        else:
            await update(conn, child.id, {"parent_session_id": None})
    await execute(conn, "DELETE FROM messages WHERE session_id = ?", (session_id,))
    await execute(conn, "DELETE FROM compression_locks WHERE session_id = ?", (session_id,))
    await execute(conn, "DELETE FROM sessions WHERE id = ?", (session_id,))
