"""The terminal and process tools: results, limits, approvals and, above all, no survivors.

Whether a process survived is read from ``/proc``: a killed grandchild may stay a zombie
when the container's init does not reap orphans, and a zombie runs nothing, so only live
(non-zombie) processes count.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from hermes_adapters.tools import terminal
from hermes_adapters.tools.approval import DENIED_MESSAGE, Approvals
from hermes_adapters.tools.terminal import (
    ProcessRegistry,
    ProcessTool,
    TerminalTool,
    cap_output,
    scrub_environment,
    terminal_tools,
)
from hermes_core.ports.interaction import ApprovalDecision
from hermes_core.ports.tools import ToolContext, ToolResult

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

# A shell with a child, a grandchild (inside a subshell) and a second child; it records
# its own pid (the process group id) and the sleepers' pids, then waits.
NESTED = "(sleep 300 & echo $! >> kids; wait) & sleep 300 & echo $! >> kids; echo $$ > pgid; wait"


def ctx(approver: Any = None) -> ToolContext:
    return ToolContext(task_id="t", tool_call_id="call_1", services={"approver": approver})


def data(result: ToolResult) -> dict[str, Any]:
    value = json.loads(result.content)
    assert isinstance(value, dict)
    return value


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def is_running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in {"Z", "X"}


def live_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[2] == str(pgid) and fields[0] not in {"Z", "X"}:
                members.append(int(entry))
    return members


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``predicate`` until it holds, failing after ``within`` seconds."""
    with anyio.fail_after(within):
        while True:
            if predicate():
                return
            await anyio.sleep(0.01)


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    """Like :func:`until`, for a check that has to await (a tool call, say)."""
    with anyio.fail_after(within):
        while True:
            if await check():
                return
            await anyio.sleep(0.01)


def nested_started(root: Path) -> bool:
    """Both pid files are complete (a file exists before its line is written)."""
    try:
        pgid, kids = (root / "pgid").read_text(), (root / "kids").read_text()
    except FileNotFoundError:
        return False
    return pgid.endswith("\n") and kids.endswith("\n") and len(kids.split()) == 2


def recorded_pids(root: Path) -> tuple[int, list[int]]:
    pgid = int((root / "pgid").read_text())
    return pgid, [int(p) for p in (root / "kids").read_text().split()]


class FakeApprover:
    def __init__(self, decision: ApprovalDecision) -> None:
        self.decision: ApprovalDecision = decision
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, action: str, reason: str) -> ApprovalDecision:
        self.calls.append((action, reason))
        return self.decision


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return Path(os.path.realpath(tmp_path))


@pytest.fixture
async def registry() -> AsyncIterator[ProcessRegistry]:
    async with ProcessRegistry(kill_grace=1.0) as reg:
        yield reg


@pytest.fixture
def term(registry: ProcessRegistry, workspace: Path) -> TerminalTool:
    return TerminalTool(registry, workspace_root=workspace, kill_grace=1.0)


@pytest.fixture
def proc(registry: ProcessRegistry) -> ProcessTool:
    return ProcessTool(registry)


# --- foreground -----------------------------------------------------------------------------


async def test_output_and_exit_code(term: TerminalTool) -> None:
    result = await term({"command": "echo out; echo err >&2; exit 3"}, ctx())
    assert not result.is_error
    assert data(result) == {"output": "out\nerr\n", "exit_code": 3, "error": None}


async def test_death_by_signal_reads_as_128_plus_n(term: TerminalTool) -> None:
    assert data(await term({"command": "kill -TERM $$"}, ctx()))["exit_code"] == 143


async def test_stdin_is_closed(term: TerminalTool) -> None:
    with anyio.fail_after(5):
        result = await term({"command": "cat; echo done"}, ctx())
    assert data(result) == {"output": "done\n", "exit_code": 0, "error": None}


async def test_timeout_gives_124_and_kills_the_group(term: TerminalTool, workspace: Path) -> None:
    with anyio.fail_after(10):
        result = await term({"command": NESTED, "timeout": 0.5}, ctx())
    body = data(result)
    assert body["exit_code"] == 124
    assert "timed out" in body["error"]
    pgid, kids = recorded_pids(workspace)
    assert live_members(pgid) == []
    assert not any(is_running(pid) for pid in kids)


async def test_leftover_children_are_stopped_when_the_shell_returns(
    term: TerminalTool, workspace: Path
) -> None:
    with anyio.fail_after(5):
        result = await term({"command": "sleep 300 & echo $! > kid"}, ctx())
    body = data(result)
    assert body["exit_code"] == 0
    assert "background=true" in body["output"]
    assert not is_running(int((workspace / "kid").read_text()))


async def test_output_is_capped_head_and_tail(term: TerminalTool) -> None:
    command = "head -c 30000 /dev/zero | tr '\\0' H; head -c 30000 /dev/zero | tr '\\0' T"
    output = data(await term({"command": command}, ctx()))["output"]
    marker = "\n\n... [OUTPUT TRUNCATED - 10000 chars omitted out of 60000 total] ...\n\n"
    assert output == "H" * 20_000 + marker + "T" * 30_000


async def test_cap_output_leaves_short_text_alone() -> None:
    assert cap_output("abc", 10) == "abc"
    assert cap_output("a" * 10 + "b" * 10, 10) == (
        "aaaa\n\n... [OUTPUT TRUNCATED - 10 chars omitted out of 20 total] ...\n\nbbbbbb"
    )


async def test_environment_is_scrubbed(term: TerminalTool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-FAKEFAKEFAKE1234567890")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-FAKE-0987654321")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "FAKEawsSECRET")
    monkeypatch.setenv("DB_CONNECTION", "postgres://admin:hunter2@db/prod")
    monkeypatch.setenv("HERMES_HARMLESS", "visible")
    output = data(await term({"command": "env"}, ctx()))["output"]
    for secret in ("sk-proj-FAKE", "tok-FAKE", "FAKEawsSECRET", "hunter2", "OPENAI_API_KEY"):
        assert secret not in output
    assert "HERMES_HARMLESS=visible" in output
    assert "PATH=" in output


async def test_scrub_environment_rules() -> None:
    env = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "TERM": "xterm",
        "GITHUB_TOKEN": "x",
        "ANTHROPIC_BASE_URL": "x",
        "DB_PASSWORD": "x",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "STRIPE_KEY": "x",
        "tokens": "1500",
    }
    assert scrub_environment(env) == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "TERM": "xterm",
    }
    assert "SSH_AUTH_SOCK" in scrub_environment(env, keep=["SSH_AUTH_SOCK"])


async def test_cwd_is_pinned_to_the_workspace(term: TerminalTool, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "escape").symlink_to("/tmp")
    assert data(await term({"command": "pwd"}, ctx()))["output"] == f"{workspace}\n"
    result = await term({"command": "pwd", "workdir": "sub"}, ctx())
    assert data(result)["output"] == f"{workspace / 'sub'}\n"
    result = await term({"command": "pwd", "workdir": str(workspace / "sub")}, ctx())
    assert data(result)["output"] == f"{workspace / 'sub'}\n"
    for outside in ("..", "/", "escape", f"{workspace}_evil", "missing"):
        result = await term({"command": "pwd", "workdir": outside}, ctx())
        assert result.is_error, outside


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"command": ""},
        {"command": 42},
        {"command": "ls", "timeout": 601},
        {"command": "ls", "timeout": "soon"},
        {"command": "ls", "background": "yes"},
        {"command": "ls\x00"},
    ],
)
async def test_bad_arguments_are_error_results(term: TerminalTool, args: dict[str, Any]) -> None:
    assert (await term(args, ctx())).is_error


# --- cancellation: the key guarantee ---------------------------------------------------------


async def test_cancelling_the_caller_kills_the_whole_group(
    term: TerminalTool, workspace: Path
) -> None:
    returned = False

    async def call() -> None:
        nonlocal returned
        await term({"command": NESTED}, ctx())
        returned = True

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await until(lambda: nested_started(workspace))
            pgid, kids = recorded_pids(workspace)
            assert len(live_members(pgid)) >= 4  # shell, subshell, two sleepers
            tg.cancel_scope.cancel()
    assert not returned, "the cancelled call returned instead of propagating cancellation"
    assert live_members(pgid) == []
    assert not any(is_running(pid) for pid in kids)


async def test_closing_the_registry_kills_background_groups(workspace: Path) -> None:
    with anyio.fail_after(10):
        async with ProcessRegistry(kill_grace=1.0) as registry:
            term = TerminalTool(registry, workspace_root=workspace)
            started = data(await term({"command": NESTED, "background": True}, ctx()))
            assert started["status"] == "running"
            assert started["session_id"].startswith("proc_")
            await until(lambda: nested_started(workspace))
            pgid, kids = recorded_pids(workspace)
            assert pgid == started["pid"]
            assert is_running(kids[0]) and is_running(kids[1])
        assert registry.processes()[0].status == "killed"
    assert live_members(pgid) == []
    assert not any(is_running(pid) for pid in kids)


# --- background processes and the process tool ----------------------------------------------


async def start(term: TerminalTool, command: str) -> str:
    result = await term({"command": command, "background": True}, ctx())
    assert not result.is_error, result.content
    session_id = data(result)["session_id"]
    assert isinstance(session_id, str)
    return session_id


async def test_wait_poll_and_log(term: TerminalTool, proc: ProcessTool) -> None:
    sid = await start(term, "for i in {1..50}; do echo line$i; done; exit 7")
    with anyio.fail_after(5):
        waited = data(await proc({"action": "wait", "session_id": sid, "timeout": 5}, ctx()))
    assert waited["status"] == "exited"
    assert waited["exit_code"] == 7
    assert waited["timed_out"] is False
    assert waited["output"].startswith("line1\n")
    polled = data(await proc({"action": "poll", "session_id": sid[:9]}, ctx()))
    assert polled["status"] == "exited"
    assert polled["output_tail"].endswith("line50\n")
    log = data(await proc({"action": "log", "session_id": sid, "limit": 3}, ctx()))
    assert log["output"] == "line48\nline49\nline50"
    assert log["total_lines"] == 50
    log = data(await proc({"action": "log", "session_id": sid, "offset": 1, "limit": 2}, ctx()))
    assert log["output"] == "line2\nline3"
    listed = data(await proc({"action": "list"}, ctx()))["processes"]
    assert [p["session_id"] for p in listed] == [sid]


async def test_wait_times_out_while_running(term: TerminalTool, proc: ProcessTool) -> None:
    sid = await start(term, "sleep 300")
    waited = data(await proc({"action": "wait", "session_id": sid, "timeout": 0.1}, ctx()))
    assert waited["timed_out"] is True
    assert waited["status"] == "running"


async def test_kill_stops_the_group(term: TerminalTool, proc: ProcessTool, workspace: Path) -> None:
    sid = await start(term, NESTED)
    await until(lambda: nested_started(workspace))
    pgid, kids = recorded_pids(workspace)
    with anyio.fail_after(5):
        killed = data(await proc({"action": "kill", "session_id": sid}, ctx()))
    assert killed["status"] == "killed"
    assert killed["was_running"] is True
    assert killed["exit_code"] == 143
    assert live_members(pgid) == []
    assert not any(is_running(pid) for pid in kids)


async def test_a_background_group_outlives_its_shell_until_killed(
    term: TerminalTool, proc: ProcessTool, registry: ProcessRegistry, workspace: Path
) -> None:
    sid = await start(term, "sleep 300 > /dev/null 2>&1 & echo $! > kid")
    entry = registry.find(sid)
    await until(lambda: entry.process.returncode is not None)
    kid = int((workspace / "kid").read_text())
    assert is_running(kid)
    polled = data(await proc({"action": "poll", "session_id": sid}, ctx()))
    assert polled["status"] == "running"
    killed = data(await proc({"action": "kill", "session_id": sid}, ctx()))
    assert killed["status"] == "killed"
    assert not is_running(kid)


async def test_write_submit_and_close(term: TerminalTool, proc: ProcessTool) -> None:
    sid = await start(term, "cat")
    written = data(await proc({"action": "write", "session_id": sid, "data": "hel"}, ctx()))
    assert written["bytes_written"] == 3
    await proc({"action": "submit", "session_id": sid, "data": "lo"}, ctx())

    async def echoed() -> bool:
        polled = data(await proc({"action": "poll", "session_id": sid}, ctx()))
        return bool(polled["output_tail"] == "hello\n")

    await eventually(echoed)
    await proc({"action": "close", "session_id": sid}, ctx())
    waited = data(await proc({"action": "wait", "session_id": sid, "timeout": 5}, ctx()))
    assert (waited["status"], waited["exit_code"], waited["output"]) == ("exited", 0, "hello\n")
    late = await proc({"action": "write", "session_id": sid, "data": "x"}, ctx())
    assert late.is_error


async def test_input_to_a_shell_goes_through_the_guard(
    term: TerminalTool, proc: ProcessTool
) -> None:
    sid = await start(term, "bash")
    blocked = await proc({"action": "submit", "session_id": sid, "data": "rm -rf /"}, ctx())
    assert blocked.is_error
    assert "never allowed" in data(blocked)["error"]
    headless = await proc({"action": "submit", "session_id": sid, "data": "rm -r x"}, ctx())
    assert "no approval callback" in data(headless)["error"]
    ok = await proc({"action": "submit", "session_id": sid, "data": "echo hi; exit 4"}, ctx())
    assert not ok.is_error
    waited = data(await proc({"action": "wait", "session_id": sid, "timeout": 5}, ctx()))
    assert (waited["exit_code"], waited["output"]) == (4, "hi\n")


async def test_session_ids_prefixes_and_errors(term: TerminalTool, proc: ProcessTool) -> None:
    first = await start(term, "sleep 300")
    await start(term, "sleep 300")
    by_prefix = data(await proc({"action": "poll", "session_id": first[:12]}, ctx()))
    assert by_prefix["session_id"] == first
    bare = data(await proc({"action": "poll", "session_id": first.removeprefix("proc_")}, ctx()))
    assert bare["session_id"] == first
    ambiguous = await proc({"action": "poll", "session_id": "proc_"}, ctx())
    assert ambiguous.is_error and "ambiguous" in data(ambiguous)["error"]
    unknown = await proc({"action": "kill", "session_id": "proc_nope"}, ctx())
    assert unknown.is_error


async def test_a_closed_registry_refuses_background_commands(workspace: Path) -> None:
    registry = ProcessRegistry()
    await registry.aclose()
    assert not registry.is_open
    term = TerminalTool(registry, workspace_root=workspace)
    result = await term({"command": "sleep 1", "background": True}, ctx())
    assert result.is_error
    assert "registry is closed" in data(result)["error"]
    with pytest.raises(RuntimeError, match="closed"):
        async with registry:
            pass


async def test_registry_needs_no_entering_and_closes_from_another_task(workspace: Path) -> None:
    """The facade's case: built and used in one task, closed later from another one."""
    registry = ProcessRegistry(kill_grace=1.0)
    term = TerminalTool(registry, workspace_root=workspace)
    proc = ProcessTool(registry)
    tasks: dict[str, asyncio.Task[Any] | None] = {}
    started: dict[str, Any] = {}

    async def open_and_start() -> None:
        tasks["opener"] = asyncio.current_task()
        command = "sh -c 'sleep 300 & sleep 300 & wait'"
        args = {"command": command, "background": True}
        started.update(data(await term(args, ctx(FakeApprover("once")))))  # sh -c asks

    async def close() -> None:
        tasks["closer"] = asyncio.current_task()
        await registry.aclose()

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:  # the opening task ends in here
                tg.start_soon(open_and_start)
            assert started["status"] == "running"
            pgid, sid = started["pid"], started["session_id"]
            await until(lambda: len(live_members(pgid)) >= 3)  # sh and both sleepers
            polled = data(await proc({"action": "poll", "session_id": sid}, ctx()))
            assert polled["status"] == "running"
            log_path = registry.find(sid).log_path
            assert log_path.exists()
            async with anyio.create_task_group() as tg:
                tg.start_soon(close)
        opener, closer = tasks["opener"], tasks["closer"]
        assert opener is not None and closer is not None
        assert opener.done() and opener is not closer
        assert live_members(pgid) == []
        assert registry.processes()[0].status == "killed"
        assert not log_path.exists()
        assert not registry.is_open
    finally:
        await registry.aclose()  # idempotent; also cleans up if an assertion failed


async def test_background_output_comes_from_a_file_and_keeps_its_bounds(
    workspace: Path,
) -> None:
    async with ProcessRegistry(buffer_chars=100, kill_grace=1.0) as registry:
        term = TerminalTool(registry, workspace_root=workspace)
        proc = ProcessTool(registry)
        sid = await start(term, "echo out; echo err >&2; head -c 1000 /dev/zero | tr '\\0' x")
        waited = data(await proc({"action": "wait", "session_id": sid, "timeout": 5}, ctx()))
        assert (waited["status"], waited["exit_code"]) == ("exited", 0)
        assert waited["output"] == "x" * 100
        assert waited["output_chars"] == len("out\nerr\n") + 1000
        log = data(await proc({"action": "log", "session_id": sid}, ctx()))
        assert log["chars_dropped"] == len("out\nerr\n") + 900
        entry = registry.find(sid)
        assert entry.log_path.read_bytes() == b"out\nerr\n" + b"x" * 1000
        assert entry.log_path.stat().st_mode & 0o077 == 0  # private to this user

        sid = await start(term, "echo one; echo two >&2")
        waited = data(await proc({"action": "wait", "session_id": sid, "timeout": 5}, ctx()))
        assert waited["output"] == "one\ntwo\n"


async def test_forgotten_processes_take_their_files_with_them(workspace: Path) -> None:
    async with ProcessRegistry(max_finished=1, kill_grace=1.0) as registry:
        term = TerminalTool(registry, workspace_root=workspace)
        proc = ProcessTool(registry)
        first = await start(term, "true")
        path = registry.find(first).log_path
        await proc({"action": "wait", "session_id": first, "timeout": 5}, ctx())
        second = await start(term, "true")
        await proc({"action": "wait", "session_id": second, "timeout": 5}, ctx())
        await start(term, "true")
        assert first not in [p.session_id for p in registry.processes()]
        assert not path.exists()


async def test_running_processes_are_bounded(workspace: Path) -> None:
    async with ProcessRegistry(max_running=1, kill_grace=1.0) as registry:
        term = TerminalTool(registry, workspace_root=workspace)
        await start(term, "sleep 300")
        second = await term({"command": "sleep 300", "background": True}, ctx())
        assert second.is_error and "already running" in data(second)["error"]


# --- approvals ------------------------------------------------------------------------------


async def test_deny_and_approve_once(term: TerminalTool, workspace: Path) -> None:
    (workspace / "build").mkdir()
    denied = await term({"command": "rm -rf build"}, ctx(FakeApprover("deny")))
    assert data(denied) == {"error": DENIED_MESSAGE}
    assert (workspace / "build").exists()
    approver = FakeApprover("once")
    ran = await term({"command": "rm -rf build"}, ctx(approver))
    assert data(ran)["exit_code"] == 0
    assert not (workspace / "build").exists()
    assert approver.calls == [("rm -rf build", "recursive delete")]


async def test_headless_dangerous_command_is_refused(term: TerminalTool) -> None:
    result = await term({"command": "git push --force"}, ctx())
    assert result.is_error
    assert data(result)["error"].startswith("BLOCKED: approval required (git force push)")


async def test_factory_shares_one_approvals(workspace: Path) -> None:
    approvals = Approvals()
    tools, registry = terminal_tools(workspace, approvals)
    assert [t.spec.name for t in tools] == ["terminal", "process"]
    assert all(t.spec.toolset == "terminal" and not t.spec.parallel_safe for t in tools)
    async with registry:
        term = tools[0]
        await term({"command": "rm -rf nothing"}, ctx(FakeApprover("session")))
        assert approvals.approved == {"recursive delete"}
        assert not (await term({"command": "rm -rf again"}, ctx())).is_error


async def test_dunder_all_is_sorted_and_exists() -> None:
    assert terminal.__all__ == sorted(terminal.__all__)
    assert all(hasattr(terminal, name) for name in terminal.__all__)
