"""session_search: discovery, read, scroll and browse over a session store, bounded."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from hermes_adapters.llm.scripted import ScriptedModel, call, reply, tool_calls
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_adapters.tools.session_search import SessionSearchTool
from hermes_core import Agent
from hermes_core.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from hermes_core.ports.tools import ToolContext, ToolResult

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

OLD: list[Message] = [
    UserMessage(content="My cat is named Miso and she hates baths."),
    AssistantMessage(content="Noted: Miso the cat dislikes baths."),
    UserMessage(content="Also my dog is called Rex."),
    AssistantMessage(
        content=None,
        tool_calls=(ToolCall(id="c1", name="memory", arguments='{"content": "dog Rex"}'),),
    ),
    ToolMessage(tool_call_id="c1", name="memory", content="saved"),
    AssistantMessage(content="Rex, got it."),
]
TRIP: list[Message] = [
    UserMessage(content="Plan a weekend trip to Lisbon."),
    AssistantMessage(content="Day one: Alfama. Day two: Belem. Bring the cat sitter's number."),
]
NOW: list[Message] = [UserMessage(content="What is my cat called again?")]


def ctx(store: Any, session_id: str | None = "now") -> ToolContext:
    return ToolContext(task_id="t", session_id=session_id, services={"sessions": store})


@pytest.fixture
async def store() -> InMemorySessionStore:
    ticks = itertools.count(1_700_000_000)
    db = InMemorySessionStore(clock=lambda: float(next(ticks)))
    for session_id, messages in (("old", OLD), ("trip", TRIP), ("now", NOW)):
        await db.create_session(session_id, "cli", model="m")
        await db.update_metadata(session_id, title=f"{session_id} chat")
        await db.append_messages(session_id, messages)
    return db


async def run(tool: SessionSearchTool, args: dict[str, Any], context: ToolContext) -> Any:
    result = await tool(args, context)
    assert not result.is_error, result.content
    return json.loads(result.content)


# -- discovery -------------------------------------------------------------------------


async def test_discovery_groups_hits_by_session_and_skips_the_current_one(
    store: InMemorySessionStore,
) -> None:
    found = await run(SessionSearchTool(), {"query": "cat"}, ctx(store))
    assert found["mode"] == "discovery"
    assert [s["session_id"] for s in found["sessions"]] == ["trip", "old"]  # newest first
    old = found["sessions"][1]
    assert old["title"] == "old chat" and old["matches"] == 2
    assert all(">>>cat<<<" in s["snippet"] for s in old["snippets"])
    assert "context" in old["snippets"][0] and "context" not in old["snippets"][1]
    assert "What is my cat called" not in json.dumps(found)

    oldest = await run(SessionSearchTool(), {"query": "cat", "sort": "oldest"}, ctx(store))
    assert [s["session_id"] for s in oldest["sessions"]] == ["old", "trip"]
    full = await run(SessionSearchTool(), {"query": "cat", "detail": "full"}, ctx(store))
    assert all("context" in hit for s in full["sessions"] for hit in s["snippets"])


async def test_discovery_limit_roles_scope_and_no_match(store: InMemorySessionStore) -> None:
    tool = SessionSearchTool()
    one = await run(tool, {"query": "cat", "limit": 1}, ctx(store))
    assert one["count"] == 1
    clamped = await run(tool, {"query": "cat", "limit": 50}, ctx(store))
    assert clamped["count"] == 2
    users = await run(tool, {"query": "cat", "role_filter": ["user"]}, ctx(store))
    assert [s["session_id"] for s in users["sessions"]] == ["old"]
    assert {h["role"] for h in users["sessions"][0]["snippets"]} == {"user"}
    as_text = await run(tool, {"query": "cat", "role_filter": "assistant"}, ctx(store))
    assert {h["role"] for s in as_text["sessions"] for h in s["snippets"]} == {"assistant"}
    scoped = await run(tool, {"query": "cat", "session_id": "now"}, ctx(store))
    assert [s["session_id"] for s in scoped["sessions"]] == ["now"]  # asked for explicitly
    nothing = await run(tool, {"query": "zebra"}, ctx(store))
    assert nothing["count"] == 0 and "zebra" in nothing["message"]
    anyone = await run(tool, {"query": "cat"}, ctx(store, session_id=None))
    assert {s["session_id"] for s in anyone["sessions"]} == {"old", "trip", "now"}


async def test_discovery_skips_the_compression_ancestors_of_the_current_session() -> None:
    db = InMemorySessionStore()
    await db.create_session("a", "cli")
    await db.append_messages("a", [UserMessage(content="the cat is orange")])
    await db.publish_compression_child("a", "a2", [UserMessage(content="summary: cat orange")])
    await db.create_session("b", "cli")
    await db.append_messages("b", [UserMessage(content="another cat")])
    found = await run(SessionSearchTool(), {"query": "cat"}, ctx(db, "a2"))
    assert [s["session_id"] for s in found["sessions"]] == ["b"]


# -- read and scroll -------------------------------------------------------------------


async def test_read_returns_the_transcript_with_ids(store: InMemorySessionStore) -> None:
    tool = SessionSearchTool()
    read = await run(tool, {"session_id": "old"}, ctx(store))
    assert read["mode"] == "read" and read["message_count"] == len(OLD)
    roles = [m["role"] for m in read["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert read["messages"][3]["tool_calls"] == ["memory"]
    assert read["messages"][4]["tool_name"] == "memory"
    ids = [m["id"] for m in read["messages"]]
    assert ids == sorted(ids)
    by_prefix = await run(tool, {"session_id": "ol", "role_filter": ["user"]}, ctx(store))
    assert [m["content"] for m in by_prefix["messages"]][1] == "Also my dog is called Rex."


async def test_scroll_shows_a_window_around_a_message(store: InMemorySessionStore) -> None:
    tool = SessionSearchTool()
    ids = [m["id"] for m in (await run(tool, {"session_id": "old"}, ctx(store)))["messages"]]
    around = await run(
        tool, {"session_id": "old", "around_message_id": ids[2], "window": 1}, ctx(store)
    )
    assert around["mode"] == "scroll"
    assert [m["id"] for m in around["messages"]] == ids[1:4]
    assert [m.get("anchor", False) for m in around["messages"]] == [False, True, False]
    assert around["has_earlier"] and around["has_later"]
    edge = await run(tool, {"session_id": "old", "around_message_id": ids[0]}, ctx(store))
    assert not edge["has_earlier"] and [m["id"] for m in edge["messages"]] == ids


async def test_errors_are_results_the_model_can_fix(store: InMemorySessionStore) -> None:
    tool = SessionSearchTool()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"session_id": "missing"}, "no session"),
        ({"session_id": "old", "around_message_id": 10_000}, "not in session"),
        ({"around_message_id": 3}, "needs the `session_id`"),
        ({"sort": "sideways"}, "sort"),
        ({"limit": 0}, "limit"),
        ({"role_filter": ["robot"]}, "unknown role"),
        ({"query": 5}, "query"),
    ]
    for args, message in cases:
        result = await tool(args, ctx(store))
        assert result.is_error and message in result.content, (args, result.content)
    detached = await tool({"query": "cat"}, ToolContext(task_id="t"))
    assert detached.is_error and "no session store" in detached.content


# -- browse and bounds -----------------------------------------------------------------


async def test_browse_lists_recent_sessions_without_the_current_one(
    store: InMemorySessionStore,
) -> None:
    tool = SessionSearchTool()
    recent = await run(tool, {}, ctx(store))
    assert recent["mode"] == "browse"
    assert [s["session_id"] for s in recent["sessions"]] == ["trip", "old"]
    assert recent["sessions"][1]["preview"].startswith("My cat is named Miso")
    assert recent["sessions"][1]["message_count"] == len(OLD)
    oldest = await run(tool, {"sort": "oldest", "limit": 1}, ctx(store))
    assert [s["session_id"] for s in oldest["sessions"]] == ["trip"]


async def test_output_is_bounded_and_stays_valid_json() -> None:
    db = InMemorySessionStore()
    await db.create_session("long", "cli")
    await db.append_messages(
        "long", [UserMessage(content=f"note {i}: " + "words " * 300) for i in range(40)]
    )
    tool = SessionSearchTool(max_chars=3000)
    result = await tool({"session_id": "long"}, ctx(db))
    assert len(result.content) <= 3000
    page = json.loads(result.content)
    assert page["truncated"] and page["omitted"] > 0
    assert page["messages"][0]["content"].startswith("note 0:")
    assert page["messages"][0]["content"].endswith("more chars]")  # one message is clipped
    tail = json.loads((await tool({"session_id": "long", "sort": "newest"}, ctx(db))).content)
    assert tail["messages"][-1]["content"].startswith("note 39:")
    hits = await tool({"query": "words", "limit": 10}, ctx(db))
    assert len(hits.content) <= 3000
    assert tool.spec.max_result_chars is not None and tool.spec.max_result_chars >= 3000
    with pytest.raises(ValueError):
        SessionSearchTool(max_chars=10)


# -- end to end: a new session recalls what the user said in an earlier one --------------


class RecordingSearch(SessionSearchTool):
    """Notes which sessions held a match when the call ran, to prove exclusion mattered."""

    matched: set[str]

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        hits = await ctx.service("sessions").search_messages(args["query"])
        self.matched = {hit.session_id for hit in hits}
        return await super().__call__(args, ctx)


async def test_a_new_session_recalls_a_fact_from_an_earlier_one() -> None:
    store = InMemorySessionStore()
    first = Agent(
        ScriptedModel([reply("Teal it is, I will remember.")]),
        [SessionSearchTool()],
        sessions=store,
        session_id="s1",
    )
    await first.run_conversation("My favourite colour is teal.")

    search = RecordingSearch()
    model = ScriptedModel(
        [
            tool_calls(call("session_search", {"query": "favourite colour"})),
            reply("Your favourite colour is teal."),
        ]
    )
    second = Agent(model, [search], sessions=store, session_id="s2")
    result = await second.run_conversation("What is my favourite colour?")

    tool_message = next(m for m in result["messages"] if m["role"] == "tool")
    payload = json.loads(tool_message["content"])
    assert [s["session_id"] for s in payload["sessions"]] == ["s1"]
    assert "teal" in tool_message["content"]
    assert "What is my favourite colour" not in tool_message["content"]
    assert search.matched == {"s1", "s2"}  # s2's own question matched and was left out
    assert result["final_response"] == "Your favourite colour is teal."
    model.assert_complete()
    await first.close()
    await second.close()
