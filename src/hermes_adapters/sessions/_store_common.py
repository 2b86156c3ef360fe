"""The session-store rules that do not depend on where the sessions are kept.

Why this module exists: the in-memory, SQLite and PostgreSQL stores must refuse the same
keywords, hand back ``model_config`` the way JSON would, merge a config patch the same way
(``None`` deletes a key), space a batch's timestamps the same way, refuse an append to a
session ended by compression, a compaction by someone not holding the lease, a parent
link that makes a cycle and a compression child that is not one, and cut search snippets
alike; the contract suite holds them to it. Each store used to carry its own copy of these
rules. Here they are written once against plain values (ids, end reasons, lock holders)
and against :class:`RowLike`, anything indexable by column name (a ``sqlite3.Row``, a
SQLAlchemy ``RowMapping``).

The two SQL stores also share the ``sessions`` table's columns, so the statement that reads
a session with its prompt and last message time (:data:`SESSION_SELECT`), the lineage node
columns (:data:`NODE_SELECT`), the conversion of such a row to ``SessionInfo`` or a lineage
``Node``, and the columns an upsert, a metadata update, an inheritance or a rotation writes
are here too: plain SQL and row values that both dialects use unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from hermes_adapters.sessions._lineage import COMPRESSION, FORK_MARKERS, Node, inherited_fields
from hermes_core.errors import CompressionInProgress, SessionClosedForAppend, SessionStoreError
from hermes_core.messages import Usage
from hermes_core.ports.sessions import IDENTITY_FIELDS, SessionInfo

__all__ = [
    "CONTEXT_CHARS",
    "CREATE_FIELDS",
    "METADATA_FIELDS",
    "NODE_SELECT",
    "SESSION_SELECT",
    "RowLike",
    "apply_patch",
    "batch_timestamps",
    "check_appendable",
    "check_fields",
    "check_lease",
    "check_no_cycle",
    "check_rotation",
    "config_of",
    "config_patch",
    "dumps",
    "filled_columns",
    "inherited_values",
    "json_config",
    "json_object",
    "lineage_node",
    "marked_snippet",
    "merge_config",
    "metadata_values",
    "prompt_hash",
    "prompt_to_store",
    "rotation_values",
    "session_info",
    "usage_columns",
]

CREATE_FIELDS = frozenset({"model", "model_config", "system_prompt", "parent_session_id"})
"""What ``create_session`` accepts besides ``IDENTITY_FIELDS``."""
METADATA_FIELDS = frozenset({"title", "model", "model_config"})
"""What ``update_metadata`` accepts besides ``IDENTITY_FIELDS``."""
CONTEXT_CHARS = 200
"""How much of each neighbouring message a search hit carries as context."""
_SNIPPET_TOKENS = 40
_BATCH_STEP = 1e-6
_TOKEN = re.compile(r"\S+")


class RowLike(Protocol):
    """A row read by column name: ``sqlite3.Row``, SQLAlchemy's ``RowMapping``."""

    def __getitem__(self, key: str, /) -> Any: ...


# -- arguments --------------------------------------------------------------------------------


def check_fields(fields: Mapping[str, Any], allowed: frozenset[str], operation: str) -> None:
    """Refuse a keyword that is neither in ``allowed`` nor an identity field."""
    unknown = sorted(set(fields) - allowed - set(IDENTITY_FIELDS))
    if unknown:
        raise TypeError(f"{operation}() got unknown field(s): {', '.join(unknown)}")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON round trip of ``value``: what a database will hand back; refuses non-JSON."""
    try:
        copied: dict[str, Any] = json.loads(dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(f"{what} must be JSON-serialisable: {exc}") from exc
    return copied


def json_config(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``model_config`` field as the database will return it, ``None`` when not given."""
    given = fields.get("model_config")
    return json_object(given, "model_config") if given is not None else None


def config_patch(patch: Mapping[str, Any] | None) -> dict[str, Any]:
    """A compaction's ``model_config_patch`` as JSON will return it (``{}`` when empty)."""
    return json_object(patch, "model_config_patch") if patch else {}


# -- model_config -----------------------------------------------------------------------------


def config_of(row: RowLike) -> dict[str, Any]:
    """The ``model_config`` column of a session row, decoded (``{}`` when empty)."""
    raw = row["model_config"]
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise SessionStoreError(
            f"session {row['id']!r} has a model_config that is not JSON: {exc}"
        ) from exc
    return value if isinstance(value, dict) else {}


def apply_patch(config: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``patch`` into ``config`` in place (``None`` deletes a key); return ``config``."""
    for key, value in patch.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def merge_config(row: RowLike, patch: Mapping[str, Any]) -> str:
    """The row's ``model_config`` with ``patch`` merged (``None`` deletes a key), as JSON."""
    return dumps(apply_patch(config_of(row), patch))


# -- rules ------------------------------------------------------------------------------------


def prompt_hash(prompt: str) -> str:
    """The key a system prompt is kept under, once per distinct text."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def batch_timestamps(start: float, count: int) -> list[float]:
    """``count`` timestamps from ``start``, each strictly greater than the one before."""
    stamps: list[float] = []
    now = start
    for _ in range(count):
        stamps.append(now)
        step = now + _BATCH_STEP
        now = step if step > now else math.nextafter(now, math.inf)
    return stamps


def check_appendable(session_id: str, end_reason: str | None, operation: str) -> None:
    """Refuse a write to a session that compression ended: its continuation takes it."""
    if end_reason == COMPRESSION:
        raise SessionClosedForAppend(
            f"{operation}: session {session_id!r} was ended by compression; "
            "write to its continuation (resolve_resume_session_id) instead"
        )


def check_lease(
    session_id: str,
    lock: tuple[str, float] | None,
    holder: str | None,
    now: Callable[[], float],
    operation: str,
) -> None:
    """Refuse a compaction when another holder owns (or has taken) the compression lock.

    ``lock`` is the session's lock as (holder, expiry), expired or not. Without a
    ``holder`` only a live lock refuses (``now`` is read only then); with one, the lock must
    be that holder's, even past its expiry.
    """
    if holder is None:
        if lock is not None and lock[1] >= now():
            raise CompressionInProgress(
                f"{operation}: session {session_id!r} is being compressed by {lock[0]!r}"
            )
        return
    if lock is None or lock[0] != holder:
        owner = f"held by {lock[0]!r}" if lock is not None else "not held"
        raise CompressionInProgress(
            f"{operation}: compression lock of session {session_id!r} is {owner}, not by {holder!r}"
        )


async def check_no_cycle(
    session_id: str,
    parent_id: str,
    operation: str,
    parent_of: Callable[[str], Awaitable[str | None]],
) -> None:
    """Refuse making ``parent_id`` the parent of ``session_id`` when that closes a loop;
    ``parent_of`` gives a session's parent id (``None`` for a root or a missing session)."""
    cursor: str | None = parent_id
    seen: set[str] = set()
    while cursor is not None and cursor not in seen:
        if cursor == session_id:
            raise SessionStoreError(
                f"{operation}: making {parent_id!r} the parent of {session_id!r} "
                "would create a cycle"
            )
        seen.add(cursor)
        cursor = await parent_of(cursor)


def check_rotation(parent_id: str, child_id: str, child_parent: str | None, operation: str) -> None:
    """Refuse a compression child that is empty, is the parent itself, or already continues
    another parent (``child_parent`` is the existing child's parent, if any)."""
    if not child_id or child_id == parent_id:
        raise SessionStoreError(
            f"{operation}: invalid child id {child_id!r} for parent {parent_id!r}"
        )
    if child_parent not in (None, parent_id):
        raise SessionStoreError(
            f"{operation}: session {child_id!r} already exists as a child of {child_parent!r}"
        )


# -- rows of the SQL stores -------------------------------------------------------------------

SESSION_SELECT = (
    "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS prompt_text, "
    "(SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id) AS last_message_at "
    "FROM sessions s LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash"
)
"""Session rows with the columns :func:`session_info` reads on top of the table's own."""
NODE_SELECT = (
    "SELECT id, source, parent_session_id, end_reason, model_config, started_at FROM sessions"
)
"""The columns :func:`lineage_node` reads."""
_USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
)


def usage_columns(usage: Usage, api_calls: int) -> dict[str, int]:
    """The counters ``update_token_counts`` moves, by column name."""
    values = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
        api_calls,
    )
    return dict(zip(_USAGE_COLUMNS, values, strict=True))


def session_info(row: RowLike) -> SessionInfo:
    """A row of :data:`SESSION_SELECT` as the port's ``SessionInfo``."""
    marks = [v for v in (row["last_activity_at"], row["last_message_at"]) if v is not None]
    return SessionInfo(
        id=row["id"],
        source=row["source"],
        started_at=row["started_at"],
        model=row["model"],
        model_config=config_of(row),
        system_prompt=row["prompt_text"],
        parent_session_id=row["parent_session_id"],
        ended_at=row["ended_at"],
        end_reason=row["end_reason"],
        title=row["title"],
        message_count=row["message_count"],
        tool_call_count=row["tool_call_count"],
        api_call_count=row["api_call_count"],
        usage=Usage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_read_tokens=row["cache_read_tokens"],
            cache_write_tokens=row["cache_write_tokens"],
            reasoning_tokens=row["reasoning_tokens"],
        ),
        last_active=max(marks) if marks else row["started_at"],
        identity={name: row[name] for name in IDENTITY_FIELDS if row[name] is not None},
    )


def lineage_node(row: RowLike) -> Node:
    """A row of :data:`NODE_SELECT` (or any session row) as a lineage node."""
    return Node.of(
        row["id"],
        row["source"],
        row["parent_session_id"],
        row["end_reason"],
        config_of(row),
        row["started_at"],
    )


def filled_columns(
    row: RowLike, fields: Mapping[str, Any], config: dict[str, Any] | None
) -> dict[str, Any]:
    """The columns ``create_session`` fills on the session row: only those it lacks (the
    system prompt aside, see :func:`prompt_to_store`)."""
    values: dict[str, Any] = {}
    if row["model"] is None and fields.get("model") is not None:
        values["model"] = fields["model"]
    if config and not config_of(row):
        values["model_config"] = dumps(config)
    for name in IDENTITY_FIELDS:
        if row[name] is None and fields.get(name) is not None:
            values[name] = fields[name]
    parent_id = fields.get("parent_session_id")
    if row["parent_session_id"] is None and parent_id is not None:
        values["parent_session_id"] = parent_id
    return values


def prompt_to_store(row: RowLike, fields: Mapping[str, Any]) -> str | None:
    """The ``system_prompt`` that ``create_session`` must keep for a row without one."""
    prompt: str | None = fields.get("system_prompt")
    has_prompt = row["system_prompt_hash"] is not None or row["system_prompt"] is not None
    return prompt if prompt is not None and not has_prompt else None


def metadata_values(
    row: RowLike, fields: Mapping[str, Any], patch: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The columns ``update_metadata`` sets: the given fields, ``model_config`` patched."""
    values: dict[str, Any] = {
        name: fields[name] for name in ("title", "model", *IDENTITY_FIELDS) if name in fields
    }
    if patch is not None:
        values["model_config"] = merge_config(row, patch)
    return values


def inherited_values(parent: RowLike, child: RowLike) -> dict[str, Any]:
    """The identity columns a child fills from its parent (what it lacks and the parent
    has; the chat identity only under a compression parent)."""
    names = inherited_fields(parent["end_reason"])
    return {n: parent[n] for n in names if child[n] is None and parent[n] is not None}


def rotation_values(parent: RowLike, child: RowLike) -> dict[str, Any]:
    """The columns a compression child takes from its parent row: the link, and the model,
    ``model_config`` (without fork markers) and system prompt it does not have yet."""
    values: dict[str, Any] = {"parent_session_id": parent["id"]}
    if child["model"] is None:
        values["model"] = parent["model"]
    if not config_of(child):
        inherited = {k: v for k, v in config_of(parent).items() if k not in FORK_MARKERS}
        values["model_config"] = dumps(inherited)
    if child["system_prompt_hash"] is None and child["system_prompt"] is None:
        values["system_prompt_hash"] = parent["system_prompt_hash"]
    return values


# -- search snippets --------------------------------------------------------------------------


def marked_snippet(text: str, matches: Sequence[re.Match[str]]) -> str:
    """About 40 tokens of ``text`` around the first (then longest) of ``matches``, which is
    marked ``>>>…<<<``; ``...`` where the text is cut. ``matches`` must not be empty."""
    first = min(matches, key=lambda m: (m.start(), -m.end()))
    start, end = first.start(), first.end()
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    lo_tok = next(i for i, (_, tok_end) in enumerate(tokens) if tok_end > start)
    hi_tok = max(i for i, (tok_start, _) in enumerate(tokens) if tok_start < end)
    width = max(_SNIPPET_TOKENS, hi_tok - lo_tok + 1)
    lo = max(0, lo_tok - (width - (hi_tok - lo_tok + 1)) // 2)
    hi = min(len(tokens), lo + width)
    lo = max(0, hi - width)
    body = (
        text[tokens[lo][0] : start]
        + ">>>"
        + text[start:end]
        + "<<<"
        + text[end : tokens[hi - 1][1]]
    )
    return ("..." if lo > 0 else "") + body + ("..." if hi < len(tokens) else "")
