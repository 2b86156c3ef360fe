"""Wiring a model under test to a simulator, the two ways the contract asks for.

Why this module exists: every provider's contract suite runs twice, once in-process
(``httpx.MockTransport``: fast, no sockets) and once over a loopback HTTP server (the
model opens its own wire, so chunked bodies, hang-ups and aborted connections are real).
The set-up and the closing of the model are the same each time; a suite only says how to
build its model from a base URL and an optional client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import httpx

from hermes_adapters.testing.scenario_server import ScenarioServer
from hermes_core.ports.llm import ChatModel
from hermes_core.testing.llm import Harness

__all__ = ["ModelBuilder", "wired_harness"]

ModelBuilder = Callable[[str, httpx.AsyncClient | None], ChatModel]
"""``(base_url, client)`` to the model under test; ``client`` is ``None`` on loopback."""


@asynccontextmanager
async def wired_harness(
    sim: ScenarioServer,
    build: ModelBuilder,
    *,
    max_retries: int,
    loopback: bool = False,
    base_url: str = "https://llm.example.test/v1",
) -> AsyncIterator[Harness]:
    """A :class:`~hermes_core.testing.llm.Harness` for ``build``'s model and ``sim``.

    In-process the model borrows a client whose transport is the simulator and is given
    ``base_url``; with ``loopback`` it gets the simulator's 127.0.0.1 URL and no client.
    The model is closed on exit, the client and the server after it.
    """
    async with AsyncExitStack() as stack:
        if loopback:
            url, client = await stack.enter_async_context(sim.serve()), None
        else:
            url, client = base_url, await stack.enter_async_context(sim.mock_client())
        model = build(url, client)
        try:
            yield Harness(model, sim, max_retries)
        finally:
            await model.aclose()
