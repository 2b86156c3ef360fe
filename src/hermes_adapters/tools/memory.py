"""The ``memory`` tool: the model curates its bounded notes and the user profile.

It speaks only to the :class:`~hermes_core.ports.memory.MemoryStore` the agent hands it as
``ctx.service("memory")``, so any store works and the tool never touches files. Replies
follow REFERENCE.md §5 to the letter, because models are prompted (and fine-tuned) on
them:

- success is terminal (``done: true``, a note not to repeat the write) and does not echo
  the entries, so the model does not go looking for more to fix;
- a refusal carries ``current_entries`` (and ``usage``) so the model can consolidate and
  retry within the same turn, or ``matches`` when its ``old_text`` was ambiguous;
- after more than three failed consolidations in one turn (``ctx.task_id``) the reply
  turns terminal, "stop retrying", so a write that cannot fit never eats the turn's
  budget and suppresses the answer to the user. A success resets the count.

Writes land immediately, but the system prompt keeps the snapshot taken when the
conversation started (prefix caching); the engine, not this tool, owns that rule.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, cast

from hermes_core.errors import HermesError, MemoryWriteRejected
from hermes_core.ports.memory import MemorySnapshot, MemoryStore, MemoryTarget, MemoryWrite
from hermes_core.ports.tools import ToolContext, ToolResult, ToolSpec, tool_error

__all__ = ["MAX_CONSOLIDATION_FAILURES", "MemoryTool"]

MAX_CONSOLIDATION_FAILURES = 3
"""Failed consolidations (over the limit, nothing matched) allowed per turn before 'stop'."""

_TRACKED_TASKS = 256
"""Turns whose failure counts are remembered; the oldest is forgotten first."""

_UNAVAILABLE = "Memory is not available. It may be disabled in config or this environment."
_NOTE = "Write saved. This update is complete — do not repeat it."
_DELIMITER = "\n§\n"
_DONE = {"add": "Entry added.", "replace": "Entry replaced.", "remove": "Entry removed."}

Action = Literal["add", "replace", "remove"]

SPEC = ToolSpec(
    name="memory",
    toolset="memory",
    parallel_safe=False,
    description=(
        "Save durable facts to persistent memory that survives across sessions. Memory is "
        "injected into the system prompt of every future conversation, so keep entries "
        "compact and high-signal; writes do not change the current conversation's prompt.\n\n"
        "HOW: make all your changes in ONE call with an 'operations' array (each item: "
        "{action, content?, old_text?}). The batch applies atomically and the character "
        "limit is checked only on the final result, so one call can remove or shorten stale "
        "entries and add new ones together. Use the bare action/content/old_text fields for "
        "a single change. replace and remove find the entry by a short unique substring "
        "(old_text). A success reply confirms the write; do not repeat it.\n\n"
        "WHEN: the user states a preference, a correction or a personal detail, or you learn "
        "a stable fact about their environment, conventions or workflow. Skip trivial, "
        "easily rediscovered or temporary information.\n\n"
        "IF FULL: an add is rejected with the current entries shown; reissue as one batch "
        "that frees enough room and adds the new entry.\n\n"
        "TARGETS: 'user' = who the user is (name, role, preferences, style); 'memory' = your "
        "notes (environment, conventions, tool quirks, lessons)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": ["add", "replace", "remove"],
                "description": "The action (single-change shape). Omit when using operations.",
            },
            "target": {
                "type": "string",
                "enum": ["memory", "user"],
                "description": "'memory' for your notes, 'user' for the user profile.",
            },
            "content": {
                "type": "string",
                "description": "The entry text. Required for add and replace.",
            },
            "old_text": {
                "type": "string",
                "description": (
                    "Required for replace and remove: a short unique substring of the entry "
                    "to change."
                ),
            },
            "operations": {
                "type": "array",
                "description": (
                    "Batch shape: operations applied atomically in one call against the "
                    "final character limit. Preferred for several changes or to make room."
                ),
                "items": {
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": ["add", "replace", "remove"]},
                        "content": {"type": "string", "description": "Text for add/replace."},
                        "old_text": {
                            "type": "string",
                            "description": "Substring of the entry to replace or remove.",
                        },
                    },
                    "required": ["action"],
                },
            },
        },
        "required": ["target"],
    },
)


def _dumps(payload: dict[str, Any], *, is_error: bool) -> ToolResult:
    return ToolResult(json.dumps(payload, ensure_ascii=False), is_error=is_error)


def _failure(message: str) -> ToolResult:
    return tool_error(message, success=False)


def _text(args: dict[str, Any], *names: str) -> str | None:
    """The first of ``names`` holding a non-empty string (``new_text`` aliases ``content``)."""
    for name in names:
        value = args.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _write_of(operation: Any) -> MemoryWrite:
    """One batch item; malformed items pass through so the store names them by position."""
    item: dict[str, Any] = operation if isinstance(operation, dict) else {}
    action = item.get("action")
    return MemoryWrite(
        action=cast(Action, "" if action is None else str(action)),
        content=_text(item, "content", "new_text"),
        old_text=_text(item, "old_text"),
    )


def _entries(snapshot: MemorySnapshot, target: MemoryTarget) -> tuple[tuple[str, ...], int]:
    if target == "user":
        return snapshot.user, snapshot.user_limit
    return snapshot.memory, snapshot.memory_limit


def _is_consolidation_failure(exc: MemoryWriteRejected) -> bool:
    """Over the limit or nothing matched: the cases where the model retries to make room.

    The contract suite pins these: an over-limit refusal carries ``usage`` and a single
    no-match starts with "No entry matched". Ambiguous matches and blank content are
    mistakes the model fixes at once, so they do not count.
    """
    return not exc.matches and (exc.usage is not None or str(exc).startswith("No entry matched"))


class MemoryTool:
    """The memory tool of one agent; it keeps only per-turn failure counts."""

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}

    @property
    def spec(self) -> ToolSpec:
        return SPEC

    async def available(self) -> bool:
        """Always listed: without a store each call says memory is not available."""
        return True

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        store = ctx.service("memory")
        if store is None:
            return _failure(_UNAVAILABLE)
        target = args.get("target", "memory")
        if target not in ("memory", "user"):
            return _failure(f"Invalid target '{target}'. Use 'memory' or 'user'.")
        target = cast(MemoryTarget, target)

        operations = args.get("operations")
        if operations:
            if not isinstance(operations, list):
                return _failure(
                    "operations must be a list of {action, content?, old_text?} objects."
                )
            writes = [_write_of(op) for op in operations]
            return await self._apply(store, ctx, target, writes, None)

        action = args.get("action") or ""
        content = _text(args, "content", "new_text")
        old_text = _text(args, "old_text")
        if action == "add" and not content:
            return _failure("Content is required for 'add' action.")
        if action in ("replace", "remove") and not old_text:
            return await self._missing_old_text(store, target, action)
        if action == "replace" and not content:
            return _failure("content is required for 'replace' action.")
        if action not in ("add", "replace", "remove"):
            return _failure(f"Unknown action '{action}'. Use: add, replace, remove")
        chosen = cast(Action, action)
        write = MemoryWrite(action=chosen, content=content, old_text=old_text)
        return await self._apply(store, ctx, target, [write], chosen)

    async def _apply(
        self,
        store: MemoryStore,
        ctx: ToolContext,
        target: MemoryTarget,
        writes: Sequence[MemoryWrite],
        action: Action | None,
    ) -> ToolResult:
        """Apply and answer; ``action`` is None for the batch shape."""
        before = await store.snapshot()
        previous, limit = _entries(before, target)
        try:
            entries = await store.apply(target, writes)
        except MemoryWriteRejected as exc:
            return self._rejected(ctx, exc)
        except HermesError as exc:
            return _failure(str(exc))
        self._failures.pop(ctx.task_id, None)
        if action is None:
            message = f"Applied {len(writes)} operation(s)."
        elif action == "add" and (writes[0].content or "").strip() in previous:
            message = "Entry already exists (no duplicate added)."
        else:
            message = _DONE[action]
        current = len(_DELIMITER.join(entries))
        pct = min(100, int(current / limit * 100)) if limit > 0 else 0
        return _dumps(
            {
                "success": True,
                "done": True,
                "target": target,
                "usage": f"{pct}% — {current:,}/{limit:,} chars",
                "entry_count": len(entries),
                "message": message,
                "note": _NOTE,
            },
            is_error=False,
        )

    def _rejected(self, ctx: ToolContext, exc: MemoryWriteRejected) -> ToolResult:
        payload: dict[str, Any] = {"success": False, "error": str(exc)}
        if exc.matches:
            payload["matches"] = list(exc.matches)
            return _dumps(payload, is_error=True)
        if not _is_consolidation_failure(exc):
            if exc.current_entries:
                payload["current_entries"] = list(exc.current_entries)
            return _dumps(payload, is_error=True)
        payload["current_entries"] = list(exc.current_entries)
        if exc.usage is not None:
            payload["usage"] = exc.usage
        failures = self._count_failure(ctx.task_id)
        if failures <= MAX_CONSOLIDATION_FAILURES:
            return _dumps(payload, is_error=True)
        return _dumps(
            {
                "success": False,
                "done": True,
                "error": (
                    f"Memory consolidation failed {failures} times this turn. Stop retrying "
                    "memory calls — leave memory unchanged for now and continue with your "
                    "reply to the user. The fact can be saved in a later turn."
                ),
            },
            is_error=True,
        )

    def _count_failure(self, task_id: str) -> int:
        count = self._failures.pop(task_id, 0) + 1
        self._failures[task_id] = count  # re-inserted last: the dict stays oldest-first
        while len(self._failures) > _TRACKED_TASKS:
            del self._failures[next(iter(self._failures))]
        return count

    async def _missing_old_text(
        self, store: MemoryStore, target: MemoryTarget, action: str
    ) -> ToolResult:
        """Show the entries so the model can reissue with an ``old_text`` that matches one."""
        entries, limit = _entries(await store.snapshot(), target)
        return _dumps(
            {
                "success": False,
                "error": (
                    f"'{action}' needs old_text -- a short unique substring of the entry to "
                    f"{action}. None was provided. Reissue the {action} with old_text set to "
                    "part of one of the current_entries below."
                ),
                "current_entries": list(entries),
                "usage": f"{len(_DELIMITER.join(entries)):,}/{limit:,}",
            },
            is_error=True,
        )

    def __repr__(self) -> str:
        return "MemoryTool()"
