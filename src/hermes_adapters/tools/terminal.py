"""The ``terminal`` toolset: shell commands in the foreground, or as managed background processes.

A command is real authority handed to model output, so what bounds it is the process, not
the text (the command guard in :mod:`.approval` is only a tripwire for approval prompts):

- every command runs as ``bash -c`` in a session of its own (``start_new_session``), so
  it is the leader of a process group and a timeout, a cancelled turn or a closed
  registry can kill the whole tree, grandchildren included (WIRE.md §4 item 23: cancelled
  runs must not leave subprocesses behind);
- the working directory is pinned to the workspace root (``workdir`` may only go deeper);
- the environment is scrubbed of credentials, so a command cannot read the host's API
  keys (:func:`scrub_environment`);
- a foreground command gets no stdin (nothing can hang on a hidden prompt) and its output
  is capped, head and tail, at 50,000 characters (REFERENCE.md §4);
- a foreground command owns its group for exactly its lifetime: whatever it leaves
  running when the shell exits is stopped, because such a leftover would hold the output
  pipe open and the call would hang until its timeout. Long-running work belongs in
  ``background=true``, where the :class:`ProcessRegistry` owns the process, keeps a
  bounded tail of its output and kills it when the registry closes.

Processes are driven with :mod:`asyncio` subprocesses, so these tools need the asyncio
backend of anyio.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import anyio
from anyio.abc import TaskGroup

from hermes_adapters.tools.approval import Approvals, reads_commands_from_stdin
from hermes_core.ports.tools import Tool, ToolContext, ToolResult, ToolSpec, tool_error

__all__ = [
    "BackgroundProcess",
    "DEFAULT_TIMEOUT",
    "MAX_OUTPUT_CHARS",
    "MAX_TIMEOUT",
    "ProcessRegistry",
    "ProcessTool",
    "TerminalTool",
    "cap_output",
    "scrub_environment",
    "terminal_tools",
]

DEFAULT_TIMEOUT = 180.0
MAX_TIMEOUT = 600.0
MAX_OUTPUT_CHARS = 50_000
KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL when a process group is stopped."""

_DRAIN = 1.0
"""How long to wait for the last output once a process group is gone."""
_POLL = 0.02
_GROUP_POLL = 0.25
_CHUNK = 65_536
_HEAD_SHARE = 0.4
_EXIT_TIMEOUT = 124
_SPEC_SLACK = 30.0
"""The engine's own timeout sits above ours, so ours fires first and reports exit 124."""


# --- output capture ---------------------------------------------------------------------


def _marker(omitted: int, total: int) -> str:
    return f"\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {total} total] ...\n\n"


def cap_output(text: str, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """``text`` unchanged if it fits, else 40% head + 60% tail around a visible marker."""
    if len(text) <= max_chars:
        return text
    head = int(max_chars * _HEAD_SHARE)
    tail = max_chars - head
    return text[:head] + _marker(len(text) - head - tail, len(text)) + text[-tail:]


class _HeadTail:
    """Decoded output kept as the first ``max_chars`` and the last 60% of that.

    Memory stays bounded however much a command prints, and :meth:`render` gives exactly
    what :func:`cap_output` would give for the whole stream.
    """

    def __init__(self, max_chars: int) -> None:
        self._max = max_chars
        self._keep_head = int(max_chars * _HEAD_SHARE)
        self._keep_tail = max_chars - self._keep_head
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self.total = 0

    def feed(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        if not text:
            return
        self.total += len(text)
        room = self._max - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
        self._tail = (self._tail + text)[-self._keep_tail :]

    def render(self) -> str:
        head = "".join(self._head)
        if self.total <= self._max:
            return head
        omitted = self.total - self._keep_head - self._keep_tail
        return head[: self._keep_head] + _marker(omitted, self.total) + self._tail


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


async def _pump(stream: asyncio.StreamReader | None, sink: _HeadTail | _Tail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        sink.feed(chunk)
    sink.feed(b"", final=True)


# --- process groups -----------------------------------------------------------------------


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _has_live_member(pgid: int) -> bool:
    """Scan ``/proc`` for a member of the group that is not a zombie.

    ``killpg(pgid, 0)`` also succeeds for zombies, and in a container whose init does not
    reap orphans a killed grandchild can stay a zombie for ever.
    """
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in {"Z", "X"}:
            return True
    return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _has_live_member(pgid) if os.path.isdir("/proc") else True


async def _wait_leader(process: asyncio.subprocess.Process) -> int:
    """The group leader's exit status, as soon as it has exited.

    ``Process.wait()`` (Python 3.11) returns only once every pipe is closed too, so a
    grandchild still holding stdout would hold it up; ``returncode`` is set at exit. The
    poll backs off from 5 ms to 100 ms and is cut short when ``wait()`` answers first,
    which is the common case (nothing left behind).
    """

    async def full_wait() -> None:
        await process.wait()
        tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(full_wait)
        delay = 0.005
        while process.returncode is None:
            await anyio.sleep(delay)
            delay = min(2 * delay, 0.1)
        tg.cancel_scope.cancel()
    assert process.returncode is not None
    return process.returncode


async def _gone_within(process: asyncio.subprocess.Process, seconds: float) -> bool:
    """Wait up to ``seconds`` for the leader to exit and the rest of its group to go."""
    with anyio.move_on_after(seconds):
        await _wait_leader(process)
        while True:
            if not _group_alive(process.pid):
                return True
            await anyio.sleep(_POLL)
    return False


async def _group_emptied(pgid: int) -> None:
    """Return once no live process is left in the group (the kernel has no event for it)."""
    while True:
        if not _group_alive(pgid):
            return
        await anyio.sleep(_GROUP_POLL)


async def _terminate_group(process: asyncio.subprocess.Process, grace: float) -> bool:
    """Stop every process in the group led by ``process``: SIGTERM, then SIGKILL.

    Returns whether anything was still running. Callers shield this, so it is bounded by
    ``2 * grace``.
    """
    pgid = process.pid
    if process.returncode is not None and not _group_alive(pgid):
        return False
    _signal_group(pgid, signal.SIGTERM)
    _signal_group(pgid, signal.SIGCONT)  # a stopped process must run to see SIGTERM
    if not await _gone_within(process, grace):
        _signal_group(pgid, signal.SIGKILL)
        await _gone_within(process, grace)
    return True


def _release(process: asyncio.subprocess.Process) -> None:
    """Close the subprocess transport once we are done with the process.

    asyncio closes it by itself only when the process has exited and its pipes reached
    EOF; a pipe still held by something that escaped the group (a daemon calling setsid)
    would keep it open and leak the fds. There is no public API for this.
    """
    transport = getattr(process, "_transport", None)
    if transport is not None and process.returncode is not None:
        transport.close()


def _exit_status(returncode: int) -> int:
    """Shell convention: killed by signal N reads as exit status 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


# --- environment --------------------------------------------------------------------------

# fmt: off
_SECRET_PARTS = frozenset(
    {
        "KEY", "KEYS", "APIKEY", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD",
        "PASSWD", "PASSPHRASE", "PASS", "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH",
        "COOKIE", "DSN", "PAT",
    }
)
# fmt: on
"""Name parts (split on ``_``) that mark a secret: ``GITHUB_PAT``, ``SSH_AUTH_SOCK``."""
_SECRET_SUBSTRINGS = ("PASSWORD", "SECRET", "TOKEN", "APIKEY", "API_KEY", "PRIVATE_KEY")
# fmt: off
_SECRET_PREFIXES = (
    "AWS_", "OPENAI_", "ANTHROPIC_", "AZURE_", "GOOGLE_", "GCP_", "GCLOUD_", "GEMINI_",
    "VERTEX_", "OPENROUTER_", "GROQ_", "MISTRAL_", "COHERE_", "DEEPSEEK_", "XAI_",
    "TOGETHER_", "FIREWORKS_", "HF_", "HUGGINGFACE_", "HUGGING_FACE_", "NOUS_",
    "PERPLEXITY_", "REPLICATE_", "TAVILY_", "FIRECRAWL_", "EXA_", "BROWSERBASE_",
    "ELEVENLABS_", "GH_", "GITHUB_", "GITLAB_", "PYPI_", "TWINE_", "SLACK_",
    "DISCORD_", "TELEGRAM_", "STRIPE_", "DATABASE_URL",
)
# fmt: on
_URL_CREDENTIALS = re.compile(r"://[^/\s:@]+:[^/\s@]+@")


def _is_secret(name: str, value: str) -> bool:
    upper = name.upper()
    if upper.startswith(_SECRET_PREFIXES) or any(s in upper for s in _SECRET_SUBSTRINGS):
        return True
    if any(part in _SECRET_PARTS for part in upper.split("_")):
        return True
    return bool(_URL_CREDENTIALS.search(value))


def scrub_environment(environ: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``environ`` without credentials, for a command the model wrote.

    Drops variables named like secrets (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``,
    ``*PASSWORD*``, ``SSH_AUTH_SOCK``...), whole provider families (``AWS_*``,
    ``OPENAI_*``, ``ANTHROPIC_*``...) and any value holding ``user:pass@`` URL
    credentials. ``keep`` names variables the host passes through anyway.
    """
    kept = set(keep)
    return {k: v for k, v in environ.items() if k in kept or not _is_secret(k, v)}


# --- background processes -----------------------------------------------------------------

ProcessStatus = Literal["running", "exited", "killed"]


@dataclass(eq=False)
class BackgroundProcess:
    """One command started with ``background=true``, owned by a :class:`ProcessRegistry`.

    It counts as running until its whole process group is gone, not just its shell, so
    ``nohup server > log &`` stays visible (and killable) after the shell returns.
    """

    session_id: str
    command: str
    process: asyncio.subprocess.Process
    output: _Tail
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    killed: bool = False
    reaped: bool = False
    """The group was seen empty: its id may be reused, so it is never signalled again."""
    done: anyio.Event = field(default_factory=anyio.Event)
    reader_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def exit_code(self) -> int | None:
        code = self.process.returncode
        return None if code is None or not self.done.is_set() else _exit_status(code)

    @property
    def status(self) -> ProcessStatus:
        if not self.done.is_set():
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

    async def write(self, data: str) -> int:
        """Send ``data`` to the process's stdin; bounded, since a full pipe would block.

        Raises:
            BrokenPipeError: stdin is closed or the process has exited.
            TimeoutError: the process is not reading its input.
        """
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing() or self.done.is_set():
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


class ProcessRegistry:
    """Owns background processes: their reader tasks, bounded output and lifetime.

    Use it as ``async with ProcessRegistry() as registry:`` around everything that may
    start a background process. The readers run in a task group entered there, and
    leaving the block (or :meth:`aclose`) kills every process group and waits for the
    readers, so neither a task nor a process outlives the registry. Enter and leave it in
    the same task, as with any task group.
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
        self._tg: TaskGroup | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        if self._tg is not None or self._closed:
            raise RuntimeError("a ProcessRegistry can be entered once")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self.aclose()
        finally:
            tg, self._tg = self._tg, None
            suppress = await tg.__aexit__(exc_type, exc, tb) if tg is not None else None
        return suppress

    @property
    def is_open(self) -> bool:
        return self._tg is not None and not self._closed

    def processes(self) -> list[BackgroundProcess]:
        return list(self._processes.values())

    async def start(
        self, argv: Sequence[str], *, command: str, cwd: Path, env: Mapping[str, str]
    ) -> BackgroundProcess:
        """Spawn ``argv`` in its own process group and start collecting its output.

        Raises:
            RuntimeError: the registry is not open, or too many processes are running.
            OSError: the process could not be started.
        """
        if self._tg is None or self._closed:
            raise RuntimeError(
                "background processes are unavailable: the process registry is not running"
            )
        running = sum(1 for p in self._processes.values() if not p.done.is_set())
        if running >= self._max_running:
            raise RuntimeError(
                f"{running} background processes are already running; kill one first"
            )
        with anyio.CancelScope(shield=True):  # a spawned process must always be registered
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
            )
        entry = BackgroundProcess(
            f"proc_{secrets.token_hex(6)}", command, process, _Tail(self._buffer_chars)
        )
        self._processes[entry.session_id] = entry
        self._tg.start_soon(self._read, entry, name=f"hermes-process-reader-{entry.session_id}")
        self._forget_old()
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
        """Kill the process's whole group and wait until its reader has finished."""
        with anyio.CancelScope(shield=True):
            if not entry.done.is_set():
                entry.killed = True
            if not entry.reaped:
                await _terminate_group(entry.process, self._kill_grace)
                entry.reaped = not _group_alive(entry.pid)
            with anyio.move_on_after(_DRAIN):
                await entry.done.wait()
            if not entry.done.is_set():  # a pipe held open from outside the group
                entry.reader_scope.cancel()
                await entry.done.wait()
            _release(entry.process)

    async def aclose(self) -> None:
        """Kill every process group and wait for every reader. Safe to call twice."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for entry in self._processes.values():
                    if not entry.reaped:  # also groups whose reader was cancelled
                        tg.start_soon(self.kill, entry)

    async def _read(self, entry: BackgroundProcess) -> None:
        try:
            with entry.reader_scope:
                await _pump(entry.process.stdout, entry.output)
                await _wait_leader(entry.process)
                # The shell is gone, but what it started may live on (``nohup server &``):
                # the group stays ours, and running, until it is empty. While it has a
                # member its id cannot be reused, so killing it later is safe.
                await _group_emptied(entry.pid)
                entry.reaped = True
        finally:
            entry.finished = time.monotonic()
            entry.done.set()
            _release(entry.process)

    def _forget_old(self) -> None:
        finished = [p for p in self._processes.values() if p.done.is_set()]
        finished.sort(key=lambda p: p.finished or 0.0)
        for entry in finished[: max(0, len(finished) - self._max_finished)]:
            del self._processes[entry.session_id]


# --- argument helpers ---------------------------------------------------------------------


class _BadArgs(Exception):
    """An argument the model got wrong; becomes an error result, never a crash."""


def _number(args: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = args.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _BadArgs(f"'{key}' must be a number, got {type(value).__name__}")
    if not low <= value <= high:
        raise _BadArgs(f"'{key}' must be between {low:g} and {high:g}, got {value:g}")
    return float(value)


def _integer(args: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadArgs(f"'{key}' must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise _BadArgs(f"'{key}' must be between {low} and {high}, got {value}")
    return value


def _string(args: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None:
        if required:
            raise _BadArgs(f"missing required argument '{key}'")
        return None
    if not isinstance(value, str):
        raise _BadArgs(f"'{key}' must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise _BadArgs(f"'{key}' contains a NUL byte")
    return value


def _json(value: Mapping[str, Any], *, is_error: bool = False) -> ToolResult:
    return ToolResult(json.dumps(value, ensure_ascii=False), is_error=is_error)


# --- the tools ----------------------------------------------------------------------------

_TERMINAL_DESCRIPTION = (
    "Run a shell command (bash) in the workspace and return its combined stdout/stderr "
    "and exit code. Commands run non-interactively: there is no stdin, so never start "
    "anything that waits for input or a pager. Output over 50,000 characters keeps its "
    "head and tail. A foreground command is killed after `timeout` seconds (default 180, "
    "max 600; exit code 124) and anything it leaves running is stopped when it returns: "
    "use background=true for servers, watchers and other long jobs, then the `process` "
    "tool to read their output, wait for them, send input or kill them. Dangerous "
    "commands (recursive deletes, force pushes, piping downloads into a shell...) need the "
    "user's approval; a command reported as BLOCKED must not be retried or rephrased."
)

_TERMINAL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command line to run with bash -c."},
        "background": {
            "type": "boolean",
            "description": "Run in the background and return a session_id at once (default false).",
        },
        "timeout": {
            "type": "integer",
            "minimum": 1,
            "maximum": 600,
            "description": "Seconds before a foreground command is killed (default 180).",
        },
        "workdir": {
            "type": "string",
            "description": "Directory to run in: the workspace root (default) or a path inside it.",
        },
    },
    "required": ["command"],
}


class TerminalTool:
    """The ``terminal`` tool: one shell command per call, bounded in time, output and reach.

    ``registry`` receives ``background=true`` commands; share it with the
    :class:`ProcessTool` that manages them. ``keep_env`` names credentials the host wants
    commands to see anyway (``SSH_AUTH_SOCK`` for git over ssh, say).
    """

    def __init__(
        self,
        registry: ProcessRegistry,
        *,
        workspace_root: Path | None = None,
        approvals: Approvals | None = None,
        default_timeout: float = DEFAULT_TIMEOUT,
        max_timeout: float = MAX_TIMEOUT,
        max_output_chars: int = MAX_OUTPUT_CHARS,
        kill_grace: float = KILL_GRACE,
        keep_env: Iterable[str] = (),
    ) -> None:
        self._registry = registry
        self._root = Path(os.path.realpath(workspace_root or Path.cwd()))
        self._approvals = approvals if approvals is not None else Approvals()
        self._default_timeout = default_timeout
        self._max_timeout = max_timeout
        self._max_output = max_output_chars
        self._kill_grace = kill_grace
        self._keep_env = frozenset(keep_env)
        self._shell = shutil.which("bash") or "/bin/sh"
        self._spec = ToolSpec(
            name="terminal",
            description=_TERMINAL_DESCRIPTION,
            parameters=_TERMINAL_PARAMETERS,
            toolset="terminal",
            parallel_safe=False,
            timeout=max_timeout + 2 * kill_grace + _SPEC_SLACK,
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    @property
    def workspace_root(self) -> Path:
        return self._root

    async def available(self) -> bool:
        return os.name == "posix"

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            command = _string(args, "command", required=True) or ""
            if not command.strip():
                raise _BadArgs("'command' is empty")
            background = args.get("background", False)
            if not isinstance(background, bool):
                raise _BadArgs("'background' must be true or false")
            timeout = self._timeout(args)
            cwd = self._workdir(_string(args, "workdir"))
        except _BadArgs as exc:
            return tool_error(str(exc))
        blocked = await self._approvals.check(command, ctx.service("approver"))
        if blocked is not None:
            return tool_error(blocked)
        env = scrub_environment(os.environ, self._keep_env)
        argv = [self._shell, "-c", command]
        try:
            if background:
                entry = await self._registry.start(argv, command=command, cwd=cwd, env=env)
                return _json(
                    {"session_id": entry.session_id, "pid": entry.pid, "status": "running"}
                )
            return await self._run(argv, cwd, env, timeout)
        except (OSError, RuntimeError) as exc:
            return tool_error(f"could not start the command: {exc}")

    def _timeout(self, args: Mapping[str, Any]) -> float:
        try:
            return _number(args, "timeout", self._default_timeout, 0.001, self._max_timeout)
        except _BadArgs as exc:
            raise _BadArgs(
                f"{exc}. Commands that need longer must run with background=true."
            ) from None

    def _workdir(self, workdir: str | None) -> Path:
        if not workdir:
            return self._root
        path = Path(workdir)
        real = Path(os.path.realpath(path if path.is_absolute() else self._root / path))
        if real != self._root and self._root not in real.parents:
            raise _BadArgs(f"workdir must be inside the workspace {self._root}, got {workdir!r}")
        if not real.is_dir():
            raise _BadArgs(f"workdir {workdir!r} is not a directory")
        return real

    async def _run(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], limit: float
    ) -> ToolResult:
        capture = _HeadTail(self._max_output)
        with anyio.CancelScope(shield=True):  # never lose a process between fork and here
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
            )
        returncode: int | None = None
        leftovers = False
        try:
            with anyio.move_on_after(limit):
                returncode, leftovers = await self._finish(process, capture)
        finally:
            with anyio.CancelScope(shield=True):
                await _terminate_group(process, self._kill_grace)
                _release(process)
        output = capture.render()
        if returncode is None:
            return _json(
                {
                    "output": output,
                    "exit_code": _EXIT_TIMEOUT,
                    "error": f"Command timed out after {limit:g}s and was killed with its "
                    "process group. Use background=true for long-running commands.",
                }
            )
        if leftovers:
            output += (
                "\n[processes this command left running were stopped when it returned; "
                "use background=true to keep a process running]"
            )
        return _json({"output": output, "exit_code": _exit_status(returncode), "error": None})

    async def _finish(
        self, process: asyncio.subprocess.Process, capture: _HeadTail
    ) -> tuple[int, bool]:
        """Read output until the shell exits, then stop its leftovers and drain the pipe."""
        drained = anyio.Event()

        async def read() -> None:
            try:
                await _pump(process.stdout, capture)
            finally:
                drained.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            returncode = await _wait_leader(process)
            leftovers = await _terminate_group(process, self._kill_grace)
            with anyio.move_on_after(_DRAIN):
                await drained.wait()
            tg.cancel_scope.cancel()
        return returncode, leftovers


_PROCESS_DESCRIPTION = (
    "Manage commands started with terminal(background=true). Actions: list (all "
    "processes); poll (status and the latest output); log (output lines, `offset`/`limit`, "
    "default the last 200); wait (until it exits or `timeout` seconds, default 180, max "
    "600); kill (the process and all its children); write (send `data` to its stdin); "
    "submit (send `data` plus a newline); close (close its stdin, i.e. send EOF). "
    "`session_id` may be a unique prefix."
)

_PROCESS_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "enum": ["list", "poll", "log", "wait", "kill", "write", "submit", "close"],
        },
        "session_id": {"type": "string", "description": "The proc_... id (a prefix works)."},
        "data": {"type": "string", "description": "Text for write/submit."},
        "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
        "offset": {"type": "integer", "minimum": 0, "description": "First log line (0-based)."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
    },
    "required": ["action"],
}

_ACTIONS = frozenset(_PROCESS_PARAMETERS["properties"]["action"]["enum"])


class ProcessTool:
    """The ``process`` tool: inspect and steer background processes in a registry.

    Text written to a process that executes its input (a shell, an interpreter, a SQL
    client) goes through the same approval check as a command.
    """

    def __init__(
        self,
        registry: ProcessRegistry,
        *,
        approvals: Approvals | None = None,
        max_output_chars: int = MAX_OUTPUT_CHARS,
        max_timeout: float = MAX_TIMEOUT,
    ) -> None:
        self._registry = registry
        self._approvals = approvals if approvals is not None else Approvals()
        self._max_output = max_output_chars
        self._max_timeout = max_timeout
        self._spec = ToolSpec(
            name="process",
            description=_PROCESS_DESCRIPTION,
            parameters=_PROCESS_PARAMETERS,
            toolset="terminal",
            parallel_safe=False,
            timeout=max_timeout + _SPEC_SLACK,
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def available(self) -> bool:
        return os.name == "posix"

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            action = _string(args, "action", required=True)
            if action not in _ACTIONS:
                raise _BadArgs(f"'action' must be one of {sorted(_ACTIONS)}, got {action!r}")
            if action == "list":
                return _json({"processes": [p.summary() for p in self._registry.processes()]})
            session_id = _string(args, "session_id", required=True) or ""
            try:
                entry = self._registry.find(session_id)
            except LookupError as exc:
                raise _BadArgs(str(exc)) from None
            if action == "poll":
                return _json({**entry.summary(), "output_tail": entry.output.text[-2000:]})
            if action == "log":
                return self._log(entry, args)
            if action == "wait":
                return await self._wait(entry, args)
            if action == "kill":
                was_running = not entry.done.is_set()
                await self._registry.kill(entry)
                return _json({**entry.summary(), "was_running": was_running})
            if action == "close":
                await entry.close_stdin()
                return _json({"session_id": entry.session_id, "stdin": "closed"})
            return await self._write(entry, args, ctx, newline=action == "submit")
        except _BadArgs as exc:
            return tool_error(str(exc))

    def _log(self, entry: BackgroundProcess, args: Mapping[str, Any]) -> ToolResult:
        offset = _integer(args, "offset", 0, 10**9)
        limit = _integer(args, "limit", 1, 2000) or 200
        lines = entry.output.text.splitlines()
        start = max(0, len(lines) - limit) if offset is None else offset
        shown = lines[start : start + limit]
        return _json(
            {
                "session_id": entry.session_id,
                "status": entry.status,
                "output": cap_output("\n".join(shown), self._max_output),
                "offset": start,
                "lines": len(shown),
                "total_lines": len(lines),
                "chars_dropped": entry.output.dropped,
            }
        )

    async def _wait(self, entry: BackgroundProcess, args: Mapping[str, Any]) -> ToolResult:
        timeout = _number(args, "timeout", DEFAULT_TIMEOUT, 0.001, self._max_timeout)
        with anyio.move_on_after(timeout):
            await entry.done.wait()
        result = {
            **entry.summary(),
            "output": cap_output(entry.output.text, self._max_output),
            "timed_out": not entry.done.is_set(),
        }
        return _json(result)

    async def _write(
        self, entry: BackgroundProcess, args: Mapping[str, Any], ctx: ToolContext, *, newline: bool
    ) -> ToolResult:
        data = _string(args, "data", required=True) or ""
        if newline:
            data += "\n"
        if reads_commands_from_stdin(entry.command):
            blocked = await self._approvals.check(data, ctx.service("approver"))
            if blocked is not None:
                return tool_error(blocked)
        try:
            written = await entry.write(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            return tool_error(f"cannot write to {entry.session_id}: {exc}")
        except TimeoutError:
            return tool_error(f"{entry.session_id} is not reading its input")
        return _json({"session_id": entry.session_id, "bytes_written": written})


def terminal_tools(
    workspace_root: Path | None, approvals: Approvals | None = None
) -> tuple[list[Tool], ProcessRegistry]:
    """The ``terminal`` toolset and the registry its background processes live in.

    The caller owns the registry: enter it (``async with registry:``) for as long as the
    tools are in use; leaving it kills every background process. Both tools share one
    :class:`Approvals`, so a "session" answer covers commands and process input alike.
    """
    registry = ProcessRegistry()
    shared = approvals if approvals is not None else Approvals()
    tools: list[Tool] = [
        TerminalTool(registry, workspace_root=workspace_root, approvals=shared),
        ProcessTool(registry, approvals=shared),
    ]
    return tools, registry
