"""Search in the SQLite store: full-text message search and the session listing.

Why this module exists: ``search_messages`` is the store's one piece of query building:
user text becomes FTS5 ``MATCH`` expressions (``_fts``), filters become bound parameters,
a word search on the unicode61 index falls back to substrings on the trigram index, and
each hit is returned with its neighbours as context. Any FTS5 error is raised, never
turned into "no results" (WIRE.md §4 item 19). ``search_sessions`` orders sessions by
their last activity. Both build a transaction body that ``sqlite.py`` runs.

Two choices keep a search fast at a million messages:

- hits are ordered by message id, the order they were recorded (``sort="newest"`` is the
  highest ids first), which is the FTS rowid: FTS5 then delivers matches already in order
  and stops after ``LIMIT`` rows, where ordering by the caller's ``timestamp`` had to sort
  every match first (seconds for a frequent word);
- the page is cut first and each hit's context (previous, own and next message in search
  scope, cut to ``CONTEXT_CHARS``) is joined to it in the same statement, instead of three
  more queries, and thread hops, per hit.

Rows above the full-text watermark are not in the main indexes yet (``_sqlite_fts``). The
body either hands back ``None`` so a writable store can index them and search again
(``catch_up_first``), or searches them through the connection's temporary tail index
next to the main one; tail ids are all higher than indexed ones.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiosqlite

from hermes_adapters.sessions import _fts
from hermes_adapters.sessions import _sqlite_fts as _index
from hermes_adapters.sessions._sqlite_rows import fetch_all
from hermes_adapters.sessions._store_common import CONTEXT_CHARS, SESSION_SELECT, session_info
from hermes_core.ports.sessions import SearchHit, SessionInfo, SortOrder

__all__ = ["SearchBody", "message_search", "search_sessions"]

_LAST_ACTIVE = (
    "COALESCE(MAX(COALESCE(last_activity_at, last_message_at), "
    "COALESCE(last_message_at, last_activity_at)), started_at)"
)


@dataclass(frozen=True, slots=True)
class _Index:
    """A full-text index one arm of the search reads, and the column its snippet cuts."""

    table: str
    snippet_column: int


_WORDS = (_Index("messages_fts", -1), _Index(_index.TAIL_WORDS, -1))
_SUBSTRINGS = (_Index("messages_fts_trigram", 0), _Index(_index.TAIL_TRIGRAM, 0))
"""(main index, temporary tail index) for word and for substring search."""


class SearchBody(Protocol):
    """The transaction body of a search (a read transaction).

    With ``catch_up_first`` and rows waiting to be indexed it returns ``None`` without
    searching; otherwise it searches the main indexes and, if rows wait, the tail.
    """

    async def __call__(
        self, conn: aiosqlite.Connection, *, catch_up_first: bool
    ) -> list[SearchHit] | None: ...


def _placeholders(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


def _arm(index: _Index, filters: str) -> str:
    """The matches in one index, with everything a hit needs from its own row."""
    table = index.table
    return (
        "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, "
        f"snippet({table}, {index.snippet_column}, '>>>', '<<<', '...', 40) AS snippet, "
        f"substr(COALESCE(m.content, ''), 1, {CONTEXT_CHARS}) AS own_content, "
        "s.source, s.model, s.started_at "
        f"FROM {table} JOIN messages m ON m.id = {table}.rowid "
        "JOIN sessions s ON s.id = m.session_id "
        f"WHERE {table} MATCH ?{filters}"
    )


def _page_sql(indexes: Sequence[_Index], filters: str, scope: str, direction: str) -> str:
    """One page of hits (``LIMIT ? OFFSET ?``) with their neighbours, in one statement.

    On one index the order is its rowid, which FTS5 delivers in order, so it stops after
    the page. With the tail, each index gives its first ``LIMIT + OFFSET`` hits the same
    way (bound as an extra ``?`` per index) and the page is cut from their union.
    """
    if len(indexes) == 1:
        (index,) = indexes
        page = f"{_arm(index, filters)} ORDER BY {index.table}.rowid {direction}"
    else:
        arms = " UNION ALL ".join(
            f"SELECT * FROM ({_arm(index, filters)} "
            f"ORDER BY {index.table}.rowid {direction} LIMIT ?)"
            for index in indexes
        )
        page = f"SELECT * FROM ({arms}) ORDER BY id {direction}"

    def neighbour(op: str, order: str) -> str:
        return (
            f"(SELECT n.id FROM messages n WHERE n.session_id = h.session_id AND n.id {op} h.id"
            f"{scope} ORDER BY n.id {order} LIMIT 1)"
        )

    return (
        "SELECT h.*, "
        f"b.role AS before_role, substr(COALESCE(b.content, ''), 1, {CONTEXT_CHARS}) "
        "AS before_content, "
        f"a.role AS after_role, substr(COALESCE(a.content, ''), 1, {CONTEXT_CHARS}) "
        "AS after_content "
        f"FROM ({page} LIMIT ? OFFSET ?) h "
        f"LEFT JOIN messages b ON b.id = {neighbour('<', 'DESC')} "
        f"LEFT JOIN messages a ON a.id = {neighbour('>', 'ASC')} "
        f"ORDER BY h.id {direction}"
    )


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
) -> SearchBody:
    """The transaction body of ``search_messages``: every query word must match, newest
    (highest id) first unless ``sort="oldest"``; words on the unicode61 index, then, when
    that finds nothing, the same words as substrings on the trigram index."""
    terms = _fts.query_terms(query)
    words = _fts.match_expression(terms)
    substrings = _fts.trigram_expression(terms)
    filters = "" if include_inactive else " AND (m.active = 1 OR m.compacted = 1)"
    scope = "" if include_inactive else " AND (n.active = 1 OR n.compacted = 1)"
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

    async def page(
        conn: aiosqlite.Connection,
        indexes: Sequence[_Index],
        match: str,
        size: int,
        skip: int,
    ) -> list[sqlite3.Row]:
        sql = _page_sql(indexes, filters, scope, direction)
        if len(indexes) == 1:
            arm_params = [match, *params]
        else:
            arm_params = [match, *params, size + skip] * len(indexes)
        return await fetch_all(conn, sql, [*arm_params, size, skip])

    async def body(conn: aiosqlite.Connection, *, catch_up_first: bool) -> list[SearchHit] | None:
        if limit <= 0 or not terms:
            return []
        watermark, top = await _index.pending(conn)
        tail = top > watermark
        if tail:
            if catch_up_first:
                return None
            await _index.refresh_tail(conn, watermark, top)
        word_indexes = _WORDS if tail else _WORDS[:1]
        substring_indexes = _SUBSTRINGS if tail else _SUBSTRINGS[:1]
        rows: list[sqlite3.Row] = []
        if words is not None:
            rows = await page(conn, word_indexes, words, limit, start)
            if not rows and start and await page(conn, word_indexes, words, 1, 0):
                return []  # past the last page of word matches: no fallback
        if not rows and substrings is not None:
            rows = await page(conn, substring_indexes, substrings, limit, start)
        return [_hit(row) for row in rows]

    return body


def _hit(row: sqlite3.Row) -> SearchHit:
    """The hit with its previous and next message (in search scope) as context."""
    context = [{"role": row["role"], "content": row["own_content"]}]
    if row["before_role"] is not None:
        context.insert(0, {"role": row["before_role"], "content": row["before_content"]})
    if row["after_role"] is not None:
        context.append({"role": row["after_role"], "content": row["after_content"]})
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
        context=tuple(context),
    )


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
