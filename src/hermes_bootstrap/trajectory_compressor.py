"""Shrink ShareGPT trajectories into a token budget by summarising their middle.

Long agent runs make samples longer than the context a model is trained at; dropping them
wastes the data and truncating them teaches the model to stop mid-task. The reference's
offline compressor keeps the start of the task and its ending verbatim, and replaces as
few middle turns as needed with one ``human`` turn starting ``[CONTEXT SUMMARY]:``, written
by a model. This module does the same over the :class:`ChatModel` port, async end to end.

The cut never separates a ``gpt`` tool call from the ``tool`` turn answering it: a tool
turn at a boundary is moved into the summarised region, so every kept ``<tool_response>``
still follows its ``<tool_call>``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from hermes_bootstrap.batch import _atomic_write, _read_lines
from hermes_core.errors import ModelError
from hermes_core.messages import UserMessage
from hermes_core.ports.llm import ChatModel, ModelRequest

__all__ = [
    "DEFAULT_SUMMARY_NOTICE",
    "FALLBACK_SUMMARY",
    "SUMMARY_PREFIX",
    "CompressionStats",
    "TrajectoryCompressor",
    "estimate",
]

log = logging.getLogger("hermes.trajectory_compressor")

SUMMARY_PREFIX = "[CONTEXT SUMMARY]:"
"""How the inserted ``human`` turn starts; training pipelines look for it."""

DEFAULT_SUMMARY_NOTICE = (
    "\n\nSome of your previous tool responses may be summarized to preserve context."
)
"""Appended to the ``system`` turn of a compressed sample, as the reference does, so the
trained model learns that a summary turn can appear."""

FALLBACK_SUMMARY = (
    f"{SUMMARY_PREFIX} [Summary generation failed - previous turns contained tool calls and "
    "responses that have been compressed to save context space.]"
)
"""Used when the summariser fails: the sample still fits, and the gap is said plainly."""

_ELIDE_OVER = 3000
_KEEP_HEAD = 1500
_KEEP_TAIL = 500


def estimate(text: str) -> int:
    """Tokens of ``text`` estimated as ``ceil(len / 4)``: no tokenizer download needed."""
    return math.ceil(len(text) / 4)


@dataclass(slots=True)
class CompressionStats:
    """Counts of one :meth:`TrajectoryCompressor.compress_file` call."""

    total: int = 0
    compressed: int = 0
    under_target: int = 0
    still_over_limit: int = 0
    summary_failures: int = 0
    invalid_rows: int = 0


def _elide(value: str) -> str:
    if len(value) <= _ELIDE_OVER:
        return value
    cut = len(value) - _KEEP_HEAD - _KEEP_TAIL
    return f"{value[:_KEEP_HEAD]}\n...[{cut} characters elided]...\n{value[-_KEEP_TAIL:]}"


def _summary_prompt(turns: Sequence[Mapping[str, Any]], first: int, budget: int) -> str:
    body = "\n\n".join(
        f"[Turn {first + k} - {str(t.get('from', 'unknown')).upper()}]:\n"
        f"{_elide(str(t.get('value', '')))}"
        for k, t in enumerate(turns)
    )
    return (
        "Summarize the agent conversation turns below. The summary replaces them in the "
        "conversation, so keep what the rest of the conversation relies on.\n\n"
        "Write in the same language as the turns; do not translate. Describe, neutrally, "
        "what the assistant did and learned:\n"
        "1. the actions it took (tool calls, searches, file operations);\n"
        "2. the key results it obtained;\n"
        "3. decisions and findings;\n"
        "4. concrete data: file names, values, outputs.\n\n"
        f"Stay factual. Aim for about {budget} tokens.\n\n"
        f"---\nTURNS TO SUMMARIZE:\n{body}\n---\n\n"
        f'Write only the summary, starting with "{SUMMARY_PREFIX}".'
    )


def _is_tool(turns: Sequence[Mapping[str, Any]], index: int) -> bool:
    return index < len(turns) and turns[index].get("from") == "tool"


def _snap(turns: Sequence[Mapping[str, Any]], index: int, low: int, high: int) -> int:
    """The nearest boundary in ``[low, high]`` that is not a ``tool`` turn, forward first.

    Moving forward folds a tool turn into the region holding its call; backward is the
    fallback when only tool turns lie ahead.
    """
    forward = index
    while forward < high and _is_tool(turns, forward):
        forward += 1
    if not _is_tool(turns, forward):
        return forward
    backward = index
    while backward > low and _is_tool(turns, backward):
        backward -= 1
    return backward


class TrajectoryCompressor:
    """Summarises the middle of over-budget ShareGPT records with ``model``.

    ``protect_head`` leading turns (the system prompt and the task) and ``protect_tail``
    trailing turns (the ending) are never summarised. ``tokens`` counts a turn value;
    swap in a real tokenizer for exact budgets. The compressor closes ``model`` only when
    ``owns_model`` is true, so a host can share one model between tools.
    """

    def __init__(
        self,
        model: ChatModel,
        target_tokens: int = 29000,
        protect_head: int = 2,
        protect_tail: int = 4,
        tokens: Callable[[str], int] = estimate,
        *,
        summary_tokens: int = 750,
        summary_notice: str | None = DEFAULT_SUMMARY_NOTICE,
        concurrency: int = 4,
        owns_model: bool = False,
    ) -> None:
        if target_tokens < 1 or protect_head < 0 or protect_tail < 0 or concurrency < 1:
            raise ValueError(
                "target_tokens and concurrency must be positive and the protected turn "
                "counts non-negative"
            )
        self.model = model
        self.target_tokens = target_tokens
        self.protect_head = protect_head
        self.protect_tail = protect_tail
        self.tokens = tokens
        self.summary_tokens = summary_tokens
        self.summary_notice = summary_notice
        self.concurrency = concurrency
        self.owns_model = owns_model
        self.summary_failures = 0
        self._closed = False

    async def __aenter__(self) -> TrajectoryCompressor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the model if this compressor owns it; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self.owns_model:
            await self.model.aclose()

    def count(self, conversations: Sequence[Mapping[str, Any]]) -> int:
        """The token count of a conversation: the sum over its turn values."""
        return sum(self.tokens(str(t.get("value", ""))) for t in conversations)

    async def compress(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``record`` with its ``conversations`` fitted to the budget where possible.

        A record under the budget, without a conversation, or without a middle long
        enough to be worth a summary comes back unchanged (as a new dict). The model is
        called once per compressed record, with no tools; if it fails, a fixed fallback
        summary is used and :attr:`summary_failures` counts it.
        """
        out = dict(record)
        turns = record.get("conversations")
        if not isinstance(turns, list) or not all(isinstance(t, Mapping) for t in turns):
            return out
        region = self._region(turns)
        if region is None:
            return out
        start, until = region
        summary = await self._summarise(turns[start:until], start)
        head = [dict(t) for t in turns[:start]]
        if self.summary_notice:
            for turn in head:
                if turn.get("from") == "system":
                    turn["value"] = str(turn.get("value", "")) + self.summary_notice
                    break
        out["conversations"] = [
            *head,
            {"from": "human", "value": summary},
            *(dict(t) for t in turns[until:]),
        ]
        return out

    def _region(self, turns: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
        """The ``[start, until)`` turns to summarise, or ``None`` when nothing should be."""
        sizes = [self.tokens(str(t.get("value", ""))) for t in turns]
        total = sum(sizes)
        if total <= self.target_tokens:
            return None
        head = min(self.protect_head, len(turns))
        end = max(head, len(turns) - self.protect_tail)
        start = _snap(turns, head, head, end)
        if start >= end:
            return None
        needed = total - self.target_tokens + self.summary_tokens
        gathered, until = 0, start
        while until < end and gathered < needed:
            gathered += sizes[until]
            until += 1
        until = _snap(turns, until, start, end)
        if until <= start or sum(sizes[start:until]) <= self.summary_tokens:
            return None  # a summary at least as long as the turns it replaces gains nothing
        return start, until

    async def _summarise(self, turns: Sequence[Mapping[str, Any]], first: int) -> str:
        request = ModelRequest(
            messages=(UserMessage(content=_summary_prompt(turns, first, self.summary_tokens)),),
            tools=(),
            model=self.model.model_name,
            max_tokens=self.summary_tokens * 2,
        )
        try:
            response = await self.model.complete(request)
        except ModelError as exc:
            log.warning("trajectory summary failed: %s", exc)
            self.summary_failures += 1
            return FALLBACK_SUMMARY
        if response.finish_reason == "length":
            log.warning("trajectory summary was cut at the output limit; using the fallback")
            self.summary_failures += 1
            return FALLBACK_SUMMARY
        text = (response.message.content or "").strip()
        if text.startswith(SUMMARY_PREFIX):
            return text
        return f"{SUMMARY_PREFIX} {text}" if text else FALLBACK_SUMMARY

    async def compress_file(self, src: str | Path, dst: str | Path) -> CompressionStats:
        """Compress every record of the JSONL file ``src`` into ``dst``, in order.

        Up to ``concurrency`` records are summarised at once; lines that are not JSON
        objects are dropped and counted. ``dst`` is replaced atomically, so it may be
        ``src`` itself.

        Raises:
            OSError: ``src`` cannot be read or ``dst`` written.
        """
        stats = CompressionStats()
        failures_before = self.summary_failures

        async def compressed_lines() -> AsyncIterator[str]:
            window: list[dict[str, Any]] = []
            async with aclosing(_read_lines(anyio.Path(src))) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except ValueError:
                        record = None
                    if not isinstance(record, dict):
                        stats.invalid_rows += 1
                        continue
                    window.append(record)
                    if len(window) >= self.concurrency * 4:
                        for out in await self._compress_window(window, stats):
                            yield out
                        window = []
            for out in await self._compress_window(window, stats):
                yield out

        await _atomic_write(anyio.Path(dst), compressed_lines())
        stats.summary_failures = self.summary_failures - failures_before
        return stats

    async def _compress_window(
        self, records: Sequence[dict[str, Any]], stats: CompressionStats
    ) -> list[str]:
        results: list[dict[str, Any]] = list(records)
        limiter = anyio.CapacityLimiter(self.concurrency)

        async def one(index: int) -> None:
            async with limiter:
                results[index] = await self.compress(records[index])

        async with anyio.create_task_group() as tg:
            for index in range(len(records)):
                tg.start_soon(one, index)
        lines: list[str] = []
        for before, after in zip(records, results, strict=True):
            stats.total += 1
            if after.get("conversations") is not before.get("conversations"):
                stats.compressed += 1
                if self.count(after["conversations"]) > self.target_tokens:
                    stats.still_over_limit += 1
            elif isinstance(before.get("conversations"), list):
                if self.count(before["conversations"]) <= self.target_tokens:
                    stats.under_target += 1
                else:
                    stats.still_over_limit += 1
            lines.append(json.dumps(after, ensure_ascii=False) + "\n")
        return lines
