"""Search in the PostgreSQL store: full-text message search and the session listing.

Why this module exists: ``search_messages`` is the store's one piece of query building, as
in ``_sqlite_search``: user text becomes ``phraseto_tsquery`` calls on bound parameters
(never query syntax, so ``it's``, ``a/b.py``, ``NEAR``, ``"unbalanced`` or ``-minus`` are
words to find, never an error or a silent ``[]``), filters become bound parameters, a word
search falls back to substrings, and snippets are finished in Python. It is built here
apart from the engine handling that ``postgres.py`` runs.

Where it differs from the SQLite store's FTS5:

- the ``simple`` text-search configuration (lowercase, no stemming, no stop words) plays the
  part of ``unicode61``; both match whole words, all terms required, each term a phrase of
  the words in it (a ``"quoted phrase"`` stays one). ``english`` was rejected: it stems
  (``run`` would find ``running``, unlike SQLite) and drops stop words, so ``it's``,
  ``not`` or ``and`` could not be searched at all;
- PostgreSQL's parser keeps some tokens whole that ``unicode61`` splits: file paths
  (``a/b.py``), e-mail addresses with a dotted host, URLs, hyphenated words (indexed both
  whole and by part) and decimal numbers. Searching the whole token finds it on both
  backends; searching a *part* of such a token (``b.py``) finds it only through the
  substring fallback below. ``unicode61`` also folds diacritics (``café`` finds ``cafe``);
  ``simple`` does not;
- when no row matches by words, the same terms (each at least three characters) are tried
  as case-insensitive substrings (``ILIKE``) of non-tool messages, accelerated by a
  ``pg_trgm`` GIN index where the extension could be installed: SQLite's trigram retry;
- no relevance ranking on either side (neither ``bm25``/``rank`` nor ``ts_rank``): the
  order is the message id, the order messages were recorded (not the caller-supplied
  ``timestamp``), so the same query pages identically on every backend;
- snippets come from ``ts_headline``: a text of up to 200 characters whole, a longer one
  as one fragment of about 30 words, where FTS5's ``snippet()`` picks 40 tokens; ``...``
  marks text cut at either end.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_adapters.sessions import _fts
from hermes_adapters.sessions._pg_rows import fetch_all, like_escape
from hermes_adapters.sessions._pg_schema import TS_CONFIG
from hermes_adapters.sessions._store_common import (
    CONTEXT_CHARS,
    SESSION_SELECT,
    marked_snippet,
    session_info,
)
from hermes_core.ports.sessions import SearchHit, SessionInfo, SortOrder

__all__ = ["message_search", "search_sessions"]

_SUBSTRING_MIN_CHARS = 3
"""As SQLite's trigram index: a shorter substring would match almost everything."""
_HEADLINE_FRAGMENT = (
    "StartSel=>>>, StopSel=<<<, MaxFragments=1, MaxWords=30, MinWords=10, ShortWord=0"
)
"""One fragment of about 30 words centred on the match; ShortWord=0 keeps short words."""
_HEADLINE_WHOLE = "StartSel=>>>, StopSel=<<<, HighlightAll=true"
"""For a short text: all of it (fragments drop trailing words and punctuation)."""
_WHOLE_TEXT_CHARS = 200
_SCOPE_SEARCH = " AND (active OR compacted)"
_HIT_SCOPE_SEARCH = " AND (m.active OR m.compacted)"


def _finish_headline(headline: str, doc: str) -> str:
    """Put back what ``ts_headline`` trims at the edges: trailing punctuation when nothing
    but punctuation is left out, else ``...`` where the fragment cuts the text."""
    plain = headline.replace(">>>", "").replace("<<<", "")
    start = doc.find(plain) if plain else -1
    if start < 0:
        return headline
    head, tail = doc[:start], doc[start + len(plain) :]
    prefix = "..." if _fts.has_word(head) else head
    suffix = "..." if _fts.has_word(tail) else tail
    return prefix + headline + suffix


def _substring_snippet(content: str, terms: Sequence[str]) -> str:
    """About 40 tokens of ``content`` around the first term found, marked ``>>>…<<<``."""
    found = [m for t in terms if (m := re.search(re.escape(t), content, re.IGNORECASE)) is not None]
    if not found:
        return content[: CONTEXT_CHARS * 2]
    return marked_snippet(content, found)


def _search_sql(match: str, headline: str, filters: str, scope: str, direction: str) -> str:
    """Hits on one page (newest or oldest id first), their snippet source and neighbours.

    One statement: the page is cut first, so ``ts_headline`` (which re-parses the text)
    runs only on the rows returned, and each hit's previous and next message come from
    index lookups joined to it (``LATERAL``), not from further queries per hit.
    """
    order = f"ORDER BY h.id {direction}"
    around = (
        "SELECT role, left(content, {chars}) AS content FROM messages n "
        "WHERE n.session_id = h.session_id AND n.id {op} h.id{scope} ORDER BY n.id {dir} LIMIT 1"
    )
    before = around.format(chars=CONTEXT_CHARS, op="<", scope=scope, dir="DESC")
    after = around.format(chars=CONTEXT_CHARS, op=">", scope=scope, dir="ASC")
    return (
        "SELECT h.*, " + headline + " AS headline, "
        "b.role AS before_role, b.content AS before_content, "
        "a.role AS after_role, a.content AS after_content FROM ("
        "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.content, "
        "concat_ws(E'\\n', m.content, m.tool_name, m.tool_calls) AS doc, "
        "s.source, s.model, s.started_at "
        "FROM messages m JOIN sessions s ON s.id = m.session_id "
        f"WHERE {match}{filters} "
        f"ORDER BY m.id {direction} LIMIT :limit OFFSET :offset) h "
        f"LEFT JOIN LATERAL ({before}) b ON true "
        f"LEFT JOIN LATERAL ({after}) a ON true {order}"
    )


def _context(row: RowMapping) -> tuple[dict[str, str], ...]:
    entries: list[dict[str, str]] = []
    if row["before_role"] is not None:
        entries.append({"role": row["before_role"], "content": row["before_content"] or ""})
    entries.append({"role": row["role"], "content": (row["content"] or "")[:CONTEXT_CHARS]})
    if row["after_role"] is not None:
        entries.append({"role": row["after_role"], "content": row["after_content"] or ""})
    return tuple(entries)


def _hit(row: RowMapping, snippet: str) -> SearchHit:
    return SearchHit(
        id=row["id"],
        session_id=row["session_id"],
        role=row["role"],
        snippet=snippet,
        timestamp=row["timestamp"],
        source=row["source"],
        model=row["model"],
        session_started=row["started_at"],
        tool_name=row["tool_name"],
        context=_context(row),
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
) -> Callable[[AsyncConnection], Awaitable[list[SearchHit]]] | None:
    """The transaction body of ``search_messages``, or ``None`` when nothing can match
    (no terms, or no room on the page): every term must match, newest (highest id) first
    unless ``sort="oldest"``; words on ``search_vector``, then, when that finds nothing, the same
    terms as substrings of non-tool messages."""
    terms = _fts.query_terms(query)
    if limit <= 0 or not terms:
        return None
    words = [t for t in terms if _fts.has_word(t)]
    substrings = terms if all(len(t) >= _SUBSTRING_MIN_CHARS for t in terms) else []
    params: dict[str, Any] = {"limit": limit, "offset": max(offset, 0)}
    headline = {"whole": _HEADLINE_WHOLE, "fragment": _HEADLINE_FRAGMENT}
    scope = "" if include_inactive else _SCOPE_SEARCH
    filters = "" if include_inactive else _HIT_SCOPE_SEARCH
    if source_filter:
        filters += " AND s.source = ANY(:sources)"
        params["sources"] = list(source_filter)
    if exclude_sources:
        filters += " AND NOT (s.source = ANY(:excluded))"
        params["excluded"] = list(exclude_sources)
    if role_filter:
        filters += " AND m.role = ANY(:roles)"
        params["roles"] = list(role_filter)
    direction = "ASC" if sort == "oldest" else "DESC"
    tsquery = " && ".join(
        f"phraseto_tsquery('{TS_CONFIG}'::regconfig, :w{i})" for i in range(len(words))
    )
    word_params = {f"w{i}": word for i, word in enumerate(words)}
    word_sql = _search_sql(
        f"m.search_vector @@ ({tsquery})",
        f"ts_headline('{TS_CONFIG}'::regconfig, h.doc, {tsquery}, CASE WHEN "
        f"length(h.doc) <= {_WHOLE_TEXT_CHARS} THEN :whole ELSE :fragment END)",
        filters,
        scope,
        direction,
    )
    like = " AND ".join(f"m.content ILIKE :s{i}" for i in range(len(substrings)))
    like_params = {f"s{i}": f"%{like_escape(s)}%" for i, s in enumerate(substrings)}
    like_sql = _search_sql(f"m.role <> 'tool' AND {like}", "NULL::text", filters, scope, direction)

    async def body(conn: AsyncConnection) -> list[SearchHit]:
        if words:
            found = await fetch_all(conn, word_sql, **headline, **params, **word_params)
            if found:
                return [_hit(row, _finish_headline(row["headline"], row["doc"])) for row in found]
            if params["offset"] and await fetch_all(
                conn,
                word_sql,
                **headline,
                **{**params, "limit": 1, "offset": 0},
                **word_params,
            ):
                return []  # past the last page of word matches: no fallback
        if not substrings:
            return []
        found = await fetch_all(conn, like_sql, **params, **like_params)
        return [_hit(row, _substring_snippet(row["content"] or "", substrings)) for row in found]

    return body


async def search_sessions(
    conn: AsyncConnection, source: str | None, limit: int, offset: int
) -> list[SessionInfo]:
    """Sessions, most recently active first."""
    where = " WHERE s.source = :source" if source is not None else ""
    params: dict[str, Any] = {"limit": max(limit, 0), "offset": max(offset, 0)}
    if source is not None:
        params["source"] = source
    rows = await fetch_all(
        conn,
        f"SELECT * FROM ({SESSION_SELECT}{where}) x ORDER BY "
        "COALESCE(GREATEST(last_activity_at, last_message_at), started_at) DESC, "
        "started_at DESC, id DESC LIMIT :limit OFFSET :offset",
        **params,
    )
    return [session_info(row) for row in rows]
