"""Search in the SQLite store: full-text message search and the session listing.

Why this module exists: ``search_messages`` is the store's one piece of query building:
user text becomes FTS5 ``MATCH`` expressions (``_fts``), filters become bound parameters,
a word search on the unicode61 index falls back to substrings on the trigram index, and
each hit is returned with its neighbours as context. Any FTS5 error is raised, never
turned into "no results" (WIRE.md §4 item 19). ``search_sessions`` orders sessions by
their last activity. Both build a transaction body that ``sqlite.py`` runs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiosqlite

from hermes_adapters.sessions import _fts
from hermes_adapters.sessions._sqlite_rows import fetch_all, fetch_one
from hermes_adapters.sessions._store_common import CONTEXT_CHARS, SESSION_SELECT, session_info
from hermes_core.ports.sessions import SearchHit, SessionInfo, SortOrder

__all__ = ["message_search", "search_sessions"]

_SCOPE_SEARCH = " AND (active = 1 OR compacted = 1)"
_LAST_ACTIVE = (
    "COALESCE(MAX(COALESCE(last_activity_at, last_message_at), "
    "COALESCE(last_message_at, last_activity_at)), started_at)"
)
_AROUND = (
    "SELECT role, content FROM messages WHERE session_id = ? AND id {} ?{} ORDER BY id {} LIMIT 1"
)


def _placeholders(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


def message_search(
    query: str,
    *,
    source_filter: Sequence[str] | None,
    exclude_sources: Sequence[str] | None,
    role_filter: Sequence[str] | None,
    limit: int,
    offset: int,
    sort: SortOrder | None,
    include_inactive: bool,
) -> Callable[[aiosqlite.Connection], Awaitable[list[SearchHit]]]:
    """The transaction body of ``search_messages``: every query word must match, newest
    first unless ``sort="oldest"``; words on the unicode61 index, then, when that finds
    nothing, the same words as substrings on the trigram index."""
    terms = _fts.query_terms(query)
    words = _fts.match_expression(terms)
    substrings = _fts.trigram_expression(terms)
    filters = "" if include_inactive else " AND (m.active = 1 OR m.compacted = 1)"
    params: list[Any] = []
    if source_filter:
        filters += f" AND s.source IN ({_placeholders(source_filter)})"
        params += source_filter
    if exclude_sources:
        filters += f" AND s.source NOT IN ({_placeholders(exclude_sources)})"
        params += exclude_sources
    if role_filter:
        filters += f" AND m.role IN ({_placeholders(role_filter)})"
        params += role_filter
    direction = "ASC" if sort == "oldest" else "DESC"
    start = max(offset, 0)

    def sql(index: str, column: int) -> str:
        return (
            "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, "
            f"snippet({index}, {column}, '>>>', '<<<', '...', 40) AS snippet, "
            "s.source, s.model, s.started_at "
            f"FROM {index} JOIN messages m ON m.id = {index}.rowid "
            "JOIN sessions s ON s.id = m.session_id "
            f"WHERE {index} MATCH ?{filters} "
            f"ORDER BY m.timestamp {direction}, m.id {direction} LIMIT ? OFFSET ?"
        )

    async def body(conn: aiosqlite.Connection) -> list[SearchHit]:
        if limit <= 0 or not terms:
            return []
        rows: list[sqlite3.Row] = []
        if words is not None:
            rows = await fetch_all(conn, sql("messages_fts", -1), [words, *params, limit, start])
            if (
                not rows
                and start
                and await fetch_all(conn, sql("messages_fts", -1), [words, *params, 1, 0])
            ):
                return []  # past the last page of word matches: no fallback
        if not rows and substrings is not None:
            rows = await fetch_all(
                conn, sql("messages_fts_trigram", 0), [substrings, *params, limit, start]
            )
        return [await _hit(conn, row, include_inactive) for row in rows]

    return body


async def _hit(conn: aiosqlite.Connection, row: sqlite3.Row, include_inactive: bool) -> SearchHit:
    """The hit with its previous and next message (in search scope) as context."""
    scope = "" if include_inactive else _SCOPE_SEARCH
    hit = (row["session_id"], row["id"])
    before = await fetch_one(conn, _AROUND.format("<", scope, "DESC"), hit)
    own = await fetch_one(conn, "SELECT role, content FROM messages WHERE id = ?", (row["id"],))
    after = await fetch_one(conn, _AROUND.format(">", scope, "ASC"), hit)
    return SearchHit(
        id=row["id"],
        session_id=row["session_id"],
        role=row["role"],
        snippet=row["snippet"] or "",
        timestamp=row["timestamp"],
        source=row["source"],
        model=row["model"],
        session_started=row["started_at"],
        tool_name=row["tool_name"],
        context=tuple(_context_entry(before) + _context_entry(own) + _context_entry(after)),
    )


def _context_entry(row: sqlite3.Row | None) -> list[dict[str, str]]:
    if row is None:
        return []
    return [{"role": row["role"], "content": (row["content"] or "")[:CONTEXT_CHARS]}]


async def search_sessions(
    conn: aiosqlite.Connection, source: str | None, limit: int, offset: int
) -> list[SessionInfo]:
    """Sessions, most recently active first."""
    where = " WHERE s.source = ?" if source is not None else ""
    params: list[Any] = [source] if source is not None else []
    rows = await fetch_all(
        conn,
        f"SELECT * FROM ({SESSION_SELECT}{where}) "
        f"ORDER BY {_LAST_ACTIVE} DESC, started_at DESC, id DESC LIMIT ? OFFSET ?",
        [*params, max(limit, 0), max(offset, 0)],
    )
    return [session_info(row) for row in rows]
