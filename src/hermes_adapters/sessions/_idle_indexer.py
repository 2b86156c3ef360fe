"""When the SQLite store indexes deferred rows on its own: after writes go quiet.

Why this module exists: appends no longer index (``_sqlite_fts``), so something must, or
the first search after a long batch job would pay for all of it. The policy is separate
from the SQL: after a message write, one short-lived task waits until writes have been
quiet for ``idle_delay``, then indexes in chunks, each its own transaction taking the
store's lock, so an append arriving meanwhile waits for at most one chunk and then pauses
the indexing for another quiet period. Under a sustained load that never goes quiet the
backlog is bounded all the same: once it passes ``force_backlog`` the task indexes chunk
after chunk until it is back below. With nothing left to index the task ends, so an idle
store holds no task.

Why a bare asyncio task rather than a task group: the work must outlive the append that
triggered it, and the store has no scope to run it in (it opens lazily on any call and
closes through an idempotent ``close()``, not only as an async context manager). The store
needs the asyncio backend anyway (aiosqlite). ``aclose()`` cancels the task and waits for
it; a chunk cancelled mid-transaction is rolled back by the store, so the index stays
consistent.

A task belongs to the loop that created it. A host that closes a loop without cancelling its
tasks (``asyncio.run`` does cancel them) and then uses or closes the store on another loop
would find the old task pending forever on a dead loop, where cancelling it raises
``RuntimeError('Event loop is closed')``. Such a task is forgotten instead (see
:meth:`IdleIndexer._task_here`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from hermes_core.errors import HermesError, StoreClosed

__all__ = ["IdleIndexer"]

_log = logging.getLogger(__name__)


class IdleIndexer:
    """Runs ``index_chunk`` while writes are quiet (see the module doc).

    Args:
        backlog: how many rows wait to be indexed (a read).
        index_chunk: index one chunk and return how many rows still wait.
        idle_delay: seconds without a write before indexing starts.
        force_backlog: a backlog this large is indexed even while writes continue.
        name: names the task, for debugging.
    """

    def __init__(
        self,
        *,
        backlog: Callable[[], Awaitable[int]],
        index_chunk: Callable[[], Awaitable[int]],
        idle_delay: float,
        force_backlog: int,
        name: str,
    ) -> None:
        self._backlog = backlog
        self._index_chunk = index_chunk
        self._idle_delay = idle_delay
        self._force_backlog = force_backlog
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self._last_write = 0.0
        self._writes = 0
        self._closed = False

    @property
    def running(self) -> bool:
        return self._task is not None

    def note_write(self) -> None:
        """A write left rows to index: (re)start the quiet period, and the task if none."""
        self._last_write = time.monotonic()
        self._writes += 1
        self.wake()

    def wake(self) -> None:
        """Start the task unless it runs (or the indexer was closed)."""
        if self._task_here() is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def aclose(self) -> None:
        """Cancel the task and wait until it has finished; idempotent."""
        self._closed = True
        task = self._task_here()
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    def _task_here(self) -> asyncio.Task[None] | None:
        """The task, if it runs on the running loop; one on another loop is forgotten.

        Such a task cannot be cancelled or awaited from here: its loop may be closed (then
        ``cancel()`` raises), or run in another thread. Forgetting it is safe: a task on a
        closed loop never runs again, and one whose loop runs again indexes a chunk at most
        (each is a whole transaction) and stops at its next step once the store is closed.
        """
        task = self._task
        if task is not None and task.get_loop() is not asyncio.get_running_loop():
            self._task = None
            return None
        return task

    async def _run(self) -> None:
        me = asyncio.current_task()
        try:
            await self._index_until_done()
        except StoreClosed:
            pass
        except HermesError as exc:
            # Nothing is lost: the rows stay above the watermark, the next write starts
            # another task and every search on a writable store catches up first.
            _log.warning("%s: background full-text indexing stopped: %s", self._name, exc)
        except Exception:  # a bug: say so, but a background task has nobody to raise to
            _log.exception("%s: background full-text indexing failed", self._name)
        finally:
            # No await between the last check in _index_until_done and this line, so a
            # write noted after it finds no task and starts a new one. Only if this task is
            # still the current one: a forgotten task (``_task_here``) must not clear its
            # successor when it is finally closed.
            if self._task is me:
                self._task = None

    async def _index_until_done(self) -> None:
        remaining = 0
        while True:
            if remaining < self._force_backlog:
                await self._until_quiet_or_overdue()
            writes = self._writes
            remaining = await self._index_chunk()
            if remaining <= 0 and self._writes == writes:
                return

    async def _until_quiet_or_overdue(self) -> None:
        """Return once writes have been quiet for ``idle_delay``, or the backlog is past
        ``force_backlog`` (checked at most once per ``idle_delay`` while writes go on)."""
        while (wait := self._last_write + self._idle_delay - time.monotonic()) > 0:
            await anyio.sleep(wait)
            busy = self._last_write + self._idle_delay > time.monotonic()
            if busy and await self._backlog() >= self._force_backlog:
                return
