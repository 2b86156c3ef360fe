"""Tool and reasoning statistics of a batch run, per sample and in ``statistics.json``.

Why this module exists: what counts as a failed tool call, how a transcript's tool calls
and reasoning turns are counted, how a shard row's ``tool_stats`` and
``tool_error_counts`` are zero-filled, and what ``statistics.json`` holds are the
reference harness's rules (REFERENCE.md §1). Training pipelines filter on these numbers,
so they are kept together here, as plain functions of messages and counts, apart from the
runner that runs the prompts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio

from hermes_bootstrap._batch_files import atomic_write, now
from hermes_core.messages import AssistantMessage, Message, ToolMessage, text_of

__all__ = [
    "REASONING_KEYS",
    "STATISTICS_FILE",
    "add_reasoning_stats",
    "add_tool_stats",
    "extract_reasoning_stats",
    "extract_tool_stats",
    "run_statistics",
    "tool_error_counts",
    "tool_result_failed",
    "tool_stats_row",
    "write_statistics",
]

STATISTICS_FILE = "statistics.json"
REASONING_KEYS = ("total_assistant_turns", "turns_with_reasoning", "turns_without_reasoning")
"""The keys of :func:`extract_reasoning_stats` and of ``reasoning_statistics``."""
_SCRATCHPAD = "<REASONING_SCRATCHPAD>"


def _entry() -> dict[str, int]:
    return {"count": 0, "success": 0, "failure": 0}


# -- one transcript -------------------------------------------------------------------------


def tool_result_failed(content: str) -> bool:
    """Whether a tool result counts as a failure in the statistics (REFERENCE.md §1).

    JSON results fail when they carry a non-null ``error`` (also nested under ``content``)
    or ``"success": false``; text results fail when empty or starting with ``error:``.
    A non-zero ``exit_code`` is not a failure: the model is expected to read it and adapt.
    """
    try:
        value = json.loads(content)
    except ValueError:
        return not content or content.strip().lower().startswith("error:")
    if not isinstance(value, dict):
        return False
    inner = value.get("content")
    return (
        value.get("error") is not None
        or (isinstance(inner, dict) and inner.get("error") is not None)
        or value.get("success") is False
    )


def extract_tool_stats(messages: Iterable[Message]) -> dict[str, dict[str, int]]:
    """``{tool: {count, success, failure}}`` of one transcript, tools in first-call order.

    A call counts when the assistant makes it; its result is matched by call id, so a
    result without a known call adds nothing.
    """
    stats: dict[str, dict[str, int]] = {}
    names: dict[str, str] = {}
    for message in messages:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                entry = stats.setdefault(call.name, _entry())
                entry["count"] += 1
                names[call.id] = call.name
        elif isinstance(message, ToolMessage) and message.tool_call_id in names:
            entry = stats[names[message.tool_call_id]]
            failed = tool_result_failed(text_of(message.content))
            entry["failure" if failed else "success"] += 1
    return stats


def extract_reasoning_stats(messages: Iterable[Message]) -> dict[str, int]:
    """Assistant turns with and without reasoning (native or a ``<REASONING_SCRATCHPAD>``)."""
    total = with_reasoning = 0
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        total += 1
        if (message.reasoning or "").strip() or _SCRATCHPAD in (message.content or ""):
            with_reasoning += 1
    return {
        "total_assistant_turns": total,
        "turns_with_reasoning": with_reasoning,
        "turns_without_reasoning": total - with_reasoning,
    }


# -- shard rows -----------------------------------------------------------------------------


def tool_stats_row(
    raw: Mapping[str, Mapping[str, int]], known: Sequence[str]
) -> dict[str, dict[str, int]]:
    """A shard row's ``tool_stats``: every known tool, zero-filled, then the used ones."""
    out = {name: _entry() for name in known}
    for name, entry in raw.items():
        out[name] = dict(entry)
    return out


def tool_error_counts(raw: Mapping[str, Mapping[str, int]], known: Sequence[str]) -> dict[str, int]:
    """A shard row's ``tool_error_counts``: failures per tool, zero-filled over ``known``."""
    out = dict.fromkeys(known, 0)
    for name, entry in raw.items():
        out[name] = entry.get("failure", 0)
    return out


# -- totals and statistics.json -------------------------------------------------------------


def add_tool_stats(
    totals: dict[str, dict[str, int]], stats: Mapping[str, Mapping[str, int]]
) -> None:
    for name, entry in stats.items():
        total = totals.setdefault(name, _entry())
        for key in total:
            total[key] += entry.get(key, 0)


def add_reasoning_stats(totals: dict[str, int], stats: Mapping[str, int]) -> None:
    for key in totals:
        totals[key] += stats.get(key, 0)


def run_statistics(
    *,
    run_name: str,
    distribution: str,
    total_prompts: int,
    total_batches: int,
    batch_size: int,
    model: str | None,
    started: float,
    tool_totals: Mapping[str, Mapping[str, int]],
    reasoning_totals: Mapping[str, int],
) -> dict[str, Any]:
    """The ``statistics.json`` document of one invocation (``started``: a monotonic time)."""
    tools: dict[str, dict[str, Any]] = {}
    for name in sorted(tool_totals):
        entry: dict[str, Any] = dict(tool_totals[name])
        calls = entry["success"] + entry["failure"]
        entry["success_rate"] = round(entry["success"] / calls * 100, 2) if calls else 0.0
        entry["failure_rate"] = round(entry["failure"] / calls * 100, 2) if calls else 0.0
        tools[name] = entry
    return {
        "run_name": run_name,
        "distribution": distribution,
        "total_prompts": total_prompts,
        "total_batches": total_batches,
        "batch_size": batch_size,
        "model": model,
        "completed_at": now(),
        "duration_seconds": round(time.monotonic() - started, 2),
        "tool_statistics": tools,
        "reasoning_statistics": dict(reasoning_totals),
    }


async def write_statistics(out: anyio.Path, statistics: dict[str, Any]) -> None:
    """Replace ``statistics.json`` in ``out`` atomically."""
    text = json.dumps(statistics, indent=2, ensure_ascii=False) + "\n"
    await atomic_write(out / STATISTICS_FILE, text)
