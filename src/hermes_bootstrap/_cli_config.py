"""``hermes config check``: what a profile resolves to, and what is missing, before a run.

A broken or incomplete configuration otherwise surfaces as an odd failure in the middle
of a turn (or of a day-long batch). This command performs the same resolution the agent
does (config file, profile, host variables) and reports the outcome: provider and model,
whether a credential applies and which variables would supply it, the session store (its
password masked), memory, toolsets and the tools they build, and the MCP servers. It
opens no network connection and writes nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from hermes_adapters.llm.profiles import PROFILES, resolve_api_key
from hermes_bootstrap._cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    HOST_VARIABLES,
    CliError,
    Subcommands,
    capture_warnings,
    home_option,
    join,
    mask_url,
    print_json,
)
from hermes_bootstrap._cli_mcp import mcp_api, server_entries
from hermes_bootstrap.config import HermesConfig, hermes_home, load_config
from hermes_bootstrap.profiles import PROFILE_NAMES, Resolved, resolve_settings
from hermes_bootstrap.tools import ToolOptions, build_tools
from hermes_core.errors import ConfigError, ModelAuthError
from hermes_core.toolsets import resolve_toolsets

__all__ = ["register"]

OFFLINE_PROVIDERS = frozenset({"scripted", "script"})


@dataclass
class _Check:
    """Everything the check found; rendered as text or JSON."""

    config_file: Path
    config_exists: bool
    profile: str
    model: dict[str, Any] = field(default_factory=dict)
    credential: dict[str, Any] = field(default_factory=dict)
    store: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    toolsets: dict[str, Any] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)
    unavailable_tools: list[str] = field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    host_overrides: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "config_file": str(self.config_file),
            "config_exists": self.config_exists,
            "profile": self.profile,
            "model": self.model,
            "credential": self.credential,
            "store": self.store,
            "memory": self.memory,
            "toolsets": self.toolsets,
            "tools": self.tools,
            "unavailable_tools": self.unavailable_tools,
            "mcp_servers": self.mcp_servers,
            "host_overrides": self.host_overrides,
            "warnings": self.warnings,
            "problems": self.problems,
        }


def _host_overrides() -> dict[str, str]:
    """The MODEL_* variables ``hermes chat`` would apply (never the key's value)."""
    found: dict[str, str] = {}
    for name, variable in HOST_VARIABLES.items():
        value = os.environ.get(variable)
        if value:
            found[name] = variable
    return found


def _check_credential(check: _Check, llm: Mapping[str, Any], config_file: Path) -> None:
    """Whether a key applies to the provider, and where from; never the key itself."""
    provider = str(llm["backend"])
    if provider in OFFLINE_PROVIDERS:
        check.credential = {"needed": False, "ok": True, "source": None, "variables": []}
        return
    profile = PROFILES.get(provider)
    if profile is None:
        known = ", ".join(["scripted", *sorted(PROFILES)])
        check.problems.append(
            f"{config_file}: model.provider = {provider!r} is unknown; known: {known}"
        )
        return
    url = (llm.get("base_url") or profile.base_url).rstrip("/")
    check.model["base_url"] = url or None
    check.model["api_mode"] = llm.get("api_mode") or profile.api_mode
    if not url:
        check.problems.append(
            f"{config_file}: model.base_url is required for provider {provider!r}"
        )
        return
    variables = list(profile.key_env)
    environ: Mapping[str, str] = llm["environ"]
    dotenv: Mapping[str, str] = llm["dotenv"]
    try:
        key = resolve_api_key(
            profile, api_key=llm.get("api_key"), base_url=url, environ=environ, dotenv=dotenv
        )
    except ModelAuthError as exc:
        check.credential = {
            "needed": True,
            "ok": False,
            "source": None,
            "variables": variables,
            "error": str(exc),
        }
        check.problems.append(f"missing credential: {exc}")
        return
    source: str | None
    if llm.get("api_key"):
        source = "$MODEL_API_KEY" if "api_key" in check.host_overrides else "model.api_key"
    else:
        source = next((f"${n}" for n in variables if environ.get(n)), None) or next(
            (f"$HERMES_HOME/.env {n}" for n in variables if dotenv.get(n)), None
        )
    check.credential = {
        "needed": profile.needs_key,
        "ok": True,
        "source": source if key else None,
        "variables": variables,
    }


def _check_store(check: _Check, store: Mapping[str, Any]) -> None:
    backend = str(store["backend"])
    url = str(store.get("url") or "")
    check.store = {"backend": backend, "url": mask_url(url) if url else None}
    if backend == "sqlite":
        path = Path(url.removeprefix("sqlite:///")).expanduser()
        check.store["exists"] = path.exists()
    elif backend == "postgres" and importlib.util.find_spec("asyncpg") is None:
        check.problems.append(
            "database: PostgreSQL storage needs the postgres extra: "
            "pip install 'hermes-harness[postgres]'"
        )


async def _build_tool_names(
    config: HermesConfig, resolved: Resolved, home: Path, skills_dirs: tuple[Path, ...]
) -> tuple[list[str], tuple[str, ...]]:
    """The tools the agent would really get (built, then released), and unknown toolsets."""
    built = await build_tools(
        enabled=resolved.enabled_toolsets,
        disabled=resolved.disabled_toolsets,
        workspace=None,
        options=ToolOptions(
            home=home,
            skills_dirs=skills_dirs,
            allow_private_urls=config.security.allow_private_urls,
            search_backend=config.web.search_backend,
            delegation=config.delegation.model_dump(),
        ),
    )
    try:
        return sorted(built.registry.names), built.unknown_toolsets
    finally:
        for resource in reversed(built.owned):
            await resource.aclose()


def _check_tools(check: _Check, config: HermesConfig, resolved: Resolved, home: Path) -> None:
    enabled = resolved.enabled_toolsets
    check.toolsets = {
        "enabled": list(enabled) if enabled is not None else None,
        "disabled": list(resolved.disabled_toolsets),
    }
    with capture_warnings("hermes.bootstrap"):  # unknown toolsets: reported below instead
        skills_dirs = tuple(Path(d).expanduser() for d in config.skills.external_dirs)
        names, unknown = anyio.run(_build_tool_names, config, resolved, home, skills_dirs)
    check.tools = names
    granted = resolve_toolsets(enabled, resolved.disabled_toolsets).tools
    check.unavailable_tools = sorted(set(granted) - set(names))
    for name in unknown:
        check.warnings.append(f"unknown toolset {name!r} ignored")


def _check_mcp(check: _Check, config: HermesConfig) -> None:
    if not config.mcp_servers:
        return  # importing the MCP SDK costs seconds; skip it when there is nothing to check
    api, unavailable = mcp_api()
    if unavailable:
        check.warnings.append(f"{unavailable}; MCP servers were not validated")
    for entry in server_entries(config.mcp_servers, api):
        check.mcp_servers.append(entry.as_dict())
        if entry.error is not None:
            check.problems.append(f"{check.config_file}: {entry.error}")


def _run_check(args: argparse.Namespace) -> int:
    home = hermes_home(args.home)
    config_file = home / "config.yaml"
    check = _Check(config_file, config_file.is_file(), args.profile)
    try:
        with capture_warnings("hermes.config") as unknown_keys:
            config = load_config(home)
        check.host_overrides = _host_overrides()
        resolved = resolve_settings(
            config,
            home=home,
            profile=args.profile,
            provider=os.environ.get("MODEL_PROVIDER") or None,
            model=os.environ.get("MODEL_ID") or None,
            api_key=os.environ.get("MODEL_API_KEY") or None,
            base_url=os.environ.get("MODEL_BASE_URL") or None,
        )
    except ConfigError as exc:
        if args.json:
            print_json({"ok": False, "config_file": str(config_file), "error": str(exc)})
        raise CliError(str(exc), EXIT_USAGE) from exc
    check.warnings.extend(unknown_keys)
    llm = resolved.container["llm"]
    check.model = {"provider": llm["backend"], "model": llm["model"]}
    if not llm["model"]:
        check.problems.append(f"{config_file}: model.default (the model name) is empty")
    _check_credential(check, llm, config_file)
    _check_store(check, resolved.container["store"])
    memory = resolved.container["memory"]
    check.memory = {
        "backend": memory["backend"],
        "directory": memory["directory"] if memory["backend"] == "files" else None,
    }
    _check_tools(check, config, resolved, home)
    _check_mcp(check, config)
    if args.json:
        print_json(check.as_dict())
    else:
        _print_check(check)
    return EXIT_FAILED if check.problems else EXIT_OK


def _print_check(check: _Check) -> None:
    state = "" if check.config_exists else " (not found: defaults)"
    print(f"config     {check.config_file}{state}")
    print(f"profile    {check.profile}")
    model = check.model
    where = ", ".join(str(model[k]) for k in ("base_url", "api_mode") if model.get(k))
    print(
        f"model      {model.get('provider')} / {model.get('model')}"
        + (f"  ({where})" if where else "")
    )
    if check.host_overrides:
        print(f"host vars  {join(sorted('$' + v for v in check.host_overrides.values()))}")
    cred = check.credential
    if cred.get("needed") is False:
        print("key        none needed")
    elif cred.get("ok"):
        print(f"key        found ({cred.get('source') or 'not required'})")
    elif cred:
        print(f"key        MISSING: set {' or '.join(cred['variables']) or 'an API key'}")
    store = check.store
    note = ""
    if store.get("backend") == "sqlite":
        note = "" if store.get("exists") else "  (created on first use)"
    print(f"store      {store.get('backend')}  {store.get('url') or '-'}{note}")
    memory = check.memory
    print(f"memory     {memory.get('backend')}  {memory.get('directory') or ''}".rstrip())
    enabled = check.toolsets.get("enabled")
    print(
        f"toolsets   {join(enabled) if enabled is not None else 'all'}"
        f"; disabled: {join(check.toolsets.get('disabled') or [])}"
    )
    print(f"tools      ({len(check.tools)}) {join(check.tools)}")
    if check.unavailable_tools:
        print(f"           not in this build: {join(check.unavailable_tools)}")
    if check.mcp_servers:
        servers = [
            f"{s['name']} ({s['transport']}, {'enabled' if s['enabled'] else 'disabled'}"
            + ("" if s["valid"] else ", INVALID")
            + ")"
            for s in check.mcp_servers
        ]
        print(f"mcp        {join(servers)}")
    for warning in check.warnings:
        print(f"warning: {warning}")
    for problem in check.problems:
        print(f"problem: {problem}")
    print("ok" if not check.problems else f"{len(check.problems)} problem(s) found")


def register(commands: Subcommands) -> None:
    config = commands.add_parser(
        "config",
        help="check the configuration",
        description="Inspect $HERMES_HOME/config.yaml and .env.",
    )
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="validate config.yaml and show what a profile resolves to",
        description="Validate config.yaml and show the provider, model, credential, store, "
        "memory, toolsets, tools and MCP servers a profile resolves to. Exit 1 when something "
        "is missing (a credential, say), 2 when config.yaml itself is invalid.",
    )
    check.add_argument(
        "--profile", choices=PROFILE_NAMES, default="local", help="deployment profile (local)"
    )
    check.add_argument("--json", action="store_true", help="print JSON")
    home_option(check)
    check.set_defaults(handler=_run_check)
