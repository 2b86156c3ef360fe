"""``AIAgent`` and ``build_agent``: the familiar public API, built through the container.

The constructor only stores its arguments; configuration is read and the model, store,
memory and tools are opened on ``__aenter__`` or the first turn, so constructing an agent
never touches the network or the disk. Everything the facade opens it owns and closes in
``close()`` (the container's resources in reverse order); a store passed in by the host
(``session_db=``) is borrowed and left open.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from hermes_bootstrap.config import HermesConfig, hermes_home, load_config
from hermes_bootstrap.container import HermesContainer, build_container, resolve
from hermes_bootstrap.context_files import render_context, soul_identity
from hermes_bootstrap.profiles import ProfileName, Resolved, resolve_settings
from hermes_bootstrap.tools import ToolOptions, build_tools
from hermes_core.agent import Agent, AgentSettings, StreamCallback
from hermes_core.errors import ConfigError
from hermes_core.events import TurnEvent
from hermes_core.messages import Message
from hermes_core.ports.llm import ChatModel
from hermes_core.ports.memory import MemoryStore
from hermes_core.ports.sessions import SessionStore
from hermes_core.ports.tools import Tool
from hermes_core.ports.trajectories import TrajectorySink

if TYPE_CHECKING:
    from hermes_adapters.mcp import MCPPool, MCPToolSource

__all__ = ["AIAgent", "AgentOptions", "build_agent", "open_agent"]


@dataclass
class AgentOptions:
    """Everything ``AIAgent`` accepts, as one value (``None`` = from config/profile)."""

    provider: str | None = None
    model: str | None = None
    api_key: str | None = None
    base_url: str | None = None
    enabled_toolsets: Sequence[str] | None = None
    disabled_toolsets: Sequence[str] | None = None
    max_iterations: int | None = None
    session_db: SessionStore | None = None
    session_id: str | None = None
    save_trajectories: bool = False
    skip_context_files: bool | None = None
    skip_memory: bool | None = None
    reasoning_config: Mapping[str, Any] | None = None
    max_tokens: int | None = None
    clarify_callback: Any = None
    stream_callback: StreamCallback | None = None
    profile: ProfileName = "local"
    home: str | os.PathLike[str] | None = None
    chat_model: ChatModel | None = None
    memory: MemoryStore | None = None
    tools: Sequence[Tool] = ()
    workspace: str | os.PathLike[str] | None = None
    trajectories: TrajectorySink | None = None
    approval_callback: Any = None
    on_event: Callable[[TurnEvent], None] | None = None
    system_prompt: str | None = None
    environ: Mapping[str, str] | None = None
    source: str = "library"
    """The session source label (``cli``, ``batch``...), used by listings and filters."""
    extra: dict[str, Any] = field(default_factory=dict)


class _Shutdown:
    """Closes the container's opened resources when the agent closes."""

    def __init__(self, container: HermesContainer) -> None:
        self._container = container

    async def aclose(self) -> None:
        await resolve(self._container.shutdown_resources())


@dataclass(frozen=True)
class _Setup:
    """What is read from disk before anything opens: config, profile, prompt context."""

    home: Path
    config: HermesConfig
    resolved: Resolved
    workspace: Path | None
    identity: str | None
    context: str | None
    skills_dirs: tuple[Path, ...]


def _read_setup(options: AgentOptions) -> _Setup:
    """The blocking part of opening an agent: small local reads, run in a worker thread."""
    home = hermes_home(options.home)
    config = load_config(home)
    resolved = resolve_settings(
        config,
        home=home,
        profile=options.profile,
        provider=options.provider if options.chat_model is None else "script",
        model=options.model,
        api_key=options.api_key,
        base_url=options.base_url,
        enabled_toolsets=options.enabled_toolsets,
        disabled_toolsets=options.disabled_toolsets,
        skip_memory=options.skip_memory,
        skip_context_files=options.skip_context_files,
        max_iterations=options.max_iterations,
        environ=options.environ,
    )
    workspace = Path(options.workspace) if options.workspace is not None else None
    return _Setup(
        home=home,
        config=config,
        resolved=resolved,
        workspace=workspace,
        identity=options.system_prompt or soul_identity(home),
        context=None if resolved.skip_context_files else render_context(workspace or Path.cwd()),
        skills_dirs=tuple(Path(d).expanduser() for d in config.skills.external_dirs),
    )


class _Release:
    """Gives an MCP source back to its pool when the agent closes."""

    def __init__(self, pool: MCPPool, name: str) -> None:
        self._pool, self._name = pool, name

    async def aclose(self) -> None:
        await self._pool.release(self._name)


async def _mcp_sources(
    servers: Mapping[str, Mapping[str, Any]],
    stack: AsyncExitStack | None,
    model: ChatModel,
    options: AgentOptions,
    owned: list[Any],
) -> list[MCPToolSource]:
    """Connect the enabled ``mcp_servers``; their pool lives on ``stack`` (the host's task).

    An MCP connection is owned by a long-lived task, which needs an owner: the task that
    entered ``async with AIAgent(...)``/``build_agent``. Without one, fail clearly.
    """
    if not servers:
        return []
    from hermes_adapters.mcp import MCPConfigError, MCPPool, MCPServerConfig  # slow import

    try:
        configs = {n: MCPServerConfig.model_validate(c) for n, c in servers.items()}
    except (ValueError, MCPConfigError) as exc:
        raise ConfigError(f"mcp_servers: {exc}") from exc
    enabled = {n: c for n, c in configs.items() if c.enabled}
    if not enabled:
        return []
    if stack is None:
        raise ConfigError(
            f"MCP servers are configured ({', '.join(sorted(enabled))}): open the agent with "
            "`async with AIAgent(...)` or `build_agent(...)` so their connections have an "
            "owner task"
        )
    pool = await stack.enter_async_context(
        MCPPool(clarifier=options.clarify_callback, sampler=model, on_event=options.on_event)
    )
    sources = []
    for name, config in enabled.items():
        sources.append(await pool.acquire(name, config))
        owned.append(_Release(pool, name))
    return sources


async def open_agent(options: AgentOptions, *, stack: AsyncExitStack | None = None) -> Agent:
    """Build a ``hermes_core.Agent`` from config, profile and explicit options.

    The returned agent owns what was opened for it; ``await agent.close()`` releases it.
    ``stack`` (entered and closed by the calling task) holds task-owning resources such
    as the MCP pool; without it, configured MCP servers are a ``ConfigError``.

    Raises:
        ConfigError: the config file or the options are invalid.
        ModelAuthError: the chosen provider has no usable key.
    """
    setup = await anyio.to_thread.run_sync(_read_setup, options)
    config, resolved, home, workspace = setup.config, setup.resolved, setup.home, setup.workspace
    container = build_container(resolved.container)
    owned: list[Any] = [_Shutdown(container)]
    try:
        model = options.chat_model
        if model is None:
            model = await resolve(container.model())
            owned.append(model)
        sessions = options.session_db
        if sessions is None:
            sessions = await resolve(container.sessions())
        memory = options.memory
        if memory is None and not resolved.skip_memory:
            memory = await resolve(container.memory())
        sources = await _mcp_sources(config.mcp_servers, stack, model, options, owned)
        built = await build_tools(
            enabled=resolved.enabled_toolsets,
            disabled=resolved.disabled_toolsets,
            workspace=workspace,
            extra=options.tools,
            options=ToolOptions(
                home=home,
                skills_dirs=setup.skills_dirs,
                allow_private_urls=config.security.allow_private_urls,
                search_backend=config.web.search_backend,
                delegation=config.delegation.model_dump(),
                environ=options.environ,
            ),
        )
    except BaseException:
        for resource in reversed(owned):
            with anyio.CancelScope(shield=True):
                await resource.aclose()
        raise
    owned.extend(built.owned)
    settings = AgentSettings(
        max_iterations=resolved.max_iterations,
        max_tokens=options.max_tokens,
        reasoning=options.reasoning_config,
        skip_memory=resolved.skip_memory,
        save_trajectories=options.save_trajectories,
        identity=setup.identity,
        context=setup.context,
        skills_index=built.skills_index,
        tool_timeout=config.agent.tool_timeout,
        max_tool_workers=config.agent.max_tool_workers,
        sampling=config.sampling,
        source=options.source,
    )
    return Agent(
        model,
        built.registry,
        tool_sources=sources,
        sessions=sessions,
        memory=memory,
        trajectories=options.trajectories,
        settings=settings,
        clarifier=options.clarify_callback,
        approver=options.approval_callback,
        session_id=options.session_id,
        on_event=options.on_event,
        stream_callback=options.stream_callback,
        owned=owned,
    )


@asynccontextmanager
async def build_agent(profile: ProfileName = "local", **overrides: Any) -> AsyncIterator[Agent]:
    """``async with build_agent("service", model=...) as agent:`` — opened and closed."""
    async with AsyncExitStack() as stack:
        agent = await open_agent(AgentOptions(profile=profile, **overrides), stack=stack)
        try:
            yield agent
        finally:
            with anyio.CancelScope(shield=True):
                await agent.close()


class AIAgent:
    """An agent configured by name: provider, model, toolsets, store.

    Arguments are those of :class:`AgentOptions`; the first sixteen are positional in the
    order Hermes users know.
    """

    def __init__(
        self,
        provider: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        enabled_toolsets: Sequence[str] | None = None,
        disabled_toolsets: Sequence[str] | None = None,
        max_iterations: int | None = None,
        session_db: SessionStore | None = None,
        session_id: str | None = None,
        save_trajectories: bool = False,
        skip_context_files: bool | None = None,
        skip_memory: bool | None = None,
        reasoning_config: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        clarify_callback: Any = None,
        stream_callback: StreamCallback | None = None,
        **extra: Any,
    ) -> None:
        self.options = AgentOptions(
            provider=provider,
            model=model,
            api_key=api_key,
            base_url=base_url,
            enabled_toolsets=enabled_toolsets,
            disabled_toolsets=disabled_toolsets,
            max_iterations=max_iterations,
            session_db=session_db,
            session_id=session_id,
            save_trajectories=save_trajectories,
            skip_context_files=skip_context_files,
            skip_memory=skip_memory,
            reasoning_config=reasoning_config,
            max_tokens=max_tokens,
            clarify_callback=clarify_callback,
            stream_callback=stream_callback,
            **extra,
        )
        self._agent: Agent | None = None
        self._stack: AsyncExitStack | None = None
        self._open_lock = anyio.Lock()
        self._closed = False

    async def __aenter__(self) -> AIAgent:
        async with self._open_lock:
            if self._closed:
                raise RuntimeError("this AIAgent is closed; create a new one")
            if self._agent is None:
                self._stack = AsyncExitStack()
                self._agent = await open_agent(self.options, stack=self._stack)
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
                self._agent = await open_agent(self.options)
            return self._agent

    @property
    def core(self) -> Agent | None:
        """The ``hermes_core.Agent`` behind the facade, once opened."""
        return self._agent

    @property
    def session_id(self) -> str | None:
        return self._agent.session_id if self._agent else self.options.session_id

    async def run_conversation(
        self,
        user_message: str,
        system_message: str | None = None,
        conversation_history: Sequence[Message | Mapping[str, Any]] | None = None,
        task_id: str | None = None,
        stream_callback: StreamCallback | None = None,
    ) -> dict[str, Any]:
        agent = await self._open()
        return await agent.run_conversation(
            user_message, system_message, conversation_history, task_id, stream_callback
        )

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
            stack, self._stack = self._stack, None
        if agent is not None:
            await agent.close()
        if stack is not None:
            await stack.aclose()
