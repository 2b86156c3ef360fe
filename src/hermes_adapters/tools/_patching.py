"""The text surgery behind ``patch``: replace-mode matching and the V4A patch format.

Pure functions on strings, no I/O, so every matching rule can be tested and reasoned about
without a file system. The rules answer what models get wrong when they edit:

* :func:`replace` tries the exact ``old_string`` first and only when that finds nothing
  matches line by line ignoring leading and trailing whitespace (right lines, wrong
  indentation), re-indenting the replacement to the file's indentation;
* :func:`parse_v4a` reads a V4A patch (Add, Delete and Update File; no Move) into
  one :class:`FileOp` per file, refusing malformed input with a message naming the line;
* :func:`apply_hunks` places each hunk after the previous one (hunks come in file order)
  at its ``@@`` hint, matching exactly, then ignoring trailing, then all whitespace, and
  keeps the file's own newline style and final newline.

Input the model must fix raises :class:`~hermes_adapters.tools._common.BadInput`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from hermes_adapters.tools._common import BadInput

__all__ = ["FileOp", "Hunk", "apply_hunks", "parse_v4a", "replace"]

_Normaliser = Callable[[str], str]
_NORMALISERS: tuple[_Normaliser, ...] = (lambda s: s, str.rstrip, str.strip)
"""Ways to compare a line, strictest first."""


def _trim_blank_edges(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _matches_at(lines: list[str], at: int, want: list[str], norm: _Normaliser) -> bool:
    """Whether ``lines`` from ``at`` on, normalised by ``norm``, equal ``want``."""
    return all(norm(lines[at + j]) == w for j, w in enumerate(want))


# -- replace mode ----------------------------------------------------------------------


def replace(text: str, old: str, new: str, replace_all: bool) -> tuple[str, str | None]:
    """Exact replacement first; the whitespace-tolerant match only when exact finds nothing.

    Returns the new text and a note for the model when the loose match was used.
    """
    count = text.count(old)
    if count > 1 and not replace_all:
        raise BadInput(
            f"old_string occurs {count} times; include more surrounding lines to make it "
            "unique, or set replace_all=true",
            match_count=count,
        )
    if count:
        return text.replace(old, new, -1 if replace_all else 1), None
    updated, matched = _replace_loosely(text, old, new, replace_all)
    return updated, f"matched {matched} place(s) ignoring whitespace differences"


def _replace_loosely(text: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    """Replace ``old`` matched line by line ignoring leading/trailing whitespace.

    The fallback for the commonest model slip: right lines, wrong indentation or trailing
    spaces. The replacement is re-indented by the difference between the file's indentation
    and ``old``'s, and joined with the file's own newline style.
    """
    old_lines = _trim_blank_edges(old.split("\n"))
    want = [line.strip() for line in old_lines]
    if not want:
        raise BadInput("old_string is blank")
    lines = text.split("\n")
    size = len(want)
    starts: list[int] = []
    i = 0
    while i + size <= len(lines):
        if _matches_at(lines, i, want, str.strip):
            starts.append(i)
            i += size
        else:
            i += 1
    if not starts:
        raise BadInput(
            "old_string was not found in the file, even ignoring whitespace; re-read the file "
            "with read_file and copy the exact text"
        )
    if len(starts) > 1 and not replace_all:
        raise BadInput(
            f"old_string matches {len(starts)} places (ignoring whitespace); include more "
            "surrounding lines to make it unique, or set replace_all=true"
        )
    old_indent = _indent_of(old_lines[0])
    new_lines = _trim_blank_edges(new.split("\n"))
    for start in reversed(starts):
        crlf = lines[start + size - 1].endswith("\r")
        file_indent = _indent_of(lines[start])
        block = []
        for line in new_lines:
            if not line.strip():
                line = ""
            elif line.startswith(old_indent):
                line = file_indent + line[len(old_indent) :]
            block.append(line + "\r" if crlf else line)
        lines[start : start + size] = block
    return "\n".join(lines), len(starts)


# -- V4A patch mode: parsing -----------------------------------------------------------


@dataclass
class Hunk:
    """One ``@@`` section of an Update File: its hint and its (prefix, text) lines."""

    hint: str | None
    lines: list[tuple[str, str]] = field(default_factory=list)
    at_end: bool = False


@dataclass
class FileOp:
    """One file's section of a patch: the hunks of an update, or the lines of an add."""

    kind: Literal["add", "delete", "update"]
    path: str
    hunks: list[Hunk] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


_HEADERS: dict[str, Literal["add", "delete", "update"]] = {
    "*** Add File:": "add",
    "*** Delete File:": "delete",
    "*** Update File:": "update",
}


def parse_v4a(patch: str) -> list[FileOp]:
    """Parse a V4A patch block into file operations (a practical subset: no Move)."""
    lines = _trim_blank_edges([line.removesuffix("\r") for line in patch.split("\n")])
    if not lines or lines[0].strip() != "*** Begin Patch":
        raise BadInput("a V4A patch must start with '*** Begin Patch'")
    if lines[-1].strip() != "*** End Patch":
        raise BadInput("a V4A patch must end with '*** End Patch'")
    ops: list[FileOp] = []
    op: FileOp | None = None
    for number, line in enumerate(lines[1:-1], start=2):
        header = next((h for h in _HEADERS if line.startswith(h)), None)
        if header is not None:
            target = line[len(header) :].strip()
            if not target:
                raise BadInput(f"patch line {number}: {header} needs a path")
            if any(o.path == target for o in ops):
                raise BadInput(f"patch line {number}: {target} appears twice in the patch")
            op = FileOp(_HEADERS[header], target)
            ops.append(op)
        elif line.startswith("*** Move to:"):
            raise BadInput("'*** Move to:' is not supported; use Add File plus Delete File")
        elif op is None:
            if line.strip():
                raise BadInput(f"patch line {number}: expected a '*** ... File:' header")
        elif op.kind == "delete":
            if line.strip():
                raise BadInput(f"patch line {number}: a Delete File section takes no lines")
        elif op.kind == "add":
            if not line.startswith("+") and line:
                raise BadInput(f"patch line {number}: Add File lines must start with '+'")
            op.added.append(line[1:])
        else:
            _parse_update_line(op, line, number)
    if not ops:
        raise BadInput("the patch names no file")
    for op in ops:
        if op.kind == "update" and not any(c in "+-" for h in op.hunks for c, _ in h.lines):
            raise BadInput(f"Update File {op.path} has no '+' or '-' lines")
    return ops


def _parse_update_line(op: FileOp, line: str, number: int) -> None:
    if line.startswith("@@"):
        hint = line[2:].strip().removesuffix("@@").strip()
        op.hunks.append(Hunk(hint or None))
    elif line.strip() == "*** End of File":
        if op.hunks:
            op.hunks[-1].at_end = True
    elif line[:1] in (" ", "-", "+") or not line:
        if not op.hunks:
            op.hunks.append(Hunk(None))
        op.hunks[-1].lines.append((line[:1] or " ", line[1:]))
    else:
        raise BadInput(
            f"patch line {number}: update lines start with ' ', '-', '+' or '@@', got {line!r}"
        )


# -- V4A patch mode: applying ----------------------------------------------------------


def _find_block(lines: list[str], block: list[str], start: int, at_end: bool) -> int | None:
    """Where ``block`` sits in ``lines``: exact, then ignoring trailing, then all whitespace."""
    last = len(lines) - len(block)
    if at_end and last >= 0:
        for norm in _NORMALISERS:
            if _matches_at(lines, last, [norm(b) for b in block], norm):
                return last
    for begin in (start, 0):  # after the previous hunk first: hunks come in file order
        for norm in _NORMALISERS:
            want = [norm(b) for b in block]
            for i in range(begin, last + 1):
                if _matches_at(lines, i, want, norm):
                    return i
    return None


def _find_hint(lines: list[str], hint: str, start: int) -> int | None:
    wanted = hint.strip()
    for test in (lambda s: s.strip() == wanted, lambda s: wanted in s):
        for begin in (start, 0):
            for i in range(begin, len(lines)):
                if test(lines[i]):
                    return i
    return None


def apply_hunks(text: str, hunks: list[Hunk], shown: str) -> str:
    """Apply update hunks in order; context lines keep the file's own text."""
    newline = "\r\n" if "\r\n" in text else "\n"
    ends_with_newline = text.endswith("\n") or not text
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if ends_with_newline:
        lines.pop()
    cursor = 0
    for number, hunk in enumerate(hunks, start=1):
        anchor = cursor
        if hunk.hint is not None:
            found = _find_hint(lines, hunk.hint, cursor)
            if found is None:
                raise BadInput(f"{shown}: hunk {number}: '@@ {hunk.hint}' not found in the file")
            anchor = found
        old = [t for c, t in hunk.lines if c != "+"]
        if not old:
            pos = anchor + 1 if hunk.hint is not None and not hunk.at_end else len(lines)
            added = [t for c, t in hunk.lines if c == "+"]
            lines[pos:pos] = added
            cursor = pos + len(added)
            continue
        at = _find_block(lines, old, anchor, hunk.at_end)
        if at is None:
            raise BadInput(
                f"{shown}: hunk {number} does not match the file (its context and '-' lines, "
                f"starting {old[0]!r}, were not found); re-read the file and retry"
            )
        block: list[str] = []
        j = at
        for c, t in hunk.lines:
            if c == " ":
                block.append(lines[j])
            if c == "+":
                block.append(t)
            else:
                j += 1
        lines[at:j] = block
        cursor = at + len(block)
    body = newline.join(lines)
    return body + newline if ends_with_newline and lines else body
