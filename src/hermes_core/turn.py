"""The turn state machine: a pure transition function over the eight stages of a turn.

The async driver (:mod:`hermes_core.agent`) performs I/O and reports what happened as an
event; :func:`step` decides what to do next. Keeping the decisions pure makes every exit
path (budget spent, three invalid tool batches, interrupt, provider failure) testable
without a model, and keeps the driver a thin loop.

Stages, in order: input -> history -> prompt -> provider -> persist (the user message) ->
model <-> tools (each completed group persisted before the next call) -> delivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, TypeAlias

__all__ = [
    "MAX_INVALID_STRIKES",
    "AssembleHistory",
    "BuildPrompt",
    "CallModel",
    "Decision",
    "Deliver",
    "Event",
    "HistoryReady",
    "InputReady",
    "Interrupted",
    "InvalidTransition",
    "ModelFailed",
    "ModelReplied",
    "Outcome",
    "Persist",
    "Persisted",
    "PromptReady",
    "ProviderReady",
    "ResolveProvider",
    "RunTools",
    "Stage",
    "ToolsDone",
    "TurnState",
    "step",
]

MAX_INVALID_STRIKES = 3
"""Consecutive all-invalid tool batches after which the turn ends partial."""


class Stage(StrEnum):
    INPUT = "input"
    HISTORY = "history"
    PROMPT = "prompt"
    PROVIDER = "provider"
    MODEL = "model"
    TOOLS = "tools"
    PERSIST = "persist"
    DELIVERY = "delivery"


# -- events: what the driver observed ------------------------------------------------


@dataclass(frozen=True, slots=True)
class InputReady:
    """The user text (or delegated goal) is normalised."""


@dataclass(frozen=True, slots=True)
class HistoryReady:
    """History is assembled and repaired."""


@dataclass(frozen=True, slots=True)
class PromptReady:
    """The system prompt is built (or reused, frozen)."""


@dataclass(frozen=True, slots=True)
class ProviderReady:
    """The model port is bound and its api mode recorded."""


@dataclass(frozen=True, slots=True)
class ModelReplied:
    tool_calls: int
    finish_reason: str
    has_text: bool


@dataclass(frozen=True, slots=True)
class ModelFailed:
    error: str


@dataclass(frozen=True, slots=True)
class ToolsDone:
    """A tool batch finished; ``invalid_name`` is set when every call in it was invalid."""

    invalid_name: str | None = None


@dataclass(frozen=True, slots=True)
class Persisted:
    """Pending messages are flushed; ``budget_available`` says whether another call fits."""

    budget_available: bool


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The host asked the agent to stop at this safe point."""


Event: TypeAlias = (
    InputReady
    | HistoryReady
    | PromptReady
    | ProviderReady
    | ModelReplied
    | ModelFailed
    | ToolsDone
    | Persisted
    | Interrupted
)

# -- decisions: what the driver does next ----------------------------------------------


@dataclass(frozen=True, slots=True)
class AssembleHistory:
    pass


@dataclass(frozen=True, slots=True)
class BuildPrompt:
    pass


@dataclass(frozen=True, slots=True)
class ResolveProvider:
    pass


@dataclass(frozen=True, slots=True)
class Persist:
    pass


@dataclass(frozen=True, slots=True)
class CallModel:
    """Call the model; ``summary`` is the one tool-free call after the budget is spent."""

    summary: bool = False


@dataclass(frozen=True, slots=True)
class RunTools:
    pass


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_reason: str
    completed: bool
    partial: bool = False
    failed: bool = False
    interrupted: bool = False
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Deliver:
    outcome: Outcome


Decision: TypeAlias = (
    AssembleHistory | BuildPrompt | ResolveProvider | Persist | CallModel | RunTools | Deliver
)


class InvalidTransition(RuntimeError):
    """The driver reported an event that cannot happen in the current stage (a bug)."""


class TurnState(NamedTuple):
    """Everything the decisions depend on; the transcript itself lives in the driver.

    A named tuple rather than a frozen dataclass: as immutable, and the driver derives a
    new state several times per model round, where ``_replace`` costs half of
    ``dataclasses.replace``.
    """

    stage: Stage = Stage.INPUT
    api_calls: int = 0
    max_iterations: int = 90
    invalid_strikes: int = 0
    summary_call: bool = False
    pending: Outcome | None = None
    """An outcome decided before the last flush; delivered once ``Persisted`` arrives."""


def _deliver(state: TurnState, outcome: Outcome) -> tuple[TurnState, Decision]:
    return state._replace(stage=Stage.DELIVERY, pending=None), Deliver(outcome)


def _flush_then(state: TurnState, outcome: Outcome | None) -> tuple[TurnState, Decision]:
    return state._replace(stage=Stage.PERSIST, pending=outcome), Persist()


def _after_flush(state: TurnState, event: Persisted) -> tuple[TurnState, Decision]:
    if state.pending is not None:
        return _deliver(state, state.pending)
    if event.budget_available:
        return state._replace(stage=Stage.MODEL), CallModel()
    return state._replace(stage=Stage.MODEL, summary_call=True), CallModel(summary=True)


def _after_reply(state: TurnState, event: ModelReplied) -> tuple[TurnState, Decision]:
    state = state._replace(api_calls=state.api_calls + 1)
    if state.summary_call:
        reason = f"max_iterations_reached({state.api_calls}/{state.max_iterations})"
        return _flush_then(state, Outcome(exit_reason=reason, completed=False))
    if event.tool_calls:
        return state._replace(stage=Stage.TOOLS), RunTools()
    reason = f"text_response(finish_reason={event.finish_reason})"
    if event.finish_reason == "length" and not event.has_text:
        truncated = Outcome(
            exit_reason=reason,
            completed=False,
            partial=True,
            error="Response truncated due to output length limit",
        )
        return _flush_then(state, truncated)
    return _flush_then(state, Outcome(exit_reason=reason, completed=True))


def _after_tools(state: TurnState, event: ToolsDone) -> tuple[TurnState, Decision]:
    if event.invalid_name is None:
        return _flush_then(state._replace(invalid_strikes=0), None)
    strikes = state.invalid_strikes + 1
    state = state._replace(invalid_strikes=strikes)
    if strikes >= MAX_INVALID_STRIKES:
        outcome = Outcome(
            exit_reason="invalid_tool_calls",
            completed=False,
            partial=True,
            error=f"Model generated invalid tool call: {event.invalid_name}",
        )
        return _flush_then(state, outcome)
    return _flush_then(state, None)


def step(state: TurnState, event: Event) -> tuple[TurnState, Decision]:
    """The next state and decision after ``event`` in ``state``.

    Raises:
        InvalidTransition: ``event`` cannot occur in ``state.stage``.
    """
    match state.stage, event:
        case _, Interrupted() if state.stage is not Stage.DELIVERY:
            outcome = Outcome(exit_reason="interrupted_by_user", completed=False, interrupted=True)
            return _flush_then(state, outcome)
        case Stage.INPUT, InputReady():
            return state._replace(stage=Stage.HISTORY), AssembleHistory()
        case Stage.HISTORY, HistoryReady():
            return state._replace(stage=Stage.PROMPT), BuildPrompt()
        case Stage.PROMPT, PromptReady():
            return state._replace(stage=Stage.PROVIDER), ResolveProvider()
        case Stage.PROVIDER, ProviderReady():
            return _flush_then(state, None)
        case Stage.PERSIST, Persisted():
            return _after_flush(state, event)
        case Stage.MODEL, ModelReplied():
            return _after_reply(state, event)
        case Stage.MODEL, ModelFailed(error=error):
            outcome = Outcome(
                exit_reason="provider_error", completed=False, failed=True, error=error
            )
            return _flush_then(state, outcome)
        case Stage.TOOLS, ToolsDone():
            return _after_tools(state, event)
    raise InvalidTransition(f"event {type(event).__name__} cannot happen in stage {state.stage}")
