"""Answering what a server asks of us: sampling, elicitation, and its log messages.

A server may ask the host's model to generate text (sampling) and the user to fill in a
form (elicitation). Both spend something the server does not own, the user's tokens and
the user's attention, so both are bounded: sampling by a per-request token cap, a per-minute
rate and a timeout, elicitation by a field limit; and both are refused outright when the
host has no model or no way to ask (a headless agent declines every elicitation).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientRequestContext

from hermes_adapters.mcp.config import SamplingConfig
from hermes_adapters.mcp.results import content_text, scrub
from hermes_core.messages import AssistantMessage, Message, SystemMessage, UserMessage
from hermes_core.ports.interaction import Clarifier
from hermes_core.ports.llm import ChatModel, ModelRequest

__all__ = ["MAX_ELICIT_FIELDS", "ElicitationBridge", "SamplingBridge", "ServerLogForwarder"]

log = logging.getLogger("hermes.mcp")

MAX_ELICIT_FIELDS = 8
"""A form with more fields is declined: one question per field would wear the user out."""

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}
_YES = frozenset({"y", "yes", "true", "1", "on"})
_NO = frozenset({"n", "no", "false", "0", "off"})


class ServerLogForwarder:
    """A logging callback that forwards a server's log notifications to our logger."""

    def __init__(self, server: str) -> None:
        self._server = server

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        data = params.data if isinstance(params.data, str) else json.dumps(params.data)
        source = f"{self._server}/{params.logger}" if params.logger else self._server
        log.log(_LEVELS.get(params.level, logging.INFO), "MCP %s: %s", source, scrub(data))


class SamplingBridge:
    """Serves ``sampling/createMessage`` with the host's :class:`ChatModel`, within limits."""

    def __init__(self, server: str, model: ChatModel, config: SamplingConfig) -> None:
        self._server = server
        self._model = model
        self._config = config
        self._recent: deque[float] = deque()
        self._level = logging.getLevelName(config.log_level.upper())

    async def __call__(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        if params.tools:
            return _refuse("tool use inside sampling is not supported by this client")
        if not self._admit():
            return _refuse(f"sampling rate limit of {self._config.max_rpm} per minute reached")
        try:
            messages = _messages(params)
        except ValueError as exc:
            return _refuse(str(exc))
        max_tokens = min(params.max_tokens, self._config.max_tokens_cap)
        settings: dict[str, Any] = {}
        if params.temperature is not None:
            settings["temperature"] = params.temperature
        if params.stop_sequences:
            settings["stop"] = list(params.stop_sequences)
        model = self._pick_model(params.model_preferences)
        request = ModelRequest(
            messages=tuple(messages), max_tokens=max_tokens, model=model, settings=settings
        )
        log.log(self._level, "MCP %s: sampling request (max_tokens=%d)", self._server, max_tokens)
        try:
            with anyio.fail_after(self._config.timeout):
                response = await self._model.complete(request)
        except TimeoutError:
            return _refuse(
                f"sampling timed out after {self._config.timeout} s", types.INTERNAL_ERROR
            )
        except Exception as exc:
            log.warning("MCP %s: sampling failed: %s", self._server, scrub(str(exc)))
            return _refuse(f"sampling failed: {scrub(type(exc).__name__)}", types.INTERNAL_ERROR)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=response.message.content or ""),
            model=response.model or model or self._model.model_name,
            stop_reason="maxTokens" if response.finish_reason == "length" else "endTurn",
        )

    def _admit(self) -> bool:
        """Sliding one-minute window: at most ``max_rpm`` requests."""
        now = anyio.current_time()
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        if len(self._recent) >= self._config.max_rpm:
            return False
        self._recent.append(now)
        return True

    def _pick_model(self, preferences: types.ModelPreferences | None) -> str | None:
        """The configured model, or a server hint when it is on the ``allowed_models`` list."""
        allowed = self._config.allowed_models
        if preferences is not None and preferences.hints and allowed:
            for hint in preferences.hints:
                if hint.name in allowed:
                    return hint.name
        return self._config.model


def _messages(params: types.CreateMessageRequestParams) -> list[Message]:
    messages: list[Message] = []
    if params.system_prompt:
        messages.append(SystemMessage(content=params.system_prompt))
    for message in params.messages:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        if any(isinstance(b, types.ToolUseContent | types.ToolResultContent) for b in blocks):
            raise ValueError("tool content inside sampling is not supported by this client")
        text = "\n".join(content_text(block) for block in blocks)
        if message.role == "assistant":
            messages.append(AssistantMessage(content=text))
        else:
            messages.append(UserMessage(content=text))
    if not any(isinstance(m, UserMessage) for m in messages):
        raise ValueError("a sampling request needs at least one user message")
    return messages


def _refuse(message: str, code: int = types.INVALID_REQUEST) -> types.ErrorData:
    return types.ErrorData(code=code, message=message)


class ElicitationBridge:
    """Answers ``elicitation/create`` forms by asking the user through the :class:`Clarifier`.

    Each field becomes one question (with choices for booleans and short enums); an empty
    answer to a required field, an answer of the wrong type, a URL-mode request or a form
    too large to ask declines. Without a clarifier every request is declined.
    """

    def __init__(self, server: str, clarifier: Clarifier | None) -> None:
        self._server = server
        self._clarifier = clarifier

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        decline = types.ElicitResult(action="decline")
        if self._clarifier is None:
            log.info("MCP %s: elicitation declined (no way to ask the user)", self._server)
            return decline
        if not isinstance(params, types.ElicitRequestFormParams):
            log.info("MCP %s: URL elicitation declined", self._server)
            return decline
        schema = params.requested_schema
        properties = schema.get("properties") or {}
        if not isinstance(properties, dict) or len(properties) > MAX_ELICIT_FIELDS:
            return decline
        required = set(schema.get("required") or ())
        content: dict[str, str | int | float | bool | list[str] | None] = {}
        for name, field in properties.items():
            spec = field if isinstance(field, dict) else {}
            question, choices = _question(self._server, params.message, name, spec)
            answer = (await self._clarifier(question, choices)).strip()
            if not answer:
                if name in required:
                    return decline
                continue
            try:
                content[name] = _coerce(answer, spec)
            except ValueError:
                return decline
        return types.ElicitResult(action="accept", content=content)


def _question(
    server: str, message: str, name: str, spec: dict[str, Any]
) -> tuple[str, list[str] | None]:
    label = spec.get("title") or name
    detail = f" ({spec['description']})" if spec.get("description") else ""
    question = f"[MCP server {server}] {message}\n{label}{detail}:"
    choices: list[str] | None = None
    if spec.get("type") == "boolean":
        choices = ["yes", "no"]
    elif isinstance(spec.get("enum"), list) and 0 < len(spec["enum"]) <= 4:
        choices = [str(v) for v in spec["enum"]]
    return question, choices


def _coerce(answer: str, spec: dict[str, Any]) -> str | int | float | bool:
    kind = spec.get("type")
    if kind == "boolean":
        lowered = answer.lower()
        if lowered in _YES:
            return True
        if lowered in _NO:
            return False
        raise ValueError(answer)
    if kind == "integer":
        return int(answer)
    if kind == "number":
        return float(answer)
    enum = spec.get("enum")
    if isinstance(enum, list) and enum and answer not in [str(v) for v in enum]:
        raise ValueError(answer)
    return answer
