"""Building the tool registry from toolset names.

Users pick capabilities by toolset (``file``, ``terminal``, ``coding``...). This module
instantiates the built-in tool adapters those toolsets name, adds the host's own tools,
and hands back the registry plus whatever the tools own (background processes), so the
agent closes them with itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_adapters.tools.approval import Approvals
from hermes_adapters.tools.clarify import ClarifyTool
from hermes_adapters.tools.delegate import DelegateTool
from hermes_adapters.tools.files import file_tools
from hermes_adapters.tools.terminal import terminal_tools
from hermes_adapters.tools.todo import TodoTool
from hermes_adapters.tools.workspace import Workspace
from hermes_core.ports.tools import Tool
from hermes_core.registry import ToolRegistry
from hermes_core.toolsets import resolve_toolsets

__all__ = ["BuiltTools", "build_tools"]

log = logging.getLogger("hermes.bootstrap")


@dataclass
class BuiltTools:
    registry: ToolRegistry
    owned: list[Any] = field(default_factory=list)
    unknown_toolsets: tuple[str, ...] = ()


async def build_tools(
    *,
    enabled: Sequence[str] | None,
    disabled: Sequence[str] = (),
    workspace: Path | None = None,
    extra: Sequence[Tool] = (),
) -> BuiltTools:
    """The registry for ``enabled`` minus ``disabled`` toolsets, plus ``extra`` tools.

    Built-in tools are created only when one of their toolsets is selected; ``extra`` tools
    are always included (the host chose them explicitly).
    """
    selection = resolve_toolsets(enabled, disabled)
    for name in selection.unknown:
        log.warning("unknown toolset %r ignored", name)
    wanted = set(selection.tools)
    candidates: list[Tool] = []
    owned: list[Any] = []
    if wanted & {"read_file", "write_file", "patch", "search_files"}:
        candidates.extend(file_tools(Workspace(workspace)))
    if wanted & {"terminal", "process"}:
        tools, processes = terminal_tools(workspace, Approvals())
        candidates.extend(tools)
        owned.append(processes)
    candidates.extend([TodoTool(), ClarifyTool(), DelegateTool()])
    registry = ToolRegistry(t for t in candidates if t.spec.name in wanted)
    for tool in extra:
        registry.register(tool)
    return BuiltTools(registry, owned, selection.unknown)
