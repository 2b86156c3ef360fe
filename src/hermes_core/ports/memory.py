"""The memory port: a bounded agent memory and user profile.

The engine reads one frozen snapshot at the start of a conversation so the system prompt
stays byte-stable for prompt caching; writes land immediately but show only in the next
conversation (or after compression).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = ["MemorySnapshot", "MemoryStore", "MemoryTarget", "MemoryWrite"]

MemoryTarget = Literal["memory", "user"]


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """Entries of both targets and their limits (in characters of the joined text)."""

    memory: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    memory_limit: int = 2200
    user_limit: int = 1375


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """One operation of a batch: ``add`` (content), ``replace`` (old_text, content), ``remove``."""

    action: Literal["add", "replace", "remove"]
    content: str | None = None
    old_text: str | None = None


@runtime_checkable
class MemoryStore(Protocol):
    """Bounded memory. ``apply`` is all-or-nothing and returns the target's new entries.

    A write that does not fit or matches nothing raises a ``HermesError`` whose message the
    memory tool hands to the model, with the current entries, so it can consolidate.
    """

    async def snapshot(self) -> MemorySnapshot: ...

    async def apply(
        self, target: MemoryTarget, writes: Sequence[MemoryWrite]
    ) -> tuple[str, ...]: ...

    async def aclose(self) -> None: ...
