"""What the four ``file`` tools share: the tool base class, argument checks and file sniffing.

The tools differ in what they do but not in how they fail: every one takes a JSON object,
checks its arguments the same way (a bad value is a :class:`BadInput` the model can fix,
an integer above its maximum is clamped because models overshoot), and turns bad input,
a path outside the workspace or an ``OSError`` into an error result instead of an
exception. Keeping that in one place is what makes the four tools answer alike.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from hermes_adapters.tools.workspace import PathOutsideWorkspace, Workspace
from hermes_core.ports.tools import ToolContext, ToolResult, ToolSpec, tool_error

__all__ = [
    "BINARY_SNIFF_BYTES",
    "MAX_OFFSET",
    "TOOLSET",
    "BadInput",
    "FileTool",
    "bool_arg",
    "choice_arg",
    "clip",
    "int_arg",
    "looks_binary",
    "open_nofollow",
    "str_arg",
]

TOOLSET = "file"
BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this much of a file's head marks it binary (git and ripgrep do the same)."""
MAX_OFFSET = 2**62
"""The clamp for paging offsets: any larger value is simply past the end."""
_TRUNCATED = "... [truncated]"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class BadInput(Exception):
    """Raised inside a tool for input the model must fix; turned into an error result."""

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.extra = extra


# -- argument checking -----------------------------------------------------------------


def str_arg(args: dict[str, Any], name: str, *, default: str | None = None) -> str:
    value = args.get(name)
    if value is None:
        value = default
    if value is None:
        raise BadInput(f"missing required argument {name!r}")
    if not isinstance(value, str):
        raise BadInput(f"argument {name!r} must be a string, got {type(value).__name__}")
    return value


def int_arg(args: dict[str, Any], name: str, default: int, *, lo: int, hi: int) -> int:
    """An integer argument; below ``lo`` is an error, above ``hi`` is clamped (models overshoot)."""
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"argument {name!r} must be an integer, got {value!r}")
    if value < lo:
        raise BadInput(f"argument {name!r} must be at least {lo}, got {value}")
    return min(int(value), hi)


def bool_arg(args: dict[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if not isinstance(value, bool):
        raise BadInput(f"argument {name!r} must be true or false, got {value!r}")
    return value


def choice_arg(args: dict[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = args.get(name) or choices[0]
    if value not in choices:
        raise BadInput(f"argument {name!r} must be one of {', '.join(choices)}; got {value!r}")
    return str(value)


# -- file and text helpers -------------------------------------------------------------


def open_nofollow(path: str, flags: int) -> int:
    """Opener refusing a symlink leaf swapped in after the workspace check."""
    return os.open(path, flags | _NOFOLLOW)


def looks_binary(head: bytes) -> bool:
    """Whether a file whose content starts with ``head`` is binary (a NUL in the sniff window)."""
    return b"\0" in head[:BINARY_SNIFF_BYTES]


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked when cut."""
    return text[:limit] + _TRUNCATED if len(text) > limit else text


# -- the common tool shape -------------------------------------------------------------


class FileTool:
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
        except BadInput as exc:
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
