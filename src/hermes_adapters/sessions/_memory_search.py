"""Search in the in-memory store: substring message search and the session listing.

Why this module exists: the fake has no full-text index, so ``search_messages`` matches
every query term as a case-insensitive substring (a balanced ``"quoted phrase"`` as one
term, its words separated by any whitespace). That is a stand-in for FTS5 that also finds
``it's``, ``a/b.py`` or ``user@host`` literally. Terms are read as the SQL stores read them
(``_fts.query_terms``), snippets are cut as PostgreSQL's substring fallback cuts them
(``_store_common.marked_snippet``), and the order is newest first, as everywhere: by row
id, the order messages were recorded, not by the caller-supplied ``timestamp``. It lives
apart from the store's writes in ``memory.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hermes_adapters.sessions import _fts
from hermes_adapters.sessions._memory_rows import Row, Session, Shared
from hermes_adapters.sessions._store_common import CONTEXT_CHARS, marked_snippet
from hermes_core.ports.sessions import SearchHit, SessionInfo, SortOrder

__all__ = ["search_messages", "search_sessions"]


def _compile_query(query: str) -> list[re.Pattern[str]]:
    """One case-insensitive pattern per term; a phrase's words match across any whitespace."""
    return [
        re.compile(r"\s+".join(re.escape(word) for word in term.split()), re.IGNORECASE)
        for term in _fts.query_terms(query)
    ]


def _context_entry(row: Row) -> dict[str, str]:
    return {"role": row.role, "content": row.content_text[:CONTEXT_CHARS]}


def search_messages(
    shared: Shared,
    query: str,
    *,
    source_filter: Sequence[str] | None,
    exclude_sources: Sequence[str] | None,
    role_filter: Sequence[str] | None,
    limit: int,
    offset: int,
    sort: SortOrder | None,
    include_inactive: bool,
) -> list[SearchHit]:
    """Messages containing every query term, newest (highest id) first unless
    ``sort="oldest"``."""
    patterns = _compile_query(query)
    if not patterns or limit <= 0:
        return []
    found: list[tuple[Row, Session, list[re.Match[str]], list[Row]]] = []
    for session_id, all_rows in shared.rows.items():
        session = shared.sessions[session_id]
        if source_filter and session.source not in source_filter:
            continue
        if exclude_sources and session.source in exclude_sources:
            continue
        rows = [r for r in all_rows if include_inactive or r.active or r.compacted]
        for index, row in enumerate(rows):
            if role_filter and row.role not in role_filter:
                continue
            matches = [m for p in patterns if (m := p.search(row.text)) is not None]
            if len(matches) < len(patterns):
                continue
            around = rows[max(index - 1, 0) : index + 2]
            found.append((row, session, matches, around))
    found.sort(key=lambda item: item[0].id, reverse=sort != "oldest")
    page = found[max(offset, 0) : max(offset, 0) + limit]
    return [
        SearchHit(
            id=row.id,
            session_id=row.session_id,
            role=row.role,
            snippet=marked_snippet(row.text, matches),
            timestamp=row.timestamp,
            source=session.source,
            model=session.model,
            session_started=session.started_at,
            tool_name=row.tool_name,
            context=tuple(_context_entry(r) for r in around),
        )
        for row, session, matches, around in page
    ]


def search_sessions(
    shared: Shared, source: str | None, limit: int, offset: int
) -> list[SessionInfo]:
    """Sessions, most recently active first."""
    infos = [
        shared.info(s) for s in shared.sessions.values() if source is None or s.source == source
    ]
    infos.sort(key=lambda i: (i.last_active or i.started_at, i.started_at, i.id), reverse=True)
    start = max(offset, 0)
    return infos[start : start + max(limit, 0)]
