"""The ports: one module per boundary, no third-party types in any signature."""

from hermes_core.ports.interaction import ApprovalDecision, Approver, Clarifier
from hermes_core.ports.llm import (
    CacheHints,
    ChatModel,
    FinishReason,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hermes_core.ports.mcp import ToolSource
from hermes_core.ports.memory import MemorySnapshot, MemoryStore, MemoryTarget, MemoryWrite
from hermes_core.ports.sessions import SearchHit, SessionInfo, SessionStore, StoredMessage
from hermes_core.ports.tools import (
    DEFAULT_MAX_RESULT_CHARS,
    FunctionTool,
    Tool,
    ToolContext,
    ToolResult,
    ToolSpec,
    tool_error,
)
from hermes_core.ports.trajectories import TrajectorySink

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "ApprovalDecision",
    "Approver",
    "CacheHints",
    "ChatModel",
    "Clarifier",
    "FinishReason",
    "FunctionTool",
    "MemorySnapshot",
    "MemoryStore",
    "MemoryTarget",
    "MemoryWrite",
    "ModelRequest",
    "ModelResponse",
    "ReasoningDelta",
    "ResponseComplete",
    "SearchHit",
    "SessionInfo",
    "SessionStore",
    "StoredMessage",
    "StreamEvent",
    "TextDelta",
    "Tool",
    "ToolCallDelta",
    "ToolContext",
    "ToolResult",
    "ToolSource",
    "ToolSpec",
    "TrajectorySink",
    "tool_error",
]
