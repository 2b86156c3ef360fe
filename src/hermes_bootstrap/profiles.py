"""Deployment profiles: named bundles of adapter choices, and the settings they produce.

``local`` (the default) keeps everything under ``$HERMES_HOME``: SQLite sessions, file
memory, local tools. ``service`` is for a multi-tenant host: PostgreSQL sessions and no
terminal. ``batch`` is for dataset runs: no memory, no context files, no session store.
Explicit constructor arguments beat the config file, which beats the profile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hermes_bootstrap.config import HermesConfig, read_dotenv
from hermes_core.errors import ConfigError

__all__ = ["PROFILE_NAMES", "ProfileName", "Resolved", "resolve_settings"]

ProfileName = Literal["local", "service", "batch"]
PROFILE_NAMES: tuple[ProfileName, ...] = ("local", "service", "batch")


@dataclass(frozen=True)
class Resolved:
    """What the container and the agent are built from."""

    container: Mapping[str, Any]
    enabled_toolsets: Sequence[str] | None
    disabled_toolsets: Sequence[str]
    skip_memory: bool
    skip_context_files: bool
    max_iterations: int
    home: Path
    extra: Mapping[str, Any] = field(default_factory=dict)


def _store_settings(profile: ProfileName, config: HermesConfig, home: Path) -> dict[str, Any]:
    database = config.database
    if profile == "batch":
        return {"backend": "none", "url": "", "options": {}}
    backend = database.backend
    url = database.url
    if profile == "service":
        backend = "postgres"
        if not url:
            raise ConfigError(
                f"{home / 'config.yaml'}: the service profile needs database.url "
                "(postgresql+asyncpg://user@host/db)"
            )
    if url:
        backend = "postgres" if url.startswith(("postgresql", "postgres")) else "sqlite"
    options: dict[str, Any] = {}
    if backend == "postgres":
        pool = database.postgres
        options = {
            "pool_size": pool.pool_size,
            "max_overflow": pool.max_overflow,
            "pool_timeout": pool.pool_timeout,
            "pool_recycle": pool.pool_recycle,
            "pool_pre_ping": pool.pool_pre_ping,
            "connect_args": dict(pool.connect_args),
        }
    elif backend == "sqlite":
        url = url or str(home / "state.db")
        options = {"journal_mode": database.journal_mode, "synchronous": database.synchronous}
    return {"backend": backend, "url": url or "", "options": options}


def resolve_settings(
    config: HermesConfig,
    *,
    home: Path,
    profile: ProfileName = "local",
    provider: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    base_url: str | None = None,
    enabled_toolsets: Sequence[str] | None = None,
    disabled_toolsets: Sequence[str] | None = None,
    skip_memory: bool | None = None,
    skip_context_files: bool | None = None,
    max_iterations: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> Resolved:
    """Merge profile < config file < explicit arguments.

    Raises:
        ConfigError: unknown profile, or a profile whose needs the config does not meet.
    """
    if profile not in PROFILE_NAMES:
        raise ConfigError(f"unknown profile {profile!r}; known: {', '.join(PROFILE_NAMES)}")
    memory_off = profile == "batch" or not config.memory.memory_enabled
    skip_memory = memory_off if skip_memory is None else skip_memory
    disabled = list(config.disabled_toolsets)
    if profile == "service":
        disabled.append("terminal")
    if disabled_toolsets is not None:
        disabled = list(disabled_toolsets)
    container = {
        "llm": {
            "backend": provider or config.model.provider,
            "model": model or config.model.default,
            "api_key": api_key or config.model.api_key,
            "base_url": base_url or config.model.base_url,
            "api_mode": config.model.api_mode,
            "environ": dict(os.environ if environ is None else environ),
            "dotenv": read_dotenv(home / ".env"),
        },
        "store": _store_settings(profile, config, home),
        "memory": {
            "backend": "none" if skip_memory else "files",
            "directory": str(home / "memories"),
            "memory_limit": config.memory.memory_char_limit,
            "user_limit": config.memory.user_char_limit,
        },
    }
    return Resolved(
        container=container,
        enabled_toolsets=enabled_toolsets if enabled_toolsets is not None else config.toolsets,
        disabled_toolsets=disabled,
        skip_memory=skip_memory,
        skip_context_files=(profile == "batch")
        if skip_context_files is None
        else skip_context_files,
        max_iterations=max_iterations or config.agent.max_turns,
        home=home,
    )
