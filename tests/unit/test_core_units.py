"""The small pure pieces of the core: turn machine, budget, registry, results, arguments,
and the message codec."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_core.arguments import schema_problems
from hermes_core.budget import BudgetPressure, IterationBudget, pressure_note
from hermes_core.errors import ToolNameCollision, TranscriptError
from hermes_core.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)
from hermes_core.ports.tools import FunctionTool, ToolSpec
from hermes_core.registry import ToolRegistry
from hermes_core.results import cap_batch, truncate_result
from hermes_core.turn import (
    AssembleHistory,
    CallModel,
    Deliver,
    HistoryReady,
    InputReady,
    Interrupted,
    InvalidTransition,
    ModelFailed,
    ModelReplied,
    Persist,
    Persisted,
    PromptReady,
    ProviderReady,
    RunTools,
    Stage,
    ToolsDone,
    TurnState,
    step,
)

# -- turn state machine ----------------------------------------------------------------


def _to_model_stage() -> TurnState:
    state = TurnState(max_iterations=5)
    for event in (InputReady(), HistoryReady(), PromptReady(), ProviderReady()):
        state, _ = step(state, event)
    state, decision = step(state, Persisted(budget_available=True))
    assert decision == CallModel() and state.stage is Stage.MODEL
    return state


def test_prologue_walks_the_stages_in_order() -> None:
    state, decision = step(TurnState(), InputReady())
    assert decision == AssembleHistory() and state.stage is Stage.HISTORY
    seen = []
    for event in (HistoryReady(), PromptReady(), ProviderReady()):
        state, decision = step(state, event)
        seen.append((state.stage, type(decision).__name__))
    assert seen == [
        (Stage.PROMPT, "BuildPrompt"),
        (Stage.PROVIDER, "ResolveProvider"),
        (Stage.PERSIST, "Persist"),
    ]


def test_text_reply_is_flushed_then_delivered_completed() -> None:
    state = _to_model_stage()
    state, decision = step(state, ModelReplied(0, "stop", True))
    assert decision == Persist()
    state, decision = step(state, Persisted(True))
    assert isinstance(decision, Deliver) and decision.outcome.completed
    assert decision.outcome.exit_reason == "text_response(finish_reason=stop)"


def test_tool_reply_runs_tools_then_persists_then_calls_again() -> None:
    state = _to_model_stage()
    state, decision = step(state, ModelReplied(2, "tool_calls", False))
    assert decision == RunTools()
    state, decision = step(state, ToolsDone())
    assert decision == Persist()
    state, decision = step(state, Persisted(True))
    assert decision == CallModel() and state.api_calls == 1


def test_spent_budget_leads_to_one_summary_call() -> None:
    state = _to_model_stage()
    state, _ = step(state, ModelReplied(1, "tool_calls", False))
    state, _ = step(state, ToolsDone())
    state, decision = step(state, Persisted(budget_available=False))
    assert decision == CallModel(summary=True)
    state, decision = step(state, ModelReplied(0, "stop", True))
    state, decision = step(state, Persisted(False))
    assert isinstance(decision, Deliver)
    assert decision.outcome.exit_reason == "max_iterations_reached(2/5)"
    assert not decision.outcome.completed


def test_third_invalid_batch_ends_partial_and_a_valid_one_resets() -> None:
    state = _to_model_stage()
    for _ in range(2):
        state, _ = step(state, ModelReplied(1, "tool_calls", False))
        state, _ = step(state, ToolsDone(invalid_name="ghost"))
        state, _ = step(state, Persisted(True))
    state, _ = step(state, ModelReplied(1, "tool_calls", False))
    state, _ = step(state, ToolsDone())
    assert state.invalid_strikes == 0
    state, _ = step(state, Persisted(True))
    for _ in range(3):
        state, _ = step(state, ModelReplied(1, "tool_calls", False))
        state, decision = step(state, ToolsDone(invalid_name="ghost"))
        state, decision = step(state, Persisted(True))
    assert isinstance(decision, Deliver) and decision.outcome.partial
    assert decision.outcome.error == "Model generated invalid tool call: ghost"


def test_failure_and_interrupt_outcomes() -> None:
    state = _to_model_stage()
    failed_state, decision = step(state, ModelFailed("boom"))
    _, decision = step(failed_state, Persisted(True))
    assert isinstance(decision, Deliver) and decision.outcome.failed
    _, decision = step(state, Interrupted())
    _, decision = step(_, Persisted(True))
    assert isinstance(decision, Deliver) and decision.outcome.interrupted


def test_impossible_events_are_rejected() -> None:
    with pytest.raises(InvalidTransition):
        step(TurnState(), ToolsDone())


# -- budget ----------------------------------------------------------------------------


def test_budget_consume_refund_and_pressure() -> None:
    budget = IterationBudget(10)
    for _ in range(6):
        assert budget.consume()
    assert budget.pressure() is BudgetPressure.NONE and pressure_note(budget) is None
    budget.consume()
    assert budget.pressure() is BudgetPressure.CAUTION
    assert "Start consolidating your work" in str(pressure_note(budget))
    budget.consume()
    budget.consume()
    assert budget.pressure() is BudgetPressure.WARNING
    assert "Provide your final response NOW" in str(pressure_note(budget))
    budget.consume()
    assert not budget.consume() and budget.used == 10 and budget.remaining == 0
    budget.refund()
    assert budget.remaining == 1
    with pytest.raises(ValueError):
        IterationBudget(0)


# -- registry --------------------------------------------------------------------------


async def _ok(args: dict[str, Any], ctx: Any) -> str:
    return "ok"


def _tool(name: str, toolset: str = "custom") -> FunctionTool:
    return FunctionTool(ToolSpec(name=name, description="d", toolset=toolset), _ok)


def test_registry_rejects_collisions_and_repairs_names() -> None:
    registry = ToolRegistry([_tool("read_file"), _tool("web_search")])
    with pytest.raises(ToolNameCollision, match="read_file"):
        registry.register(_tool("read_file", "other"))
    assert registry.repair_name("ReadFile") == "read_file"
    assert registry.repair_name("read-file") == "read_file"
    assert registry.repair_name("read_file_tool") == "read_file"
    assert registry.repair_name('web_search"extra') == "web_search"
    assert registry.repair_name("web_serch") == "web_search"
    assert registry.repair_name("delete_everything") is None


@pytest.mark.anyio
async def test_availability_checks_are_cached_for_the_ttl() -> None:
    now = [0.0]
    checks = 0

    async def check() -> bool:
        nonlocal checks
        checks += 1
        return checks > 1

    tool = FunctionTool(ToolSpec(name="flaky", description="d"), _ok, check=check)
    registry = ToolRegistry([tool], clock=lambda: now[0], ttl=30)
    assert await registry.available_specs() == ()
    assert await registry.available_specs() == ()
    now[0] = 31
    assert [s.name for s in await registry.available_specs()] == ["flaky"]
    assert checks == 2


# -- results and arguments -------------------------------------------------------------


def test_truncation_keeps_head_and_tail() -> None:
    text = "a" * 100 + "z" * 100
    out = truncate_result(text, 50)
    assert out.startswith("a" * 20) and out.endswith("z" * 30)
    assert "150 chars omitted out of 200 total" in out
    assert truncate_result("short", 50) == "short"


def test_batch_cap_cuts_the_largest_results_first() -> None:
    results = ["x" * 100, "y" * 1000, "z" * 50]
    capped = cap_batch(results, cap=600)
    assert capped[0] == results[0] and capped[2] == results[2]
    assert len(capped[1]) < 600 and "OUTPUT TRUNCATED" in capped[1]


def test_schema_problems_name_what_is_wrong() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "mode": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
    assert schema_problems(schema, {"n": 1, "mode": "a", "tags": ["x"]}) == []
    problems = schema_problems(schema, {"n": True, "mode": "c", "tags": [1], "extra": 0})
    assert "n should be integer, got bool" in problems
    assert any("mode must be one of" in p for p in problems)
    assert "tags[0] should be string, got int" in problems
    assert "unexpected argument extra" in problems
    assert schema_problems(schema, {}) == ["missing required argument n"]


# -- message codec ---------------------------------------------------------------------

TEXT = st.text(max_size=20)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
CALLS = st.builds(
    ToolCall,
    id=TEXT,
    name=TEXT,
    arguments=TEXT,
    extra=st.dictionaries(st.sampled_from(["call_id", "response_item_id"]), TEXT, max_size=2),
)
MESSAGES = st.one_of(
    st.builds(SystemMessage, content=TEXT),
    st.builds(UserMessage, content=TEXT),
    st.builds(
        AssistantMessage,
        content=st.none() | TEXT,
        reasoning=st.none() | TEXT,
        tool_calls=st.lists(CALLS, max_size=3).map(tuple),
        finish_reason=st.none() | st.sampled_from(["stop", "tool_calls"]),
        provider_data=st.dictionaries(
            st.sampled_from(["reasoning_details", "reasoning_content", "codex_reasoning_items"]),
            JSONISH,
            max_size=2,
        ),
    ),
    st.builds(
        ToolMessage, tool_call_id=TEXT, content=TEXT, name=st.none() | TEXT, is_error=st.booleans()
    ),
)


@given(MESSAGES)
def test_dict_codec_round_trips_every_message(message: Any) -> None:
    raw = message_to_dict(message)
    assert message_from_dict(raw) == message
    assert message_from_dict(json.loads(json.dumps(raw))) == message


def test_codec_keeps_unknown_keys_and_speaks_openai_shape() -> None:
    raw = {
        "role": "assistant",
        "content": None,
        "reasoning_details": [{"type": "reasoning.text", "text": "t", "signature": "s"}],
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "f", "arguments": {"a": 1}},
                "extra_content": {"google": {"thought_signature": "sig"}},
            }
        ],
        "_compressed_summary": True,
    }
    message = message_from_dict(raw)
    assert isinstance(message, AssistantMessage)
    assert message.tool_calls[0].arguments == '{"a": 1}'
    assert message.tool_calls[0].parsed_arguments() == {"a": 1}
    back = message_to_dict(message)
    assert back["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "sig"}}
    assert back["reasoning_details"] == raw["reasoning_details"]
    assert back["_compressed_summary"] is True


def test_codec_rejects_unknown_roles_with_a_clear_error() -> None:
    with pytest.raises(TranscriptError, match="role 'robot'"):
        message_from_dict({"role": "robot", "content": "x"})


def test_usage_adds_and_derives_totals() -> None:
    total = Usage(input_tokens=10, cache_read_tokens=5, output_tokens=3) + Usage(
        input_tokens=1, cache_write_tokens=2, output_tokens=1, reasoning_tokens=1
    )
    assert total.prompt_tokens == 18 and total.total_tokens == 22
    assert total.reasoning_tokens == 1
