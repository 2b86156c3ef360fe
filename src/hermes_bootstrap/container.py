"""The composition root: which adapter serves each port, chosen by configuration.

A dependency-injector container holds one ``Selector`` per replaceable port (the model
provider, the session backend, the memory backend), so swapping SQLite for PostgreSQL or
one provider for another is a configuration value, not code. Providers are resolved
lazily, one at a time, and never through ``init_resources()``: that call walks every
Selector branch and would open a PostgreSQL pool for a user who chose SQLite (STYLE.md §4,
verified). ``shutdown_resources()`` then closes only what was opened, in reverse order.

Only this package imports ``dependency_injector``; the core and the adapters stay free of
it, so composing an agent by hand (``hermes_core.Agent(model=..., sessions=...)``) needs no
container at all.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from dependency_injector import containers, providers

from hermes_adapters.llm.profiles import PROFILES, build_chat_model
from hermes_adapters.llm.scripted import ScriptedModel
from hermes_adapters.memory.files import FileMemoryStore
from hermes_adapters.memory.in_memory import InMemoryMemoryStore
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_bootstrap.demo import demo_model
from hermes_bootstrap.sessions import SessionDB
from hermes_core.errors import ConfigError
from hermes_core.ports.memory import MemoryStore
from hermes_core.ports.sessions import SessionStore

__all__ = ["HermesContainer", "build_container", "resolve"]

SESSION_BACKENDS = ("none", "memory", "sqlite", "postgres")
MEMORY_BACKENDS = ("none", "memory", "files")


@asynccontextmanager
async def _open_store(url: str, options: Mapping[str, Any]) -> AsyncIterator[SessionStore]:
    """A Resource: one store per container, closed by ``shutdown_resources()``."""
    store = SessionDB(url, **dict(options))
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _open_memory(
    directory: str, memory_limit: int, user_limit: int
) -> AsyncIterator[MemoryStore]:
    store = FileMemoryStore(Path(directory), memory_limit=memory_limit, user_limit=user_limit)
    try:
        yield store
    finally:
        await store.aclose()


def _model_branches(config: providers.Configuration) -> dict[str, providers.Provider[Any]]:
    llm = config.llm
    branches: dict[str, providers.Provider[Any]] = {
        "scripted": providers.Factory(demo_model, model_name=llm.model),
        "script": providers.Factory(ScriptedModel, model_name=llm.model),
    }
    for name in PROFILES:
        branches[name] = providers.Factory(
            build_chat_model,
            name,
            llm.model,
            api_key=llm.api_key,
            base_url=llm.base_url,
            api_mode=llm.api_mode,
            environ=llm.environ,
            dotenv=llm.dotenv,
        )
    return branches


class HermesContainer(containers.DeclarativeContainer):
    """Selectors over the adapters; ``config`` is fed from validated settings only."""

    config = providers.Configuration(strict=True)

    model = providers.Selector(config.llm.backend, **_model_branches(config))

    sessions = providers.Selector(
        config.store.backend,
        none=providers.Object(None),
        memory=providers.Singleton(InMemorySessionStore),
        sqlite=providers.Resource(_open_store, config.store.url, config.store.options),
        postgres=providers.Resource(_open_store, config.store.url, config.store.options),
    )

    memory = providers.Selector(
        config.memory.backend,
        none=providers.Object(None),
        memory=providers.Singleton(InMemoryMemoryStore),
        files=providers.Resource(
            _open_memory,
            config.memory.directory,
            config.memory.memory_limit,
            config.memory.user_limit,
        ),
    )


def build_container(settings: Mapping[str, Any]) -> HermesContainer:
    """A container fed with ``settings`` (sections ``llm``, ``store``, ``memory``).

    Raises:
        ConfigError: a backend name is not one the container knows.
    """
    llm = settings["llm"]["backend"]
    if llm not in PROFILES and llm not in {"scripted", "script"}:
        known = ", ".join(["scripted", *sorted(PROFILES)])
        raise ConfigError(f"unknown model provider {llm!r}; known: {known}")
    store = settings["store"]["backend"]
    if store not in SESSION_BACKENDS:
        raise ConfigError(f"unknown session backend {store!r}; known: {SESSION_BACKENDS}")
    memory = settings["memory"]["backend"]
    if memory not in MEMORY_BACKENDS:
        raise ConfigError(f"unknown memory backend {memory!r}; known: {MEMORY_BACKENDS}")
    container = HermesContainer()
    container.config.from_dict(dict(settings))
    return container


async def resolve(provided: Any) -> Any:
    """Await a provider's result when it is async (Resources), return it otherwise."""
    return await provided if inspect.isawaitable(provided) else provided
