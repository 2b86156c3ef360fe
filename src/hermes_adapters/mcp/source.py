"""An MCP server as a :class:`~hermes_core.ports.mcp.ToolSource`.

The source lists the server's tools under ``mcp__<server>__<tool>`` names (filtered by
``tools.include``/``exclude``, collisions skipped), adds ``list_resources``/
``read_resource``/``list_prompts``/``get_prompt`` when the server advertises resources or
prompts, and turns every call into a :class:`ToolResult`: it never raises for a failed call,
because the model should read what went wrong. Calls to one server run one at a time
unless ``supports_parallel_tool_calls``: most servers were written for one client doing one
thing, and a stdio server is a single process reading one pipe.

A source needs a task to own its connection: enter it (``async with MCPToolSource(...)``)
or get it from an entered :class:`~hermes_adapters.mcp.pool.MCPPool`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from hermes_adapters.mcp.callbacks import ElicitationBridge, SamplingBridge, ServerLogForwarder
from hermes_adapters.mcp.config import MCPServerConfig
from hermes_adapters.mcp.connection import MCPConnection
from hermes_adapters.mcp.errors import ConnectionClosed, ServerParked, describe, is_dead_session
from hermes_adapters.mcp.link import SessionCallbacks
from hermes_adapters.mcp.naming import assign_names, normalize_schema
from hermes_adapters.mcp.results import content_text, error_result, resource_text, to_tool_result
from hermes_core.events import ToolProgress
from hermes_core.ports.interaction import Clarifier
from hermes_core.ports.llm import ChatModel
from hermes_core.ports.tools import ToolResult, ToolSpec

__all__ = ["MCPToolSource", "UTILITY_TOOLS"]

log = logging.getLogger("hermes.mcp")

Kind = Literal["tool", "list_resources", "read_resource", "list_prompts", "get_prompt"]
MAX_PAGES = 50
"""A server paging forever must not stall the agent."""

_EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
UTILITY_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "list_resources": ("List the resources this MCP server offers.", _EMPTY),
    "read_resource": (
        "Read one resource of this MCP server by URI.",
        {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource URI"}},
            "required": ["uri"],
        },
    ),
    "list_prompts": ("List the prompt templates this MCP server offers.", _EMPTY),
    "get_prompt": (
        "Render one prompt template of this MCP server.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The prompt name"},
                "arguments": {
                    "type": "object",
                    "description": "Template arguments (string values)",
                    "additionalProperties": {"type": "string"},
                },
            },
            "required": ["name"],
        },
    ),
}


@dataclass(frozen=True, slots=True)
class _Entry:
    kind: Kind
    raw_name: str


class MCPToolSource:
    """One MCP server's tools. See the module docstring for the rules it keeps."""

    def __init__(
        self,
        name: str,
        config: MCPServerConfig,
        *,
        clarifier: Clarifier | None = None,
        sampler: ChatModel | None = None,
        on_event: Callable[[Any], None] | None = None,
    ) -> None:
        if not name:
            raise ValueError("an MCP server name must not be empty")
        self._name = name
        self.config = config
        self._on_event = on_event
        sampling = None
        if sampler is not None and config.sampling.enabled:
            sampling = SamplingBridge(name, sampler, config.sampling)
        callbacks = SessionCallbacks(
            sampling=sampling,
            elicitation=ElicitationBridge(name, clarifier),
            logging=ServerLogForwarder(name),
            on_tools_changed=self._tools_changed,
        )
        self._connection = MCPConnection(name, config, callbacks)
        self._entries: dict[str, _Entry] = {}
        self._stale = True
        self._serial = anyio.Lock()
        self._call_ids = itertools.count(1)
        self._stack: contextlib.AsyncExitStack | None = None

    # -- identity and state ------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def toolset(self) -> str:
        return f"mcp-{self._name}"

    @property
    def connection(self) -> MCPConnection:
        """The underlying connection (pid, generation, parking), for hosts and tests."""
        return self._connection

    @property
    def parked(self) -> bool:
        return self._connection.parked

    @property
    def tools_stale(self) -> bool:
        """True until listed, and again after the server announced a changed tool list."""
        return self._stale

    def attach(self, task_group: TaskGroup) -> None:
        """Host the connection's owner task in ``task_group`` (used by the pool)."""
        self._connection.attach(task_group)

    async def __aenter__(self) -> MCPToolSource:
        stack = contextlib.AsyncExitStack()
        task_group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        self.attach(task_group)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.aclose()
        finally:
            stack, self._stack = self._stack, None
            if stack is not None:
                # the body's exception is not handed to the task group, which would wrap it
                # in an ExceptionGroup; the connection's tasks never raise into the group
                await stack.aclose()

    async def aclose(self) -> None:
        """Close the session and stop a stdio server's whole process group; idempotent.

        Later calls return an error result saying the connection is closed.
        """
        await self._connection.aclose()

    # -- the ToolSource port -----------------------------------------------------------

    async def list_tools(self) -> list[ToolSpec]:
        """The server's tools as specs; ``[]`` when disabled or parked.

        Raises:
            ConnectionClosed: the source was closed.
            Exception: listing failed for another reason (the engine logs and skips it).
        """
        if not self.config.enabled:
            return []
        try:
            tools, capabilities = await self._connection.use(self._fetch_tools)
        except ServerParked as exc:
            # withdrawn from new listings; already registered names keep answering with
            # the park error, and work again once a probe reconnects
            log.warning("%s; its tools are withdrawn", exc)
            return []
        offered = {t.name: t for t in tools if self.config.tools.allows(t.name)}
        utilities = self._utilities(capabilities)
        assignment = assign_names(self._name, [*utilities, *offered])
        entries: dict[str, _Entry] = {}
        specs: list[ToolSpec] = []
        for registered, raw in assignment.names.items():
            if raw in utilities and raw not in offered:
                description, schema = UTILITY_TOOLS[raw]
                kind: Kind = utilities[raw]
            else:
                tool = offered[raw]
                description = (
                    tool.description or tool.title or f"Tool {raw} of MCP server {self._name}"
                )
                schema = normalize_schema(tool.input_schema)
                kind = "tool"
            entries[registered] = _Entry(kind, raw)
            specs.append(self._spec(registered, description, schema))
        self._entries = entries
        self._stale = False
        return specs

    async def call(self, name: str, args: Mapping[str, Any]) -> ToolResult:
        """Call tool ``name`` (a registered name); failures come back as error results."""
        entry = self._entries.get(name)
        if entry is None:
            if self._connection.parked:
                return error_result(self._connection.park_message())
            return error_result(f"tool {name!r} is not offered by MCP server {self._name!r}")
        guard = (
            contextlib.nullcontext() if self.config.supports_parallel_tool_calls else self._serial
        )
        async with guard:
            try:
                return await self._connection.use(
                    lambda session: self._invoke(session, name, entry, dict(args))
                )
            except MCPError as exc:
                if is_dead_session(exc):
                    return self._lost(exc)
                return error_result(f"MCP error {exc.code}: {exc.message}")
            except (ServerParked, ConnectionClosed) as exc:
                return error_result(str(exc))
            except Exception as exc:
                if is_dead_session(exc):
                    return self._lost(exc)
                log.warning("MCP %s: %s failed: %s", self._name, entry.raw_name, describe(exc))
                return error_result(f"MCP tool {entry.raw_name!r} failed: {describe(exc)}")

    # -- internals -------------------------------------------------------------------

    def _spec(self, name: str, description: str, schema: Mapping[str, Any]) -> ToolSpec:
        config = self.config
        return ToolSpec(
            name=name,
            description=description,
            parameters=schema,
            toolset=self.toolset,
            parallel_safe=config.supports_parallel_tool_calls,
            timeout=config.timeout + config.connect_timeout,
            untrusted_output=True,
        )

    def _utilities(self, capabilities: types.ServerCapabilities | None) -> dict[str, Kind]:
        found: dict[str, Kind] = {}
        if (
            capabilities is not None
            and capabilities.resources is not None
            and self.config.resources
        ):
            found.update(list_resources="list_resources", read_resource="read_resource")
        if capabilities is not None and capabilities.prompts is not None and self.config.prompts:
            found.update(list_prompts="list_prompts", get_prompt="get_prompt")
        return found

    def _tools_changed(self) -> None:
        self._stale = True
        log.info("MCP %s: the server's tool list changed", self._name)

    def _lost(self, exc: BaseException) -> ToolResult:
        return error_result(
            f"the connection to MCP server {self._name!r} was lost and the retry failed too: "
            f"{describe(exc)}"
        )

    async def _fetch_tools(
        self, session: ClientSession
    ) -> tuple[list[types.Tool], types.ServerCapabilities | None]:
        tools: list[types.Tool] = []
        capabilities = session.server_capabilities
        if capabilities is not None and capabilities.tools is None:
            return tools, capabilities  # a resources- or prompts-only server
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools, capabilities

    async def _invoke(
        self, session: ClientSession, name: str, entry: _Entry, args: dict[str, Any]
    ) -> ToolResult:
        timeout = self.config.timeout
        match entry.kind:
            case "tool":
                result = await session.call_tool(
                    entry.raw_name,
                    args,
                    read_timeout_seconds=timeout,
                    progress_callback=self._progress(name),
                )
                return to_tool_result(result)
            case "list_resources":
                listing = await session.list_resources()
                return _json(
                    [
                        {"uri": str(r.uri), "name": r.name, "mimeType": r.mime_type}
                        | ({"description": r.description} if r.description else {})
                        for r in listing.resources
                    ]
                )
            case "read_resource":
                uri = args.get("uri")
                if not isinstance(uri, str) or not uri:
                    return error_result("read_resource needs a 'uri' string")
                read = await session.read_resource(uri)
                return _json({"result": "\n".join(resource_text(c) for c in read.contents)})
            case "list_prompts":
                prompts = await session.list_prompts()
                return _json([_prompt_info(p) for p in prompts.prompts])
            case "get_prompt":
                prompt_name = args.get("name")
                arguments = args.get("arguments") or {}
                if not isinstance(prompt_name, str) or not isinstance(arguments, dict):
                    return error_result("get_prompt needs a 'name' string and 'arguments' object")
                rendered = await session.get_prompt(
                    prompt_name, {str(k): str(v) for k, v in arguments.items()}
                )
                lines = [f"{m.role}: {content_text(m.content)}" for m in rendered.messages]
                return _json({"result": "\n".join(lines)})
        raise AssertionError(f"unknown entry kind {entry.kind!r}")

    def _progress(self, name: str) -> Any:
        """A progress callback emitting :class:`ToolProgress`, or None when nobody listens.

        The port hands a source no tool-call id, so ``call_id`` is a per-source counter.
        """
        on_event = self._on_event
        if on_event is None:
            return None
        call_id = f"{self._name}-{next(self._call_ids)}"

        async def report(progress: float, total: float | None, message: str | None) -> None:
            try:
                on_event(ToolProgress(call_id, name, progress, total, message))
            except Exception:
                log.exception("MCP %s: the progress listener failed", self._name)

        return report


def _prompt_info(prompt: types.Prompt) -> dict[str, Any]:
    info: dict[str, Any] = {"name": prompt.name}
    if prompt.description:
        info["description"] = prompt.description
    if prompt.arguments:
        info["arguments"] = [
            {"name": a.name, "required": bool(a.required), "description": a.description or ""}
            for a in prompt.arguments
        ]
    return info


def _json(value: Any) -> ToolResult:
    return ToolResult(json.dumps(value, ensure_ascii=False, default=str))
