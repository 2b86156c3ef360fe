"""``MemoryStoreContract``: the behaviour every memory store must show.

The memory tool hands a store's refusals to the model verbatim, and models are prompted on
the texts of REFERENCE.md §5, so this suite pins semantics *and* messages: a store that
passes can replace the file store under any agent. Subclass it once per store and provide
two fixtures:

``memory_store``
    an async fixture yielding a fresh, empty store with limits memory 2200 and user 1375,
    closed after the test;
``make_twin``
    a callable returning (an awaitable of) a second store over the same backing data, so
    writes are shown to reach whoever reads next, not just the writer's own cache. A
    store without a second handle (an in-memory one) returns the ``memory_store`` itself;
    the fixture closes what it made.

The ``anyio_backend`` fixture must be available (``tests/conftest.py`` provides it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import pytest

from hermes_core.errors import MemoryWriteRejected
from hermes_core.ports.memory import MemorySnapshot, MemoryStore, MemoryTarget, MemoryWrite

__all__ = ["MemoryStoreContract", "TwinFactory"]

TwinFactory = Callable[[], Awaitable[MemoryStore]]
"""Opens another store over the same data as the ``memory_store`` fixture."""

MEMORY_LIMIT = 2200
USER_LIMIT = 1375
_DELIM = "\n§\n"
_BATCH_SUFFIX = " No operations were applied (batch is all-or-nothing)."


def add(content: str) -> MemoryWrite:
    return MemoryWrite("add", content=content)


def replace(old_text: str, content: str) -> MemoryWrite:
    return MemoryWrite("replace", content=content, old_text=old_text)


def remove(old_text: str) -> MemoryWrite:
    return MemoryWrite("remove", old_text=old_text)


def _size(entries: Sequence[str]) -> int:
    return len(_DELIM.join(entries))


def _of(snapshot: MemorySnapshot, target: MemoryTarget) -> tuple[str, ...]:
    return snapshot.memory if target == "memory" else snapshot.user


async def _rejected(
    store: MemoryStore, target: str, writes: Sequence[MemoryWrite]
) -> MemoryWriteRejected:
    """Apply, expecting a refusal, and check that nothing changed."""
    before = await store.snapshot()
    with pytest.raises(MemoryWriteRejected) as info:
        await store.apply(cast(MemoryTarget, target), writes)
    assert await store.snapshot() == before, "a refused write changed the store"
    return info.value


async def _fill(store: MemoryStore, target: MemoryTarget, count: int, width: int) -> list[str]:
    """Add ``count`` distinct entries of ``width`` characters; answer them in order."""
    entries = [f"{i:03d}-" + "x" * (width - 4) for i in range(count)]
    await store.apply(target, [add(e) for e in entries])
    return entries


class MemoryStoreContract:
    """Abstract contract; subclasses provide ``memory_store`` and ``make_twin``."""

    @pytest.fixture
    async def memory_store(self) -> Any:
        raise NotImplementedError(
            "provide an async `memory_store` fixture: a fresh empty store (limits 2200/1375)"
        )

    @pytest.fixture
    def make_twin(self, memory_store: MemoryStore) -> TwinFactory:
        raise NotImplementedError(
            "provide `make_twin`: a second store over the same data (or the store itself)"
        )

    # -- empty store and limits ---------------------------------------------------------

    @pytest.mark.anyio
    async def test_a_fresh_store_is_empty_with_its_limits(self, memory_store: MemoryStore) -> None:
        assert isinstance(memory_store, MemoryStore)
        snapshot = await memory_store.snapshot()
        assert snapshot == MemorySnapshot((), (), MEMORY_LIMIT, USER_LIMIT)

    # -- add, replace, remove ----------------------------------------------------------

    @pytest.mark.anyio
    async def test_add_appends_to_its_target_only(self, memory_store: MemoryStore) -> None:
        assert await memory_store.apply("memory", [add("Project uses uv")]) == ("Project uses uv",)
        assert await memory_store.apply("memory", [add("Tests run with pytest")]) == (
            "Project uses uv",
            "Tests run with pytest",
        )
        assert await memory_store.apply("user", [add("Name is Ada")]) == ("Name is Ada",)
        snapshot = await memory_store.snapshot()
        assert snapshot.memory == ("Project uses uv", "Tests run with pytest")
        assert snapshot.user == ("Name is Ada",)

    @pytest.mark.anyio
    async def test_replace_finds_the_entry_by_substring(self, memory_store: MemoryStore) -> None:
        await memory_store.apply("user", [add("Prefers tabs"), add("Lives in Lisbon")])
        result = await memory_store.apply("user", [replace("tabs", "Prefers spaces, 4 wide")])
        assert result == ("Prefers spaces, 4 wide", "Lives in Lisbon")
        assert (await memory_store.snapshot()).user == result

    @pytest.mark.anyio
    async def test_remove_finds_the_entry_by_substring(self, memory_store: MemoryStore) -> None:
        await memory_store.apply("memory", [add("alpha fact"), add("beta fact"), add("gamma")])
        assert await memory_store.apply("memory", [remove("beta")]) == ("alpha fact", "gamma")
        assert (await memory_store.snapshot()).memory == ("alpha fact", "gamma")

    @pytest.mark.anyio
    async def test_a_duplicate_add_is_a_successful_no_op(self, memory_store: MemoryStore) -> None:
        await memory_store.apply("memory", [add("same fact")])
        assert await memory_store.apply("memory", [add("same fact")]) == ("same fact",)
        assert await memory_store.apply("memory", [add("  same fact \n")]) == ("same fact",)
        assert (await memory_store.snapshot()).memory == ("same fact",)

    @pytest.mark.anyio
    async def test_blank_content_is_rejected(self, memory_store: MemoryStore) -> None:
        for blank in ("", "   ", " \n\t "):
            error = await _rejected(memory_store, "memory", [add(blank)])
            assert str(error) == "Content cannot be empty."
        await memory_store.apply("memory", [add("keep me")])
        error = await _rejected(memory_store, "memory", [replace("keep", "  ")])
        assert str(error) == "new_content cannot be empty. Use 'remove' to delete entries."
        for old in ("", "  "):
            assert str(await _rejected(memory_store, "memory", [remove(old)])) == (
                "old_text cannot be empty."
            )

    @pytest.mark.anyio
    async def test_entries_are_stripped_and_de_duplicated(self, memory_store: MemoryStore) -> None:
        assert await memory_store.apply("memory", [add("  padded entry \n\n")]) == ("padded entry",)
        await memory_store.apply("memory", [add("other entry")])
        # A replacement that equals another entry leaves one copy, not two.
        assert await memory_store.apply("memory", [replace("other", "padded entry")]) == (
            "padded entry",
        )
        assert (await memory_store.snapshot()).memory == ("padded entry",)

    @pytest.mark.anyio
    async def test_multiline_entries_round_trip(
        self, memory_store: MemoryStore, make_twin: TwinFactory
    ) -> None:
        entry = "Deploy steps:\n1. build\n2. push\n\n3. tag § release"
        await memory_store.apply("memory", [add(entry), add("second")])
        twin = await make_twin()
        assert (await twin.snapshot()).memory == (entry, "second")
        assert await twin.apply("memory", [replace("2. push", "Deploy: build, push, tag")]) == (
            "Deploy: build, push, tag",
            "second",
        )

    @pytest.mark.anyio
    async def test_content_holding_the_separator_line_is_rejected(
        self, memory_store: MemoryStore
    ) -> None:
        """A line that is just ``§`` would read back as two entries: refuse it up front."""
        for content in ("one\n§\ntwo", "tail\n§", "§\nhead"):
            await _rejected(memory_store, "memory", [add(content)])

    # -- limits ------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_an_add_that_overflows_is_rejected_with_the_entries(
        self, memory_store: MemoryStore
    ) -> None:
        entries = await _fill(memory_store, "memory", 20, 100)
        current = _size(entries)  # 20 * 100 + 19 * 3 = 2057
        big = "y" * 150
        error = await _rejected(memory_store, "memory", [add(big)])
        assert str(error) == (
            f"Memory at {current:,}/2,200 chars. Adding this entry (150 chars) would exceed "
            "the limit. Consolidate now: use 'replace' to merge overlapping entries into "
            "shorter ones or 'remove' stale or less important entries (see current_entries "
            "below), then retry this add — all in this turn."
        )
        assert error.current_entries == tuple(entries)
        assert error.usage == f"{current:,}/2,200"

    @pytest.mark.anyio
    async def test_the_limit_counts_characters_and_is_inclusive(
        self, memory_store: MemoryStore
    ) -> None:
        exact = "é" * MEMORY_LIMIT  # 2200 characters, 4400 bytes in UTF-8
        assert await memory_store.apply("memory", [add(exact)]) == (exact,)
        await memory_store.apply("memory", [remove("é")])
        await _rejected(memory_store, "memory", [add("é" * (MEMORY_LIMIT + 1))])

    @pytest.mark.anyio
    async def test_the_user_target_has_its_own_limit(self, memory_store: MemoryStore) -> None:
        await memory_store.apply("user", [add("u" * USER_LIMIT)])
        error = await _rejected(memory_store, "user", [add("more")])
        assert error.usage == "1,375/1,375"
        assert str(error).startswith("Memory at 1,375/1,375 chars. Adding this entry (4 chars)")
        # The memory target is unaffected by the full user profile.
        await memory_store.apply("memory", [add("m" * 1500)])

    @pytest.mark.anyio
    async def test_a_replacement_that_overflows_is_rejected(
        self, memory_store: MemoryStore
    ) -> None:
        entries = await _fill(memory_store, "memory", 20, 100)
        current = _size(entries)
        error = await _rejected(memory_store, "memory", [replace("000-", "z" * 300)])
        total = current - 100 + 300
        assert str(error) == (
            f"Replacement would put memory at {total:,}/2,200 chars. Shorten the new content, "
            "or 'remove' other stale or less important entries to make room (see "
            "current_entries below), then retry — all in this turn."
        )
        assert error.current_entries == tuple(entries)
        assert error.usage == f"{current:,}/2,200"

    # -- matching ----------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_no_match_is_rejected_with_the_entries(self, memory_store: MemoryStore) -> None:
        await memory_store.apply("memory", [add("alpha"), add("beta")])
        error = await _rejected(memory_store, "memory", [replace("gamma", "new")])
        assert str(error) == (
            "No entry matched 'gamma'. Check current_entries below and retry with the exact "
            "text of the entry you want to replace."
        )
        assert error.current_entries == ("alpha", "beta")
        error = await _rejected(memory_store, "memory", [remove("delta")])
        assert str(error) == (
            "No entry matched 'delta'. Check current_entries below and retry with the exact "
            "text of the entry you want to remove."
        )
        assert error.current_entries == ("alpha", "beta")
        assert not error.matches

    @pytest.mark.anyio
    async def test_several_matches_are_rejected_with_previews(
        self, memory_store: MemoryStore
    ) -> None:
        long = "shared prefix " + "w" * 100
        await memory_store.apply("memory", [add(long), add("shared prefix, short"), add("x")])
        for write in (replace("shared", "new"), remove("shared")):
            error = await _rejected(memory_store, "memory", [write])
            assert str(error) == "Multiple entries matched 'shared'. Be more specific."
            assert error.matches == (long[:80] + "...", "shared prefix, short")

    # -- batches -----------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_a_batch_applies_in_order(self, memory_store: MemoryStore) -> None:
        await memory_store.apply("memory", [add("old one"), add("old two")])
        result = await memory_store.apply(
            "memory",
            [remove("one"), replace("two", "new two"), add("three"), add("three")],
        )
        assert result == ("new two", "three")
        assert (await memory_store.snapshot()).memory == result

    @pytest.mark.anyio
    async def test_a_batch_is_all_or_nothing(self, memory_store: MemoryStore) -> None:
        await memory_store.apply("memory", [add("alpha"), add("beta")])
        error = await _rejected(memory_store, "memory", [add("gamma"), remove("zzz")])
        assert str(error) == "Operation 2 (remove): no entry matched 'zzz'." + _BATCH_SUFFIX
        assert error.current_entries == ("alpha", "beta")
        assert error.usage == f"{_size(['alpha', 'beta'])}/2,200"
        cases = {
            "Operation 1 (add): content is required.": [add(" "), add("ok")],
            "Operation 2 (replace): old_text is required.": [add("ok"), replace("", "x")],
            "Operation 2 (replace): content is required (use action='remove' to delete).": [
                add("ok"),
                replace("alpha", ""),
            ],
            "Operation 2 (remove): 'a' matched multiple distinct entries -- be more specific.": [
                add("ok"),
                remove("a"),
            ],
            "Operation 2 (bogus): unknown action. Use add, replace, or remove.": [
                add("ok"),
                MemoryWrite(cast(Any, "bogus")),
            ],
        }
        for message, writes in cases.items():
            assert str(await _rejected(memory_store, "memory", writes)) == message + _BATCH_SUFFIX

    @pytest.mark.anyio
    async def test_a_batch_checks_the_limit_on_its_final_state_only(
        self, memory_store: MemoryStore
    ) -> None:
        entries = await _fill(memory_store, "memory", 20, 100)
        big = "n" * 150
        # The add alone would overflow; the removals in the same batch make room.
        result = await memory_store.apply(
            "memory", [add(big), remove(entries[0][:4]), remove(entries[1][:4])]
        )
        assert result == (*entries[2:], big)
        # A batch that still overflows at the end is refused whole.
        current = _size(result)
        error = await _rejected(memory_store, "memory", [remove(entries[2][:4]), add("q" * 400)])
        total = current - 103 + 403
        assert str(error) == (
            f"After applying all 2 operations, memory would be at {total:,}/2,200 chars -- "
            "over the limit. Remove or shorten more entries in the same batch (see "
            "current_entries below), then retry."
        )
        assert error.current_entries == result
        assert error.usage == f"{current:,}/2,200"

    @pytest.mark.anyio
    async def test_an_empty_batch_is_rejected(self, memory_store: MemoryStore) -> None:
        assert str(await _rejected(memory_store, "memory", [])) == "operations list is empty."

    # -- targets, visibility, lifecycle ------------------------------------------------

    @pytest.mark.anyio
    async def test_an_unknown_target_is_rejected(self, memory_store: MemoryStore) -> None:
        error = await _rejected(memory_store, "notes", [add("x")])
        assert str(error) == "Invalid target 'notes'. Use 'memory' or 'user'."

    @pytest.mark.anyio
    async def test_writes_reach_the_next_snapshot_of_any_handle(
        self, memory_store: MemoryStore, make_twin: TwinFactory
    ) -> None:
        twin = await make_twin()
        first = await twin.snapshot()
        await memory_store.apply("memory", [add("written by one")])
        assert first.memory == (), "a snapshot is a value: later writes must not change it"
        assert (await twin.snapshot()).memory == ("written by one",)
        await twin.apply("user", [add("written by two")])
        await twin.apply("memory", [add("also by two")])
        snapshot = await memory_store.snapshot()
        assert snapshot.memory == ("written by one", "also by two")
        assert snapshot.user == ("written by two",)

    @pytest.mark.anyio
    async def test_snapshot_entries_match_what_apply_returned(
        self, memory_store: MemoryStore
    ) -> None:
        returned = await memory_store.apply("user", [add("a"), add("b"), replace("a", "c")])
        assert returned == ("c", "b")
        assert (await memory_store.snapshot()).user == returned

    @pytest.mark.anyio
    async def test_aclose_is_idempotent(self, memory_store: MemoryStore) -> None:
        await memory_store.aclose()
        await memory_store.aclose()
