"""Path confinement for the file tools: every model-supplied path goes through here.

A path argument is model output, so it is untrusted. The checks follow the reference
filesystem MCP server and the bugs that keep recurring elsewhere (WIRE.md §5): a lexical
check alone is bypassed by symlinks, and ``startswith(root)`` without a separator lets
``/ws_evil`` pass for ``/ws``. So a path is normalised, checked by path *components*, then
``realpath``-ed (which walks the existing ancestors of a not-yet-existing leaf) and checked
again; the real path is what the tools open, so what was checked is what is used.

Left open: a directory swapped for a symlink between the check and the open. Reads open the
leaf with ``O_NOFOLLOW`` and writes rename a fresh temp file over the leaf (a rename never
follows a symlink), but an *intermediate* directory swap would need dir-fd ``*at`` calls.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio.to_thread

from hermes_core.errors import ToolError

__all__ = ["PathOutsideWorkspace", "Workspace"]


class PathOutsideWorkspace(ToolError):
    """A path argument was refused: it leaves the workspace or cannot name a file at all.

    ``path`` is the argument as given, ``reason`` the short cause shown to the model.
    """

    def __init__(self, path: str, root: Path | None, reason: str) -> None:
        where = f"the workspace {root}" if root is not None else "any usable location"
        super().__init__(
            f"path {path!r} is refused: {reason}; it must name a file inside {where} "
            "(use a path relative to the workspace)"
        )
        self.path = path
        self.reason = reason


class Workspace:
    """Where the file tools may read and write: one root directory, or anywhere (``None``).

    Relative paths are taken relative to the root (to the process cwd when unconfined).
    The root itself is ``realpath``-ed once, so a workspace reached through a symlink
    still works, and absolute paths spelled through either form are accepted.
    """

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        if root is None:
            self._given: Path | None = None
            self._root: Path | None = None
        else:
            self._given = Path(os.path.abspath(root))
            self._root = Path(os.path.realpath(root))

    @property
    def root(self) -> Path | None:
        """The real (symlink-free) root, or ``None`` when paths are not confined."""
        return self._root

    def resolve(self, path: str, *, for_write: bool) -> Path:
        """The real absolute path ``path`` names, after checking it stays inside the root.

        Does blocking ``realpath`` calls; async callers use :meth:`aresolve`.

        Raises:
            PathOutsideWorkspace: NUL byte, ``..`` escape, absolute path elsewhere, a
                symlink (leaf or intermediate) leading out, or writing the root itself.
        """
        if "\x00" in path:
            raise PathOutsideWorkspace(path, self._root, "it contains a NUL byte")
        if self._root is None or self._given is None:
            base = Path(os.path.expanduser(path))
            return Path(os.path.realpath(base if base.is_absolute() else Path.cwd() / base))
        raw = Path(path)
        candidate = raw if raw.is_absolute() else self._root / raw
        lexical = Path(os.path.normpath(candidate))
        if not (lexical.is_relative_to(self._root) or lexical.is_relative_to(self._given)):
            reason = "it is outside the workspace" if raw.is_absolute() else "'..' escapes it"
            raise PathOutsideWorkspace(path, self._root, reason)
        # realpath resolves every existing component (intermediate symlinks included) and
        # keeps a missing tail as written, so a new leaf under a symlinked dir is judged
        # by where that dir really is.
        real = Path(os.path.realpath(lexical))
        if not real.is_relative_to(self._root):
            raise PathOutsideWorkspace(path, self._root, "a symlink leads outside")
        if for_write and real == self._root:
            raise PathOutsideWorkspace(path, self._root, "it is the workspace root itself")
        return real

    async def aresolve(self, path: str, *, for_write: bool) -> Path:
        """:meth:`resolve` in anyio's worker thread: ``realpath`` is filesystem I/O."""
        return await anyio.to_thread.run_sync(_resolve, self, path, for_write)

    def display(self, path: Path) -> str:
        """How a path is shown to the model: relative to the root (or cwd) when inside it."""
        base = self._root if self._root is not None else Path.cwd()
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
        return str(path)

    def __repr__(self) -> str:
        return f"Workspace({str(self._root) if self._root else None!r})"


def _resolve(workspace: Workspace, path: str, for_write: bool) -> Path:
    return workspace.resolve(path, for_write=for_write)
