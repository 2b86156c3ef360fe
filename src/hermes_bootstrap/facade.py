"""``AIAgent``: the familiar public API, built through the container.

The constructor only stores its arguments; the model, the store and the tools are opened
on ``__aenter__`` or the first turn, so constructing an agent never touches the network or
the disk. Everything the facade opens it owns and closes in ``close()``; a store passed in
by the host (``session_db=``) is borrowed and left open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from hermes_bootstrap.container import build_container, resolve
from hermes_bootstrap.tools import build_tools
from hermes_core.agent import Agent, AgentSettings, StreamCallback
from hermes_core.events import TurnEvent
from hermes_core.messages import Message
from hermes_core.ports.llm import ChatModel
from hermes_core.ports.sessions import SessionStore
from hermes_core.ports.tools import Tool
from hermes_core.ports.trajectories import TrajectorySink

__all__ = ["AIAgent"]


class AIAgent:
    """An agent configured by name: provider, model, toolsets, store."""

    def __init__(
        self,
        provider: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        enabled_toolsets: Sequence[str] | None = None,
        disabled_toolsets: Sequence[str] | None = None,
        max_iterations: int = 90,
        session_db: SessionStore | None = None,
        session_id: str | None = None,
        save_trajectories: bool = False,
        skip_context_files: bool = False,
        skip_memory: bool = False,
        reasoning_config: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        clarify_callback: Any = None,
        stream_callback: StreamCallback | None = None,
        *,
        chat_model: ChatModel | None = None,
        tools: Sequence[Tool] = (),
        workspace: str | Path | None = None,
        trajectories: TrajectorySink | None = None,
        approval_callback: Any = None,
        on_event: Callable[[TurnEvent], None] | None = None,
        system_prompt: str | None = None,
    ) -> None:
        self.provider = provider or ("scripted" if chat_model is None else chat_model.provider)
        self.model = model or "hermes-demo"
        self.api_key = api_key
        self.base_url = base_url
        self.enabled_toolsets = list(enabled_toolsets) if enabled_toolsets is not None else None
        self.disabled_toolsets = list(disabled_toolsets or ())
        self.max_iterations = max_iterations
        self.session_db = session_db
        self.session_id = session_id
        self.save_trajectories = save_trajectories
        self.skip_context_files = skip_context_files
        self.skip_memory = skip_memory
        self.reasoning_config = reasoning_config
        self.max_tokens = max_tokens
        self.clarify_callback = clarify_callback
        self.stream_callback = stream_callback
        self.approval_callback = approval_callback
        self.on_event = on_event
        self.system_prompt = system_prompt
        self.workspace = Path(workspace) if workspace is not None else None
        self._chat_model = chat_model
        self._extra_tools = list(tools)
        self._trajectories = trajectories
        self._agent: Agent | None = None
        self._open_lock = anyio.Lock()
        self._closed = False

    async def __aenter__(self) -> AIAgent:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _open(self) -> Agent:
        async with self._open_lock:
            if self._closed:
                raise RuntimeError("this AIAgent is closed; create a new one")
            if self._agent is None:
                self._agent = await self._build()
            return self._agent

    async def _build(self) -> Agent:
        owned: list[Any] = []
        backend = "memory" if self.session_id is not None and self.session_db is None else "none"
        llm = "demo" if self.provider == "scripted" else self.provider
        container = build_container(llm=llm, model=self.model, store=backend)
        model = self._chat_model
        if model is None:
            model = await resolve(container.model())
            owned.append(model)
        sessions = self.session_db
        if sessions is None:
            sessions = await resolve(container.sessions())
            if sessions is not None:
                owned.append(_Closing(sessions))
        built = await build_tools(
            enabled=self.enabled_toolsets,
            disabled=self.disabled_toolsets,
            workspace=self.workspace,
            extra=self._extra_tools,
        )
        owned.extend(built.owned)
        settings = AgentSettings(
            max_iterations=self.max_iterations,
            max_tokens=self.max_tokens,
            reasoning=self.reasoning_config,
            skip_memory=self.skip_memory,
            save_trajectories=self.save_trajectories,
            identity=self.system_prompt,
        )
        return Agent(
            model,
            built.registry,
            sessions=sessions,
            trajectories=self._trajectories,
            settings=settings,
            clarifier=self.clarify_callback,
            approver=self.approval_callback,
            session_id=self.session_id,
            on_event=self.on_event,
            stream_callback=self.stream_callback,
            owned=owned,
        )

    @property
    def core(self) -> Agent | None:
        """The ``hermes_core.Agent`` behind the facade, once opened."""
        return self._agent

    async def run_conversation(
        self,
        user_message: str,
        system_message: str | None = None,
        conversation_history: Sequence[Message | Mapping[str, Any]] | None = None,
        task_id: str | None = None,
        stream_callback: StreamCallback | None = None,
    ) -> dict[str, Any]:
        agent = await self._open()
        result = await agent.run_conversation(
            user_message, system_message, conversation_history, task_id, stream_callback
        )
        self.session_id = agent.session_id
        return result

    async def chat(self, message: str) -> str:
        agent = await self._open()
        return await agent.chat(message)

    def interrupt(self, message: str | None = None) -> None:
        if self._agent is not None:
            self._agent.interrupt(message)

    async def close(self) -> None:
        """Release everything this facade opened; idempotent."""
        async with self._open_lock:
            self._closed = True
            agent, self._agent = self._agent, None
        if agent is not None:
            await agent.close()


class _Closing:
    """Adapts a store's ``close()`` to the ``aclose()`` the agent calls on owned things."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    async def aclose(self) -> None:
        await self._store.close()
