"""Project context files for the system prompt's context tier.

Projects tell agents how to work in them through a file at the repository root. Users
already keep one for some tool, so we read the first family that exists, in the order
Hermes uses: ``.hermes.md``/``HERMES.md`` (nearest, up to the git root), else every
``AGENTS.md`` from the git root down to the working directory, else ``CLAUDE.md``, else
``.cursorrules``. Each file is capped (70% head, 20% tail kept, with a marker saying how
to read the rest) and its YAML frontmatter dropped, so one huge file cannot crowd out
the conversation. The result is rendered once per conversation with the rest of the
prompt.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DEFAULT_MAX_CHARS", "find_context_files", "render_context", "soul_identity"]

DEFAULT_MAX_CHARS = 20_000
HEADER = (
    "# Project Context\n\nThe following project context files have been loaded and should "
    "be followed:\n\n"
)
_FRONTMATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)


def _git_root(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def _chain(cwd: Path) -> list[Path]:
    """Directories from the git root (or cwd alone) down to cwd."""
    root = _git_root(cwd)
    if root is None:
        return [cwd]
    chain = [cwd]
    for parent in cwd.parents:
        chain.append(parent)
        if parent == root:
            break
    return list(reversed(chain))


def find_context_files(cwd: Path) -> list[Path]:
    """The files of the first family that exists, outermost first."""
    cwd = cwd.resolve()
    chain = _chain(cwd)
    for directory in reversed(chain):
        for name in (".hermes.md", "HERMES.md"):
            if (directory / name).is_file():
                return [directory / name]
    agents = [
        d / name for d in chain for name in ("AGENTS.md", "agents.md") if (d / name).is_file()
    ]
    if agents:
        return agents[: len(chain)]
    for name in ("CLAUDE.md", ".cursorrules"):
        if (cwd / name).is_file():
            return [cwd / name]
    return []


def _cap(name: str, text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.7), int(limit * 0.2)
    marker = (
        f"\n\n[...truncated {name}: kept {head}+{tail} of {len(text)} chars. Use read_file "
        "to see the rest.]\n\n"
    )
    return text[:head] + marker + text[-tail:]


def render_context(cwd: Path, *, max_chars: int = DEFAULT_MAX_CHARS) -> str | None:
    """The context-tier block for ``cwd``, or ``None`` when no file applies."""
    parts = []
    for path in find_context_files(cwd):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        body = _FRONTMATTER.sub("", text, count=1).strip()
        if body:
            parts.append(f"## {path.name}\n\n{_cap(path.name, body, max_chars)}")
    return HEADER + "\n\n".join(parts) if parts else None


def soul_identity(home: Path) -> str | None:
    """``$HERMES_HOME/SOUL.md`` replaces the default identity when present."""
    path = home / "SOUL.md"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return _FRONTMATTER.sub("", text, count=1).strip() or None
