"""What only the PostgreSQL store has: schema work under an advisory lock, read-only
transactions, pool options, many writers, a killed writer and a cancelled agent.

The shared behaviour is proven by the contract suite. Each test here gets a database of
its own (``fresh_database``: one ``CREATE DATABASE``) on a server started once for the
module, and looks at it through plain asyncpg connections, as another process would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import asyncpg
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_adapters.sessions._pg_schema import SCHEMA_LOCK_KEY, SCHEMA_VERSION
from hermes_adapters.sessions.postgres import PostgresSessionStore
from hermes_core import Agent, FunctionTool, ToolSpec
from hermes_core.errors import ReadOnlyStore, SessionStoreError, StoreClosed
from hermes_core.invariants import CANCELLED_RESULT, validate
from hermes_core.messages import AssistantMessage, ToolMessage, UserMessage
from pg_server import fresh_database, running_postgres

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with running_postgres() as url:
        yield url


@pytest.fixture
async def db_url(postgres_url: str) -> str:
    """A database nobody else uses: no schema until a store creates it."""
    return await fresh_database(postgres_url)


@asynccontextmanager
async def raw(url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain asyncpg connection, as another process would have."""
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        yield conn
    finally:
        await conn.close()


def user(content: str) -> UserMessage:
    return UserMessage(content=content)


async def scalar(conn: AsyncConnection, sql: str) -> Any:
    return await conn.scalar(text(sql))


async def eventually(check: Callable[[], Awaitable[object]]) -> None:
    """Poll ``check`` until it is truthy: another backend's state is only seen by asking."""
    with anyio.fail_after(20):
        while True:
            if await check():
                return
            await anyio.sleep(0.02)


# -- opening and the schema ---------------------------------------------------------------


async def test_nothing_connects_until_first_use(db_url: str) -> None:
    store = PostgresSessionStore(db_url)
    assert store.engine is None
    await store.close()  # closing a never-used store is fine
    async with raw(db_url) as db:
        assert await db.fetchval("SELECT to_regclass('sessions')") is None
    async with PostgresSessionStore(db_url) as store:
        await store.create_session("s", "cli")
        assert store.engine is not None
    async with raw(db_url) as db:
        assert await db.fetchval("SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION
        assert await db.fetchval("SELECT COUNT(*) FROM schema_version") == 1
        assert await db.fetchval("SELECT to_regclass('idx_messages_search')") is not None
        assert await db.fetchval("SELECT to_regclass('idx_messages_content_trgm')") is not None
        kind = await db.fetchval(
            "SELECT attgenerated FROM pg_attribute "
            "WHERE attrelid = 'messages'::regclass AND attname = 'search_vector'"
        )
        assert kind == b"s"  # a stored generated column


async def test_concurrent_first_use_creates_the_schema_once(db_url: str) -> None:
    stores = [PostgresSessionStore(db_url) for _ in range(8)]
    try:
        async with anyio.create_task_group() as tg:
            for n, store in enumerate(stores):
                tg.start_soon(store.create_session, f"s{n}", "cli")
    finally:
        for store in stores:
            await store.close()
    async with raw(db_url) as db:
        assert await db.fetchval("SELECT COUNT(*) FROM sessions") == 8
        assert await db.fetchval("SELECT COUNT(*) FROM schema_version") == 1


async def test_schema_work_waits_for_the_advisory_lock(db_url: str) -> None:
    created = anyio.Event()
    store = PostgresSessionStore(db_url)

    async def first_use() -> None:
        await store.create_session("s", "cli")
        created.set()

    waiting = (
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND classid::bigint = $1 AND objid::bigint = $2"
    )
    try:
        async with raw(db_url) as holder, anyio.create_task_group() as tg:
            await holder.execute("SELECT pg_advisory_lock($1)", SCHEMA_LOCK_KEY)
            tg.start_soon(first_use)
            await eventually(
                lambda: holder.fetchval(
                    waiting, SCHEMA_LOCK_KEY >> 32, SCHEMA_LOCK_KEY & 0xFFFFFFFF
                )
            )
            assert not created.is_set()
            assert await holder.fetchval("SELECT to_regclass('sessions')") is None
            await holder.execute("SELECT pg_advisory_unlock($1)", SCHEMA_LOCK_KEY)
            with anyio.fail_after(20):
                await created.wait()
    finally:
        await store.close()


async def test_an_older_layout_is_reconciled_and_keeps_its_rows(db_url: str) -> None:
    async with raw(db_url) as db:
        await db.execute(
            "CREATE TABLE sessions (id text PRIMARY KEY, source text NOT NULL, "
            "started_at double precision NOT NULL, model text)"
        )
        await db.execute("INSERT INTO sessions VALUES ('old', 'cli', 100.0, 'm0')")
    async with PostgresSessionStore(db_url) as store:
        info = await store.get_session("old")
        assert info is not None and (info.model, info.started_at, info.title) == ("m0", 100.0, None)
        await store.update_metadata("old", title="kept")
        await store.append_message("old", user("still here"))
        assert [h.session_id for h in await store.search_messages("still")] == ["old"]


async def test_without_pg_trgm_the_store_still_works(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"limited_{db_url.rpartition('/')[2]}"
    async with raw(db_url) as db:  # may create tables, but not extensions (no CREATE on db)
        await db.execute(f'CREATE ROLE "{role}" LOGIN')
        await db.execute(f'GRANT USAGE, CREATE ON SCHEMA public TO "{role}"')
    limited = make_url(db_url).set(username=role).render_as_string(hide_password=False)
    async with PostgresSessionStore(limited) as store:
        await store.create_session("s", "cli")
        await store.append_message("s", user("a multiagentsystem"))
        [hit] = await store.search_messages("agentsys")  # ILIKE without the trigram index
        assert ">>>agentsys<<<" in hit.snippet
    assert "pg_trgm is not available" in caplog.text
    async with raw(db_url) as db:
        assert await db.fetchval("SELECT to_regclass('idx_messages_content_trgm')") is None
        assert await db.fetchval("SELECT to_regclass('idx_messages_search')") is not None


async def test_a_newer_schema_is_refused(db_url: str) -> None:
    async with PostgresSessionStore(db_url) as store:
        await store.create_session("s", "cli")
    async with raw(db_url) as db:
        await db.execute("UPDATE schema_version SET version = $1", SCHEMA_VERSION + 1)
    for read_only in (False, True):
        async with PostgresSessionStore(db_url, read_only=read_only) as store:
            with pytest.raises(SessionStoreError, match="newer than this Hermes"):
                await store.get_session("s")


async def test_a_schema_change_by_another_process_is_survived(db_url: str) -> None:
    async with PostgresSessionStore(db_url, pool_size=1, max_overflow=0) as store:
        await store.create_session("s", "cli")
        assert await store.get_session("s") is not None  # its plan is now cached
        async with raw(db_url) as db:
            await db.execute("ALTER TABLE sessions ADD COLUMN added_elsewhere text")
        info = await store.get_session("s")  # the stale statement is re-prepared
        assert info is not None and info.id == "s"


# -- read-only ------------------------------------------------------------------------------


async def test_read_only_never_creates_the_schema(db_url: str) -> None:
    async with PostgresSessionStore(db_url, read_only=True) as reader:
        with pytest.raises(SessionStoreError, match="no Hermes session schema"):
            await reader.get_session("s")
        with pytest.raises(ReadOnlyStore):
            await reader.create_session("s", "cli")
    async with raw(db_url) as db:
        assert await db.fetchval("SELECT to_regclass('sessions')") is None


async def test_read_only_store_runs_read_only_transactions(db_url: str) -> None:
    async with PostgresSessionStore(db_url) as writer:
        await writer.create_session("s", "cli")
        # The writer's writes are READ COMMITTED; its reads see one READ ONLY snapshot.
        assert (
            await writer._write("probe", lambda c: scalar(c, "SHOW transaction_read_only")) == "off"
        )
        assert (
            await writer._read("probe", lambda c: scalar(c, "SHOW transaction_read_only")) == "on"
        )
        assert (
            await writer._read("probe", lambda c: scalar(c, "SHOW transaction_isolation"))
            == "repeatable read"
        )
    async with PostgresSessionStore(db_url, read_only=True) as reader:
        assert (
            await reader._read("probe", lambda c: scalar(c, "SHOW transaction_read_only")) == "on"
        )
        # Even SQL that slipped past the method checks is refused by PostgreSQL itself.
        with pytest.raises(ReadOnlyStore, match="read-only transaction"):
            await reader._read(
                "sneak",
                lambda c: c.execute(
                    text("INSERT INTO sessions (id, source, started_at) VALUES ('x', 'cli', 1)")
                ),
            )
        with pytest.raises(ReadOnlyStore):
            await reader.append_message("s", user("no"))
        info = await reader.get_session("s")
        assert info is not None and info.message_count == 0


# -- pool, driver options, errors, close ---------------------------------------------------


async def test_pool_and_connect_options_are_passed_through(db_url: str) -> None:
    store = PostgresSessionStore(
        db_url,
        pool_size=3,
        max_overflow=2,
        pool_timeout=7,
        pool_recycle=99,
        pool_pre_ping=False,
        connect_args={
            "statement_cache_size": 0,
            "server_settings": {"application_name": "hermes-pool-test"},
        },
    )
    async with store:
        await store.create_session("s", "cli")
        assert store.engine is not None
        pool: Any = store.engine.pool
        assert (pool.size(), pool._max_overflow, pool._timeout, pool._recycle) == (3, 2, 7, 99)
        assert pool._pre_ping is False
        async with store.engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None and driver._stmt_cache.get_max_size() == 0
        async with raw(db_url) as db:
            names = await db.fetch(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            )
        assert "hermes-pool-test" in {row[0] for row in names}
    async with PostgresSessionStore(db_url) as default:
        await default.get_session("s")
        async with raw(db_url) as db:
            names = await db.fetch(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            )
        assert "hermes" in {row[0] for row in names}


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="postgresql"):
        PostgresSessionStore("sqlite:///x.db")
    with pytest.raises(ValueError):
        PostgresSessionStore("not a url at all")
    with pytest.raises(ValueError, match="pool_size"):
        PostgresSessionStore("postgresql+asyncpg://u@127.0.0.1/db", pool_size=0)
    assert (
        PostgresSessionStore("postgresql://u:secret@h/db").url == "postgresql+asyncpg://u:***@h/db"
    )


async def test_an_unreachable_server_is_a_clear_session_store_error() -> None:
    with anyio.fail_after(20):
        async with PostgresSessionStore(
            "postgresql+asyncpg://nobody@127.0.0.1:9/none", connect_args={"timeout": 5}
        ) as store:
            with pytest.raises(SessionStoreError, match="Is the server running"):
                await store.get_session("s")


async def test_a_failing_query_raises_instead_of_finding_nothing(db_url: str) -> None:
    async with PostgresSessionStore(db_url) as store:
        await store.create_session("s", "cli")
        await store.append_message("s", user("findable words"))
        async with raw(db_url) as db:
            await db.execute("ALTER TABLE messages RENAME TO messages_gone")
        with pytest.raises(SessionStoreError, match="messages"):
            await store.search_messages("findable")


async def test_close_waits_for_work_and_disposes_the_engine(db_url: str) -> None:
    store = PostgresSessionStore(
        db_url, connect_args={"server_settings": {"application_name": "closer"}}
    )
    await store.create_session("s", "cli")
    assert store.engine is not None
    pool = store.engine.pool
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.append_messages, "s", [user(str(i)) for i in range(20)])
        await anyio.lowlevel.checkpoint()  # the append is under way
        await store.close()
    await store.close()  # idempotent
    assert store.engine is None and pool.checkedout() == 0
    with pytest.raises(StoreClosed):
        await store.get_session("s")
    async with raw(db_url) as db:
        await eventually(
            lambda: db.fetchval(
                "SELECT COUNT(*) = 0 FROM pg_stat_activity WHERE application_name = 'closer'"
            )
        )
    async with PostgresSessionStore(db_url) as again:
        assert len(await again.get_messages("s")) == 20  # close let it finish


# -- search specifics -----------------------------------------------------------------------


async def test_substring_fallback_finds_fragments_but_not_tool_output(db_url: str) -> None:
    async with PostgresSessionStore(db_url) as store:
        await store.create_session("s", "cli")
        await store.append_messages(
            "s",
            [
                user("we built a multiagentsystem yesterday"),
                AssistantMessage(content="ok"),
                ToolMessage(tool_call_id="c", content="toolagentsoutput", name="t"),
            ],
        )
        [hit] = await store.search_messages("agentsys")
        assert hit.role == "user" and ">>>agentsys<<<" in hit.snippet
        assert await store.search_messages("agentsout") == []
        # A whole token the parser keeps together is found by words; a part of it by
        # substring: the documented difference from FTS5's unicode61.
        await store.append_message("s", user("open src/pkg/module.py now"))
        assert len(await store.search_messages("src/pkg/module.py")) == 1
        [part] = await store.search_messages("module.py")
        assert ">>>module.py<<<" in part.snippet


async def test_nul_characters_are_stored_losslessly(db_url: str) -> None:
    message = UserMessage(content="before\x00after words")
    async with PostgresSessionStore(db_url) as store:
        await store.create_session("s", "cli")
        await store.append_message("s", message)
        assert await store.get_conversation("s") == [message]
        assert len(await store.search_messages("words")) == 1


# -- many writers, a killed writer, a cancelled agent --------------------------------------


def echo_tool() -> FunctionTool:
    async def handler(args: dict[str, Any], ctx: Any) -> str:
        return "echoed"

    return FunctionTool(ToolSpec(name="echo", description="echo tool"), handler)


async def test_twenty_concurrent_agents_lose_no_message(db_url: str) -> None:
    agents, turns, shared_writes = 20, 2, 5
    async with PostgresSessionStore(db_url) as first:
        await first.create_session("shared", "cli")
    stores = [PostgresSessionStore(db_url) for _ in range(agents)]

    async def work(store: PostgresSessionStore, n: int) -> None:
        script = []
        for turn in range(turns):
            script += [tool_calls(call("echo", id=f"c{n}-{turn}")), reply(f"agent {n} turn {turn}")]
        agent = Agent(ScriptedModel(script), [echo_tool()], sessions=store, session_id=f"a{n}")
        for turn in range(turns):
            await agent.run_conversation(f"question {turn}")
            for i in range(shared_writes):
                await store.append_message("shared", user(f"writer {n} turn {turn} item {i}"))
        await agent.close()

    try:
        async with anyio.create_task_group() as tg:
            for n, store in enumerate(stores):
                tg.start_soon(work, store, n)
    finally:
        for store in stores:
            await store.close()

    async with PostgresSessionStore(db_url, read_only=True) as reader:
        shared = await reader.get_conversation("shared")
        assert len(shared) == agents * turns * shared_writes
        for n in range(agents):
            mine = [m.content for m in shared if str(m.content).startswith(f"writer {n} ")]
            assert mine == [
                f"writer {n} turn {t} item {i}" for t in range(turns) for i in range(shared_writes)
            ]
            transcript = await reader.get_conversation(f"a{n}")
            assert [m.role for m in transcript] == [
                "user",
                "assistant",
                "tool",
                "assistant",
            ] * turns
            assert validate(transcript) == []
            info = await reader.get_session(f"a{n}")
            assert info is not None and info.message_count == 4 * turns
        info = await reader.get_session("shared")
        assert info is not None and info.message_count == len(shared)
        ids = [m.id for m in await reader.get_messages("shared")]
        assert ids == sorted(set(ids))


_CHILD = """
import sys

import anyio

from hermes_adapters.sessions.postgres import PostgresSessionStore
from hermes_core.messages import UserMessage


async def main(url: str) -> None:
    async with PostgresSessionStore(url) as store:
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


async def test_a_killed_writer_leaves_every_committed_message(db_url: str) -> None:
    committed: list[int] = []
    async with await anyio.open_process(
        [sys.executable, "-c", _CHILD, db_url], stdout=subprocess.PIPE
    ) as process:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(30):
            while len(committed) < 60:
                line = await lines.receive_until(b"\n", 4096)
                committed += [int(token) for token in line.split()]
        process.kill()  # SIGKILL: no cleanup, most likely in the middle of a transaction
        await process.wait()
    assert process.returncode == -signal.SIGKILL

    async with PostgresSessionStore(db_url) as store:
        stored = await store.get_messages("victim")
        assert set(committed) <= {m.id for m in stored}
        assert len(stored) % 2 == 0  # batches are all or nothing
        info = await store.get_session("victim")
        assert info is not None and info.message_count == len(stored)
        await store.append_message("victim", user("life goes on"))


async def test_the_turn_after_a_cancelled_tool_resumes_from_postgres(db_url: str) -> None:
    started, never = anyio.Event(), anyio.Event()

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        started.set()
        await never.wait()
        return "never"

    tool = FunctionTool(ToolSpec(name="slow", description="slow tool"), slow)
    async with PostgresSessionStore(db_url) as store:
        agent = Agent(
            ScriptedModel([tool_calls(call("slow", id="c1"))]),
            [tool],
            sessions=store,
            session_id="s1",
        )
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.run_conversation, "go")
                with anyio.fail_after(20):
                    await started.wait()
                scope.cancel()
        assert scope.cancelled_caught
        await agent.close()

    # A new process would see exactly this: a fresh store reading the rows back.
    async with PostgresSessionStore(db_url) as again:
        stored = await again.get_conversation("s1")
        assert [m.role for m in stored] == ["user", "assistant", "tool"]
        assert isinstance(stored[2], ToolMessage) and stored[2].content == CANCELLED_RESULT
        assert validate(stored) == []
        model = ScriptedModel([reply("resumed")])
        resumed = Agent(model, [tool], sessions=again, session_id="s1")
        result = await resumed.run_conversation("again")
        await resumed.close()
        assert result["final_response"] == "resumed"
        sent = model.last_request.messages
        assert validate(sent) == []
        assert [m.role for m in sent][-4:] == ["user", "assistant", "tool", "user"]
        roles = [m.role for m in await again.get_conversation("s1")]
        assert roles == ["user", "assistant", "tool", "user", "assistant"]
