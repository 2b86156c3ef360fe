"""Background processes: the :class:`ProcessRegistry` and the :class:`BackgroundProcess` it owns.

A background process writes its stdout and stderr to a temp file that the registry
opened and the child inherited, so nothing has to read while it runs: no reader task,
no task group, nothing tied to the task that started it. Output is read on demand (the
``process`` tool's ``poll``, ``log``, ``wait``...) from where the last read stopped, into
the same bounded tail as ever, and whether the process has finished is polled, with
backoff, from its exit status and its process group.

So a registry needs no entering. It is usable once built and :meth:`ProcessRegistry.aclose`
may be called from any task, any number of times: it kills every process group (SIGTERM,
a grace period, SIGKILL), reaps them and deletes the temp files. ``async with`` still
works and closes it on the way out.

The price of a file over a pipe: what a process prints is on disk until the registry
forgets the process or closes, however little of it is kept in memory.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import secrets
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import anyio

from hermes_adapters.tools._subprocess import (
    KILL_GRACE,
    exit_status,
    group_alive,
    release,
    spawn,
    terminate_group,
    wait_leader,
)

__all__ = ["BackgroundProcess", "ProcessRegistry", "ProcessStatus"]

ProcessStatus = Literal["running", "exited", "killed"]

_READ_CHUNK = 1 << 20
_POLL_FIRST = 0.005
_POLL_MAX = 0.25
"""Backoff bounds for noticing that a process group has emptied (the kernel has no event)."""
_LOG_PREFIX = "hermes-"


class _Tail:
    """The last ``limit`` characters of a background process's output, and how many came."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chunks: list[str] = []
        self._size = 0
        self.total = 0

    def feed(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        if not text:
            return
        self.total += len(text)
        self._chunks.append(text)
        self._size += len(text)
        if self._size > 2 * self._limit:
            self._chunks = [self.text]
            self._size = len(self._chunks[0])

    @property
    def text(self) -> str:
        return "".join(self._chunks)[-self._limit :]

    @property
    def dropped(self) -> int:
        """Characters no longer held (the oldest ones)."""
        return self.total - len(self.text)


@dataclass(eq=False)
class BackgroundProcess:
    """One command started with ``background=true``, owned by a :class:`ProcessRegistry`.

    It counts as running until its whole process group is gone, not just its shell, so
    ``nohup server > log &`` stays visible (and killable) after the shell returns. Its
    state is brought up to date by :meth:`poll` (status only, no I/O but ``/proc``) and
    :meth:`refresh` (status and output); nothing updates it in the background.
    """

    session_id: str
    command: str
    process: asyncio.subprocess.Process
    output: _Tail
    log_path: Path
    """The temp file the process's stdout and stderr go to."""
    offset: int = 0
    """Bytes of :attr:`log_path` already fed to :attr:`output`."""
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    killed: bool = False
    reaped: bool = False
    """The group was seen empty: its id may be reused, so it is never signalled again."""
    _reading: anyio.Lock = field(default_factory=anyio.Lock, init=False, repr=False)
    _flushed: bool = field(default=False, init=False, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def done(self) -> bool:
        """Whether the group is gone or was killed (as of the last :meth:`poll`)."""
        return self.finished is not None

    @property
    def exit_code(self) -> int | None:
        code = self.process.returncode
        return None if code is None or not self.done else exit_status(code)

    @property
    def status(self) -> ProcessStatus:
        if not self.done:
            return "running"
        return "killed" if self.killed else "exited"

    @property
    def runtime(self) -> float:
        return round((self.finished or time.monotonic()) - self.started, 2)

    def summary(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "command": self.command if len(self.command) <= 200 else self.command[:197] + "...",
            "pid": self.pid,
            "status": self.status,
            "exit_code": self.exit_code,
            "runtime_seconds": self.runtime,
            "output_chars": self.output.total,
        }

    def poll(self) -> ProcessStatus:
        """Notice whether the whole group has gone, without waiting; the status."""
        if not self.reaped and self.process.returncode is not None and not group_alive(self.pid):
            self._settle(reaped=True)
        return self.status

    async def wait(self) -> None:
        """Return once the group has gone or the process was killed; callers bound it.

        The shell's exit is awaited as such; what it leaves running is then polled, with
        backoff from 5 ms to 250 ms, until the group is empty.
        """
        if not self.done:
            await wait_leader(self.process)
        delay = _POLL_FIRST
        while self.poll() == "running":
            await anyio.sleep(delay)
            delay = min(2 * delay, _POLL_MAX)

    async def refresh(self) -> None:
        """Poll the status, then read what the process wrote since the last read.

        The status is taken first: once the group is seen gone, everything it wrote is
        in the file, so the read that follows gets all of it.
        """
        self.poll()
        async with self._reading:
            await self._read_new(final=self.done)

    async def _read_new(self, *, final: bool) -> None:
        # Each chunk is fed as soon as its read returns, with no checkpoint between, so a
        # cancelled refresh leaves `offset` and `output` in step; the next one resumes.
        try:
            fh = await anyio.open_file(self.log_path, "rb")
        except FileNotFoundError:  # deleted: the registry closed or forgot the process
            return
        try:
            end = os.fstat(fh.wrapped.fileno()).st_size  # stop there: a fast writer can't hold us
            if self.offset < end:
                await fh.seek(self.offset)
            while self.offset < end:
                chunk = await fh.read(min(_READ_CHUNK, end - self.offset))
                if not chunk:
                    break
                self.output.feed(chunk)
                self.offset += len(chunk)
        finally:
            with anyio.CancelScope(shield=True):
                await fh.aclose()
        if final and not self._flushed and self.offset >= end:
            self.output.feed(b"", final=True)
            self._flushed = True

    async def write(self, data: str) -> int:
        """Send ``data`` to the process's stdin; bounded, since a full pipe would block.

        Raises:
            BrokenPipeError: stdin is closed or the process has exited.
            TimeoutError: the process is not reading its input.
        """
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing() or self.poll() != "running":
            raise BrokenPipeError("the process's stdin is closed")
        payload = data.encode("utf-8")
        stdin.write(payload)
        with anyio.fail_after(5):
            await stdin.drain()
        return len(payload)

    async def close_stdin(self) -> None:
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing():
            return
        stdin.close()
        with contextlib.suppress(OSError), anyio.move_on_after(1):
            await stdin.wait_closed()

    def _settle(self, *, reaped: bool) -> None:
        if self.finished is None:
            self.finished = time.monotonic()
        self.reaped = reaped
        release(self.process)


class ProcessRegistry:
    """Owns background processes: their output files, bounded output and lifetime.

    Usable as soon as it is built, with no entering and no task of its own. Close it with
    :meth:`aclose` when the tools are done with, from whichever task: that kills every
    process group and deletes the output files. ``async with ProcessRegistry() as r:``
    does the same on the way out.
    """

    def __init__(
        self,
        *,
        buffer_chars: int = 200_000,
        max_running: int = 16,
        max_finished: int = 64,
        kill_grace: float = KILL_GRACE,
    ) -> None:
        self._buffer_chars = buffer_chars
        self._max_running = max_running
        self._max_finished = max_finished
        self._kill_grace = kill_grace
        self._processes: dict[str, BackgroundProcess] = {}
        self._closed = False

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def is_open(self) -> bool:
        """Whether new processes can start: true from construction until :meth:`aclose`."""
        return not self._closed

    def processes(self) -> list[BackgroundProcess]:
        return list(self._processes.values())

    async def start(
        self, argv: Sequence[str], *, command: str, cwd: Path, env: Mapping[str, str]
    ) -> BackgroundProcess:
        """Spawn ``argv`` in its own process group, its output going to a fresh temp file.

        Raises:
            RuntimeError: the registry is closed, or too many processes are running.
            OSError: the process could not be started.
        """
        self._check_open()
        running = sum(1 for p in self._processes.values() if p.poll() == "running")
        if running >= self._max_running:
            raise RuntimeError(
                f"{running} background processes are already running; kill one first"
            )
        session_id = f"proc_{secrets.token_hex(6)}"
        with anyio.CancelScope(shield=True):  # a spawned process must always be registered
            fd, name = await anyio.to_thread.run_sync(_create_log, session_id)
            try:
                process = await spawn(
                    argv, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE, stdout=fd
                )
            except BaseException:
                os.close(fd)
                await anyio.Path(name).unlink(missing_ok=True)
                raise
            os.close(fd)  # the child has its own copy
            entry = BackgroundProcess(
                session_id, command, process, _Tail(self._buffer_chars), Path(name)
            )
            self._processes[session_id] = entry
            if self._closed:  # closed from another task while this one was spawning
                await self.kill(entry)
                await anyio.Path(name).unlink(missing_ok=True)
                self._check_open()
            await self._forget_old()
        return entry

    def find(self, session_id: str) -> BackgroundProcess:
        """The process whose id is ``session_id`` or starts with it (``proc_`` optional).

        Raises:
            LookupError: no process, or more than one, matches.
        """
        if session_id in self._processes:
            return self._processes[session_id]
        prefixes = {session_id, f"proc_{session_id}"}
        matches = [p for k, p in self._processes.items() if any(k.startswith(x) for x in prefixes)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise LookupError(f"no background process matches {session_id!r}")
        ids = ", ".join(sorted(p.session_id for p in matches))
        raise LookupError(f"{session_id!r} is ambiguous: {ids}")

    async def kill(self, entry: BackgroundProcess) -> None:
        """Kill the process's whole group: SIGTERM, a grace period, then SIGKILL.

        Shielded and bounded by twice the grace period; afterwards the process is done.
        """
        with anyio.CancelScope(shield=True):
            if entry.poll() == "running":
                entry.killed = True
            if not entry.reaped:
                await terminate_group(entry.process, self._kill_grace)
                entry._settle(reaped=not group_alive(entry.pid))

    async def aclose(self) -> None:
        """Kill every process group, reap them and delete the output files.

        Idempotent, shielded, and callable from any task: it needs nothing that the task
        which built or used the registry set up.
        """
        self._closed = True
        with anyio.CancelScope(shield=True):
            entries = list(self._processes.values())
            async with anyio.create_task_group() as tg:
                for entry in entries:
                    if not entry.reaped:
                        tg.start_soon(self.kill, entry)
            for entry in entries:
                await anyio.Path(entry.log_path).unlink(missing_ok=True)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                "background processes are unavailable: the process registry is closed"
            )

    async def _forget_old(self) -> None:
        """Drop the oldest finished processes past ``max_finished``, and their files."""
        finished = [p for p in self._processes.values() if p.done and p.reaped]
        finished.sort(key=lambda p: p.finished or 0.0)
        for entry in finished[: max(0, len(finished) - self._max_finished)]:
            del self._processes[entry.session_id]
            await anyio.Path(entry.log_path).unlink(missing_ok=True)


def _create_log(session_id: str) -> tuple[int, str]:
    """A new private (0600) temp file for a process's output: its fd and path."""
    return tempfile.mkstemp(prefix=f"{_LOG_PREFIX}{session_id}-", suffix=".log")
