"""Each ``file`` toolset tool passes :class:`ToolContract` on a tmp_path workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_adapters.tools.files import PatchTool, ReadFileTool, SearchFilesTool, WriteFileTool
from hermes_adapters.tools.workspace import Workspace
from hermes_core.ports.tools import Tool
from hermes_core.testing.tools import ToolContract


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    return Workspace(tmp_path)


class TestReadFileContract(ToolContract):
    @pytest.fixture
    def tool(self, workspace: Workspace) -> Tool:
        return ReadFileTool(workspace)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"path": "notes.txt", "offset": 1, "limit": 10}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [{}, {"path": 1}, {"path": "notes.txt", "offset": 0}, {"path": "../x"}]


class TestWriteFileContract(ToolContract):
    @pytest.fixture
    def tool(self, workspace: Workspace) -> Tool:
        return WriteFileTool(workspace)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"path": "out/new.txt", "content": "hello\n"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [{}, {"path": "a.txt"}, {"path": "a.txt", "content": None}, {"path": "/etc/x"}]


class TestPatchContract(ToolContract):
    @pytest.fixture
    def tool(self, workspace: Workspace) -> Tool:
        return PatchTool(workspace)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"mode": "replace", "path": "notes.txt", "old_string": "beta", "new_string": "b"}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {"mode": "bogus"},
            {"path": "notes.txt", "old_string": "zzz", "new_string": "y"},
            {"mode": "patch", "patch": "not a patch"},
        ]


class TestSearchFilesContract(ToolContract):
    @pytest.fixture
    def tool(self, workspace: Workspace) -> Tool:
        return SearchFilesTool(workspace)

    @pytest.fixture
    def valid_args(self) -> dict[str, Any]:
        return {"pattern": "al.ha", "context": 1}

    @pytest.fixture
    def invalid_args(self) -> list[dict[str, Any]]:
        return [
            {},
            {"pattern": "("},
            {"pattern": "x", "target": "nope"},
            {"pattern": "x", "path": ".."},
        ]


class TestPurePythonSearchFilesContract(TestSearchFilesContract):
    @pytest.fixture
    def tool(self, workspace: Workspace) -> Tool:
        return SearchFilesTool(workspace, use_ripgrep=False)
