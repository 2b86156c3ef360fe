"""The composition root: which adapter serves each port, chosen by configuration.

A dependency-injector container holds one ``Selector`` per replaceable port (the model
provider, the session backend), so swapping SQLite for PostgreSQL or one provider for
another is a configuration value, not code. Providers are resolved lazily, one at a time,
and never through ``init_resources()``: that call walks every Selector branch and would
open a PostgreSQL pool for a user who chose SQLite (STYLE.md §4, verified).

Only this package imports ``dependency_injector``; the core and the adapters stay free of
it, so composing an agent by hand (``hermes_core.Agent(model=..., sessions=...)``) needs
no container at all.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from dependency_injector import containers, providers

from hermes_adapters.llm.scripted import ScriptedModel
from hermes_adapters.sessions.memory import InMemorySessionStore
from hermes_bootstrap.demo import demo_model
from hermes_core.errors import ConfigError

__all__ = ["HermesContainer", "build_container", "resolve"]

MODEL_BACKENDS = ("scripted", "demo")
SESSION_BACKENDS = ("none", "memory")


class HermesContainer(containers.DeclarativeContainer):
    """Selectors over the adapters; ``config`` is fed from validated settings only."""

    config = providers.Configuration(strict=True)

    model = providers.Selector(
        config.llm.backend,
        scripted=providers.Factory(ScriptedModel, model_name=config.llm.model),
        demo=providers.Factory(demo_model, model_name=config.llm.model),
    )

    sessions = providers.Selector(
        config.store.backend,
        none=providers.Object(None),
        memory=providers.Singleton(InMemorySessionStore),
    )


def build_container(*, llm: str, model: str, store: str = "none") -> HermesContainer:
    """A container for the given backends.

    Raises:
        ConfigError: a backend name is not one the container knows.
    """
    if llm not in MODEL_BACKENDS:
        raise ConfigError(f"unknown model provider {llm!r}; known: {', '.join(MODEL_BACKENDS)}")
    if store not in SESSION_BACKENDS:
        raise ConfigError(
            f"unknown session backend {store!r}; known: {', '.join(SESSION_BACKENDS)}"
        )
    container = HermesContainer()
    settings: Mapping[str, Any] = {
        "llm": {"backend": llm, "model": model},
        "store": {"backend": store},
    }
    container.config.from_dict(dict(settings))
    return container


async def resolve(provided: Any) -> Any:
    """Await a provider's result when it is async (Resources), return it otherwise."""
    return await provided if inspect.isawaitable(provided) else provided
