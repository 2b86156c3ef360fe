"""The input of a batch run: the JSONL dataset, validated, and its cut into batches.

Why this module exists: the dataset is user data, often large and sometimes damaged. Which
rows are used (a JSON object with a string ``prompt``), which are skipped and counted
(invalid JSON, no prompt) and how the prompts still to run are numbered and grouped into
batches of consecutive prompts decide which ``batch_N.jsonl`` a sample lands in, so a
resumed run must cut them exactly as before. This is that one job, apart from the runner.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from hermes_bootstrap._batch_files import read_lines
from hermes_core.errors import ConfigError

__all__ = ["Batch", "DatasetScan", "make_batches", "read_dataset"]

log = logging.getLogger("hermes.batch")


@dataclass(slots=True)
class DatasetScan:
    """The usable rows of a dataset file and how many lines were skipped, and why."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    invalid_json: int = 0
    missing_prompt: int = 0


async def read_dataset(dataset_file: Path) -> DatasetScan:
    """Rows with a string ``prompt``; bad JSON and prompt-less rows are skipped, counted.

    Blank lines are ignored. The caller decides what an empty result means.

    Raises:
        ConfigError: the file does not exist.
    """
    path = anyio.Path(dataset_file)
    if not await path.is_file():
        raise ConfigError(f"dataset file not found: {dataset_file}")
    scan = DatasetScan()
    number = 0
    async with aclosing(read_lines(path)) as lines:
        async for line in lines:
            number += 1
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                scan.invalid_json += 1
                log.warning("%s line %d: invalid JSON (%s), skipped", path, number, exc)
                continue
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                scan.missing_prompt += 1
                log.warning("%s line %d: no string 'prompt' field, skipped", path, number)
                continue
            scan.rows.append(row)
    return scan


@dataclass(frozen=True, slots=True)
class Batch:
    """Consecutive prompts run one after another: ``items`` are (dataset index, row)."""

    number: int
    items: tuple[tuple[int, dict[str, Any]], ...]


def make_batches(pending: Sequence[tuple[int, dict[str, Any]]], batch_size: int) -> list[Batch]:
    """``pending`` cut into batches of ``batch_size``, numbered from 0."""
    return [
        Batch(n, tuple(pending[start : start + batch_size]))
        for n, start in enumerate(range(0, len(pending), batch_size))
    ]
