"""``write_file``, and the write path every editing tool goes through.

Both ``write_file`` and ``patch`` put files on disk, and both must do it the same careful
way, so the two steps live here once: :func:`atomic_write` (temp file, fsync, rename, so a
reader never sees a half-written file and a symlink leaf is replaced, not followed) and
:func:`lint` (an offline syntax check, so a file the model broke is reported in the same
result instead of one round trip later).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import tomllib
import warnings
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import yaml

from hermes_adapters.tools._common import TOOLSET, BadInput, FileTool, str_arg
from hermes_core.ports.tools import ToolSpec, tool_error

__all__ = ["WriteFileTool", "atomic_write", "lint"]


async def atomic_write(path: Path, data: bytes) -> bool:
    """Write through a temp file in the same directory and ``os.replace`` it into place.

    Readers never see a half-written file, and the rename replaces a symlink leaf instead of
    following it. Returns whether parent directories had to be created.
    """
    parent = anyio.Path(path.parent)
    created = not await parent.exists()
    if created:
        await parent.mkdir(parents=True, exist_ok=True)
    mode: int | None = None
    with contextlib.suppress(FileNotFoundError):
        mode = stat.S_IMODE((await anyio.Path(path).lstat()).st_mode)
    tmp = anyio.Path(path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp"))
    done = False
    try:
        async with await anyio.open_file(tmp, "xb") as f:
            await f.write(data)
            await f.flush()
            await anyio.to_thread.run_sync(os.fsync, f.wrapped.fileno())
        if mode is not None:
            await tmp.chmod(mode)
        await tmp.replace(path)
        done = True
    finally:
        if not done:
            with anyio.CancelScope(shield=True):
                await tmp.unlink(missing_ok=True)
    return created


def lint(path: Path, text: str) -> dict[str, Any] | None:
    """A quick syntax check for the formats we can parse offline; ``None`` for others.

    Models often write a file that does not parse; saying so in the same result saves a
    round trip to discover it.
    """
    suffix = path.suffix.lower()
    try:
        if suffix == ".py":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes is not an error
                compile(text, path.name, "exec", dont_inherit=True)
        elif suffix == ".json":
            json.loads(text)
        elif suffix in (".yaml", ".yml"):
            list(yaml.safe_load_all(text))
        elif suffix == ".toml":
            tomllib.loads(text)
        else:
            return None
    except SyntaxError as exc:
        return {"ok": False, "error": f"line {exc.lineno}: {exc.msg}"}
    except (ValueError, RecursionError, yaml.YAMLError) as exc:
        return {"ok": False, "error": " ".join(str(exc).split())}
    return {"ok": True}


class WriteFileTool(FileTool):
    """``write_file``: replace a file's whole content, atomically, creating parents."""

    SPEC = ToolSpec(
        name="write_file",
        description=(
            "Write `content` to a file, replacing it entirely (parent directories are created). "
            "Python, JSON, YAML and TOML files get a syntax check reported as `lint`. "
            "For small edits to an existing file prefer `patch`."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "content": {"type": "string", "description": "The complete new file content."},
            },
            "required": ["path", "content"],
        },
        toolset=TOOLSET,
        path_access="write",
    )

    async def _run(self, args: dict[str, Any]) -> Any:
        given = str_arg(args, "path")
        content = str_arg(args, "content")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadInput(f"content is not encodable as UTF-8: {exc.reason}") from exc
        path = await self._workspace.aresolve(given, for_write=True)
        shown = self._workspace.display(path)
        if await anyio.Path(path).is_dir():
            return tool_error(f"{shown} is a directory; give a file path")
        dirs_created = await atomic_write(path, data)
        verified = await anyio.Path(path).read_bytes() == data
        result: dict[str, Any] = {
            "path": shown,
            "bytes_written": len(data),
            "dirs_created": dirs_created,
            "verified": verified,
        }
        if (check := lint(path, content)) is not None:
            result["lint"] = check
        return result
