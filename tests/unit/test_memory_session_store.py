"""Unit tests of the in-memory session store (the fake the engine tests trust).

The REFERENCE.md §2 behaviour every store shares is pinned once, by
:class:`hermes_core.testing.SessionStoreContract`, which
``tests/contract/test_session_store_contract.py`` runs on this store too. What stays here is
what the contract cannot say for all stores: exact times from an injected clock (stamps,
batch steps, lock expiry at the boundary), ``new_session_id``, the ``read_only``
constructor flag on a store with no data, the async context manager, and the fake's exact
snippet shapes.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime

import pytest

from hermes_adapters.sessions.memory import InMemorySessionStore, new_session_id
from hermes_core.errors import (
    CompressionInProgress,
    ReadOnlyStore,
    SessionClosedForAppend,
    SessionNotFound,
    StoreClosed,
)
from hermes_core.messages import (
    AssistantMessage,
    ToolCall,
    Usage,
    UserMessage,
)
from hermes_core.testing.sessions import _READS as READS
from hermes_core.testing.sessions import _WRITES as WRITES

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


# -- identity and basics -------------------------------------------------------------------


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


# -- messages ---------------------------------------------------------------------------


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


# -- metadata, tokens, end ---------------------------------------------------------------


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


# -- search ---------------------------------------------------------------------------------


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


# -- read-only and closed -----------------------------------------------------------------

# The contract opens its read-only store with reopen() over existing data; these take the
# constructor flag on an empty store, so the refusal must come before any lookup.


@pytest.mark.parametrize("operation", list(WRITES))
async def test_read_only_store_refuses_writes(operation: str) -> None:
    store = InMemorySessionStore(read_only=True)
    with pytest.raises(ReadOnlyStore):
        await WRITES[operation](store)


@pytest.mark.parametrize("operation", list(READS))
async def test_read_only_store_allows_reads(operation: str) -> None:
    await READS[operation](InMemorySessionStore(read_only=True))


async def test_async_context_manager_closes() -> None:
    async with InMemorySessionStore() as store:
        await store.create_session("s", "cli")
    with pytest.raises(StoreClosed):
        await store.get_session("s")
