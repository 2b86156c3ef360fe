"""Tool-batch planning and execution order.

A model often asks for several tools at once. Reads and searches can overlap; a terminal
command, a memory write or a question to the user must not race anything. The planner
splits a batch into *segments*: a parallel segment of calls that may overlap, or a single
sequential call acting as a barrier. File tools that touch overlapping paths stay ordered
when either side writes. Whatever the completion order, results are appended in the order
the model emitted the calls (WIRE.md §4 item 4): the runner writes each outcome into the
call's own slot.
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from hermes_core.ports.tools import ToolSpec

__all__ = [
    "DEFAULT_MAX_WORKERS",
    "PlannedCall",
    "Segment",
    "plan_batch",
    "run_segments",
]

DEFAULT_MAX_WORKERS = 8

SEQUENTIAL_TOOLS = frozenset(
    {"clarify", "memory", "todo", "terminal", "process", "delegate_task", "execute_code"}
)
"""Interactive and stateful tools: always a barrier, whatever their spec says."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """One call as the planner sees it.

    ``spec`` is ``None`` and ``args`` is ``None`` for calls that will not run (unknown
    tool, bad arguments): they produce an error immediately and never block others.
    """

    index: int
    spec: ToolSpec | None
    args: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Segment:
    """Calls that run together (``parallel``) or one barrier call."""

    indices: tuple[int, ...]
    parallel: bool


def _canonical(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/")) or "."


def _overlaps(a: str, b: str) -> bool:
    if a == b or a == "." or b == ".":
        return True
    return a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _path_claim(call: PlannedCall) -> tuple[str, bool] | None:
    """(canonical path, is_writer) for a path-scoped call, else ``None``."""
    spec = call.spec
    if spec is None or spec.path_access is None or call.args is None:
        return None
    raw = call.args.get(spec.path_argument)
    path = raw if isinstance(raw, str) and raw else "."
    return _canonical(path), spec.path_access == "write"


def _may_overlap(call: PlannedCall) -> bool:
    if call.spec is None or call.args is None:
        return True
    if call.spec.name in SEQUENTIAL_TOOLS:
        return False
    return call.spec.parallel_safe or call.spec.path_access is not None


def plan_batch(calls: Sequence[PlannedCall]) -> list[Segment]:
    """Split ``calls`` into ordered segments; concatenated, they list every index once."""
    segments: list[Segment] = []
    run: list[int] = []
    claims: list[tuple[str, bool]] = []

    def close_run() -> None:
        if run:
            segments.append(Segment(tuple(run), parallel=len(run) > 1))
            run.clear()
            claims.clear()

    for call in calls:
        if not _may_overlap(call):
            close_run()
            segments.append(Segment((call.index,), parallel=False))
            continue
        claim = _path_claim(call)
        if claim is not None:
            path, writer = claim
            if any(_overlaps(path, p) and (writer or w) for p, w in claims):
                close_run()
            claims.append(claim)
        run.append(call.index)
    close_run()
    return segments


async def run_segments(
    segments: Sequence[Segment],
    run_one: Callable[[int], Awaitable[T]],
    slots: list[T | None],
    *,
    max_workers: int = DEFAULT_MAX_WORKERS,
    should_stop: Callable[[], bool] = lambda: False,
) -> None:
    """Run every segment in order, writing each call's outcome into ``slots[index]``.

    Parallel segments run in one task group bounded by ``max_workers``; if the caller is
    cancelled, the group cancels and awaits its children before the cancellation
    propagates. ``should_stop`` is polled between segments (an interrupt): calls of the
    remaining segments are left unstarted, their slots ``None``.
    """
    limiter: anyio.CapacityLimiter | None = None

    async def guarded(index: int) -> None:
        assert limiter is not None
        async with limiter:
            slots[index] = await run_one(index)

    for segment in segments:
        if should_stop():
            return
        if len(segment.indices) == 1:
            # One call needs no task group: starting one costs more than a trivial tool
            # (~65 us), and it is by far the most common batch.
            slots[segment.indices[0]] = await run_one(segment.indices[0])
            continue
        if limiter is None:
            limiter = anyio.CapacityLimiter(max_workers)
        async with anyio.create_task_group() as group:
            for index in segment.indices:
                group.start_soon(guarded, index)
