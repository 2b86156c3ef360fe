"""Names and schemas of MCP tools as the model sees them.

Server and tool names come from configuration and from the server, so neither can be
trusted to be a valid function name: each part is sanitised (``[^A-Za-z0-9_]`` becomes
``_``) and joined as ``mcp__<server>__<tool>``. Sanitising can make two different names
equal (``a.b`` and ``a-b``); then *all* of them are skipped, with a logged reason, because
picking one would route the model's calls to a tool it did not mean.

Servers also publish JSON Schemas that providers reject (no ``type``, ``$schema`` keys,
``required`` naming absent properties), so :func:`normalize_schema` repairs the shape.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_NAME_LENGTH",
    "NameAssignment",
    "assign_names",
    "normalize_schema",
    "registered_name",
    "sanitize",
]

log = logging.getLogger("hermes.mcp")

MAX_NAME_LENGTH = 64
"""The longest function name OpenAI-style providers accept."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_DROPPED_KEYWORDS = frozenset({"$schema", "$id", "$comment"})
_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})


def sanitize(part: str) -> str:
    """``part`` with every character outside ``[A-Za-z0-9_]`` replaced by ``_``."""
    return _UNSAFE.sub("_", part)


def registered_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, sanitised, at most :data:`MAX_NAME_LENGTH` characters.

    A longer name keeps its head and gains a short hash of the full name, so it stays
    stable across runs and distinct from its neighbours.
    """
    name = f"mcp__{sanitize(server)}__{sanitize(tool)}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME_LENGTH - 9]}_{digest}"


@dataclass(frozen=True, slots=True)
class NameAssignment:
    """The outcome of :func:`assign_names`.

    Attributes:
        names: registered name -> the server's own name, for the tools that are kept.
        skipped: (server's name, reason) for every tool that was dropped.
    """

    names: dict[str, str]
    skipped: tuple[tuple[str, str], ...]


def assign_names(server: str, tool_names: Iterable[str]) -> NameAssignment:
    """Map ``tool_names`` to registered names, skipping every group that collides."""
    groups: dict[str, list[str]] = {}
    for tool in tool_names:
        groups.setdefault(registered_name(server, tool), []).append(tool)
    names: dict[str, str] = {}
    skipped: list[tuple[str, str]] = []
    for registered, originals in groups.items():
        if len(originals) == 1:
            names[registered] = originals[0]
            continue
        reason = (
            f"tools {sorted(originals)!r} of MCP server {server!r} all map to {registered!r}; "
            "all of them are skipped"
        )
        log.warning("%s", reason)
        skipped.extend((original, reason) for original in originals)
    return NameAssignment(names, tuple(skipped))


def normalize_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A provider-safe copy of a tool's input schema.

    The top level is always ``{"type": "object", "properties": {...}}``; ``required``
    keeps only names that exist in ``properties``; ``$schema``/``$id``/``$comment`` are
    dropped at every depth (several providers reject them); everything else is kept.
    """
    cleaned = _strip(dict(schema or {}))
    assert isinstance(cleaned, dict)
    cleaned["type"] = "object"
    properties = cleaned.get("properties")
    if not isinstance(properties, dict):
        properties = {}
    cleaned["properties"] = properties
    required = cleaned.get("required")
    if isinstance(required, list):
        kept = [r for r in required if isinstance(r, str) and r in properties]
        if kept:
            cleaned["required"] = kept
        else:
            cleaned.pop("required")
    elif required is not None:
        cleaned.pop("required")
    return cleaned


def _strip(value: Any, *, names: bool = False) -> Any:
    """Drop the unsupported keywords; ``names`` marks a mapping of property names, whose
    keys are data (a property may well be called ``$id``)."""
    if isinstance(value, Mapping):
        return {
            k: _strip(v, names=k in _NAME_MAPS and not names)
            for k, v in value.items()
            if names or k not in _DROPPED_KEYWORDS
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value
