"""The chat-model contract over the Anthropic Messages adapter.

Two wirings of :class:`AnthropicMessagesModel` to :class:`AnthropicSimulator`: in-process
through ``httpx.MockTransport`` (fast, no sockets) and over a loopback HTTP server, so the
real socket path (chunked SSE bodies, hang-ups on cancel, aborted connections) is held to
the same contract as every other adapter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from hermes_adapters.llm.anthropic_messages import AnthropicMessagesModel
from hermes_adapters.testing.anthropic_sim import AnthropicSimulator
from hermes_adapters.testing.harness import wired_harness
from hermes_core.testing.llm import ChatModelContract, ContractHarness

pytestmark = pytest.mark.usefixtures("no_leaks")

MAX_RETRIES = 2


def _model(base_url: str, client: httpx.AsyncClient | None) -> AnthropicMessagesModel:
    return AnthropicMessagesModel(
        "claude-sim",
        base_url=base_url,
        api_key="sk-ant-test",
        client=client,
        max_retries=MAX_RETRIES,
        backoff=(0.001, 0.004),
    )


class TestAnthropicContract(ChatModelContract):
    """In-process: the model borrows a client whose transport is the simulator."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        async with wired_harness(
            AnthropicSimulator(),
            _model,
            max_retries=MAX_RETRIES,
            base_url="https://api.anthropic.example.test",
        ) as harness:
            yield harness


class TestAnthropicContractOverLoopback(ChatModelContract):
    """The real HTTP path: the model opens its own connection to 127.0.0.1."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        async with wired_harness(
            AnthropicSimulator(), _model, max_retries=MAX_RETRIES, loopback=True
        ) as harness:
            yield harness
