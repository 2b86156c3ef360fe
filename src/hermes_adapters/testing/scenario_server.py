"""The format-neutral half of the provider wire simulators.

:class:`ScenarioServer` keeps the script of scenarios and the request log, and serves both
through an ``httpx.MockTransport`` (``mock_client()``) and a tiny HTTP/1.1 server on
127.0.0.1 (``serve()``), so one script drives the in-process and the real network path.
A simulator for a wire format subclasses it and writes only ``render``, ``validate``,
``request_summary``, ``replayed_reasoning`` and ``supports``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import anyio
import anyio.abc
import httpx
from anyio.streams.buffered import BufferedByteReceiveStream

from hermes_core.testing.llm import (
    Feature,
    RecordedRequest,
    RequestSummary,
    Scenario,
)

__all__ = ["Pause", "ScenarioServer", "WirePlan", "json_plan", "sse"]


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait this long before sending the rest of the body (the client may hang up)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class WirePlan:
    """Exactly what to send back for one request.

    ``delay`` waits before the status line; ``streamed`` sends the body as it is produced
    (chunked on loopback); ``abort`` breaks the connection after the body parts instead of
    ending the message.
    """

    status: int
    headers: Mapping[str, str]
    body: tuple[bytes | Pause, ...] = ()
    delay: float = 0.0
    streamed: bool = False
    abort: bool = False


def json_plan(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> WirePlan:
    return WirePlan(
        status,
        {"content-type": "application/json", **(headers or {})},
        (json.dumps(payload, ensure_ascii=False).encode(),),
    )


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string.

    Raw UTF-8, as the providers send it: non-ASCII characters, U+2028 included, are not
    escaped, so a client must not split lines anywhere but at CR and LF."""
    text = (
        data
        if isinstance(data, str)
        else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    )
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {text}\n\n".encode()


class _PlanStream(httpx.AsyncByteStream):
    """A response body for ``MockTransport`` that honours pauses and aborts."""

    def __init__(self, plan: WirePlan) -> None:
        self._plan = plan

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self._plan.body:
            if isinstance(part, Pause):
                await anyio.sleep(part.seconds)
            else:
                yield part
        if self._plan.abort:
            raise httpx.RemoteProtocolError("peer closed connection without a complete body")


class ScenarioServer(ABC):
    """The script, the request log and both transports; subclasses speak one format."""

    def __init__(self) -> None:
        self._script: deque[Scenario] = deque()
        self._requests: list[RecordedRequest] = []

    # the WireSimulator protocol (the format-specific half is abstract below)

    @property
    def requests(self) -> Sequence[RecordedRequest]:
        return self._requests

    @property
    def bodies(self) -> list[Mapping[str, Any]]:
        """The recorded JSON bodies, in order."""
        return [r.body for r in self._requests]

    @property
    def pending(self) -> int:
        return len(self._script)

    def play(self, *scenarios: Scenario) -> None:
        self._script.extend(scenarios)

    @abstractmethod
    def supports(self, feature: Feature) -> bool: ...

    @abstractmethod
    def request_summary(self, index: int) -> RequestSummary: ...

    @abstractmethod
    def replayed_reasoning(self, index: int) -> str | None: ...

    @abstractmethod
    def render(self, scenario: Scenario, request: RecordedRequest) -> WirePlan:
        """The wire response for ``scenario``."""

    def validate(self, request: RecordedRequest) -> WirePlan | None:
        """An error plan if a strict server would reject ``request``; default: accept."""
        return None

    # dispatch

    def respond(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> WirePlan:
        """Record one request and decide the reply (shared by both transports)."""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        recorded = RecordedRequest(method, path, {k.lower(): v for k, v in headers.items()}, body)
        self._requests.append(recorded)
        if not isinstance(body, dict) or "_unparsed" in body:
            return self.reject(400, "the request body is not a JSON object")
        rejection = self.validate(recorded)
        if rejection is not None:
            return rejection
        if not self._script:
            return self.reject(
                418,
                f"wire simulator: request {len(self._requests)} arrived but no scenario was "
                "queued; call sim.play(...) for it",
            )
        return self.render(self._script.popleft(), recorded)

    def reject(self, status: int, message: str) -> WirePlan:
        """A non-retryable error in the generic ``{"error": {...}}`` shape."""
        payload = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
        return json_plan(status, payload, {"x-should-retry": "false"})

    # transport 1: httpx.MockTransport

    async def handle(self, request: httpx.Request) -> httpx.Response:
        """The ``httpx.MockTransport`` handler."""
        plan = self.respond(request.method, request.url.path, request.headers, request.content)
        if plan.delay:
            await anyio.sleep(plan.delay)
        if plan.streamed or plan.abort or any(isinstance(p, Pause) for p in plan.body):
            return httpx.Response(plan.status, headers=plan.headers, stream=_PlanStream(plan))
        content = b"".join(p for p in plan.body if isinstance(p, bytes))
        return httpx.Response(plan.status, headers=plan.headers, content=content)

    def mock_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """A client whose every request is answered by this simulator (caller closes it)."""
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle), **kwargs)

    # transport 2: loopback HTTP/1.1 server

    @asynccontextmanager
    async def serve(self, prefix: str = "/v1") -> AsyncIterator[str]:
        """Serve on a free 127.0.0.1 port; yields the base URL (``http://127.0.0.1:N/v1``)."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, self._connection, group)
            try:
                yield f"http://127.0.0.1:{port}{prefix}"
            finally:
                group.cancel_scope.cancel()

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        """One request per connection (``connection: close``), then hang up."""
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            try:
                head = await reader.receive_until(b"\r\n\r\n", 1 << 16)
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, target, _ = request_line.split(" ", 2)
                headers = dict(_header(line) for line in lines if ":" in line)
                length = int(headers.get("content-length", "0"))
                raw = await reader.receive_exactly(length) if length else b""
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
                return
            except (anyio.BrokenResourceError, ValueError):
                return
            plan = self.respond(method, target.split("?", 1)[0], headers, raw)
            try:
                await self._write(stream, reader, plan)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return  # the client hung up (a cancelled call): nothing left to do

    async def _write(
        self, stream: anyio.abc.SocketStream, reader: BufferedByteReceiveStream, plan: WirePlan
    ) -> None:
        if plan.delay and await _client_left(reader, plan.delay):
            return
        chunked = plan.streamed or plan.abort or any(isinstance(p, Pause) for p in plan.body)
        payload = b"".join(p for p in plan.body if isinstance(p, bytes))
        head = [f"HTTP/1.1 {plan.status} {_reason(plan.status)}"]
        head += [f"{k}: {v}" for k, v in plan.headers.items()]
        head.append("transfer-encoding: chunked" if chunked else f"content-length: {len(payload)}")
        head.append("connection: close")
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if not chunked:
            await stream.send(payload)
            return
        for part in plan.body:
            if isinstance(part, Pause):
                if await _client_left(reader, part.seconds):
                    return
            elif part:
                await stream.send(b"%x\r\n%s\r\n" % (len(part), part))
        if not plan.abort:
            await stream.send(b"0\r\n\r\n")


def _header(line: str) -> tuple[str, str]:
    name, _, value = line.partition(":")
    return name.strip().lower(), value.strip()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


async def _client_left(reader: BufferedByteReceiveStream, seconds: float) -> bool:
    """Wait up to ``seconds``; True as soon as the client hangs up (or sends anything)."""
    with anyio.move_on_after(seconds):
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await reader.receive(1)
        return True
    return False


# -- Chat Completions ------------------------------------------------------------------------
