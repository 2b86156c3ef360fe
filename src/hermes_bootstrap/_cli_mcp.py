"""``hermes mcp list``: the MCP servers config.yaml declares, and optionally their tools.

Validation uses the adapter's own strict model, so this command and the agent agree on
what is a valid server; ``--connect`` starts each enabled server once, lists its tools
and closes it, which is how a user finds out a server is misconfigured before a turn
depends on it. The MCP adapter is imported lazily: a build without it (or with an older
API) still lists what is configured.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from hermes_bootstrap._cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Subcommands,
    capture_warnings,
    home_option,
    mask_url,
    positive_int,
    print_json,
    warn,
)
from hermes_bootstrap.config import hermes_home, load_config

__all__ = ["ServerEntry", "mcp_api", "register", "server_entries"]


@dataclass
class ServerEntry:
    """One configured server as the CLI reports it (never its env or header values)."""

    name: str
    transport: str
    enabled: bool
    target: str
    error: str | None = None
    status: str | None = None
    tools: list[str] = field(default_factory=list)
    config: Any = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "transport": self.transport,
            "enabled": self.enabled,
            "target": self.target,
            "valid": self.error is None,
        }
        if self.error is not None:
            data["error"] = self.error
        if self.status is not None:
            data["status"] = self.status
            data["tools"] = list(self.tools)
        return data


@dataclass(frozen=True)
class _Api:
    config_type: Any
    source_type: Any


def mcp_api() -> tuple[_Api | None, str | None]:
    """The adapter's config model and source class, or why they cannot be used."""
    try:
        from hermes_adapters import mcp
    except ImportError as exc:
        return None, f"the MCP adapter cannot be imported ({exc})"
    config_type = getattr(mcp, "MCPServerConfig", None)
    source_type = getattr(mcp, "MCPToolSource", None)
    if config_type is None or source_type is None:
        return None, "the MCP adapter has no MCPServerConfig/MCPToolSource API yet"
    return _Api(config_type, source_type), None


def _raw_target(raw: Mapping[str, Any]) -> str:
    if raw.get("command"):
        return shlex.join([str(raw["command"]), *(str(a) for a in raw.get("args") or ())])
    return mask_url(str(raw.get("url") or "-"))


def _raw_transport(raw: Mapping[str, Any]) -> str:
    if raw.get("transport"):
        return str(raw["transport"])
    return "stdio" if raw.get("command") else "streamable_http"


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
        except (IndexError, TypeError):
            return str(exc)
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    return str(exc)


def server_entries(servers: Mapping[str, Mapping[str, Any]], api: _Api | None) -> list[ServerEntry]:
    """Every configured server, validated by the adapter's model when it is available."""
    entries: list[ServerEntry] = []
    for name, raw in servers.items():
        entry = ServerEntry(
            name=name,
            transport=_raw_transport(raw),
            enabled=raw.get("enabled", True) is not False,
            target=_raw_target(raw),
        )
        if api is not None:
            try:
                entry.config = api.config_type.model_validate(dict(raw))
            except Exception as exc:  # pydantic ValidationError, or the adapter's own
                entry.error = f"mcp_servers.{name}: {_first_error(exc)}"
            else:
                entry.transport = str(entry.config.effective_transport)
                entry.enabled = bool(entry.config.enabled)
        entries.append(entry)
    return entries


async def _probe(api: _Api, entry: ServerEntry, seconds: float) -> None:
    """Connect once (no retries: the user is waiting), list the tools, disconnect."""
    config = entry.config.model_copy(
        update={"initial_connect_attempts": 1, "connect_timeout": seconds}
    )
    try:
        with anyio.fail_after(seconds + 5):
            async with api.source_type(entry.name, config) as source:
                specs = await source.list_tools()
                if source.parked:
                    reason = getattr(source.connection, "park_reason", None) or "unavailable"
                    entry.status = f"failed: {reason}"
                    return
                entry.tools = [spec.name for spec in specs]
                entry.status = "ok"
    except TimeoutError:
        entry.status = f"failed: no answer within {seconds:.0f} s"
    except Exception as exc:
        entry.status = f"failed: {type(exc).__name__}: {exc}"


async def _probe_all(api: _Api, entries: list[ServerEntry], seconds: float) -> None:
    async with anyio.create_task_group() as tg:
        for entry in entries:
            if entry.enabled and entry.error is None:
                tg.start_soon(_probe, api, entry, seconds)


def _run_list(args: argparse.Namespace) -> int:
    config = load_config(hermes_home(args.home))
    api, unavailable = mcp_api() if config.mcp_servers else (None, None)
    entries = server_entries(config.mcp_servers, api)
    if args.connect and api is not None:
        verbose = logging.getLogger().isEnabledFor(logging.INFO)
        if verbose:
            anyio.run(_probe_all, api, entries, float(args.timeout))
        else:
            with capture_warnings("hermes.mcp"):  # the status column says it once
                anyio.run(_probe_all, api, entries, float(args.timeout))
    if unavailable:
        warn(f"{unavailable}; showing the configured servers only")
    if args.json:
        print_json({"servers": [e.as_dict() for e in entries], "note": unavailable})
    elif not entries:
        print("no MCP servers configured (mcp_servers in config.yaml)", file=sys.stderr)
    else:
        for e in entries:
            state = "enabled" if e.enabled else "disabled"
            print(f"{e.name}  {e.transport}  {state}  {e.target}")
            if e.error:
                print(f"  invalid: {e.error}")
            if e.status:
                print(f"  {e.status}" + (f" ({len(e.tools)} tools)" if e.status == "ok" else ""))
                for tool in e.tools:
                    print(f"    {tool}")
    if any(e.error for e in entries):
        return EXIT_USAGE
    if any(e.status and e.status != "ok" for e in entries):
        return EXIT_FAILED
    return EXIT_OK


def register(commands: Subcommands) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="inspect the configured MCP servers",
        description="Inspect the MCP servers declared under mcp_servers in config.yaml.",
    )
    actions = mcp.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list",
        help="configured servers; with --connect, their status and tools",
        description="List configured MCP servers with transport and enabled flag. Exit 2 "
        "when an entry is invalid, 1 when --connect could not reach an enabled server.",
    )
    listing.add_argument(
        "--connect", action="store_true", help="start each enabled server and list its tools"
    )
    listing.add_argument(
        "--timeout", type=positive_int, default=15, help="seconds per server with --connect"
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    home_option(listing)
    listing.set_defaults(handler=_run_list)
