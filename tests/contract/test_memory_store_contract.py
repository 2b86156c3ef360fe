"""Every memory store we ship, held to one contract (STYLE.md §8 item 11).

Each store is one subclass providing ``memory_store`` (fresh and empty, limits 2200/1375)
and ``make_twin`` (a second handle on the same data). The file store's twin is a second
``FileMemoryStore`` over the same directory, which is what a second agent process opens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_adapters.memory.files import FileMemoryStore
from hermes_adapters.memory.in_memory import InMemoryMemoryStore
from hermes_core.ports.memory import MemoryStore
from hermes_core.testing.memory import MemoryStoreContract, TwinFactory

pytestmark = pytest.mark.usefixtures("no_leaks")


class TestInMemoryMemoryStore(MemoryStoreContract):
    @pytest.fixture
    async def memory_store(self) -> AsyncIterator[InMemoryMemoryStore]:
        store = InMemoryMemoryStore(memory_limit=2200, user_limit=1375)
        yield store
        await store.aclose()

    @pytest.fixture
    def make_twin(self, memory_store: InMemoryMemoryStore) -> TwinFactory:
        """The fake has one handle on its data: the twin is the store itself."""

        async def make() -> MemoryStore:
            return memory_store

        return make


class TestFileMemoryStore(MemoryStoreContract):
    @pytest.fixture
    async def memory_store(self, tmp_path: Path) -> AsyncIterator[FileMemoryStore]:
        store = FileMemoryStore(tmp_path / "memories", memory_limit=2200, user_limit=1375)
        yield store
        await store.aclose()

    @pytest.fixture
    async def make_twin(self, tmp_path: Path) -> AsyncIterator[TwinFactory]:
        made: list[FileMemoryStore] = []

        async def make() -> MemoryStore:
            twin = FileMemoryStore(tmp_path / "memories", memory_limit=2200, user_limit=1375)
            made.append(twin)
            return twin

        yield make
        for twin in made:
            await twin.aclose()
