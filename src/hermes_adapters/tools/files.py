"""The ``file`` toolset: read_file, write_file, patch and search_files.

These four tools are how a model edits a code base, so each is shaped by what models get
wrong: reads are numbered and paged so a huge file cannot flood the context, writes are
atomic and syntax-checked so a half-written or broken file is noticed at once, patches
tolerate whitespace drift, and search gives the same answer with or without ripgrep.
Every path goes through a :class:`~hermes_adapters.tools.workspace.Workspace`, bad input
comes back as an error result (never an exception), and all file I/O runs through anyio,
whose worker-thread file I/O is the documented exception to "no hidden threads".
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import difflib
import fnmatch
import json
import os
import re
import secrets
import shutil
import stat
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
import anyio.to_thread
import yaml

from hermes_adapters.tools.workspace import PathOutsideWorkspace, Workspace
from hermes_core.ports.tools import Tool, ToolContext, ToolResult, ToolSpec, tool_error

__all__ = [
    "PatchTool",
    "ReadFileTool",
    "SearchFilesTool",
    "WriteFileTool",
    "file_tools",
]

TOOLSET = "file"
MAX_READ_LINES = 2000
"""The most lines one read_file call returns; the model pages on with ``offset``."""
MAX_LINE_CHARS = 2000
"""Longer lines are cut: one minified line must not use up the whole read."""
MAX_READ_CHARS = 100_000
"""read_file caps its own output here (its spec opts out of the engine's truncation)."""
BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this much of a file's head marks it binary (git and ripgrep do the same)."""
MAX_SEARCH_FILE_BYTES = 20 * 1024 * 1024
"""Content search skips larger files, in both backends, so results stay identical."""
MAX_MATCH_CHARS = 1000
SKIPPED_NAMES = frozenset({".git", "node_modules"})
_CHUNK = 1 << 20
_TRUNCATED = "... [truncated]"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class _BadInput(Exception):
    """Raised inside a tool for input the model must fix; turned into an error result."""

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.extra = extra


# -- argument checking -----------------------------------------------------------------


def _str_arg(args: dict[str, Any], name: str, *, default: str | None = None) -> str:
    value = args.get(name)
    if value is None:
        value = default
    if value is None:
        raise _BadInput(f"missing required argument {name!r}")
    if not isinstance(value, str):
        raise _BadInput(f"argument {name!r} must be a string, got {type(value).__name__}")
    return value


def _int_arg(args: dict[str, Any], name: str, default: int, *, lo: int, hi: int) -> int:
    """An integer argument; below ``lo`` is an error, above ``hi`` is clamped (models overshoot)."""
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadInput(f"argument {name!r} must be an integer, got {value!r}")
    if value < lo:
        raise _BadInput(f"argument {name!r} must be at least {lo}, got {value}")
    return min(int(value), hi)


def _bool_arg(args: dict[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if not isinstance(value, bool):
        raise _BadInput(f"argument {name!r} must be true or false, got {value!r}")
    return value


def _choice_arg(args: dict[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = args.get(name) or choices[0]
    if value not in choices:
        raise _BadInput(f"argument {name!r} must be one of {', '.join(choices)}; got {value!r}")
    return str(value)


# -- shared file helpers ---------------------------------------------------------------


def _open_nofollow(path: str, flags: int) -> int:
    """Opener refusing a symlink leaf swapped in after the workspace check."""
    return os.open(path, flags | _NOFOLLOW)


async def _read_text(path: Path, shown: str) -> str:
    """A text file's content for editing; missing, binary or non-UTF-8 files are refused."""
    apath = anyio.Path(path)
    if not await apath.exists():
        raise _BadInput(f"file not found: {shown} (use write_file to create it)")
    if not await apath.is_file():
        raise _BadInput(f"{shown} is not a regular file (a directory or device?)")
    async with await anyio.open_file(path, "rb", opener=_open_nofollow) as f:
        data = await f.read()
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise _BadInput(f"{shown} is a binary file; it cannot be edited as text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadInput(f"{shown} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc


async def _atomic_write(path: Path, data: bytes) -> bool:
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


def _lint(path: Path, text: str) -> dict[str, Any] | None:
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


# -- the common tool shape -------------------------------------------------------------


class _FileTool:
    """What the four tools share: a workspace, a spec, and errors turned into results."""

    SPEC: ClassVar[ToolSpec]

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace

    @property
    def spec(self) -> ToolSpec:
        return self.SPEC

    async def available(self) -> bool:
        return True

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not isinstance(args, dict):
            return tool_error("arguments must be a JSON object")
        try:
            return ToolResult.of(await self._run(args))
        except _BadInput as exc:
            return tool_error(str(exc), **exc.extra)
        except PathOutsideWorkspace as exc:
            return tool_error(str(exc))
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            return tool_error(f"{exc.strerror or exc}{where}")

    async def _run(self, args: dict[str, Any]) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._workspace!r})"


# -- read_file -------------------------------------------------------------------------


class _LineWindow:
    """Collects the numbered lines of one window while counting every line of the file.

    Fed raw chunks, so a file is read once, in bounded memory, whatever its size; a line is
    kept only up to a few times ``MAX_LINE_CHARS`` bytes because the rest would be cut.
    """

    _LINE_BYTES = MAX_LINE_CHARS * 4 + 4

    def __init__(self, first: int, limit: int) -> None:
        self.first = first
        self.last = first + limit - 1
        self.total = 0
        self.lines: list[str] = []
        self.next_offset: int | None = None
        self._chars = 0
        self._partial = bytearray()
        self._open = False

    def feed(self, data: bytes) -> None:
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._take(data[start:end])
            self._end_line()
            start = end + 1
        self._take(data[start:])

    def finish(self) -> None:
        if self._open:
            self._end_line()

    def _take(self, piece: bytes) -> None:
        if piece:
            self._open = True
            room = self._LINE_BYTES - len(self._partial)
            if room > 0:
                self._partial += piece[:room]

    def _end_line(self) -> None:
        self.total += 1
        number = self.total
        if self.first <= number <= self.last and self.next_offset is None:
            text = self._partial.decode("utf-8", "replace").removesuffix("\r")
            if len(text) > MAX_LINE_CHARS:
                text = text[:MAX_LINE_CHARS] + _TRUNCATED
            entry = f"{number}|{text}"
            if self.lines and self._chars + len(entry) + 1 > MAX_READ_CHARS:
                self.next_offset = number
            else:
                self.lines.append(entry)
                self._chars += len(entry) + 1
        self._partial.clear()
        self._open = False


class ReadFileTool(_FileTool):
    """``read_file``: numbered lines of a text file, one window at a time."""

    SPEC = ToolSpec(
        name="read_file",
        description=(
            "Read a text file. Returns lines as 'N|text' (1-based line numbers), up to "
            f"{MAX_READ_LINES} lines from `offset`. When `truncated` is true, call again with "
            "offset=next_offset to continue. Binary files are refused."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "default": 1,
                    "description": "First line to return (1-based).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_READ_LINES,
                    "default": MAX_READ_LINES,
                    "description": "Most lines to return.",
                },
            },
            "required": ["path"],
        },
        toolset=TOOLSET,
        parallel_safe=True,
        path_access="read",
        max_result_chars=None,
    )

    async def _run(self, args: dict[str, Any]) -> Any:
        given = _str_arg(args, "path")
        offset = _int_arg(args, "offset", 1, lo=1, hi=2**62)
        limit = _int_arg(args, "limit", MAX_READ_LINES, lo=1, hi=MAX_READ_LINES)
        path = await self._workspace.aresolve(given, for_write=False)
        shown = self._workspace.display(path)
        apath = anyio.Path(path)
        if not await apath.exists():
            return await self._missing(path, shown)
        if await apath.is_dir():
            return tool_error(
                f"{shown} is a directory; use search_files with target='files' to list it"
            )
        if not await apath.is_file():
            return tool_error(f"{shown} is not a regular file; read_file only reads files")
        size = (await apath.stat()).st_size
        window = _LineWindow(offset, limit)
        async with await anyio.open_file(path, "rb", opener=_open_nofollow) as f:
            head = await f.read(BINARY_SNIFF_BYTES)
            if b"\0" in head:
                return tool_error(
                    f"{shown} looks like a binary file; read_file only shows text",
                    is_binary=True,
                    file_size=size,
                )
            window.feed(head)
            while chunk := await f.read(_CHUNK):
                window.feed(chunk)
        window.finish()
        return self._result(window, size, offset)

    def _result(self, window: _LineWindow, size: int, offset: int) -> Any:
        total = window.total
        if total and offset > total:
            return tool_error(
                f"offset {offset} is past the end of the file ({total} lines)", total_lines=total
            )
        next_offset = window.next_offset
        if next_offset is None and total > window.last:
            next_offset = window.last + 1
        result: dict[str, Any] = {
            "content": "\n".join(window.lines),
            "total_lines": total,
            "file_size": size,
            "truncated": next_offset is not None,
        }
        if next_offset is not None:
            result["next_offset"] = next_offset
            result["hint"] = (
                f"Showing lines {offset}-{next_offset - 1} of {total}. "
                f"Use offset={next_offset} to read on."
            )
        else:
            result["hint"] = "The file is empty." if total == 0 else None
        return result

    async def _missing(self, path: Path, shown: str) -> ToolResult:
        similar: list[str] = []
        parent = anyio.Path(path.parent)
        if await parent.is_dir():
            names = [p.name async for p in parent.iterdir()]
            close = difflib.get_close_matches(path.name, names, n=5, cutoff=0.6)
            similar = [self._workspace.display(path.parent / name) for name in close]
        return tool_error(f"file not found: {shown}", similar_files=similar)


# -- write_file ------------------------------------------------------------------------


class WriteFileTool(_FileTool):
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
        given = _str_arg(args, "path")
        content = _str_arg(args, "content")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _BadInput(f"content is not encodable as UTF-8: {exc.reason}") from exc
        path = await self._workspace.aresolve(given, for_write=True)
        shown = self._workspace.display(path)
        if await anyio.Path(path).is_dir():
            return tool_error(f"{shown} is a directory; give a file path")
        dirs_created = await _atomic_write(path, data)
        verified = await anyio.Path(path).read_bytes() == data
        result: dict[str, Any] = {
            "path": shown,
            "bytes_written": len(data),
            "dirs_created": dirs_created,
            "verified": verified,
        }
        lint = _lint(path, content)
        if lint is not None:
            result["lint"] = lint
        return result


# -- patch: replace mode ---------------------------------------------------------------


def _newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _trim_blank_edges(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _replace_loosely(text: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    """Replace ``old`` matched line by line ignoring leading/trailing whitespace.

    The fallback for the commonest model slip: right lines, wrong indentation or trailing
    spaces. The replacement is re-indented by the difference between the file's indentation
    and ``old``'s, and joined with the file's own newline style.
    """
    want = [line.strip() for line in _trim_blank_edges(old.split("\n"))]
    if not want:
        raise _BadInput("old_string is blank")
    lines = text.split("\n")
    size = len(want)
    starts: list[int] = []
    i = 0
    while i + size <= len(lines):
        if all(lines[i + j].strip() == want[j] for j in range(size)):
            starts.append(i)
            i += size
        else:
            i += 1
    if not starts:
        raise _BadInput(
            "old_string was not found in the file, even ignoring whitespace; re-read the file "
            "with read_file and copy the exact text"
        )
    if len(starts) > 1 and not replace_all:
        raise _BadInput(
            f"old_string matches {len(starts)} places (ignoring whitespace); include more "
            "surrounding lines to make it unique, or set replace_all=true"
        )
    old_lines = _trim_blank_edges(old.split("\n"))
    old_indent = _indent_of(old_lines[0])
    new_lines = _trim_blank_edges(new.split("\n"))
    for start in reversed(starts):
        crlf = lines[start + size - 1].endswith("\r")
        file_indent = _indent_of(lines[start])
        block = []
        for line in new_lines:
            if not line.strip():
                line = ""
            elif line.startswith(old_indent):
                line = file_indent + line[len(old_indent) :]
            block.append(line + "\r" if crlf else line)
        lines[start : start + size] = block
    return "\n".join(lines), len(starts)


def _replace(text: str, old: str, new: str, replace_all: bool) -> tuple[str, str | None]:
    """Exact replacement first; the whitespace-tolerant match only when exact finds nothing."""
    count = text.count(old)
    if count > 1 and not replace_all:
        raise _BadInput(
            f"old_string occurs {count} times; include more surrounding lines to make it "
            "unique, or set replace_all=true",
            match_count=count,
        )
    if count:
        return text.replace(old, new, -1 if replace_all else 1), None
    updated, matched = _replace_loosely(text, old, new, replace_all)
    return updated, f"matched {matched} place(s) ignoring whitespace differences"


# -- patch: V4A patch mode -------------------------------------------------------------


@dataclass
class _Hunk:
    hint: str | None
    lines: list[tuple[str, str]] = field(default_factory=list)
    at_end: bool = False


@dataclass
class _FileOp:
    kind: Literal["add", "delete", "update"]
    path: str
    hunks: list[_Hunk] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


_HEADERS: dict[str, Literal["add", "delete", "update"]] = {
    "*** Add File:": "add",
    "*** Delete File:": "delete",
    "*** Update File:": "update",
}


def _parse_v4a(patch: str) -> list[_FileOp]:
    """Parse a V4A patch block into file operations (a practical subset: no Move)."""
    lines = _trim_blank_edges([line.removesuffix("\r") for line in patch.split("\n")])
    if not lines or lines[0].strip() != "*** Begin Patch":
        raise _BadInput("a V4A patch must start with '*** Begin Patch'")
    if lines[-1].strip() != "*** End Patch":
        raise _BadInput("a V4A patch must end with '*** End Patch'")
    ops: list[_FileOp] = []
    op: _FileOp | None = None
    for number, line in enumerate(lines[1:-1], start=2):
        header = next((h for h in _HEADERS if line.startswith(h)), None)
        if header is not None:
            target = line[len(header) :].strip()
            if not target:
                raise _BadInput(f"patch line {number}: {header} needs a path")
            if any(o.path == target for o in ops):
                raise _BadInput(f"patch line {number}: {target} appears twice in the patch")
            op = _FileOp(_HEADERS[header], target)
            ops.append(op)
        elif line.startswith("*** Move to:"):
            raise _BadInput("'*** Move to:' is not supported; use Add File plus Delete File")
        elif op is None:
            if line.strip():
                raise _BadInput(f"patch line {number}: expected a '*** ... File:' header")
        elif op.kind == "delete":
            if line.strip():
                raise _BadInput(f"patch line {number}: a Delete File section takes no lines")
        elif op.kind == "add":
            if not line.startswith("+") and line:
                raise _BadInput(f"patch line {number}: Add File lines must start with '+'")
            op.added.append(line[1:])
        else:
            _parse_update_line(op, line, number)
    if not ops:
        raise _BadInput("the patch names no file")
    for op in ops:
        if op.kind == "update" and not any(c in "+-" for h in op.hunks for c, _ in h.lines):
            raise _BadInput(f"Update File {op.path} has no '+' or '-' lines")
    return ops


def _parse_update_line(op: _FileOp, line: str, number: int) -> None:
    if line.startswith("@@"):
        hint = line[2:].strip().removesuffix("@@").strip()
        op.hunks.append(_Hunk(hint or None))
    elif line.strip() == "*** End of File":
        if op.hunks:
            op.hunks[-1].at_end = True
    elif line[:1] in (" ", "-", "+") or not line:
        if not op.hunks:
            op.hunks.append(_Hunk(None))
        op.hunks[-1].lines.append((line[:1] or " ", line[1:]))
    else:
        raise _BadInput(
            f"patch line {number}: update lines start with ' ', '-', '+' or '@@', got {line!r}"
        )


_NORMALISERS = (lambda s: s, str.rstrip, str.strip)


def _find_block(lines: list[str], block: list[str], start: int, at_end: bool) -> int | None:
    """Where ``block`` sits in ``lines``: exact, then ignoring trailing, then all whitespace."""
    last = len(lines) - len(block)
    if at_end and last >= 0:
        for norm in _NORMALISERS:
            if [norm(x) for x in lines[last:]] == [norm(b) for b in block]:
                return last
    for begin in (start, 0):  # after the previous hunk first: hunks come in file order
        for norm in _NORMALISERS:
            want = [norm(b) for b in block]
            for i in range(begin, last + 1):
                if all(norm(lines[i + j]) == want[j] for j in range(len(want))):
                    return i
    return None


def _find_hint(lines: list[str], hint: str, start: int) -> int | None:
    wanted = hint.strip()
    for test in (lambda s: s.strip() == wanted, lambda s: wanted in s):
        for begin in (start, 0):
            for i in range(begin, len(lines)):
                if test(lines[i]):
                    return i
    return None


def _apply_hunks(text: str, hunks: list[_Hunk], shown: str) -> str:
    """Apply update hunks in order; context lines keep the file's own text."""
    newline = _newline_of(text)
    ends_with_newline = text.endswith("\n") or not text
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if text.endswith("\n") or not text:
        lines.pop()
    cursor = 0
    for number, hunk in enumerate(hunks, start=1):
        anchor = cursor
        if hunk.hint is not None:
            found = _find_hint(lines, hunk.hint, cursor)
            if found is None:
                raise _BadInput(f"{shown}: hunk {number}: '@@ {hunk.hint}' not found in the file")
            anchor = found
        old = [t for c, t in hunk.lines if c != "+"]
        if not old:
            pos = anchor + 1 if hunk.hint is not None and not hunk.at_end else len(lines)
            added = [t for c, t in hunk.lines if c == "+"]
            lines[pos:pos] = added
            cursor = pos + len(added)
            continue
        at = _find_block(lines, old, anchor, hunk.at_end)
        if at is None:
            raise _BadInput(
                f"{shown}: hunk {number} does not match the file (its context and '-' lines, "
                f"starting {old[0]!r}, were not found); re-read the file and retry"
            )
        block: list[str] = []
        j = at
        for c, t in hunk.lines:
            if c == " ":
                block.append(lines[j])
            if c == "+":
                block.append(t)
            else:
                j += 1
        lines[at:j] = block
        cursor = at + len(block)
    body = newline.join(lines)
    return body + newline if ends_with_newline and lines else body


class PatchTool(_FileTool):
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
        mode = _choice_arg(args, "mode", ("replace", "patch"))
        if mode == "patch":
            return await self._run_patch(_str_arg(args, "patch"))
        given = _str_arg(args, "path")
        old = _str_arg(args, "old_string")
        new = _str_arg(args, "new_string")
        replace_all = _bool_arg(args, "replace_all")
        if not old:
            raise _BadInput("old_string is empty; to create or overwrite a file use write_file")
        if old == new:
            raise _BadInput("old_string and new_string are identical; nothing to change")
        path = await self._workspace.aresolve(given, for_write=True)
        shown = self._workspace.display(path)
        before = await _read_text(path, shown)
        after, note = _replace(before, old, new, replace_all)
        await _atomic_write(path, after.encode("utf-8"))
        result: dict[str, Any] = {
            "success": True,
            "diff": _unified_diff(shown, before, after),
            "files_modified": [shown],
            "files_created": [],
            "files_deleted": [],
        }
        if note:
            result["note"] = note
        lint = _lint(path, after)
        if lint is not None:
            result["lint"] = lint
        return result

    async def _run_patch(self, patch: str) -> Any:
        ops = _parse_v4a(patch)
        # Plan every file first so a hunk that does not apply leaves all files untouched.
        plans: list[tuple[_FileOp, Path, str, str | None, str | None]] = []
        for op in ops:
            path = await self._workspace.aresolve(op.path, for_write=True)
            shown = self._workspace.display(path)
            if any(planned == path for _, planned, *_ in plans):
                raise _BadInput(f"{shown} appears twice in the patch; merge its sections")
            apath = anyio.Path(path)
            if op.kind == "add":
                if await apath.exists():
                    raise _BadInput(f"Add File {shown}: it already exists; use Update File")
                body = "\n".join(op.added) + "\n" if op.added else ""
                plans.append((op, path, shown, None, body))
            elif op.kind == "delete":
                plans.append((op, path, shown, await _read_text(path, shown), None))
            else:
                before = await _read_text(path, shown)
                plans.append((op, path, shown, before, _apply_hunks(before, op.hunks, shown)))
        result: dict[str, Any] = {
            "success": True,
            "diff": "",
            "files_modified": [],
            "files_created": [],
            "files_deleted": [],
        }
        diffs: list[str] = []
        lints: dict[str, Any] = {}
        for op, path, shown, old_text, new_text in plans:
            if new_text is None:
                await anyio.Path(path).unlink()
                result["files_deleted"].append(shown)
            else:
                await _atomic_write(path, new_text.encode("utf-8"))
                key = "files_created" if op.kind == "add" else "files_modified"
                result[key].append(shown)
                lint = _lint(path, new_text)
                if lint is not None:
                    lints[shown] = lint
            diffs.append(
                _unified_diff(
                    shown,
                    old_text or "",
                    new_text or "",
                    created=old_text is None,
                    deleted=new_text is None,
                )
            )
        result["diff"] = "".join(diffs)
        if lints:
            result["lint"] = lints
        return result


# -- search_files ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Query:
    root: Path
    target: str
    regex: re.Pattern[str] | None
    name_glob: str | None
    file_glob: str | None
    context: int


@dataclass
class _FileHits:
    """One file's matching lines, and the context lines around them (not themselves hits)."""

    matches: dict[int, str] = field(default_factory=dict)
    context: dict[int, str] = field(default_factory=dict)


def _expand_braces(glob: str) -> list[str]:
    """``*.{ts,tsx}`` -> ``[*.ts, *.tsx]``: models write brace globs, fnmatch has none."""
    match = re.search(r"\{([^{}]*)\}", glob)
    if match is None:
        return [glob]
    head, tail = glob[: match.start()], glob[match.end() :]
    return [g for part in match.group(1).split(",") for g in _expand_braces(head + part + tail)]


def _glob_matches(glob: str, relative: str) -> bool:
    """A glob without '/' matches the file name, with '/' the path below the search root."""
    subject = relative if "/" in glob else relative.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(subject, g) for g in _expand_braces(glob.removeprefix("./")))


def _clip(text: str) -> str:
    return text[:MAX_MATCH_CHARS] + _TRUNCATED if len(text) > MAX_MATCH_CHARS else text


def _scan_dir(directory: Path) -> tuple[list[Path], list[tuple[Path, int]]]:
    """One directory's subdirectories and regular files, without following symlinks.

    Symlinks are skipped as ripgrep skips them by default, which also keeps a search from
    wandering out of the workspace.
    """
    dirs: list[Path] = []
    files: list[tuple[Path, int]] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name in SKIPPED_NAMES or entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    files.append((Path(entry.path), entry.stat(follow_symlinks=False).st_size))
    except OSError:
        pass
    return dirs, files


async def _is_binary(path: Path) -> bool:
    try:
        async with await anyio.open_file(path, "rb") as f:
            return b"\0" in await f.read(BINARY_SNIFF_BYTES)
    except OSError:
        return True


class SearchFilesTool(_FileTool):
    """``search_files``: regex search in file contents, or a glob over file names.

    ``use_ripgrep``: ``None`` uses ``rg`` when it is on ``PATH``, ``False`` always uses the
    pure-Python search, ``True`` insists on ``rg`` (an error result when it is missing).
    Both backends return identical results: same files (hidden included; ``.git``,
    ``node_modules``, symlinks and, for content, binary files and files over 20 MiB
    skipped; ignore files not honoured), same regex dialect (patterns must compile in
    Python; a regex or glob ripgrep rejects falls back to the Python search), results
    sorted by path then line.
    Known divergence: on lines that are not valid UTF-8 ripgrep matches raw bytes while
    Python matches the decoded text.
    """

    SPEC = ToolSpec(
        name="search_files",
        description=(
            "Search the workspace. target='content' (default): lines matching the regex "
            "`pattern` (Python syntax), with `context` lines around each; output_mode "
            "'content' (matches), 'files_only' (file paths) or 'count' (matches per file). "
            "target='files': file paths whose name matches the glob `pattern` (e.g. '*.py'). "
            "`file_glob` narrows the files searched. Page with `limit` and `offset`."
        ),
        parameters={
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regex (content) or glob (files)."},
                "target": {"type": "string", "enum": ["content", "files"], "default": "content"},
                "path": {"type": "string", "default": ".", "description": "Directory or file."},
                "file_glob": {"type": "string", "description": "Only files matching this glob."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "output_mode": {
                    "type": "string",
                    "enum": ["content", "files_only", "count"],
                    "default": "content",
                },
                "context": {"type": "integer", "minimum": 0, "maximum": 10, "default": 0},
            },
            "required": ["pattern"],
        },
        toolset=TOOLSET,
        parallel_safe=True,
        path_access="read",
    )

    def __init__(self, workspace: Workspace, *, use_ripgrep: bool | None = None) -> None:
        super().__init__(workspace)
        self._use_ripgrep = use_ripgrep
        self._rg = shutil.which("rg") if use_ripgrep is not False else None

    async def available(self) -> bool:
        """Unavailable only when ripgrep was insisted on and is not installed."""
        return not (self._use_ripgrep and self._rg is None)

    async def _run(self, args: dict[str, Any]) -> Any:
        pattern = _str_arg(args, "pattern")
        if not pattern:
            raise _BadInput("pattern is empty")
        target = _choice_arg(args, "target", ("content", "files"))
        mode = _choice_arg(args, "output_mode", ("content", "files_only", "count"))
        limit = _int_arg(args, "limit", 50, lo=1, hi=1000)
        offset = _int_arg(args, "offset", 0, lo=0, hi=2**62)
        context = _int_arg(args, "context", 0, lo=0, hi=10)
        file_glob = args.get("file_glob") or None
        if file_glob is not None and not isinstance(file_glob, str):
            raise _BadInput("argument 'file_glob' must be a string")
        regex: re.Pattern[str] | None = None
        if target == "content":
            try:
                regex = re.compile(pattern)
            except re.error as exc:
                raise _BadInput(f"invalid regex {pattern!r}: {exc}") from exc
        root = await self._workspace.aresolve(_str_arg(args, "path", default="."), for_write=False)
        if not await anyio.Path(root).exists():
            raise _BadInput(f"path not found: {self._workspace.display(root)}")
        if self._use_ripgrep and self._rg is None:
            raise _BadInput("ripgrep (rg) was required but is not installed")
        query = _Query(
            root, target, regex, pattern if target == "files" else None, file_glob, context
        )
        if target == "files":
            files = await self._list_files(query)
            return _page({"total_count": len(files)}, "files", files, offset, limit)
        hits = await self._search(query)
        return _render(hits, mode, offset, limit, context)

    # -- file listing

    async def _list_files(self, query: _Query) -> list[str]:
        paths = await self._rg_files(query) if self._rg is not None else None
        if paths is None:
            paths = [p for p, _ in await _walk(query.root)]
        return sorted(self._workspace.display(p) for p in paths if self._selected(query, p))

    def _selected(self, query: _Query, path: Path) -> bool:
        below = path.relative_to(query.root).as_posix() if path != query.root else path.name
        if query.name_glob is not None and not _glob_matches(query.name_glob, below):
            return False
        return query.file_glob is None or _glob_matches(query.file_glob, below)

    # -- content search

    async def _search(self, query: _Query) -> dict[str, _FileHits]:
        if self._rg is not None:
            found = await self._rg_search(query)
            if found is not None:
                return found
        return await self._py_search(query)

    async def _py_search(self, query: _Query) -> dict[str, _FileHits]:
        assert query.regex is not None
        hits: dict[str, _FileHits] = {}
        for path, size in await _walk(query.root):
            if size > MAX_SEARCH_FILE_BYTES or not self._selected(query, path):
                continue
            try:
                data = await anyio.Path(path).read_bytes()
            except OSError:
                continue
            if b"\0" in data[:BINARY_SNIFF_BYTES]:
                continue
            lines = data.decode("utf-8", "replace").split("\n")
            if data.endswith(b"\n"):
                lines.pop()
            numbers = [n for n, line in enumerate(lines, 1) if query.regex.search(line)]
            if not numbers:
                continue
            found = hits[self._workspace.display(path)] = _FileHits()
            for n in numbers:
                found.matches[n] = _clip(lines[n - 1].removesuffix("\r"))
            for n in numbers:
                for k in range(max(1, n - query.context), min(len(lines), n + query.context) + 1):
                    if k not in found.matches:
                        found.context[k] = _clip(lines[k - 1].removesuffix("\r"))
        return hits

    # -- ripgrep

    def _rg_base(self, query: _Query) -> list[str]:
        assert self._rg is not None
        argv = [self._rg, "--no-config", "--hidden", "--no-ignore", "--no-messages"]
        for name in sorted(SKIPPED_NAMES):
            argv += ["--glob", f"!{name}"]
        glob = query.file_glob
        plain = glob is not None and not any(c in glob for c in ("/", "\\", "**", "!"))
        if glob is not None and plain:
            argv += ["--glob", glob]  # prunes early; the Python-side filter decides
        return argv

    async def _run_rg(self, argv: list[str]) -> tuple[int, bytes, bytes]:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                with anyio.CancelScope(shield=True):
                    await proc.wait()
        return proc.returncode or 0, out, err

    async def _rg_files(self, query: _Query) -> list[Path] | None:
        """ripgrep's file list, or ``None`` when it failed outright (a glob it rejects)."""
        argv = [*self._rg_base(query), "--files", "--null", "--", str(query.root)]
        code, out, _ = await self._run_rg(argv)
        if code == 2 and not out:
            return None
        return [Path(os.fsdecode(raw)) for raw in out.split(b"\0") if raw]

    async def _rg_search(self, query: _Query) -> dict[str, _FileHits] | None:
        """ripgrep's hits, or ``None`` when it rejects a regex Python accepts."""
        assert query.regex is not None
        argv = [
            *self._rg_base(query),
            "--json",
            "--text",  # binary files are judged below, exactly as the Python search does
            "--encoding=none",
            f"--max-filesize={MAX_SEARCH_FILE_BYTES}",
            f"--context={query.context}",
            "--regexp",
            query.regex.pattern,
            "--",
            str(query.root),
        ]
        code, out, err = await self._run_rg(argv)
        if code == 2 and (not out or b"regex" in err.lower()):
            return None
        hits: dict[str, _FileHits] = {}
        paths: dict[str, Path] = {}
        for raw in out.splitlines():
            event = json.loads(raw)
            if event.get("type") not in ("match", "context"):
                continue
            data = event["data"]
            path = Path(_rg_text(data["path"], as_path=True))
            if not self._selected(query, path):
                continue
            key = self._workspace.display(path)
            paths[key] = path
            text = _clip(_rg_text(data["lines"]).removesuffix("\n").removesuffix("\r"))
            entry = hits.setdefault(key, _FileHits())
            bucket = entry.matches if event["type"] == "match" else entry.context
            bucket[data["line_number"]] = text
        for key, path in paths.items():
            if not hits[key].matches or await _is_binary(path):
                del hits[key]
        return hits


def _render(
    hits: dict[str, _FileHits], mode: str, offset: int, limit: int, context: int
) -> dict[str, Any]:
    """One page of results in the chosen output mode, sorted by path then line."""
    ordered = sorted(hits)
    total = sum(len(hits[p].matches) for p in ordered)
    if mode == "files_only":
        return _page({"total_count": len(ordered)}, "files", ordered, offset, limit)
    if mode == "count":
        counts = [{"path": p, "count": len(hits[p].matches)} for p in ordered]
        head = {"total_count": total, "file_count": len(ordered)}
        return _page(head, "counts", counts, offset, limit)
    rows: list[dict[str, Any]] = []
    for p in ordered:
        entry = hits[p]
        for n in sorted(entry.matches):
            row: dict[str, Any] = {"path": p, "line": n, "content": entry.matches[n]}
            if context:
                near = [k for k in sorted(entry.context) if abs(k - n) <= context]
                row["context"] = [{"line": k, "content": entry.context[k]} for k in near]
            rows.append(row)
    return _page({"total_count": total}, "matches", rows, offset, limit)


def _rg_text(value: dict[str, str], *, as_path: bool = False) -> str:
    """ripgrep's JSON gives text as ``{"text": ...}``, or ``{"bytes": base64}`` if not UTF-8."""
    if "text" in value:
        return value["text"]
    raw = base64.b64decode(value["bytes"])
    return os.fsdecode(raw) if as_path else raw.decode("utf-8", "replace")


def _page(
    head: dict[str, Any], key: str, items: list[Any], offset: int, limit: int
) -> dict[str, Any]:
    page = items[offset : offset + limit]
    more = offset + limit < len(items)
    result = {**head, key: page, "truncated": more}
    if more:
        result["next_offset"] = offset + limit
    return result


async def _walk(root: Path) -> list[tuple[Path, int]]:
    """Every regular file under ``root`` (or ``root`` itself), with its size.

    One worker-thread hop per directory keeps a large tree cheap without hiding the walk
    in a thread that cancellation could not reach.
    """
    if not await anyio.Path(root).is_dir():
        if not await anyio.Path(root).is_file():
            return []
        return [(root, (await anyio.Path(root).stat()).st_size)]
    found: list[tuple[Path, int]] = []
    pending = [root]
    while pending:
        dirs, files = await anyio.to_thread.run_sync(_scan_dir, pending.pop())
        pending.extend(dirs)
        found.extend(files)
    return found


def file_tools(workspace: Workspace, *, use_ripgrep: bool | None = None) -> list[Tool]:
    """The four ``file`` toolset tools sharing one workspace."""
    return [
        ReadFileTool(workspace),
        WriteFileTool(workspace),
        PatchTool(workspace),
        SearchFilesTool(workspace, use_ripgrep=use_ripgrep),
    ]
