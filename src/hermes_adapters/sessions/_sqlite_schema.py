"""The SQLite session schema: DDL, additive migrations and the message row layout.

The layout follows the reference SessionDB (REFERENCE.md §2) so a user's ``sqlite3``
habits and queries keep working: ``sessions``, ``messages`` with one column per field
(``role``, ``content``, ``tool_calls``, ``reasoning_details``, ...), ``system_prompts``
keyed by sha256, ``compression_locks``, ``state_meta`` and ``schema_version``.

Two additions make the store lossless and lineage-exact: ``messages.message_json`` holds
the message's full dict codec (the columns alone cannot carry every provider replay key),
and ``messages.origin_id`` marks a row re-cloned by ``archive_and_compact`` so the display
history shows it once. Rows written without ``message_json`` (an older database) are
rebuilt from the columns.

Migrations are additive: tables, columns, indexes, full-text indexes and triggers that are
missing are created, so a database from an older version opens and keeps its rows. The few
non-additive steps (version 2 dropped the FTS insert triggers) run before that pass.

Full-text indexing is deferred (version 2): no trigger indexes an inserted row; the
``_sqlite_fts`` module indexes rows in batches above a watermark kept in ``state_meta``, and
the delete/update triggers here only touch the indexes for rows at or below it.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiosqlite

from hermes_core.errors import SessionStoreError, TranscriptError
from hermes_core.messages import (
    AssistantMessage,
    Message,
    ToolMessage,
    message_from_dict,
    message_to_dict,
    text_of,
)

__all__ = [
    "FTS_WATERMARK",
    "INSERT_MESSAGE",
    "INSERT_ROWS_MAX",
    "MESSAGE_COLUMNS",
    "SCHEMA_VERSION",
    "TRIGGER_INDEXED_VERSION",
    "TRIGRAM_TOKENIZER",
    "WORD_TOKENIZER",
    "EncodedMessage",
    "check_readable",
    "decode_message",
    "encode_message",
    "insert_messages_sql",
    "migrate",
    "read_schema_version",
]

SCHEMA_VERSION = 2
"""Bumped whenever the layout changes; the number is stored in ``schema_version``.

1: the reference layout plus ``message_json``/``origin_id``, FTS5 maintained by triggers.
2: deferred full-text indexing (no insert triggers; the ``fts_indexed_through`` watermark).
"""

TRIGGER_INDEXED_VERSION = 1
"""The last version whose insert triggers indexed every row: a file at this version has no
watermark, and nothing pending. A read-only store (which may not migrate) reads it so."""

FTS_WATERMARK = "fts_indexed_through"
"""The ``state_meta`` key of the full-text watermark: every message whose id is at or below
it is in both FTS5 indexes, and no message above it is in either."""

WORD_TOKENIZER = "unicode61"
TRIGRAM_TOKENIZER = "trigram"
"""The FTS5 tokenizers; readers' temporary tail indexes (``_sqlite_fts``) must use the same."""

_LEGACY_JSON_PREFIX = "\x00json:"
"""How the reference store encodes list or dict content in ``messages.content``."""


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    keys: tuple[str, ...]
    """Column definitions present since the table was first created (never altered)."""
    columns: tuple[tuple[str, str], ...]
    """Other columns as (name, declaration); each is added by ALTER TABLE when missing."""
    constraints: tuple[str, ...] = ()

    def create(self) -> str:
        body = [*self.keys, *(f"{name} {decl}" for name, decl in self.columns), *self.constraints]
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(body)})"


_COUNTER = "INTEGER NOT NULL DEFAULT 0"

_TABLES: tuple[_Table, ...] = (
    _Table("schema_version", ("version INTEGER NOT NULL",), ()),
    _Table("state_meta", ("key TEXT PRIMARY KEY",), (("value", "TEXT"),)),
    _Table("system_prompts", ("hash TEXT PRIMARY KEY", "prompt TEXT NOT NULL"), ()),
    _Table(
        "sessions",
        ("id TEXT PRIMARY KEY", "source TEXT NOT NULL", "started_at REAL NOT NULL"),
        (
            ("user_id", "TEXT"),
            ("session_key", "TEXT"),
            ("chat_id", "TEXT"),
            ("chat_type", "TEXT"),
            ("thread_id", "TEXT"),
            ("display_name", "TEXT"),
            ("origin_json", "TEXT"),
            ("model", "TEXT"),
            ("model_config", "TEXT"),
            ("system_prompt", "TEXT"),
            ("system_prompt_hash", "TEXT REFERENCES system_prompts(hash)"),
            ("parent_session_id", "TEXT REFERENCES sessions(id)"),
            ("ended_at", "REAL"),
            ("end_reason", "TEXT"),
            ("message_count", _COUNTER),
            ("tool_call_count", _COUNTER),
            ("input_tokens", _COUNTER),
            ("output_tokens", _COUNTER),
            ("cache_read_tokens", _COUNTER),
            ("cache_write_tokens", _COUNTER),
            ("reasoning_tokens", _COUNTER),
            ("api_call_count", _COUNTER),
            ("cwd", "TEXT"),
            ("git_branch", "TEXT"),
            ("git_repo_root", "TEXT"),
            ("profile_name", "TEXT"),
            ("title", "TEXT"),
            ("last_activity_at", "REAL"),
        ),
    ),
    _Table(
        "messages",
        (
            "id INTEGER PRIMARY KEY AUTOINCREMENT",
            "session_id TEXT NOT NULL REFERENCES sessions(id)",
            "role TEXT NOT NULL",
            "timestamp REAL NOT NULL",
        ),
        (
            ("content", "TEXT"),
            ("tool_call_id", "TEXT"),
            ("tool_calls", "TEXT"),
            ("tool_name", "TEXT"),
            ("token_count", "INTEGER"),
            ("finish_reason", "TEXT"),
            ("reasoning", "TEXT"),
            ("reasoning_content", "TEXT"),
            ("reasoning_details", "TEXT"),
            ("codex_reasoning_items", "TEXT"),
            ("codex_message_items", "TEXT"),
            ("active", "INTEGER NOT NULL DEFAULT 1"),
            ("compacted", "INTEGER NOT NULL DEFAULT 0"),
            ("message_json", "TEXT"),
            ("origin_id", "INTEGER"),
        ),
    ),
    _Table(
        "compression_locks",
        (
            "session_id TEXT PRIMARY KEY",
            "holder TEXT NOT NULL",
            "acquired_at REAL NOT NULL",
            "expires_at REAL NOT NULL",
        ),
        (),
    ),
)

_INDEXES: tuple[str, ...] = (
    "CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_key ON sessions(session_key, started_at DESC)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_prompt ON sessions(system_prompt_hash)",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title ON sessions(title) "
    "WHERE title IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS idx_messages_session_time ON messages(session_id, timestamp)",
    "CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id)",
    "CREATE INDEX IF NOT EXISTS idx_messages_session_active "
    "ON messages(session_id, active, timestamp)",
    "CREATE INDEX IF NOT EXISTS idx_compression_locks_expiry ON compression_locks(expires_at)",
)

# External-content FTS5: the index holds no copy of the text. Rows are indexed in batches
# above the watermark (``_sqlite_fts.catch_up``), not by an insert trigger. The delete and
# update triggers keep indexed rows in step, and only those: the FTS5 ``'delete'`` command
# must be given exactly the values once indexed, and issuing it for a row that was never
# indexed corrupts an external-content index. A row above the watermark needs nothing when
# it changes or goes: the catch-up reads whatever is current.
_INDEXED = (
    f"old.id <= (SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{FTS_WATERMARK}')"
)
_FTS: tuple[str, ...] = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5("
    "content, tool_name, tool_calls, content='messages', content_rowid='id', "
    f"tokenize='{WORD_TOKENIZER}')",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages "
    f"WHEN {_INDEXED} BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
    "VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_update "
    "AFTER UPDATE OF content, tool_name, tool_calls ON messages "
    "WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
    f"OR old.tool_calls IS NOT new.tool_calls) AND {_INDEXED} BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
    "VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); "
    "INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
    "VALUES (new.id, new.content, new.tool_name, new.tool_calls); END",
    # Substring search (CJK text, word fragments) over non-tool rows: tool output is bulky
    # and a trigram index of it would dwarf the database.
    "CREATE VIEW IF NOT EXISTS messages_fts_trigram_src AS "
    "SELECT id, content FROM messages WHERE role != 'tool'",
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5("
    "content, content='messages_fts_trigram_src', content_rowid='id', "
    f"tokenize='{TRIGRAM_TOKENIZER}')",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages "
    f"WHEN old.role != 'tool' AND {_INDEXED} BEGIN "
    "INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) "
    "VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update "
    "AFTER UPDATE OF content, role ON messages "
    f"WHEN (old.content IS NOT new.content OR old.role IS NOT new.role) AND {_INDEXED} BEGIN "
    "INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) "
    "SELECT 'delete', old.id, old.content WHERE old.role != 'tool'; "
    "INSERT INTO messages_fts_trigram(rowid, content) "
    "SELECT new.id, new.content WHERE new.role != 'tool'; END",
)
_FTS_TABLES = ("messages_fts", "messages_fts_trigram")

_STEPS: Mapping[int, Sequence[str]] = {
    # Deferred indexing: drop the insert triggers, and the delete/update triggers so that the
    # additive pass recreates them gated on the watermark.
    2: tuple(
        f"DROP TRIGGER IF EXISTS {name}"
        for name in (
            "messages_fts_insert",
            "messages_fts_delete",
            "messages_fts_update",
            "messages_fts_trigram_insert",
            "messages_fts_trigram_delete",
            "messages_fts_trigram_update",
        )
    ),
}
"""Non-additive statements to run when passing a version, before the additive pass (so it
can recreate an object of the same name with a new definition)."""


async def _names(conn: aiosqlite.Connection) -> set[str]:
    rows = await conn.execute_fetchall("SELECT name FROM sqlite_master")
    return {row[0] for row in rows}


async def read_schema_version(conn: aiosqlite.Connection) -> int:
    """The stored schema version; 0 for a database without the Hermes schema."""
    if "schema_version" not in await _names(conn):
        return 0
    rows = list(await conn.execute_fetchall("SELECT MAX(version) FROM schema_version"))
    return int(rows[0][0] or 0) if rows else 0


async def check_readable(conn: aiosqlite.Connection, path: str) -> None:
    """Refuse a database a read-only store cannot query (it may not migrate it).

    Version 1 is read as it is: it has every table and column of version 2, and its insert
    triggers indexed every row (``_sqlite_fts.pending`` reads its watermark as ``MAX(id)``),
    so ``hermes sessions list/search`` work right after an upgrade, before any writable
    store has migrated the file.

    Raises:
        SessionStoreError: no Hermes schema, or one newer than this version.
    """
    version = await read_schema_version(conn)
    if version == 0:
        raise SessionStoreError(
            f"{path} holds no Hermes session schema; open it once without read_only to create it"
        )
    if version > SCHEMA_VERSION:
        raise SessionStoreError(
            f"{path} has session schema version {version}, newer than this Hermes "
            f"({SCHEMA_VERSION}); upgrade Hermes to open it"
        )


async def migrate(conn: aiosqlite.Connection, path: str) -> None:
    """Create or upgrade the schema; run inside the caller's write transaction.

    Raises:
        SessionStoreError: the database was written by a newer schema version.
    """
    found = await read_schema_version(conn)
    if found == SCHEMA_VERSION:
        return
    if found > SCHEMA_VERSION:
        raise SessionStoreError(
            f"{path} has session schema version {found}, newer than this Hermes "
            f"({SCHEMA_VERSION}); upgrade Hermes to open it"
        )
    before = await _names(conn)
    for version in range(found + 1, SCHEMA_VERSION + 1):
        for statement in _STEPS.get(version, ()):
            await conn.execute(statement)
    for table in _TABLES:
        await conn.execute(table.create())
        present = {
            row[1] for row in await conn.execute_fetchall(f"PRAGMA table_info({table.name})")
        }
        for name, decl in table.columns:
            if name not in present:
                await conn.execute(f"ALTER TABLE {table.name} ADD COLUMN {name} {decl}")
    for statement in (*_INDEXES, *_FTS):
        await conn.execute(statement)
    for table_name in _FTS_TABLES:
        if table_name not in before:
            # A new index over old rows starts empty: fill it from the content table.
            await conn.execute(f"INSERT INTO {table_name}({table_name}) VALUES ('rebuild')")
    if found <= TRIGGER_INDEXED_VERSION:
        # Before version 2 every row was indexed as it was inserted (or by the rebuild just
        # above), so the watermark starts at the newest row.
        await conn.execute(
            "INSERT OR REPLACE INTO state_meta(key, value) "
            "SELECT ?, COALESCE(MAX(id), 0) FROM messages",
            (FTS_WATERMARK,),
        )
    await conn.execute("DELETE FROM schema_version")
    await conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))


# -- the message row layout ------------------------------------------------------------

MESSAGE_COLUMNS: tuple[str, ...] = (
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "message_json",
    "timestamp",
    "token_count",
    "origin_id",
)
"""Every column an insert writes, in order; ``INSERT ... SELECT`` re-clones use it too."""

_ROW_PLACEHOLDERS = f"({', '.join('?' for _ in MESSAGE_COLUMNS)})"
INSERT_MESSAGE = f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES {_ROW_PLACEHOLDERS}"

INSERT_ROWS_MAX = 1_000
"""Rows per :func:`insert_messages_sql` statement: 16,000 bound values, well under SQLite's
limit of 32,766."""


@functools.lru_cache(maxsize=64)
def insert_messages_sql(rows: int) -> str:
    """One ``INSERT`` of ``rows`` messages returning their ids: a batch in one statement
    and one hop to the connection's thread (``executemany`` then ``last_insert_rowid()``
    took three). Values: the rows' :meth:`EncodedMessage.params`, flattened."""
    values = ", ".join(_ROW_PLACEHOLDERS for _ in range(rows))
    return f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES {values} RETURNING id"


class EncodedMessage(NamedTuple):
    """A message split into the ``messages`` columns, ready to insert.

    A named tuple rather than a frozen dataclass: one is built per message appended, and a
    frozen dataclass's ``__init__`` (a ``object.__setattr__`` per field) cost about a fifth
    of the encoding.
    """

    role: str
    content: str | None
    tool_call_id: str | None
    tool_calls: str | None
    tool_name: str | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: str | None
    codex_reasoning_items: str | None
    codex_message_items: str | None
    message_json: str
    tool_call_count: int

    def params(
        self,
        session_id: str,
        timestamp: float,
        token_count: int | None = None,
        origin_id: int | None = None,
    ) -> tuple[Any, ...]:
        """Values for :data:`INSERT_MESSAGE`."""
        return (
            session_id,
            self.role,
            self.content,
            self.tool_call_id,
            self.tool_calls,
            self.tool_name,
            self.finish_reason,
            self.reasoning,
            self.reasoning_content,
            self.reasoning_details,
            self.codex_reasoning_items,
            self.codex_message_items,
            self.message_json,
            timestamp,
            token_count,
            origin_id,
        )


_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
"""``json.dumps(value, ensure_ascii=False, allow_nan=False)``, without building an encoder
per call (``dumps`` only reuses its cached one for default arguments)."""


def _json_column(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else _dumps(value)


def encode_message(message: Message) -> EncodedMessage:
    """Split ``message`` into columns; ``content`` holds its text, the part searched.

    Raises:
        SessionStoreError: the message holds a value JSON cannot represent.
    """
    data = message_to_dict(message)
    try:
        raw = _dumps(data)
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(
            f"cannot store {message.role} message: it holds a value JSON cannot represent ({exc})"
        ) from exc
    assistant = message if isinstance(message, AssistantMessage) else None
    tool = message if isinstance(message, ToolMessage) else None
    count = len(assistant.tool_calls) if assistant is not None else 0
    provider: Mapping[str, Any] = assistant.provider_data if assistant is not None else {}
    return EncodedMessage(
        role=message.role,
        content=None if message.content is None else text_of(message.content),
        tool_call_id=tool.tool_call_id if tool is not None else None,
        tool_calls=_dumps(data["tool_calls"]) if count else None,
        tool_name=tool.name if tool is not None else None,
        finish_reason=assistant.finish_reason if assistant is not None else None,
        reasoning=assistant.reasoning if assistant is not None else None,
        reasoning_content=_json_column(provider.get("reasoning_content")),
        reasoning_details=_json_column(provider.get("reasoning_details")),
        codex_reasoning_items=_json_column(provider.get("codex_reasoning_items")),
        codex_message_items=_json_column(provider.get("codex_message_items")),
        message_json=raw,
        tool_call_count=count,
    )


def _legacy_content(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_LEGACY_JSON_PREFIX):
        return json.loads(value[len(_LEGACY_JSON_PREFIX) :])
    return value


def _legacy_json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _legacy_dict(row: sqlite3.Row) -> dict[str, Any]:
    """The message dict of a row written without ``message_json`` (older databases)."""
    data: dict[str, Any] = {"role": row["role"], "content": _legacy_content(row["content"])}
    if row["role"] == "tool":
        data["tool_call_id"] = row["tool_call_id"] or ""
        if row["tool_name"] is not None:
            data["name"] = row["tool_name"]
    elif row["role"] == "assistant":
        optional = {
            "tool_calls": _legacy_json(row["tool_calls"]),
            "finish_reason": row["finish_reason"],
            "reasoning": row["reasoning"],
            "reasoning_content": row["reasoning_content"],
            "reasoning_details": _legacy_json(row["reasoning_details"]),
            "codex_reasoning_items": _legacy_json(row["codex_reasoning_items"]),
            "codex_message_items": _legacy_json(row["codex_message_items"]),
        }
        data.update({key: value for key, value in optional.items() if value is not None})
    return data


def decode_message(row: sqlite3.Row) -> Message:
    """The message stored in ``row``: from ``message_json``, else from the columns.

    Raises:
        SessionStoreError: the row holds no valid message.
    """
    try:
        raw = row["message_json"]
        data = json.loads(raw) if raw is not None else _legacy_dict(row)
        return message_from_dict(data)
    except (ValueError, TypeError, IndexError, TranscriptError) as exc:
        raise SessionStoreError(
            f"message row {row['id']} of session {row['session_id']!r} cannot be decoded: {exc}"
        ) from exc
