"""The OpenAI Responses adapter (``api_mode = "codex_responses"``, ``POST /responses``).

The Responses API is item-based and, with ``store: false``, stateless: every turn resends
the whole transcript, including the model's encrypted reasoning items, which must sit
immediately before the item that followed them. The wire rules live in
:mod:`._responses_mapping`, the endpoint, retries and the ``complete``/``stream`` plumbing
in :mod:`._base`; this module holds the model class and the stream assembler, which turns
typed events into deltas and builds the final reply from the same output items a JSON
reply would carry. The request JSON is built and encoded once per call, so retries send
byte-identical bodies.

Example (then used and closed like every :mod:`._base` model)::

    model = OpenAIResponsesModel("gpt-5", api_key=key)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from hermes_adapters.llm._base import StreamAssembler, _HttpChatModel
from hermes_adapters.llm._http import SSEEvent, Transport, error_from_payload
from hermes_adapters.llm._responses_mapping import (
    as_mapping,
    fallback_items,
    incomplete_reason,
    message_text,
    parse_response,
    protocol_error,
    raise_for_status,
    reasoning_text_of,
    response_from_items,
    responses_body,
    usage_from_responses,
)
from hermes_core.errors import IncompleteStream
from hermes_core.ports.llm import (
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)

__all__ = ["OpenAIResponsesModel", "ResponsesStreamAssembler"]

_TERMINAL = {"response.completed", "response.incomplete"}
_KIND_OF_DELTA = {
    "response.output_text.delta": "message",
    "response.refusal.delta": "message",
    "response.function_call_arguments.delta": "function_call",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
}
_SEPARATOR = "\n\n"


class OpenAIResponsesModel(_HttpChatModel):
    """A :class:`hermes_core.ports.llm.ChatModel` over ``POST {base_url}/responses``.

    Args:
        model: the model name sent when a request does not name one.
        base_url: the API root, ending before ``/responses``.
        api_key: sent as ``Authorization: Bearer`` to ``base_url``'s host only.
        client: an ``httpx.AsyncClient`` to borrow (its owner closes it); by default the
            model creates and owns one.
        provider: the name used in errors.
        headers: extra headers on every request.
        max_retries: retries after the first attempt, per WIRE.md §2.4.
        backoff: ``(base, cap)`` seconds of the exponential backoff.
        store: let the server keep responses. Off by default: Hermes owns the transcript,
            so reasoning travels back encrypted instead of by id.
        encrypted_reasoning: ask for ``reasoning.encrypted_content`` (needed to replay
            reasoning when ``store`` is off); switch off for models without reasoning,
            which reject the ``include``.
        timeout: read/connect timeout of the owned client.
        transport: ``"aiohttp"`` or ``"httpx"``: the wire the model opens when no
            ``client`` is given; default ``$HERMES_HTTP_TRANSPORT``, else aiohttp.
    """

    _api_mode = "codex_responses"
    _path = "responses"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        provider: str = "openai",
        headers: Mapping[str, str] | None = None,
        max_retries: int = 2,
        backoff: tuple[float, float] = (0.5, 8.0),
        store: bool = False,
        encrypted_reasoning: bool = True,
        timeout: httpx.Timeout | float | None = None,
        transport: Transport | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            provider=provider,
            headers=headers,
            max_retries=max_retries,
            backoff=backoff,
            timeout=timeout,
            transport=transport,
        )
        self._store = store
        self._encrypted_reasoning = encrypted_reasoning

    def build_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON this model would send for ``request``; public so hosts can inspect it."""
        return responses_body(
            request,
            model=self._model,
            stream=stream,
            store=self._store,
            encrypted_reasoning=self._encrypted_reasoning,
        )

    def _parse(self, data: Any) -> ModelResponse:
        """Raises the mapped error of an error body or a ``failed``/``cancelled`` response."""
        return parse_response(data, provider=self._provider)

    def _assembler(self) -> StreamAssembler:
        """Ends on ``response.completed`` (or ``response.incomplete``); ``error`` and
        ``response.failed`` events raise mapped."""
        return ResponsesStreamAssembler(provider=self._provider)


# -- stream assembly --------------------------------------------------------------------


def _error_of(payload: Mapping[str, Any]) -> Any:
    """The error object of an ``error`` event, flat (``code``/``message``) or nested."""
    nested = payload.get("error")
    if isinstance(nested, Mapping):
        return nested
    return {k: payload[k] for k in ("message", "code", "param") if k in payload}


def _part(item: dict[str, Any], field: str, index: Any, kind: str) -> dict[str, Any]:
    """The ``index``-th part of ``item[field]``, created (as ``kind``) when missing."""
    parts = item.get(field)
    if not isinstance(parts, list):
        parts = item[field] = []
    position = index if isinstance(index, int) and index >= 0 else max(len(parts) - 1, 0)
    while len(parts) <= position:
        parts.append({"type": kind, "refusal": ""} if kind == "refusal" else {"type": kind})
    part: dict[str, Any] = parts[position]
    return part


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class ResponsesStreamAssembler:
    """Turns typed Responses events into deltas and, at the end, one response.

    Items are keyed by ``item_id``; ``output_index`` is used only when a server omits the
    id, because translators have been seen to send every item at index 0 (WIRE.md §4
    items 6-7). ``output_item.done`` is authoritative: text or arguments it holds beyond
    what the deltas said are emitted as one more delta, so the deltas always add up to the
    final reply. Feed every SSE event to :meth:`feed`; :attr:`done` turns true on
    ``response.completed``/``response.incomplete``, and :meth:`finish` builds the reply.
    """

    def __init__(self, *, provider: str) -> None:
        self.provider = provider
        self.done = False
        self._items: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []
        self._by_index: dict[int, str] = {}
        self._calls: dict[str, int] = {}
        self._named: set[str] = set()
        self._streamed: dict[str, str] = {}
        self._reasoning_part: tuple[str, str, int] | None = None
        self._final: Mapping[str, Any] = {}
        self._terminal: str | None = None
        self._last_sequence = -1
        self._events = 0
        self._model: str | None = None

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """Deltas carried by one SSE event.

        Raises:
            ModelError: an ``error`` or ``response.failed`` event (mapped).
            IncompleteStream: the event was cut off mid-payload.
            ModelProtocolError: the payload is not a JSON object.
        """
        data = event.data.strip()
        if not data or data == "[DONE]":  # some proxies add it; it ends nothing here
            return []
        try:
            payload = json.loads(data)
        except ValueError as exc:
            if not event.complete:
                raise IncompleteStream(
                    f"{self.provider}: the stream was cut off inside an event",
                    provider=self.provider,
                ) from exc
            raise protocol_error(
                self.provider, f"a stream event is not JSON: {data[:200]!r}"
            ) from exc
        if not isinstance(payload, Mapping):
            raise protocol_error(self.provider, "a stream event is not a JSON object", payload)
        return self.feed_event(payload, event.event)

    def feed_event(self, payload: Mapping[str, Any], name: str | None = None) -> list[StreamEvent]:
        """Deltas of one parsed event; the type comes from the payload, else the SSE name."""
        kind = payload.get("type") or name
        sequence = payload.get("sequence_number")
        if isinstance(sequence, int) and not isinstance(sequence, bool):
            if sequence <= self._last_sequence:
                return []  # delivered twice (a resumed stream): already applied
            self._last_sequence = sequence
        self._events += 1
        if self.done:
            return []
        if kind == "error":
            raise error_from_payload(_error_of(payload), provider=self.provider)
        response = as_mapping(payload.get("response"))
        self._model = _str(response.get("model")) or self._model
        if kind == "response.failed":
            raise_for_status({**response, "status": "failed"}, self.provider)
        if kind in _TERMINAL:
            self._final, self._terminal, self.done = response, str(kind), True
            return []
        if kind == "response.output_item.added":
            return self._added(payload)
        if kind == "response.output_item.done":
            item = as_mapping(payload.get("item"))
            key = self._key({**payload, "item_id": item.get("id")}, str(item.get("type")))
            return self._reconcile(key, item)
        if kind == "response.function_call_arguments.done":
            key = self._key(payload, "function_call")
            return self._reconcile(key, {**self._items[key], "arguments": payload.get("arguments")})
        if isinstance(kind, str) and kind in _KIND_OF_DELTA:
            return self._delta(kind, payload)
        return []

    # item bookkeeping

    def _register(self, key: str, item: Mapping[str, Any], output_index: Any) -> None:
        if key not in self._items:
            self._order.append(key)
            self._items[key] = dict(item)
            if item.get("type") == "function_call":
                self._calls[key] = len(self._calls)
        if isinstance(output_index, int):
            self._by_index[output_index] = key

    def _key(self, payload: Mapping[str, Any], kind: str) -> str:
        """The item an event belongs to, created on the fly if no ``added`` announced it."""
        item_id = _str(payload.get("item_id"))
        index = payload.get("output_index")
        if item_id is not None and item_id in self._items:
            return item_id
        known = self._by_index.get(index) if isinstance(index, int) else None
        if known is not None and (item_id is None or not self._items[known].get("id")):
            return known  # by position: no id here, or the item was announced without one
        key = item_id or f"#{index}"
        item: dict[str, Any] = {"type": kind}
        if item_id is not None:
            item["id"] = item_id
        if kind == "message":
            item.update(role="assistant", content=[])
        elif kind == "reasoning":
            item["summary"] = []
        self._register(key, item, index)
        return key

    def _added(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        item = as_mapping(payload.get("item"))
        index = payload.get("output_index")
        key = _str(item.get("id")) or f"#{index}"
        if key in self._items:
            return []
        self._register(key, item, index)
        if item.get("type") != "function_call":
            return []
        arguments = _str(item.get("arguments")) or ""
        self._streamed[key] = arguments
        name = _str(item.get("name"))
        if name is not None:
            self._named.add(key)
        return [ToolCallDelta(self._calls[key], _str(item.get("call_id")), name, arguments)]

    # deltas

    def _delta(self, kind: str, payload: Mapping[str, Any]) -> list[StreamEvent]:
        key = self._key(payload, _KIND_OF_DELTA[kind])
        item = self._items[key]
        delta = payload.get("delta")
        delta = delta if isinstance(delta, str) else ""
        if kind == "response.function_call_arguments.delta":
            if key not in self._calls:  # an item announced with another type: skip it
                return []
            item["arguments"] = str(item.get("arguments") or "") + delta
            self._streamed[key] = self._streamed.get(key, "") + delta
            return [ToolCallDelta(self._calls[key], None, None, delta)] if delta else []
        if kind == "response.refusal.delta":
            part = _part(item, "content", payload.get("content_index"), "refusal")
            part["refusal"] = str(part.get("refusal") or "") + delta
            return []
        if kind == "response.output_text.delta":
            part = _part(item, "content", payload.get("content_index"), "output_text")
            part["text"] = str(part.get("text") or "") + delta
            self._streamed[key] = self._streamed.get(key, "") + delta
            return [TextDelta(delta)] if delta else []
        summary = kind == "response.reasoning_summary_text.delta"
        field, index_key = ("summary", "summary_index") if summary else ("content", "content_index")
        part = _part(
            item, field, payload.get(index_key), "summary_text" if summary else "reasoning_text"
        )
        part["text"] = str(part.get("text") or "") + delta
        if not delta:
            return []
        index = payload.get(index_key)
        where = (key, field, index if isinstance(index, int) else 0)
        separator = ""
        if self._reasoning_part is not None and where != self._reasoning_part:
            separator = _SEPARATOR  # the final reasoning joins parts and items this way
        self._reasoning_part = where
        if self._streamed.get(key):
            self._streamed[key] += separator + delta
        else:  # a separator before an item's first part belongs to the items' join
            self._streamed[key] = delta
        return [ReasoningDelta(separator + delta)]

    def _reconcile(self, key: str, final: Mapping[str, Any]) -> list[StreamEvent]:
        """Adopt the finished item; emit whatever it holds that no delta carried."""
        self._items[key] = dict(final) if final.get("type") else {**self._items[key], **final}
        item = self._items[key]
        streamed = self._streamed.get(key, "")
        kind = item.get("type")
        if kind == "function_call" and key in self._calls:
            arguments = _str(item.get("arguments")) or ""
            suffix = arguments[len(streamed) :] if arguments.startswith(streamed) else ""
            self._streamed[key] = streamed + suffix
            name = _str(item.get("name")) if key not in self._named else None
            if name is not None:
                self._named.add(key)
            elif not suffix:
                return []
            call_id = _str(item.get("call_id")) if name is not None else None
            return [ToolCallDelta(self._calls[key], call_id, name, suffix)]
        if kind == "message":
            text = message_text([item], "output_text")
            if text.startswith(streamed) and len(text) > len(streamed):
                self._streamed[key] = text
                return [TextDelta(text[len(streamed) :])]
        elif kind == "reasoning":
            text = reasoning_text_of(item)
            if text.startswith(streamed) and len(text) > len(streamed):
                separator = _SEPARATOR if not streamed and self._reasoning_part else ""
                self._streamed[key] = text
                self._reasoning_part = (key, "item", -1)
                return [ReasoningDelta(separator + text[len(streamed) :])]
        return []

    def finish(self) -> ModelResponse:
        """The assembled response.

        Raises:
            IncompleteStream: neither ``response.completed`` nor ``response.incomplete``
                arrived.
        """
        if not self.done:
            raise IncompleteStream(
                f"{self.provider}: the stream ended after {self._events} event(s) without "
                "response.completed; the reply is incomplete",
                provider=self.provider,
            )
        response = self._final
        items: list[Mapping[str, Any]] = [self._items[k] for k in self._order]
        if not items:
            output = response.get("output")
            listed = output if isinstance(output, list) else []
            items = [i for i in listed if isinstance(i, Mapping)]
            items = items or list(fallback_items(response))
        default = "incomplete" if self._terminal == "response.incomplete" else "completed"
        return response_from_items(
            items,
            status=_str(response.get("status")) or default,
            incomplete_reason=incomplete_reason(response),
            usage=usage_from_responses(response.get("usage")),
            model=self._model,
        )
