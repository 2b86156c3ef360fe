"""The PostgreSQL session store: the SessionDB twin (REFERENCE.md §2) on SQLAlchemy + asyncpg.

For several processes (gateway workers, a fleet of agents) sharing one history, where
SQLite's single writer is the bottleneck. Same methods, same results: it passes
``hermes_core.testing.SessionStoreContract`` unchanged, like the in-memory and SQLite
stores, so switching storage is a URL (``postgresql+asyncpg://user@host/db``).

How it keeps the lessons of WIRE.md §4 items 18-20:

- every operation is one transaction on a pooled connection. Writes run at READ COMMITTED
  and first lock the session row (``FOR NO KEY UPDATE``, or the counter ``UPDATE`` of an
  append), so writers of one session take turns: counters stay exact, batch timestamps
  strictly increase, and within a session a higher row id is always committed after a
  lower one (``get_messages(after_id=...)`` cannot skip a row). Reads run READ ONLY at
  REPEATABLE READ: a lineage walk sees one snapshot. Deadlocks, serialisation failures and
  prepared statements made stale by another process's DDL (PostgreSQL rolled the
  transaction back, so a rerun cannot duplicate anything) are retried with jitter;
  everything else fails loudly as ``SessionStoreError``, never as an empty result;
- the schema is created or reconciled under ``pg_advisory_xact_lock`` (``_pg_schema``), so
  two processes starting on an empty database at once do not race;
- search never turns user text into query syntax: each term goes through
  ``phraseto_tsquery`` as a bound parameter, so ``it's``, ``a/b.py``, ``NEAR``,
  ``"unbalanced`` or ``-minus`` are words to find, never an error or silent ``[]``;
- a cancelled operation rolls back, or, if cancelled mid-statement, its connection is
  invalidated (shielded, so the cleanup itself cannot be cancelled) and never reused.

Search, and where it differs from the SQLite store's FTS5:

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
  order is the message time, so the same query pages identically on every backend;
- snippets come from ``ts_headline``: a text of up to 200 characters whole, a longer one
  as one fragment of about 30 words, where FTS5's ``snippet()`` picks 40 tokens; ``...``
  marks text cut at either end. A read-only store's connections also set
  ``default_transaction_read_only``, so PostgreSQL refuses any write that reaches them.

Pool and driver options (``pool_size``, ``max_overflow``, ``pool_timeout``,
``pool_recycle``, ``pool_pre_ping``, ``connect_args``) go to
:func:`sqlalchemy.ext.asyncio.create_async_engine`; behind PgBouncer in transaction mode
pass ``connect_args={"statement_cache_size": 0, "prepared_statement_cache_size": 0}``.
Connections carry ``application_name=hermes`` unless ``connect_args`` sets one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import anyio
import asyncpg
from sqlalchemy import RowMapping, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from hermes_adapters.sessions import _fts, _lineage
from hermes_adapters.sessions._lineage import COMPRESSION, FORK_MARKERS, Node
from hermes_adapters.sessions._pg_schema import (
    MESSAGE_COLUMNS,
    SCHEMA_VERSION,
    TS_CONFIG,
    check_readable,
    migrate,
    read_schema_version,
)
from hermes_adapters.sessions._sqlite_schema import EncodedMessage, encode_message
from hermes_core import invariants
from hermes_core.errors import (
    CompressionInProgress,
    ReadOnlyStore,
    SessionClosedForAppend,
    SessionNotFound,
    SessionStoreError,
    StoreClosed,
    TranscriptError,
)
from hermes_core.messages import Message, Usage, message_from_dict
from hermes_core.ports.sessions import (
    IDENTITY_FIELDS,
    SearchHit,
    SessionInfo,
    SortOrder,
    StoredMessage,
)

__all__ = ["PostgresSessionStore"]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Body = Callable[[AsyncConnection], Awaitable[_T]]

_CREATE_FIELDS = frozenset({"model", "model_config", "system_prompt", "parent_session_id"})
_METADATA_FIELDS = frozenset({"title", "model", "model_config"})
_USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
)

_BATCH_STEP = 1e-6
_CONTEXT_CHARS = 200
_SNIPPET_TOKENS = 40
_SUBSTRING_MIN_CHARS = 3
"""As SQLite's trigram index: a shorter substring would match almost everything."""
_HEADLINE_FRAGMENT = (
    "StartSel=>>>, StopSel=<<<, MaxFragments=1, MaxWords=30, MinWords=10, ShortWord=0"
)
"""One fragment of about 30 words centred on the match; ShortWord=0 keeps short words."""
_HEADLINE_WHOLE = "StartSel=>>>, StopSel=<<<, HighlightAll=true"
"""For a short text: all of it (fragments drop trailing words and punctuation)."""
_WHOLE_TEXT_CHARS = 200

_RETRIES = 5
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})
"""serialization_failure and deadlock_detected."""
_READ_ONLY_SQLSTATE = "25006"
_UNIQUE_VIOLATION = "23505"
_TITLE_INDEX = "idx_sessions_title"
_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    SQLAlchemyError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    OSError,
    UnicodeError,
)
"""What the driver stack raises: mapped to ``SessionStoreError`` at the boundary."""

_SESSION_SELECT = (
    "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS prompt_text, "
    "(SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id) AS last_message_at "
    "FROM sessions s LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash"
)
_ACTIVE_TOOL_CALLS = (
    "SELECT COALESCE(SUM(json_array_length(tool_calls::json)), 0) FROM messages "
    "WHERE session_id = :sid AND active AND tool_calls IS NOT NULL"
)
_SCOPE_ACTIVE = " AND active"
_SCOPE_SEARCH = " AND (active OR compacted)"
_HIT_SCOPE_SEARCH = " AND (m.active OR m.compacted)"

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
_CLONE = (
    f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) "
    f"SELECT {', '.join('id' if c == 'origin_id' else c for c in MESSAGE_COLUMNS)} "
    "FROM messages WHERE id = :id"
)


# -- small helpers --------------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON round trip of ``value``: what the database will hand back; refuses non-JSON."""
    try:
        copied: dict[str, Any] = json.loads(_dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(f"{what} must be JSON-serialisable: {exc}") from exc
    return copied


def _config_of(row: RowMapping) -> dict[str, Any]:
    raw = row["model_config"]
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise SessionStoreError(
            f"session {row['id']!r} has a model_config that is not JSON: {exc}"
        ) from exc
    return value if isinstance(value, dict) else {}


def _batch_timestamps(start: float, count: int) -> list[float]:
    """``count`` timestamps from ``start``, each strictly greater than the one before."""
    stamps: list[float] = []
    now = start
    for _ in range(count):
        stamps.append(now)
        step = now + _BATCH_STEP
        now = step if step > now else math.nextafter(now, math.inf)
    return stamps


def _pg_text(value: str | None) -> str | None:
    """PostgreSQL ``text`` cannot hold NUL; the searchable columns get U+FFFD instead.

    ``message_json`` is unaffected (JSON escapes NUL), so the message round-trips exactly.
    """
    return value.replace("\x00", "\ufffd") if value else value


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _has_word(term: str) -> bool:
    """Whether the parser can find a word (a letter or digit run) in ``term``."""
    return any(ch.isalnum() for ch in term)


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def _retryable(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled the transaction back in a way a rerun can fix.

    Serialisation failures and deadlocks; and a prepared statement gone stale because
    another process changed the schema (the dialect has already dropped its caches).
    """
    cause = getattr(getattr(exc, "orig", None), "__cause__", None)
    return _sqlstate(exc) in _RETRY_SQLSTATES or isinstance(
        cause, asyncpg.exceptions.InvalidCachedStatementError
    )


def _backoff(attempt: int) -> float:
    return random.uniform(0.01, 0.05) * attempt


def _decode(row: RowMapping) -> Message:
    try:
        return message_from_dict(json.loads(row["message_json"]))
    except (ValueError, TypeError, TranscriptError) as exc:
        raise SessionStoreError(
            f"message row {row['id']} of session {row['session_id']!r} cannot be decoded: {exc}"
        ) from exc


def _finish_headline(headline: str, doc: str) -> str:
    """Put back what ``ts_headline`` trims at the edges: trailing punctuation when nothing
    but punctuation is left out, else ``...`` where the fragment cuts the text."""
    plain = headline.replace(">>>", "").replace("<<<", "")
    start = doc.find(plain) if plain else -1
    if start < 0:
        return headline
    head, tail = doc[:start], doc[start + len(plain) :]
    prefix = "..." if _has_word(head) else head
    suffix = "..." if _has_word(tail) else tail
    return prefix + headline + suffix


_TOKEN = re.compile(r"\S+")


def _substring_snippet(content: str, terms: Sequence[str]) -> str:
    """About 40 tokens of ``content`` around the first term found, marked ``>>>…<<<``."""
    found = [m for t in terms if (m := re.search(re.escape(t), content, re.IGNORECASE)) is not None]
    if not found:
        return content[: _CONTEXT_CHARS * 2]
    first = min(found, key=lambda m: (m.start(), -m.end()))
    start, end = first.start(), first.end()
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(content)]
    lo_tok = next(i for i, (_, tok_end) in enumerate(tokens) if tok_end > start)
    hi_tok = max(i for i, (tok_start, _) in enumerate(tokens) if tok_start < end)
    width = max(_SNIPPET_TOKENS, hi_tok - lo_tok + 1)
    lo = max(0, lo_tok - (width - (hi_tok - lo_tok + 1)) // 2)
    hi = min(len(tokens), lo + width)
    lo = max(0, hi - width)
    body = (
        content[tokens[lo][0] : start]
        + ">>>"
        + content[start:end]
        + "<<<"
        + content[end : tokens[hi - 1][1]]
    )
    return ("..." if lo > 0 else "") + body + ("..." if hi < len(tokens) else "")


# -- statements -------------------------------------------------------------------------------


async def _rows(conn: AsyncConnection, sql: str, **params: Any) -> list[RowMapping]:
    return list((await conn.execute(text(sql), params)).mappings())


async def _row(conn: AsyncConnection, sql: str, **params: Any) -> RowMapping | None:
    return (await conn.execute(text(sql), params)).mappings().first()


async def _exec(conn: AsyncConnection, sql: str, **params: Any) -> int:
    """Run one statement; return its row count."""
    return (await conn.execute(text(sql), params)).rowcount


async def _insert_batch(
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
    stamps = list(stamps) if stamps is not None else _batch_timestamps(time.time(), len(encoded))
    columns: dict[str, list[Any]] = {
        "role": [e.role for e in encoded],
        "content": [_pg_text(e.content) for e in encoded],
        "tool_call_id": [_pg_text(e.tool_call_id) for e in encoded],
        "tool_calls": [_pg_text(e.tool_calls) for e in encoded],
        "tool_name": [_pg_text(e.tool_name) for e in encoded],
        "finish_reason": [_pg_text(e.finish_reason) for e in encoded],
        "reasoning": [_pg_text(e.reasoning) for e in encoded],
        "reasoning_content": [_pg_text(e.reasoning_content) for e in encoded],
        "reasoning_details": [_pg_text(e.reasoning_details) for e in encoded],
        "codex_reasoning_items": [_pg_text(e.codex_reasoning_items) for e in encoded],
        "codex_message_items": [_pg_text(e.codex_message_items) for e in encoded],
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


# -- lineage nodes --------------------------------------------------------------------------


_NODE_SELECT = (
    "SELECT id, source, parent_session_id, end_reason, model_config, started_at FROM sessions"
)


def _node(row: RowMapping) -> Node:
    return Node.of(
        row["id"],
        row["source"],
        row["parent_session_id"],
        row["end_reason"],
        _config_of(row),
        row["started_at"],
    )


class _Nodes:
    """The sessions table as the lineage walks see it (a ``_lineage.NodeReader``)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def node(self, session_id: str) -> Node | None:
        row = await _row(self._conn, f"{_NODE_SELECT} WHERE id = :id", id=session_id)
        return _node(row) if row is not None else None

    async def children(self, session_id: str) -> list[Node]:
        rows = await _rows(
            self._conn,
            f"{_NODE_SELECT} WHERE parent_session_id = :id ORDER BY started_at, id",
            id=session_id,
        )
        return [_node(row) for row in rows]

    async def has_messages(self, session_id: str) -> bool:
        row = await _row(
            self._conn, "SELECT 1 FROM messages WHERE session_id = :id LIMIT 1", id=session_id
        )
        return row is not None


# -- session rows ---------------------------------------------------------------------------


def _info(row: RowMapping) -> SessionInfo:
    marks = [v for v in (row["last_activity_at"], row["last_message_at"]) if v is not None]
    return SessionInfo(
        id=row["id"],
        source=row["source"],
        started_at=row["started_at"],
        model=row["model"],
        model_config=_config_of(row),
        system_prompt=row["prompt_text"],
        parent_session_id=row["parent_session_id"],
        ended_at=row["ended_at"],
        end_reason=row["end_reason"],
        title=row["title"],
        message_count=row["message_count"],
        tool_call_count=row["tool_call_count"],
        api_call_count=row["api_call_count"],
        usage=Usage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_read_tokens=row["cache_read_tokens"],
            cache_write_tokens=row["cache_write_tokens"],
            reasoning_tokens=row["reasoning_tokens"],
        ),
        last_active=max(marks) if marks else row["started_at"],
        identity={name: row[name] for name in IDENTITY_FIELDS if row[name] is not None},
    )


async def _require(
    conn: AsyncConnection, session_id: str, operation: str, *, lock: bool = False
) -> RowMapping:
    """The session row; with ``lock``, held until commit so writers of it take turns."""
    sql = "SELECT * FROM sessions WHERE id = :id" + (" FOR NO KEY UPDATE" if lock else "")
    row = await _row(conn, sql, id=session_id)
    if row is None:
        raise SessionNotFound(f"{operation}: no session {session_id!r}")
    return row


def _check_appendable(row: RowMapping, operation: str) -> None:
    if row["end_reason"] == COMPRESSION:
        raise SessionClosedForAppend(
            f"{operation}: session {row['id']!r} was ended by compression; "
            "write to its continuation (resolve_resume_session_id) instead"
        )


async def _update(conn: AsyncConnection, session_id: str, values: Mapping[str, Any]) -> None:
    """``UPDATE sessions`` with ``values``; column names come from this module only."""
    if values:
        assignments = ", ".join(f"{name} = :v_{name}" for name in values)
        await _exec(
            conn,
            f"UPDATE sessions SET {assignments} WHERE id = :id",
            id=session_id,
            **{f"v_{name}": value for name, value in values.items()},
        )


async def _check_parent(
    conn: AsyncConnection, session_id: str, parent_id: str, operation: str
) -> None:
    """The parent exists and linking it would not make a cycle."""
    await _require(conn, parent_id, f"{operation}(parent_session_id)")
    cursor: str | None = parent_id
    seen: set[str] = set()
    while cursor is not None and cursor not in seen:
        if cursor == session_id:
            raise SessionStoreError(
                f"{operation}: making {parent_id!r} the parent of {session_id!r} "
                "would create a cycle"
            )
        seen.add(cursor)
        row = await _row(conn, "SELECT parent_session_id FROM sessions WHERE id = :id", id=cursor)
        cursor = row["parent_session_id"] if row is not None else None


async def _inherit(conn: AsyncConnection, session_id: str) -> None:
    """Fill the child's missing workspace (and, under a compression parent, chat) fields."""
    child = await _require(conn, session_id, "inherit")
    parent = await _row(
        conn, "SELECT * FROM sessions WHERE id = :id", id=child["parent_session_id"]
    )
    if parent is None:
        return
    names = _lineage.inherited_fields(parent["end_reason"])
    await _update(
        conn,
        session_id,
        {n: parent[n] for n in names if child[n] is None and parent[n] is not None},
    )


async def _store_prompt(conn: AsyncConnection, prompt: str) -> str:
    """Keep ``prompt`` once, under its sha256; return the hash.

    ``DO UPDATE`` (not ``DO NOTHING``) locks the row until commit, so a concurrent prompt
    collection skips it instead of deleting a prompt this transaction is about to use.
    """
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    await _exec(
        conn,
        "INSERT INTO system_prompts(hash, prompt) VALUES (:hash, :prompt) "
        "ON CONFLICT (hash) DO UPDATE SET prompt = EXCLUDED.prompt",
        hash=digest,
        prompt=prompt,
    )
    return digest


async def _gc_prompts(conn: AsyncConnection) -> None:
    """Delete prompts no session uses; rows another transaction holds are left for later."""
    await _exec(
        conn,
        "DELETE FROM system_prompts WHERE hash IN (SELECT sp.hash FROM system_prompts sp "
        "WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.system_prompt_hash = sp.hash) "
        "FOR UPDATE SKIP LOCKED)",
    )


async def _recount(conn: AsyncConnection, session_id: str) -> int:
    """Recompute the counters from the active rows; return the message count."""
    row = await _row(
        conn,
        "UPDATE sessions SET "
        "message_count = (SELECT COUNT(*) FROM messages WHERE session_id = :sid AND active), "
        f"tool_call_count = ({_ACTIVE_TOOL_CALLS}) WHERE id = :sid RETURNING message_count",
        sid=session_id,
    )
    if row is None:
        raise SessionNotFound(f"recount: no session {session_id!r}")
    return int(row["message_count"])


async def _count_appended(
    conn: AsyncConnection, session_id: str, encoded: Sequence[EncodedMessage], operation: str
) -> None:
    """Count the messages about to be appended, taking the session's row lock first.

    One statement does both: the counters move, and the lock it takes (held to commit)
    makes appenders of one session take turns, so the rows inserted next get ids in commit
    order. Raising afterwards rolls the counters back with everything else.
    """
    row = await _row(
        conn,
        "UPDATE sessions SET message_count = message_count + :count, "
        "tool_call_count = tool_call_count + :calls WHERE id = :id RETURNING id, end_reason",
        count=len(encoded),
        calls=sum(e.tool_call_count for e in encoded),
        id=session_id,
    )
    if row is None:
        raise SessionNotFound(f"{operation}: no session {session_id!r}")
    _check_appendable(row, operation)


async def _check_lease(
    conn: AsyncConnection, session_id: str, lock_holder: str | None, operation: str
) -> None:
    """Refuse a compaction when another holder owns (or has taken) the compression lock."""
    lock = await _row(
        conn,
        "SELECT holder, expires_at FROM compression_locks WHERE session_id = :sid",
        sid=session_id,
    )
    if lock_holder is None:
        if lock is not None and lock["expires_at"] >= time.time():
            raise CompressionInProgress(
                f"{operation}: session {session_id!r} is being compressed by {lock['holder']!r}"
            )
        return
    if lock is None or lock["holder"] != lock_holder:
        owner = f"held by {lock['holder']!r}" if lock is not None else "not held"
        raise CompressionInProgress(
            f"{operation}: compression lock of session {session_id!r} is {owner}, "
            f"not by {lock_holder!r}"
        )


async def _scoped_messages(
    conn: AsyncConnection, session_id: str, *, include_inactive: bool
) -> list[Message]:
    scope = "" if include_inactive else _SCOPE_ACTIVE
    rows = await _rows(
        conn,
        f"SELECT id, session_id, message_json FROM messages WHERE session_id = :sid{scope} "
        "ORDER BY id",
        sid=session_id,
    )
    return [_decode(row) for row in rows]


async def _display_messages(conn: AsyncConnection, session_id: str) -> list[Message]:
    """Active and compaction-archived rows, minus originals that were re-cloned."""
    rows = await _rows(
        conn,
        "SELECT id, session_id, message_json FROM messages "
        "WHERE session_id = :sid AND (active OR compacted) "
        "AND id NOT IN (SELECT origin_id FROM messages "
        "WHERE session_id = :sid AND active AND origin_id IS NOT NULL) ORDER BY id",
        sid=session_id,
    )
    return [_decode(row) for row in rows]


# -- search ---------------------------------------------------------------------------------


def _search_sql(match: str, headline: str, filters: str, scope: str, direction: str) -> str:
    """Hits on one page (newest or oldest first), their snippet source and neighbours.

    The page is cut first, so ``ts_headline`` (which re-parses the text) runs only on the
    rows returned, and each hit's previous and next message come from index lookups.
    """
    order = f"ORDER BY h.timestamp {direction}, h.id {direction}"
    around = (
        "SELECT role, left(content, {chars}) AS content FROM messages n "
        "WHERE n.session_id = h.session_id AND n.id {op} h.id{scope} ORDER BY n.id {dir} LIMIT 1"
    )
    before = around.format(chars=_CONTEXT_CHARS, op="<", scope=scope, dir="DESC")
    after = around.format(chars=_CONTEXT_CHARS, op=">", scope=scope, dir="ASC")
    return (
        "SELECT h.*, " + headline + " AS headline, "
        "b.role AS before_role, b.content AS before_content, "
        "a.role AS after_role, a.content AS after_content FROM ("
        "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.content, "
        "concat_ws(E'\\n', m.content, m.tool_name, m.tool_calls) AS doc, "
        "s.source, s.model, s.started_at "
        "FROM messages m JOIN sessions s ON s.id = m.session_id "
        f"WHERE {match}{filters} "
        f"ORDER BY m.timestamp {direction}, m.id {direction} LIMIT :limit OFFSET :offset) h "
        f"LEFT JOIN LATERAL ({before}) b ON true "
        f"LEFT JOIN LATERAL ({after}) a ON true {order}"
    )


def _context(row: RowMapping) -> tuple[dict[str, str], ...]:
    entries: list[dict[str, str]] = []
    if row["before_role"] is not None:
        entries.append({"role": row["before_role"], "content": row["before_content"] or ""})
    entries.append({"role": row["role"], "content": (row["content"] or "")[:_CONTEXT_CHARS]})
    if row["after_role"] is not None:
        entries.append({"role": row["after_role"], "content": row["after_content"] or ""})
    return tuple(entries)


async def _checkout(engine: AsyncEngine) -> AsyncConnection:
    """A pooled connection. Shielded: asyncpg cancelled mid-handshake leaks a failed
    future and a half-open socket; connecting is short and bounded by its timeout."""
    with anyio.CancelScope(shield=True):
        conn = await engine.connect()
    return conn


# -- the store ------------------------------------------------------------------------------


class PostgresSessionStore:
    """A :class:`~hermes_core.ports.SessionStore` in a PostgreSQL database.

    Nothing connects until the first operation, which creates the engine and creates or
    reconciles the schema (or, read-only, checks it exists). Use ``async with`` or call
    :meth:`close`, which waits for operations in flight and disposes the engine.

    Args:
        url: ``postgresql+asyncpg://user:password@host:port/database``; ``postgresql://``
            and ``postgres://`` are read as asyncpg URLs too.
        read_only: run every operation in a READ ONLY transaction, refuse writes with
            ``ReadOnlyStore``, and never create or migrate the schema.
        pool_size, max_overflow, pool_timeout, pool_recycle, pool_pre_ping, connect_args:
            passed to SQLAlchemy's engine (and ``connect_args`` on to ``asyncpg.connect``).
        engine: an engine to use instead of making one from ``url``; the caller keeps
            owning it (``close`` does not dispose it) and ``url`` only names the store.
    """

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        pool_size: int = 5,
        max_overflow: int = 10,
        pool_timeout: float = 30,
        pool_recycle: int = 1800,
        pool_pre_ping: bool = True,
        connect_args: Mapping[str, Any] | None = None,
        engine: AsyncEngine | None = None,
    ) -> None:
        if pool_size < 1 or max_overflow < -1 or pool_timeout < 0:
            raise ValueError(
                "pool_size must be at least 1, max_overflow at least -1 (no limit) and "
                "pool_timeout not negative"
            )
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise ValueError(f"not a database URL: {exc}") from exc
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+asyncpg")
        if engine is None and parsed.drivername != "postgresql+asyncpg":
            raise ValueError(
                f"PostgresSessionStore needs a postgresql+asyncpg:// URL, not {parsed.drivername}"
            )
        self._url = parsed
        self._where = parsed.render_as_string(hide_password=True)
        self._read_only = read_only
        args: dict[str, Any] = dict(connect_args or {})
        settings = dict(args.get("server_settings") or {})
        settings.setdefault("application_name", "hermes")
        if read_only:
            # Defence in depth: PostgreSQL itself refuses writes on these connections,
            # whatever SQL reaches them, on top of each transaction being READ ONLY.
            settings["default_transaction_read_only"] = "on"
        args["server_settings"] = settings
        self._engine_options: dict[str, Any] = {
            "pool_size": pool_size,
            "max_overflow": max_overflow,
            "pool_timeout": pool_timeout,
            "pool_recycle": pool_recycle,
            "pool_pre_ping": pool_pre_ping,
            "connect_args": args,
        }
        self._engine = engine
        self._owns_engine = engine is None
        self._ready = False
        self._ready_lock = anyio.Lock()
        self._closed = False
        self._in_flight = 0
        self._drained = anyio.Event()

    @property
    def url(self) -> str:
        """The database URL with the password masked."""
        return self._where

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def engine(self) -> AsyncEngine | None:
        """The SQLAlchemy engine, once the first operation has created it."""
        return self._engine

    async def __aenter__(self) -> PostgresSessionStore:
        self._check_open("__aenter__")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Wait for operations in flight, then dispose the engine (if the store made it);
        later calls raise ``StoreClosed``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Shielded: a cancelled close would leave pooled connections open.
        with anyio.CancelScope(shield=True):
            if self._in_flight:
                await self._drained.wait()
            engine = self._engine
            if engine is not None and self._owns_engine:
                self._engine = None
                try:
                    await engine.dispose()
                except _DRIVER_ERRORS as exc:
                    raise SessionStoreError(f"close {self._where}: {exc}") from exc

    # -- connection and transactions ----------------------------------------------------

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosed(f"{operation}: the session store {self._where} was closed")

    def _check_writable(self, operation: str) -> None:
        self._check_open(operation)
        if self._read_only:
            raise ReadOnlyStore(f"{operation}: the session store {self._where} is read-only")

    def _error(self, operation: str, exc: BaseException) -> SessionStoreError:
        """The Hermes error for a driver error raised by ``operation``."""
        state = _sqlstate(exc)
        detail = str(getattr(exc, "orig", None) or exc).strip()
        if state == _READ_ONLY_SQLSTATE:
            return ReadOnlyStore(f"{operation}: {self._where} refused a write: {detail}")
        if state == _UNIQUE_VIOLATION and _TITLE_INDEX in detail:
            return SessionStoreError(f"{operation}: that title is already used ({detail})")
        if isinstance(exc, OSError | asyncpg.InterfaceError) or (
            isinstance(exc, DBAPIError) and exc.connection_invalidated
        ):
            return SessionStoreError(
                f"{operation}: lost or could not open the connection to {self._where}: "
                f"{detail}. Is the server running and reachable?"
            )
        return SessionStoreError(f"{operation} on {self._where}: {detail}")

    async def _engine_ready(self) -> AsyncEngine:
        """The engine, created on first use with the schema prepared (once per store)."""
        if self._ready and self._engine is not None:
            return self._engine
        async with self._ready_lock:
            if self._engine is None:
                self._engine = create_async_engine(self._url, **self._engine_options)
            if not self._ready:
                if self._read_only:
                    await self._attempt(self._engine, self._check_readable, write=False)
                else:
                    await self._prepare_schema(self._engine)
                self._ready = True
        return self._engine

    async def _check_readable(self, conn: AsyncConnection) -> None:
        await check_readable(conn, self._where)

    async def _prepare_schema(self, engine: AsyncEngine) -> None:
        """Migrate unless the schema is current: the common case takes no lock."""

        async def current(conn: AsyncConnection) -> bool:
            return await read_schema_version(conn) == SCHEMA_VERSION

        if not await self._attempt(engine, current, write=False):
            await self._attempt(engine, self._migrate, write=True)

    async def _migrate(self, conn: AsyncConnection) -> None:
        await migrate(conn, self._where)

    async def _attempt(self, engine: AsyncEngine, body: _Body[_T], *, write: bool) -> _T:
        """One transaction on a pooled connection: READ COMMITTED for writes, READ ONLY
        REPEATABLE READ (one snapshot) for reads and for every read-only store operation.

        On any failure the transaction is rolled back; if that is not possible (cancelled
        mid-statement, connection lost) the connection is invalidated so the pool never
        hands out a connection in an unknown state. Cleanup is shielded from cancellation.
        """
        conn: AsyncConnection | None = None
        try:
            conn = await _checkout(engine)
            if write and not self._read_only:
                await conn.execution_options(isolation_level="READ COMMITTED")
            else:
                await conn.execution_options(
                    isolation_level="REPEATABLE READ", postgresql_readonly=True
                )
            await conn.begin()
            result = await body(conn)
            await conn.commit()
        except BaseException as exc:
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await self._discard(conn, exc)
            raise
        with anyio.CancelScope(shield=True):
            try:
                await conn.close()
            except _DRIVER_ERRORS as exc:
                # Committed already: reporting a failure now would invite a duplicate write.
                _log.warning("%s: returning a connection to the pool failed: %s", self._where, exc)
        return result

    async def _discard(self, conn: AsyncConnection, exc: BaseException) -> None:
        """Roll back after ``exc``; when that is not possible (a cancellation mid-statement,
        a lost connection) invalidate the connection so the pool closes it. Never raises:
        ``exc`` is what the caller must see."""
        healthy = isinstance(exc, Exception) and not conn.invalidated
        if healthy:
            try:
                await conn.rollback()
            except _DRIVER_ERRORS as cleanup:
                _log.warning(
                    "%s: rollback failed (%s); dropping the connection", self._where, cleanup
                )
                healthy = False
        try:
            if not healthy and not conn.invalidated:
                await conn.invalidate()
        except _DRIVER_ERRORS as cleanup:  # the connection is gone either way
            _log.debug("%s: invalidating a connection failed: %s", self._where, cleanup)
        finally:
            try:
                await conn.close()
            except _DRIVER_ERRORS as cleanup:
                _log.debug("%s: closing a connection failed: %s", self._where, cleanup)

    async def _run(self, operation: str, body: _Body[_T], *, write: bool) -> _T:
        """Run ``body`` in a transaction; retry the ones PostgreSQL rolled back for us.

        Raises:
            StoreClosed, ReadOnlyStore: the store is closed, or read-only and this writes.
            SessionStoreError: any database or connection error.
        """
        if write:
            self._check_writable(operation)
        else:
            self._check_open(operation)
        self._in_flight += 1
        try:
            engine = await self._engine_ready()
            attempt = 0
            while True:
                attempt += 1
                try:
                    return await self._attempt(engine, body, write=write)
                except _DRIVER_ERRORS as exc:
                    if _retryable(exc) and attempt < _RETRIES:
                        await anyio.sleep(_backoff(attempt))
                        continue
                    raise self._error(operation, exc) from exc
        except _DRIVER_ERRORS as exc:  # from creating the engine or preparing the schema
            raise self._error(operation, exc) from exc
        finally:
            self._in_flight -= 1
            if self._closed and not self._in_flight:
                self._drained.set()

    async def _read(self, operation: str, body: _Body[_T]) -> _T:
        return await self._run(operation, body, write=False)

    async def _write(self, operation: str, body: _Body[_T]) -> _T:
        return await self._run(operation, body, write=True)

    # -- sessions -----------------------------------------------------------------------

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Create a session, or fill only the fields the existing one lacks (an upsert).

        Fields: ``model``, ``model_config``, ``system_prompt``, ``parent_session_id`` and
        ``IDENTITY_FIELDS``. A child inherits cwd, git and profile from its parent; a
        compression child also inherits the chat identity.

        Raises:
            TypeError: an unknown field was given.
            SessionNotFound: ``parent_session_id`` names no session.
            SessionStoreError: the id is empty, or the parent link would make a cycle.
        """
        self._check_writable("create_session")
        unknown = sorted(set(fields) - _CREATE_FIELDS - set(IDENTITY_FIELDS))
        if unknown:
            raise TypeError(f"create_session() got unknown field(s): {', '.join(unknown)}")
        if not session_id:
            raise SessionStoreError("create_session: the session id must not be empty")
        given = fields.get("model_config")
        config = _json_object(given, "model_config") if given is not None else None
        prompt: str | None = fields.get("system_prompt")
        parent_id: str | None = fields.get("parent_session_id")

        async def body(conn: AsyncConnection) -> None:
            if parent_id is not None:
                await _check_parent(conn, session_id, parent_id, "create_session")
            await _exec(
                conn,
                "INSERT INTO sessions (id, source, started_at) VALUES (:id, :source, :now) "
                "ON CONFLICT (id) DO NOTHING",
                id=session_id,
                source=source,
                now=time.time(),
            )
            row = await _require(conn, session_id, "create_session", lock=True)
            values: dict[str, Any] = {}
            if row["model"] is None and fields.get("model") is not None:
                values["model"] = fields["model"]
            if config and not _config_of(row):
                values["model_config"] = _dumps(config)
            has_prompt = row["system_prompt_hash"] is not None or row["system_prompt"] is not None
            if prompt is not None and not has_prompt:
                values["system_prompt_hash"] = await _store_prompt(conn, prompt)
            for name in IDENTITY_FIELDS:
                if row[name] is None and fields.get(name) is not None:
                    values[name] = fields[name]
            if row["parent_session_id"] is None and parent_id is not None:
                values["parent_session_id"] = parent_id
            await _update(conn, session_id, values)
            if "parent_session_id" in values:
                await _inherit(conn, session_id)
            await _gc_prompts(conn)

        await self._write("create_session", body)
        return session_id

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """The same upsert as :meth:`create_session`."""
        return await self.create_session(session_id, source, model=model, **fields)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        async def body(conn: AsyncConnection) -> SessionInfo | None:
            row = await _row(conn, f"{_SESSION_SELECT} WHERE s.id = :id", id=session_id)
            return _info(row) if row is not None else None

        return await self._read("get_session", body)

    async def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """The exact id, or the only id starting with the prefix, else ``None``."""

        async def body(conn: AsyncConnection) -> str | None:
            if not id_or_prefix:
                return None
            if await _row(conn, "SELECT 1 FROM sessions WHERE id = :id", id=id_or_prefix):
                return id_or_prefix
            rows = await _rows(
                conn,
                "SELECT id FROM sessions WHERE id LIKE :pattern LIMIT 2",
                pattern=_like_escape(id_or_prefix) + "%",
            )
            return str(rows[0]["id"]) if len(rows) == 1 else None

        return await self._read("resolve_session_id", body)

    async def update_system_prompt(self, session_id: str, prompt: str) -> None:
        async def body(conn: AsyncConnection) -> None:
            await _require(conn, session_id, "update_system_prompt", lock=True)
            digest = await _store_prompt(conn, prompt)
            await _update(conn, session_id, {"system_prompt_hash": digest, "system_prompt": None})
            await _gc_prompts(conn)

        await self._write("update_system_prompt", body)

    async def update_metadata(self, session_id: str, **fields: Any) -> None:
        """Set ``title``, ``model``, ``model_config`` keys (``None`` deletes) or identity
        fields (``None`` clears).

        Raises:
            TypeError: an unknown field was given.
            SessionStoreError: the title is already used by another session.
        """
        self._check_writable("update_metadata")
        unknown = sorted(set(fields) - _METADATA_FIELDS - set(IDENTITY_FIELDS))
        if unknown:
            raise TypeError(f"update_metadata() got unknown field(s): {', '.join(unknown)}")
        given = fields.get("model_config")
        patch = _json_object(given, "model_config") if given is not None else None

        async def body(conn: AsyncConnection) -> None:
            row = await _require(conn, session_id, "update_metadata", lock=True)
            title = fields.get("title")
            if title is not None:
                owner = await _row(
                    conn,
                    "SELECT id FROM sessions WHERE title = :title AND id <> :id",
                    title=title,
                    id=session_id,
                )
                if owner is not None:
                    raise SessionStoreError(
                        f"update_metadata: title {title!r} is already used by session "
                        f"{owner['id']!r}"
                    )
            values: dict[str, Any] = {
                name: fields[name]
                for name in ("title", "model", *IDENTITY_FIELDS)
                if name in fields
            }
            if patch is not None:
                config = _config_of(row)
                for key, value in patch.items():
                    if value is None:
                        config.pop(key, None)
                    else:
                        config[key] = value
                values["model_config"] = _dumps(config)
            await _update(conn, session_id, values)

        await self._write("update_metadata", body)

    async def update_token_counts(
        self,
        session_id: str,
        usage: Usage,
        *,
        api_calls: int = 0,
        model: str | None = None,
        absolute: bool = False,
    ) -> None:
        """Add ``usage`` and ``api_calls`` (or set them when ``absolute``); fill a missing
        model; mark the session active now."""
        values = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
            api_calls,
        )
        template = "{0} = :{0}" if absolute else "{0} = {0} + :{0}"
        assignments = ", ".join(template.format(name) for name in _USAGE_COLUMNS)

        async def body(conn: AsyncConnection) -> None:
            changed = await _exec(
                conn,
                f"UPDATE sessions SET {assignments}, model = COALESCE(model, :model), "
                "last_activity_at = :now WHERE id = :id",
                id=session_id,
                model=model,
                now=time.time(),
                **dict(zip(_USAGE_COLUMNS, values, strict=True)),
            )
            if not changed:
                raise SessionNotFound(f"update_token_counts: no session {session_id!r}")

        await self._write("update_token_counts", body)

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session; one already ended keeps its first end time and reason."""

        async def body(conn: AsyncConnection) -> None:
            await _require(conn, session_id, "end_session", lock=True)
            await _exec(
                conn,
                "UPDATE sessions SET ended_at = :now, end_reason = :reason "
                "WHERE id = :id AND ended_at IS NULL",
                now=time.time(),
                reason=end_reason,
                id=session_id,
            )

        await self._write("end_session", body)

    async def reopen_session(self, session_id: str) -> None:
        async def body(conn: AsyncConnection) -> None:
            await _require(conn, session_id, "reopen_session", lock=True)
            await _update(conn, session_id, {"ended_at": None, "end_reason": None})

        await self._write("reopen_session", body)

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: delegate children go too, other children are orphaned."""

        async def body(conn: AsyncConnection) -> bool:
            if await _row(conn, "SELECT 1 FROM sessions WHERE id = :id FOR UPDATE", id=session_id):
                await self._delete_tree(conn, session_id, {session_id})
                await _gc_prompts(conn)
                return True
            return False

        return await self._write("delete_session", body)

    async def _delete_tree(self, conn: AsyncConnection, session_id: str, doomed: set[str]) -> None:
        for child in await _Nodes(conn).children(session_id):
            if child.is_delegate and child.id not in doomed:
                doomed.add(child.id)
                await self._delete_tree(conn, child.id, doomed)
            else:
                await _update(conn, child.id, {"parent_session_id": None})
        await _exec(conn, "DELETE FROM messages WHERE session_id = :id", id=session_id)
        await _exec(conn, "DELETE FROM compression_locks WHERE session_id = :id", id=session_id)
        await _exec(conn, "DELETE FROM sessions WHERE id = :id", id=session_id)

    # -- messages -----------------------------------------------------------------------

    async def append_message(
        self,
        session_id: str,
        message: Message,
        *,
        timestamp: float | None = None,
        token_count: int | None = None,
    ) -> int:
        """Append one message and return its row id.

        Raises:
            SessionNotFound: no such session.
            SessionClosedForAppend: the session was ended by compression.
        """
        self._check_writable("append_message")
        encoded = encode_message(message)

        async def body(conn: AsyncConnection) -> int:
            await _count_appended(conn, session_id, [encoded], "append_message")
            stamp = time.time() if timestamp is None else float(timestamp)
            [new_id] = await _insert_batch(conn, session_id, [encoded], [stamp], [token_count])
            return new_id

        return await self._write("append_message", body)

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]:
        """Append atomically; timestamps inside the batch strictly increase."""
        self._check_writable("append_messages")
        encoded = [encode_message(m) for m in messages]

        async def body(conn: AsyncConnection) -> list[int]:
            await _count_appended(conn, session_id, encoded, "append_messages")
            return await _insert_batch(conn, session_id, encoded)

        return await self._write("append_messages", body)

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole transcript (archived rows included) with ``messages``."""
        self._check_writable("replace_messages")
        encoded = [encode_message(m) for m in messages]

        async def body(conn: AsyncConnection) -> None:
            await _require(conn, session_id, "replace_messages", lock=True)
            await _exec(conn, "DELETE FROM messages WHERE session_id = :id", id=session_id)
            await _insert_batch(conn, session_id, encoded)
            await _recount(conn, session_id)

        await self._write("replace_messages", body)

    async def get_messages(
        self,
        session_id: str,
        *,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
        after_id: int | None = None,
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

        async def body(conn: AsyncConnection) -> list[StoredMessage]:
            return [
                StoredMessage(
                    id=row["id"],
                    session_id=row["session_id"],
                    message=_decode(row),
                    timestamp=row["timestamp"],
                    active=row["active"],
                    compacted=row["compacted"],
                    token_count=row["token_count"],
                )
                for row in await _rows(conn, sql, **params)
            ]

        return await self._read("get_messages", body)

    async def get_conversation(
        self,
        session_id: str,
        *,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair: bool = False,
    ) -> list[Message]:
        """The transcript as messages; with ancestors, its compression lineage root first."""

        async def body(conn: AsyncConnection) -> list[Message]:
            if include_ancestors:
                lineage = await _lineage.lineage(_Nodes(conn), session_id)
            else:
                lineage = [session_id]
            segments = [
                await _scoped_messages(conn, sid, include_inactive=include_inactive)
                for sid in lineage
            ]
            return _lineage.dedupe_replayed_users(segments)

        messages = await self._read("get_conversation", body)
        return invariants.repair(messages) if repair else messages

    # -- search -------------------------------------------------------------------------

    async def search_messages(
        self,
        query: str,
        *,
        source_filter: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        role_filter: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: SortOrder | None = None,
        include_inactive: bool = False,
    ) -> list[SearchHit]:
        """Messages matching every query word, newest first unless ``sort="oldest"``.

        Words are matched on ``search_vector``; when that finds nothing, the same terms are
        tried as substrings of non-tool messages. Default scope: active rows and rows
        archived by compaction.

        Raises:
            SessionStoreError: the query failed (never reported as no results).
        """
        self._check_open("search_messages")
        terms = _fts.query_terms(query)
        if limit <= 0 or not terms:
            return []
        words = [t for t in terms if _has_word(t)]
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
        like_params = {f"s{i}": f"%{_like_escape(s)}%" for i, s in enumerate(substrings)}
        like_sql = _search_sql(
            f"m.role <> 'tool' AND {like}", "NULL::text", filters, scope, direction
        )

        async def body(conn: AsyncConnection) -> list[SearchHit]:
            if words:
                found = await _rows(conn, word_sql, **headline, **params, **word_params)
                if found:
                    return [
                        self._hit(row, _finish_headline(row["headline"], row["doc"]))
                        for row in found
                    ]
                if params["offset"] and await _rows(
                    conn,
                    word_sql,
                    **headline,
                    **{**params, "limit": 1, "offset": 0},
                    **word_params,
                ):
                    return []  # past the last page of word matches: no fallback
            if not substrings:
                return []
            found = await _rows(conn, like_sql, **params, **like_params)
            return [
                self._hit(row, _substring_snippet(row["content"] or "", substrings))
                for row in found
            ]

        return await self._read("search_messages", body)

    @staticmethod
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

    async def search_sessions(
        self, *, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions, most recently active first."""
        where = " WHERE s.source = :source" if source is not None else ""
        sql = (
            f"SELECT * FROM ({_SESSION_SELECT}{where}) x ORDER BY "
            "COALESCE(GREATEST(last_activity_at, last_message_at), started_at) DESC, "
            "started_at DESC, id DESC LIMIT :limit OFFSET :offset"
        )
        params: dict[str, Any] = {"limit": max(limit, 0), "offset": max(offset, 0)}
        if source is not None:
            params["source"] = source

        async def body(conn: AsyncConnection) -> list[SessionInfo]:
            return [_info(row) for row in await _rows(conn, sql, **params)]

        return await self._read("search_sessions", body)

    # -- lineage and compression ----------------------------------------------------------

    async def resolve_resume_session_id(self, session_id: str) -> str:
        """Where a resume of ``session_id`` should land.

        Follows the compression chain to its tip, then walks the newest non-fork child
        (branches, resets and subagents are skipped) and returns the deepest session with
        messages on that walk, else the compression tip.
        """

        async def body(conn: AsyncConnection) -> str:
            return await _lineage.resume_target(_Nodes(conn), session_id)

        return await self._read("resolve_resume_session_id", body)

    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]:
        """(model history of the tip, repaired; full display history of the lineage)."""

        async def body(conn: AsyncConnection) -> tuple[list[Message], list[Message]]:
            model = await _scoped_messages(conn, session_id, include_inactive=False)
            segments = [
                await _display_messages(conn, sid)
                for sid in await _lineage.lineage(_Nodes(conn), session_id)
            ]
            return model, _lineage.dedupe_replayed_users(segments)

        model, display = await self._read("get_resume_conversations", body)
        return invariants.repair(model), display

    async def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Take the lock unless another holder has a live one; an expired lock is reclaimed.

        Re-acquiring a lock one already holds succeeds without extending it.
        """
        self._check_writable("try_acquire_compression_lock")
        if not session_id or not holder:
            return False

        async def body(conn: AsyncConnection) -> bool:
            now = time.time()
            await _exec(
                conn,
                "DELETE FROM compression_locks WHERE session_id = :sid AND expires_at < :now",
                sid=session_id,
                now=now,
            )
            await _exec(
                conn,
                "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) "
                "VALUES (:sid, :holder, :now, :expires) ON CONFLICT (session_id) DO NOTHING",
                sid=session_id,
                holder=holder,
                now=now,
                expires=now + ttl_seconds,
            )
            owner = await _row(
                conn, "SELECT holder FROM compression_locks WHERE session_id = :sid", sid=session_id
            )
            return owner is not None and owner["holder"] == holder

        return await self._write("try_acquire_compression_lock", body)

    async def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
        self._check_writable("refresh_compression_lock")
        if not holder:
            return False

        async def body(conn: AsyncConnection) -> bool:
            changed = await _exec(
                conn,
                "UPDATE compression_locks SET expires_at = :expires "
                "WHERE session_id = :sid AND holder = :holder",
                expires=time.time() + ttl_seconds,
                sid=session_id,
                holder=holder,
            )
            return changed > 0

        return await self._write("refresh_compression_lock", body)

    async def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` owns it; otherwise do nothing."""

        async def body(conn: AsyncConnection) -> None:
            await _exec(
                conn,
                "DELETE FROM compression_locks WHERE session_id = :sid AND holder = :holder",
                sid=session_id,
                holder=holder,
            )

        await self._write("release_compression_lock", body)

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        async def body(conn: AsyncConnection) -> str | None:
            row = await _row(
                conn,
                "SELECT holder FROM compression_locks WHERE session_id = :sid "
                "AND expires_at >= :now",
                sid=session_id,
                now=time.time(),
            )
            return str(row["holder"]) if row is not None else None

        return await self._read("get_compression_lock_holder", body)

    async def archive_and_compact(
        self,
        session_id: str,
        compacted: Sequence[Message],
        *,
        model_config_patch: Mapping[str, Any] | None = None,
        watermark: int | None = None,
        lock_holder: str | None = None,
    ) -> int:
        """Archive active rows, insert ``compacted``, re-clone rows newer than ``watermark``.

        In one transaction: every active row becomes ``active=false, compacted=true``;
        ``compacted`` is inserted as the new active transcript; active rows with an id above
        ``watermark`` (they arrived while the summary was being written) are inserted again
        after it; counters are recomputed and ``model_config_patch`` merged (``None``
        deletes a key).

        Returns:
            The number of active rows afterwards (the new ``message_count``).

        Raises:
            CompressionInProgress: the lock is held by someone other than ``lock_holder``.
            SessionClosedForAppend: the session was ended by compression.
        """
        self._check_writable("archive_and_compact")
        encoded = [encode_message(m) for m in compacted]
        patch = _json_object(model_config_patch, "model_config_patch") if model_config_patch else {}

        async def body(conn: AsyncConnection) -> int:
            row = await _require(conn, session_id, "archive_and_compact", lock=True)
            await _check_lease(conn, session_id, lock_holder, "archive_and_compact")
            _check_appendable(row, "archive_and_compact")
            late: list[int] = []
            if watermark is not None:
                late = [
                    r["id"]
                    for r in await _rows(
                        conn,
                        "SELECT id FROM messages WHERE session_id = :sid AND active "
                        "AND id > :mark ORDER BY id",
                        sid=session_id,
                        mark=watermark,
                    )
                ]
            await _exec(
                conn,
                "UPDATE messages SET active = false, compacted = true "
                "WHERE session_id = :sid AND active",
                sid=session_id,
            )
            await _insert_batch(conn, session_id, encoded)
            for origin in late:
                await _exec(conn, _CLONE, id=origin)
            if patch:
                config = _config_of(row)
                for key, value in patch.items():
                    if value is None:
                        config.pop(key, None)
                    else:
                        config[key] = value
                await _update(conn, session_id, {"model_config": _dumps(config)})
            return await _recount(conn, session_id)

        return await self._write("archive_and_compact", body)

    async def publish_compression_child(
        self,
        parent_session_id: str,
        child_session_id: str,
        messages: Sequence[Message],
        *,
        source: str | None = None,
        lock_holder: str | None = None,
    ) -> str:
        """Rotation: a child holding ``messages``; the parent ends with 'compression'.

        The child inherits the parent's source (unless given), model, model_config (without
        fork markers), system prompt, workspace and chat identity; all in one transaction,
        so a reader sees either the live parent or the ended parent with its whole child.

        Raises:
            CompressionInProgress: the parent's lock is held by someone other than
                ``lock_holder``.
            SessionClosedForAppend: the parent was already ended by compression.
            SessionStoreError: the child id is empty, equals the parent's, or names a
                session that already has another parent.
        """
        operation = "publish_compression_child"
        self._check_writable(operation)
        encoded = [encode_message(m) for m in messages]
        parent_id, child_id = parent_session_id, child_session_id

        async def body(conn: AsyncConnection) -> str:
            parent = await _require(conn, parent_id, operation, lock=True)
            await _check_lease(conn, parent_id, lock_holder, operation)
            _check_appendable(parent, operation)
            if not child_id or child_id == parent_id:
                raise SessionStoreError(
                    f"{operation}: invalid child id {child_id!r} for parent {parent_id!r}"
                )
            existing = await _row(conn, "SELECT * FROM sessions WHERE id = :id", id=child_id)
            if existing is not None:
                if existing["parent_session_id"] not in (None, parent_id):
                    raise SessionStoreError(
                        f"{operation}: session {child_id!r} already exists as a child of "
                        f"{existing['parent_session_id']!r}"
                    )
                await _check_parent(conn, child_id, parent_id, operation)
            now = time.time()
            await _exec(
                conn,
                "INSERT INTO sessions (id, source, started_at) VALUES (:id, :source, :now) "
                "ON CONFLICT (id) DO NOTHING",
                id=child_id,
                source=source or parent["source"],
                now=now,
            )
            child = await _require(conn, child_id, operation, lock=True)
            values: dict[str, Any] = {"parent_session_id": parent_id}
            if child["model"] is None:
                values["model"] = parent["model"]
            if not _config_of(child):
                inherited = {k: v for k, v in _config_of(parent).items() if k not in FORK_MARKERS}
                values["model_config"] = _dumps(inherited)
            if child["system_prompt_hash"] is None and child["system_prompt"] is None:
                values["system_prompt_hash"] = parent["system_prompt_hash"]
            await _update(conn, child_id, values)
            await _update(conn, parent_id, {"ended_at": now, "end_reason": COMPRESSION})
            await _inherit(conn, child_id)
            await _insert_batch(conn, child_id, encoded)
            await _recount(conn, child_id)
            await _gc_prompts(conn)
            return child_id

        return await self._write(operation, body)
