"""Anthropic prompt-cache breakpoints in the Chat Completions envelope (REFERENCE.md §7).

Claude behind an OpenAI-compatible gateway (OpenRouter) caches only where a message
content part carries ``cache_control``; without markers every turn is billed in full. The
layout mirrors the native adapter's:

* at most four breakpoints (a fifth is a 400 upstream, WIRE.md §4 item 21), counting
  markers already present in the messages;
* the end of the stable system tier (the system text is split into two text parts at
  ``CacheHints.stable_system_chars``) and the end of the system prompt;
* the last two markable non-system messages: empty assistant (tool-call only) and empty
  tool messages are skipped, string content becomes one text part carrying the marker.

Markers go only on content parts, never on a message, and every dict is built in a fixed
key order, so two consecutive requests share a byte-identical prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

__all__ = [
    "MAX_BREAKPOINTS",
    "CacheControlMode",
    "cache_marker",
    "count_markers",
    "envelope_cache_control",
    "wants_envelope",
]

CacheControlMode: TypeAlias = Literal["auto", "envelope", "off"]

MAX_BREAKPOINTS = 4
_SYSTEM_ROLES = frozenset({"system", "developer"})


def wants_envelope(mode: CacheControlMode, *, provider: str, model: str) -> bool:
    """``auto``: Claude models on OpenRouter; ``envelope``/``off`` force it on or off."""
    if mode == "auto":
        return provider == "openrouter" and "claude" in model.lower()
    return mode == "envelope"


def cache_marker(ttl: str | None = None) -> dict[str, Any]:
    return {"type": "ephemeral", "ttl": ttl} if ttl else {"type": "ephemeral"}


def count_markers(messages: Sequence[Mapping[str, Any]]) -> int:
    """Content parts carrying ``cache_control`` across ``messages``."""
    return sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, Mapping) and "cache_control" in part
    )


def _text_part(text: str, marker: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": dict(marker)}


def _markable(part: Any) -> bool:
    if not isinstance(part, Mapping) or "cache_control" in part:
        return False
    return part.get("type") != "text" or bool(str(part.get("text") or "").strip())


def _mark_content(content: Any, marker: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """``content`` with its last markable part marked, or None if nothing can carry one."""
    if isinstance(content, str):
        return [_text_part(content, marker)] if content.strip() else None
    if not isinstance(content, list):
        return None
    for position in range(len(content) - 1, -1, -1):
        part = content[position]
        if _markable(part):
            marked = {k: v for k, v in part.items() if k != "cache_control"}
            marked["cache_control"] = dict(marker)
            return [*content[:position], marked, *content[position + 1 :]]
    return None


def _system_content(
    content: Any, stable: int | None, marker: Mapping[str, Any], budget: int
) -> tuple[list[dict[str, Any]] | None, int]:
    """The marked system content and the markers it used (stable prefix, then the end)."""
    if isinstance(content, str) and content.strip() and budget >= 2:
        cut = stable if stable is not None and 0 < stable < len(content) else 0
        head, tail = content[:cut], content[cut:]
        if head.strip() and tail.strip():
            return [_text_part(head, marker), _text_part(tail, marker)], 2
    if budget < 1:
        return None, 0
    marked = _mark_content(content, marker)
    return marked, 0 if marked is None else 1


def envelope_cache_control(
    messages: Sequence[Mapping[str, Any]],
    *,
    stable_chars: int | None = None,
    ttl: str | None = None,
    tail: int = 2,
) -> list[dict[str, Any]]:
    """A copy of the wire ``messages`` with at most four ``cache_control`` breakpoints.

    The stable split applies when a single leading system message holds the whole prompt;
    with several, only the end of the last one is marked. Messages that gain a marker are
    copied (their key order kept); the others are returned as they are.
    """
    out = [dict(m) for m in messages]
    marker = cache_marker(ttl)
    budget = MAX_BREAKPOINTS - count_markers(out)
    leading = 0
    while leading < len(out) and out[leading].get("role") in _SYSTEM_ROLES:
        leading += 1
    if leading:
        split = stable_chars if leading == 1 else None
        content, used = _system_content(out[leading - 1].get("content"), split, marker, budget)
        if content is not None:
            out[leading - 1]["content"] = content
            budget -= used
    remaining = min(tail, budget)
    for message in reversed(out[leading:]):
        if remaining <= 0:
            break
        if message.get("role") in _SYSTEM_ROLES:
            continue
        if count_markers([message]):  # already a breakpoint (counted in the budget)
            remaining -= 1
            continue
        content = _mark_content(message.get("content"), marker)
        if content is not None:
            message["content"] = content
            remaining -= 1
    return out
