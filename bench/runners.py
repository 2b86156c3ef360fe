"""One benchmark conversation, as our agent and as a raw client making the same exchanges.

A *variant* is ``<runner>-<transport>``:

* runners: ``agent`` (``hermes_core.Agent`` over ``OpenAIChatModel``, a fresh agent per
  conversation and one shared model, as a data-generation host would run it), ``fresh``
  (the same, but a new model, so a new HTTP session, per conversation: what a factory
  that builds a model per prompt costs), ``anthropic`` (the agent over
  ``AnthropicMessagesModel``) and ``raw`` (a hand-written loop: build the body, POST it,
  parse the reply, run ``add``);
* transports: ``aiohttp`` (the adapter's default wire: aiohttp's own ``ClientSession``;
  the raw loop uses one configured the same way), ``httpx`` (httpx's pool: the model's
  own wire, the raw loop's ``client.post``) and ``inproc`` (an httpx transport answering
  in this process from the mock server's canned replies, injected into both: no socket,
  so only harness CPU is measured).

The raw loop sends the agent's bytes: its system prompt, tool schemas, body keys and
``prompt_cache_key`` come from a :class:`Template` captured from the agent's first request,
and its messages are built in the adapter's key order. The orchestrator checks the bodies
are identical before it times anything (``bench.cli``), so the difference between
``agent-X`` and ``raw-X`` is the harness's own work, with the transport held equal.

Imports of Hermes and of aiohttp are deferred to the runner that needs them, so a raw
httpx process carries neither (its peak RSS is the floor a raw client pays).
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from bench.mock_server import FINAL_TEXT, MODEL, TOOL_NAME, Canned, answer_round, parse_route

__all__ = [
    "API_KEY",
    "INPROC_SERVER",
    "PROMPT",
    "CannedTransport",
    "RUNNERS",
    "TRANSPORTS",
    "Runner",
    "Template",
    "make_runner",
    "model_url",
    "parse_variant",
]

API_KEY = "sk-bench-local"
PROMPT = "Add the numbers the tool gives you, one round at a time, then tell me you are done."
RUNNERS = ("agent", "raw", "fresh", "anthropic")
TRANSPORTS = ("httpx", "aiohttp", "inproc")
INPROC_SERVER = "http://mock.invalid"
"""The base URL of ``inproc`` variants: no socket, nothing listens there."""
_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""The adapter's default timeout, so both sides configure their clients alike."""


class Runner(Protocol):
    """Runs conversations on one client; :meth:`aclose` releases that client."""

    async def conversation(self) -> None:
        """One whole conversation (K tool rounds and a final answer); raises on a wrong end."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Template:
    """What the raw loop copies from the agent's first request body.

    ``body`` keeps the agent's key order with ``messages`` as a placeholder, so the raw
    body serialises to the same bytes as long as the messages do.
    """

    body: dict[str, Any]
    system: dict[str, Any]
    user: dict[str, Any]

    @classmethod
    def from_body(cls, text: str) -> Template:
        body = json.loads(text)
        messages = body["messages"]
        if len(messages) != 2 or messages[0]["role"] != "system":
            raise ValueError("the captured body is not a first round (system + user)")
        return cls(body={**body, "messages": None}, system=messages[0], user=messages[1])

    def to_json(self) -> dict[str, Any]:
        return {"body": self.body, "system": self.system, "user": self.user}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Template:
        return cls(body=dict(data["body"]), system=dict(data["system"]), user=dict(data["user"]))


def parse_variant(variant: str) -> tuple[str, str]:
    """``"agent-httpx"`` -> ``("agent", "httpx")``, checked against the known names."""
    runner, _, transport = variant.partition("-")
    if runner not in RUNNERS or transport not in TRANSPORTS:
        raise ValueError(f"unknown variant {variant!r}")
    return runner, transport


def model_url(base: str, rounds: int, api: str = "openai", latency_ms: float = 0.0) -> str:
    """The mock server's API root for ``rounds`` tool rounds (see ``bench.mock_server``)."""
    url = f"{base.rstrip('/')}/k{rounds}"
    if latency_ms > 0:
        url += f"/lat{latency_ms:g}"
    return url if api == "anthropic" else f"{url}/v1"


class CannedTransport(httpx.AsyncBaseTransport):
    """The mock server's answers without a socket: an httpx transport in this process.

    With no network, kernel or server in the loop, ``agent-inproc`` minus ``raw-inproc``
    is the harness's own CPU per round and nothing else: the steadiest figure on a shared
    machine, where wall times over loopback swing by tens of percent.
    """

    def __init__(self) -> None:
        self._canned = Canned()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        route = parse_route(request.url.raw_path)
        if route is None:
            return httpx.Response(404, json={"error": {"message": "no route"}})
        api, rounds, _ = route
        body = await request.aread()
        done, stream = answer_round(api, body)
        payload = self._canned.payload(api, done, done == rounds, stream)
        return httpx.Response(
            200,
            headers=[(b"content-type", payload.content_type.encode())],
            content=payload.body,
        )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context per process, as the adapter keeps: loading the CA bundle costs
    ~60 ms of CPU, which a client built per conversation would otherwise pay each time."""
    return httpx.create_ssl_context()


def make_client(transport: str) -> httpx.AsyncClient:
    """An httpx client for the raw loop (``httpx``) or for both sides (``inproc``),
    configured as the adapter configures the client it owns."""
    if transport == "inproc":
        return httpx.AsyncClient(
            transport=CannedTransport(), timeout=_TIMEOUT, follow_redirects=False
        )
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
    return httpx.AsyncClient(
        timeout=_TIMEOUT, follow_redirects=False, verify=_ssl_context(), limits=limits
    )


def _check_final(text: object) -> None:
    if text != FINAL_TEXT:
        raise RuntimeError(f"the conversation ended with {text!r}, not the scripted answer")


# -- the agent ------------------------------------------------------------------------------


def _add_tool() -> Any:
    from hermes_core import FunctionTool, ToolSpec

    async def add(args: dict[str, Any], ctx: Any) -> dict[str, int]:
        return {"sum": int(args["a"]) + int(args["b"])}

    spec = ToolSpec(
        name=TOOL_NAME,
        description="Add two integers and return their sum.",
        parameters={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    )
    return FunctionTool(spec, add)


class AgentRunner:
    """A fresh :class:`hermes_core.Agent` per conversation over one shared model.

    With ``fresh_model`` the model (and so its HTTP client and connections) is built and
    closed per conversation too, to price that pattern.
    """

    def __init__(
        self,
        base_url: str,
        transport: str,
        *,
        stream: bool = False,
        api: str = "openai",
        fresh_model: bool = False,
    ) -> None:
        from hermes_core import AgentSettings, ToolRegistry

        self._base_url = base_url
        self._transport = transport
        self._api = api
        self._fresh = fresh_model
        self._tools = ToolRegistry([_add_tool()])
        self._settings = AgentSettings(date_in_prompt=False, source="bench")
        self._stream: Callable[[str], None] | None = (lambda _text: None) if stream else None
        self._client = make_client("inproc") if transport == "inproc" else None
        self._model = None if fresh_model else self._new_model()

    def _new_model(self) -> Any:
        # The model opens its own wire for the variant's transport, as a host's model
        # does; only ``inproc`` injects a client (the canned transport).
        wire: dict[str, Any] = (
            {"client": self._client} if self._client is not None else {"transport": self._transport}
        )
        if self._api == "anthropic":
            from hermes_adapters.llm.anthropic_messages import AnthropicMessagesModel

            return AnthropicMessagesModel(
                MODEL, base_url=self._base_url, api_key=API_KEY, provider="bench", **wire
            )
        from hermes_adapters.llm.openai_chat import OpenAIChatModel

        return OpenAIChatModel(
            MODEL, base_url=self._base_url, api_key=API_KEY, provider="bench", **wire
        )

    async def conversation(self) -> None:
        from hermes_core import Agent

        if self._fresh:
            model = self._new_model()
            async with Agent(model, self._tools, settings=self._settings, owned=[model]) as agent:
                result = await agent.run_conversation(PROMPT, stream_callback=self._stream)
        else:
            agent = Agent(self._model, self._tools, settings=self._settings)
            result = await agent.run_conversation(PROMPT, stream_callback=self._stream)
        _check_final(result["final_response"])

    async def aclose(self) -> None:
        if self._model is not None:
            await self._model.aclose()
        if self._client is not None:
            await self._client.aclose()


# -- the raw baseline -----------------------------------------------------------------------


def _tool_turn(calls: list[dict[str, Any]], content: Any, out: list[dict[str, Any]]) -> None:
    """Append the assistant turn and one tool result per call, in the adapter's key order."""
    out.append(
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"].strip() or "{}",
                    },
                }
                for call in calls
            ],
        }
    )
    for call in calls:
        args = json.loads(call["function"]["arguments"] or "{}")
        result = json.dumps({"sum": int(args["a"]) + int(args["b"])}, ensure_ascii=False)
        out.append({"role": "tool", "tool_call_id": call["id"], "content": result})


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class _StreamReply:
    """The minimum a raw client does with Chat Completions chunks: join text and calls."""

    __slots__ = ("calls", "done", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.done = False

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        chunk = json.loads(data)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            for fragment in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(
                    fragment.get("index", 0),
                    {"id": None, "function": {"name": "", "arguments": ""}},
                )
                if fragment.get("id"):
                    slot["id"] = fragment["id"]
                function = fragment.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""

    def message(self) -> dict[str, Any]:
        if not self.done:
            raise RuntimeError("the stream ended without [DONE]")
        calls = [self.calls[i] for i in sorted(self.calls)]
        return {"content": "".join(self.text) or None, "tool_calls": calls or None}


class RawRunner:
    """The hand-written loop; subclasses make one round trip on their client."""

    def __init__(self, base_url: str, template: Template, *, stream: bool = False) -> None:
        self._url = f"{base_url}/chat/completions"
        self._stream = stream
        self._body = dict(template.body)
        if stream:
            self._body["stream"] = True
            self._body["stream_options"] = {"include_usage": True}
        self._first = [template.system, template.user]
        self._headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if stream else "application/json",
            "authorization": f"Bearer {API_KEY}",
        }

    async def _round(self, content: bytes) -> dict[str, Any]:
        raise NotImplementedError

    async def conversation(self) -> None:
        messages = list(self._first)
        body = dict(self._body)
        while True:
            body["messages"] = messages
            message = await self._round(_encode(body))
            calls = message.get("tool_calls")
            if not calls:
                _check_final(message.get("content"))
                return
            _tool_turn(calls, message.get("content"), messages)

    async def aclose(self) -> None:
        raise NotImplementedError


class HttpxRawRunner(RawRunner):
    """The loop over the httpx API: ``client.post`` / ``client.stream``."""

    def __init__(
        self, base_url: str, transport: str, template: Template, *, stream: bool = False
    ) -> None:
        super().__init__(base_url, template, stream=stream)
        self._client = make_client(transport)

    async def _round(self, content: bytes) -> dict[str, Any]:
        if not self._stream:
            response = await self._client.post(self._url, content=content, headers=self._headers)
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
            message: dict[str, Any] = json.loads(response.content)["choices"][0]["message"]
            return message
        reply = _StreamReply()
        async with self._client.stream(
            "POST", self._url, content=content, headers=self._headers
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}")
            async for line in response.aiter_lines():
                reply.feed(line)
        return reply.message()

    async def aclose(self) -> None:
        await self._client.aclose()


class AiohttpRawRunner(RawRunner):
    """The loop on aiohttp's own ``ClientSession``, configured as the adapter's aiohttp
    wire configures its session (TLS context, timeouts, no per-request ``trust_env``)."""

    def __init__(self, base_url: str, template: Template, *, stream: bool = False) -> None:
        import aiohttp

        super().__init__(base_url, template, stream=stream)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=_ssl_context(), limit=100),
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=_TIMEOUT.pool,
                sock_connect=_TIMEOUT.connect,
                sock_read=_TIMEOUT.read,
            ),
        )

    async def _round(self, content: bytes) -> dict[str, Any]:
        async with self._session.post(self._url, data=content, headers=self._headers) as response:
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}")
            if not self._stream:
                message: dict[str, Any] = json.loads(await response.read())["choices"][0]["message"]
                return message
            reply = _StreamReply()
            async for line in response.content:
                reply.feed(line.decode())
        return reply.message()

    async def aclose(self) -> None:
        await self._session.close()


def make_runner(
    variant: str,
    server: str,
    rounds: int,
    *,
    template: Template | None = None,
    stream: bool = False,
    latency_ms: float = 0.0,
) -> Runner:
    """The runner for ``variant`` against the mock server at ``server`` (``http://host:port``).

    Raises:
        ValueError: an unknown variant, or a raw variant without a template.
    """
    runner, transport = parse_variant(variant)
    if transport == "inproc":
        server, latency_ms = INPROC_SERVER, 0.0
    if runner == "anthropic":
        url = model_url(server, rounds, "anthropic", latency_ms)
        return AgentRunner(url, transport, stream=stream, api="anthropic")
    url = model_url(server, rounds, "openai", latency_ms)
    if runner in ("agent", "fresh"):
        return AgentRunner(url, transport, stream=stream, fresh_model=runner == "fresh")
    if template is None:
        raise ValueError("a raw runner needs the agent's request template")
    if transport == "aiohttp":
        return AiohttpRawRunner(url, template, stream=stream)
    return HttpxRawRunner(url, transport, template, stream=stream)
