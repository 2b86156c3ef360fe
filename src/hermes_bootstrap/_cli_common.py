"""What every ``hermes`` subcommand shares: exit codes, output helpers, the parser class.

Kept out of ``cli.py`` so each subcommand module can be read on its own, and so the rules
a shell user relies on (``hermes: <message>`` on stderr, exit 2 for usage and configuration
mistakes, JSON on stdout only) are written once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import anyio
from pydantic import BaseModel

from hermes_bootstrap.config import hermes_home, load_config
from hermes_bootstrap.profiles import resolve_settings
from hermes_bootstrap.sessions import SessionDB, backend_of
from hermes_core.ports.sessions import SessionStore

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "HOST_VARIABLES",
    "CliError",
    "Handler",
    "HermesArgumentParser",
    "StoreTarget",
    "Subcommands",
    "capture_warnings",
    "comma_list",
    "format_time",
    "home_option",
    "join",
    "host_default",
    "mask_url",
    "open_store",
    "plain",
    "positive_int",
    "print_json",
    "store_target",
    "warn",
]

EXIT_OK = 0
EXIT_FAILED = 1
"""The command ran and the operation failed (a turn, a connection, a missing session)."""
EXIT_USAGE = 2
"""The command line or the configuration is wrong: fixing the input is the remedy."""
EXIT_INTERRUPTED = 130
"""Ctrl-C, as shells report SIGINT (128 + 2)."""

HOST_VARIABLES: Mapping[str, str] = {
    "provider": "MODEL_PROVIDER",
    "model": "MODEL_ID",
    "api_key": "MODEL_API_KEY",
    "base_url": "MODEL_BASE_URL",
}
"""Host variables that give the model flags their defaults (a container or CI job sets
them once instead of repeating flags); an explicit flag always wins."""

Handler: TypeAlias = Callable[[argparse.Namespace], int]
Subcommands: TypeAlias = "argparse._SubParsersAction[HermesArgumentParser]"


class CliError(Exception):
    """A failure the user can act on; ``main`` prints it and exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class HermesArgumentParser(argparse.ArgumentParser):
    """argparse with Hermes' error format: usage, then ``hermes: <message>``, exit 2.

    Subparsers inherit the class, so every subcommand reports mistakes the same way.
    """

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"hermes: {message}\n")


def warn(message: str) -> None:
    """One ``hermes: ...`` line on stderr: the only place diagnostics go."""
    print(f"hermes: {message}", file=sys.stderr)


def print_json(value: Any) -> None:
    """Pretty JSON on stdout; anything not JSON-native (paths, times) becomes its string."""
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def comma_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; the type of every ``a,b`` option."""
    return [part.strip() for part in text.split(",") if part.strip()]


def positive_int(text: str) -> int:
    """argparse type for counts and sizes: a zero or negative value is a usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def host_default(
    explicit: str | None, field_name: str, environ: Mapping[str, str] | None = None
) -> str | None:
    """The flag's value, else its host variable (see :data:`HOST_VARIABLES`), else None."""
    if explicit:
        return explicit
    source = os.environ if environ is None else environ
    return source.get(HOST_VARIABLES[field_name]) or None


def home_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--home",
        metavar="DIR",
        help="HERMES_HOME to read config.yaml and .env from (default: $HERMES_HOME or ~/.hermes)",
    )


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, safe to print and log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.password:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def format_time(stamp: float | None) -> str:
    """Local wall-clock minutes, or ``-``: what a person scanning a table needs."""
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M")


def plain(value: Any) -> Any:
    """A JSON-ready copy of dataclasses, pydantic models, mappings and sequences."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


@contextmanager
def capture_warnings(*logger_names: str) -> Iterator[list[str]]:
    """Collect WARNING+ records of ``logger_names`` instead of letting them reach stderr.

    ``config check`` reports unknown keys and toolsets in its own output (and JSON), so the
    same text must not also appear as a stray log line.
    """
    captured: list[str] = []

    class _Collector(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record.getMessage())

    handler = _Collector(logging.WARNING)
    loggers = [logging.getLogger(name) for name in logger_names]
    saved = [lg.propagate for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
    try:
        yield captured
    finally:
        for lg, propagate in zip(loggers, saved, strict=True):
            lg.removeHandler(handler)
            lg.propagate = propagate


# -- the session store the `sessions` commands work on -----------------------------------


@dataclass(frozen=True)
class StoreTarget:
    """Which store to open: a URL or path, its backend and adapter options."""

    url: str
    backend: str
    options: Mapping[str, Any]

    @property
    def display(self) -> str:
        return mask_url(self.url)

    @property
    def sqlite_path(self) -> Path | None:
        if self.backend != "sqlite":
            return None
        return Path(self.url.removeprefix("sqlite:///")).expanduser()


def store_target(db: str | None, home: str | None) -> StoreTarget:
    """``--db``, else the store the ``local`` profile would use (config ``database``).

    Raises:
        ConfigError: config.yaml is broken, or the URL scheme is unknown.
        CliError: the configured store keeps nothing (``none``/``memory``) and no ``--db``.
    """
    if db:
        return StoreTarget(db, backend_of(db), {})
    root = hermes_home(home)
    resolved = resolve_settings(load_config(root), home=root, profile="local")
    store = resolved.container["store"]
    if store["backend"] in {"none", "memory"} or not store["url"]:
        raise CliError(
            f"the configured session store ({store['backend']}) keeps nothing on disk; "
            "pass --db PATH_OR_URL",
            EXIT_USAGE,
        )
    return StoreTarget(str(store["url"]), str(store["backend"]), dict(store["options"]))


@asynccontextmanager
async def open_store(target: StoreTarget, *, read_only: bool) -> AsyncIterator[SessionStore | None]:
    """The store, closed on exit; ``None`` when a SQLite file does not exist yet.

    Reading must not create an empty database as a side effect (a typo in ``--db`` would
    otherwise leave files behind and report "no sessions" instead of the mistake).
    """
    path = target.sqlite_path
    if path is not None and not await anyio.Path(path).exists():
        yield None
        return
    store = SessionDB(target.url, read_only=read_only, **dict(target.options))
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()


def join(names: Sequence[str], empty: str = "-") -> str:
    return ", ".join(names) if names else empty
