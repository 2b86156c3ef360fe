"""The ``file`` toolset: read_file, write_file, patch and search_files.

These four tools are how a model edits a code base, so each is shaped by what models get
wrong: reads are numbered and paged so a huge file cannot flood the context, writes are
atomic and syntax-checked so a half-written or broken file is noticed at once, patches
tolerate whitespace drift, and search gives the same answer with or without ripgrep.
Every path goes through a :class:`~hermes_adapters.tools.workspace.Workspace`, bad input
comes back as an error result (never an exception), and all file I/O runs through anyio,
whose worker-thread file I/O is the documented exception to "no hidden threads".

This module is the public surface; the work is done in private modules, one job each:

* ``_common``: the shared tool base class, argument checks and binary sniffing;
* ``_read``: :class:`ReadFileTool`;
* ``_write``: :class:`WriteFileTool`, and the atomic write and lint check ``patch`` reuses;
* ``_patching``: replace-mode matching and the V4A patch parser/applier (pure functions);
* ``_patch_tool``: :class:`PatchTool`;
* ``_search``: :class:`SearchFilesTool` with its ripgrep and pure-Python backends.
"""

from __future__ import annotations

from hermes_adapters.tools._patch_tool import PatchTool
from hermes_adapters.tools._read import ReadFileTool
from hermes_adapters.tools._search import SearchFilesTool
from hermes_adapters.tools._write import WriteFileTool
from hermes_adapters.tools.workspace import Workspace
from hermes_core.ports.tools import Tool

__all__ = [
    "PatchTool",
    "ReadFileTool",
    "SearchFilesTool",
    "WriteFileTool",
    "file_tools",
]


def file_tools(workspace: Workspace, *, use_ripgrep: bool | None = None) -> list[Tool]:
    """The four ``file`` toolset tools sharing one workspace."""
    return [
        ReadFileTool(workspace),
        WriteFileTool(workspace),
        PatchTool(workspace),
        SearchFilesTool(workspace, use_ripgrep=use_ripgrep),
    ]
