"""Unit tests of the in-memory session store (the fake the engine tests trust).

These pin the REFERENCE.md §2 behaviour on the fake alone; the shared contract suite in
``tests/contract/`` later holds the SQL stores to the same behaviour.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from hermes_adapters.sessions.memory import InMemorySessionStore, new_session_id
from hermes_core.errors import (
    CompressionInProgress,
    ReadOnlyStore,
    SessionClosedForAppend,
    SessionNotFound,
    SessionStoreError,
    StoreClosed,
)
from hermes_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from hermes_core.ports.sessions import SessionStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> InMemorySessionStore:
    return InMemorySessionStore(clock=clock)


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def asst(text: str | None = None, *calls: ToolCall) -> AssistantMessage:
    return AssistantMessage(content=text, tool_calls=calls)


def call(call_id: str, name: str = "read_file", arguments: str = "{}") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def result(call_id: str, text: str, name: str | None = "read_file") -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, content=text, name=name)


async def contents(store: InMemorySessionStore, session_id: str, **kw: Any) -> list[Any]:
    return [m.content for m in await store.get_conversation(session_id, **kw)]


# -- identity and basics -------------------------------------------------------------------


async def test_store_satisfies_the_port(store: InMemorySessionStore) -> None:
    assert isinstance(store, SessionStore)


def test_new_session_id_format() -> None:
    assert re.fullmatch(r"\d{8}_\d{6}_[0-9a-f]{6}", new_session_id())
    fixed = new_session_id(datetime(2026, 4, 9, 1, 2, 3))
    assert fixed.startswith("20260409_010203_")
    assert new_session_id() != new_session_id()


async def test_create_session_and_get_session(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    assert await store.create_session("s1", "cli", model="m1", cwd="/w", user_id="u") == "s1"
    info = await store.get_session("s1")
    assert info is not None
    assert (info.id, info.source, info.model, info.started_at) == ("s1", "cli", "m1", clock.now)
    assert info.identity == {"cwd": "/w", "user_id": "u"}
    assert (info.message_count, info.tool_call_count, info.api_call_count) == (0, 0, 0)
    assert info.ended_at is None and info.parent_session_id is None
    assert info.last_active == clock.now
    assert await store.get_session("nope") is None


async def test_upsert_fills_only_missing_fields(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.create_session(
        "s", "telegram", model="m1", model_config={"a": 1}, system_prompt="p1", cwd="/one"
    )
    await store.create_session(
        "s", "web", model="m2", model_config={"b": 2}, system_prompt="p2", cwd="/two", chat_id="c"
    )
    info = await store.get_session("s")
    assert info is not None
    assert info.source == "cli"
    assert info.model == "m1"
    assert dict(info.model_config) == {"a": 1}
    assert info.system_prompt == "p1"
    assert info.identity == {"cwd": "/one", "chat_id": "c"}


async def test_ensure_session_is_the_same_upsert(store: InMemorySessionStore) -> None:
    await store.ensure_session("s")
    await store.ensure_session("s", "cli", model="m")
    await store.ensure_session("s", "web", model="other")
    info = await store.get_session("s")
    assert info is not None and (info.source, info.model) == ("unknown", "m")


async def test_create_session_refuses_bad_input(store: InMemorySessionStore) -> None:
    with pytest.raises(TypeError, match="colour"):
        await store.create_session("s", "cli", colour="blue")
    with pytest.raises(SessionNotFound):
        await store.create_session("child", "cli", parent_session_id="missing")
    with pytest.raises(SessionStoreError):
        await store.create_session("", "cli")
    await store.create_session("a", "cli")
    await store.create_session("b", "cli", parent_session_id="a")
    with pytest.raises(SessionStoreError, match="cycle"):
        await store.create_session("a", "cli", parent_session_id="b")
    assert await store.get_session("child") is None


async def test_model_config_is_copied_not_shared(store: InMemorySessionStore) -> None:
    config: dict[str, Any] = {"nested": {"k": [1]}}
    await store.create_session("s", "cli", model_config=config)
    config["nested"]["k"].append(2)
    info = await store.get_session("s")
    assert info is not None and dict(info.model_config) == {"nested": {"k": [1]}}
    with pytest.raises(SessionStoreError, match="JSON"):
        await store.create_session("t", "cli", model_config={"x": object()})


async def test_child_inherits_workspace_and_compression_child_inherits_chat(
    store: InMemorySessionStore,
) -> None:
    identity = {"cwd": "/w", "git_branch": "main", "profile_name": "p", "chat_id": "c9"}
    await store.create_session("root", "telegram", **identity)
    await store.create_session("plain", "telegram", parent_session_id="root")
    plain = await store.get_session("plain")
    assert plain is not None
    assert plain.identity == {"cwd": "/w", "git_branch": "main", "profile_name": "p"}

    await store.end_session("root", "compression")
    await store.create_session("cont", "telegram", parent_session_id="root", cwd="/own")
    cont = await store.get_session("cont")
    assert cont is not None
    assert cont.identity == {
        "cwd": "/own",
        "git_branch": "main",
        "profile_name": "p",
        "chat_id": "c9",
    }


async def test_resolve_session_id(store: InMemorySessionStore) -> None:
    for sid in ("20260101_aaa", "20260101_abb", "20260202_ccc"):
        await store.create_session(sid, "cli")
    assert await store.resolve_session_id("20260101_aaa") == "20260101_aaa"
    assert await store.resolve_session_id("20260202") == "20260202_ccc"
    assert await store.resolve_session_id("20260101_a") is None  # ambiguous
    assert await store.resolve_session_id("2027") is None
    assert await store.resolve_session_id("") is None


# -- messages ---------------------------------------------------------------------------


async def test_counters_count_messages_and_tool_calls(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", user("hi"))
    await store.append_message("s", asst(None, call("c1"), call("c2")))
    await store.append_messages("s", [result("c1", "one"), result("c2", "two"), asst("done")])
    info = await store.get_session("s")
    assert info is not None and (info.message_count, info.tool_call_count) == (5, 2)


async def test_append_to_a_missing_session_fails(store: InMemorySessionStore) -> None:
    with pytest.raises(SessionNotFound):
        await store.append_message("nope", user("x"))
    with pytest.raises(SessionNotFound):
        await store.append_messages("nope", [user("x")])


async def test_row_ids_strictly_increase_across_the_store(store: InMemorySessionStore) -> None:
    await store.create_session("a", "cli")
    await store.create_session("b", "cli")
    ids = [
        await store.append_message("a", user("1")),
        await store.append_message("b", user("2")),
        *await store.append_messages("a", [user("3"), user("4")]),
        await store.append_message("b", user("5")),
    ]
    assert ids == sorted(set(ids))
    await store.delete_session("b")
    assert await store.append_message("a", user("6")) > ids[-1]


async def test_batch_timestamps_strictly_increase(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    await store.create_session("s", "cli")
    await store.append_messages("s", [user(str(i)) for i in range(50)])
    stamps = [m.timestamp for m in await store.get_messages("s")]
    assert stamps[0] == clock.now
    steps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(0 < step < 2e-6 for step in steps)  # +1e-6, as float rounding allows
    assert await store.append_messages("s", []) == []


async def test_assistant_message_round_trips_losslessly(store: InMemorySessionStore) -> None:
    message = AssistantMessage(
        content="Let me look.",
        reasoning="The user wants the file.",
        finish_reason="tool_calls",
        tool_calls=(
            ToolCall(
                id="call_1",
                name="read_file",
                arguments='{"path": "a/b.py"}',
                extra={"call_id": "fc_1", "extra_content": {"google": {"thought_signature": "x"}}},
            ),
            ToolCall(id="call_2", name="terminal", arguments='{"command":"ls"}'),
        ),
        provider_data={
            "reasoning_content": "raw reasoning",
            "reasoning_details": [
                {"type": "reasoning.text", "text": "step 1", "signature": "sig", "index": 0},
                {"type": "reasoning.encrypted", "data": "opaque=="},
            ],
            "anthropic_content_blocks": [
                {"type": "thinking", "thinking": "hmm", "signature": "abc"},
                {"type": "redacted_thinking", "data": "zzz"},
            ],
        },
        extra={"vendor_key": {"nested": [1, 2, None]}},
    )
    others: list[Message] = [
        SystemMessage(content="be brief"),
        UserMessage(
            content=(
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            )
        ),
        ToolMessage(tool_call_id="call_1", content="print(1)", name="read_file", is_error=True),
    ]
    await store.create_session("s", "cli")
    await store.append_message("s", message, token_count=42)
    await store.append_messages("s", others)
    stored = await store.get_messages("s")
    assert [m.message for m in stored] == [message, *others]
    assert stored[0].token_count == 42
    assert await store.get_conversation("s") == [message, *others]


async def test_returned_messages_do_not_alias_stored_ones(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", AssistantMessage(content="x", extra={"k": [1]}))
    first = (await store.get_conversation("s"))[0]
    first.extra["k"].append(2)
    assert (await store.get_conversation("s"))[0].extra == {"k": [1]}


async def test_unstorable_message_is_refused_whole(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    bad = UserMessage(content="x", extra={"blob": object()})
    with pytest.raises(SessionStoreError):
        await store.append_messages("s", [user("ok"), bad])
    assert await store.get_messages("s") == []
    info = await store.get_session("s")
    assert info is not None and info.message_count == 0


async def test_get_messages_orders_by_id_and_pages(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    ids = [
        await store.append_message("s", user("late clock"), timestamp=300.0),
        await store.append_message("s", user("early clock"), timestamp=100.0),
        await store.append_message("s", user("middle clock"), timestamp=200.0),
    ]
    rows = await store.get_messages("s")
    assert [r.id for r in rows] == ids
    assert [r.timestamp for r in rows] == [300.0, 100.0, 200.0]
    assert all(r.session_id == "s" and r.active and not r.compacted for r in rows)
    assert [r.id for r in await store.get_messages("s", limit=2)] == ids[:2]
    assert [r.id for r in await store.get_messages("s", offset=1)] == ids[1:]
    assert [r.id for r in await store.get_messages("s", after_id=ids[0])] == ids[1:]
    assert [r.id for r in await store.get_messages("s", offset=1, limit=1)] == [ids[1]]
    assert await store.get_messages("missing") == []


async def test_replace_messages_rewrites_transcript_and_counters(
    store: InMemorySessionStore,
) -> None:
    await store.create_session("s", "cli")
    await store.append_messages("s", [user("a"), asst(None, call("c1")), result("c1", "r")])
    await store.replace_messages("s", [user("fresh"), asst("ok")])
    assert await contents(store, "s") == ["fresh", "ok"]
    info = await store.get_session("s")
    assert info is not None and (info.message_count, info.tool_call_count) == (2, 0)


# -- metadata, tokens, end ---------------------------------------------------------------


async def test_update_metadata(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli", model="m", model_config={"keep": 1, "drop": 2}, cwd="/a")
    await store.update_metadata(
        "s",
        title="My chat",
        model="m2",
        model_config={"drop": None, "new": [1]},
        cwd=None,
        chat_id="c",
    )
    info = await store.get_session("s")
    assert info is not None
    assert (info.title, info.model) == ("My chat", "m2")
    assert dict(info.model_config) == {"keep": 1, "new": [1]}
    assert info.identity == {"chat_id": "c"}

    with pytest.raises(TypeError):
        await store.update_metadata("s", colour="red")
    with pytest.raises(SessionNotFound):
        await store.update_metadata("missing", title="x")
    await store.create_session("t", "cli")
    with pytest.raises(SessionStoreError, match="already used"):
        await store.update_metadata("t", title="My chat")
    await store.update_metadata("s", title="My chat")  # its own title is fine


async def test_update_token_counts_delta_and_absolute(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.update_token_counts(
        "s", Usage(input_tokens=10, output_tokens=5, cache_read_tokens=3), api_calls=1, model="m"
    )
    await store.update_token_counts(
        "s", Usage(input_tokens=1, output_tokens=1, reasoning_tokens=7), api_calls=1, model="other"
    )
    info = await store.get_session("s")
    assert info is not None
    assert info.usage == Usage(
        input_tokens=11, output_tokens=6, cache_read_tokens=3, reasoning_tokens=7
    )
    assert (info.api_call_count, info.model) == (2, "m")

    await store.update_token_counts("s", Usage(input_tokens=100), api_calls=9, absolute=True)
    info = await store.get_session("s")
    assert info is not None
    assert (info.usage, info.api_call_count) == (Usage(input_tokens=100), 9)
    with pytest.raises(SessionNotFound):
        await store.update_token_counts("missing", Usage())


async def test_end_keeps_first_reason_and_reopen_clears(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    await store.create_session("s", "cli")
    clock.advance(5)
    await store.end_session("s", "user_exit")
    clock.advance(5)
    await store.end_session("s", "timeout")
    info = await store.get_session("s")
    assert info is not None and (info.end_reason, info.ended_at) == ("user_exit", clock.now - 5)
    await store.reopen_session("s")
    info = await store.get_session("s")
    assert info is not None and (info.end_reason, info.ended_at) == (None, None)


async def test_append_after_compression_end_is_refused(store: InMemorySessionStore) -> None:
    await store.create_session("done", "cli")
    await store.end_session("done", "user_exit")
    await store.append_message("done", user("still fine"))

    await store.create_session("s", "cli")
    await store.end_session("s", "compression")
    with pytest.raises(SessionClosedForAppend):
        await store.append_message("s", user("x"))
    with pytest.raises(SessionClosedForAppend):
        await store.append_messages("s", [user("x")])
    await store.reopen_session("s")
    await store.append_message("s", user("x"))


# -- system prompts -----------------------------------------------------------------------


async def test_system_prompts_are_deduplicated_and_collected(store: InMemorySessionStore) -> None:
    await store.create_session("a", "cli", system_prompt="You are Hermes.")
    await store.create_session("b", "cli", system_prompt="You are Hermes.")
    assert store.prompt_count() == 1

    await store.create_session("a", "cli", system_prompt="ignored: hash already set")
    assert store.prompt_count() == 1

    await store.update_system_prompt("a", "Version two.")
    assert store.prompt_count() == 2
    await store.update_system_prompt("b", "Version two.")
    assert store.prompt_count() == 1
    a, b = await store.get_session("a"), await store.get_session("b")
    assert a is not None and b is not None
    assert a.system_prompt == b.system_prompt == "Version two."

    await store.delete_session("a")
    assert store.prompt_count() == 1
    await store.delete_session("b")
    assert store.prompt_count() == 0


# -- delete ---------------------------------------------------------------------------------


async def test_delete_session_removes_delegates_and_orphans_others(
    store: InMemorySessionStore,
) -> None:
    await store.create_session("root", "cli")
    await store.append_message("root", user("hello"))
    await store.create_session(
        "sub", "cli", parent_session_id="root", model_config={"_delegate_from": "root"}
    )
    await store.create_session("tool_child", "tool", parent_session_id="root")
    await store.create_session("sub_of_sub", "tool", parent_session_id="sub")
    await store.create_session("sub_keep", "cli", parent_session_id="sub")
    await store.create_session("cont", "cli", parent_session_id="root")
    await store.create_session(
        "branch", "cli", parent_session_id="root", model_config={"_branched_from": "root"}
    )
    await store.append_message("sub", user("delegated work"))

    assert await store.delete_session("root") is True
    for gone in ("root", "sub", "tool_child", "sub_of_sub"):
        assert await store.get_session(gone) is None
        assert await store.get_messages(gone) == []
    for orphan in ("cont", "branch", "sub_keep"):
        info = await store.get_session(orphan)
        assert info is not None and info.parent_session_id is None
    assert await store.search_messages("delegated") == []
    assert await store.delete_session("root") is False


# -- search ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("it's", "Well, it's complicated."),
        ("a/b.py", "Edit a/b.py then run tests."),
        ("user@host", "ssh user@host -p 22"),
        ("multi-agent", "A multi-agent setup."),
        ("why?", "But why? Nobody knows."),
        ("WHY?", "But why? Nobody knows."),
        ("Complicated it's", "Well, it's complicated."),
        ('"run tests"', "Edit a/b.py then run   tests."),
    ],
)
async def test_search_finds_literal_punctuated_words(
    store: InMemorySessionStore, query: str, text: str
) -> None:
    await store.create_session("s", "cli")
    await store.append_messages("s", [user("decoy without the words"), user(text)])
    hits = await store.search_messages(query)
    assert [h.snippet.replace(">>>", "").replace("<<<", "") for h in hits] == [text]


async def test_search_requires_every_word(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.append_messages("s", [user("alpha beta"), user("alpha gamma")])
    assert len(await store.search_messages("alpha")) == 2
    assert [h.snippet for h in await store.search_messages("gamma ALPHA")] == [">>>alpha<<< gamma"]
    assert await store.search_messages("alpha delta") == []
    assert await store.search_messages("   ") == []


async def test_search_hit_fields_snippet_and_context(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    long_text = (
        " ".join(f"w{i}" for i in range(100)) + " needle " + " ".join(f"v{i}" for i in range(100))
    )
    await store.create_session("s", "cli", model="m1")
    ids = await store.append_messages(
        "s", [user("before " + "x" * 300), asst(long_text), user("after")]
    )
    [hit] = await store.search_messages("Needle")
    assert (hit.id, hit.session_id, hit.role, hit.source, hit.model) == (
        ids[1],
        "s",
        "assistant",
        "cli",
        "m1",
    )
    assert hit.session_started == clock.now
    assert hit.snippet.startswith("...") and hit.snippet.endswith("...")
    assert ">>>needle<<<" in hit.snippet
    assert len(hit.snippet.replace("...", "").split()) == 40
    assert [c["role"] for c in hit.context] == ["user", "assistant", "user"]
    assert hit.context[0]["content"] == ("before " + "x" * 300)[:200]
    assert hit.context[1]["content"] == long_text[:200]
    assert hit.context[2]["content"] == "after"


async def test_search_covers_tool_names_and_call_arguments(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.append_messages(
        "s",
        [
            asst(None, call("c1", "web_search", '{"query": "zebra migration"}')),
            result("c1", "results here", name="web_search"),
        ],
    )
    [by_args] = await store.search_messages("zebra")
    assert by_args.role == "assistant" and ">>>zebra<<<" in by_args.snippet
    hits = await store.search_messages("web_search")
    assert [h.role for h in hits] == ["tool", "assistant"]
    assert hits[0].tool_name == "web_search"


async def test_search_filters_sort_and_paging(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    await store.create_session("cli1", "cli")
    await store.create_session("tg1", "telegram")
    await store.create_session("tool1", "tool")
    for sid in ("cli1", "tg1", "tool1"):
        clock.advance(1)
        await store.append_message(sid, user(f"topic from {sid}"))
        clock.advance(1)
        await store.append_message(sid, asst(f"topic answer {sid}"))

    newest = await store.search_messages("topic")
    assert [h.session_id for h in newest] == ["tool1", "tool1", "tg1", "tg1", "cli1", "cli1"]
    oldest = await store.search_messages("topic", sort="oldest")
    assert [h.id for h in oldest] == [h.id for h in reversed(newest)]
    assert [h.id for h in await store.search_messages("topic", limit=2, offset=1)] == [
        h.id for h in newest[1:3]
    ]
    assert {h.session_id for h in await store.search_messages("topic", source_filter=["cli"])} == {
        "cli1"
    }
    assert {
        h.session_id for h in await store.search_messages("topic", exclude_sources=["tool", "cli"])
    } == {"tg1"}
    assert {h.role for h in await store.search_messages("topic", role_filter=["user"])} == {"user"}
    assert await store.search_messages("topic", limit=0) == []


async def test_search_scope_includes_compacted_rows(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.append_messages("s", [user("original walrus"), asst("noted")])
    await store.archive_and_compact("s", [user("summary of the chat")])
    [hit] = await store.search_messages("walrus")
    assert hit.session_id == "s"
    assert len(await store.search_messages("walrus", include_inactive=True)) == 1


async def test_search_sessions_orders_by_last_activity(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    await store.create_session("old", "cli")
    clock.advance(10)
    await store.create_session("mid", "telegram")
    clock.advance(10)
    await store.create_session("new", "cli")
    clock.advance(10)
    await store.append_message("old", user("bump"))
    assert [s.id for s in await store.search_sessions()] == ["old", "new", "mid"]
    assert [s.id for s in await store.search_sessions(source="cli")] == ["old", "new"]
    assert [s.id for s in await store.search_sessions(limit=1, offset=1)] == ["new"]
    old = (await store.search_sessions())[0]
    assert old.last_active == clock.now


# -- lineage ----------------------------------------------------------------------------------


async def test_resolve_resume_follows_compression_and_skips_forks(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    await store.create_session("root", "cli")
    await store.append_message("root", user("first"))
    clock.advance(1)
    await store.publish_compression_child("root", "c1", [user("summary 1")])
    clock.advance(1)
    await store.create_session(
        "delegate", "cli", parent_session_id="c1", model_config={"_delegate_from": "c1"}
    )
    await store.create_session("toolkid", "tool", parent_session_id="c1")
    await store.create_session(
        "branch", "cli", parent_session_id="c1", model_config={"_branched_from": "c1"}
    )
    for sid in ("delegate", "toolkid", "branch"):
        await store.append_message(sid, user("side work"))
    assert await store.resolve_resume_session_id("root") == "c1"
    assert await store.resolve_resume_session_id("c1") == "c1"

    clock.advance(1)
    await store.publish_compression_child("c1", "c2", [user("summary 2")])
    assert await store.resolve_resume_session_id("root") == "c2"

    clock.advance(1)
    await store.create_session("empty_cont", "cli", parent_session_id="c2")
    assert await store.resolve_resume_session_id("root") == "c2"
    await store.append_message("empty_cont", user("continued"))
    assert await store.resolve_resume_session_id("root") == "empty_cont"

    assert await store.resolve_resume_session_id("unknown") == "unknown"
    assert await store.resolve_resume_session_id("branch") == "branch"


async def test_publish_compression_child(store: InMemorySessionStore, clock: FakeClock) -> None:
    await store.create_session(
        "p",
        "telegram",
        model="m",
        model_config={"k": 1, "_reset_from": "x"},
        system_prompt="sys",
        chat_id="c",
        cwd="/w",
    )
    await store.append_messages("p", [user("q1"), asst("a1"), user("q2"), asst("a2")])
    assert await store.try_acquire_compression_lock("p", "me")
    with pytest.raises(CompressionInProgress):
        await store.publish_compression_child("p", "child", [user("x")], lock_holder="other")
    child_id = await store.publish_compression_child(
        "p", "child", [user("summary"), user("q2"), asst("a2")], lock_holder="me"
    )
    assert child_id == "child"
    parent, child = await store.get_session("p"), await store.get_session("child")
    assert parent is not None and child is not None
    assert (parent.end_reason, parent.ended_at) == ("compression", clock.now)
    assert child.parent_session_id == "p"
    assert (child.source, child.model, child.system_prompt) == ("telegram", "m", "sys")
    assert dict(child.model_config) == {"k": 1}
    assert child.identity == {"chat_id": "c", "cwd": "/w"}
    assert child.message_count == 3
    assert store.prompt_count() == 1
    with pytest.raises(SessionClosedForAppend):
        await store.append_message("p", user("late"))
    with pytest.raises(SessionClosedForAppend):
        await store.publish_compression_child("p", "again", [user("x")], lock_holder="me")


async def test_conversation_with_ancestors_and_resume_conversations(
    store: InMemorySessionStore,
) -> None:
    await store.create_session("root", "cli")
    await store.append_messages("root", [user("q1"), asst("a1"), user("q2"), asst("a2")])
    await store.publish_compression_child(
        "root", "tip", [user("[summary] q1/a1"), user("q2"), asst("a2")]
    )
    await store.append_messages("tip", [user("q3"), asst("a3")])

    assert await contents(store, "tip") == ["[summary] q1/a1", "q2", "a2", "q3", "a3"]
    with_ancestors = await contents(store, "tip", include_ancestors=True)
    assert with_ancestors == ["q1", "a1", "q2", "a2", "[summary] q1/a1", "a2", "q3", "a3"]

    model, display = await store.get_resume_conversations("tip")
    assert [m.content for m in model] == ["[summary] q1/a1\n\nq2", "a2", "q3", "a3"]
    assert [m.content for m in display] == with_ancestors

    # A branch owns its transcript: no ancestors.
    await store.create_session(
        "br", "cli", parent_session_id="tip", model_config={"_branched_from": "tip"}
    )
    await store.append_message("br", user("q3"))
    assert await contents(store, "br", include_ancestors=True) == ["q3"]


async def test_get_conversation_repair(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli")
    await store.append_messages("s", [user("a"), user("b"), asst(None, call("c1"))])
    raw = await store.get_conversation("s")
    assert len(raw) == 3
    repaired = await store.get_conversation("s", repair=True)
    assert repaired[0] == UserMessage(content="a\n\nb")
    assert isinstance(repaired[-1], ToolMessage) and repaired[-1].tool_call_id == "c1"
    assert await store.get_conversation("s") == raw  # stored transcript untouched


# -- compression lock and compaction -------------------------------------------------------


async def test_compression_lock_acquire_expire_refresh_release(
    store: InMemorySessionStore, clock: FakeClock
) -> None:
    assert await store.get_compression_lock_holder("s") is None
    assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=10)
    assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=10)  # re-entrant
    assert not await store.try_acquire_compression_lock("s", "b", ttl_seconds=10)
    assert await store.get_compression_lock_holder("s") == "a"

    clock.advance(10)
    assert await store.get_compression_lock_holder("s") == "a"  # expires strictly after ttl
    assert await store.refresh_compression_lock("s", "a", ttl_seconds=10)
    assert not await store.refresh_compression_lock("s", "b", ttl_seconds=10)
    clock.advance(10.5)
    assert await store.get_compression_lock_holder("s") is None
    assert await store.try_acquire_compression_lock("s", "b", ttl_seconds=10)
    assert not await store.refresh_compression_lock("s", "a")

    await store.release_compression_lock("s", "a")  # not the holder: no effect
    assert await store.get_compression_lock_holder("s") == "b"
    await store.release_compression_lock("s", "b")
    assert await store.get_compression_lock_holder("s") is None
    assert not await store.try_acquire_compression_lock("s", "")


async def test_archive_and_compact_in_place(store: InMemorySessionStore) -> None:
    await store.create_session("s", "cli", model_config={"keep": 1, "stale": 2})
    old_ids = await store.append_messages(
        "s", [user("q1"), asst(None, call("c1")), result("c1", "r1"), asst("a1")]
    )
    watermark = old_ids[-1]
    late_id = await store.append_message("s", user("arrived while summarising"), token_count=7)
    assert await store.try_acquire_compression_lock("s", "me")

    with pytest.raises(CompressionInProgress):
        await store.archive_and_compact("s", [user("summary")], lock_holder="someone")
    with pytest.raises(CompressionInProgress):
        await store.archive_and_compact("s", [user("summary")])

    count = await store.archive_and_compact(
        "s",
        [user("summary"), asst("ack")],
        model_config_patch={"stale": None, "compressions": 1},
        watermark=watermark,
        lock_holder="me",
    )
    assert count == 3
    assert await contents(store, "s") == ["summary", "ack", "arrived while summarising"]
    info = await store.get_session("s")
    assert info is not None
    assert (info.message_count, info.tool_call_count) == (3, 0)
    assert dict(info.model_config) == {"keep": 1, "compressions": 1}

    every = await store.get_messages("s", include_inactive=True)
    archived = [m for m in every if not m.active]
    assert [m.id for m in archived] == [*old_ids, late_id]
    assert all(m.compacted for m in archived)
    active = [m for m in every if m.active]
    assert all(m.id > late_id for m in active)
    assert active[-1].token_count == 7

    # Display history shows the late row once, at its re-cloned place.
    _, display = await store.get_resume_conversations("s")
    assert [m.content for m in display][-3:] == ["summary", "ack", "arrived while summarising"]
    assert [m.content for m in display].count("arrived while summarising") == 1


async def test_archive_and_compact_refuses_closed_and_missing(
    store: InMemorySessionStore,
) -> None:
    with pytest.raises(SessionNotFound):
        await store.archive_and_compact("missing", [user("x")])
    await store.create_session("s", "cli")
    await store.end_session("s", "compression")
    with pytest.raises(SessionClosedForAppend):
        await store.archive_and_compact("s", [user("x")])


# -- read-only and closed -----------------------------------------------------------------

Op = Callable[[InMemorySessionStore], Awaitable[object]]

WRITES: list[Op] = [
    lambda s: s.create_session("s", "cli"),
    lambda s: s.ensure_session("s"),
    lambda s: s.update_system_prompt("s", "p"),
    lambda s: s.update_metadata("s", title="t"),
    lambda s: s.update_token_counts("s", Usage()),
    lambda s: s.end_session("s", "done"),
    lambda s: s.reopen_session("s"),
    lambda s: s.delete_session("s"),
    lambda s: s.append_message("s", user("x")),
    lambda s: s.append_messages("s", [user("x")]),
    lambda s: s.replace_messages("s", [user("x")]),
    lambda s: s.try_acquire_compression_lock("s", "h"),
    lambda s: s.refresh_compression_lock("s", "h"),
    lambda s: s.release_compression_lock("s", "h"),
    lambda s: s.archive_and_compact("s", [user("x")]),
    lambda s: s.publish_compression_child("s", "c", [user("x")]),
]

READS: list[Op] = [
    lambda s: s.get_session("s"),
    lambda s: s.resolve_session_id("s"),
    lambda s: s.get_messages("s"),
    lambda s: s.get_conversation("s", include_ancestors=True),
    lambda s: s.search_messages("x"),
    lambda s: s.search_sessions(),
    lambda s: s.resolve_resume_session_id("s"),
    lambda s: s.get_resume_conversations("s"),
    lambda s: s.get_compression_lock_holder("s"),
]


@pytest.mark.parametrize("op", WRITES)
async def test_read_only_store_refuses_writes(op: Op) -> None:
    store = InMemorySessionStore(read_only=True)
    with pytest.raises(ReadOnlyStore):
        await op(store)


@pytest.mark.parametrize("op", READS)
async def test_read_only_store_allows_reads(op: Op) -> None:
    await op(InMemorySessionStore(read_only=True))


@pytest.mark.parametrize("op", WRITES + READS)
async def test_every_method_fails_after_close(op: Op) -> None:
    store = InMemorySessionStore()
    await store.create_session("s", "cli")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreClosed):
        await op(store)


async def test_async_context_manager_closes() -> None:
    async with InMemorySessionStore() as store:
        await store.create_session("s", "cli")
    with pytest.raises(StoreClosed):
        await store.get_session("s")
