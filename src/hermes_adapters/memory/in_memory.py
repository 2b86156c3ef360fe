"""The in-memory memory store: the trusted fake of :class:`~hermes_core.ports.MemoryStore`.

Two tuples and the shared rules of :mod:`hermes_adapters.memory._entries`, so a test (or an
ephemeral agent that must not touch ``$HERMES_HOME``) gets exactly the semantics and the
messages of the file store. ``apply`` never awaits between reading and storing, so under
one event loop every batch is atomic without a lock. The same contract suite holds it and
:class:`~hermes_adapters.memory.files.FileMemoryStore` to one behaviour.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import anyio.lowlevel

from hermes_adapters.memory._entries import apply_writes, check_target, parse, render
from hermes_core.ports.memory import MemorySnapshot, MemoryTarget, MemoryWrite

__all__ = ["InMemoryMemoryStore"]


class InMemoryMemoryStore:
    """Bounded memory held in this process; ``memory``/``user`` seed the entries."""

    def __init__(
        self,
        *,
        memory_limit: int = 2200,
        user_limit: int = 1375,
        memory: Iterable[str] = (),
        user: Iterable[str] = (),
    ) -> None:
        self.memory_limit = memory_limit
        self.user_limit = user_limit
        # Seeds go through parse(render()) so they are stripped and de-duplicated like a
        # file that was read back.
        self._entries: dict[MemoryTarget, tuple[str, ...]] = {
            "memory": parse(render(list(memory))),
            "user": parse(render(list(user))),
        }
        self.closed = False

    def _limit(self, target: MemoryTarget) -> int:
        return self.memory_limit if target == "memory" else self.user_limit

    async def snapshot(self) -> MemorySnapshot:
        await anyio.lowlevel.checkpoint()
        return MemorySnapshot(
            memory=self._entries["memory"],
            user=self._entries["user"],
            memory_limit=self.memory_limit,
            user_limit=self.user_limit,
        )

    async def apply(self, target: MemoryTarget, writes: Sequence[MemoryWrite]) -> tuple[str, ...]:
        # The checkpoint comes first, so a cancelled caller never half-observes a write.
        await anyio.lowlevel.checkpoint()
        name = check_target(target)
        entries = apply_writes(self._entries[name], tuple(writes), self._limit(name))
        self._entries[name] = entries
        return entries

    async def aclose(self) -> None:
        """Nothing to release; idempotent so any owner may close it."""
        self.closed = True

    def __repr__(self) -> str:
        counts = {t: len(e) for t, e in self._entries.items()}
        return f"InMemoryMemoryStore(entries={counts})"
