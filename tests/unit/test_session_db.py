"""SessionDB picks the adapter from the URL; one setting swaps the backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_adapters.llm.scripted import ScriptedModel, reply
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_adapters.sessions.sqlite import SQLiteSessionStore
from hermes_bootstrap import AIAgent, SessionDB
from hermes_bootstrap.sessions import backend_of
from hermes_core.errors import ConfigError


def test_backend_follows_the_url() -> None:
    assert backend_of("state.db") == "sqlite"
    assert backend_of("sqlite:////tmp/x.db") == "sqlite"
    assert backend_of("postgresql+asyncpg://u@127.0.0.1/db") == "postgres"
    assert backend_of("memory://") == "memory"
    with pytest.raises(ConfigError, match="mysql"):
        backend_of("mysql://u@h/db")


def test_constructing_opens_nothing(tmp_path: Path) -> None:
    store = SessionDB(tmp_path / "never.db")
    assert isinstance(store, SQLiteSessionStore)
    assert not (tmp_path / "never.db").exists()
    assert isinstance(SessionDB("memory://"), InMemorySessionStore)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_sqlite_url_and_path_reach_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SessionDB(path) as store:
        agent = AIAgent(
            chat_model=ScriptedModel([reply("hi there")]),
            session_db=store,
            session_id="s1",
            enabled_toolsets=[],
        )
        async with agent:
            await agent.run_conversation("hello")
    async with SessionDB(f"sqlite:///{path}", read_only=True) as reader:
        stored = await reader.get_conversation("s1")
    assert [(m.role, m.content) for m in stored] == [("user", "hello"), ("assistant", "hi there")]
