"""Tool-batch planning and ordered execution, with property tests."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_core.ports.tools import ToolSpec
from hermes_core.scheduling import PlannedCall, Segment, plan_batch, run_segments

READ = ToolSpec(name="read_file", description="r", parallel_safe=True, path_access="read")
WRITE = ToolSpec(name="write_file", description="w", path_access="write")
SEARCH = ToolSpec(name="web_search", description="s", parallel_safe=True)
TERMINAL = ToolSpec(name="terminal", description="t", parallel_safe=True)  # forced sequential
PLAIN = ToolSpec(name="custom", description="c")


def planned(*items: tuple[ToolSpec | None, dict[str, Any] | None]) -> list[PlannedCall]:
    return [PlannedCall(i, spec, args) for i, (spec, args) in enumerate(items)]


def test_parallel_safe_calls_share_one_segment() -> None:
    calls = planned((SEARCH, {}), (SEARCH, {}), (READ, {"path": "a"}))
    assert plan_batch(calls) == [Segment((0, 1, 2), parallel=True)]


def test_stateful_tools_are_barriers_whatever_their_spec_says() -> None:
    calls = planned((SEARCH, {}), (TERMINAL, {}), (SEARCH, {}), (SEARCH, {}))
    assert plan_batch(calls) == [
        Segment((0,), parallel=False),
        Segment((1,), parallel=False),
        Segment((2, 3), parallel=True),
    ]


def test_read_after_write_on_same_path_is_ordered() -> None:
    calls = planned((WRITE, {"path": "a/b.py"}), (READ, {"path": "./a/b.py"}))
    assert plan_batch(calls) == [Segment((0,), parallel=False), Segment((1,), parallel=False)]


def test_writes_to_unrelated_paths_overlap_and_nested_paths_do_not() -> None:
    calls = planned((WRITE, {"path": "a.txt"}), (WRITE, {"path": "b.txt"}))
    assert plan_batch(calls) == [Segment((0, 1), parallel=True)]
    nested = planned((WRITE, {"path": "src"}), (READ, {"path": "src/x.py"}))
    assert len(plan_batch(nested)) == 2


def test_reads_of_the_same_path_overlap() -> None:
    calls = planned((READ, {"path": "x"}), (READ, {"path": "x"}))
    assert plan_batch(calls) == [Segment((0, 1), parallel=True)]


def test_invalid_calls_never_block_and_plain_tools_are_sequential() -> None:
    calls = planned((None, None), (PLAIN, {}), (None, None))
    assert plan_batch(calls) == [
        Segment((0,), parallel=False),
        Segment((1,), parallel=False),
        Segment((2,), parallel=False),
    ]


SPECS = st.sampled_from([READ, WRITE, SEARCH, TERMINAL, PLAIN, None])
PATHS = st.sampled_from(["a", "a/b", "b", ".", "c/d"])


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[PlannedCall, float]]:
    size = draw(st.integers(1, 10))
    out = []
    for index in range(size):
        spec = draw(SPECS)
        args = {"path": draw(PATHS)} if spec is not None else None
        out.append((PlannedCall(index, spec, args), draw(st.floats(0, 0.004))))
    return out


@given(batch=batches())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_plan_covers_every_call_once_in_order(batch: list[tuple[PlannedCall, float]]) -> None:
    calls = [c for c, _ in batch]
    segments = plan_batch(calls)
    flat = [i for seg in segments for i in seg.indices]
    assert flat == list(range(len(calls)))
    for seg in segments:
        writers = [calls[i] for i in seg.indices if calls[i].spec is WRITE]
        for w in writers:  # no writer shares a segment with an overlapping path claim
            others = [
                calls[i]
                for i in seg.indices
                if calls[i] is not w and calls[i].spec in (READ, WRITE)
            ]
            for other in others:
                a, b = str(w.args["path"]), str(other.args["path"])  # type: ignore[index]
                assert not (
                    a == b or a == "." or b == "." or b.startswith(a + "/") or a.startswith(b + "/")
                )


@given(batch=batches())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_results_land_in_call_order_one_per_call(batch: list[tuple[PlannedCall, float]]) -> None:
    calls = [c for c, _ in batch]
    delays = [d for _, d in batch]
    finished: list[int] = []

    async def run_one(index: int) -> str:
        await anyio.sleep(delays[index])
        finished.append(index)
        return f"result-{index}"

    async def main() -> list[str | None]:
        slots: list[str | None] = [None] * len(calls)
        await run_segments(plan_batch(calls), run_one, slots, max_workers=3)
        return slots

    slots = anyio.run(main)
    assert slots == [f"result-{i}" for i in range(len(calls))]
    assert sorted(finished) == list(range(len(calls)))


@pytest.mark.anyio
async def test_concurrency_is_bounded_by_max_workers() -> None:
    running = peak = 0

    async def run_one(index: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        running -= 1
        return index

    slots: list[int | None] = [None] * 10
    await run_segments([Segment(tuple(range(10)), parallel=True)], run_one, slots, max_workers=3)
    assert peak == 3 and slots == list(range(10))


@pytest.mark.anyio
async def test_should_stop_leaves_later_segments_unstarted() -> None:
    slots: list[int | None] = [None, None, None]
    stop = False

    async def run_one(index: int) -> int:
        nonlocal stop
        stop = True
        return index

    segments = [Segment((0,), False), Segment((1,), False), Segment((2,), False)]
    await run_segments(segments, run_one, slots, should_stop=lambda: stop)
    assert slots == [0, None, None]
