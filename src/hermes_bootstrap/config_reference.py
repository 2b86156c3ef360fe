"""The configuration reference, generated from the pydantic models.

``docs/configuration.md`` is this module's output; a test regenerates it and fails when
the two differ, so the reference cannot drift from the code that validates the file.
Run ``python -m hermes_bootstrap.config_reference > docs/configuration.md`` to refresh.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from hermes_bootstrap.config import HermesConfig

__all__ = ["render_reference"]

BAR, ESCAPED_BAR = "|", "\\|"
_INTRO = """# Configuration reference

`$HERMES_HOME/config.yaml` (default `~/.hermes/config.yaml`) holds non-secret settings;
secrets go in `$HERMES_HOME/.env` or the environment. Every section is optional.
`${env:NAME}` and `${NAME}` in any string are replaced from the environment, then `.env`.
An invalid value fails when the agent opens, naming the file, the key path, the value and
the rule; unknown keys are logged and ignored.

This page is generated from `hermes_bootstrap/config.py`
(`python -m hermes_bootstrap.config_reference`); a test keeps it in sync.
"""


def _type_name(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "")
    for noise in ("hermes_bootstrap.config.", "<class '", "'>"):
        text = text.replace(noise, "")
    return text


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "(section)"
    else:
        value = field.default
    return json.dumps(value, default=str)


def _constraints(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            bound = getattr(item, name, None)
            if bound is not None:
                parts.append(f"{name} {bound}")
    options = _literal_options(field.annotation)
    if options:
        parts.append("one of " + ", ".join(options))
    return "; ".join(parts)


def _literal_options(annotation: Any) -> list[str]:
    """The allowed strings of a ``Literal`` (possibly inside ``Optional``)."""
    if get_origin(annotation) is Literal:
        return [str(a) for a in get_args(annotation)]
    return [o for arg in get_args(annotation) for o in _literal_options(arg)]


def _section(model: type[BaseModel], prefix: str, out: list[str]) -> None:
    rows = []
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            nested.append((name, annotation))
            continue
        doc = (field.description or "").replace("\n", " ")
        rows.append(
            f"| `{prefix}{name}` | `{_type_name(annotation).replace(BAR, ESCAPED_BAR)}` | "
            f"`{_default(field)}` | "
            f"{_constraints(field)} {doc}".rstrip()
            + " |"
        )
    if rows:
        title = prefix.rstrip(".") or "top level"
        out.append(f"\n## `{title}`\n")
        out.append("| key | type | default | allowed / notes |")
        out.append("|---|---|---|---|")
        out.extend(rows)
    for name, sub in nested:
        _section(sub, f"{prefix}{name}.", out)


def render_reference() -> str:
    out = [_INTRO]
    _section(HermesConfig, "", out)
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render_reference(), end="")
