"""Tests of the message invariants: validate() finds each violation, repair() fixes it.

The property tests check validate() against an independent oracle (a regular expression
over message kinds plus an exact pairing check), so the two cannot agree on a wrong rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_core.errors import TranscriptError
from hermes_core.invariants import (
    BRIDGE_USER_TEXT,
    CANCELLED_RESULT,
    Violation,
    ViolationKind,
    _rebuild,
    ensure_valid,
    format_violations,
    repair,
    validate,
)
from hermes_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    text_of,
)

# -- helpers ---------------------------------------------------------------------------


def call(call_id: str, name: str = "read") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments='{"path": "x"}')


def asst(content: str | None = None, *ids: str, reasoning: str | None = None) -> AssistantMessage:
    return AssistantMessage(
        content=content, reasoning=reasoning, tool_calls=tuple(call(i) for i in ids)
    )


def tool(call_id: str, content: str = "ok") -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, name="read", content=content)


def kinds(transcript: Sequence[Message]) -> list[ViolationKind]:
    return [v.kind for v in validate(transcript)]


def cancelled(call_id: str, name: str = "read") -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, name=name, content=CANCELLED_RESULT, is_error=True)


# -- an independent oracle -------------------------------------------------------------

# S system, U user, A assistant without calls, C assistant with calls, T tool result.
_SHAPE = re.compile(r"S?(U((CT+)+A?|A))*U?")


def oracle_valid(transcript: Sequence[Message]) -> bool:
    shape = ""
    for m in transcript:
        if isinstance(m, SystemMessage):
            shape += "S"
        elif isinstance(m, UserMessage):
            shape += "U"
        elif isinstance(m, ToolMessage):
            shape += "T"
        else:
            shape += "C" if m.tool_calls else "A"
    if not _SHAPE.fullmatch(shape):
        return False
    return answered_exactly_once_in_order(transcript)


def answered_exactly_once_in_order(transcript: Sequence[Message]) -> bool:
    """Each call id unique; each assistant's calls answered by the next tool messages."""
    all_ids = [c.id for m in transcript if isinstance(m, AssistantMessage) for c in m.tool_calls]
    if len(all_ids) != len(set(all_ids)):
        return False
    i = 0
    while i < len(transcript):
        m = transcript[i]
        if isinstance(m, ToolMessage):
            return False  # a result not consumed by the assistant before it
        i += 1
        if isinstance(m, AssistantMessage) and m.tool_calls:
            ids = [c.id for c in m.tool_calls]
            results = transcript[i : i + len(ids)]
            got = [r.tool_call_id for r in results if isinstance(r, ToolMessage)]
            if got != ids:
                return False
            i += len(ids)
    return True


# -- strategies ------------------------------------------------------------------------

_IDS = st.sampled_from(["a", "b", "c"])
_NAMES = st.sampled_from(["read", "write"])
_TEXT = st.text(alphabet="xyz \n", max_size=6)
_TOOL_CALLS = st.builds(ToolCall, id=_IDS, name=_NAMES, arguments=st.just("{}"))
_PARTS = st.lists(
    st.one_of(
        _TEXT.map(lambda t: {"type": "text", "text": t}),
        st.just({"type": "image_url", "image_url": {"url": "data:,"}}),
    ),
    max_size=2,
).map(tuple)

systems = st.builds(SystemMessage, content=_TEXT)
users = st.builds(UserMessage, content=st.one_of(_TEXT, _PARTS))
assistants = st.builds(
    AssistantMessage,
    content=st.none() | _TEXT,
    reasoning=st.none() | _TEXT,
    tool_calls=st.lists(_TOOL_CALLS, max_size=3).map(tuple),
    finish_reason=st.none() | st.sampled_from(["stop", "tool_calls"]),
    provider_data=st.sampled_from([{}, {"reasoning_details": [{"n": 1}]}]),
)
tools = st.builds(
    ToolMessage, tool_call_id=_IDS, content=_TEXT, name=st.none() | _NAMES, is_error=st.booleans()
)
messages = st.one_of(systems, users, assistants, tools)
transcripts = st.lists(messages, max_size=14)


@st.composite
def valid_transcripts(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(draw(systems))
    counter = 0
    turns = draw(st.integers(0, 4))
    for turn in range(turns):
        out.append(draw(users))
        groups = draw(st.integers(0, 2))
        for _ in range(groups):
            n = draw(st.integers(1, 3))
            ids = [f"call_{counter + k}" for k in range(n)]
            counter += n
            calls = tuple(ToolCall(id=i, name=draw(_NAMES)) for i in ids)
            out.append(AssistantMessage(content=draw(st.none() | _TEXT), tool_calls=calls))
            out.extend(ToolMessage(tool_call_id=i, content=draw(_TEXT)) for i in ids)
        # A user message must be answered before the next one; the last may stand alone.
        if (groups == 0 and turn < turns - 1) or draw(st.booleans()):
            out.append(draw(assistants.map(lambda a: a.model_copy(update={"tool_calls": ()}))))
    return out


@st.composite
def near_valid_transcripts(draw: st.DrawFn) -> list[Message]:
    """A valid transcript with one to three small edits: the boundary cases of each rule."""
    out = draw(valid_transcripts())
    for _ in range(draw(st.integers(1, 3))):
        edit = draw(st.sampled_from(["drop", "repeat", "swap", "insert"]))
        if edit == "insert" or not out:
            out.insert(draw(st.integers(0, len(out))), draw(messages))
            continue
        i = draw(st.integers(0, len(out) - 1))
        if edit == "drop":
            del out[i]
        elif edit == "repeat":
            out.insert(i, out[i])
        elif i + 1 < len(out):
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


any_transcripts = st.one_of(transcripts, near_valid_transcripts())


# -- properties ------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=250)
@given(any_transcripts)
def test_validate_agrees_with_the_oracle(t: list[Message]) -> None:
    assert (validate(t) == []) == oracle_valid(t), validate(t)


@pytest.mark.slow
@settings(max_examples=250)
@given(any_transcripts)
def test_repair_output_is_valid(t: list[Message]) -> None:
    fixed = repair(t)
    assert validate(fixed) == []
    assert oracle_valid(fixed)
    assert answered_exactly_once_in_order(fixed)


@given(valid_transcripts())
def test_valid_transcripts_are_valid(t: list[Message]) -> None:
    assert validate(t) == []
    assert oracle_valid(t)


@given(valid_transcripts())
def test_repair_leaves_valid_transcripts_alone(t: list[Message]) -> None:
    assert repair(t) == t
    # The slow path agrees too, not only the validate() short cut.
    assert _rebuild(t) == t


@pytest.mark.slow
@settings(max_examples=250)
@given(any_transcripts)
def test_repair_is_idempotent(t: list[Message]) -> None:
    once = repair(t)
    assert repair(once) == once
    assert _rebuild(once) == once


@pytest.mark.slow
@settings(max_examples=250)
@given(any_transcripts)
def test_repair_never_loses_user_or_assistant_text(t: list[Message]) -> None:
    fixed = repair(t)
    texts = [text_of(m.content) for m in fixed]
    reasonings = [m.reasoning or "" for m in fixed if isinstance(m, AssistantMessage)]
    system_text = "".join(m.content for m in fixed if isinstance(m, SystemMessage))
    for m in t:
        if isinstance(m, UserMessage | AssistantMessage):
            assert any(text_of(m.content) in text for text in texts)
        if isinstance(m, AssistantMessage) and m.reasoning:
            assert any(m.reasoning in r for r in reasonings)
        if isinstance(m, SystemMessage):
            assert m.content in system_text


@pytest.mark.slow
@settings(max_examples=250)
@given(any_transcripts)
def test_repair_keeps_every_tool_call_and_message_count_bounded(t: list[Message]) -> None:
    fixed = repair(t)
    names_in = sorted(c.name for m in t if isinstance(m, AssistantMessage) for c in m.tool_calls)
    names_out = sorted(
        c.name for m in fixed if isinstance(m, AssistantMessage) for c in m.tool_calls
    )
    assert names_in == names_out
    assert sum(isinstance(m, SystemMessage) for m in fixed) <= 1


# -- validate: one example per kind ----------------------------------------------------


def test_empty_and_system_only_transcripts_are_valid() -> None:
    assert validate([]) == []
    assert validate([SystemMessage(content="s")]) == []


def test_a_plain_tool_loop_is_valid() -> None:
    t: list[Message] = [
        SystemMessage(content="s"),
        UserMessage(content="hi"),
        asst(None, "a", "b"),
        tool("a"),
        tool("b"),
        asst("more", "c"),
        tool("c"),
        asst("done"),
        UserMessage(content="again"),
        asst(None, "d"),
        tool("d"),
        UserMessage(content="interrupting after a complete tool group is fine"),
    ]
    assert validate(t) == []


def test_system_not_first() -> None:
    t: list[Message] = [UserMessage(content="u"), SystemMessage(content="s")]
    assert validate(t) == [
        Violation(ViolationKind.SYSTEM_NOT_FIRST, 1, "the system message must be the first message")
    ]


def test_system_repeated() -> None:
    t: list[Message] = [
        SystemMessage(content="s"),
        UserMessage(content="u"),
        SystemMessage(content="t"),
    ]
    assert kinds(t) == [ViolationKind.SYSTEM_REPEATED]
    assert validate(t)[0].index == 2


def test_not_first_then_repeated() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        SystemMessage(content="s"),
        SystemMessage(content="t"),
    ]
    assert kinds(t) == [ViolationKind.SYSTEM_NOT_FIRST, ViolationKind.SYSTEM_REPEATED]


@pytest.mark.parametrize(
    "t",
    [
        [UserMessage(content="u"), UserMessage(content="v")],
        [UserMessage(content="u"), asst("a"), asst("b")],
        [asst("first")],
        [SystemMessage(content="s"), asst("first")],
    ],
    ids=["user-user", "assistant-assistant", "assistant-first", "assistant-after-system"],
)
def test_alternation(t: list[Message]) -> None:
    assert kinds(t) == [ViolationKind.ALTERNATION]


def test_dangling_call_before_the_next_user_message() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        asst(None, "a", "b"),
        tool("a"),
        UserMessage(content="v"),
    ]
    violations = validate(t)
    assert kinds(t) == [ViolationKind.DANGLING_CALL]
    assert violations[0].index == 1
    assert "'b'" in violations[0].detail


def test_dangling_call_at_the_end_is_a_violation() -> None:
    t: list[Message] = [UserMessage(content="u"), asst(None, "a")]
    assert kinds(t) == [ViolationKind.DANGLING_CALL]


def test_assistant_right_after_unanswered_calls_is_only_dangling() -> None:
    t: list[Message] = [UserMessage(content="u"), asst(None, "a"), asst("b")]
    assert kinds(t) == [ViolationKind.DANGLING_CALL]


@pytest.mark.parametrize(
    "t",
    [
        [tool("a")],
        [UserMessage(content="u"), tool("a")],
        [UserMessage(content="u"), asst("no calls"), tool("a")],
        [UserMessage(content="u"), asst(None, "a"), tool("a"), tool("z")],
        # answers a call of an earlier assistant, not the immediately preceding one
        [UserMessage(content="u"), asst(None, "a"), tool("a"), asst(None, "b"), tool("a")],
    ],
)
def test_orphan_result(t: list[Message]) -> None:
    assert ViolationKind.ORPHAN_RESULT in kinds(t)
    assert set(kinds(t)) <= {ViolationKind.ORPHAN_RESULT, ViolationKind.DANGLING_CALL}


def test_result_order() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        asst(None, "a", "b", "c"),
        tool("b"),
        tool("a"),
        tool("c"),
    ]
    violations = validate(t)
    assert kinds(t) == [ViolationKind.RESULT_ORDER]
    assert violations[0].index == 3


def test_duplicate_call_id_in_one_message() -> None:
    t: list[Message] = [UserMessage(content="u"), asst(None, "a", "a"), tool("a"), tool("a")]
    assert kinds(t) == [ViolationKind.DUPLICATE_CALL_ID]


def test_duplicate_call_id_across_the_transcript() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        asst(None, "a"),
        tool("a"),
        asst(None, "a"),
        tool("a"),
    ]
    assert validate(t) == [
        Violation(ViolationKind.DUPLICATE_CALL_ID, 3, "tool call id 'a' is used more than once")
    ]


def test_duplicate_result() -> None:
    t: list[Message] = [UserMessage(content="u"), asst(None, "a"), tool("a"), tool("a")]
    assert kinds(t) == [ViolationKind.DUPLICATE_RESULT]
    assert validate(t)[0].index == 3


def test_violation_str_and_format() -> None:
    v = Violation(ViolationKind.ORPHAN_RESULT, 4, "tool result 'x' answers nothing")
    assert str(v) == "orphan_result at message 4: tool result 'x' answers nothing"
    assert format_violations([]) == "the transcript is valid"
    many = [v] * 12
    text = format_violations(many, limit=3)
    assert "12 violations" in text
    assert text.count("orphan_result") == 3
    assert "and 9 more" in text


def test_ensure_valid() -> None:
    ensure_valid([UserMessage(content="u")])
    with pytest.raises(TranscriptError, match=r"dangling_call at message 1: .*'a'"):
        ensure_valid([UserMessage(content="u"), asst(None, "a")])


# -- repair: one example per rule ------------------------------------------------------


def test_repair_returns_a_new_list_for_valid_input() -> None:
    t: list[Message] = [UserMessage(content="u"), asst("a")]
    fixed = repair(t)
    assert fixed == t
    assert fixed is not t
    assert all(x is y for x, y in zip(fixed, t, strict=True))


def test_repair_merges_later_system_messages_into_the_first() -> None:
    t: list[Message] = [
        SystemMessage(content="one"),
        UserMessage(content="u"),
        SystemMessage(content="two"),
        SystemMessage(content="three"),
    ]
    assert repair(t) == [SystemMessage(content="one\n\ntwo\n\nthree"), UserMessage(content="u")]


def test_repair_moves_a_late_system_message_to_the_front() -> None:
    t: list[Message] = [UserMessage(content="u"), SystemMessage(content="s"), asst("a")]
    assert repair(t) == [SystemMessage(content="s"), UserMessage(content="u"), asst("a")]


def test_repair_answers_dangling_calls_as_cancelled() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        asst(None, "a", "b"),
        tool("b"),
        UserMessage(content="v"),
        asst(None, "c"),
    ]
    assert repair(t) == [
        UserMessage(content="u"),
        asst(None, "a", "b"),
        cancelled("a"),
        tool("b"),
        UserMessage(content="v"),
        asst(None, "c"),
        cancelled("c"),
    ]


def test_repair_drops_orphan_and_duplicate_results() -> None:
    t: list[Message] = [
        tool("a", "orphan at start"),
        UserMessage(content="u"),
        asst(None, "a"),
        tool("a", "first"),
        tool("a", "second"),
        tool("z", "unknown"),
    ]
    assert repair(t) == [UserMessage(content="u"), asst(None, "a"), tool("a", "first")]


def test_repair_reorders_results_to_call_order() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        asst(None, "a", "b", "c"),
        tool("c"),
        tool("a"),
        tool("b"),
    ]
    assert repair(t) == [
        UserMessage(content="u"),
        asst(None, "a", "b", "c"),
        tool("a"),
        tool("b"),
        tool("c"),
    ]


def test_repair_renames_a_duplicate_id_within_one_message_pairing_positionally() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        asst(None, "a", "a"),
        tool("a", "1"),
        tool("a", "2"),
    ]
    assert repair(t) == [
        UserMessage(content="u"),
        asst(None, "a", "a_d1"),
        tool("a", "1"),
        tool("a_d1", "2"),
    ]


def test_repair_answers_a_renamed_duplicate_without_result_as_cancelled() -> None:
    t: list[Message] = [UserMessage(content="u"), asst(None, "a", "a"), tool("a", "1")]
    assert repair(t) == [
        UserMessage(content="u"),
        asst(None, "a", "a_d1"),
        tool("a", "1"),
        cancelled("a_d1"),
    ]


def test_repair_renames_duplicate_ids_across_the_transcript_avoiding_used_ids() -> None:
    t: list[Message] = [
        UserMessage(content="u"),
        asst(None, "a"),
        tool("a", "1"),
        asst(None, "a"),
        tool("a", "2"),
        asst(None, "a_d1"),
        tool("a_d1", "3"),
    ]
    assert repair(t) == [
        UserMessage(content="u"),
        asst(None, "a"),
        tool("a", "1"),
        asst(None, "a_d2"),
        tool("a_d2", "2"),
        asst(None, "a_d1"),
        tool("a_d1", "3"),
    ]


def test_repair_merges_consecutive_user_texts() -> None:
    t: list[Message] = [
        UserMessage(content="one"),
        UserMessage(content="two"),
        UserMessage(content=""),
    ]
    assert repair(t) == [UserMessage(content="one\n\ntwo")]


def test_repair_merges_user_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    t: list[Message] = [UserMessage(content="look"), UserMessage(content=(image,))]
    assert repair(t) == [UserMessage(content=({"type": "text", "text": "look"}, image))]


def test_repair_merges_consecutive_assistants() -> None:
    first = AssistantMessage(
        content="one",
        reasoning="think 1",
        finish_reason="stop",
        provider_data={"reasoning_details": [{"n": 1}], "refusal": "r1"},
    )
    second = AssistantMessage(
        content="two",
        reasoning="think 2",
        tool_calls=(call("a"),),
        finish_reason="tool_calls",
        provider_data={"reasoning_details": [{"n": 2}]},
    )
    t: list[Message] = [UserMessage(content="u"), first, tool("z", "orphan"), second, tool("a")]
    assert repair(t) == [
        UserMessage(content="u"),
        AssistantMessage(
            content="one\n\ntwo",
            reasoning="think 1\n\nthink 2",
            tool_calls=(call("a"),),
            finish_reason="tool_calls",
            provider_data={"reasoning_details": [{"n": 1}, {"n": 2}], "refusal": "r1"},
        ),
        tool("a"),
    ]


def test_repair_merges_assistant_with_none_content() -> None:
    t: list[Message] = [UserMessage(content="u"), asst(None), asst("b")]
    assert repair(t) == [UserMessage(content="u"), asst("b")]


def test_repair_bridges_an_assistant_first() -> None:
    t: list[Message] = [SystemMessage(content="s"), asst("hello"), UserMessage(content="u")]
    assert repair(t) == [
        SystemMessage(content="s"),
        UserMessage(content=BRIDGE_USER_TEXT),
        asst("hello"),
        UserMessage(content="u"),
    ]


def test_repair_handles_a_cancelled_resumed_session() -> None:
    # An interrupted turn: calls sent, one result stored, then the user typed again twice.
    t: list[Message] = [
        SystemMessage(content="s"),
        UserMessage(content="do it"),
        asst("on it", "a", "b"),
        tool("a"),
        UserMessage(content="stop"),
        UserMessage(content="actually go on"),
    ]
    fixed = repair(t)
    assert fixed == [
        SystemMessage(content="s"),
        UserMessage(content="do it"),
        asst("on it", "a", "b"),
        tool("a"),
        cancelled("b"),
        UserMessage(content="stop\n\nactually go on"),
    ]
    assert validate(fixed) == []


def test_repair_keeps_text_of_every_message_in_a_messy_transcript() -> None:
    t: list[Message] = [
        asst("A1"),
        SystemMessage(content="S1"),
        asst("A2", "x"),
        UserMessage(content="U1"),
        UserMessage(content=({"type": "text", "text": "U2"},)),
        tool("x"),
        asst("A3"),
        asst("A4"),
        SystemMessage(content="S2"),
    ]
    fixed = repair(t)
    assert validate(fixed) == []
    blob = "\n".join(text_of(m.content) for m in fixed)
    for word in ["A1", "A2", "A3", "A4", "U1", "U2", "S1", "S2"]:
        assert word in blob
