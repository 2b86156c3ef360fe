"""The offline demo: a deterministic model that drives real tools.

``make demo`` must work on a fresh clone with no network and no key, yet show the real
loop: tool calls planned by the scheduler, real file and terminal tools, persistence to
SQLite, a trajectory. The "model" here reads the transcript the engine sends and decides
the next step from what the tools returned, like a tiny planner, so the run exercises the
same code paths as a real provider.
"""

from __future__ import annotations

import json

from hermes_adapters.llm.scripted import FunctionModel
from hermes_core.messages import AssistantMessage, ToolCall, ToolMessage, Usage, UserMessage
from hermes_core.ports.llm import ModelRequest, ModelResponse

__all__ = ["DEMO_PROMPT", "demo_model"]

DEMO_PROMPT = "Write a tiny Python script that greets the world, run it, and show me what it says."
SCRIPT_PATH = "hello_hermes.py"
SCRIPT = 'print("Hello from a script Hermes wrote!")\n'


def _since_last_user(request: ModelRequest) -> list[ToolMessage]:
    results: list[ToolMessage] = []
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            break
        if isinstance(message, ToolMessage):
            results.append(message)
    return list(reversed(results))


def _answer(text: str, reasoning: str, calls: tuple[ToolCall, ...] = ()) -> ModelResponse:
    """A reply with visible reasoning, so the demo also yields usable training samples."""
    usage = Usage(input_tokens=120, output_tokens=24, reasoning_tokens=12)
    if calls:
        message = AssistantMessage(
            content=text or None,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason="tool_calls",
        )
        return ModelResponse(message, "tool_calls", usage)
    message = AssistantMessage(content=text, reasoning=reasoning, finish_reason="stop")
    return ModelResponse(message, "stop", usage)


def _output_of(result: ToolMessage) -> str:
    try:
        data = json.loads(str(result.content))
    except ValueError:
        return str(result.content)
    if isinstance(data, dict):
        return str(data.get("output", data.get("content", data)))
    return str(data)


def _plan(request: ModelRequest) -> ModelResponse:
    offered = {spec.name for spec in request.tools}
    done = _since_last_user(request)
    if not {"write_file", "read_file", "terminal"} <= offered:
        return _answer(
            "I would need the file and terminal tools for that; none are enabled.",
            "No file or terminal tool is available, so I can only explain what I would do.",
        )
    if not done:
        write = ToolCall(
            id="call_write",
            name="write_file",
            arguments=json.dumps({"path": SCRIPT_PATH, "content": SCRIPT}),
        )
        return _answer(
            "I'll write the script first.",
            "The user wants a script run; it has to exist before it can run.",
            (write,),
        )
    if len(done) == 1:
        run = ToolCall(
            id="call_run",
            name="terminal",
            arguments=json.dumps({"command": f"python3 {SCRIPT_PATH}"}),
        )
        read = ToolCall(
            id="call_read", name="read_file", arguments=json.dumps({"path": SCRIPT_PATH})
        )
        return _answer(
            "Now I'll run it and read it back.",
            "The file is written; running it and reading it back are independent.",
            (run, read),
        )
    said = _output_of(done[1]).strip()
    return _answer(
        f"I wrote `{SCRIPT_PATH}` and ran it. It printed:\n\n    {said}\n\n"
        "The file is in the demo workspace.",
        "The script ran; its output is the answer.",
    )


def demo_model(model_name: str = "hermes-demo") -> FunctionModel:
    """The offline planner behind ``hermes demo`` (provider ``scripted``)."""
    return FunctionModel(_plan, model_name=model_name, provider="scripted")
