"""ToolContract for the context tools: skills_list, skill_view, skill_manage, session_search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_adapters.tools.session_search import SessionSearchTool
from hermes_adapters.tools.skills import (
    SkillLibrary,
    SkillManageTool,
    SkillsListTool,
    SkillViewTool,
)
from hermes_core.ports.tools import Tool
from hermes_core.testing import ToolContract

SKILL = "---\nname: {name}\ndescription: Demo skill\ncategory: demo\n---\n\nDo the thing.\n"


@pytest.fixture
def library(tmp_path: Path) -> SkillLibrary:
    skill = tmp_path / "skills" / "demo"
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL.format(name="demo"))
    (skill / "references" / "notes.md").write_text("notes")
    return SkillLibrary(tmp_path / "skills", [tmp_path / "external"])


class TestSkillsListContract(ToolContract):
    @pytest.fixture
    def tool(self, library: SkillLibrary) -> Tool:
        return SkillsListTool(library)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"category": "demo"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [{"category": 7}, {"category": ["demo"]}]


class TestSkillViewContract(ToolContract):
    @pytest.fixture
    def tool(self, library: SkillLibrary) -> Tool:
        return SkillViewTool(library)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"name": "demo", "file_path": "references/notes.md"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {},
            {"name": "unknown"},
            {"name": "demo", "file_path": "../../etc/passwd"},
            {"name": "demo", "file_path": "SKILL.md"},
        ]


class TestSkillManageContract(ToolContract):
    @pytest.fixture
    def tool(self, library: SkillLibrary) -> Tool:
        return SkillManageTool(library)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"action": "create", "name": "fresh", "content": SKILL.format(name="fresh")}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {"action": "explode", "name": "demo"},
            {"action": "create", "name": "Bad Name", "content": SKILL.format(name="Bad Name")},
            {"action": "create", "name": "plain", "content": "no frontmatter here"},
            {"action": "write_file", "name": "demo", "file_path": "../x", "file_content": "x"},
            {"action": "delete", "name": "missing"},
        ]


class TestSessionSearchContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return SessionSearchTool()

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"query": "deploy"}  # no store in the contract context: a readable refusal

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {"limit": "many"},
            {"sort": "sideways"},
            {"around_message_id": 3},
            {"role_filter": ["robot"]},
            {"query": "x"},  # no session store attached
        ]
