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

MEMORY_GAPS: dict[str, str] = {
    "test_every_identity_field_round_trips": (
        "InMemorySessionStore refuses origin_json, which the port's IDENTITY_FIELDS and "
        "REFERENCE.md §2 accept"
    ),
}
"""Contract tests the fake fails today; strict, so a fix shows up as XPASS to delete here."""


class TestInMemorySessionStore(SessionStoreContract):
    @pytest.fixture(autouse=True)
    def _known_gaps(self, request: pytest.FixtureRequest) -> None:
        reason = MEMORY_GAPS.get(request.node.originalname)
        if reason is not None:
            request.applymarker(pytest.mark.xfail(reason=reason, strict=True))

    @pytest.fixture
    async def store(self) -> AsyncIterator[InMemorySessionStore]:
        store = InMemorySessionStore()
        yield store
        await store.close()

    @pytest.fixture
    def make_store(self, store: InMemorySessionStore) -> StoreFactory:
        """A second store over the same dicts: what reopening the file is for SQLite.

        The fake has no public way to share its data, so this reaches into it; the twin
        copies the id counter when made, so only one of the two may write at a time.
        """

        async def make(read_only: bool = False) -> SessionStore:
            twin = InMemorySessionStore(read_only=read_only)
            twin._sessions = store._sessions
            twin._rows = store._rows
            twin._prompts = store._prompts
            twin._locks = store._locks
            twin._last_id = store._last_id
            return twin

        return make

    @pytest.fixture
    def prompt_counter(self, store: InMemorySessionStore) -> PromptCounter:
        async def count() -> int:
            return store._prompt_count()

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
