"""The trajectory sink port: where finished turns go as training samples."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from hermes_core.trajectory import Trajectory

__all__ = ["TrajectorySink"]


@runtime_checkable
class TrajectorySink(Protocol):
    """Append one sample; ``completed`` decides between the success and failure streams.

    Appends are ordered per sink and must not raise into the turn: an adapter logs its own
    I/O errors.
    """

    async def append(self, trajectory: Trajectory) -> None: ...

    async def aclose(self) -> None: ...
