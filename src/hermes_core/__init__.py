"""Hermes core: the pure domain of the harness.

The turn engine, the message model and its invariants, toolsets, trajectories and the
ports. Nothing here touches the network, disk, SQL, YAML or a DI framework; adapters in
``hermes_adapters`` do, and ``hermes_bootstrap`` wires them together.
"""

from hermes_core.agent import Agent, AgentSettings
from hermes_core.budget import IterationBudget
from hermes_core.errors import HermesError
from hermes_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from hermes_core.ports.tools import FunctionTool, ToolContext, ToolResult, ToolSpec
from hermes_core.registry import ToolRegistry

__all__ = [
    "Agent",
    "AgentSettings",
    "AssistantMessage",
    "FunctionTool",
    "HermesError",
    "IterationBudget",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolContext",
    "ToolMessage",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
]
