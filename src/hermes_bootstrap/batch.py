"""``BatchRunner``: run an agent over a JSONL dataset and write training trajectories.

Users point their fine-tuning pipelines at the files this writes and resume interrupted
runs that took days, so the on-disk formats and the resume rules are the reference
harness's, byte for byte where it matters (REFERENCE.md §1, ``docs/batch.md``):

* ``<output_root>/<run_name>/batch_N.jsonl``: append-only shards, one row per kept sample;
* ``checkpoint.json``: completed prompt indices and per-batch counts, replaced atomically
  after every batch (and once more, shielded, when the run is cancelled);
* ``trajectories.jsonl``: every shard merged, hallucinated-tool and torn rows dropped;
* ``statistics.json``: tool and reasoning statistics of this invocation.

Every prompt gets its own isolated :class:`hermes_core.Agent` (no memory, no context files,
no session store) with toolsets sampled from a named distribution by a random generator
seeded from the run name and the prompt index, so a rerun samples the same toolsets.
Batches of consecutive prompts run sequentially inside and up to ``num_workers`` batches
run at once. A row, once its write has started, is always written whole and recorded: the
write is shielded from cancellation, so a cancelled run resumes without duplicates.

This module is the runner; the dataset (``_batch_dataset``), the file formats
(``_batch_files``), the statistics (``_batch_stats``) and the progress display
(``_batch_progress``) live in their own modules and are re-exported from here.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio

from hermes_bootstrap._batch_dataset import Batch, make_batches, read_dataset
from hermes_bootstrap._batch_files import (
    ALL_POSSIBLE_TOOLS,
    MERGED_FILE,
    MergeReport,
    ShardWriter,
    atomic_write,
    completed_prompt_texts,
    load_checkpoint,
    merge_shards,
    now,
    read_lines,
    write_checkpoint,
)
from hermes_bootstrap._batch_files import CHECKPOINT_FILE as CHECKPOINT_FILE
from hermes_bootstrap._batch_files import SHARD_GLOB as SHARD_GLOB
from hermes_bootstrap._batch_progress import BatchProgress, ProgressDisplay, measure
from hermes_bootstrap._batch_stats import (
    REASONING_KEYS,
    add_reasoning_stats,
    add_tool_stats,
    extract_reasoning_stats,
    extract_tool_stats,
    run_statistics,
    tool_error_counts,
    tool_result_failed,
    tool_stats_row,
    write_statistics,
)
from hermes_bootstrap._batch_stats import STATISTICS_FILE as STATISTICS_FILE
from hermes_bootstrap.tools import build_tools
from hermes_core.agent import Agent, AgentSettings
from hermes_core.errors import ConfigError
from hermes_core.ports.llm import ChatModel
from hermes_core.ports.tools import Tool
from hermes_core.registry import ToolRegistry
from hermes_core.toolsets import resolve_toolsets
from hermes_core.trajectory import to_sharegpt

__all__ = [
    "ALL_POSSIBLE_TOOLS",
    "DISTRIBUTIONS",
    "BatchProgress",
    "BatchRunner",
    "Distribution",
    "MergeReport",
    "RunReport",
    "extract_reasoning_stats",
    "extract_tool_stats",
    "merge_shards",
    "sample_toolsets",
    "tool_result_failed",
]

log = logging.getLogger("hermes.batch")

# The old private names: ``trajectory_compressor`` imports them from here.
_read_lines = read_lines
_atomic_write = atomic_write


# -- toolset distributions ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Distribution:
    """A named toolset mix: each toolset is enabled for a prompt with ``p`` percent."""

    description: str
    toolsets: Mapping[str, float]


def _dist(description: str, **toolsets: float) -> Distribution:
    return Distribution(description, MappingProxyType(dict(toolsets)))


DISTRIBUTIONS: Mapping[str, Distribution] = MappingProxyType(
    {
        "default": _dist(
            "Every tool, every prompt",
            web=100,
            vision=100,
            image_gen=100,
            terminal=100,
            file=100,
            browser=100,
        ),
        "minimal": _dist("Web search and extraction only", web=100),
        "balanced": _dist(
            "Each toolset half of the time",
            web=50,
            vision=50,
            image_gen=50,
            terminal=50,
            file=50,
            browser=50,
        ),
        "research": _dist(
            "Web research with browsing and some vision", web=90, browser=70, vision=50, terminal=10
        ),
        "development": _dist(
            "Shell and files, with occasional documentation lookups",
            terminal=85,
            file=85,
            web=30,
            vision=10,
        ),
        "terminal_only": _dist("Shell and files, nothing else", terminal=100, file=100),
        "terminal_web": _dist(
            "Shell and files plus web search for documentation", terminal=100, file=100, web=100
        ),
        "safe": _dist("No shell and no local files", web=80, browser=70, vision=60, image_gen=60),
        "creative": _dist("Image generation and vision", image_gen=90, vision=90, web=30),
        "browser_only": _dist("Browser automation only", browser=100),
    }
)
"""Built-in distributions by name (read-only). ``default`` is the reference's."""


def sample_toolsets(distribution: Distribution, rng: random.Random) -> list[str]:
    """The toolsets one prompt gets: each with its probability, in distribution order.

    When the dice pick nothing, the most likely toolset is used (the first one on a tie),
    so a prompt never runs without tools by accident.
    """
    chosen = [name for name, p in distribution.toolsets.items() if rng.random() * 100 < p]
    if not chosen and distribution.toolsets:
        best = max(distribution.toolsets.values())
        chosen = [next(n for n, p in distribution.toolsets.items() if p == best)]
    return chosen


# -- the runner --------------------------------------------------------------------------


@dataclass(slots=True)
class RunReport:
    """Counts of one ``run()``, for logs and callers (the files keep the reference shape)."""

    dataset_rows: int = 0
    invalid_json_rows: int = 0
    missing_prompt_rows: int = 0
    resumed_by_content: int = 0
    skipped_by_checkpoint: int = 0
    processed: int = 0
    written: int = 0
    failed: int = 0
    discarded_no_reasoning: int = 0
    merge: MergeReport | None = None


@dataclass(slots=True)
class _RunState:
    """What the batches of one invocation share; the event loop serialises access."""

    checkpointed: frozenset[int]
    completed: set[int]
    batch_stats: dict[str, dict[str, int]]
    tool_totals: dict[str, dict[str, int]] = field(default_factory=dict)
    reasoning_totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(REASONING_KEYS, 0)
    )
    total: int = 0
    done: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class _Sample:
    """One prompt's outcome: ``row`` is None when it failed or was discarded."""

    failed: bool
    row: dict[str, Any] | None = None
    tool_stats: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    reasoning: Mapping[str, int] = field(default_factory=dict)


class BatchRunner:
    """Runs one agent per dataset prompt and writes the reference's training files.

    The constructor validates its arguments and touches no file; :meth:`run` does the work.
    ``chat_model`` is one model shared by every prompt's agent and left open for its owner
    (the caller): a provider model holds the HTTP session and its warm connections, so
    sharing it saves a connection set-up per prompt. ``chat_model_factory`` instead returns
    a fresh model per prompt, owned (and closed) by that prompt's agent: for models that
    keep per-conversation state, such as the scripted demo planner. ``tools`` replaces the built-in tools: a tool whose name belongs to a
    built-in toolset is offered only when the prompt's sampled toolsets grant it, any other
    tool always, and its name counts as known for the stats and the merge.

    Raises:
        ConfigError: an unknown distribution, a non-positive size, both ``chat_model`` and
            ``chat_model_factory``, or a provider that is not wired yet (pass either, or use
            ``provider="scripted"``).
    """

    def __init__(
        self,
        dataset_file: str | Path,
        batch_size: int,
        run_name: str,
        distribution: str = "default",
        model: str | None = None,
        provider: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        num_workers: int = 4,
        max_iterations: int = 10,
        reasoning_config: Mapping[str, Any] | None = None,
        output_root: str | Path = "data",
        chat_model_factory: Callable[[], ChatModel] | None = None,
        tools: Sequence[Tool] | None = None,
        progress: Callable[[BatchProgress], None] | None = None,
        *,
        workspace: str | Path | None = None,
        chat_model: ChatModel | None = None,
    ) -> None:
        if chat_model is not None and chat_model_factory is not None:
            raise ConfigError(
                "pass chat_model (shared) or chat_model_factory (per prompt), not both"
            )
        if distribution not in DISTRIBUTIONS:
            known = ", ".join(sorted(DISTRIBUTIONS))
            raise ConfigError(f"unknown toolset distribution {distribution!r}; known: {known}")
        for name, value in (
            ("batch_size", batch_size),
            ("num_workers", num_workers),
            ("max_iterations", max_iterations),
        ):
            if value < 1:
                raise ConfigError(f"BatchRunner {name} must be at least 1, got {value}")
        if not run_name or Path(run_name).name != run_name:
            raise ConfigError(f"run_name must be a plain directory name, got {run_name!r}")
        self.dataset_file = Path(dataset_file)
        self.batch_size = batch_size
        self.run_name = run_name
        self.distribution = distribution
        self.model = model
        self.provider = provider or "scripted"
        self.base_url = base_url
        self.api_key = api_key
        self.num_workers = num_workers
        self.max_iterations = max_iterations
        self.reasoning_config = dict(reasoning_config) if reasoning_config is not None else None
        self.output_dir = Path(output_root) / run_name
        self.workspace = Path(workspace) if workspace is not None else None
        self.tools = list(tools) if tools is not None else None
        self.progress = progress
        self.report = RunReport()
        self._shared_model = chat_model
        self._factory = chat_model_factory or (
            (lambda: chat_model) if chat_model is not None else self._default_factory()
        )
        custom = [t.spec.name for t in self.tools or () if t.spec.name not in ALL_POSSIBLE_TOOLS]
        self.known_tools: tuple[str, ...] = (*ALL_POSSIBLE_TOOLS, *sorted(set(custom)))
        self._model_label = model
        self._checkpoint_lock = anyio.Lock()

    def _default_factory(self) -> Callable[[], ChatModel]:
        if self.provider != "scripted":
            raise ConfigError(
                f"BatchRunner cannot open provider {self.provider!r} yet: real providers are "
                "wired by the bootstrap later. Pass chat_model_factory= or use "
                "provider='scripted' for the offline demo model."
            )
        from hermes_bootstrap.demo import demo_model

        name = self.model or "hermes-demo"
        return lambda: demo_model(name)

    # -- public ----------------------------------------------------------------------------

    async def run(self, resume: bool = False) -> dict[str, Any]:
        """Process the dataset, merge the shards, write and return the statistics.

        With ``resume=True`` prompts already present in a shard (matched by prompt text)
        are dropped and the rest re-batched from batch 0, appending to the existing shards.
        Either way, prompts the checkpoint lists as completed are skipped, and prompts that
        failed before are retried.

        Raises:
            ConfigError: the dataset is missing or has no row with a prompt.
            OSError: an output file could not be written.
        """
        self.report = RunReport()
        started = time.monotonic()
        out = anyio.Path(self.output_dir)
        await out.mkdir(parents=True, exist_ok=True)
        dataset = await self._load_dataset()
        pending = list(enumerate(dataset))
        if resume:
            done_texts = await completed_prompt_texts(out)
            pending = [(i, row) for i, row in pending if row["prompt"].strip() not in done_texts]
            self.report.resumed_by_content = len(dataset) - len(pending)
        batches = make_batches(pending, self.batch_size)
        checkpoint = await load_checkpoint(out, self.run_name)
        done_before = frozenset(checkpoint.completed_prompts)
        state = _RunState(
            checkpointed=done_before,
            completed=set(done_before),
            batch_stats=dict(checkpoint.batch_stats),
        )
        state.total = sum(1 for b in batches for i, _ in b.items if i not in done_before)
        display = ProgressDisplay(self.progress)
        try:
            await self._run_batches(batches, state, display)
        finally:
            with anyio.CancelScope(shield=True):
                await self._save_checkpoint(out, state)
                display.close()
        merge = await merge_shards(self.output_dir, self.known_tools)
        self.report.merge = merge
        log.info(
            "merged %d shard(s) into %s: kept %d of %d rows (%d invalid, %d hallucinated)",
            merge.shard_files,
            MERGED_FILE,
            merge.kept,
            merge.total_rows,
            merge.invalid_json,
            merge.hallucinated_tools,
        )
        statistics = run_statistics(
            run_name=self.run_name,
            distribution=self.distribution,
            total_prompts=len(dataset),
            total_batches=len(batches),
            batch_size=self.batch_size,
            model=self._model_label,
            started=started,
            tool_totals=state.tool_totals,
            reasoning_totals=state.reasoning_totals,
        )
        await write_statistics(out, statistics)
        return statistics

    # -- dataset and checkpoint --------------------------------------------------------------

    async def _load_dataset(self) -> list[dict[str, Any]]:
        """Rows with a string ``prompt``; bad JSON and prompt-less rows are skipped, counted."""
        scan = await read_dataset(self.dataset_file)
        self.report.invalid_json_rows = scan.invalid_json
        self.report.missing_prompt_rows = scan.missing_prompt
        if not scan.rows:
            raise ConfigError(f"no row with a 'prompt' in dataset file {self.dataset_file}")
        self.report.dataset_rows = len(scan.rows)
        return scan.rows

    async def _save_checkpoint(self, out: anyio.Path, state: _RunState) -> None:
        async with self._checkpoint_lock:
            with anyio.CancelScope(shield=True):
                await write_checkpoint(out, self.run_name, state.completed, state.batch_stats)

    # -- batches -------------------------------------------------------------------------

    async def _run_batches(
        self, batches: Sequence[Batch], state: _RunState, display: ProgressDisplay
    ) -> None:
        """Up to ``num_workers`` batches at once; a task starts only when a slot is free."""
        limiter = anyio.CapacityLimiter(self.num_workers)
        writer = ShardWriter(anyio.Path(self.output_dir))

        async def one(batch: Batch, token: object) -> None:
            try:
                await self._run_batch(batch, state, writer, display)
            finally:
                limiter.release_on_behalf_of(token)

        async with anyio.create_task_group() as tg:
            for batch in batches:
                token = object()
                await limiter.acquire_on_behalf_of(token)
                tg.start_soon(one, batch, token)

    async def _run_batch(
        self, batch: Batch, state: _RunState, writer: ShardWriter, display: ProgressDisplay
    ) -> None:
        processed = skipped = discarded = 0
        for index, row in batch.items:
            if index in state.checkpointed:
                skipped += 1
                self.report.skipped_by_checkpoint += 1
                continue
            processed += 1
            sample = await self._run_prompt(index, row, batch.number)
            self.report.processed += 1
            if sample.failed:
                self.report.failed += 1
            elif sample.row is None:
                discarded += 1
                self.report.discarded_no_reasoning += 1
                state.completed.add(index)
            else:
                line = json.dumps(sample.row, ensure_ascii=False) + "\n"
                with anyio.CancelScope(shield=True):  # a started row is written and recorded
                    await writer.append(batch.number, line)
                    state.completed.add(index)
                self.report.written += 1
                add_tool_stats(state.tool_totals, sample.tool_stats)
                add_reasoning_stats(state.reasoning_totals, sample.reasoning)
            state.done += 1
            display.show(
                measure(
                    state.done,
                    state.total,
                    self.report.failed,
                    self.report.discarded_no_reasoning,
                    state.started,
                )
            )
        state.batch_stats[str(batch.number)] = {
            "processed": processed,
            "skipped": skipped,
            "discarded_no_reasoning": discarded,
        }
        await self._save_checkpoint(anyio.Path(self.output_dir), state)

    # -- one prompt ----------------------------------------------------------------------

    async def _tools_for(self, toolsets: Sequence[str]) -> tuple[ToolRegistry, list[Any]]:
        if self.tools is None:
            built = await build_tools(enabled=list(toolsets), workspace=self.workspace)
            return built.registry, list(built.owned)
        granted = set(resolve_toolsets(toolsets).tools)
        chosen = [
            t for t in self.tools if t.spec.name in granted or t.spec.name not in ALL_POSSIBLE_TOOLS
        ]
        return ToolRegistry(chosen), []

    async def _run_prompt(self, index: int, row: Mapping[str, Any], batch_num: int) -> _Sample:
        """Run one prompt on a fresh, isolated agent; failures become ``failed`` samples."""
        prompt: str = row["prompt"]
        toolsets = sample_toolsets(
            DISTRIBUTIONS[self.distribution], random.Random(f"{self.run_name}:{index}")
        )
        model = self._factory()
        mine = [] if model is self._shared_model else [model]
        if self._model_label is None:
            self._model_label = model.model_name
        try:
            registry, owned = await self._tools_for(toolsets)
        except BaseException:
            with anyio.CancelScope(shield=True):
                for resource in mine:
                    await resource.aclose()
            raise
        settings = AgentSettings(
            max_iterations=self.max_iterations,
            reasoning=self.reasoning_config,
            skip_memory=True,
            save_trajectories=False,
            context=None,
            source="batch",
        )
        task_id = f"{self.run_name}:task_{index}"
        async with Agent(model, registry, settings=settings, owned=[*mine, *owned]) as agent:
            try:
                result = await agent.run_conversation(prompt, task_id=task_id)
            except Exception:
                log.exception("prompt %d failed; it will be retried on resume", index)
                return _Sample(failed=True)
            if result.get("failed"):
                log.warning("prompt %d failed (%s); retried on resume", index, result.get("error"))
                return _Sample(failed=True)
            messages = agent.history
            specs = await registry.available_specs()
        reasoning = extract_reasoning_stats(messages)
        if reasoning["turns_with_reasoning"] == 0:
            log.info("prompt %d discarded: no reasoning in any turn", index)
            return _Sample(failed=False)
        raw = extract_tool_stats(messages)
        conversations = to_sharegpt(
            messages, user_query=prompt, tools=[s.function_schema() for s in specs]
        )
        shard_row = {
            "prompt_index": index,
            "conversations": conversations,
            "metadata": {
                "batch_num": batch_num,
                "timestamp": now(),
                "model": self.model or model.model_name,
            },
            "completed": bool(result.get("completed")),
            "partial": bool(result.get("partial")),
            "api_calls": int(result.get("api_calls") or 0),
            "toolsets_used": list(toolsets),
            "tool_stats": tool_stats_row(raw, self.known_tools),
            "tool_error_counts": tool_error_counts(raw, self.known_tools),
        }
        return _Sample(failed=False, row=shard_row, tool_stats=raw, reasoning=reasoning)
