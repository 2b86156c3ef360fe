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
  ``background=true``, where the :class:`ProcessRegistry` owns the process, keeps its
  output in a temp file and a bounded tail of it in memory, and kills it when the
  registry closes.

This module holds the two tools and their factory; the process plumbing lives in
:mod:`._subprocess` and the registry in :mod:`._processes`. Processes are driven with
:mod:`asyncio` subprocesses, so these tools need the asyncio backend of anyio.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio

from hermes_adapters.tools._processes import BackgroundProcess, ProcessRegistry
from hermes_adapters.tools._subprocess import (
    KILL_GRACE,
    MAX_OUTPUT_CHARS,
    cap_output,
    exit_status,
    run_capped,
    scrub_environment,
)
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
_EXIT_TIMEOUT = 124
_SPEC_SLACK = 30.0
"""The engine's own timeout sits above ours, so ours fires first and reports exit 124."""


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
        self, argv: list[str], cwd: Path, env: Mapping[str, str], limit: float
    ) -> ToolResult:
        done = await run_capped(
            argv,
            cwd=cwd,
            env=env,
            limit=limit,
            max_chars=self._max_output,
            grace=self._kill_grace,
        )
        if done.returncode is None:
            return _json(
                {
                    "output": done.output,
                    "exit_code": _EXIT_TIMEOUT,
                    "error": f"Command timed out after {limit:g}s and was killed with its "
                    "process group. Use background=true for long-running commands.",
                }
            )
        output = done.output
        if done.leftovers:
            output += (
                "\n[processes this command left running were stopped when it returned; "
                "use background=true to keep a process running]"
            )
        return _json({"output": output, "exit_code": exit_status(done.returncode), "error": None})


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
                entries = self._registry.processes()
                for listed in entries:
                    await listed.refresh()
                return _json({"processes": [p.summary() for p in entries]})
            session_id = _string(args, "session_id", required=True) or ""
            try:
                entry = self._registry.find(session_id)
            except LookupError as exc:
                raise _BadArgs(str(exc)) from None
            if action == "poll":
                await entry.refresh()
                return _json({**entry.summary(), "output_tail": entry.output.text[-2000:]})
            if action == "log":
                return await self._log(entry, args)
            if action == "wait":
                return await self._wait(entry, args)
            if action == "kill":
                was_running = entry.poll() == "running"
                await self._registry.kill(entry)
                await entry.refresh()
                return _json({**entry.summary(), "was_running": was_running})
            if action == "close":
                await entry.close_stdin()
                return _json({"session_id": entry.session_id, "stdin": "closed"})
            return await self._write(entry, args, ctx, newline=action == "submit")
        except _BadArgs as exc:
            return tool_error(str(exc))

    async def _log(self, entry: BackgroundProcess, args: Mapping[str, Any]) -> ToolResult:
        offset = _integer(args, "offset", 0, 10**9)
        limit = _integer(args, "limit", 1, 2000) or 200
        await entry.refresh()
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
            await entry.wait()
        await entry.refresh()
        result = {
            **entry.summary(),
            "output": cap_output(entry.output.text, self._max_output),
            "timed_out": not entry.done,
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

    The caller owns the registry. It needs no entering; ``await registry.aclose()``, from
    any task (or leaving ``async with registry:``), kills every background process and
    deletes their output files. Both tools share one :class:`Approvals`, so a "session"
    answer covers commands and process input alike.
    """
    registry = ProcessRegistry()
    shared = approvals if approvals is not None else Approvals()
    tools: list[Tool] = [
        TerminalTool(registry, workspace_root=workspace_root, approvals=shared),
        ProcessTool(registry, approvals=shared),
    ]
    return tools, registry
