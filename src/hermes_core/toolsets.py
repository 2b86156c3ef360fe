"""Toolsets: named groups of tools, the unit in which users choose capabilities.

Users and hosts do not list tool names; they enable capabilities by toolset name
(``enabled_toolsets=["file", "terminal"]``), so this module maps names to tool names.
A toolset lists tools of its own and may *include* other toolsets, and composites such as
``debugging`` or ``safe`` expand recursively. Includes may form diamonds or cycles (a
dynamic toolset can include anything), so expansion keeps a visited set: a toolset
reached a second time contributes nothing, and expansion always terminates.

The static table (:data:`STATIC_TOOLSETS`) is fixed at import time. MCP servers add
toolsets at runtime (:func:`mcp_toolset`: ``mcp-<server>``, aliased by the raw server
name); callers pass those as a ``dynamic`` mapping, so nothing here is global or mutable.
A static toolset always wins over a dynamic one of the same name: a server cannot take
over a built-in name.

Everything here is pure: frozen data and functions, no I/O. Which tools are actually
*available* (credentials, binaries) is the tool registry's business, applied after this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "ALL_TOOLSETS",
    "STATIC_TOOLSETS",
    "Toolset",
    "ToolsetSelection",
    "is_broad_toolset",
    "mcp_toolset",
    "resolve_toolset",
    "resolve_toolsets",
    "toolset_names",
    "toolset_of",
]

ALL_TOOLSETS: frozenset[str] = frozenset({"all", "*"})
"""Pseudo-toolset names meaning "every toolset, static and dynamic"."""

MCP_TOOLSET_PREFIX = "mcp-"
HERMES_TOOLSET_PREFIX = "hermes-"


@dataclass(frozen=True, slots=True)
class Toolset:
    """A named group of tools.

    Attributes:
        name: the name users select it by.
        description: one line for humans (``hermes tools``, docs).
        tools: tool names listed directly by this toolset.
        includes: names of other toolsets whose tools this one also grants.
        posture: a broad working posture (``coding``) rather than one capability;
            disabling it removes only what narrower enabled toolsets do not grant
            (see :func:`resolve_toolsets`).
    """

    name: str
    description: str
    tools: tuple[str, ...]
    includes: tuple[str, ...] = ()
    posture: bool = False


@dataclass(frozen=True, slots=True)
class ToolsetSelection:
    """The outcome of :func:`resolve_toolsets`.

    Attributes:
        tools: the selected tool names, sorted and unique (a stable order keeps the
            tool list byte-identical across turns, which prompt caching needs).
        unknown: requested toolset names (enabled or disabled) that matched nothing,
            in first-seen order, for the caller to warn about.
    """

    tools: tuple[str, ...]
    unknown: tuple[str, ...] = ()


# --- the static table (REFERENCE.md §4) ------------------------------------------------

_WEB = ("web_search", "web_extract")
_TERMINAL = ("terminal", "process")
_FILE = ("read_file", "write_file", "patch", "search_files")
_SKILLS = ("skills_list", "skill_view", "skill_manage")
_BROWSER = (
    "browser_navigate",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_scroll",
    "browser_back",
    "browser_press",
    "browser_close",
    "browser_get_images",
    "browser_vision",
    "browser_console",
    "browser_wait",
)
_CODING = (
    *_WEB,
    *_TERMINAL,
    *_FILE,
    "vision_analyze",
    *_SKILLS,
    *_BROWSER,
    "todo",
    "memory",
    "session_search",
    "clarify",
    "delegate_task",
)
# The upstream _HERMES_CORE_TOOLS also lists 6 bfl_flux3 image tools, 4 ha_* (Home
# Assistant) tools and computer_use; Hermes ships none of them, so they are left out.
_HERMES_CLI = (*_CODING, "image_generate", "text_to_speech", "execute_code")


def _table(*toolsets: Toolset) -> Mapping[str, Toolset]:
    return MappingProxyType({t.name: t for t in toolsets})


STATIC_TOOLSETS: Mapping[str, Toolset] = _table(
    Toolset("web", "Web search and page extraction", _WEB),
    Toolset("search", "Web search only", ("web_search",)),
    Toolset("vision", "Image analysis", ("vision_analyze",)),
    Toolset("image_gen", "Image generation", ("image_generate",)),
    Toolset("terminal", "Shell commands and background processes", _TERMINAL),
    Toolset("file", "Read, write, patch and search files", _FILE),
    Toolset("skills", "List, view and manage skills", _SKILLS),
    Toolset("browser", "Browser automation (plus web search)", (*_BROWSER, "web_search")),
    Toolset("todo", "Task list for the current session", ("todo",)),
    Toolset("memory", "Persistent memory and user profile", ("memory",)),
    Toolset("session_search", "Search past sessions", ("session_search",)),
    Toolset("clarify", "Ask the user a clarifying question", ("clarify",)),
    Toolset("delegation", "Delegate tasks to child agents", ("delegate_task",)),
    Toolset("tts", "Text to speech", ("text_to_speech",)),
    Toolset("code_execution", "Run code in a sandbox", ("execute_code",)),
    Toolset("debugging", "Debugging: terminal, web and files", _TERMINAL, ("web", "file")),
    Toolset("safe", "No shell or file access", (), ("web", "vision", "image_gen")),
    Toolset("coding", "Software engineering posture", _CODING, posture=True),
    Toolset("hermes-cli", "Everything the interactive CLI offers", _HERMES_CLI),
)
"""Built-in toolsets by name (read-only)."""


# --- resolution ------------------------------------------------------------------------


def _lookup(name: str, dynamic: Mapping[str, Toolset] | None) -> Toolset | None:
    found = STATIC_TOOLSETS.get(name)
    if found is None and dynamic is not None:
        found = dynamic.get(name)
    return found


def toolset_names(dynamic: Mapping[str, Toolset] | None = None) -> list[str]:
    """Every known toolset name, static and dynamic, sorted (``all``/``*`` excluded)."""
    names = set(STATIC_TOOLSETS)
    if dynamic is not None:
        names.update(dynamic)
    return sorted(names)


def _expand(roots: Iterable[str], dynamic: Mapping[str, Toolset] | None) -> set[str]:
    """Tools reachable from ``roots`` through includes; unknown names add nothing."""
    tools: set[str] = set()
    visited: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in visited:
            continue  # a revisit contributes nothing: cycles and diamonds terminate
        visited.add(name)
        if name in ALL_TOOLSETS:
            stack.extend(toolset_names(dynamic))
            continue
        toolset = _lookup(name, dynamic)
        if toolset is None:
            continue
        tools.update(toolset.tools)
        stack.extend(toolset.includes)
    return tools


def resolve_toolset(name: str, dynamic: Mapping[str, Toolset] | None = None) -> list[str]:
    """The tool names a toolset grants, following includes, sorted and unique.

    ``all`` and ``*`` grant every toolset's tools, static and dynamic. An unknown name
    resolves to ``[]``; :func:`resolve_toolsets` reports such names so the caller can
    warn. A static toolset shadows a dynamic one of the same name.
    """
    return sorted(_expand((name,), dynamic))


def is_broad_toolset(name: str, dynamic: Mapping[str, Toolset] | None = None) -> bool:
    """Whether ``name`` is a broad toolset: ``all``/``*``, ``hermes-*`` or a posture."""
    if name in ALL_TOOLSETS or name.startswith(HERMES_TOOLSET_PREFIX):
        return True
    toolset = _lookup(name, dynamic)
    return toolset is not None and toolset.posture


def _is_known(name: str, dynamic: Mapping[str, Toolset] | None) -> bool:
    return name in ALL_TOOLSETS or _lookup(name, dynamic) is not None


def resolve_toolsets(
    enabled: Iterable[str] | None,
    disabled: Iterable[str] | None = None,
    dynamic: Mapping[str, Toolset] | None = None,
) -> ToolsetSelection:
    """Select tools from enabled and disabled toolset names.

    1. ``enabled=None`` means every toolset; otherwise the union of the enabled ones.
    2. Each disabled toolset's tools are subtracted. A disabled *narrow* toolset removes
       all of its tools, even ones an enabled toolset also grants (disabling wins).
       A disabled *broad* toolset (``all``/``*``, ``hermes-*`` or ``posture=True``, see
       :func:`is_broad_toolset`) removes only its non-core tools, where the core is what
       the explicitly enabled narrow toolsets grant. So ``enabled=["file", "terminal"],
       disabled=["coding"]`` keeps the file and terminal tools and drops nothing else
       they asked for, while ``enabled=None, disabled=["coding"]`` drops every coding
       tool, since nothing narrower was asked for explicitly.

    Names that match no toolset, static or dynamic, are skipped and listed in
    :attr:`ToolsetSelection.unknown`.
    """
    unknown: dict[str, None] = {}
    if enabled is None:
        enabled_names: list[str] = ["all"]
        explicit_narrow: list[str] = []
    else:
        enabled_names = list(enabled)
        explicit_narrow = [n for n in enabled_names if not is_broad_toolset(n, dynamic)]
    for name in enabled_names:
        if not _is_known(name, dynamic):
            unknown.setdefault(name)
    selected = _expand(enabled_names, dynamic)
    core = _expand(explicit_narrow, dynamic)

    for name in disabled or ():
        if not _is_known(name, dynamic):
            unknown.setdefault(name)
            continue
        removed = _expand((name,), dynamic)
        if is_broad_toolset(name, dynamic):
            removed -= core
        selected -= removed
    return ToolsetSelection(tools=tuple(sorted(selected)), unknown=tuple(unknown))


def toolset_of(tool_name: str, dynamic: Mapping[str, Toolset] | None = None) -> list[str]:
    """Names of the toolsets that grant ``tool_name`` (directly or through includes).

    Sorted; ``all``/``*`` are not listed. An unknown tool gives ``[]``.
    """
    return [n for n in toolset_names(dynamic) if tool_name in _expand((n,), dynamic)]


# --- dynamic toolsets ------------------------------------------------------------------


def mcp_toolset(server_name: str, tool_names: Iterable[str]) -> dict[str, Toolset]:
    """The toolsets an MCP server adds: ``mcp-<server>`` and the raw server name.

    The alias grants the same tools. It is left out when the raw name would shadow a
    static toolset or ``all``/``*`` (a server named ``web`` gets only ``mcp-web``).
    Tool names are kept in first-seen order with duplicates dropped; they are expected
    to be the registered (``mcp__<server>__<tool>``) names.

    Raises:
        ValueError: ``server_name`` is empty.
    """
    if not server_name:
        raise ValueError("an MCP server name must not be empty")
    tools = tuple(dict.fromkeys(tool_names))
    name = MCP_TOOLSET_PREFIX + server_name
    result = {name: Toolset(name, f"Tools of MCP server {server_name!r}", tools)}
    if server_name not in STATIC_TOOLSETS and server_name not in ALL_TOOLSETS:
        result[server_name] = Toolset(server_name, f"Alias of {name}", tools)
    return result
