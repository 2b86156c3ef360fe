"""A deterministic mock OpenAI-compatible and Anthropic server for the benchmarks.

Why not the test simulators in ``hermes_adapters.testing``: they are built to be strict
and observable (they log and validate every request), which costs more CPU per request
than the client we want to measure. On a 2-core machine the server must stay well below
one core at thousands of requests per second, so this one is a bare ``asyncio.Protocol``
HTTP/1.1 server (keep-alive, ``Content-Length`` request bodies) that answers from
pre-encoded responses. It runs in its own process so the client's CPU time
(``time.process_time``) and peak RSS are the client's alone.

The script is in the URL, so no request needs parsing beyond its headers::

    POST /k{K}[/lat{MS}]/v1/chat/completions    OpenAI Chat Completions
    POST /k{K}[/lat{MS}]/v1/messages            Anthropic Messages

A conversation gets ``K`` tool rounds, then a final text: the round is the number of tool
results already in the request (``"tool_call_id"`` for OpenAI, ``"tool_result"`` for
Anthropic), so each round answers with a call of the ``add`` tool and round ``K`` with
:data:`FINAL_TEXT`. ``"stream": true`` in the body selects server-sent events (chunked
transfer encoding, as vLLM and SGLang send them). ``/lat{MS}`` delays each answer by ``MS``
milliseconds, to model inference time.

Control endpoints (for the orchestrator, never timed):

* ``GET /_bench/stats``: requests, body and header bytes received, the server's CPU
  seconds so far, errors;
* ``POST /_bench/reset``: zero the counters;
* ``GET /_bench/bodies``: the last request bodies received (to prove the raw baseline sends
  the same bytes as the agent).

Run it alone with ``python -m bench.mock_server --port 8765``; with ``--port 0`` it picks a
free port and prints ``{"port": N}`` on its first stdout line. It exits on SIGTERM/SIGINT
or when its stdin closes, so it cannot outlive the benchmark that started it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FINAL_TEXT",
    "MODEL",
    "TOOL_NAME",
    "Canned",
    "Payload",
    "ServerState",
    "answer_round",
    "call_id",
    "main",
    "parse_route",
    "serve",
    "tool_arguments",
]

MODEL = "bench-model"
TOOL_NAME = "add"
FINAL_TEXT = "All sums are done: the answer is 42."
_MAX_HEAD = 64 * 1024
_BODY_RING = 64
_ROUTE = re.compile(rb"^/k(\d+)(?:/lat(\d+(?:\.\d+)?))?/v1/(chat/completions|messages)$")
_STREAM = re.compile(rb'"stream"\s*:\s*true')
_TEXT_PIECES = 4
"""The final text is streamed in this many deltas, like a (very short) real reply."""


def call_id(api: str, round_index: int) -> str:
    """The tool call id of ``round_index``: deterministic and unique within a conversation."""
    prefix = "toolu" if api == "anthropic" else "call"
    return f"{prefix}_bench_{round_index:04d}"


def tool_arguments(round_index: int) -> dict[str, int]:
    """The ``add`` arguments of ``round_index``."""
    return {"a": round_index, "b": round_index + 1}


def _usage(round_index: int) -> tuple[int, int]:
    """(prompt, completion) tokens: made up but deterministic and growing like a history."""
    return 200 + 60 * round_index, 20


# -- canned responses -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Payload:
    """One canned answer: a JSON body, or SSE events (``events`` set, ``body`` joined)."""

    content_type: str
    body: bytes
    events: tuple[bytes, ...] = ()

    def http(self) -> bytes:
        """The whole HTTP/1.1 response: ``Content-Length`` for JSON, chunked for SSE."""
        if not self.events:
            return (
                b"HTTP/1.1 200 OK\r\ncontent-type: " + self.content_type.encode() + b"\r\n"
                b"content-length: " + str(len(self.body)).encode() + b"\r\n\r\n" + self.body
            )
        parts = [
            b"HTTP/1.1 200 OK\r\ncontent-type: " + self.content_type.encode() + b"\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        ]
        for event in self.events:
            parts.append(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        parts.append(b"0\r\n\r\n")
        return b"".join(parts)


def _json_response(payload: Any) -> Payload:
    return Payload("application/json", json.dumps(payload, separators=(",", ":")).encode())


def _sse_response(events: list[bytes]) -> Payload:
    return Payload("text/event-stream", b"".join(events), tuple(events))


def _data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _event(payload: dict[str, Any]) -> bytes:
    name = str(payload["type"]).encode()
    return b"event: " + name + b"\n" + _data(payload)


def _pieces(text: str, count: int) -> list[str]:
    step = max(1, -(-len(text) // count))
    return [text[i : i + step] for i in range(0, len(text), step)]


def _openai(round_index: int, final: bool, stream: bool) -> Payload:
    prompt, completion = _usage(round_index)
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    ident = f"chatcmpl-bench-{round_index}"
    args = json.dumps(tool_arguments(round_index))
    call = {
        "id": call_id("openai", round_index),
        "type": "function",
        "function": {"name": TOOL_NAME, "arguments": args},
    }
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if final:
            message["content"] = FINAL_TEXT
        else:
            message["tool_calls"] = [call]
        return _json_response(
            {
                "id": ident,
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "stop" if final else "tool_calls",
                    }
                ],
                "usage": usage,
            }
        )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _data(
            {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    events = [chunk({"role": "assistant", "content": ""})]
    if final:
        events += [chunk({"content": piece}) for piece in _pieces(FINAL_TEXT, _TEXT_PIECES)]
        events.append(chunk({}, "stop"))
    else:
        head = {**call, "index": 0, "function": {"name": TOOL_NAME, "arguments": ""}}
        events.append(chunk({"tool_calls": [head]}))
        events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}))
        events.append(chunk({}, "tool_calls"))
    events.append(
        _data(
            {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": MODEL,
                "choices": [],
                "usage": usage,
            }
        )
    )
    events.append(b"data: [DONE]\n\n")
    return _sse_response(events)


def _anthropic(round_index: int, final: bool, stream: bool) -> Payload:
    prompt, completion = _usage(round_index)
    ident = f"msg_bench_{round_index}"
    stop = "end_turn" if final else "tool_use"
    use = {
        "type": "tool_use",
        "id": call_id("anthropic", round_index),
        "name": TOOL_NAME,
        "input": tool_arguments(round_index),
    }
    if not stream:
        content = [{"type": "text", "text": FINAL_TEXT}] if final else [use]
        return _json_response(
            {
                "id": ident,
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            }
        )
    start = {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1},
    }
    events = [_event({"type": "message_start", "message": start})]
    if final:
        events.append(
            _event(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                }
            )
        )
        for piece in _pieces(FINAL_TEXT, _TEXT_PIECES):
            delta = {"type": "text_delta", "text": piece}
            events.append(_event({"type": "content_block_delta", "index": 0, "delta": delta}))
    else:
        block = {**use, "input": {}}
        events.append(_event({"type": "content_block_start", "index": 0, "content_block": block}))
        delta = {"type": "input_json_delta", "partial_json": json.dumps(use["input"])}
        events.append(_event({"type": "content_block_delta", "index": 0, "delta": delta}))
    events.append(_event({"type": "content_block_stop", "index": 0}))
    events.append(
        _event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion},
            }
        )
    )
    events.append(_event({"type": "message_stop"}))
    return _sse_response(events)


class Canned:
    """Encoded responses, built once per (api, round, final, stream) and then reused."""

    def __init__(self) -> None:
        self._payloads: dict[tuple[str, int, bool, bool], Payload] = {}
        self._http: dict[tuple[str, int, bool, bool], bytes] = {}

    def payload(self, api: str, round_index: int, final: bool, stream: bool) -> Payload:
        key = (api, round_index, final, stream)
        found = self._payloads.get(key)
        if found is None:
            build = _anthropic if api == "anthropic" else _openai
            found = self._payloads[key] = build(round_index, final, stream)
        return found

    def get(self, api: str, round_index: int, final: bool, stream: bool) -> bytes:
        """The full HTTP response bytes."""
        key = (api, round_index, final, stream)
        found = self._http.get(key)
        if found is None:
            found = self._http[key] = self.payload(*key).http()
        return found


def parse_route(path: bytes, default_latency_ms: float = 0.0) -> tuple[str, int, float] | None:
    """(api, K, latency ms) of a model path such as ``/k3/v1/chat/completions``."""
    match = _ROUTE.match(path)
    if match is None:
        return None
    api = "anthropic" if match.group(3) == b"messages" else "openai"
    latency = float(match.group(2)) if match.group(2) else default_latency_ms
    return api, int(match.group(1)), latency


def answer_round(api: str, body: bytes) -> tuple[int, bool]:
    """(round index, streamed) of a request body: tool results so far, ``"stream": true``."""
    done = body.count(b'"tool_result"' if api == "anthropic" else b'"tool_call_id"')
    return done, _STREAM.search(body) is not None


# -- the server ---------------------------------------------------------------------------


@dataclass(slots=True)
class ServerState:
    """Counters shared by all connections; read through ``/_bench/stats``."""

    requests: int = 0
    body_bytes: int = 0
    header_bytes: int = 0
    errors: int = 0
    connections: int = 0
    latency_ms: float = 0.0
    bodies: deque[bytes] = field(default_factory=lambda: deque(maxlen=_BODY_RING))
    canned: Canned = field(default_factory=Canned)
    routes: dict[bytes, tuple[str, int, float] | None] = field(default_factory=dict)

    def reset(self) -> None:
        self.requests = self.body_bytes = self.header_bytes = self.errors = 0
        self.connections = 0
        self.bodies.clear()

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "body_bytes": self.body_bytes,
            "header_bytes": self.header_bytes,
            "errors": self.errors,
            "connections": self.connections,
            "cpu_s": time.process_time(),
        }

    def route(self, path: bytes) -> tuple[str, int, float] | None:
        """(api, K, latency ms) of a model path, cached: a benchmark uses a handful."""
        if path in self.routes:
            return self.routes[path]
        found = parse_route(path, self.latency_ms)
        if len(self.routes) < 1024:
            self.routes[path] = found
        return found


def _plain(status: str, payload: Any) -> bytes:
    body = json.dumps(payload).encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: parse head, read body, answer, repeat."""

    __slots__ = ("_buffer", "_close", "_head", "_need", "_state", "_transport")

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._buffer = bytearray()
        self._need: int | None = None
        self._head = b""
        self._close = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._state.connections += 1

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while True:
            if self._need is None:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > _MAX_HEAD:
                        self._fail("431 Request Header Fields Too Large")
                    return
                self._head = bytes(buffer[:end])
                del buffer[: end + 4]
                lowered = self._head.lower()
                self._close = b"\r\nconnection: close" in lowered
                if b"\r\ntransfer-encoding:" in lowered:
                    self._fail("411 Length Required")
                    return
                at = lowered.find(b"\r\ncontent-length:")
                if at < 0:
                    self._need = 0
                else:
                    stop = lowered.find(b"\r\n", at + 2)
                    raw = lowered[at + 17 : stop if stop >= 0 else len(lowered)]
                    self._need = int(raw.strip() or b"0")
            if len(buffer) < self._need:
                return
            body = bytes(buffer[: self._need])
            del buffer[: self._need]
            head, self._need = self._head, None
            self._answer(head, body)
            if self._close:
                return

    def _answer(self, head: bytes, body: bytes) -> None:
        state = self._state
        line_end = head.find(b"\r\n")
        method, _, rest = head[: line_end if line_end >= 0 else len(head)].partition(b" ")
        path = rest.rpartition(b" ")[0]
        route = state.route(path) if method == b"POST" else None
        if route is None:
            self._send(self._control(method, path), 0.0)
            return
        api, rounds, latency = route
        state.requests += 1
        state.body_bytes += len(body)
        state.header_bytes += len(head) + 4
        state.bodies.append(body)
        done, stream = answer_round(api, body)
        if done > rounds:
            state.errors += 1
            self._send(_plain("400 Bad Request", {"error": {"message": "too many rounds"}}), 0)
            return
        self._send(state.canned.get(api, done, done == rounds, stream), latency)

    def _control(self, method: bytes, path: bytes) -> bytes:
        state = self._state
        if path == b"/_bench/stats":
            return _plain("200 OK", state.stats())
        if path == b"/_bench/reset" and method == b"POST":
            state.reset()
            return _plain("200 OK", {"ok": True})
        if path == b"/_bench/bodies":
            return _plain("200 OK", [b.decode() for b in state.bodies])
        state.errors += 1
        return _plain("404 Not Found", {"error": {"message": f"no route {path.decode()!r}"}})

    def _send(self, payload: bytes, latency_ms: float) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if latency_ms > 0:
            asyncio.get_running_loop().call_later(latency_ms / 1000, self._write, payload)
        else:
            self._write(payload)

    def _write(self, payload: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(payload)
        if self._close:
            transport.close()

    def _fail(self, status: str) -> None:
        self._state.errors += 1
        self._close = True
        self._write(_plain(status, {"error": {"message": status}}))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


async def serve(
    host: str = "127.0.0.1", port: int = 0, *, latency_ms: float = 0.0
) -> tuple[asyncio.Server, ServerState]:
    """Start listening; the caller owns the returned server (``close()`` it)."""
    state = ServerState(latency_ms=latency_ms)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Connection(state), host, port, backlog=2048, reuse_address=True
    )
    return server, state


async def _run(args: argparse.Namespace) -> None:
    server, _ = await serve(args.host, args.port, latency_ms=args.latency_ms)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if args.watch_stdin:
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

        async def watch() -> None:
            await reader.read()  # EOF: whoever started us has gone
            stop.set()

        watcher = asyncio.create_task(watch())
    async with server:
        await stop.wait()
    if args.watch_stdin:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.mock_server``: serve until signalled (or stdin closes)."""
    parser = argparse.ArgumentParser(prog="python -m bench.mock_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="default answer delay")
    parser.add_argument(
        "--watch-stdin", action="store_true", help="exit when stdin reaches end of file"
    )
    asyncio.run(_run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
