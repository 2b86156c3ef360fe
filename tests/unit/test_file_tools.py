"""The ``file`` toolset: path confinement, read_file, write_file, patch and search_files.

Each confinement case of WIRE.md §5 is its own test so a regression names the hole.
The ripgrep/pure-Python equivalence test always runs the pure-Python search against
expected results and, when ``rg`` is on PATH, also checks ripgrep gives the same answers
(it is never skipped: tests may not install ripgrep).
"""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from hermes_adapters.tools.files import (
    PatchTool,
    ReadFileTool,
    SearchFilesTool,
    WriteFileTool,
    file_tools,
)
from hermes_adapters.tools.workspace import PathOutsideWorkspace, Workspace
from hermes_core.errors import ToolError
from hermes_core.ports.tools import Tool, ToolContext, ToolResult

pytestmark = pytest.mark.anyio

CTX = ToolContext(task_id="t", tool_call_id="c")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret\n")
    return out


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def call(tool: Tool, **args: Any) -> tuple[ToolResult, dict[str, Any]]:
    result = await tool(args, CTX)
    return result, json.loads(result.content)


async def ok(tool: Tool, **args: Any) -> dict[str, Any]:
    result, data = await call(tool, **args)
    assert not result.is_error, data
    return data


async def err(tool: Tool, **args: Any) -> dict[str, Any]:
    result, data = await call(tool, **args)
    assert result.is_error, data
    return data


# -- Workspace confinement -------------------------------------------------------------


def test_relative_paths_resolve_under_the_root(ws: Path) -> None:
    assert Workspace(ws).resolve("a/b.txt", for_write=True) == ws.resolve() / "a" / "b.txt"


def test_dotdot_escape_is_refused(ws: Path) -> None:
    with pytest.raises(PathOutsideWorkspace, match=r"'\.\.' escapes"):
        Workspace(ws).resolve("sub/../../outside/secret.txt", for_write=False)


def test_dotdot_that_stays_inside_is_allowed(ws: Path) -> None:
    assert Workspace(ws).resolve("a/../b.txt", for_write=False) == ws.resolve() / "b.txt"


def test_sibling_prefix_directory_is_refused(tmp_path: Path, ws: Path) -> None:
    evil = tmp_path / "ws_evil"
    evil.mkdir()
    (evil / "x.txt").write_text("x")
    with pytest.raises(PathOutsideWorkspace):
        Workspace(ws).resolve(str(evil / "x.txt"), for_write=False)
    with pytest.raises(PathOutsideWorkspace):
        Workspace(ws).resolve("../ws_evil/x.txt", for_write=False)


def test_absolute_path_outside_is_refused(ws: Path, outside: Path) -> None:
    with pytest.raises(PathOutsideWorkspace, match="outside the workspace"):
        Workspace(ws).resolve(str(outside / "secret.txt"), for_write=False)


def test_absolute_path_inside_is_allowed(ws: Path) -> None:
    assert Workspace(ws).resolve(str(ws / "f.txt"), for_write=True) == ws.resolve() / "f.txt"


def test_nul_byte_is_refused(ws: Path) -> None:
    with pytest.raises(PathOutsideWorkspace, match="NUL"):
        Workspace(ws).resolve("a.txt\x00.png", for_write=False)
    with pytest.raises(PathOutsideWorkspace, match="NUL"):
        Workspace(None).resolve("a\x00", for_write=False)


def test_symlink_pointing_out_is_refused_for_read(ws: Path, outside: Path) -> None:
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathOutsideWorkspace, match="symlink"):
        Workspace(ws).resolve("link.txt", for_write=False)


async def test_read_file_through_an_outward_symlink_is_an_error(ws: Path, outside: Path) -> None:
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    data = await err(ReadFileTool(Workspace(ws)), path="link.txt")
    assert "symlink" in data["error"] and "top secret" not in json.dumps(data)


async def test_write_file_through_an_outward_symlink_is_refused(ws: Path, outside: Path) -> None:
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    await err(WriteFileTool(Workspace(ws)), path="link.txt", content="pwned")
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert (ws / "link.txt").is_symlink()


def test_symlinked_intermediate_directory_pointing_out_is_refused(ws: Path, outside: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathOutsideWorkspace, match="symlink"):
        Workspace(ws).resolve("sub/escape/secret.txt", for_write=False)


async def test_new_leaf_under_an_outward_symlinked_dir_is_refused(ws: Path, outside: Path) -> None:
    (ws / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathOutsideWorkspace):
        Workspace(ws).resolve("escape/new/deeper.txt", for_write=True)
    await err(WriteFileTool(Workspace(ws)), path="escape/new.txt", content="x")
    assert names(outside) == ["secret.txt"]


def test_dangling_symlink_pointing_out_is_refused_for_write(ws: Path, outside: Path) -> None:
    (ws / "dangling").symlink_to(outside / "not-yet")
    with pytest.raises(PathOutsideWorkspace):
        Workspace(ws).resolve("dangling", for_write=True)


def test_symlink_that_stays_inside_is_allowed(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "alias").symlink_to(ws / "real", target_is_directory=True)
    assert Workspace(ws).resolve("alias/f.txt", for_write=True) == ws.resolve() / "real" / "f.txt"


def test_symlinked_root_works_through_either_spelling(tmp_path: Path, ws: Path) -> None:
    link = tmp_path / "ws_link"
    link.symlink_to(ws, target_is_directory=True)
    workspace = Workspace(link)
    assert workspace.root == ws.resolve()
    assert workspace.resolve(str(link / "f.txt"), for_write=True) == ws.resolve() / "f.txt"
    assert workspace.resolve(str(ws / "f.txt"), for_write=True) == ws.resolve() / "f.txt"


def test_writing_the_root_itself_is_refused(ws: Path) -> None:
    with pytest.raises(PathOutsideWorkspace, match="root itself"):
        Workspace(ws).resolve(".", for_write=True)
    assert Workspace(ws).resolve(".", for_write=False) == ws.resolve()


def test_unconfined_workspace_resolves_against_cwd(
    ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ws)
    free = Workspace(None)
    assert free.root is None
    assert free.resolve("x.txt", for_write=True) == ws.resolve() / "x.txt"
    secret = outside / "secret.txt"
    assert free.resolve(str(secret), for_write=False) == secret.resolve()
    assert free.display(ws.resolve() / "x.txt") == "x.txt"


def test_refusal_is_a_tool_error_that_says_what_to_do(ws: Path) -> None:
    with pytest.raises(ToolError, match="relative to the workspace"):
        Workspace(ws).resolve("/etc/passwd", for_write=False)


def test_display_is_relative_to_the_root(ws: Path) -> None:
    workspace = Workspace(ws)
    assert workspace.display(ws.resolve() / "a" / "b.txt") == "a/b.txt"
    assert workspace.display(ws.resolve()) == "."


# -- read_file -------------------------------------------------------------------------


def test_file_tools_are_the_file_toolset(ws: Path) -> None:
    tools = file_tools(Workspace(ws))
    assert [t.spec.name for t in tools] == ["read_file", "write_file", "patch", "search_files"]
    assert {t.spec.toolset for t in tools} == {"file"}
    assert all(isinstance(t, Tool) for t in tools)


def test_specs_declare_parallelism_and_path_access(ws: Path) -> None:
    read, write, patch, search = (t.spec for t in file_tools(Workspace(ws)))
    assert (read.parallel_safe, read.path_access, read.max_result_chars) == (True, "read", None)
    assert (write.parallel_safe, write.path_access) == (False, "write")
    assert (patch.parallel_safe, patch.path_access) == (False, "write")
    assert (search.parallel_safe, search.path_access) == (True, "read")


async def test_read_file_numbers_lines_without_padding(ws: Path) -> None:
    (ws / "f.txt").write_text("alpha\nbeta\r\ngamma")
    data = await ok(ReadFileTool(Workspace(ws)), path="f.txt")
    assert data["content"] == "1|alpha\n2|beta\n3|gamma"
    assert data["total_lines"] == 3
    assert data["file_size"] == len("alpha\nbeta\r\ngamma")
    assert data["truncated"] is False and "next_offset" not in data


async def test_read_file_pages_with_offset_and_limit(ws: Path) -> None:
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    tool = ReadFileTool(Workspace(ws))
    data = await ok(tool, path="f.txt", offset=4, limit=3)
    assert data["content"] == "4|line 4\n5|line 5\n6|line 6"
    assert data["truncated"] is True and data["next_offset"] == 7
    assert "offset=7" in data["hint"] and data["total_lines"] == 10
    rest = await ok(tool, path="f.txt", offset=data["next_offset"], limit=2000)
    assert rest["content"].splitlines()[0] == "7|line 7" and rest["truncated"] is False


async def test_read_file_clamps_limit_to_2000(ws: Path) -> None:
    (ws / "f.txt").write_text("x\n" * 2500)
    data = await ok(ReadFileTool(Workspace(ws)), path="f.txt", limit=10_000)
    assert len(data["content"].splitlines()) == 2000
    assert data["next_offset"] == 2001 and data["total_lines"] == 2500


async def test_read_file_cuts_long_lines(ws: Path) -> None:
    (ws / "f.txt").write_text("a" * 5000 + "\nshort\n")
    data = await ok(ReadFileTool(Workspace(ws)), path="f.txt")
    first, second = data["content"].split("\n")
    assert first == "1|" + "a" * 2000 + "... [truncated]"
    assert second == "2|short"


async def test_read_file_caps_total_output_with_next_offset(ws: Path) -> None:
    (ws / "f.txt").write_text("".join(f"{'x' * 998}\n" for _ in range(1500)))
    tool = ReadFileTool(Workspace(ws))
    data = await ok(tool, path="f.txt")
    assert len(data["content"]) <= 100_000
    assert data["truncated"] is True and 90 <= data["next_offset"] <= 101
    shown = data["content"].splitlines()
    assert len(shown) == data["next_offset"] - 1
    more = await ok(tool, path="f.txt", offset=data["next_offset"])
    assert more["content"].startswith(f"{data['next_offset']}|")


async def test_read_file_refuses_binary_files(ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"PK\x03\x04\x00\x00binary")
    data = await err(ReadFileTool(Workspace(ws)), path="b.bin")
    assert data["is_binary"] is True and data["file_size"] == 12


async def test_read_file_missing_suggests_similar_files(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "config.py").write_text("")
    (ws / "src" / "unrelated.md").write_text("")
    data = await err(ReadFileTool(Workspace(ws)), path="src/confg.py")
    assert "not found" in data["error"]
    assert data["similar_files"] == ["src/config.py"]
    assert (await err(ReadFileTool(Workspace(ws)), path="nope/x.py"))["similar_files"] == []


async def test_read_file_on_a_directory_is_an_error(ws: Path) -> None:
    (ws / "d").mkdir()
    assert "directory" in (await err(ReadFileTool(Workspace(ws)), path="d"))["error"]


async def test_read_file_offset_past_the_end_is_an_error(ws: Path) -> None:
    (ws / "f.txt").write_text("one\ntwo\n")
    data = await err(ReadFileTool(Workspace(ws)), path="f.txt", offset=5)
    assert data["total_lines"] == 2


async def test_read_file_of_an_empty_file(ws: Path) -> None:
    (ws / "e.txt").write_text("")
    data = await ok(ReadFileTool(Workspace(ws)), path="e.txt")
    assert data["content"] == "" and data["total_lines"] == 0 and data["hint"]


@pytest.mark.parametrize(
    "args",
    [{}, {"path": 3}, {"path": "f.txt", "offset": 0}, {"path": "f.txt", "limit": "all"}],
)
async def test_read_file_bad_arguments_are_error_results(ws: Path, args: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("x\n")
    result = await ReadFileTool(Workspace(ws))(args, CTX)
    assert result.is_error


# -- write_file ------------------------------------------------------------------------


async def test_write_file_writes_atomically_and_reports(ws: Path) -> None:
    data = await ok(WriteFileTool(Workspace(ws)), path="notes.txt", content="héllo\n")
    assert (ws / "notes.txt").read_text() == "héllo\n"
    assert data["bytes_written"] == len("héllo\n".encode())
    assert data["dirs_created"] is False and data["verified"] is True
    assert "lint" not in data
    assert names(ws) == ["notes.txt"]  # no temp file left


async def test_write_file_creates_parent_directories(ws: Path) -> None:
    data = await ok(WriteFileTool(Workspace(ws)), path="a/b/c.txt", content="x")
    assert data["dirs_created"] is True and (ws / "a" / "b" / "c.txt").read_text() == "x"


async def test_write_file_overwrites_and_keeps_the_mode(ws: Path) -> None:
    target = ws / "run.sh"
    target.write_text("old")
    target.chmod(0o755)
    await ok(WriteFileTool(Workspace(ws)), path="run.sh", content="new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


@pytest.mark.parametrize(
    ("name", "content", "good"),
    [
        ("m.py", "def f():\n    return '\\d'\n", True),
        ("m.py", "def f(:\n", False),
        ("d.json", '{"a": 1}', True),
        ("d.json", '{"a": }', False),
        ("c.yaml", "a: 1\n---\nb: [2]\n", True),
        ("c.yml", "a: [1\n", False),
        ("p.toml", "[tool]\nx = 1\n", True),
        ("p.toml", "x = \n", False),
    ],
)
async def test_write_file_lints_known_formats(
    ws: Path, name: str, content: str, good: bool
) -> None:
    data = await ok(WriteFileTool(Workspace(ws)), path=name, content=content)
    assert data["lint"]["ok"] is good
    if not good:
        assert data["lint"]["error"]


async def test_write_file_python_lint_names_the_line(ws: Path) -> None:
    data = await ok(WriteFileTool(Workspace(ws)), path="m.py", content="x = 1\ny = (\n")
    assert data["lint"]["error"].startswith("line ")


async def test_write_file_to_a_directory_is_an_error(ws: Path) -> None:
    (ws / "d").mkdir()
    await err(WriteFileTool(Workspace(ws)), path="d", content="x")


@pytest.mark.parametrize(
    "args", [{}, {"path": "a.txt"}, {"content": "x"}, {"path": "a.txt", "content": 5}]
)
async def test_write_file_bad_arguments_are_error_results(ws: Path, args: dict[str, Any]) -> None:
    assert (await WriteFileTool(Workspace(ws))(args, CTX)).is_error
    assert not (ws / "a.txt").exists()


# -- patch: replace mode ---------------------------------------------------------------


async def test_patch_replaces_a_unique_string(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    data = await ok(PatchTool(Workspace(ws)), path="a.py", old_string="y = 2", new_string="y = 3")
    assert (ws / "a.py").read_text() == "x = 1\ny = 3\n"
    assert data["success"] is True and data["files_modified"] == ["a.py"]
    assert "-y = 2" in data["diff"] and "+y = 3" in data["diff"]
    assert data["diff"].startswith("--- a/a.py\n+++ b/a.py\n")
    assert data["lint"] == {"ok": True}


async def test_patch_mode_defaults_to_replace(ws: Path) -> None:
    (ws / "a.txt").write_text("one")
    await ok(
        PatchTool(Workspace(ws)), mode="replace", path="a.txt", old_string="one", new_string="1"
    )
    assert (ws / "a.txt").read_text() == "1"


async def test_patch_refuses_an_ambiguous_match(ws: Path) -> None:
    (ws / "a.txt").write_text("foo\nfoo\n")
    data = await err(PatchTool(Workspace(ws)), path="a.txt", old_string="foo", new_string="bar")
    assert "2 times" in data["error"] and data["match_count"] == 2
    assert (ws / "a.txt").read_text() == "foo\nfoo\n"


async def test_patch_replace_all(ws: Path) -> None:
    (ws / "a.txt").write_text("foo\nfoo\n")
    await ok(
        PatchTool(Workspace(ws)), path="a.txt", old_string="foo", new_string="bar", replace_all=True
    )
    assert (ws / "a.txt").read_text() == "bar\nbar\n"


async def test_patch_reports_a_missing_string(ws: Path) -> None:
    (ws / "a.txt").write_text("hello\n")
    data = await err(PatchTool(Workspace(ws)), path="a.txt", old_string="bye", new_string="x")
    assert "not found" in data["error"]


async def test_patch_falls_back_to_whitespace_tolerant_matching_and_reindents(ws: Path) -> None:
    source = "class A:\n    def f(self):\n        return 1   \n\n    def g(self):\n        pass\n"
    (ws / "a.py").write_text(source)
    data = await ok(
        PatchTool(Workspace(ws)),
        path="a.py",
        old_string="def f(self):\n    return 1",
        new_string="def f(self):\n    value = 2\n    return value",
    )
    assert (ws / "a.py").read_text() == (
        "class A:\n    def f(self):\n        value = 2\n        return value\n\n"
        "    def g(self):\n        pass\n"
    )
    assert "whitespace" in data["note"]


async def test_patch_whitespace_fallback_keeps_crlf(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"a\r\n  b\r\nc\r\n")
    await ok(PatchTool(Workspace(ws)), path="w.txt", old_string="b\nc", new_string="B\nC")
    assert (ws / "w.txt").read_bytes() == b"a\r\n  B\r\n  C\r\n"


async def test_patch_whitespace_fallback_refuses_ambiguity(ws: Path) -> None:
    (ws / "a.txt").write_text("  x\n\tx\n")
    data = await err(PatchTool(Workspace(ws)), path="a.txt", old_string="x ", new_string="y")
    assert "2 places" in data["error"]


async def test_patch_reports_broken_python_as_lint(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\n")
    data = await ok(PatchTool(Workspace(ws)), path="a.py", old_string="x = 1", new_string="x = (")
    assert data["lint"]["ok"] is False


@pytest.mark.parametrize(
    "args",
    [
        {"path": "a.txt", "old_string": "a", "new_string": "a"},
        {"path": "a.txt", "old_string": "", "new_string": "b"},
        {"path": "a.txt", "old_string": "a"},
        {"path": "missing.txt", "old_string": "a", "new_string": "b"},
        {"path": "a.txt", "old_string": "a", "new_string": "b", "replace_all": "yes"},
        {"mode": "rewrite", "path": "a.txt"},
        {"mode": "patch"},
        {"path": "../a.txt", "old_string": "a", "new_string": "b"},
    ],
)
async def test_patch_bad_arguments_are_error_results(ws: Path, args: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("a\n")
    assert (await PatchTool(Workspace(ws))(args, CTX)).is_error
    assert (ws / "a.txt").read_text() == "a\n"


# -- patch: V4A mode -------------------------------------------------------------------


async def test_v4a_updates_adds_and_deletes_in_one_patch(ws: Path) -> None:
    (ws / "app.py").write_text(
        "import os\n\n\ndef main():\n    print('hi')\n    return 0\n\n\ndef other():\n    pass\n"
    )
    (ws / "old.txt").write_text("bye\n")
    patch = """*** Begin Patch
*** Update File: app.py
@@ def main():
     print('hi')
-    return 0
+    print('there')
+    return 1
@@ def other():
-    pass
+    return None
*** Add File: pkg/new.py
+VALUE = 1
+
*** Delete File: old.txt
*** End Patch
"""
    data = await ok(PatchTool(Workspace(ws)), mode="patch", patch=patch)
    assert (ws / "app.py").read_text() == (
        "import os\n\n\ndef main():\n    print('hi')\n    print('there')\n    return 1\n"
        "\n\ndef other():\n    return None\n"
    )
    assert (ws / "pkg" / "new.py").read_text() == "VALUE = 1\n\n"
    assert not (ws / "old.txt").exists()
    assert data["files_modified"] == ["app.py"]
    assert data["files_created"] == ["pkg/new.py"]
    assert data["files_deleted"] == ["old.txt"]
    assert "+++ b/pkg/new.py" in data["diff"] and "--- a/old.txt" in data["diff"]
    assert data["lint"] == {"app.py": {"ok": True}, "pkg/new.py": {"ok": True}}


async def test_v4a_context_matches_despite_whitespace_drift(ws: Path) -> None:
    (ws / "f.txt").write_text("a\n    b  \nc\n")
    patch = "*** Begin Patch\n*** Update File: f.txt\n a\n-b\n+B\n c\n*** End Patch"
    await ok(PatchTool(Workspace(ws)), mode="patch", patch=patch)
    assert (ws / "f.txt").read_text() == "a\nB\nc\n"


async def test_v4a_end_of_file_hunk_and_crlf(ws: Path) -> None:
    (ws / "f.txt").write_bytes(b"x\r\ny\r\nx\r\n")
    patch = "*** Begin Patch\n*** Update File: f.txt\n y\n-x\n+z\n*** End of File\n*** End Patch"
    await ok(PatchTool(Workspace(ws)), mode="patch", patch=patch)
    assert (ws / "f.txt").read_bytes() == b"x\r\ny\r\nz\r\n"


async def test_v4a_failing_hunk_changes_nothing(ws: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    (ws / "b.txt").write_text("two\n")
    patch = """*** Begin Patch
*** Update File: a.txt
-one
+ONE
*** Update File: b.txt
-three
+THREE
*** Add File: c.txt
+new
*** End Patch"""
    data = await err(PatchTool(Workspace(ws)), mode="patch", patch=patch)
    assert "hunk 1" in data["error"] and "b.txt" in data["error"]
    assert (ws / "a.txt").read_text() == "one\n"
    assert not (ws / "c.txt").exists()


@pytest.mark.parametrize(
    "patch",
    [
        "*** Update File: a.txt\n-a\n+b\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n-a\n+b\n",
        "*** Begin Patch\n*** End Patch",
        "*** Begin Patch\n*** Add File: a.txt\n+dup\n*** End Patch",
        "*** Begin Patch\n*** Add File: n.txt\nno plus\n*** End Patch",
        "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n a\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n-a\n+b\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n@@ nowhere\n-a\n+b\n*** End Patch",
        "*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n-a\n+b\n*** Update File: ./a.txt\n-a\n+c\n"
        "*** End Patch",
        "*** Begin Patch\nstray\n*** End Patch",
    ],
)
async def test_v4a_malformed_or_inapplicable_patches_are_errors(ws: Path, patch: str) -> None:
    (ws / "a.txt").write_text("a\n")
    await err(PatchTool(Workspace(ws)), mode="patch", patch=patch)
    assert (ws / "a.txt").read_text() == "a\n"
    assert names(ws.parent) == ["ws"]


# -- search_files ----------------------------------------------------------------------


def make_tree(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.getcwd()\n")
    (root / "src" / "pkg" / "util.py").write_text("def helper():\n    return 'main'\n")
    (root / "src" / "pkg" / "web.ts").write_text("export function main() {}\r\n")
    (root / "src" / "pkg" / "web.tsx").write_text("// main view\n")
    (root / "README.md").write_text("# Demo\n\nRun main.\nmain again\n")
    (root / ".hidden.cfg").write_text("main = yes\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("main\n")
    (root / "node_modules" / "dep").mkdir(parents=True)
    (root / "node_modules" / "dep" / "index.js").write_text("main\n")
    (root / "logo.png").write_bytes(b"\x89PNG\x00\x00main")
    (root / ".gitignore").write_text("README.md\n")  # ignore files are not honoured
    (root / "late_nul.txt").write_bytes(b"main\n" + b"x" * 9000 + b"\x00tail main\n")
    (root / "bom.txt").write_bytes("\ufeffmain first\n".encode())


@pytest.fixture
def tree(ws: Path) -> Path:
    make_tree(ws)
    return ws


def py_search(root: Path) -> SearchFilesTool:
    return SearchFilesTool(Workspace(root), use_ripgrep=False)


async def test_search_content_is_sorted_by_path_then_line(tree: Path) -> None:
    data = await ok(py_search(tree), pattern=r"\bmain\b")
    got = [(m["path"], m["line"]) for m in data["matches"]]
    assert got == [
        (".hidden.cfg", 1),
        ("README.md", 3),
        ("README.md", 4),
        ("bom.txt", 1),
        ("late_nul.txt", 1),
        ("late_nul.txt", 2),
        ("src/app.py", 3),
        ("src/pkg/util.py", 2),
        ("src/pkg/web.ts", 1),
        ("src/pkg/web.tsx", 1),
    ]
    assert data["total_count"] == 10 and data["truncated"] is False
    assert data["matches"][8]["content"] == "export function main() {}"


async def test_search_skips_git_node_modules_and_binary_files(tree: Path) -> None:
    data = await ok(py_search(tree), pattern="main", output_mode="files_only")
    assert ".git/HEAD" not in data["files"]
    assert not any(f.startswith("node_modules") for f in data["files"])
    assert "logo.png" not in data["files"]


async def test_search_files_target_globs_names(tree: Path) -> None:
    data = await ok(py_search(tree), pattern="*.py", target="files")
    assert data["files"] == ["src/app.py", "src/pkg/util.py"]
    data = await ok(py_search(tree), pattern="*.png", target="files")
    assert data["files"] == ["logo.png"]


async def test_search_file_glob_narrows_and_supports_braces(tree: Path) -> None:
    data = await ok(py_search(tree), pattern="main", file_glob="*.{ts,tsx}")
    assert [m["path"] for m in data["matches"]] == ["src/pkg/web.ts", "src/pkg/web.tsx"]
    data = await ok(py_search(tree), pattern="main", file_glob="src/pkg/*")
    assert {m["path"] for m in data["matches"]} == {
        "src/pkg/util.py",
        "src/pkg/web.ts",
        "src/pkg/web.tsx",
    }


async def test_search_count_and_files_only_modes(tree: Path) -> None:
    data = await ok(py_search(tree), pattern="main", path="src", output_mode="count")
    assert data == {
        "total_count": 4,
        "file_count": 4,
        "counts": [
            {"path": "src/app.py", "count": 1},
            {"path": "src/pkg/util.py", "count": 1},
            {"path": "src/pkg/web.ts", "count": 1},
            {"path": "src/pkg/web.tsx", "count": 1},
        ],
        "truncated": False,
    }
    data = await ok(py_search(tree), pattern="Demo", output_mode="files_only")
    assert data["files"] == ["README.md"]


async def test_search_context_lines(tree: Path) -> None:
    data = await ok(py_search(tree), pattern="def main", context=1)
    assert data["matches"] == [
        {
            "path": "src/app.py",
            "line": 3,
            "content": "def main():",
            "context": [
                {"line": 2, "content": ""},
                {"line": 4, "content": "    return os.getcwd()"},
            ],
        }
    ]


async def test_search_pages_with_limit_and_offset(tree: Path) -> None:
    first = await ok(py_search(tree), pattern="main", limit=3)
    assert len(first["matches"]) == 3 and first["truncated"] and first["next_offset"] == 3
    second = await ok(py_search(tree), pattern="main", limit=3, offset=3)
    everything = await ok(py_search(tree), pattern="main", limit=1000)
    assert first["matches"] + second["matches"] == everything["matches"][:6]


async def test_search_a_single_file_path(tree: Path) -> None:
    data = await ok(py_search(tree), pattern="main", path="README.md")
    assert [m["line"] for m in data["matches"]] == [3, 4]


async def test_search_does_not_follow_symlinks(tree: Path, outside: Path) -> None:
    (tree / "out").symlink_to(outside, target_is_directory=True)
    (tree / "leak.txt").symlink_to(outside / "secret.txt")
    data = await ok(py_search(tree), pattern="secret")
    assert data["total_count"] == 0
    await err(py_search(tree), pattern="secret", path="out")


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"pattern": ""},
        {"pattern": "("},
        {"pattern": "x", "target": "dirs"},
        {"pattern": "x", "output_mode": "lines"},
        {"pattern": "x", "limit": 0},
        {"pattern": "x", "offset": -1},
        {"pattern": "x", "context": -2},
        {"pattern": "x", "path": "missing"},
        {"pattern": "x", "path": "/etc"},
        {"pattern": "x", "file_glob": 7},
    ],
)
async def test_search_bad_arguments_are_error_results(tree: Path, args: dict[str, Any]) -> None:
    assert (await py_search(tree)(args, CTX)).is_error


async def test_search_requiring_ripgrep_without_it_is_an_error(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    tool = SearchFilesTool(Workspace(tree), use_ripgrep=True)
    assert await tool.available() is False
    assert "ripgrep" in (await err(tool, pattern="main"))["error"]
    assert await SearchFilesTool(Workspace(tree)).available() is True


EQUIVALENCE_QUERIES: list[dict[str, Any]] = [
    {"pattern": "main"},
    {"pattern": r"\bmain\b", "context": 2},
    {"pattern": "^$"},
    {"pattern": r"main\s*$"},
    {"pattern": "(?i)DEMO|getcwd", "output_mode": "count"},
    {"pattern": "main", "output_mode": "files_only"},
    {"pattern": "main", "file_glob": "*.{ts,tsx}"},
    {"pattern": "main", "file_glob": "src/*.py"},
    {"pattern": "main", "file_glob": "!*.py"},
    {"pattern": "main", "file_glob": "[z-a]*"},  # a glob ripgrep rejects
    {"pattern": "main", "path": "src", "limit": 2, "offset": 1},
    {"pattern": r"(?<=def )\w+"},  # lookbehind: ripgrep refuses it, Python answers
    {"pattern": "main", "path": "late_nul.txt"},
    {"pattern": "*.py", "target": "files"},
    {"pattern": "*", "target": "files", "file_glob": "*.{md,png}"},
    {"pattern": "*", "target": "files", "path": "src"},
]


async def test_ripgrep_and_pure_python_give_the_same_results(tree: Path) -> None:
    """Always checks the pure-Python answers; also ripgrep's when ``rg`` is on PATH."""
    (tree / "alias").symlink_to(tree / "src", target_is_directory=True)  # neither follows
    (tree / "alias.md").symlink_to(tree / "README.md")
    python = py_search(tree)
    results = [await ok(python, **q) for q in EQUIVALENCE_QUERIES]
    assert results[0]["total_count"] == 10
    assert [m["content"] for m in results[11]["matches"]] == ["def main():", "def helper():"]
    assert results[8]["total_count"] == results[9]["total_count"] == 0
    assert results[13]["files"] == ["src/app.py", "src/pkg/util.py"]
    assert results[14]["files"] == ["README.md", "logo.png"]
    if shutil.which("rg") is not None:
        rg = SearchFilesTool(Workspace(tree), use_ripgrep=True)
        for query, expected in zip(EQUIVALENCE_QUERIES, results, strict=True):
            assert await ok(rg, **query) == expected, query


async def test_default_search_backend_matches_the_pure_python_one(tree: Path) -> None:
    auto = SearchFilesTool(Workspace(tree))
    assert await ok(auto, pattern="main", context=1) == await ok(
        py_search(tree), pattern="main", context=1
    )
