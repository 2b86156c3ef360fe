"""The tool registry: an explicit, per-agent collection of tools.

There is no import-time global registry: a host composes the tools it wants into one of
these, so two agents in one process can hold different tools. The registry rejects name
collisions, caches availability checks for a short time (they may probe the network or
the environment), and repairs the tool names models commonly get slightly wrong.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Iterable, Iterator

from hermes_core.errors import ToolNameCollision
from hermes_core.ports.tools import Tool, ToolSpec

__all__ = ["AVAILABILITY_TTL", "ToolRegistry"]

AVAILABILITY_TTL = 30.0
"""Seconds an availability check stays cached."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = AVAILABILITY_TTL,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._checked: dict[str, tuple[float, bool]] = {}
        self._clock = clock
        self._ttl = ttl
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool, *, override: bool = False) -> None:
        """Add ``tool``.

        Raises:
            ToolNameCollision: the name is taken and ``override`` is false.
        """
        name = tool.spec.name
        existing = self._tools.get(name)
        if existing is not None and not override:
            raise ToolNameCollision(
                f"tool name {name!r} is already registered by toolset "
                f"{existing.spec.toolset!r}; rename one or pass override=True"
            )
        self._tools[name] = tool
        self._checked.pop(name, None)

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)
        self._checked.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry holding only the named tools that exist here."""
        wanted = set(names)
        return ToolRegistry(
            (t for n, t in self._tools.items() if n in wanted), clock=self._clock, ttl=self._ttl
        )

    async def available_specs(self) -> tuple[ToolSpec, ...]:
        """Specs of tools whose availability check passes, checks cached for ``ttl``."""
        now = self._clock()
        specs: list[ToolSpec] = []
        for name, tool in self._tools.items():
            cached = self._checked.get(name)
            if cached is None or now - cached[0] >= self._ttl:
                try:
                    ok = bool(await tool.available())
                except Exception:
                    ok = False
                cached = (now, ok)
                self._checked[name] = cached
            if cached[1]:
                specs.append(tool.spec)
        return tuple(specs)

    def repair_name(self, name: str) -> str | None:
        """The registered name a model most likely meant by ``name``, or ``None``.

        Tries, in order: the name cut at the first quote or angle bracket, lower case,
        dashes and spaces as underscores, CamelCase as snake_case, a ``_tool`` suffix
        stripped (twice at most), then the closest name by similarity (cutoff 0.7).
        """
        if name in self._tools:
            return name
        base = re.split(r"[\"'<>]", name, maxsplit=1)[0].strip()
        candidates = [base, base.lower(), re.sub(r"[-\s]+", "_", base.lower())]
        snake = re.sub(r"[-\s]+", "_", _CAMEL.sub("_", base)).lower()
        candidates.append(snake)
        for _ in range(2):
            if snake.endswith("_tool"):
                snake = snake[: -len("_tool")]
                candidates.append(snake)
        for candidate in candidates:
            if candidate in self._tools:
                return candidate
        close = difflib.get_close_matches(snake or base, list(self._tools), n=1, cutoff=0.7)
        return close[0] if close else None
