"""Checking tool arguments against a tool's JSON schema, without a schema library.

The core may depend on pydantic and anyio only, and models break schemas in a handful of
simple ways (a missing required key, a string for a number, a value outside an enum), so a
small checker covering the common JSON-schema keywords is enough to tell the model what
to fix. Keywords it does not know are ignored: the tool's own validation still runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["schema_problems"]

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_ok(value: Any, expected: str | list[str]) -> bool:
    names = [expected] if isinstance(expected, str) else list(expected)
    for name in names:
        kinds = _TYPES.get(name)
        if kinds is None:
            return True
        if isinstance(value, bool) and name in {"integer", "number"}:
            continue
        if isinstance(value, kinds):
            return True
    return False


def _check(value: Any, schema: Mapping[str, Any], where: str, out: list[str]) -> None:
    expected = schema.get("type")
    if expected is not None and not _type_ok(value, expected):
        out.append(f"{where} should be {expected}, got {type(value).__name__}")
        return
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where} must be one of {list(schema['enum'])!r}, got {value!r}")
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value:
                out.append(f"missing required argument {where}.{key}".replace("$.", ""))
        for key, sub in value.items():
            if key in props:
                _check(sub, props[key], f"{where}.{key}", out)
            elif schema.get("additionalProperties") is False:
                out.append(f"unexpected argument {where}.{key}".replace("$.", ""))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{where}[{i}]", out)


def schema_problems(schema: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    """Human-readable reasons ``args`` fails ``schema``; empty when it passes."""
    problems: list[str] = []
    _check(dict(args), schema, "$", problems)
    return [p.replace("$.", "").replace("$", "arguments") for p in problems]
