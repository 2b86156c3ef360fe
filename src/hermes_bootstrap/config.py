"""Configuration: ``$HERMES_HOME/config.yaml`` (settings) and ``.env`` (secrets).

The file is validated by pydantic models so a mistake is caught when the agent opens,
with the file, the key path, the bad value and what is allowed, instead of surfacing as
an odd failure mid-turn. Unknown keys are warned about, not fatal: a newer config file
must not break an older Hermes. ``${env:NAME}`` and ``${NAME}`` are interpolated from the
process environment first, then ``.env``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_core.errors import ConfigError

__all__ = [
    "HermesConfig",
    "hermes_home",
    "interpolate",
    "load_config",
    "read_dotenv",
]

log = logging.getLogger("hermes.config")

_VAR = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="allow", validate_assignment=True, use_attribute_docstrings=True
    )


class ModelConfig(_Section):
    provider: str = "scripted"
    """A provider profile name (``openrouter``, ``anthropic``...) or ``scripted``."""
    default: str = "hermes-demo"
    """The model id sent to the provider."""
    base_url: str | None = None
    """Overrides the profile's endpoint; environment keys are then not sent."""
    api_key: str | None = None
    """Prefer ``.env``; ``${env:NAME}`` works here."""
    api_mode: Literal["chat_completions", "anthropic_messages", "codex_responses"] | None = None


class PostgresPool(_Section):
    pool_size: int = Field(5, ge=1)
    max_overflow: int = Field(10, ge=0)
    pool_timeout: float = Field(30.0, gt=0)
    pool_recycle: int = Field(1800, ge=-1)
    pool_pre_ping: bool = True
    connect_args: dict[str, Any] = Field(default_factory=dict)


class DatabaseConfig(_Section):
    backend: Literal["sqlite", "postgres", "memory", "none"] = "sqlite"
    """Used when ``url`` is not set (SQLite goes to ``$HERMES_HOME/state.db``)."""
    url: str | None = None
    """``sqlite:///path`` or ``postgresql+asyncpg://...``; wins over ``backend``."""
    journal_mode: Literal["wal", "delete"] = "wal"
    synchronous: Literal["full", "normal"] = "full"
    """SQLite: ``normal`` trades the last commits on a power cut for append throughput."""
    postgres: PostgresPool = Field(default_factory=PostgresPool)


class MemoryConfig(_Section):
    memory_enabled: bool = True
    user_profile_enabled: bool = True
    memory_char_limit: int = Field(2200, ge=100)
    user_char_limit: int = Field(1375, ge=100)


class SkillsConfig(_Section):
    external_dirs: list[str] = Field(default_factory=list)


class CompressionConfig(_Section):
    enabled: bool = True
    threshold: float = Field(0.50, gt=0, le=1)
    threshold_tokens: int | None = None
    target_ratio: float = Field(0.20, ge=0.10, le=0.80)
    protect_last_n: int = Field(20, ge=1)
    max_attempts: int = Field(3, ge=1)
    in_place: bool = True
    """Reserved: compression currently continues in a lineage-linked child session."""


class SecurityConfig(_Section):
    allow_private_urls: bool = False
    """Let web tools reach private and loopback addresses (metadata stays blocked)."""


class ApprovalsConfig(_Section):
    mode: Literal["manual", "smart", "off"] = "manual"
    """How dangerous commands are approved."""
    deny: list[str] = Field(default_factory=list)


class DelegationConfig(_Section):
    max_iterations: int = Field(50, ge=1)
    max_concurrent_children: int = Field(3, ge=1, le=32)
    max_spawn_depth: int = Field(1, ge=1, le=3)


class WebConfig(_Section):
    search_backend: Literal["tavily", "brave", "searxng", "exa", "firecrawl", "parallel"] | None = (
        None
    )


class AgentConfig(_Section):
    max_turns: int = Field(90, ge=1)
    """Model calls per turn before the tool-free summary call."""
    tool_timeout: float = Field(300, gt=0)
    max_tool_workers: int = Field(8, ge=1, le=64)


class HermesConfig(_Section):
    """The whole of ``config.yaml``; every section is optional."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    mcp_servers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """MCP servers by name; see docs/mcp.md for the keys."""
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    delegation: DelegationConfig = Field(default_factory=DelegationConfig)
    toolsets: list[str] | None = None
    """Enabled toolsets; ``null`` means all."""
    disabled_toolsets: list[str] = Field(default_factory=list)
    auxiliary: dict[str, dict[str, Any]] = Field(default_factory=dict)
    sampling: dict[str, Any] = Field(default_factory=dict)


def hermes_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``explicit``, else ``$HERMES_HOME``, else ``~/.hermes``."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("HERMES_HOME")
    return Path(env) if env else Path.home() / ".hermes"


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines; ``#`` comments, ``export`` prefixes and quotes handled."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def interpolate(value: Any, variables: Mapping[str, str]) -> Any:
    """Replace ``${env:NAME}``/``${NAME}`` in every string; unknown names become ``""``."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: variables.get(m.group(1), ""), value)
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    return value


def _key_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _unknown_keys(model: BaseModel, prefix: str = "") -> list[str]:
    found = [f"{prefix}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        child = getattr(model, name)
        if isinstance(child, BaseModel):
            found += _unknown_keys(child, f"{prefix}{name}.")
    return found


def _lookup(data: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        in_mapping = isinstance(data, Mapping) and part in data
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if not (in_mapping or in_list):
            return None
        data = data[part]
    return data


def load_config(home: str | os.PathLike[str] | None = None) -> HermesConfig:
    """Read and validate ``config.yaml`` under ``home`` (defaults when it is absent).

    Raises:
        ConfigError: the file is not YAML, not a mapping, or fails validation; the
            message names the file, the key path, the bad value and what is allowed.
    """
    root = hermes_home(home)
    path = root / "config.yaml"
    variables = {**read_dotenv(root / ".env"), **os.environ}
    raw: Any = {}
    if path.is_file():
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ConfigError(f"{path}{where}: not valid YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    data = interpolate(raw, variables)
    try:
        config = HermesConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _key_path(first["loc"])
        bad = _lookup(data, first["loc"])
        raise ConfigError(
            f"{path}: {key} = {bad!r} is invalid: {first['msg']}"
            + (f" ({len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else "")
        ) from exc
    for key in _unknown_keys(config):
        log.warning("%s: unknown key %r ignored", path, key)
    return config
