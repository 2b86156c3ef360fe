"""Project context files and SOUL.md reach the prompt; skills index joins the stable tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_adapters.llm.scripted import ScriptedModel, reply
from hermes_bootstrap import AIAgent
from hermes_bootstrap.context_files import find_context_files, render_context, soul_identity


def repo(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    sub = root / "pkg" / "mod"
    sub.mkdir(parents=True)
    (root / ".git").mkdir()
    return root, sub


def test_hermes_md_wins_over_agents_md(tmp_path: Path) -> None:
    root, sub = repo(tmp_path)
    (root / "AGENTS.md").write_text("agents")
    (root / "HERMES.md").write_text("hermes")
    assert find_context_files(sub) == [root / "HERMES.md"]


def test_agents_md_merges_from_git_root_down(tmp_path: Path) -> None:
    root, sub = repo(tmp_path)
    (root / "AGENTS.md").write_text("---\ntitle: x\n---\nroot rules")
    (sub / "AGENTS.md").write_text("module rules")
    (tmp_path / "AGENTS.md").write_text("outside the repo")  # above the git root: ignored
    text = render_context(sub)
    assert text is not None and text.startswith("# Project Context\n\n")
    assert text.index("root rules") < text.index("module rules")
    assert "outside the repo" not in text and "title: x" not in text


def test_claude_md_then_cursorrules_in_cwd_only(tmp_path: Path) -> None:
    _, sub = repo(tmp_path)
    (sub / ".cursorrules").write_text("cursor")
    assert find_context_files(sub) == [sub / ".cursorrules"]
    (sub / "CLAUDE.md").write_text("claude")
    assert find_context_files(sub) == [sub / "CLAUDE.md"]


def test_long_files_keep_head_and_tail(tmp_path: Path) -> None:
    _, sub = repo(tmp_path)
    (sub / "CLAUDE.md").write_text("H" * 5000 + "T" * 5000)
    text = render_context(sub, max_chars=1000) or ""
    assert "H" * 700 in text and "T" * 200 in text
    assert "[...truncated CLAUDE.md: kept 700+200 of 10000 chars." in text


def test_no_files_no_block(tmp_path: Path) -> None:
    assert render_context(tmp_path) is None


def test_soul_md_replaces_identity(tmp_path: Path) -> None:
    assert soul_identity(tmp_path) is None
    (tmp_path / "SOUL.md").write_text("You are Athena.")
    assert soul_identity(tmp_path) == "You are Athena."


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_prompt_has_soul_skills_and_context(
    isolated_hermes_home: Path, tmp_path: Path
) -> None:
    (isolated_hermes_home / "SOUL.md").write_text("You are Athena.")
    skill = isolated_hermes_home / "skills" / "deploy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: deploy\ndescription: Ship the app.\ncategory: ops\n---\nSteps."
    )
    _, sub = repo(tmp_path)
    (sub / "AGENTS.md").write_text("Use tabs.")
    model = ScriptedModel([reply("ok")])
    async with AIAgent(chat_model=model, enabled_toolsets=["skills"], workspace=sub) as agent:
        await agent.run_conversation("x")
    system = str(model.calls[0].messages[0].content)
    assert system.startswith("You are Athena.")
    assert "deploy: Ship the app." in system and "<available_skills>" in system
    assert "Use tabs." in system
    assert system.index("<available_skills>") < system.index("# Project Context")
