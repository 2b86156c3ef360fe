"""Message invariants: check a transcript before a model call, and repair a broken one.

Why this module exists: providers answer HTTP 400 to a transcript whose tool calls and tool
results do not pair up ("``tool_use`` ids were found without ``tool_result`` blocks",
"messages with role 'tool' must be a response to a preceding message with 'tool_calls'").
Such transcripts are easy to produce by accident: a cancelled or crashed turn leaves an
assistant's tool calls unanswered, a resumed session appends a user message while calls are
still pending, parallel results get stored in completion order, and compaction cuts through
a tool batch. Once persisted, the bad history bricks every later request (WIRE.md §4 items
1-5 and 13). So the engine runs :func:`repair` when it assembles history and
:func:`validate` / :func:`ensure_valid` before every model call (DESIGN.md §2).

The rules (a transcript obeying all of them is *valid*):

- At most one :class:`SystemMessage`, and only at index 0.
- After the optional system message, the non-tool messages alternate user / assistant,
  starting with a user message. An assistant message *with* tool calls opens a tool group
  (the assistant plus its tool results); after a tool group either a user or another
  assistant message may follow. So ``user, assistant(calls), tool, assistant`` and
  ``user, assistant(calls), tool, user`` are fine, while ``user, user``,
  ``user, assistant, assistant`` and a transcript whose first non-system message is an
  assistant are :attr:`ViolationKind.ALTERNATION`.
- Every tool call is answered by exactly one :class:`ToolMessage` carrying its id; the
  results directly follow their assistant message, in call order. A call with no result
  before the next non-tool message, or before the end of the transcript, is
  :attr:`ViolationKind.DANGLING_CALL`: ``validate`` runs right before a model call, where an
  unanswered trailing call is exactly what providers refuse.
- A tool message not answering a call of the immediately preceding assistant is
  :attr:`ViolationKind.ORPHAN_RESULT`; a second result for one call is
  :attr:`ViolationKind.DUPLICATE_RESULT`.
- Tool call ids are unique across the whole transcript
  (:attr:`ViolationKind.DUPLICATE_CALL_ID`). When one assistant message repeats an id, its
  results pair with those calls positionally (first result to first call).

:func:`repair` never loses user or assistant text (content and reasoning): it merges rather
than drops. What it may drop is tool results that answer nothing (orphans, duplicates).
All functions are pure and do work linear in the transcript length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hermes_core.errors import TranscriptError
from hermes_core.messages import (
    AssistantMessage,
    ContentPart,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "BRIDGE_USER_TEXT",
    "CANCELLED_RESULT",
    "Violation",
    "ViolationKind",
    "ensure_valid",
    "format_violations",
    "repair",
    "validate",
]

CANCELLED_RESULT = "[Tool call cancelled: no result was recorded for this call]"
"""Content of the synthetic error result :func:`repair` gives a call that has none."""

BRIDGE_USER_TEXT = "(continued)"
"""Content of the user message :func:`repair` inserts when an assistant message comes first.

This happens when a history was cut at the front (compaction, a window of a long session);
providers require the first non-system message to be a user message.
"""

_JOINER = "\n\n"
_DUPLICATE_ID_SUFFIX = "_d"


class ViolationKind(StrEnum):
    """What rule a transcript breaks; see the module docstring for the rules."""

    SYSTEM_NOT_FIRST = "system_not_first"
    SYSTEM_REPEATED = "system_repeated"
    ALTERNATION = "alternation"
    DANGLING_CALL = "dangling_call"
    ORPHAN_RESULT = "orphan_result"
    RESULT_ORDER = "result_order"
    DUPLICATE_CALL_ID = "duplicate_call_id"
    DUPLICATE_RESULT = "duplicate_result"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: its kind, the index of the offending message, and what is wrong.

    For :attr:`ViolationKind.DANGLING_CALL` the index is that of the assistant message
    holding the unanswered call.
    """

    kind: ViolationKind
    index: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.value} at message {self.index}: {self.detail}"


# -- validate --------------------------------------------------------------------------


@dataclass(slots=True)
class _OpenGroup:
    """The tool calls of the latest assistant message and which of them are answered."""

    index: int
    calls: tuple[ToolCall, ...]
    unanswered: dict[str, deque[int]] = field(default_factory=dict)
    last_answered: int = -1

    @classmethod
    def of(cls, index: int, calls: tuple[ToolCall, ...]) -> _OpenGroup:
        group = cls(index, calls)
        for pos, call in enumerate(calls):
            group.unanswered.setdefault(call.id, deque()).append(pos)
        return group

    def answer(self, call_id: str) -> int | None:
        """Mark the first unanswered call with ``call_id`` answered; its position or None."""
        positions = self.unanswered.get(call_id)
        if not positions:
            return None
        return positions.popleft()

    def dangling(self) -> list[ToolCall]:
        left = sorted(pos for positions in self.unanswered.values() for pos in positions)
        return [self.calls[pos] for pos in left]


def validate(transcript: Sequence[Message]) -> list[Violation]:
    """Every violation of the message invariants in ``transcript``, in message order.

    An empty list means the transcript can be sent to any provider as is.
    """
    violations: list[Violation] = []
    add = violations.append
    seen_system = False
    # What the last non-system, non-tool message was: None (nothing yet), "user",
    # "text" (assistant without calls) or "calls" (assistant with calls: a tool group).
    previous: str | None = None
    group: _OpenGroup | None = None
    call_ids: set[str] = set()

    def close_group() -> None:
        if group is None:
            return
        for call in group.dangling():
            add(
                Violation(
                    ViolationKind.DANGLING_CALL,
                    group.index,
                    f"tool call {call.id!r} ({call.name}) has no result",
                )
            )

    for index, message in enumerate(transcript):
        if isinstance(message, SystemMessage):
            if index > 0:
                if seen_system:
                    add(Violation(ViolationKind.SYSTEM_REPEATED, index, "a second system message"))
                else:
                    add(
                        Violation(
                            ViolationKind.SYSTEM_NOT_FIRST,
                            index,
                            "the system message must be the first message",
                        )
                    )
            seen_system = True
        elif isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if group is None:
                add(
                    Violation(
                        ViolationKind.ORPHAN_RESULT,
                        index,
                        f"tool result {call_id!r} does not follow an assistant message "
                        "with tool calls",
                    )
                )
                continue
            position = group.answer(call_id)
            if position is not None:
                if position < group.last_answered:
                    add(
                        Violation(
                            ViolationKind.RESULT_ORDER,
                            index,
                            f"tool result {call_id!r} comes after the result of a later call",
                        )
                    )
                group.last_answered = max(group.last_answered, position)
            elif any(call.id == call_id for call in group.calls):
                add(
                    Violation(
                        ViolationKind.DUPLICATE_RESULT,
                        index,
                        f"tool call {call_id!r} was already answered",
                    )
                )
            else:
                add(
                    Violation(
                        ViolationKind.ORPHAN_RESULT,
                        index,
                        f"tool result {call_id!r} answers no call of the assistant message "
                        f"at {group.index}",
                    )
                )
        else:
            close_group()
            group = None
            if isinstance(message, UserMessage):
                if previous == "user":
                    add(
                        Violation(
                            ViolationKind.ALTERNATION,
                            index,
                            "two user messages in a row",
                        )
                    )
                previous = "user"
                continue
            if previous is None:
                add(
                    Violation(
                        ViolationKind.ALTERNATION,
                        index,
                        "an assistant message before any user message",
                    )
                )
            elif previous == "text":
                add(
                    Violation(
                        ViolationKind.ALTERNATION,
                        index,
                        "two assistant messages in a row without tool results between them",
                    )
                )
            for call in message.tool_calls:
                if call.id in call_ids:
                    add(
                        Violation(
                            ViolationKind.DUPLICATE_CALL_ID,
                            index,
                            f"tool call id {call.id!r} is used more than once",
                        )
                    )
                call_ids.add(call.id)
            if message.tool_calls:
                previous = "calls"
                group = _OpenGroup.of(index, message.tool_calls)
            else:
                previous = "text"
    close_group()
    return violations


def format_violations(violations: Sequence[Violation], *, limit: int = 10) -> str:
    """A readable multi-line summary: one line per violation, at most ``limit`` of them."""
    if not violations:
        return "the transcript is valid"
    lines = [f"the transcript breaks the message invariants ({len(violations)} violations):"]
    lines.extend(f"  - {violation}" for violation in violations[:limit])
    if len(violations) > limit:
        lines.append(f"  ... and {len(violations) - limit} more")
    return "\n".join(lines)


def ensure_valid(transcript: Sequence[Message]) -> None:
    """Raise :class:`TranscriptError` listing the violations unless ``transcript`` is valid."""
    violations = validate(transcript)
    if violations:
        raise TranscriptError(
            format_violations(violations)
            + "\nrepair it with hermes_core.invariants.repair() before sending it"
        )


# -- repair ----------------------------------------------------------------------------


def repair(transcript: Sequence[Message]) -> list[Message]:
    """A valid transcript that keeps everything ``transcript`` says.

    A valid transcript comes back unchanged (``repair(t) == list(t)``), and ``repair`` is
    idempotent. Otherwise, in order:

    1. System messages: the first system message goes to the front; the text of any later
       one is appended to it, joined by a blank line.
    2. Tool results not directly after an assistant message with tool calls are dropped.
    3. Two user messages in a row become one: texts joined by a blank line, or content
       parts concatenated when either has parts.
    4. Two assistant messages in a row (the first without tool calls) become one: content
       and reasoning joined by a blank line, the later message's tool calls, results and
       finish reason; provider data and extras merged (lists concatenated, texts joined,
       the first value wins otherwise).
    5. An assistant message first gets a user message :data:`BRIDGE_USER_TEXT` before it.
    6. Within each tool group, results pair with calls by id (positionally when one
       message repeats an id); results answering nothing, or an already answered call, are
       dropped; the rest are put in call order, and each unanswered call gets a synthetic
       error result :data:`CANCELLED_RESULT`.
    7. A call id already used earlier in the transcript (or earlier in the same message) is
       renamed ``<id>_d<n>``, with ``n`` the smallest number giving an unused id; its paired
       result is renamed along with it.
    """
    if not validate(transcript):
        return list(transcript)
    return _rebuild(transcript)


@dataclass(slots=True)
class _Group:
    """An assistant message and the tool messages that directly follow it."""

    assistant: AssistantMessage
    results: list[ToolMessage] = field(default_factory=list)


def _rebuild(transcript: Sequence[Message]) -> list[Message]:
    """The repair itself, without the fast path for valid input (tests call it directly)."""
    system = _merged_system(transcript)
    items: list[UserMessage | _Group] = []
    for message in transcript:
        if isinstance(message, SystemMessage):
            continue
        last = items[-1] if items else None
        if isinstance(message, ToolMessage):
            if isinstance(last, _Group) and last.assistant.tool_calls:
                last.results.append(message)
            # else: an orphan result, dropped.
        elif isinstance(message, UserMessage):
            if isinstance(last, UserMessage):
                items[-1] = _merge_users(last, message)
            else:
                items.append(message)
        elif isinstance(last, _Group) and not last.assistant.tool_calls:
            # The earlier assistant has no calls, so any results after it were orphans.
            items[-1] = _Group(_merge_assistants(last.assistant, message))
        else:
            if last is None:
                items.append(UserMessage(content=BRIDGE_USER_TEXT))
            items.append(_Group(message))

    used_ids = _all_ids(transcript)
    seen_ids: set[str] = set()
    out: list[Message] = [] if system is None else [system]
    for item in items:
        if isinstance(item, UserMessage):
            out.append(item)
        else:
            out.extend(_close_group(item, seen_ids, used_ids))
    return out


def _merged_system(transcript: Sequence[Message]) -> SystemMessage | None:
    systems = [m for m in transcript if isinstance(m, SystemMessage)]
    if not systems:
        return None
    first = systems[0]
    if len(systems) == 1:
        return first
    content = first.content
    extra: dict[str, Any] = first.extra
    for later in systems[1:]:
        content = _join(content, later.content)
        extra = _merge_dicts(extra, later.extra)
    return first.model_copy(update={"content": content, "extra": extra})


def _close_group(group: _Group, seen_ids: set[str], used_ids: set[str]) -> list[Message]:
    """The assistant with unique call ids, then exactly one result per call, in call order."""
    assistant = group.assistant
    calls = assistant.tool_calls
    if not calls:
        return [assistant]
    pairing = _OpenGroup.of(0, calls)
    answers: list[ToolMessage | None] = [None] * len(calls)
    for result in group.results:
        position = pairing.answer(result.tool_call_id)
        if position is not None:
            answers[position] = result
        # else: orphan or duplicate result, dropped.

    new_calls: list[ToolCall] = []
    for call in calls:
        if call.id in seen_ids:
            call = call.model_copy(update={"id": _fresh_id(call.id, used_ids)})
        seen_ids.add(call.id)
        new_calls.append(call)
    if any(new.id != old.id for new, old in zip(new_calls, calls, strict=True)):
        assistant = assistant.model_copy(update={"tool_calls": tuple(new_calls)})

    out: list[Message] = [assistant]
    for call, answer in zip(new_calls, answers, strict=True):
        if answer is None:
            answer = ToolMessage(
                tool_call_id=call.id, name=call.name, content=CANCELLED_RESULT, is_error=True
            )
        elif answer.tool_call_id != call.id:
            answer = answer.model_copy(update={"tool_call_id": call.id})
        out.append(answer)
    return out


def _all_ids(transcript: Iterable[Message]) -> set[str]:
    ids: set[str] = set()
    for message in transcript:
        if isinstance(message, AssistantMessage):
            ids.update(call.id for call in message.tool_calls)
        elif isinstance(message, ToolMessage):
            ids.add(message.tool_call_id)
    return ids


def _fresh_id(call_id: str, used_ids: set[str]) -> str:
    n = 1
    while f"{call_id}{_DUPLICATE_ID_SUFFIX}{n}" in used_ids:
        n += 1
    fresh = f"{call_id}{_DUPLICATE_ID_SUFFIX}{n}"
    used_ids.add(fresh)
    return fresh


def _join(first: str, second: str) -> str:
    """Two texts joined by a blank line; an empty side adds nothing."""
    if not second:
        return first
    if not first:
        return second
    return f"{first}{_JOINER}{second}"


def _join_optional(first: str | None, second: str | None) -> str | None:
    if first is None:
        return second
    if second is None:
        return first
    return _join(first, second)


def _as_parts(content: str | tuple[ContentPart, ...]) -> tuple[ContentPart, ...]:
    if isinstance(content, tuple):
        return content
    return ({"type": "text", "text": content},) if content else ()


def _merge_users(first: UserMessage, second: UserMessage) -> UserMessage:
    content: str | tuple[ContentPart, ...]
    if isinstance(first.content, str) and isinstance(second.content, str):
        content = _join(first.content, second.content)
    else:
        content = _as_parts(first.content) + _as_parts(second.content)
    return first.model_copy(
        update={"content": content, "extra": _merge_dicts(first.extra, second.extra)}
    )


def _merge_assistants(first: AssistantMessage, second: AssistantMessage) -> AssistantMessage:
    return AssistantMessage(
        content=_join_optional(first.content, second.content),
        reasoning=_join_optional(first.reasoning, second.reasoning),
        tool_calls=first.tool_calls + second.tool_calls,
        finish_reason=second.finish_reason or first.finish_reason,
        provider_data=_merge_dicts(first.provider_data, second.provider_data),
        extra=_merge_dicts(first.extra, second.extra),
    )


def _merge_dicts(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Keys of both; on a clash lists concatenate, texts join, else the first value wins."""
    merged = dict(first)
    for key, value in second.items():
        if key not in merged:
            merged[key] = value
            continue
        mine = merged[key]
        if mine == value:
            continue
        if isinstance(mine, list) and isinstance(value, list):
            merged[key] = [*mine, *value]
        elif isinstance(mine, str) and isinstance(value, str):
            merged[key] = _join(mine, value)
    return merged
