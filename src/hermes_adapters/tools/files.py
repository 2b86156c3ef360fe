"""The ``file`` toolset: read_file, write_file, patch and search_files.

These four tools are how a model edits a code base, so each is shaped by what models get
wrong: reads are numbered and paged so a huge file cannot flood the context, writes are
atomic and syntax-checked so a half-written or broken file is noticed at once, patches
tolerate whitespace drift, and search gives the same answer with or without ripgrep.
Every path goes through a :class:`~hermes_adapters.tools.workspace.Workspace`, bad input
comes back as an error result, and all file I/O runs through anyio (its worker-thread
file I/O is the documented exception to "no hidden threads").
"""

from __future__ import annotations

import difflib
import json
import os
import secrets
import stat
import tomllib
import warnings
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import yaml

from hermes_adapters.tools._patching import PatchError, apply_v4a, parse_v4a, replace_text
from hermes_adapters.tools._search import SearchQuery, Searcher
from hermes_adapters.tools.workspace import PathOutsideWorkspace, Workspace
from hermes_core.ports.tools import Tool, ToolContext, ToolResult, ToolSpec, tool_error

__all__ = [
    "PatchTool",
    "ReadFileTool",
    "SearchFilesTool",
    "WriteFileTool",
    "file_tools",
]
