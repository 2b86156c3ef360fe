"""``patch``: the tool that turns the pure edits of :mod:`._patching` into file changes.

Kept apart from the matching rules so this module is only about the file system and the
result the model sees: resolving every path through the workspace, refusing files that
cannot be edited as text, planning a whole V4A patch before writing anything (a hunk that
does not apply leaves every file untouched), writing through
:func:`~hermes_adapters.tools._write.atomic_write`, and reporting a unified diff, the
files touched and a syntax check.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from hermes_adapters.tools._common import (
    TOOLSET,
    BadInput,
    FileTool,
    bool_arg,
    choice_arg,
    looks_binary,
    open_nofollow,
    str_arg,
)
from hermes_adapters.tools._patching import apply_hunks, parse_v4a, replace
from hermes_adapters.tools._write import atomic_write, lint
from hermes_core.ports.tools import ToolSpec

__all__ = ["PatchTool"]


@dataclass(frozen=True)
class _Planned:
    """One file's change, worked out before anything is written.

    ``before`` is ``None`` for a file the patch adds, ``after`` for one it deletes.
    """

    path: Path
    shown: str
    before: str | None
    after: str | None


async def _read_text(path: Path, shown: str) -> str:
    """A text file's content for editing; missing, binary or non-UTF-8 files are refused."""
    apath = anyio.Path(path)
    if not await apath.exists():
        raise BadInput(f"file not found: {shown} (use write_file to create it)")
    if not await apath.is_file():
        raise BadInput(f"{shown} is not a regular file (a directory or device?)")
    async with await anyio.open_file(path, "rb", opener=open_nofollow) as f:
        data = await f.read()
    if looks_binary(data):
        raise BadInput(f"{shown} is a binary file; it cannot be edited as text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{shown} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc


def _unified_diff(
    shown: str, old: str, new: str, *, created: bool = False, deleted: bool = False
) -> str:
    """A unified diff whose every line ends in a newline, even at a file's unterminated end."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile="/dev/null" if created else f"a/{shown}",
        tofile="/dev/null" if deleted else f"b/{shown}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _edit_result(
    diff: str, modified: list[str], created: list[str], deleted: list[str]
) -> dict[str, Any]:
    """The result both modes return; ``note`` and ``lint`` are added after these keys."""
    return {
        "success": True,
        "diff": diff,
        "files_modified": modified,
        "files_created": created,
        "files_deleted": deleted,
    }


class PatchTool(FileTool):
    """``patch``: targeted edits, by string replacement or by a V4A multi-file patch."""

    SPEC = ToolSpec(
        name="patch",
        description=(
            "Edit files. mode='replace' (default): replace `old_string` with `new_string` in "
            "`path`; old_string must match once (exactly, or else ignoring indentation), or "
            "set replace_all. mode='patch': apply a V4A patch ('*** Begin Patch', "
            "'*** Update File: p' with '@@ hint', ' context', '-old', '+new' lines, "
            "'*** Add File: p' with '+' lines, '*** Delete File: p', '*** End Patch')."
        ),
        parameters={
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["replace", "patch"], "default": "replace"},
                "path": {"type": "string", "description": "File to edit (replace mode)."},
                "old_string": {"type": "string", "description": "Text to find (replace mode)."},
                "new_string": {"type": "string", "description": "Replacement (replace mode)."},
                "replace_all": {
                    "type": "boolean",
                    "default": False,
                    "description": "Replace every occurrence (replace mode).",
                },
                "patch": {"type": "string", "description": "The V4A patch (patch mode)."},
            },
            "required": ["mode"],
        },
        toolset=TOOLSET,
        path_access="write",
    )

    async def _run(self, args: dict[str, Any]) -> Any:
        mode = choice_arg(args, "mode", ("replace", "patch"))
        if mode == "patch":
            return await self._run_patch(str_arg(args, "patch"))
        given = str_arg(args, "path")
        old = str_arg(args, "old_string")
        new = str_arg(args, "new_string")
        replace_all = bool_arg(args, "replace_all")
        if not old:
            raise BadInput("old_string is empty; to create or overwrite a file use write_file")
        if old == new:
            raise BadInput("old_string and new_string are identical; nothing to change")
        path = await self._workspace.aresolve(given, for_write=True)
        shown = self._workspace.display(path)
        before = await _read_text(path, shown)
        after, note = replace(before, old, new, replace_all)
        await atomic_write(path, after.encode("utf-8"))
        result = _edit_result(_unified_diff(shown, before, after), [shown], [], [])
        if note:
            result["note"] = note
        if (check := lint(path, after)) is not None:
            result["lint"] = check
        return result

    async def _run_patch(self, patch: str) -> Any:
        plans = await self._plan(patch)
        modified: list[str] = []
        created: list[str] = []
        deleted: list[str] = []
        diffs: list[str] = []
        lints: dict[str, Any] = {}
        for plan in plans:
            if plan.after is None:
                await anyio.Path(plan.path).unlink()
                deleted.append(plan.shown)
            else:
                await atomic_write(plan.path, plan.after.encode("utf-8"))
                (created if plan.before is None else modified).append(plan.shown)
                if (check := lint(plan.path, plan.after)) is not None:
                    lints[plan.shown] = check
            diffs.append(
                _unified_diff(
                    plan.shown,
                    plan.before or "",
                    plan.after or "",
                    created=plan.before is None,
                    deleted=plan.after is None,
                )
            )
        result = _edit_result("".join(diffs), modified, created, deleted)
        if lints:
            result["lint"] = lints
        return result

    async def _plan(self, patch: str) -> list[_Planned]:
        """Every file's change, worked out first so a hunk that fails leaves all untouched."""
        plans: list[_Planned] = []
        for op in parse_v4a(patch):
            path = await self._workspace.aresolve(op.path, for_write=True)
            shown = self._workspace.display(path)
            if any(plan.path == path for plan in plans):
                raise BadInput(f"{shown} appears twice in the patch; merge its sections")
            if op.kind == "add":
                if await anyio.Path(path).exists():
                    raise BadInput(f"Add File {shown}: it already exists; use Update File")
                body = "\n".join(op.added) + "\n" if op.added else ""
                plans.append(_Planned(path, shown, None, body))
            elif op.kind == "delete":
                plans.append(_Planned(path, shown, await _read_text(path, shown), None))
            else:
                before = await _read_text(path, shown)
                plans.append(_Planned(path, shown, before, apply_hunks(before, op.hunks, shown)))
        return plans
