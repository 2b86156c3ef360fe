"""Skills: discovery across local and external dirs, confined viewing, managing, the index."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hermes_adapters.tools.skills import (
    Skill,
    SkillError,
    SkillLibrary,
    SkillManageTool,
    SkillsListTool,
    SkillViewTool,
    parse_frontmatter,
    render_skills_index,
    skill_tools,
)
from hermes_core.ports.tools import ToolContext

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

CTX = ToolContext(task_id="t")


def skill_md(name: str, description: str, category: str | None = None, body: str = "") -> str:
    lines = ["---", f"name: {name}", f"description: {description}"]
    if category is not None:
        lines.append(f"category: {category}")
    return "\n".join([*lines, "---", "", body or f"# {name}\n\nDo the {name} steps.\n"])


def make_skill(root: Path, rel: str, text: str, files: dict[str, str] | None = None) -> Path:
    """A skill directory at ``root/rel`` holding SKILL.md and supporting ``files``."""
    directory = root / rel
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "SKILL.md").write_text(text)
    for key, content in (files or {}).items():
        target = directory / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return directory


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, shared = tmp_path / "home" / "skills", tmp_path / "shared"
    make_skill(
        home,
        "deploy",
        skill_md("deploy", "Ship the service", "devops"),
        {"references/runbook.md": "run the book", "scripts/go.sh": "echo go"},
    )
    make_skill(home, "writing/release-notes", skill_md("release-notes", "Draft release notes"))
    make_skill(shared, "deploy", skill_md("deploy", "The team's deploy", "devops"))
    make_skill(shared, "triage", skill_md("triage", "Sort incoming bugs", "devops"))
    make_skill(shared, "broken", "---\nname: [unclosed\n---\nbody")
    make_skill(shared, ".hidden/secret", skill_md("secret", "never listed"))
    return home, shared


@pytest.fixture
def library(dirs: tuple[Path, Path], tmp_path: Path) -> SkillLibrary:
    home, shared = dirs
    return SkillLibrary(home, [shared, tmp_path / "missing"])


def loads(content: str) -> Any:
    return json.loads(content)


# -- discovery and listing -------------------------------------------------------------


async def test_discovery_local_wins_and_bad_or_hidden_skills_are_skipped(
    library: SkillLibrary, dirs: tuple[Path, Path]
) -> None:
    skills = {s.name: s for s in await library.discover()}
    assert set(skills) == {"deploy", "release-notes", "triage"}
    assert skills["deploy"].local and skills["deploy"].description == "Ship the service"
    assert not skills["triage"].local
    # category from frontmatter, else the parent folder, else "general"
    assert skills["release-notes"].category == "writing"
    assert skills["triage"].category == "devops"


async def test_list_filters_by_category(library: SkillLibrary) -> None:
    everything = await library.list()
    assert everything["count"] == 3 and everything["categories"] == ["devops", "writing"]
    devops = await library.list("devops")
    assert [s["name"] for s in devops["skills"]] == ["deploy", "triage"]
    none = await library.list("cooking")
    assert none["count"] == 0 and "no skills" in none["message"]


async def test_frontmatter_parsing() -> None:
    meta, body = parse_frontmatter("---\nname: a\ndescription: b\n---\nhello\n")
    assert meta == {"name": "a", "description": "b"} and body == "hello\n"
    assert parse_frontmatter("no frontmatter") == ({}, "no frontmatter")
    with pytest.raises(SkillError):
        parse_frontmatter("---\n- a list\n---\nbody")


# -- viewing ---------------------------------------------------------------------------


async def test_view_returns_skill_md_and_linked_files(library: SkillLibrary) -> None:
    view = await library.view("deploy")
    assert view["content"].startswith("---\nname: deploy")
    assert view["source"] == "local"
    assert view["linked_files"] == {
        "references": ["references/runbook.md"],
        "scripts": ["scripts/go.sh"],
    }
    one = await library.view("deploy", "references/runbook.md")
    assert one["content"] == "run the book"


async def test_view_refuses_paths_that_leave_the_skill(
    library: SkillLibrary, dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    home, _ = dirs
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.symlink(outside, home / "deploy" / "references" / "leak.md")
    os.symlink(tmp_path, home / "deploy" / "assets")
    for bad in (
        "../deploy/SKILL.md",
        "references/../../writing/release-notes/SKILL.md",
        "/etc/passwd",
        "SKILL.md",
        "notes/x.md",
        "references/leak.md",
        "assets/outside.txt",
        "references",
    ):
        with pytest.raises(SkillError):
            await library.view("deploy", bad)
    with pytest.raises(SkillError, match="unknown skill"):
        await library.view("nope")


# -- managing --------------------------------------------------------------------------


async def test_create_edit_patch_and_delete(library: SkillLibrary, dirs: tuple[Path, Path]) -> None:
    home, _ = dirs
    text = skill_md("backup", "Back up the database", body="Run pg_dump.\nThen pg_dump again.\n")
    created = await library.manage("create", "backup", content=text, category="ops")
    assert Path(created["path"]) == home / "ops" / "backup" / "SKILL.md"
    assert (await library.view("backup"))["category"] == "ops"
    with pytest.raises(SkillError, match="already exists"):
        await library.manage("create", "backup", content=text)

    with pytest.raises(SkillError, match="occurs 2 times"):
        await library.manage("patch", "backup", old_string="pg_dump", new_string="pg_dumpall")
    patched = await library.manage(
        "patch", "backup", old_string="pg_dump", new_string="pg_dumpall", replace_all=True
    )
    assert patched["replacements"] == 2
    assert "pg_dumpall again" in (await library.view("backup"))["content"]
    with pytest.raises(SkillError, match="not found"):
        await library.manage("patch", "backup", old_string="nothing like it", new_string="x")
    with pytest.raises(SkillError, match="frontmatter"):
        await library.manage("patch", "backup", old_string="name: backup", new_string="name: x")

    await library.manage("edit", "backup", content=skill_md("backup", "Now different"))
    assert (await library.view("backup"))["description"] == "Now different"

    deleted = await library.manage("delete", "backup", absorbed_into="deploy")
    assert "deploy" in deleted["message"]
    assert not (home / "ops").exists()  # the emptied category folder goes too
    assert "backup" not in {s.name for s in await library.discover()}


async def test_create_validates_name_and_frontmatter(library: SkillLibrary) -> None:
    cases: list[tuple[str, str | None, str]] = [
        ("Bad Name", skill_md("Bad Name", "x"), "invalid skill name"),
        ("../escape", skill_md("../escape", "x"), "invalid skill name"),
        ("ok", "just text, no frontmatter", "frontmatter"),
        ("ok", skill_md("other", "x"), "must be 'ok'"),
        ("ok", "---\nname: ok\n---\nbody\n", "description"),
        ("ok", None, "content"),
    ]
    for name, content, message in cases:
        with pytest.raises(SkillError, match=message):
            await library.manage("create", name, content=content)
    with pytest.raises(SkillError, match="action"):
        await library.manage("rename", "ok")


async def test_supporting_files_are_written_and_removed_inside_the_skill(
    library: SkillLibrary, dirs: tuple[Path, Path]
) -> None:
    home, _ = dirs
    await library.manage("write_file", "deploy", file_path="templates/pr.md", file_content="## PR")
    assert (home / "deploy" / "templates" / "pr.md").read_text() == "## PR"
    await library.manage(
        "patch", "deploy", file_path="templates/pr.md", old_string="PR", new_string="Pull"
    )
    assert (await library.view("deploy", "templates/pr.md"))["content"] == "## Pull"
    with pytest.raises(SkillError):
        await library.manage("write_file", "deploy", file_path="../x.md", file_content="x")
    with pytest.raises(SkillError):
        await library.manage("write_file", "deploy", file_path="SKILL.md", file_content="x")
    await library.manage("remove_file", "deploy", file_path="templates/pr.md")
    assert not (home / "deploy" / "templates" / "pr.md").exists()
    with pytest.raises(SkillError, match="no file"):
        await library.manage("remove_file", "deploy", file_path="templates/pr.md")


async def test_external_skills_are_read_only_but_can_be_overridden(
    library: SkillLibrary, dirs: tuple[Path, Path]
) -> None:
    _, shared = dirs
    with pytest.raises(SkillError, match="read-only"):
        await library.manage("delete", "triage")
    assert (shared / "triage" / "SKILL.md").exists()
    created = await library.manage(
        "create", "triage", content=skill_md("triage", "My own triage", "devops")
    )
    assert "overrides" in created["note"]
    skill = next(s for s in await library.discover() if s.name == "triage")
    assert skill.local and skill.description == "My own triage"


# -- the prompt index ------------------------------------------------------------------


async def test_index_text_format_and_stability(
    library: SkillLibrary, dirs: tuple[Path, Path]
) -> None:
    home, _ = dirs
    (home / "writing" / "DESCRIPTION.md").write_text("---\ndescription: Words\n---\n")
    assert library.index_text() == ""  # nothing discovered yet
    await library.discover()
    index = library.index_text()
    assert index.startswith("## Skills (mandatory)\n")
    block = index[index.index("<available_skills>") : index.index("</available_skills>")]
    assert block.splitlines()[1:] == [
        "  devops:",
        "    - deploy: Ship the service",
        "    - triage: Sort incoming bugs",
        "  writing: Words",
        "    - release-notes: Draft release notes",
    ]
    # same skills listed in another order render the same bytes
    skills = await library.discover()
    assert render_skills_index(skills[::-1], {"writing": "Words"}) == index
    assert render_skills_index([]) == ""


async def test_index_flattens_and_caps_descriptions(tmp_path: Path) -> None:
    skill = Skill("x", "line one\n  line two " + "y" * 500, "general", tmp_path, True)
    line = render_skills_index([skill]).splitlines()[4]
    assert line.startswith("    - x: line one line two y") and line.endswith("...")
    assert len(line) < 260


# -- the tools -------------------------------------------------------------------------


async def test_tools_wrap_the_library_and_report_errors(library: SkillLibrary) -> None:
    tools = skill_tools(library)
    assert [t.spec.name for t in tools] == ["skills_list", "skill_view", "skill_manage"]
    assert [t.spec.parallel_safe for t in tools] == [True, True, False]
    assert {t.spec.toolset for t in tools} == {"skills"}
    listed = loads((await SkillsListTool(library)({"category": "devops"}, CTX)).content)
    assert listed["count"] == 2
    view = SkillViewTool(library)
    assert (
        "run the book"
        in (await view({"name": "deploy", "file_path": "references/runbook.md"}, CTX)).content
    )
    for bad in ({}, {"name": 3}, {"name": "deploy", "file_path": "../../etc/passwd"}):
        result = await view(bad, CTX)
        assert result.is_error and "error" in loads(result.content)
    manage = SkillManageTool(library)
    made = await manage(
        {"action": "create", "name": "notes", "content": skill_md("notes", "Take notes")}, CTX
    )
    assert not made.is_error and loads(made.content)["success"]
    refused = await manage({"action": "delete", "name": "triage"}, CTX)
    assert refused.is_error and "read-only" in refused.content
    assert (await manage({"action": "create", "name": "x", "replace_all": "yes"}, CTX)).is_error
