"""JSONL trajectory files: ``trajectory_samples.jsonl`` and ``failed_trajectories.jsonl``.

Users' training pipelines read these files as they are, one JSON object per line. Appends
go through one lock per sink so lines from concurrent turns never interleave, and I/O
errors are logged, never raised into a turn.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio

from hermes_core.trajectory import Trajectory

__all__ = ["FAILED_FILE", "SAMPLES_FILE", "JsonlTrajectorySink"]

SAMPLES_FILE = "trajectory_samples.jsonl"
FAILED_FILE = "failed_trajectories.jsonl"

log = logging.getLogger("hermes.trajectories")


class JsonlTrajectorySink:
    """Appends completed turns to one file and the others to a second, in ``directory``."""

    def __init__(self, directory: str | Path = ".") -> None:
        self.directory = Path(directory)
        self._lock = anyio.Lock()

    def path_for(self, completed: bool) -> Path:
        return self.directory / (SAMPLES_FILE if completed else FAILED_FILE)

    async def append(self, trajectory: Trajectory) -> None:
        line = trajectory.to_jsonl_line() + "\n"
        path = anyio.Path(self.path_for(trajectory.completed))
        async with self._lock:
            try:
                await path.parent.mkdir(parents=True, exist_ok=True)
                async with await anyio.open_file(path, "a", encoding="utf-8") as handle:
                    await handle.write(line)
            except OSError:
                log.exception("could not append a trajectory to %s", path)

    async def aclose(self) -> None:
        return None
