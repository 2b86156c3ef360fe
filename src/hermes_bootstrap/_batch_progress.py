"""Progress of a batch run: snapshots, the caller's callback and the terminal bar.

Why this module exists: a run over a large dataset takes hours, so after every prompt the
runner reports how far it is. Where that goes (the caller's ``progress`` callback, else a
self-overwriting line when stdout is a terminal, else nowhere), how the rate and ETA are
computed and how the bar is drawn (``rich`` when installed, a plain ``\\r`` line
otherwise) is display logic with no bearing on the files, so it lives apart from the
runner. A failing callback is logged, never allowed to stop the run.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["BatchProgress", "ProgressDisplay", "measure"]

log = logging.getLogger("hermes.batch")


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


def measure(done: int, total: int, failed: int, discarded: int, started: float) -> BatchProgress:
    """The snapshot now, for a run that started at monotonic time ``started``."""
    elapsed = time.monotonic() - started
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else None
    return BatchProgress(done, total, failed, discarded, elapsed, rate, eta)


class ProgressDisplay:
    """Sends snapshots to ``callback``, else to a terminal bar when stdout is a TTY.

    Build it when the run starts showing progress and :meth:`close` it when the run ends.
    """

    def __init__(self, callback: Callable[[BatchProgress], None] | None) -> None:
        self._callback = callback
        self._bar = _TerminalBar(sys.stdout) if callback is None and sys.stdout.isatty() else None

    def show(self, snapshot: BatchProgress) -> None:
        try:
            if self._callback is not None:
                self._callback(snapshot)
            elif self._bar is not None:
                self._bar.update(snapshot)
        except Exception:
            log.exception("the progress callback failed")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


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
