"""The agent: one turn loop that every surface goes through.

:class:`Agent` drives the pure state machine of :mod:`hermes_core.turn` over the ports:
it calls the model, runs tools through the scheduler, keeps the transcript valid,
persists each completed group, and turns the outcome into the result dict users know.
It borrows what it is given (model, store, tools) and closes only what it is handed in
``owned``, so hosts can share a store or a model between agents.

Correctness under cancellation: when the host cancels a turn, the tool task group cancels
and awaits its children, then a shielded, time-bounded finaliser answers every open tool
call with a "cancelled" result and persists it, and only then does the cancellation
propagate. The next turn resumes from a valid transcript.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from types import TracebackType
from typing import Any, Protocol

import anyio

from hermes_core.budget import IterationBudget
from hermes_core.compactor import Compactor
from hermes_core.compression import CompressionSettings, context_window_for
from hermes_core.dispatch import prepare_calls, run_call
from hermes_core.errors import ContextTooLong, HermesError, ModelError
from hermes_core.events import (
    Compressed,
    ModelRequestStarted,
    ModelResponded,
    StageEntered,
    TurnEvent,
    TurnFinished,
    TurnStarted,
)
from hermes_core.invariants import repair
from hermes_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    message_from_dict,
)
from hermes_core.ports.llm import (
    CacheHints,
    ChatModel,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    TextDelta,
)
from hermes_core.ports.mcp import ToolSource
from hermes_core.ports.memory import MemoryStore
from hermes_core.ports.sessions import SessionStore
from hermes_core.ports.tools import Tool, ToolContext, ToolResult, ToolSpec
from hermes_core.ports.trajectories import TrajectorySink
from hermes_core.prompt import SystemPrompt, build_system_prompt
from hermes_core.registry import ToolRegistry
from hermes_core.results import BATCH_RESULT_CAP
from hermes_core.running_turn import RunningTurn, StreamCallback, new_session_id, strip_think
from hermes_core.scheduling import DEFAULT_MAX_WORKERS, PlannedCall, plan_batch, run_segments
from hermes_core.sources import register_sources
from hermes_core.trajectory import build_trajectory
from hermes_core.turn import (
    AssembleHistory,
    BuildPrompt,
    CallModel,
    Decision,
    Deliver,
    Event,
    HistoryReady,
    InputReady,
    Interrupted,
    ModelFailed,
    ModelReplied,
    Outcome,
    Persist,
    Persisted,
    PromptReady,
    ProviderReady,
    ResolveProvider,
    RunTools,
    ToolsDone,
    TurnState,
    step,
)

__all__ = ["Agent", "AgentSettings", "StreamCallback"]

log = logging.getLogger("hermes.agent")

SUMMARY_REQUEST = (
    "You've reached the maximum number of tool-calling iterations allowed. Please provide a "
    "final response summarizing what you've found and accomplished so far, without calling "
    "any more tools."
)
SUMMARY_FALLBACK = "I reached the iteration limit and couldn't generate a summary."
INTERRUPTED_REPLY = "Operation interrupted."
FINALISE_TIMEOUT = 5.0


class _Closeable(Protocol):
    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Knobs of the turn loop. Defaults match the behaviour Hermes users know."""

    max_iterations: int = 90
    max_tool_workers: int = DEFAULT_MAX_WORKERS
    tool_timeout: float | None = 300.0
    batch_result_cap: int = BATCH_RESULT_CAP
    max_tokens: int | None = None
    reasoning: Mapping[str, Any] | None = None
    identity: str | None = None
    context: str | None = None
    """Pre-rendered project context (the bootstrap reads the files)."""
    skills_index: str | None = None
    """The skills index for the stable prompt tier (the bootstrap discovers skills)."""
    skip_memory: bool = False
    save_trajectories: bool = False
    source: str = "library"
    sampling: Mapping[str, Any] = field(default_factory=dict)
    date_in_prompt: bool = True
    compression: CompressionSettings | None = None
    """``None``: the defaults, with the window of the model's family."""
    redact_secrets: bool = True
    """Redact known key shapes from tool output and saved trajectories."""


class Agent:
    """An agent over explicit ports. See the module docstring for the guarantees."""

    def __init__(
        self,
        model: ChatModel,
        tools: ToolRegistry | Iterable[Tool] = (),
        *,
        sessions: SessionStore | None = None,
        memory: MemoryStore | None = None,
        tool_sources: Sequence[ToolSource] = (),
        trajectories: TrajectorySink | None = None,
        settings: AgentSettings | None = None,
        clarifier: Any = None,
        approver: Any = None,
        session_id: str | None = None,
        budget: IterationBudget | None = None,
        on_event: Callable[[TurnEvent], None] | None = None,
        stream_callback: StreamCallback | None = None,
        owned: Sequence[_Closeable] = (),
        services: Mapping[str, Any] | None = None,
        summarizer: ChatModel | None = None,
    ) -> None:
        self.model = model
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.sessions = sessions
        self.memory = memory
        self.tool_sources = tuple(tool_sources)
        self.trajectories = trajectories
        self.settings = settings or AgentSettings()
        self.clarifier = clarifier
        self.approver = approver
        self.session_id = session_id
        self._shared_budget = budget
        self._on_event = on_event
        self._stream_callback = stream_callback
        self._owned = list(owned)
        self._services = dict(services or {})
        self._lock = anyio.Lock()
        self._history: list[Message] = []
        self._prompt: SystemPrompt | None = None
        self._specs: tuple[ToolSpec, ...] | None = None
        self._session_ready = False
        self._sources_loaded = False
        self._cache_key = uuid.uuid4().hex
        compression = self.settings.compression or CompressionSettings(
            context_window=context_window_for(model.model_name),
            max_output_tokens=self.settings.max_tokens or 0,
        )
        self._compactor = Compactor(compression, summarizer or model)
        self._interrupt: str | None = None
        self._interrupt_requested = False
        self._closed = False
        self._system: SystemMessage | None = None
        self._overhead: tuple[object, object, int] | None = None

    # -- public API ------------------------------------------------------------------

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def history(self) -> list[Message]:
        """The conversation so far (without the system prompt)."""
        return list(self._history)

    @property
    def system_prompt(self) -> str | None:
        return self._prompt.text if self._prompt else None

    def interrupt(self, message: str | None = None) -> None:
        """Stop the running turn at its next safe point; unstarted tools are skipped."""
        self._interrupt_requested = True
        self._interrupt = message

    def reset(self) -> None:
        """Forget the in-memory conversation; the next turn starts fresh."""
        self._history = []
        self._prompt = None
        self._specs = None

    async def chat(self, message: str) -> str:
        """Run one turn and return only the final text ("" when there is none)."""
        result = await self.run_conversation(message)
        return str(result.get("final_response") or "")

    async def close(self) -> None:
        """Release what the agent owns; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        for resource in reversed(self._owned):
            try:
                await resource.aclose()
            except Exception:
                log.exception("closing %r failed", resource)

    async def run_conversation(
        self,
        user_message: str,
        system_message: str | None = None,
        conversation_history: Sequence[Message | Mapping[str, Any]] | None = None,
        task_id: str | None = None,
        stream_callback: StreamCallback | None = None,
    ) -> dict[str, Any]:
        """Run one turn to its end and return the result dict.

        Turns on one agent run one at a time, in arrival order.

        Raises:
            HermesError: the agent is closed, or the store failed.
        """
        if self._closed:
            raise HermesError("this agent is closed; create a new one")
        async with self._lock:
            try:
                return await self._run_turn(
                    user_message, system_message, conversation_history, task_id, stream_callback
                )
            finally:
                self._interrupt_requested = False
                self._interrupt = None

    # -- the driver ------------------------------------------------------------------

    async def _run_turn(
        self,
        user_message: str,
        system_message: str | None,
        history: Sequence[Message | Mapping[str, Any]] | None,
        task_id: str | None,
        stream_callback: StreamCallback | None,
    ) -> dict[str, Any]:
        turn = RunningTurn(
            task_id=task_id or uuid.uuid4().hex,
            user_text=str(user_message).strip(),
            system_message=system_message,
            stream_callback=stream_callback or self._stream_callback,
            budget=self._shared_budget or IterationBudget(self.settings.max_iterations),
        )
        self._emit(TurnStarted(turn.task_id, self.session_id))
        state, decision = step(TurnState(max_iterations=self.settings.max_iterations), InputReady())
        try:
            while not isinstance(decision, Deliver):
                if self._on_event is not None:
                    self._emit(StageEntered(state.stage.value))
                event = await self._perform(decision, turn, history)
                state, decision = step(state, event)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(FINALISE_TIMEOUT):
                await self._finalise_cancelled(turn)
            raise
        return await self._deliver(turn, decision.outcome)

    async def _perform(
        self,
        decision: Decision,
        turn: RunningTurn,
        history: Sequence[Message | Mapping[str, Any]] | None,
    ) -> Event:
        match decision:
            case AssembleHistory():
                await self._assemble_history(turn, history)
                return HistoryReady()
            case BuildPrompt():
                await self._build_prompt(turn)
                return PromptReady()
            case ResolveProvider():
                await self._ensure_session()
                return ProviderReady()
            case Persist():
                await self._flush(turn)
                available = not turn.budget.exhausted
                return Persisted(available and turn.api_calls < self.settings.max_iterations)
            case CallModel(summary=summary):
                if not summary and self._interrupt_requested:
                    return self._interrupted(turn)
                return await self._call_model(turn, summary=summary)
            case RunTools():
                return await self._run_tools(turn)
        raise AssertionError(f"unhandled decision {decision!r}")

    async def _assemble_history(
        self, turn: RunningTurn, given: Sequence[Message | Mapping[str, Any]] | None
    ) -> None:
        if given is not None:
            base = [m if not isinstance(m, Mapping) else message_from_dict(m) for m in given]
        elif self.sessions is not None and self.session_id is not None and not self._history:
            base = await self.sessions.get_conversation(self.session_id)
        else:
            base = list(self._history)
        base = [m for m in base if not isinstance(m, SystemMessage)]
        turn.set_transcript(repair(base))
        turn.start = len(turn.transcript)
        turn.add(UserMessage(content=turn.user_text))

    async def _build_prompt(self, turn: RunningTurn, *, fresh: bool = False) -> None:
        if self._specs is None:
            if self.tool_sources and not self._sources_loaded:
                await register_sources(self.tools, self.tool_sources)
                self._sources_loaded = True
            self._specs = await self.tools.available_specs()
        if self._prompt is not None:
            return
        stored = None
        if not fresh and self.sessions is not None and self.session_id is not None:
            info = await self.sessions.get_session(self.session_id)
            stored = info.system_prompt if info is not None else None
        if stored:
            self._prompt = SystemPrompt(stored, stable_chars=0)
            return
        snapshot = None
        if self.memory is not None and not self.settings.skip_memory:
            snapshot = await self.memory.snapshot()
        self._prompt = build_system_prompt(
            identity=self.settings.identity,
            tool_names=[s.name for s in self._specs],
            skills_index=self.settings.skills_index,
            system_message=turn.system_message,
            context=self.settings.context,
            memory=snapshot,
            today=date.today() if self.settings.date_in_prompt else None,
        )

    async def _ensure_session(self) -> None:
        if self.sessions is None or self._session_ready:
            return
        if self.session_id is None:
            self.session_id = new_session_id()
        await self.sessions.ensure_session(
            self.session_id, source=self.settings.source, model=self.model.model_name
        )
        if self._prompt is not None:
            await self.sessions.update_system_prompt(self.session_id, self._prompt.text)
        self._session_ready = True

    async def _flush(self, turn: RunningTurn) -> None:
        if not turn.pending:
            return
        if self.sessions is not None and self.session_id is not None:
            await self.sessions.append_messages(self.session_id, list(turn.pending))
        turn.pending.clear()

    def _request(self, turn: RunningTurn, *, tools: bool) -> ModelRequest:
        """The next model request. ``tools=False`` still offers the frozen specs but with
        ``tool_choice="none"``: strict servers reject a transcript holding tool calls and
        results when no tools are defined, and the cached prefix stays byte-identical."""
        assert self._prompt is not None and self._specs is not None
        return ModelRequest(
            messages=(self._system_message(), *turn.transcript),
            tools=self._specs,
            model=self.model.model_name,
            max_tokens=self.settings.max_tokens,
            reasoning=self.settings.reasoning,
            tool_choice=None if tools else "none",
            cache=CacheHints(
                stable_system_chars=self._prompt.stable_chars or None, cache_key=self._cache_key
            ),
            settings=self.settings.sampling,
        )

    async def _invoke(self, turn: RunningTurn, request: ModelRequest) -> ModelResponse:
        self._emit(
            ModelRequestStarted(
                turn.api_calls + 1,
                len(request.messages),
                len(request.tools),
                turn.stream_callback is not None,
            )
        )
        started = time.perf_counter()
        if turn.stream_callback is None:
            response = await self.model.complete(request)
        else:
            response = await self._stream(request, turn.stream_callback)
        turn.api_calls += 1
        turn.usage = turn.usage + response.usage
        self._emit(
            ModelResponded(
                turn.api_calls,
                response.finish_reason,
                len(response.message.tool_calls),
                time.perf_counter() - started,
                response.usage,
            )
        )
        return response

    async def _stream(self, request: ModelRequest, callback: StreamCallback) -> ModelResponse:
        events = self.model.stream(request)
        try:
            async for event in events:
                if isinstance(event, TextDelta) and event.text:
                    outcome = callback(event.text)
                    if inspect.isawaitable(outcome):
                        await outcome
                elif isinstance(event, ResponseComplete):
                    return event.response
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        raise ModelError("the model's stream ended without a complete response")

    async def _call_model(self, turn: RunningTurn, *, summary: bool) -> Event:
        if summary:
            return await self._summary_call(turn)
        turn.budget.consume()
        if self._compactor.due_chars(turn.chars + self._overhead_chars()):
            await self._compact(turn, reason="threshold")
        attempts = 0
        while True:
            try:
                response = await self._invoke(turn, self._request(turn, tools=True))
                break
            except ContextTooLong as exc:
                attempts += 1
                if attempts > self._compactor.settings.max_attempts or not await self._compact(
                    turn, reason="context_too_long"
                ):
                    return ModelFailed(f"{type(exc).__name__}: {exc}")
            except ModelError as exc:
                return ModelFailed(f"{type(exc).__name__}: {exc}")
        self._compactor.last_prompt_tokens = response.usage.prompt_tokens
        message = response.message
        if message.tool_calls:
            message, turn.open_calls = prepare_calls(
                message, self.tools, {s.name for s in self._specs or ()}
            )
            turn.slots = [None] * len(turn.open_calls)
        else:
            turn.final_response = strip_think(message.content or "")
        if message.reasoning:
            turn.last_reasoning = message.reasoning
        turn.add(message)
        return ModelReplied(
            len(message.tool_calls), response.finish_reason, bool((message.content or "").strip())
        )

    def _overhead_chars(self) -> int:
        """Prompt and schema characters; recomputed only when the prompt or specs change."""
        cached = self._overhead
        if cached is not None and cached[0] is self._prompt and cached[1] is self._specs:
            return cached[2]
        prompt = len(self._prompt.text) if self._prompt else 0
        chars = prompt + sum(len(str(s.parameters)) + len(s.description) for s in self._specs or ())
        self._overhead = (self._prompt, self._specs, chars)
        return chars

    def _system_message(self) -> SystemMessage:
        """One object per prompt text, so adapters' identity caches hit every round."""
        assert self._prompt is not None
        if self._system is None or self._system.content != self._prompt.text:
            self._system = SystemMessage(content=self._prompt.text)
        return self._system

    async def _compact(self, turn: RunningTurn, *, reason: str) -> bool:
        """Compress the transcript; continue in a lineage-linked child session if stored."""
        await self._flush(turn)
        before = len(turn.transcript)
        current_user = turn.transcript[turn.start]
        compacted = await self._compactor.compact(turn.transcript)
        if compacted is None:
            return False
        if self.sessions is not None and self.session_id is not None:
            child = new_session_id()
            await self.sessions.publish_compression_child(
                self.session_id, child, compacted, source=self.settings.source
            )
            self.session_id = child
        self._prompt = None
        await self._build_prompt(turn, fresh=True)
        if self.sessions is not None and self.session_id is not None and self._prompt:
            await self.sessions.update_system_prompt(self.session_id, self._prompt.text)
        turn.set_transcript(compacted)
        turn.start = next(
            (i for i, m in enumerate(compacted) if m is current_user),
            max(i for i, m in enumerate(compacted) if isinstance(m, UserMessage)),
        )
        self._emit(Compressed(before, len(compacted), reason, self.session_id))
        return True

    async def _summary_call(self, turn: RunningTurn) -> Event:
        """One last call that may not use tools; any tool calls it returns anyway are
        dropped, and only its text (or the fallback) becomes the final answer."""
        turn.add(UserMessage(content=SUMMARY_REQUEST))
        text = ""
        try:
            for _ in range(2):
                response = await self._invoke(turn, self._request(turn, tools=False))
                text = strip_think(response.message.content or "")
                if text:
                    break
            text = text or SUMMARY_FALLBACK
        except ModelError as exc:
            text = (
                f"I reached the maximum iterations ({self.settings.max_iterations}) but "
                f"couldn't summarize. Error: {exc}"
            )
        turn.final_response = text
        turn.add(AssistantMessage(content=text, finish_reason="stop"))
        return ModelReplied(0, "stop", True)

    def _interrupted(self, turn: RunningTurn) -> Event:
        if turn.transcript and isinstance(turn.transcript[-1], ToolMessage):
            turn.add(AssistantMessage(content=INTERRUPTED_REPLY, finish_reason="stop"))
        return Interrupted()

    async def _run_tools(self, turn: RunningTurn) -> Event:
        calls = turn.open_calls
        planned = [PlannedCall(p.index, p.tool.spec if p.tool else None, p.args) for p in calls]
        ctx_services = self._tool_services(turn)

        async def run_one(index: int) -> ToolResult:
            prepared = calls[index]
            ctx = ToolContext(turn.task_id, self.session_id, prepared.call.id, ctx_services)
            return await run_call(
                prepared,
                ctx,
                default_timeout=self.settings.tool_timeout,
                emit=self._emit if self._on_event is not None else None,
                redact_secrets=self.settings.redact_secrets,
            )

        await run_segments(
            plan_batch(planned),
            run_one,
            turn.slots,
            max_workers=self.settings.max_tool_workers,
            should_stop=lambda: self._interrupt_requested,
        )
        turn.close_tool_group(batch_cap=self.settings.batch_result_cap)
        if self._interrupt_requested:
            return self._interrupted(turn)
        invalid = [p for p in calls if p.error is not None]
        all_invalid = bool(calls) and len(invalid) == len(calls)
        return ToolsDone(invalid[0].call.name or "(empty)" if all_invalid else None)

    def _tool_services(self, turn: RunningTurn) -> dict[str, Any]:
        services = {
            "agent": self,
            "budget": turn.budget,
            "clarifier": self.clarifier,
            "approver": self.approver,
            "sessions": self.sessions,
            "memory": self.memory,
            "emit": self._emit,
        }
        services.update(self._services)
        return services

    async def _finalise_cancelled(self, turn: RunningTurn) -> None:
        """Shielded: answer open calls, persist what is pending, keep history valid."""
        turn.close_tool_group(batch_cap=self.settings.batch_result_cap, cancelled=True)
        self._history = repair(turn.transcript)
        try:
            await self._flush(turn)
        except Exception:
            log.exception("persisting the cancelled turn failed")

    async def _deliver(self, turn: RunningTurn, outcome: Outcome) -> dict[str, Any]:
        self._history = list(turn.transcript)
        if self.sessions is not None and self.session_id is not None:
            await self.sessions.update_token_counts(
                self.session_id, turn.usage, api_calls=turn.api_calls, model=self.model.model_name
            )
        if self.trajectories is not None and self.settings.save_trajectories:
            with anyio.CancelScope(shield=True):
                await self._save_trajectory(turn, outcome)
        self._emit(TurnFinished(outcome.exit_reason, turn.api_calls, outcome.completed))
        result = turn.result(
            outcome,
            session_id=self.session_id,
            model=self.model.model_name,
            provider=self.model.provider,
            api_mode=self.model.api_mode,
        )
        if outcome.interrupted:
            result["interrupt_message"] = self._interrupt
        return result

    async def _save_trajectory(self, turn: RunningTurn, outcome: Outcome) -> None:
        assert self.trajectories is not None
        try:
            trajectory = build_trajectory(
                turn.transcript[turn.start :],
                model=self.model.model_name,
                completed=outcome.completed,
                tools=[s.function_schema() for s in self._specs or ()],
            )
            if self.settings.redact_secrets:
                trajectory = trajectory.redacted()
            await self.trajectories.append(trajectory)
        except Exception:
            log.exception("saving the trajectory failed")

    def _emit(self, event: TurnEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            log.exception("on_event subscriber failed on %r", event)
