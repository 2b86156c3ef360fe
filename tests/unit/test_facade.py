"""AIAgent and build_agent: lazy construction, profiles, config precedence, ownership."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_bootstrap import AIAgent, SessionDB
from hermes_bootstrap.facade import build_agent
from hermes_core.errors import ConfigError, ModelAuthError, StoreClosed

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

TEST_SERVER = Path(__file__).resolve().parents[1] / "mcp_servers" / "hermes_test_server.py"


async def test_constructor_stores_state_only(isolated_hermes_home: Path) -> None:
    (isolated_hermes_home / "config.yaml").write_text("database:\n  backend: [broken\n")
    agent = AIAgent(provider="openrouter", model="x")  # neither config nor key checked yet
    assert agent.core is None
    assert not (isolated_hermes_home / "state.db").exists()
    with pytest.raises(ConfigError, match=r"config.yaml at line \d+"):
        await agent.run_conversation("hi")
    await agent.close()


async def test_local_profile_persists_to_hermes_home(isolated_hermes_home: Path) -> None:
    model = ScriptedModel([reply("stored answer")])
    async with AIAgent(chat_model=model, enabled_toolsets=[]) as agent:
        result = await agent.run_conversation("remember this turn")
        session_id = result["session_id"]
    assert session_id is not None
    async with SessionDB(isolated_hermes_home / "state.db", read_only=True) as store:
        stored = await store.get_conversation(session_id)
    assert [m.content for m in stored] == ["remember this turn", "stored answer"]


async def test_database_synchronous_from_config_reaches_the_store(
    isolated_hermes_home: Path,
) -> None:
    (isolated_hermes_home / "config.yaml").write_text("database:\n  synchronous: normal\n")
    async with AIAgent(chat_model=ScriptedModel([reply("ok")]), enabled_toolsets=[]) as agent:
        await agent.run_conversation("x")
        store = agent.core.sessions if agent.core else None
        assert store is not None
        conn = await store._connection()  # type: ignore[attr-defined]
        async with conn.execute("PRAGMA synchronous") as cursor:
            assert (await cursor.fetchone())[0] == 1  # NORMAL


async def test_closing_the_facade_closes_what_it_opened(isolated_hermes_home: Path) -> None:
    agent = AIAgent(chat_model=ScriptedModel([reply("ok")]), enabled_toolsets=[])
    await agent.run_conversation("x")
    store = agent.core.sessions if agent.core else None
    await agent.close()
    await agent.close()
    assert store is not None
    with pytest.raises(StoreClosed):
        await store.get_session("anything")


async def test_a_borrowed_store_stays_open(tmp_path: Path) -> None:
    async with SessionDB(tmp_path / "mine.db") as store:
        async with AIAgent(
            chat_model=ScriptedModel([reply("ok")]), session_db=store, enabled_toolsets=[]
        ) as agent:
            result = await agent.run_conversation("x")
        assert await store.get_session(result["session_id"]) is not None


async def test_batch_profile_has_no_store_and_no_memory() -> None:
    model = ScriptedModel([reply("done")])
    async with build_agent("batch", chat_model=model, enabled_toolsets=[]) as agent:
        result = await agent.run_conversation("x")
        assert agent.sessions is None and agent.memory is None
    assert result["session_id"] is None


async def test_service_profile_needs_a_database_url() -> None:
    with pytest.raises(ConfigError, match=r"service profile needs database\.url"):
        async with build_agent("service", chat_model=ScriptedModel([])):
            pass


async def test_explicit_arguments_beat_the_config_file(isolated_hermes_home: Path) -> None:
    (isolated_hermes_home / "config.yaml").write_text(
        "model:\n  provider: openrouter\n  default: some/model\nagent:\n  max_turns: 1\n"
    )
    with pytest.raises(ModelAuthError, match="OPENROUTER_API_KEY"):
        async with build_agent(environ={}):
            pass
    steps = [tool_calls(call("todo", {}, id="t1")), reply("done")]
    async with build_agent(chat_model=ScriptedModel(steps), max_iterations=5) as agent:
        result = await agent.run_conversation("x")
    assert result["completed"] and result["api_calls"] == 2


async def test_toolsets_select_built_in_tools(tmp_path: Path) -> None:
    model = ScriptedModel([reply("ok")])
    async with AIAgent(
        chat_model=model, enabled_toolsets=["file", "todo"], workspace=tmp_path
    ) as agent:
        await agent.run_conversation("x")
    offered = sorted(s.name for s in model.calls[0].tools)
    assert offered == ["patch", "read_file", "search_files", "todo", "write_file"]


async def test_mcp_servers_from_config_join_the_agent(isolated_hermes_home: Path) -> None:
    server = TEST_SERVER
    (isolated_hermes_home / "config.yaml").write_text(
        "mcp_servers:\n"
        "  test:\n"
        f"    command: {sys.executable}\n"
        f"    args: [{str(server)!r}, stdio]\n"
    )
    model = ScriptedModel(
        [tool_calls(call("mcp__test__echo", {"text": "over mcp"}, id="m1")), reply("echoed")]
    )
    async with AIAgent(chat_model=model, enabled_toolsets=[]) as agent:
        result = await agent.run_conversation("echo something")
    assert "mcp__test__echo" in {s.name for s in model.calls[0].tools}
    assert "over mcp" in result["messages"][2]["content"]


async def test_mcp_servers_need_an_owner_task(isolated_hermes_home: Path) -> None:
    (isolated_hermes_home / "config.yaml").write_text(
        "mcp_servers:\n  test:\n    command: /bin/true\n"
    )
    agent = AIAgent(chat_model=ScriptedModel([]), enabled_toolsets=[])
    with pytest.raises(ConfigError, match="async with AIAgent"):
        await agent.run_conversation("x")
    await agent.close()
