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
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

import anyio

from hermes_bootstrap.tools import build_tools
from hermes_core.agent import Agent, AgentSettings
from hermes_core.errors import ConfigError
from hermes_core.messages import AssistantMessage, Message, ToolMessage, text_of
from hermes_core.ports.llm import ChatModel
from hermes_core.ports.tools import Tool
from hermes_core.registry import ToolRegistry
from hermes_core.toolsets import STATIC_TOOLSETS, resolve_toolsets
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

ALL_POSSIBLE_TOOLS: tuple[str, ...] = tuple(
    sorted({tool for toolset in STATIC_TOOLSETS.values() for tool in toolset.tools})
)
"""Every tool a built-in toolset can grant, sorted.

Shard rows zero-fill their stats maps over this list, so a HuggingFace ``datasets`` load
sees one schema for every row; the merge drops rows naming a tool outside it (a model that
hallucinated a tool name produced them)."""

CHECKPOINT_FILE = "checkpoint.json"
STATISTICS_FILE = "statistics.json"
MERGED_FILE = "trajectories.jsonl"
SHARD_GLOB = "batch_*.jsonl"
_READ_CHUNK = 1 << 20
_SCRATCHPAD = "<REASONING_SCRATCHPAD>"


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


# -- per-sample statistics ---------------------------------------------------------------


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
                entry = stats.setdefault(call.name, {"count": 0, "success": 0, "failure": 0})
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


def _normalized_stats(
    raw: Mapping[str, Mapping[str, int]], known: Sequence[str]
) -> dict[str, dict[str, int]]:
    out = {name: {"count": 0, "success": 0, "failure": 0} for name in known}
    for name, entry in raw.items():
        out[name] = dict(entry)
    return out


def _normalized_errors(
    raw: Mapping[str, Mapping[str, int]], known: Sequence[str]
) -> dict[str, int]:
    out = dict.fromkeys(known, 0)
    for name, entry in raw.items():
        out[name] = entry.get("failure", 0)
    return out


# -- reports -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """A progress snapshot handed to the ``progress`` callback after each prompt.

    ``total`` counts the prompts this invocation has to run (resumed and checkpointed ones
    excluded); ``eta`` is ``None`` until a prompt has finished.
    """

    done: int
    total: int
    failed: int
    discarded: int
    elapsed: float
    rate: float
    eta: float | None


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What the merge into ``trajectories.jsonl`` kept and dropped."""

    shard_files: int
    total_rows: int
    kept: int
    invalid_json: int
    hallucinated_tools: int


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


# -- file helpers ------------------------------------------------------------------------


def _now() -> str:
    return datetime.now().isoformat()


async def _read_lines(path: anyio.Path) -> AsyncGenerator[str, None]:
    """The lines of a text file without their newline, read in large chunks.

    Chunked reads keep a multi-gigabyte shard from costing one thread hop per line.
    """
    async with await anyio.open_file(path, encoding="utf-8", errors="replace") as handle:
        pending = ""
        while chunk := await handle.read(_READ_CHUNK):
            pending += chunk
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line
        if pending:
            yield pending


async def _atomic_write(path: anyio.Path, chunks: AsyncIterator[str] | str) -> None:
    """Write to a temporary sibling, then ``os.replace`` it over ``path``.

    Readers (and a resumed run) see the old file or the new one, never half of either.
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        async with await anyio.open_file(tmp, "w", encoding="utf-8") as handle:
            if isinstance(chunks, str):
                await handle.write(chunks)
            else:
                async for chunk in chunks:
                    await handle.write(chunk)
        await tmp.replace(path)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await tmp.unlink(missing_ok=True)
        raise


async def _shard_files(directory: anyio.Path) -> list[anyio.Path]:
    """Shards in lexicographic name order (``batch_10`` before ``batch_2``, as the reference)."""
    found = [p async for p in directory.glob(SHARD_GLOB)]
    return sorted(found, key=lambda p: p.name)


async def merge_shards(
    directory: str | Path, known_tools: Iterable[str] = ALL_POSSIBLE_TOOLS
) -> MergeReport:
    """Concatenate every shard of ``directory`` into ``trajectories.jsonl``, atomically.

    Rows that are not JSON objects (a torn write) and rows whose ``tool_stats`` names a
    tool outside ``known_tools`` (a hallucinated tool) are dropped; kept rows are copied
    byte for byte, blank lines are ignored.
    """
    root = anyio.Path(directory)
    known = frozenset(known_tools)
    shards = await _shard_files(root)
    counts = {"total": 0, "kept": 0, "invalid": 0, "hallucinated": 0}

    async def kept_lines() -> AsyncIterator[str]:
        for shard in shards:
            async with aclosing(_read_lines(shard)) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    counts["total"] += 1
                    try:
                        row = json.loads(line)
                    except ValueError:
                        row = None
                    if not isinstance(row, dict):
                        counts["invalid"] += 1
                        log.warning("dropping a row that is not valid JSON from %s", shard.name)
                        continue
                    stats = row.get("tool_stats") or {}
                    unknown = [name for name in stats if name not in known]
                    if unknown:
                        counts["hallucinated"] += 1
                        log.warning(
                            "dropping a row from %s: unknown tool %r", shard.name, unknown[0][:50]
                        )
                        continue
                    counts["kept"] += 1
                    yield line + "\n"

    await _atomic_write(root / MERGED_FILE, kept_lines())
    return MergeReport(
        len(shards), counts["total"], counts["kept"], counts["invalid"], counts["hallucinated"]
    )


# -- progress display --------------------------------------------------------------------


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class _TerminalBar:
    """One self-overwriting line on a TTY: ``rich`` when installed, plain ``\\r`` otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._rich: Any = None
        self._task: Any = None
        try:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
            )
        except ImportError:
            return
        self._rich = Progress(
            TextColumn("prompts"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            auto_refresh=False,  # no refresh thread: we redraw after each prompt
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._rich.start()
        self._task = self._rich.add_task("", total=None)

    def update(self, p: BatchProgress) -> None:
        eta = _clock(p.eta) if p.eta is not None else "--:--:--"
        tail = f"{p.rate:.2f}/s  ETA {eta}  failed {p.failed}  discarded {p.discarded}"
        if self._rich is not None:
            self._rich.update(self._task, completed=p.done, total=p.total, description=tail)
            self._rich.refresh()
            return
        width = 30
        filled = width * p.done // p.total if p.total else width
        bar = "#" * filled + "." * (width - filled)
        self._stream.write(f"\r[{bar}] {p.done}/{p.total} prompts  {tail}")
        self._stream.flush()

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
        else:
            self._stream.write("\n")
            self._stream.flush()


# -- the runner --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Batch:
    number: int
    items: tuple[tuple[int, dict[str, Any]], ...]


@dataclass(slots=True)
class _RunState:
    """What the batches of one invocation share; the event loop serialises access."""

    checkpointed: frozenset[int]
    completed: set[int]
    batch_stats: dict[str, dict[str, int]]
    tool_totals: dict[str, dict[str, int]] = field(default_factory=dict)
    reasoning_totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("total_assistant_turns", "turns_with_reasoning", "turns_without_reasoning"), 0
        )
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
    ``chat_model_factory`` returns a fresh model per prompt, owned (and closed) by that
    prompt's agent. ``tools`` replaces the built-in tools: a tool whose name belongs to a
    built-in toolset is offered only when the prompt's sampled toolsets grant it, any other
    tool always, and its name counts as known for the stats and the merge.

    Raises:
        ConfigError: an unknown distribution, a non-positive size, or a provider that is
            not wired yet (pass ``chat_model_factory`` or use ``provider="scripted"``).
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
    ) -> None:
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
        self._factory = chat_model_factory or self._default_factory()
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
            done_texts = await self._completed_prompt_texts(out)
            pending = [(i, row) for i, row in pending if row["prompt"].strip() not in done_texts]
            self.report.resumed_by_content = len(dataset) - len(pending)
        batches = [
            _Batch(n, tuple(pending[start : start + self.batch_size]))
            for n, start in enumerate(range(0, len(pending), self.batch_size))
        ]
        checkpoint = await self._load_checkpoint(out)
        done_before = frozenset(checkpoint["completed_prompts"])
        state = _RunState(
            checkpointed=done_before,
            completed=set(done_before),
            batch_stats=dict(checkpoint["batch_stats"]),
        )
        state.total = sum(1 for b in batches for i, _ in b.items if i not in done_before)
        bar = _TerminalBar(sys.stdout) if self.progress is None and sys.stdout.isatty() else None
        try:
            await self._run_batches(batches, state, bar)
        finally:
            with anyio.CancelScope(shield=True):
                await self._save_checkpoint(out, state)
                if bar is not None:
                    bar.close()
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
        statistics = self._statistics(state, len(dataset), len(batches), started)
        text = json.dumps(statistics, indent=2, ensure_ascii=False) + "\n"
        await _atomic_write(out / STATISTICS_FILE, text)
        return statistics

    # -- dataset and resume ------------------------------------------------------------------

    async def _load_dataset(self) -> list[dict[str, Any]]:
        """Rows with a string ``prompt``; bad JSON and prompt-less rows are skipped, counted."""
        path = anyio.Path(self.dataset_file)
        if not await path.is_file():
            raise ConfigError(f"dataset file not found: {self.dataset_file}")
        rows: list[dict[str, Any]] = []
        number = 0
        async with aclosing(_read_lines(path)) as lines:
            async for line in lines:
                number += 1
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    self.report.invalid_json_rows += 1
                    log.warning("%s line %d: invalid JSON (%s), skipped", path, number, exc)
                    continue
                if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                    self.report.missing_prompt_rows += 1
                    log.warning("%s line %d: no string 'prompt' field, skipped", path, number)
                    continue
                rows.append(row)
        if not rows:
            raise ConfigError(f"no row with a 'prompt' in dataset file {self.dataset_file}")
        self.report.dataset_rows = len(rows)
        return rows

    async def _completed_prompt_texts(self, out: anyio.Path) -> set[str]:
        """The first ``human`` value of every non-failed shard row, stripped."""
        texts: set[str] = set()
        for shard in await _shard_files(out):
            async with aclosing(_read_lines(shard)) as lines:
                async for line in lines:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(row, dict) or row.get("failed"):
                        continue
                    for turn in row.get("conversations") or ():
                        if isinstance(turn, dict) and turn.get("from") == "human":
                            value = str(turn.get("value") or "").strip()
                            if value:
                                texts.add(value)
                            break
        return texts

    async def _load_checkpoint(self, out: anyio.Path) -> dict[str, Any]:
        """The checkpoint of this run, or an empty one (missing, unreadable or another run)."""
        empty: dict[str, Any] = {"completed_prompts": [], "batch_stats": {}}
        path = out / CHECKPOINT_FILE
        if not await path.exists():
            return empty
        try:
            data = json.loads(await path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
            return empty
        if not isinstance(data, dict) or data.get("run_name") != self.run_name:
            log.warning("checkpoint %s belongs to another run; starting afresh", path)
            return empty
        completed = [i for i in data.get("completed_prompts") or () if isinstance(i, int)]
        stats = data.get("batch_stats")
        return {
            "completed_prompts": completed,
            "batch_stats": stats if isinstance(stats, dict) else {},
        }

    async def _save_checkpoint(self, out: anyio.Path, state: _RunState) -> None:
        async with self._checkpoint_lock:
            data = {
                "run_name": self.run_name,
                "completed_prompts": sorted(state.completed),
                "batch_stats": dict(
                    sorted(state.batch_stats.items(), key=lambda kv: _batch_key(kv[0]))
                ),
                "last_updated": _now(),
            }
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
            with anyio.CancelScope(shield=True):
                await _atomic_write(out / CHECKPOINT_FILE, text)

    # -- batches -------------------------------------------------------------------------

    async def _run_batches(
        self, batches: Sequence[_Batch], state: _RunState, bar: _TerminalBar | None
    ) -> None:
        """Up to ``num_workers`` batches at once; a task starts only when a slot is free."""
        limiter = anyio.CapacityLimiter(self.num_workers)
        writer = _ShardWriter(anyio.Path(self.output_dir))

        async def one(batch: _Batch, token: object) -> None:
            try:
                await self._run_batch(batch, state, writer, bar)
            finally:
                limiter.release_on_behalf_of(token)

        async with anyio.create_task_group() as tg:
            for batch in batches:
                token = object()
                await limiter.acquire_on_behalf_of(token)
                tg.start_soon(one, batch, token)

    async def _run_batch(
        self, batch: _Batch, state: _RunState, writer: _ShardWriter, bar: _TerminalBar | None
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
                _add_tool_stats(state.tool_totals, sample.tool_stats)
                for key in state.reasoning_totals:
                    state.reasoning_totals[key] += sample.reasoning.get(key, 0)
            state.done += 1
            self._report_progress(state, bar)
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
        if self._model_label is None:
            self._model_label = model.model_name
        try:
            registry, owned = await self._tools_for(toolsets)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await model.aclose()
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
        async with Agent(model, registry, settings=settings, owned=[model, *owned]) as agent:
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
                "timestamp": _now(),
                "model": self.model or model.model_name,
            },
            "completed": bool(result.get("completed")),
            "partial": bool(result.get("partial")),
            "api_calls": int(result.get("api_calls") or 0),
            "toolsets_used": list(toolsets),
            "tool_stats": _normalized_stats(raw, self.known_tools),
            "tool_error_counts": _normalized_errors(raw, self.known_tools),
        }
        return _Sample(failed=False, row=shard_row, tool_stats=raw, reasoning=reasoning)

    # -- reporting -----------------------------------------------------------------------

    def _report_progress(self, state: _RunState, bar: _TerminalBar | None) -> None:
        elapsed = time.monotonic() - state.started
        rate = state.done / elapsed if elapsed > 0 else 0.0
        eta = (state.total - state.done) / rate if rate > 0 else None
        snapshot = BatchProgress(
            state.done,
            state.total,
            self.report.failed,
            self.report.discarded_no_reasoning,
            elapsed,
            rate,
            eta,
        )
        try:
            if self.progress is not None:
                self.progress(snapshot)
            elif bar is not None:
                bar.update(snapshot)
        except Exception:
            log.exception("the progress callback failed")

    def _statistics(
        self, state: _RunState, total_prompts: int, total_batches: int, started: float
    ) -> dict[str, Any]:
        tools: dict[str, dict[str, Any]] = {}
        for name in sorted(state.tool_totals):
            entry: dict[str, Any] = dict(state.tool_totals[name])
            calls = entry["success"] + entry["failure"]
            entry["success_rate"] = round(entry["success"] / calls * 100, 2) if calls else 0.0
            entry["failure_rate"] = round(entry["failure"] / calls * 100, 2) if calls else 0.0
            tools[name] = entry
        return {
            "run_name": self.run_name,
            "distribution": self.distribution,
            "total_prompts": total_prompts,
            "total_batches": total_batches,
            "batch_size": self.batch_size,
            "model": self._model_label,
            "completed_at": _now(),
            "duration_seconds": round(time.monotonic() - started, 2),
            "tool_statistics": tools,
            "reasoning_statistics": dict(state.reasoning_totals),
        }


class _ShardWriter:
    """Appends rows to ``batch_N.jsonl``; repairs a torn last line once per shard.

    A process killed mid-write can leave a shard without its final newline; appending to
    it would glue the next row onto the torn one and lose both at the merge.
    """

    def __init__(self, directory: anyio.Path) -> None:
        self._directory = directory
        self._checked: set[int] = set()

    async def append(self, batch_num: int, line: str) -> None:
        path = self._directory / f"batch_{batch_num}.jsonl"
        prefix = ""
        if batch_num not in self._checked:
            self._checked.add(batch_num)
            if await path.exists() and (await path.stat()).st_size > 0:
                async with await anyio.open_file(path, "rb") as handle:
                    await handle.seek(-1, 2)
                    if await handle.read(1) != b"\n":
                        prefix = "\n"
        async with await anyio.open_file(path, "a", encoding="utf-8") as handle:
            await handle.write(prefix + line)


def _add_tool_stats(
    totals: dict[str, dict[str, int]], stats: Mapping[str, Mapping[str, int]]
) -> None:
    for name, entry in stats.items():
        total = totals.setdefault(name, {"count": 0, "success": 0, "failure": 0})
        for key in total:
            total[key] += entry.get(key, 0)


def _batch_key(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (sys.maxsize, key)
