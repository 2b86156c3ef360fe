"""Trajectories: one agent turn as a ShareGPT training sample.

Users feed these files straight into fine-tuning pipelines and diff them against samples
from the reference harness, so the layout is a byte-level contract (REFERENCE.md §1): the
classic Hermes function-calling system prompt, ``human``/``gpt``/``tool`` turns, a
``<think>`` block on every ``gpt`` turn, ``<tool_call>``/``<tool_response>`` JSON with
default ``json.dumps`` separators (``"name": "x"``) and non-ASCII kept as is. Quirks of the
reference that users' tooling already depends on are kept on purpose and called out below:
tool names are taken by *position* in the call list, not by id, and parallel results share
one ``tool`` turn.

Input convention for :func:`to_sharegpt` / :func:`build_trajectory`: ``messages`` is the
transcript of one turn *without* its system prompt, starting with the user message that
opened the turn (any leading :class:`SystemMessage` is accepted and dropped). Everything
here is pure: no clock except the default timestamp, no files (a sink adapter writes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

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
from hermes_core.redact import redact

__all__ = [
    "IMAGE_PART_TYPES",
    "SCREENSHOT_PLACEHOLDER",
    "Trajectory",
    "TrajectoryRole",
    "TrajectoryTurn",
    "build_trajectory",
    "convert_scratchpad_to_think",
    "format_tools_for_system_message",
    "to_sharegpt",
    "trajectory_system_prompt",
]

TrajectoryRole: TypeAlias = Literal["system", "human", "gpt", "tool"]
"""The ShareGPT speaker of a turn."""

IMAGE_PART_TYPES: frozenset[str] = frozenset({"image", "image_url", "input_image"})
"""Content part types that are images in the OpenAI, Anthropic and Responses formats."""

SCREENSHOT_PLACEHOLDER = "[screenshot]"
"""What an image part becomes: trajectories are text-only, and a base64 blob per sample
would make the files huge without helping a text model learn anything."""

# The classic Hermes function-calling prompt, byte for byte as the reference harness
# writes it (agent/agent_runtime_helpers.py::convert_to_trajectory_format). It is a data
# format, not prose: do not reflow, fix the spacing of "<tools> </tools>" or change the
# Python-repr schema, or samples stop matching the ones users already trained on.
_SYSTEM_PROMPT_HEAD = (
    "You are a function calling AI model. You are provided with function signatures "
    "within <tools> </tools> XML tags. You may call one or more functions to assist with "
    "the user query. If available tools are not relevant in assisting with user query, "
    "just respond in natural conversational language. Don't make assumptions about what "
    "values to plug into functions. After calling & executing the functions, you will be "
    "provided with function results within <tool_response> </tool_response> XML tags. "
    "Here are the available tools:\n"
)
_SYSTEM_PROMPT_TAIL = (
    "For each function call return a JSON object, with the following pydantic model json "
    "schema for each:\n"
    "{'title': 'FunctionCall', 'type': 'object', 'properties': {'name': {'title': 'Name', "
    "'type': 'string'}, 'arguments': {'title': 'Arguments', 'type': 'object'}}, "
    "'required': ['name', 'arguments']}\n"
    "Each function call should be enclosed within <tool_call> </tool_call> XML tags.\n"
    "Example:\n<tool_call>\n{'name': <function-name>,'arguments': <args-dict>}\n</tool_call>"
)

_EMPTY_THINK = "<think>\n</think>\n"
_UNKNOWN_TOOL_NAME = "unknown"
_MULTIMODAL_RESULT_FALLBACK = "[multimodal tool result]"


# -- model -----------------------------------------------------------------------------


class TrajectoryTurn(BaseModel):
    """One ShareGPT turn: ``{"from": ..., "value": ...}``.

    ``from`` is a Python keyword, hence the ``from_`` attribute with a ``"from"`` alias;
    either name is accepted on input.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    from_: TrajectoryRole = Field(alias="from")
    value: str

    def to_record(self) -> dict[str, str]:
        """The wire dict, keys in the reference order (``from`` then ``value``)."""
        return {"from": self.from_, "value": self.value}


class Trajectory(BaseModel):
    """One saved sample: the conversation plus the metadata the reference writes with it.

    ``conversations`` is a tuple so a frozen trajectory really is immutable; lists are
    accepted on input.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversations: tuple[TrajectoryTurn, ...]
    timestamp: str
    model: str
    completed: bool

    def to_record(self) -> dict[str, Any]:
        """The JSONL record with exactly the reference keys, in the reference order."""
        return {
            "conversations": [turn.to_record() for turn in self.conversations],
            "timestamp": self.timestamp,
            "model": self.model,
            "completed": self.completed,
        }

    def redacted(self) -> Trajectory:
        """A copy with known secret shapes removed from every turn's value."""
        turns = tuple(
            turn.model_copy(update={"value": redact(turn.value)}) for turn in self.conversations
        )
        return self.model_copy(update={"conversations": turns})

    def to_jsonl_line(self) -> str:
        """The record as one JSON document, non-ASCII kept; no trailing newline.

        The sink owns the line separator so it can write a batch in one call.
        """
        return json.dumps(self.to_record(), ensure_ascii=False)


# -- system prompt ---------------------------------------------------------------------


def _function_of(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    function = tool.get("function")
    return function if isinstance(function, Mapping) else tool


def format_tools_for_system_message(tools: Sequence[Mapping[str, Any]]) -> str:
    """The ``<tools>`` JSON of the trajectory system prompt.

    Each tool is an OpenAI function spec, wrapped (``{"type": "function", "function":
    {...}}``) or bare. Every element carries ``"required": null`` whatever the schema says:
    the reference copies that from the original Hermes prompt example, and samples must
    match it. No tools gives ``"[]"``.
    """
    formatted = [
        {
            "name": function["name"],
            "description": function.get("description", ""),
            "parameters": function.get("parameters", {}),
            "required": None,
        }
        for function in map(_function_of, tools)
    ]
    return json.dumps(formatted, ensure_ascii=False)


def trajectory_system_prompt(tools: Sequence[Mapping[str, Any]] = ()) -> str:
    """The fixed ``system`` value of every trajectory, with ``tools`` listed inside it.

    This is not the prompt the model actually saw: trajectories are training data in the
    classic Hermes function-calling format, whatever the live prompt was.
    """
    tools_json = format_tools_for_system_message(tools)
    return f"{_SYSTEM_PROMPT_HEAD}<tools>\n{tools_json}\n</tools>\n{_SYSTEM_PROMPT_TAIL}"


# -- content helpers -------------------------------------------------------------------


def convert_scratchpad_to_think(text: str) -> str:
    """Rename ``<REASONING_SCRATCHPAD>`` tags to ``<think>`` tags.

    Models prompted to reason in XML (native thinking off) write a scratchpad; training
    data uses one spelling of a reasoning block, ``<think>``.
    """
    return text.replace("<REASONING_SCRATCHPAD>", "<think>").replace(
        "</REASONING_SCRATCHPAD>", "</think>"
    )


def _part_texts(parts: Sequence[ContentPart]) -> list[str]:
    """Text of each part, images as the screenshot placeholder, other parts skipped."""
    texts: list[str] = []
    for part in parts:
        kind = part.get("type")
        if kind in IMAGE_PART_TYPES:
            texts.append(SCREENSHOT_PLACEHOLDER)
        elif kind in {"text", "input_text"}:
            texts.append(str(part.get("text", "")))
    return texts


def _flatten_user(content: str | tuple[ContentPart, ...]) -> str:
    """A user message as one string; multimodal parts are joined with newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(_part_texts(content))


def _tool_text(message: ToolMessage) -> str:
    """A tool result as text; a multimodal result becomes its text summary.

    The summary is ``extra["text_summary"]`` when the tool supplied one, else the text
    parts joined by newlines, else a fixed marker, as the reference does.
    """
    if isinstance(message.content, str):
        return message.content
    summary = message.extra.get("text_summary")
    if isinstance(summary, str) and summary:
        return summary
    texts = [str(p.get("text", "")) for p in message.content if p.get("type") == "text"]
    return "\n".join(texts) if texts else _MULTIMODAL_RESULT_FALLBACK


def _tool_content_value(text: str) -> Any:
    """Parsed JSON when the result looks like JSON and parses; the raw string otherwise.

    Parsing keeps terminal results as ``{"output": ..., "exit_code": 0, "error": null}``
    objects instead of a doubly escaped string.
    """
    if text.strip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _call_arguments(call: ToolCall) -> Any:
    """The parsed arguments; ``{}`` when they are not JSON (the sample stays loadable)."""
    try:
        return json.loads(call.arguments)
    except ValueError:
        return {}


# -- turns -----------------------------------------------------------------------------


def _think_prefix(message: AssistantMessage) -> str:
    reasoning = message.reasoning
    if reasoning and reasoning.strip():
        return f"<think>\n{reasoning}\n</think>\n"
    return ""


def _gpt_value(message: AssistantMessage) -> str:
    """The ``gpt`` value: think block, content, then one ``<tool_call>`` block per call.

    Every value gets a ``<think>`` block, empty when there was no reasoning, so the
    format is uniform for training.
    """
    value = _think_prefix(message)
    content = message.content or ""
    if message.tool_calls:
        if content.strip():
            value += convert_scratchpad_to_think(content) + "\n"
        for call in message.tool_calls:
            payload = {"name": call.name, "arguments": _call_arguments(call)}
            value += f"<tool_call>\n{json.dumps(payload, ensure_ascii=False)}\n</tool_call>\n"
        if "<think>" not in value:
            value = _EMPTY_THINK + value
        return value.rstrip()
    value += convert_scratchpad_to_think(content)
    if "<think>" not in value:
        value = _EMPTY_THINK + value
    return value.strip()


def _tool_response(message: ToolMessage, name: str) -> str:
    payload = {
        "tool_call_id": message.tool_call_id or "",
        "name": name,
        "content": _tool_content_value(_tool_text(message)),
    }
    return f"<tool_response>\n{json.dumps(payload, ensure_ascii=False)}\n</tool_response>"


def _tool_name_at(calls: Sequence[ToolCall], index: int) -> str:
    """The name of the ``index``-th call: results are named by position, not by id.

    This mirrors the reference exactly, including when results arrive out of call order
    or outnumber the calls (``"unknown"``).
    """
    return calls[index].name if index < len(calls) else _UNKNOWN_TOOL_NAME


def _turn(role: TrajectoryRole, value: str) -> dict[str, str]:
    return {"from": role, "value": value}


def to_sharegpt(
    messages: Sequence[Message],
    user_query: str | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, str]]:
    """Convert one turn's transcript to ShareGPT ``conversations`` (REFERENCE.md §1).

    Args:
        messages: The turn's transcript without its system prompt, starting with the user
            message that opened the turn; leading system messages are dropped.
        user_query: The ``human`` value; defaults to that first user message, flattened
            (text parts joined by newlines, images as ``[screenshot]``).
        tools: The OpenAI function specs listed in the system prompt.

    Returns:
        ``[{"from": "system", ...}, {"from": "human", ...}, ...]``. An assistant message
        with tool calls gives a ``gpt`` turn and then one ``tool`` turn for all the tool
        messages right after it (none if there are none); one without calls gives a
        ``gpt`` turn; later user messages give ``human`` turns; system messages in the
        middle and tool messages not following an assistant call are dropped.

    Raises:
        TranscriptError: the transcript does not start with a user message and no
            ``user_query`` was given.
    """
    start = 0
    while start < len(messages) and isinstance(messages[start], SystemMessage):
        start += 1
    body = messages[start:]
    opener = body[0] if body else None
    if isinstance(opener, UserMessage):
        human = _flatten_user(opener.content) if user_query is None else user_query
        rest = body[1:]
    elif user_query is not None:
        # Unlike the reference, a transcript without its user message loses nothing:
        # only a user message is ever skipped as "the current query".
        human = user_query
        rest = body
    else:
        raise TranscriptError(
            "a trajectory transcript must start with the user message of the turn "
            "(after any system message); pass user_query= to convert one that does not"
        )

    turns = [_turn("system", trajectory_system_prompt(tools)), _turn("human", human)]
    i = 0
    while i < len(rest):
        message = rest[i]
        i += 1
        if isinstance(message, AssistantMessage):
            turns.append(_turn("gpt", _gpt_value(message)))
            if not message.tool_calls:
                continue
            responses: list[str] = []
            while i < len(rest):
                result = rest[i]
                if not isinstance(result, ToolMessage):
                    break
                name = _tool_name_at(message.tool_calls, len(responses))
                responses.append(_tool_response(result, name))
                i += 1
            if responses:
                turns.append(_turn("tool", "\n".join(responses)))
        elif isinstance(message, UserMessage):
            turns.append(_turn("human", _flatten_user(message.content)))
    return turns


def build_trajectory(
    messages: Sequence[Message],
    *,
    model: str,
    completed: bool,
    tools: Sequence[Mapping[str, Any]] = (),
    user_query: str | None = None,
    timestamp: str | None = None,
) -> Trajectory:
    """A :class:`Trajectory` of one turn; see :func:`to_sharegpt` for ``messages``.

    ``timestamp`` defaults to local ``datetime.now().isoformat()``, as the reference
    writes it (naive, no zone), so existing dedup and sorting scripts keep working.

    Raises:
        TranscriptError: as :func:`to_sharegpt`.
    """
    conversations = to_sharegpt(messages, user_query=user_query, tools=tools)
    return Trajectory(
        conversations=tuple(TrajectoryTurn.model_validate(turn) for turn in conversations),
        timestamp=datetime.now().isoformat() if timestamp is None else timestamp,
        model=model,
        completed=completed,
    )
