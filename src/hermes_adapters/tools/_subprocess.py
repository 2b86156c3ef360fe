"""Process plumbing for the ``terminal`` toolset: sessions, group kills, scrubbing, capping.

Kept apart from the tools because it is where the guarantees live, not the arguments:

- :func:`spawn` starts every command in a session of its own, so it leads a process group
  and :func:`terminate_group` can stop the whole tree, grandchildren included;
- :func:`run_capped` runs a foreground command to completion with bounded time and
  output, and owns its group for exactly its lifetime;
- :func:`scrub_environment` keeps credentials out of a command's environment;
- :func:`cap_output` / :class:`HeadTail` bound what output is kept.

Processes are :mod:`asyncio` subprocesses, so callers need the asyncio backend of anyio.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio

__all__ = [
    "KILL_GRACE",
    "MAX_OUTPUT_CHARS",
    "Completed",
    "HeadTail",
    "cap_output",
    "exit_status",
    "group_alive",
    "release",
    "run_capped",
    "scrub_environment",
    "signal_group",
    "spawn",
    "terminate_group",
    "wait_leader",
]

MAX_OUTPUT_CHARS = 50_000
KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL when a process group is stopped."""

_HEAD_SHARE = 0.4
"""The share of a capped output kept from its head; the tail keeps the rest."""
_DRAIN = 1.0
"""How long to wait for the last output once a process group is gone."""
_POLL = 0.02
_CHUNK = 65_536


# --- output capping -----------------------------------------------------------------------


def _marker(omitted: int, total: int) -> str:
    return f"\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {total} total] ...\n\n"


def cap_output(text: str, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """``text`` unchanged if it fits, else 40% head + 60% tail around a visible marker."""
    if len(text) <= max_chars:
        return text
    head = int(max_chars * _HEAD_SHARE)
    tail = max_chars - head
    return text[:head] + _marker(len(text) - head - tail, len(text)) + text[-tail:]


class HeadTail:
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


async def _pump(stream: asyncio.StreamReader | None, sink: HeadTail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        sink.feed(chunk)
    sink.feed(b"", final=True)


# --- spawning and process groups ----------------------------------------------------------


async def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: int,
    stdout: int | IO[Any],
) -> asyncio.subprocess.Process:
    """Start ``argv`` as the leader of a new session (and so of a new process group).

    stderr always goes where stdout goes. The spawn is shielded: a process that was
    forked is always handed back, never lost to a cancellation between fork and return.
    """
    with anyio.CancelScope(shield=True):
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
    return process


def signal_group(pgid: int, sig: signal.Signals) -> None:
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


def group_alive(pgid: int) -> bool:
    """Whether the group still has a live (non-zombie) member."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _has_live_member(pgid) if os.path.isdir("/proc") else True


async def wait_leader(process: asyncio.subprocess.Process) -> int:
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
        await wait_leader(process)
        while True:
            if not group_alive(process.pid):
                return True
            await anyio.sleep(_POLL)
    return False


async def terminate_group(process: asyncio.subprocess.Process, grace: float) -> bool:
    """Stop every process in the group led by ``process``: SIGTERM, then SIGKILL.

    Returns whether anything was still running. Callers shield this, so it is bounded by
    ``2 * grace``.
    """
    pgid = process.pid
    if process.returncode is not None and not group_alive(pgid):
        return False
    signal_group(pgid, signal.SIGTERM)
    signal_group(pgid, signal.SIGCONT)  # a stopped process must run to see SIGTERM
    if not await _gone_within(process, grace):
        signal_group(pgid, signal.SIGKILL)
        await _gone_within(process, grace)
    return True


def release(process: asyncio.subprocess.Process) -> None:
    """Close the subprocess transport once we are done with the process.

    asyncio closes it by itself only when the process has exited and its pipes reached
    EOF; a pipe still held by something that escaped the group (a daemon calling setsid)
    would keep it open and leak the fds. There is no public API for this.
    """
    transport = getattr(process, "_transport", None)
    if transport is not None and process.returncode is not None:
        transport.close()


def exit_status(returncode: int) -> int:
    """Shell convention: killed by signal N reads as exit status 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


# --- foreground commands ------------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    """What a foreground command left: its capped output and how it ended."""

    output: str
    returncode: int | None
    """``None`` when the time limit struck first."""
    leftovers: bool
    """Whether processes it started were still running when its shell exited."""


async def run_capped(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limit: float,
    max_chars: int,
    grace: float,
) -> Completed:
    """Run ``argv`` without stdin for at most ``limit`` seconds, keeping capped output.

    The command owns its group for exactly its lifetime: on return, on timeout and on
    cancellation alike, whatever is left of the group is stopped before this returns.
    """
    capture = HeadTail(max_chars)
    process = await spawn(
        argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE
    )
    returncode: int | None = None
    leftovers = False
    try:
        with anyio.move_on_after(limit):
            returncode, leftovers = await _finish(process, capture, grace)
    finally:
        with anyio.CancelScope(shield=True):
            await terminate_group(process, grace)
            release(process)
    return Completed(capture.render(), returncode, leftovers)


async def _finish(
    process: asyncio.subprocess.Process, capture: HeadTail, grace: float
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
        returncode = await wait_leader(process)
        leftovers = await terminate_group(process, grace)
        with anyio.move_on_after(_DRAIN):
            await drained.wait()
        tg.cancel_scope.cancel()
    return returncode, leftovers


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
