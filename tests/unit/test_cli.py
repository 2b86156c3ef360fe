"""The ``hermes`` command: every subcommand end to end on the offline ``scripted`` provider.

Most tests call ``main([...])`` in-process with ``capsys``: the exit code is the return
value and stdout/stderr are what a shell user sees. Two run the module in a subprocess,
because "the process exits 2" is the contract scripts depend on. Every test gets its own
HERMES_HOME (tests/conftest.py); the chat tests always confine tools to ``tmp_path`` or
offer none, so nothing is written to the working directory.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermes_bootstrap import _cli_sessions
from hermes_bootstrap.cli import main

SCRIPT_ANSWER = "It printed:"
PLAIN_ANSWER = "I would need the file and terminal tools"


@pytest.fixture(autouse=True)
def _no_host_model_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host running the tests must not pick the provider or supply keys."""
    for name in ("MODEL_PROVIDER", "MODEL_ID", "MODEL_API_KEY", "MODEL_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def chat_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, "chat", "--json", *argv)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


# -- help and usage ------------------------------------------------------------------------

COMMANDS = [
    [],
    ["chat"],
    ["demo"],
    ["batch"],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "search"],
    ["sessions", "export"],
    ["sessions", "delete"],
    ["config"],
    ["config", "check"],
    ["mcp"],
    ["mcp", "list"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "hermes")
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0
    assert out.startswith(f"usage: hermes{''.join(' ' + c for c in command)}")


def test_usage_errors_exit_2_with_a_hermes_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "batch", "data.jsonl")
    assert code == 2
    assert "hermes: the following arguments are required: --run-name" in err
    code, _, err = run(capsys, "chat", "--max-iterations", "0", "hi")
    assert code == 2
    assert "must be at least 1" in err


# -- chat ----------------------------------------------------------------------------------


def test_chat_one_shot_answers_plainly_without_tools(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "chat", "--toolsets", "todo", "hello")
    assert code == 0
    assert out.startswith(PLAIN_ANSWER)
    assert re.search(r"session: \d{8}_\d{6}_[0-9a-f]{6}", err)


def test_chat_one_shot_writes_and_runs_a_script(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(
        capsys, "chat", "--toolsets", "file,terminal", "--workspace", str(tmp_path), "do it"
    )
    assert code == 0, err
    assert SCRIPT_ANSWER in out
    assert "Hello from a script Hermes wrote!" in out
    assert (tmp_path / "hello_hermes.py").is_file()
    assert "  -> write_file\n" in err
    assert re.search(r"  <- terminal ok \d+\.\d ms\n", err)
    assert "  -> " not in out  # activity never pollutes the answer


def test_chat_json_omits_messages_unless_asked(capsys: pytest.CaptureFixture[str]) -> None:
    result = chat_json(capsys, "--toolsets", "todo", "hello")
    assert result["completed"] is True
    assert result["provider"] == "scripted"
    assert "messages" not in result
    with_messages = chat_json(capsys, "--toolsets", "todo", "--messages", "hello")
    assert [m["role"] for m in with_messages["messages"]] == ["user", "assistant"]


def test_host_variables_are_defaults_and_flags_win(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_ID", "from-the-host")
    assert chat_json(capsys, "--toolsets", "todo", "hi")["model"] == "from-the-host"
    assert chat_json(capsys, "--toolsets", "todo", "--model", "flag", "hi")["model"] == "flag"


def test_chat_continues_a_session_by_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    first = chat_json(capsys, "--toolsets", "todo", "first")
    session = first["session_id"]
    second = chat_json(capsys, "--toolsets", "todo", "--session", session[:-2], "second")
    assert second["session_id"] == session
    code, _, err = run(capsys, "chat", "--session", "nope", "hi")
    assert code == 1
    assert "hermes: no single session matches 'nope'" in err


def test_chat_without_a_credential_names_the_variable(
    capsys: pytest.CaptureFixture[str], isolated_hermes_home: Path
) -> None:
    (isolated_hermes_home / "config.yaml").write_text(
        "model:\n  provider: openrouter\n  default: some/model\n"
    )
    code, out, err = run(capsys, "chat", "--toolsets", "todo", "hi")
    assert code == 2 and out == ""
    assert err.startswith("hermes: no API key for provider 'openrouter': set OPENROUTER_API_KEY")


def test_chat_interactive_streams_until_exit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n\n/exit\nnever read\n"))
    code, out, err = run(
        capsys, "chat", "--toolsets", "file,terminal", "--workspace", str(tmp_path)
    )
    assert code == 0, err
    assert out.count(SCRIPT_ANSWER) == 1  # streamed once, not printed again at the end
    assert "I'll write the script first." in out
    assert "  -> terminal\n" in err
    assert "continue with: hermes chat --session" in err


def test_chat_interactive_quits_at_end_of_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo"))
    code, out, _ = run(capsys, "chat", "--toolsets", "todo")
    assert code == 0
    assert out.count(PLAIN_ANSWER) == 2


# -- sessions ------------------------------------------------------------------------------


@pytest.fixture
def two_sessions(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> list[str]:
    """A store filled by ``hermes chat``: one plain turn, one that ran tools."""
    plain = chat_json(capsys, "--toolsets", "todo", "say something plain")
    tools = chat_json(
        capsys, "--toolsets", "file,terminal", "--workspace", str(tmp_path), "write a script"
    )
    return [plain["session_id"], tools["session_id"]]


def test_sessions_list(capsys: pytest.CaptureFixture[str], two_sessions: list[str]) -> None:
    code, out, _ = run(capsys, "sessions", "list", "--json")
    assert code == 0
    listed = json.loads(out)
    assert sorted(s["id"] for s in listed) == sorted(two_sessions)
    assert all("system_prompt" not in s for s in listed)
    assert {s["source"] for s in listed} == {"cli"}
    code, out, _ = run(capsys, "sessions", "list", "--source", "batch", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = run(capsys, "sessions", "list", "--limit", "1")
    assert code == 0
    assert out.splitlines()[0].startswith("ID")
    assert len(out.splitlines()) == 2


def test_sessions_show_by_prefix(
    capsys: pytest.CaptureFixture[str], two_sessions: list[str]
) -> None:
    session = two_sessions[1]
    code, out, _ = run(capsys, "sessions", "show", session[:-2], "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["session"]["id"] == session
    roles = [m["role"] for m in shown["messages"]]
    assert roles[0] == "user" and "tool" in roles
    code, out, _ = run(capsys, "sessions", "show", session)
    assert code == 0
    assert f"session   {session}" in out
    assert "  -> write_file" in out
    assert "[user] write a script" in out


def test_sessions_search(capsys: pytest.CaptureFixture[str], two_sessions: list[str]) -> None:
    code, out, _ = run(capsys, "sessions", "search", "plain", "--json")
    assert code == 0
    hits = json.loads(out)
    assert {h["session_id"] for h in hits} == {two_sessions[0]}
    code, out, _ = run(capsys, "sessions", "search", "Hello", "--role", "tool", "--json")
    assert {h["role"] for h in json.loads(out)} == {"tool"}
    code, out, err = run(capsys, "sessions", "search", "zebra")
    assert code == 0 and out == ""
    assert "no message matches" in err
    code, _, err = run(capsys, "sessions", "search", "x", "--role", "robot")
    assert code == 2


def test_sessions_export(
    capsys: pytest.CaptureFixture[str], two_sessions: list[str], tmp_path: Path
) -> None:
    session = two_sessions[1]
    code, out, _ = run(capsys, "sessions", "export", session)
    assert code == 0
    assert len(out.splitlines()) == 1
    record = json.loads(out)
    assert record["id"] == session
    assert record["messages"][0] == {"role": "user", "content": "write a script"}
    target = tmp_path / "export.json"
    code, out, err = run(
        capsys, "sessions", "export", session, "--format", "json", "-o", str(target)
    )
    assert code == 0 and out == ""
    assert json.loads(target.read_text())["messages"] == record["messages"]
    assert f"to {target}" in err


def test_sessions_delete(capsys: pytest.CaptureFixture[str], two_sessions: list[str]) -> None:
    session = two_sessions[0]
    code, _, err = run(capsys, "sessions", "delete", session)  # stdin is not a terminal
    assert code == 2
    assert "--yes" in err
    code, out, _ = run(capsys, "sessions", "delete", session, "--yes")
    assert code == 0
    assert f"deleted session {session}" in out
    code, _, err = run(capsys, "sessions", "show", session)
    assert code == 1
    assert err.startswith("hermes: no single session matches")
    code, out, _ = run(capsys, "sessions", "list", "--json")
    assert [s["id"] for s in json.loads(out)] == [two_sessions[1]]


def test_sessions_on_a_missing_database(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    code, out, _ = run(capsys, "sessions", "list", "--db", str(missing), "--json")
    assert code == 0 and json.loads(out) == []
    code, _, _ = run(capsys, "sessions", "show", "abc", "--db", str(missing))
    assert code == 1
    assert not missing.exists()  # reading never creates a database


def test_interrupt_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli_sessions, "store_target", interrupted)
    code, _, err = run(capsys, "sessions", "list")
    assert code == 130
    assert "hermes: interrupted" in err


# -- config check --------------------------------------------------------------------------


def test_config_check_on_a_valid_config(
    capsys: pytest.CaptureFixture[str], isolated_hermes_home: Path
) -> None:
    (isolated_hermes_home / "config.yaml").write_text(
        "model:\n  provider: scripted\n  default: demo-model\ntoolsets: [file]\n"
    )
    code, out, _ = run(capsys, "config", "check")
    assert code == 0
    assert "scripted / demo-model" in out
    assert "read_file" in out and "terminal" not in out.split("tools")[1]
    assert out.rstrip().endswith("ok")
    code, out, _ = run(capsys, "config", "check", "--json", "--profile", "batch")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True
    assert report["store"]["backend"] == "none"
    assert report["memory"]["backend"] == "none"


def test_config_check_names_the_broken_location(
    capsys: pytest.CaptureFixture[str], isolated_hermes_home: Path
) -> None:
    config = isolated_hermes_home / "config.yaml"
    config.write_text("model:\n  provider: openai\n  default: [unclosed\n")
    code, out, err = run(capsys, "config", "check")
    assert code == 2 and out == ""
    assert err.startswith(f"hermes: {config} at line ")
    config.write_text("agent:\n  max_turns: 0\n")
    code, out, err = run(capsys, "config", "check", "--json")
    assert code == 2
    assert json.loads(out)["ok"] is False
    assert f"{config}: agent.max_turns = 0 is invalid" in err


def test_config_check_names_the_missing_credential(
    capsys: pytest.CaptureFixture[str], isolated_hermes_home: Path
) -> None:
    (isolated_hermes_home / "config.yaml").write_text(
        "model:\n  provider: openrouter\n  default: some/model\n"
    )
    code, out, _ = run(capsys, "config", "check")
    assert code == 1
    assert "OPENROUTER_API_KEY" in out
    code, out, _ = run(capsys, "config", "check", "--json")
    report = json.loads(out)
    assert report["credential"]["variables"] == ["OPENROUTER_API_KEY"]
    (isolated_hermes_home / ".env").write_text("OPENROUTER_API_KEY=sk-secret-value\n")
    code, out, _ = run(capsys, "config", "check")
    assert code == 0
    assert "sk-secret-value" not in out
    assert "found ($HERMES_HOME/.env OPENROUTER_API_KEY)" in out


def test_config_check_masks_the_store_password(
    capsys: pytest.CaptureFixture[str], isolated_hermes_home: Path
) -> None:
    (isolated_hermes_home / "config.yaml").write_text(
        "database:\n  url: postgresql+asyncpg://hermes:hunter2@db.example/hermes\n"
    )
    _, out, _ = run(capsys, "config", "check", "--profile", "service")
    assert "postgresql+asyncpg://hermes:***@db.example/hermes" in out
    assert "hunter2" not in out


# -- batch and mcp -------------------------------------------------------------------------


def test_batch_on_a_tiny_dataset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "first"}\n{"prompt": "second"}\nnot json\n')
    argv = ["batch", str(dataset), "--run-name", "tiny", "--output-root", str(tmp_path)]
    argv += ["--workspace", str(tmp_path), "--distribution", "terminal_only", "--batch-size", "1"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "run tiny: 2 prompts in the dataset, 2 run now" in out
    assert "bad rows   1" in out
    assert "[2/2]" in err
    statistics = json.loads((tmp_path / "tiny" / "statistics.json").read_text())
    assert statistics["total_prompts"] == 2
    code, out, _ = run(capsys, *argv, "--resume", "--json", "--quiet")
    assert code == 0
    report = json.loads(out)["report"]
    assert report["processed"] == 0
    assert report["resumed_by_content"] + report["skipped_by_checkpoint"] == 2


def test_batch_reports_a_missing_dataset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(
        capsys,
        "batch",
        str(tmp_path / "nope.jsonl"),
        "--run-name",
        "x",
        "--output-root",
        str(tmp_path),
    )
    assert code == 2
    assert "dataset file not found" in err


def test_mcp_list_shows_configured_servers(
    capsys: pytest.CaptureFixture[str], isolated_hermes_home: Path
) -> None:
    (isolated_hermes_home / "config.yaml").write_text(
        "mcp_servers:\n"
        "  files:\n    command: npx\n    args: [-y, server-files]\n"
        "  remote:\n    url: https://user:pw@mcp.example/mcp\n    enabled: false\n"
    )
    code, out, _ = run(capsys, "mcp", "list")
    assert code == 0
    assert "files  stdio  enabled  npx -y server-files" in out
    assert "remote  streamable_http  disabled  https://user:***@mcp.example/mcp" in out
    code, out, _ = run(capsys, "mcp", "list", "--json")
    assert [s["name"] for s in json.loads(out)["servers"]] == ["files", "remote"]


# -- exit codes of the process -------------------------------------------------------------


def _hermes(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "hermes_bootstrap.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_process_exits_2_on_a_broken_config(isolated_hermes_home: Path) -> None:
    (isolated_hermes_home / "config.yaml").write_text("database:\n  backend: [broken\n")
    done = _hermes("config", "check", home=isolated_hermes_home)
    assert done.returncode == 2
    assert done.stderr.startswith(f"hermes: {isolated_hermes_home / 'config.yaml'} at line")


def test_process_exits_1_when_the_operation_fails(isolated_hermes_home: Path) -> None:
    done = _hermes("sessions", "show", "no-such-session", home=isolated_hermes_home)
    assert done.returncode == 1
    assert done.stderr.startswith("hermes: no single session matches")
