"""The chat-model contract over the OpenAI Responses adapter.

:class:`OpenAIResponsesModel` is wired to :class:`ResponsesSimulator` twice: in-process
through ``httpx.MockTransport`` (fast, no sockets) and over a loopback HTTP server, so the
real socket path (chunked event streams, hang-ups on cancel, aborted connections) is held
to the same contract. The simulator is a strict stateless server, so every reasoning
replay in the contract is also checked for placement and integrity.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from hermes_adapters.llm.openai_responses import OpenAIResponsesModel
from hermes_adapters.testing.harness import wired_harness
from hermes_adapters.testing.responses_sim import ResponsesSimulator
from hermes_core.testing.llm import ChatModelContract, ContractHarness

pytestmark = pytest.mark.usefixtures("no_leaks")

MAX_RETRIES = 2


def _model(base_url: str, client: httpx.AsyncClient | None) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(
        "gpt-sim",
        base_url=base_url,
        api_key="sk-test",
        client=client,
        max_retries=MAX_RETRIES,
        backoff=(0.001, 0.004),
    )


class TestResponsesContract(ChatModelContract):
    """In-process: the model borrows a client whose transport is the simulator."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        async with wired_harness(
            ResponsesSimulator(),
            _model,
            max_retries=MAX_RETRIES,
            base_url="https://llm.example.test/v1",
        ) as harness:
            yield harness


class TestResponsesContractOverLoopback(ChatModelContract):
    """The real HTTP path: the model opens its own connection to 127.0.0.1."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        async with wired_harness(
            ResponsesSimulator(), _model, max_retries=MAX_RETRIES, loopback=True
        ) as harness:
            yield harness
