"""Every session store we ship, held to one contract (STYLE.md §8 item 11).

Each backend is one subclass providing ``store`` (fresh and empty), ``make_store`` (a
second store on the same data) and ``prompt_counter``. A new backend (PostgreSQL) is one
more class here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest

from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_adapters.sessions.sqlite import SQLiteSessionStore
from hermes_core.ports.sessions import SessionStore
from hermes_core.testing import SessionStoreContract
from hermes_core.testing.sessions import PromptCounter, StoreFactory

pytestmark = pytest.mark.usefixtures("no_leaks")


class TestInMemorySessionStore(SessionStoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[InMemorySessionStore]:
        store = InMemorySessionStore()
        yield store
        await store.close()

    @pytest.fixture
    def make_store(self, store: InMemorySessionStore) -> StoreFactory:
        """A second handle on the same data: what reopening the file is for SQLite."""

        async def make(read_only: bool = False) -> SessionStore:
            return store.reopen(read_only=read_only)

        return make

    @pytest.fixture
    def prompt_counter(self, store: InMemorySessionStore) -> PromptCounter:
        async def count() -> int:
            return store.prompt_count()

        return count


class TestSQLiteSessionStore(SessionStoreContract):
    @pytest.fixture
    def db_path(self, tmp_path: Path) -> Path:
        return tmp_path / "state.db"

    @pytest.fixture
    async def store(self, db_path: Path) -> AsyncIterator[SQLiteSessionStore]:
        async with SQLiteSessionStore(db_path) as store:
            yield store

    @pytest.fixture
    async def make_store(self, db_path: Path) -> AsyncIterator[StoreFactory]:
        made: list[SQLiteSessionStore] = []

        async def make(read_only: bool = False) -> SessionStore:
            made.append(SQLiteSessionStore(db_path, read_only=read_only))
            return made[-1]

        yield make
        for store in made:
            await store.close()

    @pytest.fixture
    def prompt_counter(self, db_path: Path) -> PromptCounter:
        async def count() -> int:
            async with aiosqlite.connect(db_path) as db:
                rows = list(await db.execute_fetchall("SELECT COUNT(*) FROM system_prompts"))
            return int(rows[0][0])

        return count
