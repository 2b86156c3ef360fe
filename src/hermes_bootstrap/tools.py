"""Building the tool registry from toolset names.

Users pick capabilities by toolset (``file``, ``terminal``, ``coding``...). This module
instantiates the built-in tool adapters those toolsets name, adds the host's own tools,
and hands back the registry plus whatever the tools own (background processes), so the
agent closes them with itself. Tools whose toolset was not selected are never built.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_adapters.tools.approval import Approvals
from hermes_adapters.tools.clarify import ClarifyTool
from hermes_adapters.tools.delegate import DelegateTool
from hermes_adapters.tools.files import file_tools
from hermes_adapters.tools.memory import MemoryTool
from hermes_adapters.tools.session_search import SessionSearchTool
from hermes_adapters.tools.skills import SkillLibrary, skill_tools
from hermes_adapters.tools.ssrf import UrlPolicy
from hermes_adapters.tools.terminal import terminal_tools
from hermes_adapters.tools.todo import TodoTool
from hermes_adapters.tools.web import web_tools
from hermes_adapters.tools.workspace import Workspace
from hermes_core.ports.tools import Tool
from hermes_core.registry import ToolRegistry
from hermes_core.toolsets import resolve_toolsets

__all__ = ["BuiltTools", "ToolOptions", "build_tools"]

log = logging.getLogger("hermes.bootstrap")


@dataclass(frozen=True)
class ToolOptions:
    """Settings the built-in tools take from configuration."""

    home: Path | None = None
    skills_dirs: Sequence[Path] = ()
    allow_private_urls: bool = False
    search_backend: str | None = None
    delegation: Mapping[str, int] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None


@dataclass
class BuiltTools:
    registry: ToolRegistry
    owned: list[Any] = field(default_factory=list)
    unknown_toolsets: tuple[str, ...] = ()
    skills_index: str | None = None


async def build_tools(
    *,
    enabled: Sequence[str] | None,
    disabled: Sequence[str] = (),
    workspace: Path | None = None,
    extra: Sequence[Tool] = (),
    options: ToolOptions | None = None,
) -> BuiltTools:
    """The registry for ``enabled`` minus ``disabled`` toolsets, plus ``extra`` tools.

    ``extra`` tools are always included: the host chose them explicitly.
    """
    options = options or ToolOptions()
    selection = resolve_toolsets(enabled, disabled)
    for name in selection.unknown:
        log.warning("unknown toolset %r ignored", name)
    wanted = set(selection.tools)
    candidates: list[Tool] = []
    owned: list[Any] = []
    skills_index = None
    if wanted & {"read_file", "write_file", "patch", "search_files"}:
        candidates.extend(file_tools(Workspace(workspace)))
    if wanted & {"terminal", "process"}:
        tools, processes = terminal_tools(workspace, Approvals())
        candidates.extend(tools)
        owned.append(processes)
    if wanted & {"skills_list", "skill_view", "skill_manage"} and options.home is not None:
        library = SkillLibrary(options.home / "skills", options.skills_dirs)
        await library.discover()
        candidates.extend(skill_tools(library))
        skills_index = library.index_text() or None
    if wanted & {"web_search", "web_extract"}:
        environ = os.environ if options.environ is None else options.environ
        policy = UrlPolicy(allow_private=options.allow_private_urls)
        candidates.extend(web_tools(environ, policy, options.search_backend))
    delegation = options.delegation
    candidates.extend(
        [
            TodoTool(),
            ClarifyTool(),
            MemoryTool(),
            SessionSearchTool(),
            DelegateTool(
                max_concurrent=delegation.get("max_concurrent_children", 3),
                max_depth=delegation.get("max_spawn_depth", 1),
                max_iterations=delegation.get("max_iterations", 50),
            ),
        ]
    )
    registry = ToolRegistry(t for t in candidates if t.spec.name in wanted)
    for tool in extra:
        registry.register(tool)
    return BuiltTools(registry, owned, selection.unknown, skills_index)
