"""``read_file``: numbered, paged reads that a huge file or a minified line cannot flood.

Kept apart because reading is the one file tool that must work on files of any size: the
file is streamed once in bounded memory (:class:`_LineWindow`), counting every line while
keeping only the requested window, and the tool caps its own output instead of leaving
that to the engine's truncation, so the model always gets a ``next_offset`` to page on.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import anyio

from hermes_adapters.tools._common import (
    BINARY_SNIFF_BYTES,
    MAX_OFFSET,
    TOOLSET,
    FileTool,
    clip,
    int_arg,
    looks_binary,
    open_nofollow,
    str_arg,
)
from hermes_core.ports.tools import ToolResult, ToolSpec, tool_error

__all__ = ["MAX_LINE_CHARS", "MAX_READ_CHARS", "MAX_READ_LINES", "ReadFileTool"]

MAX_READ_LINES = 2000
"""The most lines one read_file call returns; the model pages on with ``offset``."""
MAX_LINE_CHARS = 2000
"""Longer lines are cut: one minified line must not use up the whole read."""
MAX_READ_CHARS = 100_000
"""read_file caps its own output here (its spec opts out of the engine's truncation)."""
_CHUNK = 1 << 20


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
            entry = f"{number}|{clip(text, MAX_LINE_CHARS)}"
            if self.lines and self._chars + len(entry) + 1 > MAX_READ_CHARS:
                self.next_offset = number
            else:
                self.lines.append(entry)
                self._chars += len(entry) + 1
        self._partial.clear()
        self._open = False


class ReadFileTool(FileTool):
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
        given = str_arg(args, "path")
        offset = int_arg(args, "offset", 1, lo=1, hi=MAX_OFFSET)
        limit = int_arg(args, "limit", MAX_READ_LINES, lo=1, hi=MAX_READ_LINES)
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
        async with await anyio.open_file(path, "rb", opener=open_nofollow) as f:
            head = await f.read(BINARY_SNIFF_BYTES)
            if looks_binary(head):
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
