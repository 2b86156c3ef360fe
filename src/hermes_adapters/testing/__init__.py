"""Test helpers that speak real wire formats: simulators for the provider contract kit.

See :mod:`hermes_core.testing.llm` for the scenario vocabulary and ``ChatModelContract``.
"""

from hermes_adapters.testing.anthropic_sim import AnthropicSimulator
from hermes_adapters.testing.harness import ModelBuilder, wired_harness
from hermes_adapters.testing.openai_chat_sim import OpenAIChatSimulator
from hermes_adapters.testing.responses_sim import ResponsesSimulator
from hermes_adapters.testing.scenario_server import ScenarioServer, WirePlan

__all__ = [
    "AnthropicSimulator",
    "ModelBuilder",
    "OpenAIChatSimulator",
    "ResponsesSimulator",
    "ScenarioServer",
    "WirePlan",
    "wired_harness",
]
