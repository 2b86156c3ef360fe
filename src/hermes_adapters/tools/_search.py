"""``search_files``: content search and file listing, with or without ripgrep.

Kept apart because it is the one file tool with two backends: ``rg`` when it is installed,
a pure-Python walk otherwise. Both must give the model the same answer, so everything that
decides a result (which files count, the regex dialect, the size and binary cut-offs,
sorting and paging) is shared here, and ripgrep only finds candidates that the same
Python-side filter then judges. A regex or glob ripgrep rejects falls back to the Python
search rather than failing.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from hermes_adapters.tools._common import (
    BINARY_SNIFF_BYTES,
    MAX_OFFSET,
    TOOLSET,
    BadInput,
    FileTool,
    choice_arg,
    clip,
    int_arg,
    looks_binary,
    str_arg,
)
from hermes_adapters.tools.workspace import Workspace
from hermes_core.ports.tools import ToolSpec

__all__ = ["MAX_MATCH_CHARS", "MAX_SEARCH_FILE_BYTES", "SKIPPED_NAMES", "SearchFilesTool"]

MAX_SEARCH_FILE_BYTES = 20 * 1024 * 1024
"""Content search skips larger files, in both backends, so results stay identical."""
MAX_MATCH_CHARS = 1000
"""Longer matching or context lines are cut."""
SKIPPED_NAMES = frozenset({".git", "node_modules"})
"""Directory and file names neither backend descends into or reports."""


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
    return clip(text, MAX_MATCH_CHARS)


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
            return looks_binary(await f.read(BINARY_SNIFF_BYTES))
    except OSError:
        return True


class SearchFilesTool(FileTool):
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
        pattern = str_arg(args, "pattern")
        if not pattern:
            raise BadInput("pattern is empty")
        target = choice_arg(args, "target", ("content", "files"))
        mode = choice_arg(args, "output_mode", ("content", "files_only", "count"))
        limit = int_arg(args, "limit", 50, lo=1, hi=1000)
        offset = int_arg(args, "offset", 0, lo=0, hi=MAX_OFFSET)
        context = int_arg(args, "context", 0, lo=0, hi=10)
        file_glob = args.get("file_glob") or None
        if file_glob is not None and not isinstance(file_glob, str):
            raise BadInput("argument 'file_glob' must be a string")
        regex: re.Pattern[str] | None = None
        if target == "content":
            try:
                regex = re.compile(pattern)
            except re.error as exc:
                raise BadInput(f"invalid regex {pattern!r}: {exc}") from exc
        root = await self._workspace.aresolve(str_arg(args, "path", default="."), for_write=False)
        if not await anyio.Path(root).exists():
            raise BadInput(f"path not found: {self._workspace.display(root)}")
        if self._use_ripgrep and self._rg is None:
            raise BadInput("ripgrep (rg) was required but is not installed")
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
            if looks_binary(data):
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
    aroot = anyio.Path(root)
    if not await aroot.is_dir():
        if not await aroot.is_file():
            return []
        return [(root, (await aroot.stat()).st_size)]
    found: list[tuple[Path, int]] = []
    pending = [root]
    while pending:
        dirs, files = await anyio.to_thread.run_sync(_scan_dir, pending.pop())
        pending.extend(dirs)
        found.extend(files)
    return found
