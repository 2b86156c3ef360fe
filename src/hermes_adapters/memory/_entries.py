"""The pure rules of bounded memory, shared by every memory store.

Stores differ only in where the entries live (two Markdown files, a dict); what a write
means, when it is refused and what the refusal says must not differ, because the memory
tool hands those messages to the model verbatim and the contract suite pins them
(REFERENCE.md §5). So parsing, rendering, applying a batch, the limit checks and every
message live here, as plain functions over tuples of strings, with no I/O.

A batch of one write is applied with the single-operation rules and messages (a duplicate
add is a no-op, a no-match names the action); longer batches use the batch rules (each
failure is prefixed with ``Operation i (action)`` and says nothing was applied). Either
way the limit is checked on the final state only, and nothing is applied unless all is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hermes_core.errors import MemoryWriteRejected
from hermes_core.ports.memory import MemoryTarget, MemoryWrite

__all__ = [
    "ENTRY_DELIMITER",
    "FILENAMES",
    "TARGETS",
    "apply_writes",
    "char_count",
    "check_target",
    "drift_message",
    "is_drifted",
    "needs_drift_guard",
    "parse",
    "render",
    "usage",
]

ENTRY_DELIMITER = "\n§\n"
"""Between two entries; an entry may span lines but may not hold a line that is just ``§``."""

TARGETS: tuple[MemoryTarget, ...] = ("memory", "user")
FILENAMES: dict[MemoryTarget, str] = {"memory": "MEMORY.md", "user": "USER.md"}

_PREVIEW_WIDTH = 80
_BATCH_SUFFIX = " No operations were applied (batch is all-or-nothing)."


# -- parsing and rendering -------------------------------------------------------------


def _unique(entries: Iterable[str]) -> tuple[str, ...]:
    """Drop repeats, keeping the first occurrence (a dict keeps insertion order)."""
    return tuple(dict.fromkeys(entries))


def parse(raw: str) -> tuple[str, ...]:
    """Entries of a stored text: split on the delimiter, stripped, blanks and repeats dropped."""
    return _unique(e for e in (part.strip() for part in raw.split(ENTRY_DELIMITER)) if e)


def render(entries: Sequence[str]) -> str:
    """The stored text of ``entries``; its length is what the limit counts."""
    return ENTRY_DELIMITER.join(entries)


def char_count(entries: Sequence[str]) -> int:
    return len(render(entries))


def usage(entries: Sequence[str], limit: int) -> str:
    """``cur/limit`` with thousands separators, as the errors report it."""
    return f"{char_count(entries):,}/{limit:,}"


def check_target(target: str) -> MemoryTarget:
    """The target, or a rejection naming the two that exist."""
    if target not in TARGETS:
        raise MemoryWriteRejected(f"Invalid target '{target}'. Use 'memory' or 'user'.")
    return target


# -- drift -----------------------------------------------------------------------------


def needs_drift_guard(writes: Sequence[MemoryWrite]) -> bool:
    """Adds keep every parsed entry, so only a rewrite (replace, remove) can lose text."""
    return any(w.action != "add" for w in writes)


def is_drifted(raw: str, limit: int) -> bool:
    """Whether a stored text was edited outside the store.

    Two signs: the text does not survive parse-and-render unchanged (stray blank entries,
    padding, repeats), or one entry is longer than the whole limit, which no write through
    the store can produce but a shell append to the last entry does. Rewriting such a file
    would silently drop what the outside writer added.
    """
    if not raw.strip():
        return False
    parsed = [e.strip() for e in raw.split(ENTRY_DELIMITER) if e.strip()]
    longest = max((len(e) for e in parsed), default=0)
    return raw.strip() != render(parsed) or longest > limit


def drift_message(filename: str, backup: str) -> str:
    """The refusal when a file drifted; it points at the copy so nothing is lost."""
    return (
        f"Refusing to write {filename}: file on disk has content that wouldn't round-trip "
        f"through the memory tool (likely added by the patch tool, a shell append, a manual "
        f"edit, or a concurrent session). A snapshot was saved to {backup}. Resolve the drift "
        f"first — either rewrite the file as a clean §-delimited list of entries, or move the "
        f"extra content out — then retry. This guard exists to prevent silent data loss."
    )


# -- applying writes -------------------------------------------------------------------


def _previews(entries: Iterable[str]) -> tuple[str, ...]:
    return tuple(e[:_PREVIEW_WIDTH] + ("..." if len(e) > _PREVIEW_WIDTH else "") for e in entries)


def _holds_delimiter(content: str) -> bool:
    """A line that is just ``§`` would split the entry in two when the text is read back."""
    return any(line == "§" for line in content.split("\n"))


_DELIMITER_IN_CONTENT = (
    "Content cannot contain a line that is just '§': that line separates entries. "
    "Save each part as its own entry."
)


def apply_writes(
    entries: Sequence[str], writes: Sequence[MemoryWrite], limit: int
) -> tuple[str, ...]:
    """The entries after ``writes``, or :class:`MemoryWriteRejected` and nothing applied.

    ``entries`` are the current, parsed entries; the result is stripped and de-duplicated.
    """
    current = _unique(entries)
    if not writes:
        raise MemoryWriteRejected("operations list is empty.")
    if len(writes) == 1:
        return _apply_single(current, writes[0], limit)
    return _apply_batch(current, writes, limit)


def _matching(entries: Sequence[str], old_text: str) -> list[int]:
    return [i for i, e in enumerate(entries) if old_text in e]


def _apply_single(current: tuple[str, ...], write: MemoryWrite, limit: int) -> tuple[str, ...]:
    action = write.action
    content = (write.content or "").strip()
    old_text = (write.old_text or "").strip()
    if action == "add":
        if not content:
            raise MemoryWriteRejected("Content cannot be empty.")
        if _holds_delimiter(content):
            raise MemoryWriteRejected(_DELIMITER_IN_CONTENT)
        if content in current:
            return current
        if char_count((*current, content)) > limit:
            raise MemoryWriteRejected(
                f"Memory at {char_count(current):,}/{limit:,} chars. "
                f"Adding this entry ({len(content)} chars) would exceed the limit. "
                "Consolidate now: use 'replace' to merge overlapping entries into shorter "
                "ones or 'remove' stale or less important entries (see current_entries "
                "below), then retry this add — all in this turn.",
                current_entries=current,
                usage=usage(current, limit),
            )
        return (*current, content)
    if action not in ("replace", "remove"):
        raise MemoryWriteRejected(f"Unknown action '{action}'. Use: add, replace, remove")
    if not old_text:
        raise MemoryWriteRejected("old_text cannot be empty.")
    if action == "replace":
        if not content:
            raise MemoryWriteRejected(
                "new_content cannot be empty. Use 'remove' to delete entries."
            )
        if _holds_delimiter(content):
            raise MemoryWriteRejected(_DELIMITER_IN_CONTENT)
    found = _matching(current, old_text)
    if not found:
        raise MemoryWriteRejected(
            f"No entry matched '{old_text}'. Check current_entries below and retry with the "
            f"exact text of the entry you want to {action}.",
            current_entries=current,
        )
    if len(found) > 1:
        raise MemoryWriteRejected(
            f"Multiple entries matched '{old_text}'. Be more specific.",
            matches=_previews(current[i] for i in found),
        )
    index = found[0]
    if action == "remove":
        return current[:index] + current[index + 1 :]
    result = _unique((*current[:index], content, *current[index + 1 :]))
    total = char_count(result)
    if total > limit:
        raise MemoryWriteRejected(
            f"Replacement would put memory at {total:,}/{limit:,} chars. Shorten the new "
            "content, or 'remove' other stale or less important entries to make room (see "
            "current_entries below), then retry — all in this turn.",
            current_entries=current,
            usage=usage(current, limit),
        )
    return result


def _apply_batch(
    current: tuple[str, ...], writes: Sequence[MemoryWrite], limit: int
) -> tuple[str, ...]:
    def fail(message: str) -> MemoryWriteRejected:
        return MemoryWriteRejected(
            message + _BATCH_SUFFIX, current_entries=current, usage=usage(current, limit)
        )

    working = list(current)
    for number, write in enumerate(writes, start=1):
        action = write.action
        content = (write.content or "").strip()
        old_text = (write.old_text or "").strip()
        pos = f"Operation {number} ({action or 'unknown'})"
        if action == "add":
            if not content:
                raise fail(f"{pos}: content is required.")
            if _holds_delimiter(content):
                raise fail(f"{pos}: {_DELIMITER_IN_CONTENT}")
            if content not in working:
                working.append(content)
            continue
        if action not in ("replace", "remove"):
            raise fail(f"{pos}: unknown action. Use add, replace, or remove.")
        if not old_text:
            raise fail(f"{pos}: old_text is required.")
        if action == "replace" and not content:
            raise fail(f"{pos}: content is required (use action='remove' to delete).")
        if action == "replace" and _holds_delimiter(content):
            raise fail(f"{pos}: {_DELIMITER_IN_CONTENT}")
        found = _matching(working, old_text)
        if not found:
            raise fail(f"{pos}: no entry matched '{old_text}'.")
        if len(found) > 1:
            raise fail(
                f"{pos}: '{old_text}' matched multiple distinct entries -- be more specific."
            )
        if action == "remove":
            del working[found[0]]
        else:
            working[found[0]] = content
            working = list(_unique(working))
    result = _unique(working)
    total = char_count(result)
    if total > limit:
        raise MemoryWriteRejected(
            f"After applying all {len(writes)} operations, memory would be at "
            f"{total:,}/{limit:,} chars -- over the limit. Remove or shorten more entries in "
            "the same batch (see current_entries below), then retry.",
            current_entries=current,
            usage=usage(current, limit),
        )
    return result
