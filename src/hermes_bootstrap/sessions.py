"""``SessionDB``: one call that opens the right session store for a URL or path.

This is the "swap SQLite for PostgreSQL" switch: the same code gets a SQLite store for a
path or ``sqlite:///`` URL and a PostgreSQL store for ``postgresql+asyncpg://``, both
implementing the same port and proven by the same contract suite. Stores open lazily, so
calling this touches neither the disk nor the network.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hermes_core.errors import ConfigError
from hermes_core.ports.sessions import SessionStore

__all__ = ["SessionDB", "backend_of"]

_POSTGRES_SCHEMES = ("postgresql+asyncpg://", "postgresql://", "postgres://")


def backend_of(url_or_path: str | os.PathLike[str]) -> str:
    """``"sqlite"``, ``"postgres"`` or ``"memory"`` for a URL or path."""
    text = os.fspath(url_or_path)
    if text.startswith(_POSTGRES_SCHEMES):
        return "postgres"
    if text in {"memory://", ":memory:"}:
        return "memory"
    if "://" in text and not text.startswith("sqlite:///"):
        raise ConfigError(
            f"session store URL {text!r} is not supported; use a path, sqlite:///path, "
            "postgresql+asyncpg://user@host/db or memory://"
        )
    return "sqlite"


def SessionDB(  # the name users know from Hermes
    url_or_path: str | os.PathLike[str], read_only: bool = False, **options: Any
) -> SessionStore:
    """The session store for ``url_or_path``; ``options`` go to the adapter.

    Raises:
        ConfigError: the URL scheme is unknown, or the PostgreSQL extra is missing.
    """
    backend = backend_of(url_or_path)
    text = os.fspath(url_or_path)
    if backend == "memory":
        from hermes_adapters.sessions.memory import InMemorySessionStore

        return InMemorySessionStore(read_only=read_only)
    if backend == "postgres":
        try:
            from hermes_adapters.sessions.postgres import PostgresSessionStore
        except ImportError as exc:  # asyncpg is the `postgres` extra
            raise ConfigError(
                "PostgreSQL storage needs the postgres extra: pip install 'hermes-harness[postgres]'"
            ) from exc
        url = "postgresql+asyncpg://" + text.split("://", 1)[1]
        return PostgresSessionStore(url, read_only=read_only, **options)
    from hermes_adapters.sessions.sqlite import SQLiteSessionStore

    path = Path(text.removeprefix("sqlite:///")) if text.startswith("sqlite:///") else Path(text)
    return SQLiteSessionStore(path.expanduser(), read_only=read_only, **options)
