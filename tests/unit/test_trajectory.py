"""Golden tests of the ShareGPT trajectory format (REFERENCE.md §1 and §10).

Unit tests rather than recorded exchanges: the converter is a pure function and the
format is a byte-level contract, so every expected value below is written out by hand
from the reference description, never captured from the implementation's output.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import pytest

import hermes_core.trajectory as trajectory_module
from hermes_core.errors import TranscriptError
from hermes_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from hermes_core.trajectory import (
    Trajectory,
    TrajectoryTurn,
    build_trajectory,
    convert_scratchpad_to_think,
    format_tools_for_system_message,
    to_sharegpt,
    trajectory_system_prompt,
)

# The reference prompt, chunked differently from the implementation on purpose.
PROMPT_WITHOUT_TOOLS = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools> </tools> XML tags. You may call one or more functions to assist with the user "
    "query. If available tools are not relevant in assisting with user query, just respond "
    "in natural conversational language. Don't make assumptions about what values to plug "
    "into functions. After calling & executing the functions, you will be provided with "
    "function results within <tool_response> </tool_response> XML tags. Here are the "
    "available tools:\n<tools>\n[]\n</tools>\nFor each function call return a JSON object, "
    "with the following pydantic model json schema for each:\n{'title': 'FunctionCall', "
    "'type': 'object', 'properties': {'name': {'title': 'Name', 'type': 'string'}, "
    "'arguments': {'title': 'Arguments', 'type': 'object'}}, 'required': ['name', "
    "'arguments']}\nEach function call should be enclosed within <tool_call> </tool_call> "
    "XML tags.\nExample:\n<tool_call>\n{'name': <function-name>,'arguments': <args-dict>}\n"
    "</tool_call>"
)

TERMINAL_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
TERMINAL_TOOLS_JSON = (
    '[{"name": "terminal", "description": "Run a command", "parameters": {"type": "object", '
    '"properties": {"command": {"type": "string"}}}, "required": null}]'
)
TERMINAL_RESULT = '{"output": "x", "exit_code": 0, "error": null}'
EMPTY_GPT = "<think>\n</think>"
LS_CALL = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'
X_RESPONSE = (
    '<tool_response>\n{"tool_call_id": "c1", "name": "terminal", '
    '"content": {"output": "x", "exit_code": 0, "error": null}}\n</tool_response>'
)


def call(call_id: str, name: str = "terminal", arguments: str = '{"command": "ls"}') -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def result(call_id: str, content: Any = TERMINAL_RESULT, **kw: Any) -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, content=content, **kw)


def values(conversations: list[dict[str, str]], role: str) -> list[str]:
    return [turn["value"] for turn in conversations if turn["from"] == role]


def only(conversations: list[dict[str, str]], role: str) -> str:
    found = values(conversations, role)
    assert len(found) == 1, found
    return found[0]


def tool_turn_of(*messages: Message) -> str:
    convs = to_sharegpt([UserMessage(content="q"), *messages])
    return only(convs, "tool")


def gpt_of(message: AssistantMessage) -> str:
    return only(to_sharegpt([UserMessage(content="q"), message]), "gpt")


# -- the strict checks of the reference suite's trajectory_assertions.py (§10) ----------

TOOL_CALL_BLOCK = re.compile(r"<tool_call>\n(.+)\n</tool_call>", re.DOTALL)
TOOL_RESPONSE_BLOCK = re.compile(r"<tool_response>\n(.+)\n</tool_response>", re.DOTALL)


def assert_strict(conversations: list[dict[str, str]]) -> None:
    for turn in conversations:
        assert list(turn) == ["from", "value"]
        assert isinstance(turn["value"], str)
    for value in values(conversations, "gpt"):
        assert value.count("<think>") == 1
        assert value.startswith("<think>")
        assert value.count("</think>") == 1
        body = value.split("</think>", 1)[1]
        for block in re.findall(r"<tool_call>.*?</tool_call>", body, re.DOTALL):
            match = TOOL_CALL_BLOCK.fullmatch(block)
            assert match is not None, block
            payload = json.loads(match.group(1))
            assert set(payload) == {"name", "arguments"}
    for value in values(conversations, "tool"):
        for block in re.split(r"\n(?=<tool_response>\n)", value):
            match = TOOL_RESPONSE_BLOCK.fullmatch(block)
            assert match is not None, block
            assert set(json.loads(match.group(1))) == {"tool_call_id", "name", "content"}


# -- system prompt ---------------------------------------------------------------------


def test_system_prompt_without_tools_is_the_reference_bytes() -> None:
    assert trajectory_system_prompt() == PROMPT_WITHOUT_TOOLS
    assert trajectory_system_prompt([]) == PROMPT_WITHOUT_TOOLS


def test_system_prompt_starts_with_the_classic_sentence_and_has_no_trailing_newline() -> None:
    prompt = trajectory_system_prompt([TERMINAL_SPEC])
    assert prompt.startswith(
        "You are a function calling AI model. You are provided with function signatures "
        "within <tools> </tools> XML tags."
    )
    assert prompt.endswith("<args-dict>}\n</tool_call>")


def test_system_prompt_embeds_the_tools_json_between_tools_tags() -> None:
    prompt = trajectory_system_prompt([TERMINAL_SPEC])
    assert f"Here are the available tools:\n<tools>\n{TERMINAL_TOOLS_JSON}\n</tools>\n" in prompt
    assert prompt == PROMPT_WITHOUT_TOOLS.replace(
        "<tools>\n[]\n", f"<tools>\n{TERMINAL_TOOLS_JSON}\n"
    )


def test_tools_json_uses_default_separators_and_required_null() -> None:
    assert format_tools_for_system_message([TERMINAL_SPEC]) == TERMINAL_TOOLS_JSON


def test_tools_json_accepts_a_bare_function_dict() -> None:
    bare = TERMINAL_SPEC["function"]
    assert format_tools_for_system_message([bare]) == TERMINAL_TOOLS_JSON


def test_tools_json_required_is_null_even_when_the_schema_has_required() -> None:
    spec = {
        "name": "read",
        "parameters": {"type": "object", "required": ["path"]},
    }
    assert format_tools_for_system_message([spec]) == (
        '[{"name": "read", "description": "", "parameters": {"type": "object", '
        '"required": ["path"]}, "required": null}]'
    )


def test_tools_json_defaults_missing_parameters_to_an_empty_object() -> None:
    assert format_tools_for_system_message([{"name": "now", "description": "d"}]) == (
        '[{"name": "now", "description": "d", "parameters": {}, "required": null}]'
    )


def test_tools_json_without_tools_is_an_empty_list() -> None:
    assert format_tools_for_system_message([]) == "[]"


def test_tools_json_keeps_non_ascii() -> None:
    spec = {"name": "météo", "description": "天気", "parameters": {}}
    assert format_tools_for_system_message([spec]) == (
        '[{"name": "météo", "description": "天気", "parameters": {}, "required": null}]'
    )


def test_first_turn_is_the_system_prompt_with_the_tools() -> None:
    convs = to_sharegpt([UserMessage(content="hi")], tools=[TERMINAL_SPEC])
    assert convs[0] == {"from": "system", "value": trajectory_system_prompt([TERMINAL_SPEC])}


# -- human turns -----------------------------------------------------------------------


def test_human_is_the_user_message_and_it_is_not_repeated() -> None:
    convs = to_sharegpt([UserMessage(content="list files"), AssistantMessage(content="ok")])
    assert [t["from"] for t in convs] == ["system", "human", "gpt"]
    assert convs[1] == {"from": "human", "value": "list files"}


def test_user_query_overrides_the_human_value_and_the_first_message_is_still_skipped() -> None:
    convs = to_sharegpt([UserMessage(content="expanded prompt")], user_query="dataset prompt")
    assert [t["value"] for t in convs[1:]] == ["dataset prompt"]


def test_a_leading_system_message_is_dropped() -> None:
    convs = to_sharegpt(
        [SystemMessage(content="live prompt"), UserMessage(content="hi"), AssistantMessage()]
    )
    assert [t["from"] for t in convs] == ["system", "human", "gpt"]
    assert "live prompt" not in json.dumps(convs)


def test_user_query_stands_in_for_a_missing_user_message() -> None:
    convs = to_sharegpt([AssistantMessage(content="A")], user_query="Q")
    assert convs[1:] == [
        {"from": "human", "value": "Q"},
        {"from": "gpt", "value": "<think>\n</think>\nA"},
    ]


def test_a_transcript_without_its_user_message_is_rejected() -> None:
    with pytest.raises(TranscriptError, match="must start with the user message"):
        to_sharegpt([AssistantMessage(content="A")])
    with pytest.raises(TranscriptError):
        to_sharegpt([])


@pytest.mark.parametrize("image_type", ["image", "image_url", "input_image"])
def test_image_parts_become_screenshot_placeholders(image_type: str) -> None:
    user = UserMessage(
        content=(
            {"type": "text", "text": "what is this?"},
            {"type": image_type, "image_url": {"url": "data:image/png;base64,AAAA"}},
        )
    )
    assert to_sharegpt([user])[1] == {"from": "human", "value": "what is this?\n[screenshot]"}


def test_parts_that_are_neither_text_nor_image_are_skipped() -> None:
    user = UserMessage(
        content=(
            {"type": "input_audio", "input_audio": {"data": "AAAA"}},
            {"type": "text", "text": "hi"},
        )
    )
    assert to_sharegpt([user])[1] == {"from": "human", "value": "hi"}


def test_later_user_messages_become_human_turns_flattened() -> None:
    convs = to_sharegpt(
        [
            UserMessage(content="first"),
            AssistantMessage(content="A1"),
            UserMessage(content=({"type": "input_text", "text": "second"},)),
            AssistantMessage(content="A2"),
        ]
    )
    assert [(t["from"], t["value"]) for t in convs[1:]] == [
        ("human", "first"),
        ("gpt", "<think>\n</think>\nA1"),
        ("human", "second"),
        ("gpt", "<think>\n</think>\nA2"),
    ]


def test_system_messages_in_the_middle_are_dropped() -> None:
    convs = to_sharegpt(
        [
            UserMessage(content="q"),
            SystemMessage(content="[CONTEXT NOTE]"),
            AssistantMessage(content="A"),
        ]
    )
    assert [t["from"] for t in convs] == ["system", "human", "gpt"]
    assert "[CONTEXT NOTE]" not in json.dumps(convs)


# -- gpt turns -------------------------------------------------------------------------


def test_tool_call_turn_without_reasoning_gets_an_empty_think_block() -> None:
    message = AssistantMessage(tool_calls=(call("c1"),))
    assert gpt_of(message) == (
        '<think>\n</think>\n<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}'
        "\n</tool_call>"
    )


def test_plain_turn_with_reasoning() -> None:
    assert (
        gpt_of(AssistantMessage(content="ANSWER", reasoning="R")) == "<think>\nR\n</think>\nANSWER"
    )


def test_tool_call_turn_with_reasoning_and_content() -> None:
    message = AssistantMessage(content="Let me look.", reasoning="R", tool_calls=(call("c1"),))
    assert gpt_of(message) == f"<think>\nR\n</think>\nLet me look.\n{LS_CALL}"


def test_each_call_gets_its_own_block_in_call_order() -> None:
    message = AssistantMessage(
        tool_calls=(call("c1"), call("c2", "read_file", '{"path": "a.txt"}')),
    )
    assert gpt_of(message) == (
        f"<think>\n</think>\n{LS_CALL}\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
    )


@pytest.mark.parametrize("arguments", ["{not json", "", '{"command": "ls"'])
def test_unparseable_arguments_become_an_empty_object(arguments: str) -> None:
    message = AssistantMessage(tool_calls=(call("c1", arguments=arguments),))
    assert gpt_of(message) == (
        '<think>\n</think>\n<tool_call>\n{"name": "terminal", "arguments": {}}\n</tool_call>'
    )


def test_arguments_are_re_serialised_with_default_separators() -> None:
    message = AssistantMessage(tool_calls=(call("c1", arguments='{"a":1,"b":[1,2]}'),))
    assert '{"name": "terminal", "arguments": {"a": 1, "b": [1, 2]}}' in gpt_of(message)


def test_scratchpad_tags_become_think_tags() -> None:
    assert (
        convert_scratchpad_to_think("<REASONING_SCRATCHPAD>plan</REASONING_SCRATCHPAD>go")
        == "<think>plan</think>go"
    )
    assert convert_scratchpad_to_think("") == ""
    assert convert_scratchpad_to_think("no tags") == "no tags"


def test_scratchpad_content_counts_as_the_think_block() -> None:
    message = AssistantMessage(
        content="<REASONING_SCRATCHPAD>\nplan\n</REASONING_SCRATCHPAD>\nDone."
    )
    assert gpt_of(message) == "<think>\nplan\n</think>\nDone."


def test_scratchpad_before_a_tool_call() -> None:
    message = AssistantMessage(
        content="<REASONING_SCRATCHPAD>\nplan\n</REASONING_SCRATCHPAD>", tool_calls=(call("c1"),)
    )
    assert gpt_of(message) == f"<think>\nplan\n</think>\n{LS_CALL}"


def test_inline_think_content_is_not_given_a_second_block() -> None:
    assert gpt_of(AssistantMessage(content="<think>\nx\n</think>\nY")) == "<think>\nx\n</think>\nY"


def test_plain_value_is_stripped_on_both_sides() -> None:
    message = AssistantMessage(content=" \n<think>\nx\n</think>\nY\n")
    assert gpt_of(message) == "<think>\nx\n</think>\nY"


@pytest.mark.parametrize("content", [None, "", "  \n "])
def test_blank_plain_content_gives_just_the_empty_think_block(content: str | None) -> None:
    assert gpt_of(AssistantMessage(content=content)) == EMPTY_GPT


@pytest.mark.parametrize("reasoning", [None, "", " \n\t"])
def test_blank_reasoning_is_ignored(reasoning: str | None) -> None:
    assert gpt_of(AssistantMessage(content="A", reasoning=reasoning)) == "<think>\n</think>\nA"


def test_blank_content_of_a_tool_call_turn_is_not_appended() -> None:
    message = AssistantMessage(content=" \n ", tool_calls=(call("c1"),))
    assert gpt_of(message) == f"<think>\n</think>\n{LS_CALL}"


def test_plain_value_is_stripped_as_a_whole() -> None:
    assert gpt_of(AssistantMessage(content="  hi \n")) == "<think>\n</think>\n  hi"
    assert gpt_of(AssistantMessage(content="A\n\n", reasoning="R")) == "<think>\nR\n</think>\nA"


def test_reasoning_is_kept_verbatim_inside_the_block() -> None:
    message = AssistantMessage(content="A", reasoning="\n step 1\n step 2 ")
    assert gpt_of(message) == "<think>\n\n step 1\n step 2 \n</think>\nA"


def test_tool_call_content_keeps_its_own_whitespace_before_the_calls() -> None:
    message = AssistantMessage(content="Looking \n", tool_calls=(call("c1"),))
    assert gpt_of(message) == f"<think>\n</think>\nLooking \n\n{LS_CALL}"


# -- tool turns ------------------------------------------------------------------------


def test_terminal_result_is_embedded_as_a_json_object() -> None:
    turn = tool_turn_of(AssistantMessage(tool_calls=(call("c1"),)), result("c1"))
    assert turn == X_RESPONSE


def test_parallel_results_share_one_tool_turn_joined_by_newlines() -> None:
    convs = to_sharegpt(
        [
            UserMessage(content="q"),
            AssistantMessage(tool_calls=(call("c1"), call("c2", "read_file", "{}"))),
            result("c1"),
            result("c2", "hello"),
            AssistantMessage(content="done"),
        ]
    )
    assert [t["from"] for t in convs] == ["system", "human", "gpt", "tool", "gpt"]
    assert convs[3]["value"] == (
        f"{X_RESPONSE}\n"
        '<tool_response>\n{"tool_call_id": "c2", "name": "read_file", "content": "hello"}\n'
        "</tool_response>"
    )
    assert convs[4]["value"] == "<think>\n</think>\ndone"


def test_result_names_are_taken_by_position_not_by_id() -> None:
    turn = tool_turn_of(
        AssistantMessage(tool_calls=(call("a", "alpha", "{}"), call("b", "beta", "{}"))),
        result("b", "B", name="beta"),
        result("a", "A", name="alpha"),
    )
    assert turn == (
        '<tool_response>\n{"tool_call_id": "b", "name": "alpha", "content": "B"}\n'
        "</tool_response>\n"
        '<tool_response>\n{"tool_call_id": "a", "name": "beta", "content": "A"}\n'
        "</tool_response>"
    )


def test_results_beyond_the_calls_are_named_unknown() -> None:
    turn = tool_turn_of(
        AssistantMessage(tool_calls=(call("c1", "alpha", "{}"),)),
        result("c1", "one"),
        result("c9", "extra", name="alpha"),
    )
    assert turn.endswith(
        '<tool_response>\n{"tool_call_id": "c9", "name": "unknown", "content": "extra"}\n'
        "</tool_response>"
    )


def test_results_after_a_gap_are_dropped_and_a_call_without_results_has_no_tool_turn() -> None:
    convs = to_sharegpt(
        [
            UserMessage(content="q"),
            AssistantMessage(tool_calls=(call("c1"),)),
            UserMessage(content="interrupt"),
            result("c1"),
            AssistantMessage(content="A"),
        ]
    )
    assert [t["from"] for t in convs] == ["system", "human", "gpt", "human", "gpt"]


def test_a_system_message_ends_the_result_group() -> None:
    convs = to_sharegpt(
        [
            UserMessage(content="q"),
            AssistantMessage(tool_calls=(call("c1"), call("c2"))),
            result("c1", "one"),
            SystemMessage(content="note"),
            result("c2", "two"),
        ]
    )
    assert [t["from"] for t in convs] == ["system", "human", "gpt", "tool"]
    assert '"content": "two"' not in convs[3]["value"]


@pytest.mark.parametrize(
    ("content", "embedded"),
    [
        ("plain text", '"plain text"'),
        ("42", '"42"'),
        ("true", '"true"'),
        ('  {"a": 1}\n', '{"a": 1}'),
        ("[1, 2]", "[1, 2]"),
        ('{"a": 1', '"{\\"a\\": 1"'),
        ("[not json", '"[not json"'),
        ("", '""'),
        ("{}", "{}"),
    ],
)
def test_result_content_is_parsed_only_when_it_looks_like_json(content: str, embedded: str) -> None:
    turn = tool_turn_of(AssistantMessage(tool_calls=(call("c1"),)), result("c1", content))
    assert turn == (
        f'<tool_response>\n{{"tool_call_id": "c1", "name": "terminal", "content": {embedded}}}'
        "\n</tool_response>"
    )


def test_multimodal_result_becomes_its_text_summary() -> None:
    parts = (
        {"type": "text", "text": "clicked"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    )
    with_summary = result("c1", parts, extra={"text_summary": "screen shows a dialog"})
    turn = tool_turn_of(AssistantMessage(tool_calls=(call("c1", "computer", "{}"),)), with_summary)
    assert '"content": "screen shows a dialog"' in turn
    assert "base64" not in turn

    without_summary = result("c1", parts)
    turn = tool_turn_of(
        AssistantMessage(tool_calls=(call("c1", "computer", "{}"),)), without_summary
    )
    assert '"content": "clicked"' in turn

    images_only = result("c1", (parts[1],))
    turn = tool_turn_of(AssistantMessage(tool_calls=(call("c1", "computer", "{}"),)), images_only)
    assert '"content": "[multimodal tool result]"' in turn


def test_non_ascii_is_kept_everywhere() -> None:
    convs = to_sharegpt(
        [
            UserMessage(content="ファイルを見せて"),
            AssistantMessage(
                reasoning="考える",
                tool_calls=(call("c1", arguments='{"command": "cat café.txt"}'),),
            ),
            result("c1", '{"output": "naïve ☕", "exit_code": 0, "error": null}'),
            AssistantMessage(content="Voilà ☕"),
        ]
    )
    assert convs[1]["value"] == "ファイルを見せて"
    assert convs[2]["value"] == (
        '<think>\n考える\n</think>\n<tool_call>\n{"name": "terminal", "arguments": '
        '{"command": "cat café.txt"}}\n</tool_call>'
    )
    assert convs[3]["value"] == (
        '<tool_response>\n{"tool_call_id": "c1", "name": "terminal", "content": '
        '{"output": "naïve ☕", "exit_code": 0, "error": null}}\n</tool_response>'
    )
    assert convs[4]["value"] == "<think>\n</think>\nVoilà ☕"
    line = build_trajectory(
        [UserMessage(content="ファイル")], model="m", completed=True, timestamp="t"
    ).to_jsonl_line()
    assert "ファイル" in line
    assert "\\u" not in line


# -- the whole sample ------------------------------------------------------------------


def canonical_turn() -> list[Message]:
    return [
        UserMessage(content="list files"),
        AssistantMessage(reasoning="R1", tool_calls=(call("c1"),)),
        result("c1", '{"output": "a.txt", "exit_code": 0, "error": null}'),
        AssistantMessage(content="There is a.txt.", reasoning="R2"),
    ]


def test_canonical_tool_turn_is_exact() -> None:
    convs = to_sharegpt(canonical_turn(), tools=[TERMINAL_SPEC])
    assert convs == [
        {"from": "system", "value": trajectory_system_prompt([TERMINAL_SPEC])},
        {"from": "human", "value": "list files"},
        {"from": "gpt", "value": f"<think>\nR1\n</think>\n{LS_CALL}"},
        {
            "from": "tool",
            "value": '<tool_response>\n{"tool_call_id": "c1", "name": "terminal", "content": '
            '{"output": "a.txt", "exit_code": 0, "error": null}}\n</tool_response>',
        },
        {"from": "gpt", "value": "<think>\nR2\n</think>\nThere is a.txt."},
    ]
    assert_strict(convs)


def test_strict_assertions_hold_for_a_mixed_transcript() -> None:
    convs = to_sharegpt(
        [
            UserMessage(content="go"),
            AssistantMessage(content="Checking.", tool_calls=(call("c1"), call("c2"))),
            result("c1"),
            result("c2", "[1, 2]"),
            AssistantMessage(
                content="<REASONING_SCRATCHPAD>again</REASONING_SCRATCHPAD>",
                tool_calls=(call("c3", arguments="broken"),),
            ),
            result("c3", "oops"),
            UserMessage(content="and?"),
            AssistantMessage(content=None),
        ]
    )
    assert_strict(convs)


def test_build_trajectory_record_has_exactly_the_reference_keys() -> None:
    trajectory = build_trajectory(
        canonical_turn(),
        model="hermes-4",
        completed=True,
        tools=[TERMINAL_SPEC],
        timestamp="2025-01-02T03:04:05.678901",
    )
    record = trajectory.to_record()
    assert list(record) == ["conversations", "timestamp", "model", "completed"]
    assert record["timestamp"] == "2025-01-02T03:04:05.678901"
    assert record["model"] == "hermes-4"
    assert record["completed"] is True
    assert record["conversations"] == to_sharegpt(canonical_turn(), tools=[TERMINAL_SPEC])
    assert all(list(turn) == ["from", "value"] for turn in record["conversations"])


def test_jsonl_line_is_one_json_document_with_default_separators() -> None:
    trajectory = build_trajectory(
        [UserMessage(content="hi"), AssistantMessage(content="yo")],
        model="m",
        completed=False,
        timestamp="T",
    )
    line = trajectory.to_jsonl_line()
    assert "\n" not in line
    system = json.dumps(PROMPT_WITHOUT_TOOLS)
    assert line == (
        f'{{"conversations": [{{"from": "system", "value": {system}}}, '
        '{"from": "human", "value": "hi"}, '
        '{"from": "gpt", "value": "<think>\\n</think>\\nyo"}], '
        '"timestamp": "T", "model": "m", "completed": false}'
    )


def test_default_timestamp_is_a_local_isoformat_now() -> None:
    before = datetime.now()
    trajectory = build_trajectory([UserMessage(content="hi")], model="m", completed=True)
    after = datetime.now()
    stamp = datetime.fromisoformat(trajectory.timestamp)
    assert stamp.tzinfo is None
    assert before <= stamp <= after


def test_build_trajectory_passes_user_query_through() -> None:
    trajectory = build_trajectory(
        [UserMessage(content="long prompt")], model="m", completed=True, user_query="short"
    )
    assert trajectory.conversations[1] == TrajectoryTurn(from_="human", value="short")


def test_turn_and_trajectory_are_frozen_and_alias_from() -> None:
    turn = TrajectoryTurn.model_validate({"from": "gpt", "value": "v"})
    assert turn.from_ == "gpt"
    assert turn.to_record() == {"from": "gpt", "value": "v"}
    with pytest.raises(ValueError, match="frozen"):
        turn.value = "w"  # type: ignore[misc]
    with pytest.raises(ValueError):
        TrajectoryTurn.model_validate({"from": "assistant", "value": "v"})
    trajectory = Trajectory(conversations=[turn], timestamp="t", model="m", completed=True)
    assert trajectory.conversations == (turn,)
    with pytest.raises(ValueError, match="frozen"):
        trajectory.completed = False  # type: ignore[misc]


def test_public_names_are_sorted_and_exist() -> None:
    names = trajectory_module.__all__
    assert names == sorted(names)
    assert all(hasattr(trajectory_module, name) for name in names)
