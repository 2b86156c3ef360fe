"""What only the SQLite store has: pragmas, schema versions, deferred full-text indexing,
locking, crashes.

The shared behaviour is proven by the contract suite; these tests look at the file itself
(through separate raw connections) and at how the store survives other writers.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from hermes_adapters.sessions import sqlite as sqlite_module
from hermes_adapters.sessions._sqlite_fts import CATCH_UP
from hermes_adapters.sessions._sqlite_schema import FTS_WATERMARK, SCHEMA_VERSION
from hermes_adapters.sessions.sqlite import SQLiteSessionStore
from hermes_core.errors import SessionStoreError, StoreClosed
from hermes_core.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@asynccontextmanager
async def raw(path: Path) -> AsyncIterator[aiosqlite.Connection]:
    """A plain connection to the file, in autocommit mode, as another process would have."""
    async with aiosqlite.connect(path, isolation_level=None) as db:
        yield db


async def scalar(db: aiosqlite.Connection, sql: str, params: tuple[Any, ...] = ()) -> Any:
    rows = list(await db.execute_fetchall(sql, params))
    return rows[0][0] if rows else None


async def columns(db: aiosqlite.Connection, table: str) -> set[str]:
    return {row[1] for row in await db.execute_fetchall(f"PRAGMA table_info({table})")}


async def watermark(db: aiosqlite.Connection) -> int:
    """The full-text watermark. (``COUNT(*)`` of an external-content FTS5 table counts the
    content table; ``<index>_docsize`` has one row per indexed row.)"""
    return int(
        await scalar(
            db, "SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = ?", (FTS_WATERMARK,)
        )
    )


async def catch_up(db: aiosqlite.Connection) -> None:
    """What a writer's catch-up does, from another connection (as another process would)."""
    await db.execute("BEGIN IMMEDIATE")
    bounds = {"low": await watermark(db), "high": await scalar(db, "SELECT MAX(id) FROM messages")}
    if bounds["high"] is not None and bounds["high"] > bounds["low"]:
        for statement in CATCH_UP:
            await db.execute(statement, bounds)
    await db.execute("COMMIT")


async def check_integrity(db: aiosqlite.Connection) -> None:
    """The b-trees are sound, and both full-text indexes, once the rows above the watermark
    are indexed, hold exactly what the messages table holds.

    FTS5's ``integrity-check`` with rank 1 compares an external-content index with its
    content table, so it fails while rows wait to be indexed; it would also fail after the
    catch-up if a ``'delete'`` had ever been issued for a row that was not indexed.
    """
    assert await scalar(db, "PRAGMA integrity_check") == "ok"
    for index in ("messages_fts", "messages_fts_trigram"):
        await db.execute(f"INSERT INTO {index}({index}) VALUES ('integrity-check')")
    await catch_up(db)
    for index in ("messages_fts", "messages_fts_trigram"):
        await db.execute(f"INSERT INTO {index}({index}, rank) VALUES ('integrity-check', 1)")


@pytest.fixture
def no_background_indexing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores built in the test index only when a search or ``index_pending`` asks."""
    monkeypatch.setattr(sqlite_module, "_INDEX_IDLE_DELAY", 3600.0)


@pytest.fixture
def eager_background_indexing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores built in the test start indexing 10 ms after their last write."""
    monkeypatch.setattr(sqlite_module, "_INDEX_IDLE_DELAY", 0.01)


async def wait_for_watermark(path: Path, wanted: int) -> None:
    """Poll the file (as another process would) until the watermark reaches ``wanted``."""
    with anyio.fail_after(20):
        while True:
            async with raw(path) as db:
                if await watermark(db) >= wanted:
                    return
            await anyio.sleep(0.01)


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


# -- opening, pragmas, schema -----------------------------------------------------------------


async def test_the_file_is_opened_lazily(db_path: Path) -> None:
    path = anyio.Path(db_path)
    store = SQLiteSessionStore(db_path)
    assert not await path.exists()
    await store.close()  # closing a never-opened store is fine
    assert not await path.exists()
    async with SQLiteSessionStore(db_path) as store:
        assert not await path.exists()
        await store.create_session("s", "cli")
        assert await path.exists()


async def test_wal_mode_and_schema_version_are_stored(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        async with raw(db_path) as db:
            assert await scalar(db, "PRAGMA journal_mode") == "wal"
            assert await scalar(db, "SELECT version FROM schema_version") == SCHEMA_VERSION
            assert await scalar(db, "SELECT COUNT(*) FROM schema_version") == 1
            names = {r[0] for r in await db.execute_fetchall("SELECT name FROM sqlite_master")}
    assert {
        "sessions",
        "messages",
        "system_prompts",
        "compression_locks",
        "state_meta",
        "schema_version",
        "messages_fts",
        "messages_fts_trigram",
        "messages_fts_delete",
        "messages_fts_update",
        "messages_fts_trigram_delete",
        "messages_fts_trigram_update",
        "idx_sessions_title",
    } <= names
    # Deferred indexing: nothing indexes on insert.
    assert not {"messages_fts_insert", "messages_fts_trigram_insert"} & names


async def test_delete_journal_mode_is_honoured(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path, journal_mode="delete") as store:
        await store.create_session("s", "cli")
        await store.append_message("s", user("rollback journal"))
        assert [h.session_id for h in await store.search_messages("journal")] == ["s"]
        async with raw(db_path) as db:
            assert await scalar(db, "PRAGMA journal_mode") == "delete"


async def test_bad_arguments_are_refused(db_path: Path) -> None:
    with pytest.raises(ValueError, match="journal_mode"):
        SQLiteSessionStore(db_path, journal_mode="memory")
    with pytest.raises(ValueError):
        SQLiteSessionStore(db_path, retry_budget_seconds=-1)


async def test_migration_from_an_older_version_adds_columns(db_path: Path) -> None:
    # A database from before versioning: fewer columns, no FTS, no schema_version table.
    async with raw(db_path) as db:
        await db.executescript(
            """
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL,
                model TEXT, message_count INTEGER NOT NULL DEFAULT 0,
                tool_call_count INTEGER NOT NULL DEFAULT 0
            );
            CREATE TABLE messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT,
                tool_name TEXT, timestamp REAL NOT NULL, reasoning TEXT,
                active INTEGER NOT NULL DEFAULT 1
            );
            INSERT INTO sessions VALUES ('old', 'cli', 1000.0, 'm0', 4, 1);
            INSERT INTO messages (session_id, role, content, timestamp)
                VALUES ('old', 'user', 'legacy question about walruses', 1001.0);
            INSERT INTO messages
                (session_id, role, content, tool_calls, reasoning, timestamp)
                VALUES ('old', 'assistant', NULL,
                        '[{"id": "c1", "type": "function",
                           "function": {"name": "read_file", "arguments": "{}"}}]',
                        'thinking it over', 1002.0);
            INSERT INTO messages (session_id, role, content, tool_call_id, tool_name, timestamp)
                VALUES ('old', 'tool', 'file body', 'c1', 'read_file', 1003.0);
            INSERT INTO messages (session_id, role, content, timestamp)
                VALUES ('old', 'user',
                        char(0) || 'json:[{"type": "text", "text": "describe this"}]', 1004.0);
            """
        )
    async with SQLiteSessionStore(db_path) as store:
        conversation = await store.get_conversation("old")
        assert conversation == [
            user("legacy question about walruses"),
            AssistantMessage(
                reasoning="thinking it over",
                tool_calls=(ToolCall(id="c1", name="read_file", arguments="{}"),),
            ),
            ToolMessage(tool_call_id="c1", content="file body", name="read_file"),
            UserMessage(content=({"type": "text", "text": "describe this"},)),
        ]
        info = await store.get_session("old")
        assert info is not None and (info.model, info.message_count) == ("m0", 4)
        assert [h.session_id for h in await store.search_messages("walruses")] == ["old"]
        assert [h.session_id for h in await store.search_messages("alrus")] == ["old"]
        new_id = await store.append_message("old", user("a new message"))
        assert new_id == 5
        async with raw(db_path) as db:
            assert await scalar(db, "SELECT version FROM schema_version") == SCHEMA_VERSION
            assert {"message_json", "origin_id", "compacted", "reasoning_details"} <= await columns(
                db, "messages"
            )
            assert {"system_prompt_hash", "title", "origin_json", "input_tokens"} <= await columns(
                db, "sessions"
            )
            await check_integrity(db)


_V1_TRIGGERS = """
DROP TRIGGER messages_fts_delete; DROP TRIGGER messages_fts_update;
DROP TRIGGER messages_fts_trigram_delete; DROP TRIGGER messages_fts_trigram_update;
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
  INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
  VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
  VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls); END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls ON messages
  WHEN old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
  VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
  INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
  VALUES (new.id, new.content, new.tool_name, new.tool_calls); END;
CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
  WHEN new.role != 'tool' BEGIN
  INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content); END;
CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages
  WHEN old.role != 'tool' BEGIN
  INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
  VALUES ('delete', old.id, old.content); END;
CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, role ON messages
  WHEN old.content IS NOT new.content OR old.role IS NOT new.role BEGIN
  INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
  SELECT 'delete', old.id, old.content WHERE old.role != 'tool';
  INSERT INTO messages_fts_trigram(rowid, content)
  SELECT new.id, new.content WHERE new.role != 'tool'; END;
DELETE FROM state_meta WHERE key = 'fts_indexed_through';
UPDATE schema_version SET version = 1;
"""
"""Version 1 had the same tables, and FTS5 maintained by these triggers on every insert."""


async def _version_1_file(db_path: Path, *, last_reply: str) -> None:
    """A database as version 1 left it: triggers indexing on insert, three rows (a user
    message, a tool result, then an assistant reply saying ``last_reply``)."""
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("old", "cli")
    async with raw(db_path) as db:
        await db.executescript(_V1_TRIGGERS)
        await db.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('old', 'user', 'walruses indexed by the old trigger', 1.0)"
        )
        await db.execute(
            "INSERT INTO messages (session_id, role, content, tool_name, tool_call_id, "
            "timestamp) VALUES ('old', 'tool', 'narwhal output', 'grep', 'c1', 2.0)"
        )
        await db.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('old', 'assistant', ?, 3.0)",
            (last_reply,),
        )


@pytest.mark.usefixtures("no_background_indexing")
async def test_migration_from_version_1_keeps_every_row_searchable(db_path: Path) -> None:
    await _version_1_file(db_path, last_reply="a doomed reply")
    async with raw(db_path) as db:
        assert await scalar(db, "SELECT version FROM schema_version") == 1
        await check_integrity_v1(db)
    async with SQLiteSessionStore(db_path) as store:
        assert [h.id for h in await store.search_messages("walruses")] == [1]
        assert [h.id for h in await store.search_messages("alrus")] == [1]  # trigram
        assert [h.role for h in await store.search_messages("narwhal")] == ["tool"]
        async with raw(db_path) as db:
            assert await scalar(db, "SELECT version FROM schema_version") == SCHEMA_VERSION
            names = {r[0] for r in await db.execute_fetchall("SELECT name FROM sqlite_master")}
            assert not {"messages_fts_insert", "messages_fts_trigram_insert"} & names
            assert await watermark(db) == 3  # the old triggers had indexed every row
            await db.execute("DELETE FROM messages WHERE id = 3")  # an indexed row goes
            await check_integrity(db)
        new_id = await store.append_message("old", user("walruses after the upgrade"))
        assert [h.id for h in await store.search_messages("walruses")] == [new_id, 1]
        assert await store.search_messages("doomed") == []
    async with SQLiteSessionStore(db_path, read_only=True) as reader:
        assert len(await reader.search_messages("walruses")) == 2
    async with raw(db_path) as db:
        await check_integrity(db)


async def check_integrity_v1(db: aiosqlite.Connection) -> None:
    """A version-1 file: every row indexed as inserted."""
    for index in ("messages_fts", "messages_fts_trigram"):
        await db.execute(f"INSERT INTO {index}({index}, rank) VALUES ('integrity-check', 1)")


@pytest.mark.usefixtures("no_background_indexing")
async def test_a_read_only_store_reads_a_version_1_file_without_changing_it(
    db_path: Path,
) -> None:
    """Right after an upgrade, ``hermes sessions list/search`` (read-only) still work."""
    await _version_1_file(db_path, last_reply="walruses again")
    before = await anyio.Path(db_path).read_bytes()
    async with SQLiteSessionStore(db_path, read_only=True) as reader:
        assert [h.id for h in await reader.search_messages("walruses")] == [3, 1]
        assert [h.id for h in await reader.search_messages("alrus", sort="oldest")] == [1, 3]
        assert [h.role for h in await reader.search_messages("narwhal")] == ["tool"]
        assert [m.content for m in await reader.get_conversation("old")] == [
            "walruses indexed by the old trigger",
            "narwhal output",
            "walruses again",
        ]
        assert [s.id for s in await reader.search_sessions()] == ["old"]
    assert await anyio.Path(db_path).read_bytes() == before
    async with raw(db_path) as db:
        assert await scalar(db, "SELECT version FROM schema_version") == 1
        assert (
            await scalar(db, "SELECT COUNT(*) FROM state_meta WHERE key = ?", (FTS_WATERMARK,)) == 0
        )
        await check_integrity_v1(db)


async def test_a_newer_schema_is_refused(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
    async with raw(db_path) as db:
        await db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    async with SQLiteSessionStore(db_path) as store:
        with pytest.raises(SessionStoreError, match="newer"):
            await store.get_session("s")
    async with SQLiteSessionStore(db_path, read_only=True) as reader:
        with pytest.raises(SessionStoreError, match="newer"):
            await reader.get_session("s")


async def test_read_only_needs_an_existing_current_database(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path, read_only=True) as reader:
        with pytest.raises(SessionStoreError):
            await reader.get_session("s")
    assert not await anyio.Path(db_path).exists()
    async with raw(db_path) as db:
        await db.execute("CREATE TABLE unrelated (x)")
    async with SQLiteSessionStore(db_path, read_only=True) as reader:
        with pytest.raises(SessionStoreError, match="no Hermes session schema"):
            await reader.search_sessions()


async def test_async_with_and_idempotent_close(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
    await store.close()
    with pytest.raises(StoreClosed):
        await store.get_session("s")
    with pytest.raises(StoreClosed):
        async with store:
            pass


# -- full-text search ---------------------------------------------------------------------


@pytest.mark.usefixtures("no_background_indexing")
@pytest.mark.parametrize("indexed", [False, True], ids=["pending", "indexed"])
async def test_fts_stays_in_sync_on_update_and_delete(db_path: Path, indexed: bool) -> None:
    """Rows changed or deleted behind the store's back, before or after they are indexed."""
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        first, second, tool = await store.append_messages(
            "s",
            [
                user("the original wording"),
                AssistantMessage(content="another reply"),
                ToolMessage(tool_call_id="c", content="tool output", name="grep"),
            ],
        )
        if indexed:
            assert await store.index_pending() == 3
        async with raw(db_path) as db:
            assert await watermark(db) == (tool if indexed else 0)
            await db.execute(
                "UPDATE messages SET content = 'replacement phrasing' WHERE id = ?", (first,)
            )
            await db.execute("DELETE FROM messages WHERE id = ?", (second,))
            await db.execute("UPDATE messages SET tool_name = 'ripgrep' WHERE id = ?", (tool,))
            await check_integrity(db)
        assert await store.search_messages("original") == []
        assert [h.id for h in await store.search_messages("replacement")] == [first]
        assert [h.id for h in await store.search_messages("placemen")] == [first]  # trigram
        assert await store.search_messages("another") == []
        assert await store.search_messages("grep") == []
        assert [h.id for h in await store.search_messages("ripgrep")] == [tool]

        await store.archive_and_compact("s", [user("compacted summary")])
        await store.replace_messages("s", [user("brand new transcript")])
        assert await store.search_messages("replacement") == []
        await store.create_session("t", "cli")
        await store.append_message("t", user("survivor text"))
        await store.delete_session("s")
        assert await store.search_messages("transcript") == []
        async with raw(db_path) as db:
            await check_integrity(db)
            assert await scalar(db, "SELECT COUNT(*) FROM messages_fts") == 1


async def test_trigram_finds_fragments_and_cjk_but_not_tool_rows(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        said, cjk, _ = await store.append_messages(
            "s",
            [
                user("measured the throughput"),
                user("日本語のテキストです"),
                ToolMessage(tool_call_id="c", content="output of the tool", name="t"),
            ],
        )
        [hit] = await store.search_messages("ughpu")
        assert hit.id == said and ">>>ughpu<<<" in hit.snippet
        assert [h.id for h in await store.search_messages("テキスト")] == [cjk]
        assert [h.role for h in await store.search_messages("output")] == ["tool"]


@pytest.mark.usefixtures("no_background_indexing")
@pytest.mark.parametrize("indexed", [False, True], ids=["catch-up fails", "match fails"])
async def test_a_failing_match_raises_instead_of_finding_nothing(
    db_path: Path, indexed: bool
) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        await store.append_message("s", user("findable words"))
        if indexed:
            assert await store.index_pending() == 1
        async with raw(db_path) as db:
            await db.executescript(
                "DROP TRIGGER messages_fts_delete; DROP TRIGGER messages_fts_update; "
                "DROP TABLE messages_fts;"
            )
        with pytest.raises(SessionStoreError, match="search_messages"):
            await store.search_messages("findable")


# -- deferred full-text indexing ------------------------------------------------------------


@pytest.mark.usefixtures("no_background_indexing")
async def test_appends_leave_rows_pending_and_index_pending_moves_the_watermark(
    db_path: Path,
) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        ids = await store.append_messages(
            "s",
            [
                user("waiting for the index"),
                AssistantMessage(content="so am I"),
                ToolMessage(tool_call_id="c", content="tool text", name="t"),
            ],
        )
        async with raw(db_path) as db:
            assert await watermark(db) == 0
            assert await scalar(db, "SELECT COUNT(*) FROM messages_fts_docsize") == 0
        assert await store.index_pending() == 3
        assert await store.index_pending() == 0
        async with raw(db_path) as db:
            assert await watermark(db) == ids[-1]
            assert await scalar(db, "SELECT COUNT(*) FROM messages_fts_docsize") == 3
            assert (
                await scalar(db, "SELECT COUNT(*) FROM messages_fts_trigram_docsize") == 2
            )  # no tool
            await check_integrity(db)


@pytest.mark.usefixtures("no_background_indexing")
async def test_index_pending_works_in_chunks(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "_INDEX_CHUNK", 4)
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        ids = await store.append_messages("s", [user(f"row {i}") for i in range(10)])
        conn = await store._connection()
        statements: list[str] = []
        await conn.set_trace_callback(statements.append)
        assert await store.index_pending() == 10
        await conn.set_trace_callback(None)
        assert sum(s.startswith("BEGIN IMMEDIATE") for s in statements) == 3
        assert [h.id for h in await store.search_messages("row", sort="oldest")] == ids


@pytest.mark.usefixtures("no_background_indexing")
async def test_a_search_sees_a_message_appended_a_moment_ago(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        [new_id] = await store.append_messages("s", [user("fresh off the press")])
        [hit] = await store.search_messages("press")
        assert hit.id == new_id
        assert [h.id for h in await store.search_messages("resh")] == [new_id]  # trigram
        async with raw(db_path) as db:
            assert await watermark(db) == new_id  # the search caught up first


@pytest.mark.usefixtures("no_background_indexing")
async def test_deleting_pending_and_indexed_rows_keeps_the_indexes_sound(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        kept_old, gone_old = await store.append_messages(
            "s", [user("indexed keeper"), user("indexed goner")]
        )
        gone_tool = await store.append_message(
            "s", ToolMessage(tool_call_id="c", content="indexed tool goner", name="t")
        )
        await store.index_pending()
        kept_new, gone_new = await store.append_messages(
            "s", [user("pending keeper"), user("pending goner")]
        )
        async with raw(db_path) as db:
            await db.execute(
                "DELETE FROM messages WHERE id IN (?, ?, ?)", (gone_old, gone_tool, gone_new)
            )
            assert await watermark(db) == gone_tool
            await check_integrity(db)
        assert [h.id for h in await store.search_messages("keeper")] == [kept_new, kept_old]
        assert await store.search_messages("goner") == []
        # Through the store: replace_messages deletes indexed and pending rows alike.
        await store.index_pending()
        await store.append_message("s", user("pending again"))
        await store.replace_messages("s", [user("only this")])
        assert await store.search_messages("keeper") == []
        assert await store.search_messages("again") == []
        async with raw(db_path) as db:
            await check_integrity(db)


@pytest.mark.usefixtures("no_background_indexing")
async def test_updating_indexed_rows_reindexes_them(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        said, called = await store.append_messages(
            "s", [user("first draft"), AssistantMessage(content="chatty reply")]
        )
        await store.index_pending()
        async with raw(db_path) as db:
            await db.execute("UPDATE messages SET content = 'final version' WHERE id = ?", (said,))
            # A role change moves a row out of the trigram index (tool rows are not in it).
            await db.execute("UPDATE messages SET role = 'tool' WHERE id = ?", (called,))
            await check_integrity(db)
        assert await store.search_messages("draft") == []
        assert [h.id for h in await store.search_messages("final")] == [said]
        assert [h.id for h in await store.search_messages("inal versi")] == [said]
        assert await store.search_messages("atty repl") == []  # no longer in trigram
        assert [h.id for h in await store.search_messages("chatty")] == [called]


@pytest.mark.usefixtures("eager_background_indexing")
async def test_the_background_indexer_catches_up_without_a_search(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        ids = await store.append_messages("s", [user(f"quiet {i}") for i in range(50)])
        last = await store.append_message("s", user("the last word"))
        await wait_for_watermark(db_path, last)
        task = store._indexer._task
        if task is not None:  # it ends on its own once nothing is pending
            with anyio.fail_after(5):
                await asyncio.wait({task})
        assert not store._indexer.running
        async with raw(db_path) as db:
            await check_integrity(db)
            assert await scalar(db, "SELECT COUNT(*) FROM messages_fts_docsize") == len(ids) + 1


@pytest.mark.usefixtures("no_background_indexing")
async def test_a_writable_store_opening_a_backlog_indexes_it(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")
        last = (await store.append_messages("s", [user(f"left {i}") for i in range(20)]))[-1]
    monkeypatch.setattr(sqlite_module, "_INDEX_IDLE_DELAY", 0.01)
    async with SQLiteSessionStore(db_path) as store:
        await store.get_session("s")  # opening finds the backlog and wakes the indexer
        await wait_for_watermark(db_path, last)


async def test_close_during_background_indexing_leaves_no_task_and_a_sound_index(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "_INDEX_CHUNK", 100)
    monkeypatch.setattr(sqlite_module, "_INDEX_IDLE_DELAY", 0.01)
    store = SQLiteSessionStore(db_path)
    chunks_started = 0
    second_chunk = anyio.Event()
    index_chunk = store._indexer._index_chunk

    async def observed_chunk() -> int:
        nonlocal chunks_started
        chunks_started += 1
        if chunks_started == 2:
            second_chunk.set()
        return await index_chunk()

    store._indexer._index_chunk = observed_chunk
    await store.create_session("s", "cli")
    ids = await store.append_messages("s", [user(f"row {i}") for i in range(1_000)])
    with anyio.fail_after(10):
        await second_chunk.wait()  # the first chunk is committed, the second under way
    await store.close()
    assert not store._indexer.running
    async with raw(db_path) as db:
        assert await scalar(db, "PRAGMA integrity_check") == "ok"
        reached = await watermark(db)
        assert 0 < reached < ids[-1]  # closed mid-way: the rest waits, nothing half-done
        assert await scalar(db, "SELECT COUNT(*) FROM messages_fts_docsize") == reached
        await check_integrity(db)
    async with SQLiteSessionStore(db_path) as again:
        assert len(await again.search_messages("row", limit=10_000)) == len(ids)


@pytest.mark.usefixtures("no_background_indexing")
async def test_a_store_closes_after_the_loop_of_its_indexer_was_closed(db_path: Path) -> None:
    """A loop closed without cancelling its tasks strands the indexer's task on it; closing
    the store from another loop forgets that task instead of failing on the dead loop.

    (``asyncio.run`` cancels every task before it closes its loop, so it cannot strand one:
    the first loop is run by hand, in a worker thread, and closed as it is.)
    """
    store = SQLiteSessionStore(db_path)

    async def append() -> None:
        await store.create_session("s", "cli")
        await store.append_message("s", user("written on the first loop"))
        assert store._indexer.running  # waiting for a quiet period that never comes

    def on_a_loop_closed_without_cancelling() -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(append())
        finally:
            loop.close()

    await anyio.to_thread.run_sync(on_a_loop_closed_without_cancelling)
    await store.close()
    assert store._conn is None and not store._indexer.running
    # The forgotten task is still pending on its dead loop; asyncio logs "Task was destroyed
    # but it is pending!" when it is collected: let that happen here, not in a later test.
    gc.collect()
    async with SQLiteSessionStore(db_path) as again:
        assert [h.session_id for h in await again.search_messages("first loop")] == ["s"]


async def test_two_writers_on_one_file_append_and_search(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as first:
        await first.create_session("a", "cli")
        await first.create_session("b", "cli")
    one, two = SQLiteSessionStore(db_path), SQLiteSessionStore(db_path)
    found: dict[str, set[int]] = {"a": set(), "b": set()}

    async def write(store: SQLiteSessionStore, sid: str) -> None:
        for i in range(15):
            ids = await store.append_messages(sid, [user(f"shared topic {sid} {i}"), user("x")])
            # Read-your-writes whoever else is writing (and indexing) the file.
            hits = await store.search_messages(f"topic {sid}", limit=100)
            assert ids[0] in {h.id for h in hits}
            found[sid] |= {h.id for h in hits}

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write, one, "a")
            tg.start_soon(write, two, "b")
        everything = await one.search_messages("shared", limit=100)
        assert len(everything) == 30
        assert [h.id for h in everything] == sorted((h.id for h in everything), reverse=True)
        assert {h.id for h in everything} == found["a"] | found["b"]
    finally:
        await one.close()
        await two.close()
    async with raw(db_path) as db:
        await check_integrity(db)


@pytest.mark.usefixtures("no_background_indexing")
async def test_a_read_only_store_searches_rows_the_writer_has_not_indexed(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as writer:
        await writer.create_session("s", "cli")
        old = await writer.append_messages("s", [user(f"alpha old {i}") for i in range(3)])
        await writer.index_pending()
        pending = await writer.append_messages("s", [user(f"alpha new {i}") for i in range(3)])
        async with SQLiteSessionStore(db_path, read_only=True) as reader:
            hits = await reader.search_messages("alpha")
            assert [h.id for h in hits] == [*reversed(old + pending)]
            assert [h.id for h in await reader.search_messages("alpha", sort="oldest")] == [
                *old,
                *pending,
            ]
            # Pages cross from the tail to the main index like one index.
            assert [h.id for h in await reader.search_messages("alpha", limit=2, offset=2)] == [
                pending[0],
                old[2],
            ]
            [hit] = await reader.search_messages("new 1")
            assert hit.id == pending[1] and ">>>new<<<" in hit.snippet
            assert [c["content"] for c in hit.context] == [
                "alpha new 0",
                "alpha new 1",
                "alpha new 2",
            ]
            assert [h.id for h in await reader.search_messages('"lpha ne"')] == [*reversed(pending)]

            more = await writer.append_message("s", user("alpha newest"))
            assert (await reader.search_messages("alpha"))[0].id == more  # the tail grows
            await writer.index_pending()
            hits = await reader.search_messages("alpha")  # the tail is trimmed, not doubled
            assert [h.id for h in hits] == [more, *reversed(old + pending)]
            async with raw(db_path) as db:
                assert await watermark(db) == more  # the reader indexed nothing in the file


# -- locking and durability ---------------------------------------------------------------


async def test_a_held_write_lock_fails_the_write_after_the_budget(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path, busy_timeout_ms=20, retry_budget_seconds=0.3) as store:
        await store.create_session("s", "cli")
        await store.append_message("s", user("before"))
        async with raw(db_path) as blocker:
            await blocker.execute("BEGIN IMMEDIATE")
            started = time.monotonic()
            with pytest.raises(SessionStoreError, match="locked") as caught:
                await store.append_message("s", user("lost"))
            elapsed = time.monotonic() - started
            assert isinstance(caught.value.__cause__, aiosqlite.OperationalError)
            assert 0.25 <= elapsed < 3.0
            # WAL readers do not wait for the writer.
            info = await store.get_session("s")
            assert info is not None and info.message_count == 1
            await blocker.execute("ROLLBACK")
        await store.append_message("s", user("after"))
        assert [m.content for m in await store.get_conversation("s")] == ["before", "after"]


@pytest.mark.usefixtures("no_background_indexing")
async def test_a_search_with_pending_rows_does_not_wait_for_another_writer(db_path: Path) -> None:
    """With rows pending, a writable store's search would catch up first, which needs the
    write lock; while another connection holds it, the search reads instead (snapshot and
    temporary index of the pending rows) rather than waiting out the retry budget."""
    async with SQLiteSessionStore(db_path) as store:  # the default, 20 s, budget
        await store.create_session("s", "cli")
        old = await store.append_message("s", user("lock test indexed"))
        await store.index_pending()
        pending = await store.append_messages(
            "s", [user(f"lock test pending {i}") for i in range(3)]
        )
        async with raw(db_path) as blocker:
            await blocker.execute("BEGIN IMMEDIATE")  # a bulk job, a compaction, a catch-up...
            with anyio.fail_after(15):  # only so a regression cannot hang the suite
                hits = await store.search_messages("lock test")
                assert [h.id for h in hits] == [*reversed(pending), old]
                [hit] = await store.search_messages("pending 1")
                assert hit.id == pending[1] and ">>>pending<<<" in hit.snippet
                assert [
                    h.id for h in await store.search_messages("ending", sort="oldest")
                ] == pending
            assert blocker.in_transaction  # every search above returned while it was held
            assert await watermark(blocker) == old  # so none of them could catch up
            await blocker.execute("ROLLBACK")
        assert len(await store.search_messages("lock test")) == 4
        async with raw(db_path) as db:
            assert await watermark(db) == pending[-1]  # the lock is free: caught up
            await check_integrity(db)


async def test_a_briefly_held_lock_is_waited_out(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path, busy_timeout_ms=20, retry_budget_seconds=10) as store:
        await store.create_session("s", "cli")
        async with raw(db_path) as blocker:
            await blocker.execute("BEGIN IMMEDIATE")

            async def release_soon() -> None:
                await anyio.sleep(0.3)
                await blocker.execute("ROLLBACK")

            async with anyio.create_task_group() as tg:
                tg.start_soon(release_soon)
                await store.append_message("s", user("patient"))
        assert [m.content for m in await store.get_conversation("s")] == ["patient"]


async def test_twenty_concurrent_writers_lose_no_message(db_path: Path) -> None:
    writers, per_writer = 20, 10
    async with SQLiteSessionStore(db_path) as first:
        await first.create_session("shared", "cli")
    stores = [SQLiteSessionStore(db_path) for _ in range(writers)]

    async def write(store: SQLiteSessionStore, n: int) -> None:
        await store.create_session(f"own{n}", "cli")
        for i in range(per_writer):
            await store.append_message("shared", user(f"writer {n} message {i}"))
            await store.append_message(f"own{n}", user(f"mine {i}"))

    try:
        async with anyio.create_task_group() as tg:
            for n, store in enumerate(stores):
                tg.start_soon(write, store, n)
    finally:
        for store in stores:
            await store.close()

    async with SQLiteSessionStore(db_path, read_only=True) as reader:
        shared = await reader.get_conversation("shared")
        assert len(shared) == writers * per_writer
        for n in range(writers):
            mine = [m.content for m in shared if str(m.content).startswith(f"writer {n} ")]
            assert mine == [f"writer {n} message {i}" for i in range(per_writer)]
            own = await reader.get_conversation(f"own{n}")
            assert [m.content for m in own] == [f"mine {i}" for i in range(per_writer)]
        info = await reader.get_session("shared")
        assert info is not None and info.message_count == writers * per_writer
    async with raw(db_path) as db:
        await check_integrity(db)


@pytest.mark.usefixtures("no_background_indexing")
async def test_a_passive_checkpoint_runs_every_fifty_writes(db_path: Path) -> None:
    async with SQLiteSessionStore(db_path) as store:
        await store.create_session("s", "cli")  # write 1
        conn = await store._connection()
        statements: list[str] = []
        await conn.set_trace_callback(statements.append)
        for i in range(99):  # writes 2..100
            await store.append_message("s", user(str(i)))
        checkpoints = sum("wal_checkpoint(PASSIVE)" in s for s in statements)
    assert checkpoints == 2


_CHILD = """
import sys

import anyio

from hermes_adapters.sessions.sqlite import SQLiteSessionStore
from hermes_core.messages import UserMessage


async def main(path: str) -> None:
    async with SQLiteSessionStore(path) as store:
        await store.create_session("victim", "cli")
        i = 0
        while True:
            ids = await store.append_messages(
                "victim",
                [UserMessage(content=f"first {i} " + "x" * 4000), UserMessage(content=f"second {i}")],
            )
            print(*ids, flush=True)  # only after the transaction committed
            i += 1


anyio.run(main, sys.argv[1])
"""


async def test_a_killed_writer_leaves_every_committed_message(db_path: Path) -> None:
    committed: list[int] = []
    async with await anyio.open_process(
        [sys.executable, "-c", _CHILD, str(db_path)], stdout=subprocess.PIPE
    ) as process:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(20):
            while len(committed) < 80:
                line = await lines.receive_until(b"\n", 4096)
                committed += [int(token) for token in line.split()]
        process.kill()  # SIGKILL: no cleanup, most likely in the middle of a transaction
        await process.wait()
    assert process.returncode == -signal.SIGKILL

    async with raw(db_path) as db:
        await check_integrity(db)
    async with SQLiteSessionStore(db_path) as store:
        stored = await store.get_messages("victim")
        ids = {m.id for m in stored}
        assert set(committed) <= ids
        assert len(stored) % 2 == 0  # batches are all or nothing
        info = await store.get_session("victim")
        assert info is not None and info.message_count == len(stored)
        await store.append_message("victim", user("life goes on"))


async def test_a_cancelled_turn_resumes_from_sqlite_in_a_new_process_view(db_path: Path) -> None:
    """Cancel mid-tool, then a fresh store and agent on the same file resume cleanly."""

    from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
    from hermes_core import Agent, FunctionTool, ToolSpec
    from hermes_core.invariants import CANCELLED_RESULT, validate

    started = anyio.Event()

    async def hang(args: dict[str, Any], ctx: Any) -> str:
        started.set()
        await anyio.sleep(60)
        return "never"

    tool = FunctionTool(ToolSpec(name="hang", description="hangs"), hang)
    async with SQLiteSessionStore(db_path) as store:
        agent = Agent(
            ScriptedModel([tool_calls(call("hang", id="h1"))]),
            [tool],
            sessions=store,
            session_id="s1",
        )
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(agent.run_conversation, "start")
                with anyio.fail_after(10):
                    await started.wait()
                scope.cancel()
    async with SQLiteSessionStore(db_path) as reopened:
        stored = await reopened.get_conversation("s1")
        assert [m.role for m in stored] == ["user", "assistant", "tool"]
        assert stored[-1].content == CANCELLED_RESULT
        model = ScriptedModel([reply("resumed fine")])
        resumed = Agent(model, [tool], sessions=reopened, session_id="s1")
        result = await resumed.run_conversation("again")
        assert result["final_response"] == "resumed fine"
        assert validate(model.last_request.messages) == []
        assert [m.role for m in await reopened.get_conversation("s1")][-2:] == [
            "user",
            "assistant",
        ]


@pytest.mark.parametrize(("setting", "level"), [("full", 2), ("normal", 1), ("NORMAL", 1)])
async def test_synchronous_setting_reaches_the_connection(
    db_path: Path, setting: str, level: int
) -> None:
    async with SQLiteSessionStore(db_path, synchronous=setting) as store:
        await store.create_session("s", "cli")
        conn = await store._connection()
        async with conn.execute("PRAGMA synchronous") as cursor:
            row = await cursor.fetchone()
        assert row is not None and row[0] == level


async def test_unknown_synchronous_setting_is_refused(db_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteSessionStore(db_path, synchronous="off")
