"""The stdio transport: an MCP server as a child process speaking JSON-RPC lines.

We spawn the child ourselves instead of using the SDK's ``stdio_client`` for three reasons:
the SDK always adds its own inherited variables (``LOGNAME`` among them) to the child's
environment, where we promise an exact allow list; it never reports the child's pid, which
the pool and the tests need to prove a server is gone; and it kills the process group only
when the leader ignores the polite shutdown, while a leader that exits on time can leave
grandchildren behind (an ``npx`` wrapper's ``node``). Here the child always starts in a new
session (its own process group) and shutdown always ends with ``killpg``, shielded from
cancellation and bounded in time, so a cancelled connect or a closed source never leaves a
process behind.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from hermes_adapters.mcp.results import scrub

__all__ = ["INHERITED_ENV", "child_environment", "stdio_transport"]

log = logging.getLogger("hermes.mcp.stdio")

INHERITED_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "SHELL", "TMPDIR")
"""The host variables a stdio server sees (plus ``XDG_*`` and its own ``env``)."""

STDIN_GRACE = 2.0
"""Seconds a server gets to exit on its own once its stdin is closed (the MCP shutdown)."""
TERM_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL to the process group."""
REAP_TIMEOUT = 2.0
"""Seconds to wait for the killed leader to be reaped; only an unkillable process hits it."""
MAX_LINE = 32 * 1024 * 1024
"""Longest stdout line accepted; a server streaming garbage must not exhaust memory."""

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


def child_environment(
    extra: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The filtered environment for a stdio server: the allow list, ``XDG_*``, then ``extra``.

    Everything else (API keys above all) stays with the host. Values that look like exported
    shell functions are dropped, as the SDK does.
    """
    source = os.environ if environ is None else environ
    env = {
        k: v
        for k, v in source.items()
        if (k in INHERITED_ENV or k.startswith("XDG_")) and not v.startswith("()")
    }
    env.update(extra)
    return env


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | None = None,
    label: str = "mcp",
    on_spawn: Callable[[int], None] | None = None,
    stderr_tail: deque[str] | None = None,
    stdin_grace: Callable[[], float] = lambda: STDIN_GRACE,
) -> AsyncIterator[Streams]:
    """Run ``command`` in a new process group and yield the session's stream pair.

    The server's stderr goes to the ``hermes.mcp.stdio`` logger (debug, scrubbed) and its
    last lines to ``stderr_tail``, for error messages. On exit the whole group is stopped;
    ``stdin_grace`` is asked then how long the polite shutdown may take (a server that never
    finished ``initialize`` has nothing to save and gets 0).
    """
    with anyio.CancelScope(shield=True):  # a spawned child must never be lost to a cancel
        process = await anyio.open_process(
            [command, *args],
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    if on_spawn is not None:
        on_spawn(process.pid)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    tail = stderr_tail if stderr_tail is not None else deque(maxlen=20)
    stopped = False
    try:
        await anyio.lowlevel.checkpoint()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_stdout, process, read_send, label)
            tg.start_soon(_write_stdin, process, write_recv, read_send)
            stderr_done = anyio.Event()
            if process.stderr is not None:
                tg.start_soon(_pump_stderr, process.stderr, tail, label, stderr_done)
            else:
                stderr_done.set()
            try:
                yield read_recv, write_send
            finally:
                with anyio.CancelScope(shield=True):
                    await terminate_group(process, stdin_grace())  # pumps still drain here
                    with anyio.move_on_after(0.5):  # keep the last stderr lines for errors
                        await stderr_done.wait()
                stopped = True
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if not stopped:
                await terminate_group(process, 0.0)
            for stream in (read_send, read_recv, write_send, write_recv):
                stream.close()
            with anyio.move_on_after(REAP_TIMEOUT):
                await process.aclose()


async def _read_stdout(
    process: Process, send: MemoryObjectSendStream[SessionMessage | Exception], label: str
) -> None:
    """Parse stdout lines into messages; EOF (the child died) closes the session's stream."""
    assert process.stdout is not None
    buffer = bytearray()
    with send:
        try:
            async for chunk in process.stdout:
                buffer.extend(chunk)
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if not line.strip():
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError:
                        log.warning("%s: ignored a stdout line that is not JSON-RPC", label)
                        continue
                    await send.send(SessionMessage(message))
                if len(buffer) > MAX_LINE:
                    log.error("%s: a stdout line exceeded %d bytes; disconnecting", label, MAX_LINE)
                    return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        except OSError as exc:
            log.warning("%s: reading the server's stdout failed: %s", label, exc)


async def _write_stdin(
    process: Process,
    receive: MemoryObjectReceiveStream[SessionMessage],
    read_send: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    """Write outgoing messages as lines; a broken pipe ends the session like an EOF would."""
    assert process.stdin is not None
    with receive:
        try:
            async for message in receive:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            read_send.close()


async def _pump_stderr(
    stream: ByteReceiveStream, tail: deque[str], label: str, done: anyio.Event
) -> None:
    """Drain stderr so a chatty server never blocks on a full pipe; keep the last lines."""
    pending = b""
    try:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in stream:
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    _keep(raw, tail, label)
                pending = pending[-MAX_LINE:]
        _keep(pending, tail, label)
    finally:
        done.set()


def _keep(raw: bytes, tail: deque[str], label: str) -> None:
    line = scrub(raw.decode(errors="replace").rstrip())
    if line:
        tail.append(line)
        log.debug("%s stderr: %s", label, line)


async def terminate_group(process: Process, stdin_grace: float = STDIN_GRACE) -> None:
    """Stop the server and every process in its group, politely first.

    Close stdin (the MCP shutdown) and give the server ``stdin_grace`` seconds to exit; then
    SIGTERM the group and SIGKILL whatever is left after :data:`TERM_GRACE`. The group is
    signalled even when the leader exited on its own, since its children may not have.
    """
    pgid = process.pid  # the leader of a new session: its pid is the group id
    exited = anyio.Event()

    async def watch() -> None:
        await process.wait()  # returns once the leader exited and its pipes are closed
        exited.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        if process.stdin is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        with anyio.move_on_after(stdin_grace):
            await exited.wait()
        if _signal_group(pgid, signal.SIGTERM):
            with anyio.move_on_after(TERM_GRACE):
                await exited.wait()
            _signal_group(pgid, signal.SIGKILL)
            with anyio.move_on_after(REAP_TIMEOUT):
                await exited.wait()
        tg.cancel_scope.cancel()


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False once the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # zombies or foreign members: not proof that the group is gone
    return True
