"""Hermes' own MCP test server, on the SDK 2.x server API (``MCPServer``).

It exists so the client can be tested against a real server whose behaviour we choose:
progress, ``isError`` results, structured content, elicitation, reading its environment,
and dying mid-conversation. Run it over any transport::

    python hermes_test_server.py stdio
    python hermes_test_server.py streamable-http --port 8123   # http://127.0.0.1:8123/mcp
    python hermes_test_server.py sse --port 8124               # http://127.0.0.1:8124/sse

``--collide`` adds two tools whose names differ only in punctuation (``dup.name`` and
``dup-name``), so a client that sanitises names sees them collide. HTTP transports bind to
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, ImageContent, TextContent
from pydantic import BaseModel, Field

_PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class Weather(BaseModel):
    """A structured result, so the server sends ``structuredContent``."""

    temperature: float
    conditions: str
    humidity: int


class Answer(BaseModel):
    """The form the ``ask`` tool elicits."""

    answer: str = Field(description="Your answer")


def build_server(*, collide: bool = False) -> MCPServer:
    server = MCPServer("hermes-test", instructions="Hermes integration test server.")

    @server.tool(description="Echo the text back.", structured_output=False)
    def echo(text: str) -> str:
        return f"Echo: {text}"

    @server.tool(description="Add two integers.", structured_output=False)
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(
        description="Take `steps` steps, reporting progress after each.", structured_output=False
    )
    async def slow(steps: int, ctx: Context, delay: float = 0.01) -> str:
        for i in range(1, steps + 1):
            await anyio.sleep(delay)
            await ctx.report_progress(i, steps, f"step {i}")
        return f"done after {steps} steps"

    @server.tool(description="Always fails with an isError result.", structured_output=False)
    def fail(message: str = "it broke") -> str:
        raise ToolError(message)

    @server.tool(
        description="Fail with a JSON-RPC error (not an isError result).", structured_output=False
    )
    def rpc_error(message: str = "rejected") -> str:
        raise MCPError(code=INVALID_PARAMS, message=message)

    @server.tool(description="Return structured content.")
    def structured() -> Weather:
        return Weather(temperature=21.5, conditions="sunny", humidity=40)

    @server.tool(description="Return a tiny PNG image and a caption.")
    def image() -> CallToolResult:
        data = base64.b64encode(_PNG_1X1).decode()
        return CallToolResult(
            content=[
                TextContent(type="text", text="a pixel"),
                ImageContent(type="image", data=data, mime_type="image/png"),
            ]
        )

    @server.tool(
        description=(
            "Kill this server process. With `marker`, only the first call dies (it creates "
            "the file); later calls answer normally, so a client retry can succeed."
        ),
        structured_output=False,
    )
    def crash(marker: str = "") -> str:
        if marker:
            path = Path(marker)
            if path.exists():
                return "recovered after crash"
            path.write_text(str(os.getpid()))
        os._exit(17)

    @server.tool(
        description="This server's process id and process group id.", structured_output=False
    )
    def pid() -> str:
        return f"{os.getpid()} {os.getpgid(0)}"

    @server.tool(
        description="The names of the environment variables this server can see, as JSON.",
        structured_output=False,
    )
    def env_names() -> str:
        return json.dumps(sorted(os.environ))

    @server.tool(description="One HTTP request header ('' over stdio).", structured_output=False)
    def header(name: str, ctx: Context) -> str:
        return (ctx.headers or {}).get(name.lower(), "")

    @server.tool(
        description="Ask the user a question through elicitation.", structured_output=False
    )
    async def ask(question: str, ctx: Context) -> str:
        result = await ctx.elicit(question, Answer)
        if result.action == "accept":
            return f"user said: {result.data.answer}"
        return f"user action: {result.action}"

    if collide:

        @server.tool(name="dup.name", description="Collides with dup-name after sanitising.")
        def dup_dot() -> str:
            return "dot"

        @server.tool(name="dup-name", description="Collides with dup.name after sanitising.")
        def dup_dash() -> str:
            return "dash"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transport", choices=["stdio", "streamable-http", "sse"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--collide", action="store_true")
    options = parser.parse_args()
    server = build_server(collide=options.collide)
    if options.transport == "stdio":
        server.run("stdio")
    elif options.transport == "sse":
        server.run("sse", host="127.0.0.1", port=options.port)
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.port)


if __name__ == "__main__":
    main()
