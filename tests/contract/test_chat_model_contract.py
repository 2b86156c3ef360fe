"""The chat-model contract over the OpenAI Chat Completions adapter.

Each subclass wires :class:`OpenAIChatModel` to :class:`OpenAIChatSimulator` a different
way: in-process through ``httpx.MockTransport`` for each host dialect (the reasoning
replay rule differs per host), and once over a loopback HTTP server so the real socket
path (chunked bodies, hang-ups on cancel) is held to the same contract.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import httpx
import pytest

from hermes_adapters.llm.openai_chat import OpenAIChatModel, ReasoningEcho
from hermes_adapters.testing.harness import wired_harness
from hermes_adapters.testing.openai_chat_sim import ChatDialect, OpenAIChatSimulator
from hermes_core.testing.llm import ChatModelContract, ContractHarness, Harness

pytestmark = pytest.mark.usefixtures("no_leaks")

MAX_RETRIES = 2
ECHO: dict[ChatDialect, ReasoningEcho] = {
    "openai": "none",
    "deepseek": "reasoning_content",
    "openrouter": "reasoning_details",
}


def _served(
    dialect: ChatDialect, *, loopback: bool = False
) -> AbstractAsyncContextManager[Harness]:
    sim = OpenAIChatSimulator(dialect)

    def build(base_url: str, client: httpx.AsyncClient | None) -> OpenAIChatModel:
        return OpenAIChatModel(
            "gpt-sim",
            base_url=base_url,
            api_key="sk-test",
            client=client,
            provider=dialect,
            max_retries=MAX_RETRIES,
            backoff=(0.001, 0.004),
            reasoning_echo=ECHO[dialect],
        )

    return wired_harness(sim, build, max_retries=MAX_RETRIES, loopback=loopback)


class _MockTransportHarness(ChatModelContract):
    dialect: ChatDialect = "openai"

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        async with _served(self.dialect) as harness:
            yield harness


class TestOpenAIChatContract(_MockTransportHarness):
    dialect: ChatDialect = "openai"


class TestDeepSeekChatContract(_MockTransportHarness):
    dialect: ChatDialect = "deepseek"


class TestOpenRouterChatContract(_MockTransportHarness):
    dialect: ChatDialect = "openrouter"


class TestOpenAIChatContractOverLoopback(ChatModelContract):
    """The real HTTP path on the default wire (aiohttp), talking to 127.0.0.1."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        async with _served("deepseek", loopback=True) as harness:
            yield harness


class TestOpenAIChatContractOverHttpxPool(ChatModelContract):
    """The same loopback path over httpx's own pool, the selectable alternative transport."""

    @pytest.fixture
    async def harness(self, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ContractHarness]:
        monkeypatch.setenv("HERMES_HTTP_TRANSPORT", "httpx")
        async with _served("openrouter", loopback=True) as harness:
            yield harness
