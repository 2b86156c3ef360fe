"""The PostgreSQL session store, held to the same contract as the memory and SQLite stores.

One throwaway server per test session (``pg_server.running_postgres``: a couple of
seconds); each test then starts from empty tables, emptied with ``DELETE`` (cheaper than
``TRUNCATE`` or a database per test on tables this small), so the whole suite stays fast.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import text

from hermes_adapters.sessions.postgres import PostgresSessionStore
from hermes_core.ports.sessions import SessionStore
from hermes_core.testing import SessionStoreContract
from hermes_core.testing.sessions import PromptCounter, StoreFactory
from pg_server import running_postgres

pytestmark = pytest.mark.usefixtures("no_leaks")

_EMPTY = (
    "WITH locks AS (DELETE FROM compression_locks), messages AS (DELETE FROM messages), "
    "sessions AS (DELETE FROM sessions), prompts AS (DELETE FROM system_prompts) "
    "DELETE FROM state_meta"
)
"""Every table emptied in one statement (foreign keys are checked at its end)."""


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The ``hermes_test`` database of a server that lives as long as the test session."""
    with running_postgres() as url:
        yield url


class TestPostgresSessionStore(SessionStoreContract):
    @pytest.fixture
    async def store(self, postgres_url: str) -> AsyncIterator[PostgresSessionStore]:
        async with PostgresSessionStore(postgres_url) as store:
            await store.get_session("")  # opens the engine; creates the schema the first time
            assert store.engine is not None
            async with store.engine.begin() as conn:  # the store's own pooled connection
                await conn.execute(text(_EMPTY))
            yield store

    @pytest.fixture
    async def make_store(self, postgres_url: str) -> AsyncIterator[StoreFactory]:
        made: list[PostgresSessionStore] = []

        async def make(read_only: bool = False) -> SessionStore:
            made.append(PostgresSessionStore(postgres_url, read_only=read_only))
            return made[-1]

        yield make
        for store in made:
            await store.close()

    @pytest.fixture
    def prompt_counter(self, store: PostgresSessionStore) -> PromptCounter:
        async def count() -> int:
            assert store.engine is not None
            async with store.engine.connect() as conn:
                found = await conn.scalar(text("SELECT COUNT(*) FROM system_prompts"))
            return int(found or 0)

        return count
