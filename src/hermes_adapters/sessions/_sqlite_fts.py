"""Deferred full-text indexing in the SQLite store: the watermark, the catch-up, the tail.

Why this module exists: maintaining both FTS5 indexes (unicode61 and trigram) from an
``AFTER INSERT`` trigger cost about 200 µs of the 230 µs an inserted row took, which held
batched appends near 4-5k messages/s. Appends now only insert rows, and the indexing
happens here, later and in batches:

- **The watermark** (``state_meta['fts_indexed_through']``): every message whose id is at
  or below it is in both indexes, and none above it is in either. The schema's delete and
  update triggers touch the indexes only for rows at or below it.
- **The catch-up** (:func:`catch_up`) indexes the rows above the watermark and moves it, in
  one write transaction, so a crash leaves either the old watermark and no new entries or
  both. It is also safe with several writer processes: SQLite has one writer at a time and
  ``AUTOINCREMENT`` ids are handed out while the write lock is held, so once a transaction
  holding that lock has read ``MAX(id)``, no row with a lower id can commit afterwards; the
  watermark can never pass over a row that is not indexed.
- **The tail** (:func:`refresh_tail`): a store that may not write (``read_only``) cannot
  catch up, yet must still find what the writers committed. It indexes the rows above the
  watermark into temporary FTS5 tables on its own connection (the ``temp`` schema is
  writable even when the database file is opened read-only) and searches them next to the
  main indexes (``_sqlite_search``). The tail lives as long as the connection and is only
  extended: rows the watermark has since passed are dropped from it, new rows added. The
  store never rewrites a message's text (only deletes rows, which the search's join with
  ``messages`` hides), so a copy in the tail does not go stale.

``CATCH_UP`` is the plain SQL of a catch-up, for bulk loaders that fill a database with a
synchronous ``sqlite3`` connection (``bench/stores.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import aiosqlite

from hermes_adapters.sessions._sqlite_rows import execute, fetch_one
from hermes_adapters.sessions._sqlite_schema import (
    FTS_WATERMARK,
    TRIGGER_INDEXED_VERSION,
    TRIGRAM_TOKENIZER,
    WORD_TOKENIZER,
    read_schema_version,
)
from hermes_core.errors import SessionStoreError

__all__ = [
    "CATCH_UP",
    "TAIL_TRIGRAM",
    "TAIL_WORDS",
    "CatchUp",
    "backlog",
    "catch_up",
    "pending",
    "refresh_tail",
]

TAIL_WORDS = "hermes_tail_fts"
TAIL_TRIGRAM = "hermes_tail_trigram"
"""The temporary tail indexes: same columns and tokenizers as ``messages_fts`` and
``messages_fts_trigram``, so a term matches and snippets cut alike in both."""

_PENDING = (
    "SELECT COALESCE((SELECT MAX(id) FROM messages), 0), "
    f"(SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{FTS_WATERMARK}')"
)
_WORD_COLUMNS = "content, tool_name, tool_calls"
_ABOVE = "id > :low AND id <= :high"
_TRIGRAM_ROWS = f"{_ABOVE} AND role != 'tool'"
"""The trigram index covers non-tool rows (its content view, ``messages_fts_trigram_src``)."""

CATCH_UP: tuple[str, ...] = (
    f"INSERT INTO messages_fts(rowid, {_WORD_COLUMNS}) "
    f"SELECT id, {_WORD_COLUMNS} FROM messages WHERE {_ABOVE} ORDER BY id",
    "INSERT INTO messages_fts_trigram(rowid, content) "
    f"SELECT id, content FROM messages WHERE {_TRIGRAM_ROWS} ORDER BY id",
    f"UPDATE state_meta SET value = :high WHERE key = '{FTS_WATERMARK}'",
)
"""Index the rows with ``:low < id <= :high`` (``:low`` the watermark) and move the
watermark to ``:high``; run all three in one write transaction."""

_TAIL_DDL: tuple[str, ...] = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{TAIL_WORDS} "
    f"USING fts5({_WORD_COLUMNS}, tokenize='{WORD_TOKENIZER}')",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{TAIL_TRIGRAM} "
    f"USING fts5(content, tokenize='{TRIGRAM_TOKENIZER}')",
    "CREATE TABLE IF NOT EXISTS temp.hermes_tail_range (low INTEGER NOT NULL, high INTEGER NOT NULL)",
)
"""``hermes_tail_range``: the tail holds the rows with ``low < id <= high`` (``low`` the
watermark when it was last trimmed). Kept in the same transaction as the tail itself, so a
rolled-back search cannot leave the two disagreeing."""


@dataclass(frozen=True, slots=True)
class CatchUp:
    """What one :func:`catch_up` did."""

    indexed: int
    """Rows added to the unicode61 index (every message row in the range)."""
    watermark: int
    """The watermark afterwards."""
    top: int
    """The highest message id when it ran."""

    @property
    def remaining(self) -> int:
        """Ids still above the watermark (an upper bound on rows: ids can have gaps)."""
        return self.top - self.watermark


async def pending(conn: aiosqlite.Connection) -> tuple[int, int]:
    """(watermark, highest message id): rows in between are not indexed yet.

    A version-1 file (only a read-only store sees one: a writable store migrates it) has no
    watermark, and needs none: its insert triggers indexed every row, so nothing is pending.
    Checked per call, in the caller's transaction, because a writer may migrate the file
    while a reader has it open.

    Raises:
        SessionStoreError: the watermark is missing, so nobody can tell what is indexed.
    """
    row = await fetch_one(conn, _PENDING)
    top = int(row[0]) if row is not None else 0
    if row is not None and row[1] is not None:
        return int(row[1]), top
    if await read_schema_version(conn) == TRIGGER_INDEXED_VERSION:
        return top, top
    raise SessionStoreError(
        f"state_meta has no {FTS_WATERMARK!r} row, so the full-text indexes cannot be "
        "kept in step; rebuild them (INSERT INTO messages_fts(messages_fts) VALUES "
        "('rebuild'), the same for messages_fts_trigram) and set it to MAX(id)"
    )


async def backlog(conn: aiosqlite.Connection) -> int:
    """How many ids wait above the watermark."""
    watermark, top = await pending(conn)
    return max(top - watermark, 0)


async def catch_up(
    conn: aiosqlite.Connection, *, limit: int | None = None, until: int | None = None
) -> CatchUp:
    """Index the rows above the watermark: at most ``limit`` ids' worth, none above
    ``until``. Run inside a write transaction (``BEGIN IMMEDIATE``): see the module doc."""
    watermark, top = await pending(conn)
    high = top
    if limit is not None:
        high = min(high, watermark + limit)
    if until is not None:
        high = min(high, until)
    if high <= watermark:
        return CatchUp(indexed=0, watermark=watermark, top=top)
    bounds = {"low": watermark, "high": high}
    indexed = await execute(conn, CATCH_UP[0], bounds)
    for statement in CATCH_UP[1:]:
        await execute(conn, statement, bounds)
    return CatchUp(indexed=indexed, watermark=high, top=top)


async def refresh_tail(conn: aiosqlite.Connection, watermark: int, top: int) -> None:
    """Make the temporary tail hold exactly the rows with ``watermark < id <= top``.

    Run inside the search's read transaction, with ``watermark`` and ``top`` read in it.
    """
    for statement in _TAIL_DDL:
        await execute(conn, statement)
    row = await fetch_one(conn, "SELECT low, high FROM temp.hermes_tail_range")
    low, high = (int(row[0]), int(row[1])) if row is not None else (watermark, watermark)
    if watermark < low:  # the file was replaced or its indexes rebuilt: start again
        for table in (TAIL_WORDS, TAIL_TRIGRAM):
            await execute(conn, f"DELETE FROM temp.{table}")
        high = watermark
    elif watermark > low:  # the writers indexed these since: the main indexes have them
        for table in (TAIL_WORDS, TAIL_TRIGRAM):
            await execute(conn, f"DELETE FROM temp.{table} WHERE rowid <= ?", (watermark,))
    high = max(high, watermark)
    if top > high:
        bounds = {"low": high, "high": top}
        await execute(
            conn,
            f"INSERT INTO temp.{TAIL_WORDS}(rowid, {_WORD_COLUMNS}) "
            f"SELECT id, {_WORD_COLUMNS} FROM main.messages WHERE {_ABOVE} ORDER BY id",
            bounds,
        )
        await execute(
            conn,
            f"INSERT INTO temp.{TAIL_TRIGRAM}(rowid, content) "
            f"SELECT id, content FROM main.messages WHERE {_TRIGRAM_ROWS} ORDER BY id",
            bounds,
        )
        high = top
    await execute(conn, "DELETE FROM temp.hermes_tail_range")
    await execute(
        conn, "INSERT INTO temp.hermes_tail_range(low, high) VALUES (?, ?)", (watermark, high)
    )
