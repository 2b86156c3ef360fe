"""``SessionStoreContract``: the behaviour every session store must show.

One suite holds the in-memory fake, SQLite and PostgreSQL to the same semantics, so the
engine tests that trust the fake also hold for the store a user runs, and a user can swap
storage by changing one URL. Subclass it once per backend and provide three fixtures:

``store``
    an async fixture yielding a fresh, empty store, closed after the test;
``make_store``
    ``make_store(read_only=False)`` opening a *second* store on the same backing data
    (an awaitable), for reopen and read-only tests; the fixture closes what it made.
    Return ``None`` if the backend cannot, and those tests skip;
``prompt_counter``
    an async callable answering how many distinct system prompts are stored, so prompt
    de-duplication and garbage collection are checked on the real data.

Everything here holds for token-based full-text search (FTS5, ``tsvector``) as well as for
substring search: queries use whole words. Times come from real clocks (SQL backends stamp
rows themselves), so expiry is proven with short TTLs and a real ``anyio.sleep``.
The ``anyio_backend`` fixture must be available (``tests/conftest.py`` provides it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import pytest

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
from hermes_core.ports.sessions import IDENTITY_FIELDS, SessionStore

__all__ = ["PromptCounter", "SessionStoreContract", "StoreFactory"]


class StoreFactory(Protocol):
    """Opens another store over the same data as the ``store`` fixture."""

    def __call__(self, read_only: bool = False) -> Awaitable[SessionStore]: ...


PromptCounter = Callable[[], Awaitable[int]]
"""Answers how many distinct system prompts the backing data holds."""

Op = Callable[[SessionStore], Awaitable[object]]

_CLOCK_SLACK = 5.0
"""Seconds a server clock may differ from ours when checking a stamp is 'now'."""


def _user(text: str) -> UserMessage:
    return UserMessage(content=text)


def _asst(text: str | None = None, *calls: ToolCall) -> AssistantMessage:
    return AssistantMessage(content=text, tool_calls=calls)


def _call(call_id: str, name: str = "read_file", arguments: str = "{}") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _result(call_id: str, text: str, name: str | None = "read_file") -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, content=text, name=name)


async def _contents(store: SessionStore, session_id: str, **kw: Any) -> list[Any]:
    return [m.content for m in await store.get_conversation(session_id, **kw)]


def _plain(snippet: str) -> str:
    return snippet.replace(">>>", "").replace("<<<", "")


_WRITES: dict[str, Op] = {
    "create_session": lambda s: s.create_session("s", "cli"),
    "ensure_session": lambda s: s.ensure_session("s"),
    "update_system_prompt": lambda s: s.update_system_prompt("s", "p"),
    "update_metadata": lambda s: s.update_metadata("s", title="t"),
    "update_token_counts": lambda s: s.update_token_counts("s", Usage()),
    "end_session": lambda s: s.end_session("s", "done"),
    "reopen_session": lambda s: s.reopen_session("s"),
    "delete_session": lambda s: s.delete_session("s"),
    "append_message": lambda s: s.append_message("s", _user("x")),
    "append_messages": lambda s: s.append_messages("s", [_user("x")]),
    "replace_messages": lambda s: s.replace_messages("s", [_user("x")]),
    "try_acquire_compression_lock": lambda s: s.try_acquire_compression_lock("s", "h"),
    "refresh_compression_lock": lambda s: s.refresh_compression_lock("s", "h"),
    "release_compression_lock": lambda s: s.release_compression_lock("s", "h"),
    "archive_and_compact": lambda s: s.archive_and_compact("s", [_user("x")]),
    "publish_compression_child": lambda s: s.publish_compression_child("s", "c", [_user("x")]),
}

_READS: dict[str, Op] = {
    "get_session": lambda s: s.get_session("s"),
    "resolve_session_id": lambda s: s.resolve_session_id("s"),
    "get_messages": lambda s: s.get_messages("s"),
    "get_conversation": lambda s: s.get_conversation("s", include_ancestors=True),
    "search_messages": lambda s: s.search_messages("x"),
    "search_sessions": lambda s: s.search_sessions(),
    "resolve_resume_session_id": lambda s: s.resolve_resume_session_id("s"),
    "get_resume_conversations": lambda s: s.get_resume_conversations("s"),
    "get_compression_lock_holder": lambda s: s.get_compression_lock_holder("s"),
}

_MISSING_SESSION_WRITES: dict[str, Op] = {
    "update_system_prompt": lambda s: s.update_system_prompt("nope", "p"),
    "update_metadata": lambda s: s.update_metadata("nope", title="t"),
    "update_token_counts": lambda s: s.update_token_counts("nope", Usage(input_tokens=1)),
    "end_session": lambda s: s.end_session("nope", "done"),
    "reopen_session": lambda s: s.reopen_session("nope"),
    "append_message": lambda s: s.append_message("nope", _user("x")),
    "append_messages": lambda s: s.append_messages("nope", [_user("x")]),
    "replace_messages": lambda s: s.replace_messages("nope", [_user("x")]),
    "archive_and_compact": lambda s: s.archive_and_compact("nope", [_user("x")]),
    "publish_compression_child": lambda s: s.publish_compression_child("nope", "c", [_user("x")]),
}

_PUNCTUATED = [
    ("it's", "Well, it's complicated."),
    ("a/b.py", "Edit a/b.py then run tests."),
    ("user@host", "ssh user@host -p 22"),
    ("multi-agent", "A multi-agent setup."),
    ("why?", "But why? Nobody knows."),
    ("WHY?", "But why? Nobody knows."),
    ("Complicated it's", "Well, it's complicated."),
    ('"run tests"', "Edit a/b.py then run   tests."),
]
"""(query, the text it must find): raw text that is not valid FTS5 syntax (WIRE.md §4.19)."""

_SYNTAX = [
    ('"unbalanced quote', 'an "unbalanced quote here'),
    ("glob*", "match glob* patterns"),
    ("print(x)", "then call print(x) twice"),
    ("NEAR", "the shop is NEAR the river"),
    ("cats AND dogs", "raining cats AND dogs today"),
    ("col:value", "set col:value please"),
    ("x^2", "compute x^2 quickly"),
    ("{braces}", "json {braces} there"),
    ("+plus -minus", "both +plus -minus signs"),
]
"""Queries holding FTS5 operators, each with a text containing it literally."""

_DECOY = "unrelated filler line"
"""Shares no word (nor substring of a query word) with any query above."""

_OPERATORS_ALONE = ['"', '""', "*", "(", ")", "()", ":", "-", "^", "AND", "OR", "NOT", "NEAR(a b)"]
"""Queries of nothing but FTS5 syntax: there may be nothing to find, but never an error."""


class SessionStoreContract:
    """Abstract contract; subclasses provide ``store``, ``prompt_counter`` and, ideally,
    ``make_store``."""

    # -- fixtures the subclass provides ------------------------------------------------

    @pytest.fixture
    async def store(self) -> AsyncIterator[SessionStore]:
        """A fresh, empty store; close it after the test."""
        raise NotImplementedError("provide a `store` fixture yielding a fresh, empty store")
        yield  # pragma: no cover - makes this an async generator like the overrides

    @pytest.fixture
    def make_store(self) -> StoreFactory | None:
        """Opens a second store on the ``store``'s data; ``None`` skips those tests."""
        return None

    @pytest.fixture
    def prompt_counter(self) -> PromptCounter:
        """Counts the distinct system prompts stored (every backend must provide one)."""
        raise NotImplementedError(
            "provide `prompt_counter`: an async callable counting stored system prompts"
        )

    @pytest.fixture
    def second_store(self, make_store: StoreFactory | None) -> StoreFactory:
        """``make_store``, or a skip for a backend that cannot share its data."""
        if make_store is None:
            pytest.skip("this backend cannot open a second store on the same data")
        return make_store

    # -- identity and basics ---------------------------------------------------------------

    @pytest.mark.anyio
    async def test_store_satisfies_the_port(self, store: SessionStore) -> None:
        assert isinstance(store, SessionStore)

    @pytest.mark.anyio
    async def test_create_session_and_get_session(self, store: SessionStore) -> None:
        before = time.time()
        assert await store.create_session("s1", "cli", model="m1", cwd="/w", user_id="u") == "s1"
        after = time.time()
        info = await store.get_session("s1")
        assert info is not None
        assert (info.id, info.source, info.model) == ("s1", "cli", "m1")
        assert before - _CLOCK_SLACK <= info.started_at <= after + _CLOCK_SLACK
        assert info.identity == {"cwd": "/w", "user_id": "u"}
        assert (info.message_count, info.tool_call_count, info.api_call_count) == (0, 0, 0)
        assert info.usage == Usage()
        assert info.ended_at is None and info.end_reason is None
        assert info.parent_session_id is None and info.title is None
        assert info.system_prompt is None and dict(info.model_config) == {}
        assert info.last_active == info.started_at
        assert await store.get_session("nope") is None

    @pytest.mark.anyio
    async def test_every_identity_field_round_trips(self, store: SessionStore) -> None:
        identity = {name: f"{name}-value" for name in IDENTITY_FIELDS}
        identity["origin_json"] = '{"platform": "telegram", "chat": 42}'
        await store.create_session("s", "telegram", **identity)
        info = await store.get_session("s")
        assert info is not None and dict(info.identity) == identity

    @pytest.mark.anyio
    async def test_upsert_fills_only_missing_fields(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.create_session(
            "s", "telegram", model="m1", model_config={"a": 1}, system_prompt="p1", cwd="/one"
        )
        await store.create_session(
            "s",
            "web",
            model="m2",
            model_config={"b": 2},
            system_prompt="p2",
            cwd="/two",
            chat_id="c",
        )
        info = await store.get_session("s")
        assert info is not None
        assert (info.source, info.model, info.system_prompt) == ("cli", "m1", "p1")
        assert dict(info.model_config) == {"a": 1}
        assert info.identity == {"cwd": "/one", "chat_id": "c"}

    @pytest.mark.anyio
    async def test_ensure_session_is_the_same_upsert(self, store: SessionStore) -> None:
        assert await store.ensure_session("s") == "s"
        await store.ensure_session("s", "cli", model="m")
        await store.ensure_session("s", "web", model="other")
        info = await store.get_session("s")
        assert info is not None and (info.source, info.model) == ("unknown", "m")

    @pytest.mark.anyio
    async def test_create_session_refuses_bad_input(self, store: SessionStore) -> None:
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
        await store.create_session("self", "cli")
        with pytest.raises(SessionStoreError, match="cycle"):
            await store.create_session("self", "cli", parent_session_id="self")
        assert await store.get_session("child") is None
        assert await store.get_session("s") is None
        info = await store.get_session("a")
        assert info is not None and info.parent_session_id is None

    @pytest.mark.anyio
    async def test_model_config_is_copied_and_must_be_json(self, store: SessionStore) -> None:
        config: dict[str, Any] = {"nested": {"k": [1]}, "flag": True, "none": None}
        await store.create_session("s", "cli", model_config=config)
        config["nested"]["k"].append(2)
        info = await store.get_session("s")
        assert info is not None
        assert dict(info.model_config) == {"nested": {"k": [1]}, "flag": True, "none": None}
        with pytest.raises(SessionStoreError, match="JSON"):
            await store.create_session("t", "cli", model_config={"x": object()})
        assert await store.get_session("t") is None

    @pytest.mark.anyio
    async def test_child_inherits_workspace_and_compression_child_inherits_chat(
        self, store: SessionStore
    ) -> None:
        identity = {"cwd": "/w", "git_branch": "main", "profile_name": "p", "chat_id": "c9"}
        await store.create_session("root", "telegram", **identity)
        await store.create_session("plain", "telegram", parent_session_id="root")
        plain = await store.get_session("plain")
        assert plain is not None and plain.parent_session_id == "root"
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

    @pytest.mark.anyio
    async def test_resolve_session_id(self, store: SessionStore) -> None:
        for sid in ("20260101_aaa", "20260101_abb", "20260202_ccc"):
            await store.create_session(sid, "cli")
        assert await store.resolve_session_id("20260101_aaa") == "20260101_aaa"
        assert await store.resolve_session_id("20260202") == "20260202_ccc"
        assert await store.resolve_session_id("20260101_a") is None  # ambiguous
        assert await store.resolve_session_id("2027") is None
        assert await store.resolve_session_id("") is None
        assert await store.resolve_session_id("%") is None  # no wildcard meaning
        assert await store.resolve_session_id("20260101_A") is None  # case-sensitive

    # -- messages -----------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_counters_count_messages_and_tool_calls(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.append_message("s", _user("hi"))
        await store.append_message("s", _asst(None, _call("c1"), _call("c2")))
        await store.append_messages(
            "s", [_result("c1", "one"), _result("c2", "two"), _asst("done")]
        )
        info = await store.get_session("s")
        assert info is not None and (info.message_count, info.tool_call_count) == (5, 2)

    @pytest.mark.anyio
    @pytest.mark.parametrize("operation", list(_MISSING_SESSION_WRITES))
    async def test_write_to_a_missing_session_raises_session_not_found(
        self, store: SessionStore, operation: str
    ) -> None:
        await store.create_session("other", "cli")
        with pytest.raises(SessionNotFound):
            await _MISSING_SESSION_WRITES[operation](store)
        assert await store.get_session("nope") is None

    @pytest.mark.anyio
    async def test_reads_of_a_missing_session_return_nothing(self, store: SessionStore) -> None:
        assert await store.get_session("nope") is None
        assert await store.get_messages("nope") == []
        assert await store.get_conversation("nope", include_ancestors=True) == []
        assert await store.get_resume_conversations("nope") == ([], [])
        assert await store.resolve_resume_session_id("nope") == "nope"
        assert await store.get_compression_lock_holder("nope") is None
        assert await store.delete_session("nope") is False

    @pytest.mark.anyio
    async def test_row_ids_strictly_increase_across_the_store(self, store: SessionStore) -> None:
        await store.create_session("a", "cli")
        await store.create_session("b", "cli")
        ids = [
            await store.append_message("a", _user("1")),
            await store.append_message("b", _user("2")),
            *await store.append_messages("a", [_user("3"), _user("4")]),
            await store.append_message("b", _user("5")),
        ]
        assert ids == sorted(set(ids))
        await store.delete_session("b")
        assert await store.append_message("a", _user("6")) > ids[-1]

    @pytest.mark.anyio
    async def test_batch_timestamps_strictly_increase(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        before = time.time()
        ids = await store.append_messages("s", [_user(str(i)) for i in range(50)])
        stored = await store.get_messages("s")
        assert [m.id for m in stored] == ids
        stamps = [m.timestamp for m in stored]
        assert all(b > a for a, b in itertools.pairwise(stamps))
        assert stamps[-1] - stamps[0] < 1.0
        assert before - _CLOCK_SLACK <= stamps[0] <= time.time() + _CLOCK_SLACK
        assert await store.append_messages("s", []) == []

    @pytest.mark.anyio
    async def test_messages_round_trip_losslessly(self, store: SessionStore) -> None:
        message = AssistantMessage(
            content="Let me look.",
            reasoning="The user wants the file.",
            finish_reason="tool_calls",
            tool_calls=(
                ToolCall(
                    id="call_1",
                    name="read_file",
                    arguments='{"path": "a/b.py"}',
                    extra={
                        "call_id": "fc_1",
                        "extra_content": {"google": {"thought_signature": "x"}},
                    },
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
                "codex_reasoning_items": [{"id": "rs_1", "encrypted_content": "e"}],
            },
            extra={"vendor_key": {"nested": [1, 2, None]}, "unicode": "héllo ✓ 日本"},
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
            AssistantMessage(content=None, tool_calls=(_call("call_3"),)),
            AssistantMessage(content=""),
            UserMessage(content="   leading and trailing whitespace\n\n"),
        ]
        await store.create_session("s", "cli")
        await store.append_message("s", message, token_count=42)
        await store.append_messages("s", others)
        stored = await store.get_messages("s")
        assert [m.message for m in stored] == [message, *others]
        assert [m.token_count for m in stored][:2] == [42, None]
        assert all(m.session_id == "s" for m in stored)
        assert await store.get_conversation("s") == [message, *others]

    @pytest.mark.anyio
    async def test_concurrent_appends_lose_nothing(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")

        async def writer(n: int) -> None:
            for i in range(5):
                await store.append_message("s", _user(f"w{n} m{i}"))

        async with anyio.create_task_group() as tg:
            for n in range(10):
                tg.start_soon(writer, n)
        stored = await store.get_messages("s")
        assert len(stored) == 50 and len({m.id for m in stored}) == 50
        for n in range(10):
            mine = [
                m.message.content for m in stored if str(m.message.content).startswith(f"w{n} ")
            ]
            assert mine == [f"w{n} m{i}" for i in range(5)]
        info = await store.get_session("s")
        assert info is not None and info.message_count == 50

    @pytest.mark.anyio
    async def test_cancelled_writes_leave_the_store_consistent(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        for attempt in range(40):
            with anyio.move_on_after((attempt % 10) * 0.0003):
                await store.append_messages("s", [_user(f"a{attempt}"), _asst(f"b{attempt}")])
        await store.append_message("s", _user("after the storm"))
        stored = await store.get_messages("s")
        info = await store.get_session("s")
        assert info is not None and info.message_count == len(stored)
        assert len(stored) % 2 == 1  # batches land whole or not at all
        assert stored[-1].message == _user("after the storm")

    @pytest.mark.anyio
    async def test_returned_messages_do_not_alias_stored_ones(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.append_message("s", AssistantMessage(content="x", extra={"k": [1]}))
        first = (await store.get_conversation("s"))[0]
        first.extra["k"].append(2)
        assert (await store.get_conversation("s"))[0].extra == {"k": [1]}

    @pytest.mark.anyio
    async def test_unstorable_message_is_refused_whole(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        bad = UserMessage(content="x", extra={"blob": object()})
        with pytest.raises(SessionStoreError):
            await store.append_messages("s", [_user("ok"), bad])
        with pytest.raises(SessionStoreError):
            await store.append_message("s", bad)
        assert await store.get_messages("s") == []
        info = await store.get_session("s")
        assert info is not None and info.message_count == 0

    @pytest.mark.anyio
    async def test_get_messages_orders_by_id_and_pages(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        ids = [
            await store.append_message("s", _user("late clock"), timestamp=300.0),
            await store.append_message("s", _user("early clock"), timestamp=100.0),
            await store.append_message("s", _user("middle clock"), timestamp=200.0),
        ]
        rows = await store.get_messages("s")
        assert [r.id for r in rows] == ids
        assert [r.timestamp for r in rows] == [300.0, 100.0, 200.0]
        assert all(r.session_id == "s" and r.active and not r.compacted for r in rows)
        assert [r.id for r in await store.get_messages("s", limit=2)] == ids[:2]
        assert [r.id for r in await store.get_messages("s", offset=1)] == ids[1:]
        assert [r.id for r in await store.get_messages("s", after_id=ids[0])] == ids[1:]
        assert [r.id for r in await store.get_messages("s", offset=1, limit=1)] == [ids[1]]
        assert await store.get_messages("s", limit=0) == []
        assert await store.get_messages("missing") == []
        assert [m.content for m in await store.get_conversation("s")] == [
            "late clock",
            "early clock",
            "middle clock",
        ]

    @pytest.mark.anyio
    async def test_replace_messages_rewrites_transcript_and_counters(
        self, store: SessionStore
    ) -> None:
        await store.create_session("s", "cli")
        await store.append_messages("s", [_user("a"), _asst(None, _call("c1")), _result("c1", "r")])
        await store.replace_messages("s", [_user("fresh"), _asst("ok")])
        assert await _contents(store, "s") == ["fresh", "ok"]
        assert len(await store.get_messages("s", include_inactive=True)) == 2
        info = await store.get_session("s")
        assert info is not None and (info.message_count, info.tool_call_count) == (2, 0)
        assert await store.search_messages("fresh") != []

    # -- metadata, tokens, end ---------------------------------------------------------

    @pytest.mark.anyio
    async def test_update_metadata(self, store: SessionStore) -> None:
        await store.create_session(
            "s", "cli", model="m", model_config={"keep": 1, "drop": 2}, cwd="/a"
        )
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
        await store.update_metadata("s", title=None)
        await store.update_metadata("t", title="My chat")  # free again
        t = await store.get_session("t")
        assert t is not None and t.title == "My chat"

    @pytest.mark.anyio
    async def test_update_token_counts_delta_and_absolute(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.update_token_counts(
            "s",
            Usage(input_tokens=10, output_tokens=5, cache_read_tokens=3),
            api_calls=1,
            model="m",
        )
        await store.update_token_counts(
            "s",
            Usage(input_tokens=1, output_tokens=1, cache_write_tokens=2, reasoning_tokens=7),
            api_calls=1,
            model="other",
        )
        info = await store.get_session("s")
        assert info is not None
        assert info.usage == Usage(
            input_tokens=11,
            output_tokens=6,
            cache_read_tokens=3,
            cache_write_tokens=2,
            reasoning_tokens=7,
        )
        assert (info.api_call_count, info.model) == (2, "m")
        assert info.last_active is not None and info.last_active >= info.started_at

        await store.update_token_counts("s", Usage(input_tokens=100), api_calls=9, absolute=True)
        info = await store.get_session("s")
        assert info is not None
        assert (info.usage, info.api_call_count) == (Usage(input_tokens=100), 9)

    @pytest.mark.anyio
    async def test_end_keeps_first_reason_and_reopen_clears(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.end_session("s", "user_exit")
        first = await store.get_session("s")
        assert first is not None and first.end_reason == "user_exit"
        assert first.ended_at is not None and first.ended_at >= first.started_at
        await anyio.sleep(0.01)
        await store.end_session("s", "timeout")
        again = await store.get_session("s")
        assert again is not None and (again.end_reason, again.ended_at) == (
            "user_exit",
            first.ended_at,
        )
        await store.reopen_session("s")
        info = await store.get_session("s")
        assert info is not None and (info.end_reason, info.ended_at) == (None, None)

    @pytest.mark.anyio
    async def test_append_after_compression_end_is_refused(self, store: SessionStore) -> None:
        await store.create_session("done", "cli")
        await store.end_session("done", "user_exit")
        await store.append_message("done", _user("still fine"))

        await store.create_session("s", "cli")
        await store.end_session("s", "compression")
        with pytest.raises(SessionClosedForAppend):
            await store.append_message("s", _user("x"))
        with pytest.raises(SessionClosedForAppend):
            await store.append_messages("s", [_user("x")])
        assert await store.get_messages("s") == []
        await store.reopen_session("s")
        await store.append_message("s", _user("x"))

    # -- system prompts -------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_system_prompts_are_deduplicated_and_collected(
        self, store: SessionStore, prompt_counter: PromptCounter
    ) -> None:
        await store.create_session("a", "cli", system_prompt="You are Hermes.")
        await store.create_session("b", "cli", system_prompt="You are Hermes.")
        assert await prompt_counter() == 1
        a, b = await store.get_session("a"), await store.get_session("b")
        assert a is not None and b is not None
        assert a.system_prompt == b.system_prompt == "You are Hermes."

        await store.create_session("a", "cli", system_prompt="ignored: a prompt is already set")
        assert await prompt_counter() == 1

        await store.update_system_prompt("a", "Version two.")
        assert await prompt_counter() == 2
        await store.update_system_prompt("b", "Version two.")
        assert await prompt_counter() == 1
        a, b = await store.get_session("a"), await store.get_session("b")
        assert a is not None and b is not None
        assert a.system_prompt == b.system_prompt == "Version two."

        await store.delete_session("a")
        assert await prompt_counter() == 1
        b = await store.get_session("b")
        assert b is not None and b.system_prompt == "Version two."
        await store.delete_session("b")
        assert await prompt_counter() == 0

        await store.create_session("c", "cli", system_prompt="A third prompt.")
        c = await store.get_session("c")
        assert c is not None and c.system_prompt == "A third prompt."
        assert await prompt_counter() == 1

    # -- delete ---------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_delete_session_removes_delegates_and_orphans_others(
        self, store: SessionStore
    ) -> None:
        await store.create_session("root", "cli")
        await store.append_message("root", _user("hello"))
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
        await store.append_message("sub", _user("delegated work"))
        await store.append_message("cont", _user("continued work"))
        assert await store.try_acquire_compression_lock("root", "holder")

        assert await store.delete_session("root") is True
        for gone in ("root", "sub", "tool_child", "sub_of_sub"):
            assert await store.get_session(gone) is None
            assert await store.get_messages(gone, include_inactive=True) == []
        for orphan in ("cont", "branch", "sub_keep"):
            info = await store.get_session(orphan)
            assert info is not None and info.parent_session_id is None
        assert await store.search_messages("delegated") == []
        assert [h.session_id for h in await store.search_messages("continued")] == ["cont"]
        assert await store.get_compression_lock_holder("root") is None
        assert await store.delete_session("root") is False

    # -- search ---------------------------------------------------------------------------

    @pytest.mark.anyio
    @pytest.mark.parametrize(("query", "text"), _PUNCTUATED)
    async def test_search_finds_literal_punctuated_words(
        self, store: SessionStore, query: str, text: str
    ) -> None:
        await store.create_session("s", "cli")
        _, wanted = await store.append_messages("s", [_user(_DECOY), _user(text)])
        hits = await store.search_messages(query)
        assert [h.id for h in hits] == [wanted]
        assert ">>>" in hits[0].snippet and "<<<" in hits[0].snippet
        assert _plain(hits[0].snippet) == text

    @pytest.mark.anyio
    @pytest.mark.parametrize(("query", "text"), _SYNTAX)
    async def test_search_treats_fts_operators_as_text(
        self, store: SessionStore, query: str, text: str
    ) -> None:
        await store.create_session("s", "cli")
        _, wanted = await store.append_messages("s", [_user(_DECOY), _user(text)])
        hits = await store.search_messages(query)
        assert [h.id for h in hits] == [wanted]
        assert ">>>" in hits[0].snippet

    @pytest.mark.anyio
    @pytest.mark.parametrize("query", _OPERATORS_ALONE)
    async def test_search_never_fails_on_syntax_characters(
        self, store: SessionStore, query: str
    ) -> None:
        await store.create_session("s", "cli")
        await store.append_messages("s", [_user(_DECOY), _user(f"quoted {query} text")])
        hits = await store.search_messages(query)
        assert isinstance(hits, list)

    @pytest.mark.anyio
    async def test_search_requires_every_word(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.append_messages("s", [_user("alpha beta"), _user("alpha gamma")])
        assert len(await store.search_messages("alpha")) == 2
        [both] = await store.search_messages("gamma ALPHA")
        assert _plain(both.snippet) == "alpha gamma" and ">>>alpha<<<" in both.snippet
        assert await store.search_messages("alpha delta") == []
        assert await store.search_messages("   ") == []
        assert await store.search_messages("") == []
        assert await store.search_messages("alpha", limit=0) == []

    @pytest.mark.anyio
    async def test_search_hit_fields_snippet_and_context(self, store: SessionStore) -> None:
        long_text = (
            " ".join(f"w{i}" for i in range(100))
            + " needle "
            + " ".join(f"v{i}" for i in range(100))
        )
        await store.create_session("s", "cli", model="m1")
        ids = await store.append_messages(
            "s", [_user("before " + "x" * 300), _asst(long_text), _user("after")]
        )
        stored = await store.get_messages("s")
        info = await store.get_session("s")
        assert info is not None
        [hit] = await store.search_messages("Needle")
        assert (hit.id, hit.session_id, hit.role, hit.source, hit.model) == (
            ids[1],
            "s",
            "assistant",
            "cli",
            "m1",
        )
        assert hit.timestamp == stored[1].timestamp
        assert hit.session_started == info.started_at
        assert hit.tool_name is None
        assert hit.snippet.startswith("...") and hit.snippet.endswith("...")
        assert ">>>needle<<<" in hit.snippet
        assert 10 <= len(hit.snippet.replace("...", "").split()) <= 40
        assert [c["role"] for c in hit.context] == ["user", "assistant", "user"]
        assert hit.context[0]["content"] == ("before " + "x" * 300)[:200]
        assert hit.context[1]["content"] == long_text[:200]
        assert hit.context[2]["content"] == "after"

    @pytest.mark.anyio
    async def test_search_covers_tool_names_and_call_arguments(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.append_messages(
            "s",
            [
                _asst(None, _call("c1", "web_search", '{"query": "zebra migration"}')),
                _result("c1", "results here", name="web_search"),
            ],
        )
        [by_args] = await store.search_messages("zebra")
        assert by_args.role == "assistant" and ">>>zebra<<<" in by_args.snippet
        hits = await store.search_messages("web_search")
        assert [h.role for h in hits] == ["tool", "assistant"]
        assert hits[0].tool_name == "web_search"
        [tool_hit] = await store.search_messages("results")
        assert tool_hit.role == "tool" and tool_hit.tool_name == "web_search"

    @pytest.mark.anyio
    async def test_search_filters_sort_and_paging(self, store: SessionStore) -> None:
        await store.create_session("cli1", "cli")
        await store.create_session("tg1", "telegram")
        await store.create_session("tool1", "tool")
        now = time.time()
        for step, sid in enumerate(("cli1", "tg1", "tool1")):
            await store.append_message(
                sid, _user(f"topic from {sid}"), timestamp=now + 10 * step + 1
            )
            await store.append_message(
                sid, _asst(f"topic answer {sid}"), timestamp=now + 10 * step + 2
            )

        newest = await store.search_messages("topic")
        assert [h.session_id for h in newest] == ["tool1", "tool1", "tg1", "tg1", "cli1", "cli1"]
        assert newest == await store.search_messages("topic", sort="newest")
        oldest = await store.search_messages("topic", sort="oldest")
        assert [h.id for h in oldest] == [h.id for h in reversed(newest)]
        assert [h.id for h in await store.search_messages("topic", limit=2, offset=1)] == [
            h.id for h in newest[1:3]
        ]
        assert await store.search_messages("topic", offset=6) == []
        by_source = await store.search_messages("topic", source_filter=["cli"])
        assert {h.session_id for h in by_source} == {"cli1"}
        excluded = await store.search_messages("topic", exclude_sources=["tool", "cli"])
        assert {h.session_id for h in excluded} == {"tg1"}
        by_role = await store.search_messages("topic", role_filter=["user"])
        assert {h.role for h in by_role} == {"user"} and len(by_role) == 3
        assert await store.search_messages("topic", limit=0) == []

    @pytest.mark.anyio
    async def test_search_orders_hits_by_record_order_not_timestamp(
        self, store: SessionStore
    ) -> None:
        """ "Newest" is the last recorded (highest id), whatever timestamps callers gave:
        the order an index keeps for free, so a search can stop after one page."""
        await store.create_session("s", "cli")
        await store.create_session("t", "cli")
        now = time.time()
        ids = [
            await store.append_message("s", _user("ordered late clock"), timestamp=now + 300),
            await store.append_message("t", _user("ordered early clock"), timestamp=now + 100),
            await store.append_message("s", _user("ordered middle clock"), timestamp=now + 200),
        ]
        newest = await store.search_messages("ordered")
        assert [h.id for h in newest] == ids[::-1]
        assert [h.timestamp for h in newest] == [now + 200, now + 100, now + 300]
        assert newest == await store.search_messages("ordered", sort="newest")
        oldest = await store.search_messages("ordered", sort="oldest")
        assert [h.id for h in oldest] == ids
        assert [h.id for h in await store.search_messages("ordered", limit=1, offset=1)] == [ids[1]]
        assert [h.id for h in await store.search_messages("clock", sort="oldest", offset=2)] == [
            ids[2]
        ]

    @pytest.mark.anyio
    async def test_search_scope_includes_compacted_rows(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.append_messages("s", [_user("original walrus"), _asst("noted")])
        await store.archive_and_compact("s", [_user("summary of the chat")])
        [hit] = await store.search_messages("walrus")
        assert hit.session_id == "s"
        assert len(await store.search_messages("walrus", include_inactive=True)) == 1
        assert len(await store.search_messages("summary")) == 1

    @pytest.mark.anyio
    async def test_search_sessions_orders_by_last_activity(self, store: SessionStore) -> None:
        now = time.time()
        for sid, source in (("old", "cli"), ("mid", "telegram"), ("new", "cli")):
            await store.create_session(sid, source)
        await store.append_message("mid", _user("m"), timestamp=now + 100)
        await store.append_message("new", _user("n"), timestamp=now + 200)
        await store.append_message("old", _user("bump"), timestamp=now + 300)
        assert [s.id for s in await store.search_sessions()] == ["old", "new", "mid"]
        assert [s.id for s in await store.search_sessions(source="cli")] == ["old", "new"]
        assert [s.id for s in await store.search_sessions(limit=1, offset=1)] == ["new"]
        old = (await store.search_sessions())[0]
        assert old.last_active == now + 300
        assert await store.search_sessions(source="web") == []

    # -- lineage --------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_resolve_resume_follows_compression_and_skips_forks(
        self, store: SessionStore
    ) -> None:
        await store.create_session("root", "cli")
        await store.append_message("root", _user("first"))
        await store.publish_compression_child("root", "c1", [_user("summary 1")])
        await store.create_session(
            "delegate", "cli", parent_session_id="c1", model_config={"_delegate_from": "c1"}
        )
        await store.create_session("toolkid", "tool", parent_session_id="c1")
        await store.create_session(
            "branch", "cli", parent_session_id="c1", model_config={"_branched_from": "c1"}
        )
        await store.create_session(
            "reset", "cli", parent_session_id="c1", model_config={"_reset_from": "c1"}
        )
        for sid in ("delegate", "toolkid", "branch", "reset"):
            await store.append_message(sid, _user("side work"))
        assert await store.resolve_resume_session_id("root") == "c1"
        assert await store.resolve_resume_session_id("c1") == "c1"

        await store.publish_compression_child("c1", "c2", [_user("summary 2")])
        assert await store.resolve_resume_session_id("root") == "c2"

        await store.create_session("empty_cont", "cli", parent_session_id="c2")
        assert await store.resolve_resume_session_id("root") == "c2"
        await store.append_message("empty_cont", _user("continued"))
        assert await store.resolve_resume_session_id("root") == "empty_cont"

        assert await store.resolve_resume_session_id("unknown") == "unknown"
        assert await store.resolve_resume_session_id("branch") == "branch"
        assert await store.resolve_resume_session_id("") == ""

    @pytest.mark.anyio
    async def test_publish_compression_child(
        self, store: SessionStore, prompt_counter: PromptCounter
    ) -> None:
        await store.create_session(
            "p",
            "telegram",
            model="m",
            model_config={"k": 1, "_reset_from": "x"},
            system_prompt="sys",
            chat_id="c",
            cwd="/w",
        )
        await store.append_messages("p", [_user("q1"), _asst("a1"), _user("q2"), _asst("a2")])
        assert await store.try_acquire_compression_lock("p", "me")
        with pytest.raises(CompressionInProgress):
            await store.publish_compression_child("p", "child", [_user("x")], lock_holder="other")
        with pytest.raises(CompressionInProgress):
            await store.publish_compression_child("p", "child", [_user("x")])
        assert await store.get_session("child") is None
        with pytest.raises(SessionStoreError):
            await store.publish_compression_child("p", "p", [_user("x")], lock_holder="me")
        child_id = await store.publish_compression_child(
            "p", "child", [_user("summary"), _user("q2"), _asst("a2")], lock_holder="me"
        )
        assert child_id == "child"
        parent, child = await store.get_session("p"), await store.get_session("child")
        assert parent is not None and child is not None
        assert parent.end_reason == "compression" and parent.ended_at is not None
        assert child.parent_session_id == "p"
        assert (child.source, child.model, child.system_prompt) == ("telegram", "m", "sys")
        assert dict(child.model_config) == {"k": 1}
        assert child.identity == {"chat_id": "c", "cwd": "/w"}
        assert child.message_count == 3
        assert await _contents(store, "child") == ["summary", "q2", "a2"]
        assert await prompt_counter() == 1
        with pytest.raises(SessionClosedForAppend):
            await store.append_message("p", _user("late"))
        with pytest.raises(SessionClosedForAppend):
            await store.publish_compression_child("p", "again", [_user("x")], lock_holder="me")

    @pytest.mark.anyio
    async def test_conversation_with_ancestors_and_resume_conversations(
        self, store: SessionStore
    ) -> None:
        await store.create_session("root", "cli")
        await store.append_messages("root", [_user("q1"), _asst("a1"), _user("q2"), _asst("a2")])
        await store.publish_compression_child(
            "root", "tip", [_user("[summary] q1/a1"), _user("q2"), _asst("a2")]
        )
        await store.append_messages("tip", [_user("q3"), _asst("a3")])

        assert await _contents(store, "tip") == ["[summary] q1/a1", "q2", "a2", "q3", "a3"]
        with_ancestors = await _contents(store, "tip", include_ancestors=True)
        assert with_ancestors == ["q1", "a1", "q2", "a2", "[summary] q1/a1", "a2", "q3", "a3"]
        assert await _contents(store, "root", include_ancestors=True) == ["q1", "a1", "q2", "a2"]

        model, display = await store.get_resume_conversations("tip")
        assert [m.content for m in model] == ["[summary] q1/a1\n\nq2", "a2", "q3", "a3"]
        assert [m.content for m in display] == with_ancestors

        # A branch owns its transcript: no ancestors.
        await store.create_session(
            "br", "cli", parent_session_id="tip", model_config={"_branched_from": "tip"}
        )
        await store.append_message("br", _user("q3"))
        assert await _contents(store, "br", include_ancestors=True) == ["q3"]

    @pytest.mark.anyio
    async def test_get_conversation_repair(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.append_messages("s", [_user("a"), _user("b"), _asst(None, _call("c1"))])
        raw = await store.get_conversation("s")
        assert len(raw) == 3
        repaired = await store.get_conversation("s", repair=True)
        assert repaired[0] == UserMessage(content="a\n\nb")
        assert isinstance(repaired[-1], ToolMessage) and repaired[-1].tool_call_id == "c1"
        assert await store.get_conversation("s") == raw  # the stored transcript is untouched

    # -- compression lock and compaction -------------------------------------------------------

    @pytest.mark.anyio
    async def test_compression_lock_acquire_refresh_release(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        assert await store.get_compression_lock_holder("s") is None
        assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=30)
        assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=30)  # re-entrant
        assert not await store.try_acquire_compression_lock("s", "b", ttl_seconds=30)
        assert await store.get_compression_lock_holder("s") == "a"
        assert await store.refresh_compression_lock("s", "a", ttl_seconds=30)
        assert not await store.refresh_compression_lock("s", "b", ttl_seconds=30)

        await store.release_compression_lock("s", "b")  # not the holder: no effect
        assert await store.get_compression_lock_holder("s") == "a"
        await store.release_compression_lock("s", "a")
        assert await store.get_compression_lock_holder("s") is None
        assert await store.try_acquire_compression_lock("s", "b", ttl_seconds=30)
        assert not await store.try_acquire_compression_lock("s", "")
        assert not await store.try_acquire_compression_lock("", "b")
        assert not await store.refresh_compression_lock("s", "")

    @pytest.mark.anyio
    async def test_compression_lock_expires(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.create_session("t", "cli")
        assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=0.05)
        assert await store.try_acquire_compression_lock("t", "c", ttl_seconds=0.05)
        await anyio.sleep(0.1)
        assert await store.get_compression_lock_holder("s") is None
        assert await store.try_acquire_compression_lock("s", "b", ttl_seconds=30)
        assert not await store.refresh_compression_lock("s", "a")
        assert await store.get_compression_lock_holder("s") == "b"
        # An expired lock nobody took is still its holder's to refresh.
        assert await store.get_compression_lock_holder("t") is None
        assert await store.refresh_compression_lock("t", "c", ttl_seconds=30)
        assert await store.get_compression_lock_holder("t") == "c"

    @pytest.mark.anyio
    async def test_archive_and_compact_in_place(self, store: SessionStore) -> None:
        await store.create_session("s", "cli", model_config={"keep": 1, "stale": 2})
        old_ids = await store.append_messages(
            "s", [_user("q1"), _asst(None, _call("c1")), _result("c1", "r1"), _asst("a1")]
        )
        watermark = old_ids[-1]
        late_id = await store.append_message("s", _user("arrived while summarising"), token_count=7)
        assert await store.try_acquire_compression_lock("s", "me")

        with pytest.raises(CompressionInProgress):
            await store.archive_and_compact("s", [_user("summary")], lock_holder="someone")
        with pytest.raises(CompressionInProgress):
            await store.archive_and_compact("s", [_user("summary")])
        assert len(await store.get_messages("s")) == 5

        count = await store.archive_and_compact(
            "s",
            [_user("summary"), _asst("ack")],
            model_config_patch={"stale": None, "compressions": 1},
            watermark=watermark,
            lock_holder="me",
        )
        assert count == 3
        assert await _contents(store, "s") == ["summary", "ack", "arrived while summarising"]
        info = await store.get_session("s")
        assert info is not None
        assert (info.message_count, info.tool_call_count) == (3, 0)
        assert dict(info.model_config) == {"keep": 1, "compressions": 1}

        every = await store.get_messages("s", include_inactive=True)
        archived = [m for m in every if not m.active]
        assert [m.id for m in archived] == [*old_ids, late_id]
        assert all(m.compacted for m in archived)
        active = [m for m in every if m.active]
        assert all(m.id > late_id and not m.compacted for m in active)
        assert active[-1].token_count == 7
        assert active[-1].message == UserMessage(content="arrived while summarising")
        assert len(await store.get_conversation("s", include_inactive=True)) == 8

        # Display history shows the late row once, at its re-cloned place.
        _, display = await store.get_resume_conversations("s")
        contents = [m.content for m in display]
        assert contents[-3:] == ["summary", "ack", "arrived while summarising"]
        assert contents.count("arrived while summarising") == 1
        assert contents[:4] == ["q1", None, "r1", "a1"]

    @pytest.mark.anyio
    async def test_archive_and_compact_without_a_lock(self, store: SessionStore) -> None:
        await store.create_session("s", "cli")
        await store.append_messages("s", [_user("q"), _asst("a")])
        assert await store.archive_and_compact("s", [_user("short")]) == 1
        assert await _contents(store, "s") == ["short"]

    @pytest.mark.anyio
    async def test_archive_and_compact_refuses_closed_and_missing(
        self, store: SessionStore
    ) -> None:
        with pytest.raises(SessionNotFound):
            await store.archive_and_compact("missing", [_user("x")])
        await store.create_session("s", "cli")
        await store.end_session("s", "compression")
        with pytest.raises(SessionClosedForAppend):
            await store.archive_and_compact("s", [_user("x")])

    # -- read-only, reopen and close ---------------------------------------------------------

    @pytest.mark.anyio
    @pytest.mark.parametrize("operation", list(_WRITES))
    async def test_read_only_store_refuses_writes(
        self, store: SessionStore, second_store: StoreFactory, operation: str
    ) -> None:
        await store.create_session("s", "cli")
        await store.append_message("s", _user("kept"))
        reader = await second_store(read_only=True)
        with pytest.raises(ReadOnlyStore):
            await _WRITES[operation](reader)
        assert await _contents(reader, "s") == ["kept"]
        info = await store.get_session("s")
        assert info is not None and info.message_count == 1 and info.title is None

    @pytest.mark.anyio
    @pytest.mark.parametrize("operation", list(_READS))
    async def test_read_only_store_allows_reads(
        self, store: SessionStore, second_store: StoreFactory, operation: str
    ) -> None:
        await store.create_session("s", "cli")
        reader = await second_store(read_only=True)
        await _READS[operation](reader)

    @pytest.mark.anyio
    async def test_read_only_store_sees_the_writers_data(
        self, store: SessionStore, second_store: StoreFactory
    ) -> None:
        await store.create_session("s", "cli", system_prompt="sp")
        await store.append_message("s", _user("first words"))
        reader = await second_store(read_only=True)
        await store.append_message("s", _user("later words"))
        assert await _contents(reader, "s") == ["first words", "later words"]
        assert [h.session_id for h in await reader.search_messages("later")] == ["s"]
        info = await reader.get_session("s")
        assert info is not None and info.system_prompt == "sp" and info.message_count == 2

    @pytest.mark.anyio
    async def test_reopened_store_keeps_everything(
        self, store: SessionStore, second_store: StoreFactory
    ) -> None:
        await store.create_session("s", "cli", model="m", system_prompt="sp", cwd="/w")
        ids = await store.append_messages("s", [_user("hello there"), _asst("hi")])
        await store.update_token_counts("s", Usage(input_tokens=5), api_calls=1)
        assert await store.try_acquire_compression_lock("s", "me", ttl_seconds=60)
        before = await store.get_session("s")
        await store.close()

        again = await second_store()
        assert await again.get_session("s") == before
        assert [m.id for m in await again.get_messages("s")] == ids
        assert await again.get_compression_lock_holder("s") == "me"
        assert [h.id for h in await again.search_messages("hello")] == [ids[0]]
        assert await again.append_message("s", _user("after reopen")) > ids[-1]

    @pytest.mark.anyio
    @pytest.mark.parametrize("operation", [*_WRITES, *_READS])
    async def test_every_method_fails_after_close(
        self, store: SessionStore, operation: str
    ) -> None:
        await store.create_session("s", "cli")
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(StoreClosed):
            await {**_WRITES, **_READS}[operation](store)
