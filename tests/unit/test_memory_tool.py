"""The memory tool and the file store: exact replies, batches, locking, the frozen snapshot.

The store semantics themselves are the contract suite's job
(``tests/contract/test_memory_store_contract.py``); here we check what the model reads
(REFERENCE.md §5, to the letter), that two writers never lose each other's entries, and
that a write mid-conversation reaches the next conversation's prompt but not this one's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_adapters.memory.files import FileMemoryStore
from hermes_adapters.memory.in_memory import InMemoryMemoryStore
from hermes_adapters.tools.memory import MemoryTool
from hermes_core import Agent
from hermes_core.messages import SystemMessage, ToolMessage
from hermes_core.ports.memory import MemoryStore, MemoryWrite
from hermes_core.ports.tools import ToolContext, ToolResult

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

NOTE = "Write saved. This update is complete — do not repeat it."


def ctx(store: MemoryStore | None, task_id: str = "turn-1") -> ToolContext:
    return ToolContext(task_id=task_id, services={"memory": store})


async def run(
    tool: MemoryTool, store: MemoryStore | None, task_id: str = "turn-1", **args: Any
) -> tuple[dict[str, Any], ToolResult]:
    result = await tool(args, ctx(store, task_id))
    payload = json.loads(result.content)
    assert isinstance(payload, dict)
    return payload, result


@pytest.fixture
def store() -> InMemoryMemoryStore:
    return InMemoryMemoryStore()


# -- exact replies ---------------------------------------------------------------------


async def test_without_a_store_memory_is_not_available() -> None:
    payload, result = await run(MemoryTool(), None, action="add", target="memory", content="x")
    assert result.is_error
    assert payload == {
        "error": "Memory is not available. It may be disabled in config or this environment.",
        "success": False,
    }


async def test_add_answers_the_terminal_success_shape(store: InMemoryMemoryStore) -> None:
    tool = MemoryTool()
    payload, result = await run(tool, store, action="add", target="memory", content="likes tea")
    assert not result.is_error
    assert payload == {
        "success": True,
        "done": True,
        "target": "memory",
        "usage": "0% — 9/2,200 chars",
        "entry_count": 1,
        "message": "Entry added.",
        "note": NOTE,
    }
    # The raw JSON keeps the dash and the section sign readable (ensure_ascii=False).
    assert "— 9/2,200" in result.content
    payload, _ = await run(tool, store, action="add", target="memory", content="  likes tea ")
    assert payload["message"] == "Entry already exists (no duplicate added)."
    assert payload["entry_count"] == 1


async def test_usage_reports_percent_and_thousands(store: InMemoryMemoryStore) -> None:
    payload, _ = await run(MemoryTool(), store, action="add", target="user", content="u" * 1100)
    assert payload["usage"] == "80% — 1,100/1,375 chars"
    assert payload["target"] == "user"


async def test_replace_and_remove_answer_their_messages(store: InMemoryMemoryStore) -> None:
    tool = MemoryTool()
    await run(tool, store, action="add", target="user", content="Prefers tabs")
    payload, _ = await run(
        tool, store, action="replace", target="user", old_text="tabs", new_text="Prefers spaces"
    )
    assert payload["message"] == "Entry replaced."
    assert (await store.snapshot()).user == ("Prefers spaces",)
    payload, _ = await run(tool, store, action="remove", target="user", old_text="spaces")
    assert payload["message"] == "Entry removed."
    assert payload["usage"] == "0% — 0/1,375 chars"
    assert payload["entry_count"] == 0


async def test_argument_errors_are_exact(store: InMemoryMemoryStore) -> None:
    tool = MemoryTool()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"action": "add", "target": "notes", "content": "x"}, "Invalid target 'notes'. Use 'memory' or 'user'."),
        ({"action": "edit", "target": "memory", "content": "x", "old_text": "y"}, "Unknown action 'edit'. Use: add, replace, remove"),
        ({"target": "memory"}, "Unknown action ''. Use: add, replace, remove"),
        ({"action": "add", "target": "memory"}, "Content is required for 'add' action."),
        ({"action": "replace", "target": "memory", "old_text": "x"}, "content is required for 'replace' action."),
        ({"target": "memory", "operations": {"action": "add"}}, "operations must be a list of {action, content?, old_text?} objects."),
    ]  # fmt: skip
    for args, message in cases:
        payload, result = await run(tool, store, **args)
        assert result.is_error
        assert payload == {"error": message, "success": False}, args


async def test_missing_old_text_shows_the_entries(store: InMemoryMemoryStore) -> None:
    tool = MemoryTool()
    await run(tool, store, action="add", target="memory", content="alpha")
    for action in ("replace", "remove"):
        payload, result = await run(tool, store, action=action, target="memory", content="x")
        assert result.is_error
        assert payload == {
            "success": False,
            "error": (
                f"'{action}' needs old_text -- a short unique substring of the entry to "
                f"{action}. None was provided. Reissue the {action} with old_text set to part "
                "of one of the current_entries below."
            ),
            "current_entries": ["alpha"],
            "usage": "5/2,200",
        }


async def test_overflow_shows_current_entries_and_usage() -> None:
    store = InMemoryMemoryStore(memory=["a" * 2000])
    payload, result = await run(
        MemoryTool(), store, action="add", target="memory", content="b" * 300
    )
    assert result.is_error
    assert payload == {
        "success": False,
        "error": (
            "Memory at 2,000/2,200 chars. Adding this entry (300 chars) would exceed the "
            "limit. Consolidate now: use 'replace' to merge overlapping entries into shorter "
            "ones or 'remove' stale or less important entries (see current_entries below), "
            "then retry this add — all in this turn."
        ),
        "current_entries": ["a" * 2000],
        "usage": "2,000/2,200",
    }


async def test_no_match_and_ambiguous_match_replies() -> None:
    store = InMemoryMemoryStore(memory=["alpha one", "alpha two"])
    tool = MemoryTool()
    payload, _ = await run(tool, store, action="remove", target="memory", old_text="zeta")
    assert payload == {
        "success": False,
        "error": (
            "No entry matched 'zeta'. Check current_entries below and retry with the exact "
            "text of the entry you want to remove."
        ),
        "current_entries": ["alpha one", "alpha two"],
    }
    payload, result = await run(
        tool, store, action="replace", target="memory", old_text="alpha", content="x"
    )
    assert result.is_error
    assert payload == {
        "success": False,
        "error": "Multiple entries matched 'alpha'. Be more specific.",
        "matches": ["alpha one", "alpha two"],
    }


# -- batches ---------------------------------------------------------------------------


async def test_a_batch_frees_room_and_adds_in_one_call() -> None:
    store = InMemoryMemoryStore(memory=["a" * 1000, "b" * 1000])
    operations = [
        {"action": "add", "content": "c" * 500},  # alone this would overflow
        {"action": "remove", "old_text": "aaaa"},
        {"action": "replace", "old_text": "bbbb", "new_text": "short b"},
    ]
    payload, result = await run(MemoryTool(), store, target="memory", operations=operations)
    assert not result.is_error
    assert payload["message"] == "Applied 3 operation(s)."
    assert payload["entry_count"] == 2
    assert (await store.snapshot()).memory == ("short b", "c" * 500)


async def test_a_failing_batch_applies_nothing() -> None:
    store = InMemoryMemoryStore(memory=["alpha", "beta"])
    operations = [{"action": "add", "content": "gamma"}, {"action": "remove", "old_text": "zzz"}]
    payload, result = await run(MemoryTool(), store, target="memory", operations=operations)
    assert result.is_error
    assert payload == {
        "success": False,
        "error": (
            "Operation 2 (remove): no entry matched 'zzz'. No operations were applied (batch "
            "is all-or-nothing)."
        ),
        "current_entries": ["alpha", "beta"],
        "usage": "12/2,200",
    }
    assert (await store.snapshot()).memory == ("alpha", "beta")
    malformed = ["nonsense", {"action": "add", "content": "delta"}]
    payload, _ = await run(MemoryTool(), store, target="memory", operations=malformed)
    assert payload["error"].startswith("Operation 1 (unknown): unknown action.")


# -- the per-turn consolidation cap ----------------------------------------------------


async def test_more_than_three_failed_consolidations_turn_terminal() -> None:
    store = InMemoryMemoryStore(memory=["a" * 2100])
    tool = MemoryTool()
    over = {"action": "add", "target": "memory", "content": "b" * 200}
    for _ in range(3):
        payload, _ = await run(tool, store, **over)
        assert "current_entries" in payload and "done" not in payload
    payload, result = await run(tool, store, **over)
    assert result.is_error
    assert payload == {
        "success": False,
        "done": True,
        "error": (
            "Memory consolidation failed 4 times this turn. Stop retrying memory calls — leave "
            "memory unchanged for now and continue with your reply to the user. The fact can "
            "be saved in a later turn."
        ),
    }
    # The count is per turn: another task id starts from zero.
    payload, _ = await run(tool, store, task_id="turn-2", **over)
    assert "done" not in payload
    # A success resets the count of that turn.
    await run(tool, store, action="remove", target="memory", old_text="aaa")
    payload, _ = await run(
        tool, store, action="replace", target="memory", old_text="q", content="z"
    )
    assert payload["error"].startswith("No entry matched 'q'.") and "done" not in payload


async def test_ambiguous_matches_do_not_count_as_consolidation_failures() -> None:
    store = InMemoryMemoryStore(memory=["alpha one", "alpha two"])
    tool = MemoryTool()
    for _ in range(5):
        payload, _ = await run(tool, store, action="remove", target="memory", old_text="alpha")
        assert "matches" in payload and "done" not in payload


# -- the file store --------------------------------------------------------------------


async def test_files_use_the_reference_layout(tmp_path: Path) -> None:
    store = FileMemoryStore(tmp_path / "memories")
    tool = MemoryTool()
    await run(tool, store, action="add", target="memory", content="first\nspans lines")
    await run(tool, store, action="add", target="memory", content="second")
    await run(tool, store, action="add", target="user", content="Name is Ada")
    directory = tmp_path / "memories"
    assert (directory / "MEMORY.md").read_text("utf-8") == "first\nspans lines\n§\nsecond"
    assert (directory / "USER.md").read_text("utf-8") == "Name is Ada"
    assert (directory / "MEMORY.md.lock").exists()
    assert not list(directory.glob("*.tmp")) and not list(directory.glob(".*.tmp"))
    # Entries read back stripped and de-duplicated, whatever the file holds.
    (directory / "USER.md").write_text("  Name is Ada \n§\nName is Ada\n§\n likes tea", "utf-8")
    assert (await store.snapshot()).user == ("Name is Ada", "likes tea")


async def test_a_drifted_file_is_backed_up_and_not_rewritten(tmp_path: Path) -> None:
    directory = tmp_path / "memories"
    directory.mkdir()
    drifted = "alpha\n§\nbeta\n\n## appended by hand\n" + "x" * 2300
    (directory / "MEMORY.md").write_text(drifted, "utf-8")
    store = FileMemoryStore(directory)
    tool = MemoryTool()
    for args in ({"action": "remove", "old_text": "alpha"}, {"action": "replace", "old_text": "alpha", "content": "a"}):  # fmt: skip
        payload, result = await run(tool, store, target="memory", **args)
        assert result.is_error
        assert payload["error"].startswith(
            "Refusing to write MEMORY.md: file on disk has content that wouldn't round-trip"
        )
        assert (directory / "MEMORY.md").read_text("utf-8") == drifted
    backups = list(directory.glob("MEMORY.md.bak.*"))
    assert backups and backups[0].read_text("utf-8") == drifted
    assert str(backups[0]) in payload["error"]


async def test_two_stores_writing_concurrently_lose_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "memories"
    one, two = FileMemoryStore(directory), FileMemoryStore(directory)

    async def writer(store: FileMemoryStore, name: str) -> None:
        for i in range(20):
            await store.apply("memory", [MemoryWrite("add", content=f"{name}-{i:02d}")])

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, one, "one")
            tg.start_soon(writer, two, "two")
    entries = (await FileMemoryStore(directory).snapshot()).memory
    assert sorted(entries) == sorted(
        [f"one-{i:02d}" for i in range(20)] + [f"two-{i:02d}" for i in range(20)]
    )
    await one.aclose()
    await two.aclose()


_WRITER = """
import sys
from pathlib import Path
import anyio
from hermes_adapters.memory.files import FileMemoryStore
from hermes_core.ports.memory import MemoryWrite

async def main() -> None:
    store = FileMemoryStore(Path(sys.argv[1]))
    for i in range(20):
        await store.apply("user", [MemoryWrite("add", content=f"{sys.argv[2]}-{i:02d}")])

anyio.run(main)
"""


async def test_two_processes_writing_concurrently_lose_nothing(tmp_path: Path) -> None:
    """The flock is what two agent processes sharing ``$HERMES_HOME`` rely on."""
    directory = tmp_path / "memories"

    async def writer(name: str) -> None:
        await anyio.run_process([sys.executable, "-c", _WRITER, str(directory), name])

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, "p1")
            tg.start_soon(writer, "p2")
    entries = (await FileMemoryStore(directory).snapshot()).user
    assert len(entries) == 40
    assert set(entries) == {f"p{p}-{i:02d}" for p in (1, 2) for i in range(20)}


async def test_a_caller_waiting_on_a_busy_lock_can_be_cancelled(tmp_path: Path) -> None:
    import fcntl
    import os

    directory = tmp_path / "memories"
    directory.mkdir()
    fd = os.open(directory / "MEMORY.md.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process holds the lock
        store = FileMemoryStore(directory)
        with anyio.move_on_after(0.3) as timer:
            await store.apply("memory", [MemoryWrite("add", content="never")])
        assert timer.cancelled_caught
    finally:
        os.close(fd)
    assert (await FileMemoryStore(directory).snapshot()).memory == ()


# -- the frozen snapshot, end to end ---------------------------------------------------


def _system_text(model: ScriptedModel, index: int) -> str:
    first = model.requests[index].messages[0]
    assert isinstance(first, SystemMessage)
    return str(first.content)


async def test_a_write_reaches_the_next_conversation_not_this_one(tmp_path: Path) -> None:
    directory = tmp_path / "memories"
    seed = FileMemoryStore(directory)
    await seed.apply("memory", [MemoryWrite("add", content="Project uses uv")])

    store = FileMemoryStore(directory)
    add = {"action": "add", "target": "user", "content": "User drinks green tea"}
    model = ScriptedModel([tool_calls(call("memory", add)), reply("Noted."), reply("Still here.")])
    async with Agent(model, [MemoryTool()], memory=store) as agent:
        await agent.chat("Remember that I drink green tea.")
        prompt = agent.system_prompt
        assert prompt is not None
        assert "Project uses uv" in prompt
        assert "green tea" not in prompt
        tool_reply = next(m for m in agent.history if isinstance(m, ToolMessage))
        assert json.loads(str(tool_reply.content))["message"] == "Entry added."
        await agent.chat("Anything else?")
        assert agent.system_prompt == prompt, "a write changed this conversation's prompt"
        # Every model call of the conversation saw the same system prompt bytes.
        assert {_system_text(model, i) for i in range(3)} == {prompt}
    model.assert_complete()
    assert (await store.snapshot()).user == ("User drinks green tea",)

    fresh_model = ScriptedModel([reply("Hello again.")])
    async with Agent(fresh_model, [MemoryTool()], memory=FileMemoryStore(directory)) as fresh:
        await fresh.chat("Hi")
        fresh_prompt = fresh.system_prompt
    assert fresh_prompt is not None
    assert "USER PROFILE (who the user is) [" in fresh_prompt
    assert "User drinks green tea" in fresh_prompt
    assert "Project uses uv" in fresh_prompt
