"""Turning MCP results and errors into tool results the model reads.

Everything here is pure. A server's output reaches the model, and its error text often
echoes request details (headers, URLs with tokens), so error text is scrubbed of secrets
before it goes anywhere. Binary content is summarised rather than inlined: base64 images
would burn the context window and mean nothing to a text model.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

import mcp_types as types

from hermes_core.ports.tools import ToolResult, tool_error

__all__ = ["REDACTED", "binary_size", "content_text", "error_result", "scrub", "to_tool_result"]

REDACTED = "[REDACTED]"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        REDACTED,
    ),
    (re.compile(r"\b(?:ghp|gho|ghs|ghr|ghu)_[A-Za-z0-9]{16,}"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_.\-]{8,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bxox[bpas]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]{4,}"), rf"\1 {REDACTED}"),
    (re.compile(r"(?i)(://[^/\s:@]+:)[^@\s/]+@"), rf"\1{REDACTED}@"),
    # name=value where the name ends in a secret-ish stem; "tokens=1500" survives
    (
        re.compile(
            r"(?i)\b([A-Za-z0-9_\-]*(?:token|key|password|passwd|secret))(\s*=\s*)"
            r"(\"[^\"]*\"|'[^']*'|[^\s&,;\"']+)"
        ),
        rf"\1\2{REDACTED}",
    ),
)


def scrub(text: str) -> str:
    """``text`` with API keys, bearer tokens and ``secret=value`` pairs replaced."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def error_result(message: str) -> ToolResult:
    """An ``{"error": ...}`` result with the message scrubbed."""
    return tool_error(scrub(message))


def binary_size(data: str) -> int:
    """Decoded size of base64 ``data`` (an estimate when it is malformed)."""
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


def content_text(block: Any) -> str:
    """One content block as text: text as is, binary content as a one-line summary."""
    match block:
        case types.TextContent(text=text):
            return text
        case types.ImageContent(mime_type=mime, data=data):
            return f"[image: {mime}, {binary_size(data)} bytes]"
        case types.AudioContent(mime_type=mime, data=data):
            return f"[audio: {mime}, {binary_size(data)} bytes]"
        case types.ResourceLink(uri=uri, name=name, mime_type=mime):
            return f"[resource link: {uri} ({name}{', ' + mime if mime else ''})]"
        case types.EmbeddedResource(resource=resource):
            return resource_text(resource)
    kind = getattr(block, "type", type(block).__name__)
    return f"[{kind} content]"


def resource_text(resource: types.TextResourceContents | types.BlobResourceContents) -> str:
    """A resource's text, or a summary of its binary content."""
    if isinstance(resource, types.TextResourceContents):
        return resource.text
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource: {resource.uri}, {mime}, {binary_size(resource.blob)} bytes]"


def to_tool_result(result: types.CallToolResult) -> ToolResult:
    """A ``tools/call`` result as a tool result.

    Success is ``{"result": text}``; with structured content it is
    ``{"result": text, "structuredContent": obj}`` (or ``{"result": obj}`` when there is
    no text); ``_meta`` is passed through. ``isError`` becomes ``{"error": text}``.
    """
    text = "\n".join(content_text(block) for block in result.content)
    if result.is_error:
        return error_result(text or "the MCP tool reported an error without a message")
    payload: dict[str, Any]
    structured = result.structured_content
    if structured is None:
        payload = {"result": text}
    elif text:
        payload = {"result": text, "structuredContent": structured}
    else:
        payload = {"result": structured}
    if result.meta:
        payload["_meta"] = result.meta
    return ToolResult(json.dumps(payload, ensure_ascii=False, default=str))
