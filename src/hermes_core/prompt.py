"""System prompt assembly in three tiers, built once per conversation and then frozen.

Providers cache the longest byte-identical prefix of a request. So the prompt is ordered
from most to least stable: the *stable* tier (identity, tool guidance), the *context* tier
(the caller's system message, project context files), the *volatile* tier (the memory
snapshot, the date at day granularity). It is rendered once and reused for every call of
the conversation; a memory write mid-session changes the next conversation's prompt, not
this one's. Only compression rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

from hermes_core.ports.memory import MemorySnapshot

__all__ = ["DEFAULT_IDENTITY", "SystemPrompt", "build_system_prompt", "memory_block"]

DEFAULT_IDENTITY = (
    "You are Hermes Agent, an intelligent AI assistant created by Nous Research. "
    "You are helpful, knowledgeable, and direct. You assist users with a wide range of "
    "tasks, use the tools you are given when they help, and say plainly when you are unsure."
)

_FINISHING = (
    "# Finishing the job\n"
    "Keep working until the user's request is fully handled, then reply with a final "
    "answer and no tool calls."
)
_PARALLEL = (
    "# Parallel tool calls\n"
    "When several independent reads or searches are needed, request them in one turn; "
    "they run concurrently and their results come back in the order you asked."
)
_TOOL_GUIDANCE = {
    "memory": "Save durable facts about the user and the work with the memory tool; keep "
    "entries short and replace stale ones.",
    "session_search": "Use session_search to recall earlier conversations before asking the "
    "user to repeat themselves.",
    "skill_manage": "When you solve a reusable procedure, record it as a skill with skill_manage.",
}
_RULE = "═" * 46


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """The rendered prompt and the length of its stable tier (a cache breakpoint)."""

    text: str
    stable_chars: int


def memory_block(title: str, entries: tuple[str, ...], limit: int) -> str:
    """One frozen memory block in the format users know from Hermes."""
    body = "\n§\n".join(entries)
    used = len(body)
    pct = round(100 * used / limit) if limit else 0
    header = f"{title} [{pct}% — {used:,}/{limit:,} chars]"
    return f"{_RULE}\n{header}\n{_RULE}\n{body}"


def build_system_prompt(
    *,
    identity: str | None = None,
    tool_names: Iterable[str] = (),
    skills_index: str | None = None,
    system_message: str | None = None,
    context: str | None = None,
    memory: MemorySnapshot | None = None,
    today: date | None = None,
) -> SystemPrompt:
    """Render the three tiers, joined by blank lines; empty parts are left out."""
    tools = set(tool_names)
    stable = [identity or DEFAULT_IDENTITY]
    if tools:
        stable += [_FINISHING, _PARALLEL]
        guidance = " ".join(text for name, text in _TOOL_GUIDANCE.items() if name in tools)
        if guidance:
            stable.append(guidance)
    if skills_index:
        stable.append(skills_index)
    stable_text = "\n\n".join(stable)

    parts = [stable_text]
    if system_message:
        parts.append(system_message)
    if context:
        parts.append(context)
    if memory is not None:
        if memory.memory:
            parts.append(
                memory_block("MEMORY (your personal notes)", memory.memory, memory.memory_limit)
            )
        if memory.user:
            parts.append(
                memory_block("USER PROFILE (who the user is)", memory.user, memory.user_limit)
            )
    if today is not None:
        parts.append(f"Conversation started: {today:%A, %B} {today.day}, {today.year}")
    return SystemPrompt(text="\n\n".join(parts), stable_chars=len(stable_text))
