"""The chat-model contract over the OpenAI Chat Completions adapter.

Each subclass wires :class:`OpenAIChatModel` to :class:`OpenAIChatSimulator` a different
way: in-process through ``httpx.MockTransport`` for each host dialect (the reasoning
replay rule differs per host), and once over a loopback HTTP server so the real socket
path (chunked bodies, hang-ups on cancel) is held to the same contract.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from hermes_adapters.llm.openai_chat import OpenAIChatModel, ReasoningEcho
from hermes_adapters.testing.openai_chat_sim import ChatDialect, OpenAIChatSimulator
from hermes_core.testing.llm import ChatModelContract, ContractHarness, Harness

pytestmark = pytest.mark.usefixtures("no_leaks")

MAX_RETRIES = 2
ECHO: dict[ChatDialect, ReasoningEcho] = {
    "openai": "none",
    "deepseek": "reasoning_content",
    "openrouter": "reasoning_details",
}


def _model(
    sim: OpenAIChatSimulator, base_url: str, client: httpx.AsyncClient | None
) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-sim",
        base_url=base_url,
        api_key="sk-test",
        client=client,
        provider=sim.dialect,
        max_retries=MAX_RETRIES,
        backoff=(0.001, 0.004),
        reasoning_echo=ECHO[sim.dialect],
    )


class _MockTransportHarness(ChatModelContract):
    dialect: ChatDialect = "openai"

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        sim = OpenAIChatSimulator(self.dialect)
        async with sim.mock_client() as client:
            model = _model(sim, "https://llm.example.test/v1", client)
            try:
                yield Harness(model, sim, MAX_RETRIES)
            finally:
                await model.aclose()


class TestOpenAIChatContract(_MockTransportHarness):
    dialect: ChatDialect = "openai"


class TestDeepSeekChatContract(_MockTransportHarness):
    dialect: ChatDialect = "deepseek"


class TestOpenRouterChatContract(_MockTransportHarness):
    dialect: ChatDialect = "openrouter"


class TestOpenAIChatContractOverLoopback(ChatModelContract):
    """The real HTTP path: the model owns its httpx client and talks to 127.0.0.1."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ContractHarness]:
        sim = OpenAIChatSimulator("deepseek")
        async with sim.serve() as base_url:
            model = _model(sim, base_url, None)
            try:
                yield Harness(model, sim, MAX_RETRIES)
            finally:
                await model.aclose()


class TestOpenAIChatContractOverHttpxPool(ChatModelContract):
    """The same loopback path over httpx's own pool, the selectable alternative transport."""

    @pytest.fixture
    async def harness(self, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ContractHarness]:
        monkeypatch.setenv("HERMES_HTTP_TRANSPORT", "httpx")
        sim = OpenAIChatSimulator("openrouter")
        async with sim.serve() as base_url:
            model = _model(sim, base_url, None)
            try:
                yield Harness(model, sim, MAX_RETRIES)
            finally:
                await model.aclose()
