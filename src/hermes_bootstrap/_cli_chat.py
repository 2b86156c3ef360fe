"""``hermes chat``: one question from the command line, or a conversation on stdin.

One shot (a PROMPT argument) is for scripts: the answer alone on stdout, or the result
dict with ``--json``, and the exit code says whether the turn completed. Without a
PROMPT the command reads lines and streams each answer as it is generated; tool activity
goes to stderr so piping stdout captures only what the model said.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio

from hermes_bootstrap._cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subcommands,
    comma_list,
    home_option,
    host_default,
    positive_int,
    print_json,
    warn,
)
from hermes_bootstrap.facade import AIAgent
from hermes_bootstrap.profiles import PROFILE_NAMES
from hermes_core.events import ToolFinished, ToolStarted, TurnEvent

__all__ = ["ActivityPrinter", "LineReader", "register"]

EXIT_COMMANDS = frozenset({"/exit", "/quit"})
SESSION_SOURCE = "cli"


@dataclass
class ActivityPrinter:
    """Streams answer text to ``out`` and tool activity lines to ``err``.

    It remembers whether ``out`` ends mid-line, so an activity line (on a terminal both
    streams share the screen) never lands glued to the end of a half-streamed sentence,
    and whether text arrived since the last tool ran, so an answer that was not streamed
    is still printed once.
    """

    out: TextIO
    err: TextIO
    quiet: bool = False
    at_line_start: bool = True
    streamed_since_tools: bool = False

    def delta(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self.at_line_start = text.endswith("\n")
        self.streamed_since_tools = True

    def end_line(self) -> None:
        if not self.at_line_start:
            self.out.write("\n")
            self.out.flush()
            self.at_line_start = True

    def event(self, event: TurnEvent) -> None:
        if isinstance(event, ToolStarted):
            self.streamed_since_tools = False
            if not self.quiet:
                self.end_line()
                self.err.write(f"  -> {event.name}\n")
        elif isinstance(event, ToolFinished) and not self.quiet:
            status = "error" if event.is_error else "ok"
            self.err.write(f"  <- {event.name} {status} {event.duration * 1000:.1f} ms\n")
        else:
            return
        self.err.flush()


def _agent(args: argparse.Namespace, printer: ActivityPrinter) -> AIAgent:
    """The facade for these flags; host variables fill the model flags left out."""
    workspace = Path(args.workspace) if args.workspace else None
    if workspace is not None and not workspace.is_dir():
        raise CliError(f"workspace {workspace} is not a directory", EXIT_USAGE)
    return AIAgent(
        provider=host_default(args.provider, "provider"),
        model=host_default(args.model, "model"),
        api_key=host_default(args.api_key, "api_key"),
        base_url=host_default(args.base_url, "base_url"),
        enabled_toolsets=args.toolsets,
        disabled_toolsets=args.disable_toolsets,
        max_iterations=args.max_iterations,
        profile=args.profile,
        home=args.home,
        workspace=workspace,
        on_event=printer.event,
        source=SESSION_SOURCE,
    )


async def _prepare(agent: AIAgent, wanted: str | None) -> None:
    """Continue ``wanted`` (an id or unique prefix) if given."""
    core = agent.core
    if core is None:
        return
    if wanted is None:
        return
    if core.sessions is None:
        raise CliError("--session needs a session store; this profile keeps none", EXIT_USAGE)
    found = await core.sessions.resolve_session_id(wanted)
    if found is None:
        raise CliError(f"no single session matches {wanted!r} (unknown id, or a prefix of several)")
    core.session_id = found


def _failure(result: dict[str, Any]) -> str:
    reason = result.get("turn_exit_reason") or "unknown"
    error = result.get("error")
    return f"the turn did not complete ({reason})" + (f": {error}" if error else "")


async def _one_shot(args: argparse.Namespace, prompt: str) -> int:
    printer = ActivityPrinter(sys.stdout, sys.stderr, quiet=args.quiet or args.json)
    async with _agent(args, printer) as agent:
        await _prepare(agent, args.session)
        result = await agent.run_conversation(prompt)
    completed = bool(result.get("completed"))
    if args.json:
        print_json(
            result if args.messages else {k: v for k, v in result.items() if k != "messages"}
        )
    else:
        if result.get("final_response"):
            print(result["final_response"])
        if not args.quiet:
            print(f"session: {result.get('session_id')}", file=sys.stderr)
    if not completed:
        warn(_failure(result))
        return EXIT_FAILED
    return EXIT_OK


class LineReader:
    """Reads stdin lines without a thread, so Ctrl-C ends the command at once.

    A thread blocked in ``readline`` cannot be cancelled and keeps the interpreter from
    exiting. Pipes and terminals are read with ``os.read`` once the event loop reports
    them readable, splitting lines here: a buffered text reader could hold a second line
    the loop never hears about. Regular files never block, and objects without a file
    descriptor (a ``StringIO`` in tests) are read directly.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fd: int | None = None
        self._waits = False
        self._pending = b""
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            return
        self._fd = fd
        self._waits = not stat.S_ISREG(os.fstat(fd).st_mode)

    async def readline(self) -> str:
        """The next line with its newline; ``""`` at end of input."""
        if self._fd is None:
            return self._stream.readline()
        while b"\n" not in self._pending:
            if self._waits:
                await anyio.wait_readable(self._fd)
            chunk = os.read(self._fd, 65536)
            if not chunk:
                rest, self._pending = self._pending, b""
                return rest.decode("utf-8", errors="replace")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return (line + b"\n").decode("utf-8", errors="replace")


async def _interactive(args: argparse.Namespace) -> int:
    printer = ActivityPrinter(sys.stdout, sys.stderr, quiet=args.quiet)
    stdin = sys.stdin
    tty = stdin.isatty()
    reader = LineReader(stdin)
    if tty:
        print("Hermes chat. /exit or Ctrl-D quits.", file=sys.stderr)
    async with _agent(args, printer) as agent:
        await _prepare(agent, args.session)
        while True:
            if tty:
                sys.stderr.write("> ")
                sys.stderr.flush()
            line = await reader.readline()
            if not line:
                break
            text = line.strip()
            if text in EXIT_COMMANDS:
                break
            if not text:
                continue
            printer.streamed_since_tools = False
            result = await agent.run_conversation(text, stream_callback=printer.delta)
            final = result.get("final_response")
            if final and not printer.streamed_since_tools:
                printer.delta(str(final))
            printer.end_line()
            if not result.get("completed"):
                warn(_failure(result))
        session = agent.session_id
    if session and not args.quiet:
        print(
            f"session: {session} (continue with: hermes chat --session {session})", file=sys.stderr
        )
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    prompt: str | None = args.prompt
    if prompt == "-":
        prompt = sys.stdin.read()
    if prompt is None and (args.json or args.messages):
        raise CliError("--json and --messages need a PROMPT (one-shot mode)", EXIT_USAGE)
    if prompt is not None:
        if not prompt.strip():
            raise CliError("the prompt is empty", EXIT_USAGE)
        return int(anyio.run(_one_shot, args, prompt))
    return int(anyio.run(_interactive, args))


def add_model_options(parser: argparse.ArgumentParser, *, host_variables: bool) -> None:
    """``--provider --model --base-url --api-key``, shared by ``chat`` and ``batch``."""

    def hint(name: str) -> str:
        return f" (default: ${name}, then config.yaml)" if host_variables else ""

    parser.add_argument(
        "--provider",
        help="model provider profile: scripted, openai, openrouter, anthropic, ..."
        + hint("MODEL_PROVIDER"),
    )
    parser.add_argument("--model", help="model name" + hint("MODEL_ID"))
    parser.add_argument(
        "--base-url",
        help="OpenAI-compatible endpoint to use instead of the provider's" + hint("MODEL_BASE_URL"),
    )
    parser.add_argument(
        "--api-key",
        help="API key (prefer the provider's variable or $HERMES_HOME/.env: flags are "
        "visible in the process list)" + hint("MODEL_API_KEY"),
    )


def register(commands: Subcommands) -> None:
    chat = commands.add_parser(
        "chat",
        help="ask one question, or chat interactively on stdin",
        description="With PROMPT, run one turn and print the answer (or the result with "
        "--json). Without it, read one message per line from stdin and stream the answers; "
        "/exit or end of input quits. Tool activity is printed on stderr.",
    )
    chat.add_argument("prompt", nargs="?", metavar="PROMPT", help="the message; '-' reads stdin")
    add_model_options(chat, host_variables=True)
    chat.add_argument(
        "--toolsets",
        type=comma_list,
        metavar="A,B",
        help="toolsets to enable, comma-separated (default: config toolsets, else all)",
    )
    chat.add_argument(
        "--disable-toolsets",
        type=comma_list,
        metavar="A,B",
        help="toolsets to disable, comma-separated (replaces config disabled_toolsets)",
    )
    chat.add_argument("--session", metavar="ID", help="continue a stored session (id or prefix)")
    chat.add_argument(
        "--profile", choices=PROFILE_NAMES, default="local", help="deployment profile"
    )
    home_option(chat)
    chat.add_argument(
        "--max-iterations", type=positive_int, metavar="N", help="model calls per turn"
    )
    chat.add_argument(
        "--workspace", metavar="DIR", help="directory the file and terminal tools work in"
    )
    chat.add_argument("--json", action="store_true", help="print the result dict as JSON")
    chat.add_argument(
        "--messages", action="store_true", help="with --json, include the turn's messages"
    )
    chat.add_argument(
        "-q", "--quiet", action="store_true", help="no tool activity or session line on stderr"
    )
    chat.set_defaults(handler=_run)
