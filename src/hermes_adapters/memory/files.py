"""``FileMemoryStore``: memory as ``MEMORY.md`` and ``USER.md``, the files users know.

Layout (REFERENCE.md §5): ``<directory>/MEMORY.md`` for the agent's notes and
``<directory>/USER.md`` for the user profile, entries separated by ``"\\n§\\n"``; the
bootstrap passes ``$HERMES_HOME/memories``. Several agents (threads, processes, a cron job
next to a chat) may share the directory, so:

- every write is a read-modify-write under an exclusive ``flock`` on ``<file>.lock``: the
  second writer re-reads what the first wrote, and no write is lost;
- the file is replaced atomically (temp file in the same directory, ``fsync``,
  ``os.replace``), so a reader without the lock sees the old or the new text, never half;
- a file edited by hand (or by a shell append) that no longer round-trips is copied to
  ``<file>.bak.<ts>`` and replace/remove are refused, because rewriting it would drop what
  the outside writer added (the drift guard).

The lock is taken with ``LOCK_NB`` retried over ``anyio.sleep``, so a caller waiting on a
busy lock stays cancellable; the file I/O itself runs in anyio's worker thread (the
documented exception to "no hidden threads": there is no async file API). A worker is not
abandoned when its caller is cancelled, so the lock is never released mid-write.
POSIX only (``fcntl``), like the reference.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.to_thread

from hermes_adapters.memory._entries import (
    FILENAMES,
    apply_writes,
    check_target,
    drift_message,
    is_drifted,
    needs_drift_guard,
    parse,
    render,
)
from hermes_core.errors import MemoryWriteRejected
from hermes_core.ports.memory import MemorySnapshot, MemoryTarget, MemoryWrite

__all__ = ["FileMemoryStore"]

log = logging.getLogger(__name__)

_LOCK_POLL_FIRST = 0.001
_LOCK_POLL_MAX = 0.05
"""Seconds between attempts at a busy lock: short at first, backing off to this."""


class FileMemoryStore:
    """Bounded memory in two Markdown files under ``directory`` (created on first write)."""

    def __init__(
        self, directory: Path, *, memory_limit: int = 2200, user_limit: int = 1375
    ) -> None:
        self.directory = Path(directory)
        self.memory_limit = memory_limit
        self.user_limit = user_limit
        self.closed = False

    def path(self, target: MemoryTarget) -> Path:
        """The file holding ``target``'s entries."""
        return self.directory / FILENAMES[target]

    def _limit(self, target: MemoryTarget) -> int:
        return self.memory_limit if target == "memory" else self.user_limit

    # -- the port ----------------------------------------------------------------------

    async def snapshot(self) -> MemorySnapshot:
        """Both files as they are now; no lock, since writes replace files atomically."""
        memory, user = await anyio.to_thread.run_sync(self._read_both)
        return MemorySnapshot(
            memory=memory,
            user=user,
            memory_limit=self.memory_limit,
            user_limit=self.user_limit,
        )

    async def apply(self, target: MemoryTarget, writes: Sequence[MemoryWrite]) -> tuple[str, ...]:
        """Read, apply and write ``target`` under its lock; all of ``writes`` or none."""
        name = check_target(target)
        batch = tuple(writes)
        # Shielded: a cancellation delivered after the worker opened the file would drop
        # the descriptor on the floor. Opening is quick; waiting for the lock is not.
        with anyio.CancelScope(shield=True):
            fd = await anyio.to_thread.run_sync(self._open_lock, name)
        try:
            await _lock(fd)
            try:
                return await anyio.to_thread.run_sync(self._read_modify_write, name, batch)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    async def aclose(self) -> None:
        """Nothing stays open between calls; idempotent so any owner may close it."""
        self.closed = True

    def __repr__(self) -> str:
        return f"FileMemoryStore({str(self.directory)!r})"

    # -- worker-thread halves ----------------------------------------------------------

    def _read_both(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self._read_for_snapshot("memory"), self._read_for_snapshot("user")

    def _read_for_snapshot(self, target: MemoryTarget) -> tuple[str, ...]:
        """An unreadable file reads as empty: a prompt without memory beats no agent."""
        path = self.path(target)
        try:
            return parse(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return ()
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("memory file %s is unreadable, left out of the snapshot: %s", path, exc)
            return ()

    def _open_lock(self, target: MemoryTarget) -> int:
        path = self.path(target)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            return os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise MemoryWriteRejected(
                f"Could not lock {path.name} in {self.directory}: {exc.strerror or exc}. "
                "Memory was not changed; check that the directory is writable."
            ) from exc

    def _read_modify_write(
        self, target: MemoryTarget, writes: tuple[MemoryWrite, ...]
    ) -> tuple[str, ...]:
        path = self.path(target)
        limit = self._limit(target)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raw = ""
        except (OSError, UnicodeDecodeError) as exc:
            # Writing now would replace a file we could not read: refuse instead.
            raise MemoryWriteRejected(
                f"Could not read {path.name} in {self.directory}: {exc}. Memory was not "
                "changed; fix or move the file, then retry."
            ) from exc
        if needs_drift_guard(writes) and is_drifted(raw, limit):
            raise MemoryWriteRejected(drift_message(path.name, _backup(path, raw)))
        entries = apply_writes(parse(raw), writes, limit)
        text = render(entries)
        if text != raw:
            _write_atomically(path, text)
        return entries


async def _lock(fd: int) -> None:
    """Take the exclusive lock, polling so a wait on another process stays cancellable."""
    delay = _LOCK_POLL_FIRST
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            await anyio.sleep(delay)
            delay = min(delay * 2, _LOCK_POLL_MAX)
        else:
            return


def _backup(path: Path, raw: str) -> str:
    """Copy a drifted file aside and answer where; the refusal tells the model."""
    backup = path.with_name(f"{path.name}.bak.{int(time.time())}")
    try:
        backup.write_text(raw, encoding="utf-8")
    except OSError:
        return f"{backup} (BACKUP FAILED — file unchanged on disk)"
    return str(backup)


def _write_atomically(path: Path, text: str) -> None:
    """Temp file in the same directory, fsync, rename: readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise MemoryWriteRejected(
            f"Could not save {path.name} in {path.parent}: {exc.strerror or exc}. "
            "Memory was not changed."
        ) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
