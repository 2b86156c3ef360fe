"""The files of a batch run: shards, the checkpoint and the merged trajectories.

Why this module exists: users point their fine-tuning pipelines at these files and resume
runs that took days, so their formats and the rules for reading them back are the
reference harness's, byte for byte where it matters (REFERENCE.md §1, ``docs/batch.md``).
Everything that knows those formats lives here, apart from the runner that decides what
to write and when:

* ``batch_N.jsonl``: append-only shards, one row per kept sample; a torn last line (a
  process killed mid-write) is repaired before the next append;
* ``checkpoint.json``: completed prompt indices and per-batch counts, replaced atomically;
* ``trajectories.jsonl``: every shard merged, hallucinated-tool and torn rows dropped.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from hermes_core.toolsets import STATIC_TOOLSETS

__all__ = [
    "ALL_POSSIBLE_TOOLS",
    "CHECKPOINT_FILE",
    "MERGED_FILE",
    "SHARD_GLOB",
    "Checkpoint",
    "MergeReport",
    "ShardWriter",
    "atomic_write",
    "completed_prompt_texts",
    "load_checkpoint",
    "merge_shards",
    "now",
    "read_lines",
    "write_checkpoint",
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
MERGED_FILE = "trajectories.jsonl"
SHARD_GLOB = "batch_*.jsonl"
_READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What the merge into ``trajectories.jsonl`` kept and dropped."""

    shard_files: int
    total_rows: int
    kept: int
    invalid_json: int
    hallucinated_tools: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What ``checkpoint.json`` says of a run: the prompts done and the per-batch counts."""

    completed_prompts: list[int]
    batch_stats: dict[str, Any]


def now() -> str:
    """The local time as the files record it (ISO 8601, no zone)."""
    return datetime.now().isoformat()


# -- reading and writing --------------------------------------------------------------------


async def read_lines(path: anyio.Path) -> AsyncGenerator[str, None]:
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


async def atomic_write(path: anyio.Path, chunks: AsyncIterator[str] | str) -> None:
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


# -- shards ---------------------------------------------------------------------------------


async def _shard_files(directory: anyio.Path) -> list[anyio.Path]:
    """Shards in lexicographic name order (``batch_10`` before ``batch_2``, as the reference)."""
    found = [p async for p in directory.glob(SHARD_GLOB)]
    return sorted(found, key=lambda p: p.name)


class ShardWriter:
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


async def completed_prompt_texts(out: anyio.Path) -> set[str]:
    """The first ``human`` value of every non-failed shard row, stripped (resume by content)."""
    texts: set[str] = set()
    for shard in await _shard_files(out):
        async with aclosing(read_lines(shard)) as lines:
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
            async with aclosing(read_lines(shard)) as lines:
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

    await atomic_write(root / MERGED_FILE, kept_lines())
    return MergeReport(
        len(shards), counts["total"], counts["kept"], counts["invalid"], counts["hallucinated"]
    )


# -- the checkpoint -------------------------------------------------------------------------


async def load_checkpoint(out: anyio.Path, run_name: str) -> Checkpoint:
    """The checkpoint of this run, or an empty one (missing, unreadable or another run)."""
    empty = Checkpoint([], {})
    path = out / CHECKPOINT_FILE
    if not await path.exists():
        return empty
    try:
        data = json.loads(await path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return empty
    if not isinstance(data, dict) or data.get("run_name") != run_name:
        log.warning("checkpoint %s belongs to another run; starting afresh", path)
        return empty
    completed = [i for i in data.get("completed_prompts") or () if isinstance(i, int)]
    stats = data.get("batch_stats")
    return Checkpoint(completed, stats if isinstance(stats, dict) else {})


async def write_checkpoint(
    out: anyio.Path,
    run_name: str,
    completed: Iterable[int],
    batch_stats: Mapping[str, Mapping[str, int]],
) -> None:
    """Replace ``checkpoint.json`` atomically; batches in numeric order."""
    data = {
        "run_name": run_name,
        "completed_prompts": sorted(completed),
        "batch_stats": dict(sorted(batch_stats.items(), key=lambda kv: _batch_key(kv[0]))),
        "last_updated": now(),
    }
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    await atomic_write(out / CHECKPOINT_FILE, text)


def _batch_key(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (sys.maxsize, key)
