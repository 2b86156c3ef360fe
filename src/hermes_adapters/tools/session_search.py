"""The ``session_search`` tool: recall earlier conversations from the session store.

Users expect the agent to remember what they said last week without repeating it, and the
transcripts are already in the :class:`~hermes_core.ports.sessions.SessionStore` the agent
hands tools as ``ctx.service("sessions")``. The tool has four shapes, chosen by which
arguments are given, so the model can narrow down step by step:

* **discovery** (``query``): full-text hits grouped by session, a few snippets each;
* **scroll** (``session_id`` + ``around_message_id``): the messages around one hit;
* **read** (``session_id`` alone): one session's transcript;
* **browse** (no arguments): the most recent sessions, to see what exists.

The current conversation (and the compression ancestors it continues) is left out of
discovery and browse: the model already has it, and echoing it back only wastes context.
Every answer is bounded by ``max_chars``: whole items are dropped first so the JSON stays
valid, and a hard cut with a visible marker is the last resort.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hermes_adapters.tools._common import BadInput, int_arg
from hermes_core.errors import SessionStoreError
from hermes_core.messages import AssistantMessage, ToolMessage, text_of
from hermes_core.ports.sessions import SearchHit, SessionInfo, SessionStore, StoredMessage
from hermes_core.ports.tools import ToolContext, ToolResult, ToolSpec, tool_error

__all__ = ["DEFAULT_MAX_CHARS", "SessionSearchTool"]

DEFAULT_MAX_CHARS = 8000
MAX_SESSIONS = 10
DEFAULT_SESSIONS = 3
DEFAULT_BROWSE = 10
DEFAULT_WINDOW = 5
MAX_WINDOW = 25
ROLES: tuple[str, ...] = ("user", "assistant", "tool", "system")

_SNIPPETS_PER_SESSION = 3
_PAGE = 50
_MAX_PAGES = 6
"""Discovery reads at most this many pages of hits looking for ``limit`` other sessions."""
_MAX_LINEAGE = 32
_MESSAGE_CHARS = 1500
_CONTEXT_CHARS = 300
_PREVIEW_CHARS = 160
_UNAVAILABLE = (
    "session_search is not available: this agent has no session store attached "
    "(create the Agent with sessions=...)."
)


def _spec(max_chars: int) -> ToolSpec:
    return ToolSpec(
        name="session_search",
        toolset="session_search",
        parallel_safe=True,
        max_result_chars=max_chars + 256,
        description=(
            "Search and read your earlier conversations with the user (not the current "
            "one). With `query`: matching snippets grouped by session (message ids included). "
            "With `session_id` and `around_message_id`: the messages around that id. With "
            "`session_id` alone: that session's transcript. With no arguments: recent "
            "sessions. Use it before asking the user to repeat something."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": 'Words that must all appear; "quoted phrase" for exact text.',
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SESSIONS,
                    "description": "Sessions to return (discovery default 3, browse 10).",
                },
                "sort": {"type": "string", "enum": ["newest", "oldest"]},
                "detail": {
                    "type": "string",
                    "enum": ["adaptive", "full"],
                    "description": "full: neighbouring messages with every snippet.",
                },
                "session_id": {"type": "string"},
                "around_message_id": {"type": "integer", "minimum": 1},
                "window": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_WINDOW,
                    "description": "Messages on each side of around_message_id (default 5).",
                },
                "role_filter": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(ROLES)},
                    "description": "Only messages with these roles.",
                },
            },
        },
    )


# -- argument parsing --------------------------------------------------------------------


def _opt_str(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"argument {key!r} must be a string, got {type(value).__name__}")
    return value.strip() or None


def _choice(args: dict[str, Any], key: str, choices: tuple[str, ...]) -> str | None:
    value = _opt_str(args, key)
    if value is not None and value not in choices:
        raise BadInput(f"argument {key!r} must be one of {', '.join(choices)}; got {value!r}")
    return value


def _roles(args: dict[str, Any]) -> list[str] | None:
    """A list of roles; a comma-separated string is accepted because models send one."""
    value = args.get("role_filter")
    if value is None or value == "" or value == []:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise BadInput("`role_filter` must be a list of roles such as ['user', 'assistant']")
    roles = [i.strip() for i in items if i.strip()]
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise BadInput(f"unknown role(s) {unknown}; use {', '.join(ROLES)}")
    return roles or None


# -- rendering ---------------------------------------------------------------------------


def _when(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat(timespec="seconds")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def _message(row: StoredMessage, *, anchor: int | None = None) -> dict[str, Any]:
    message = row.message
    item: dict[str, Any] = {
        "id": row.id,
        "role": message.role,
        "timestamp": _when(row.timestamp),
        "content": _clip(text_of(message.content), _MESSAGE_CHARS),
    }
    if isinstance(message, AssistantMessage) and message.tool_calls:
        item["tool_calls"] = [call.name for call in message.tool_calls]
    if isinstance(message, ToolMessage) and message.name:
        item["tool_name"] = message.name
    if anchor is not None and row.id == anchor:
        item["anchor"] = True
    return item


def _session_head(session_id: str, info: SessionInfo | None) -> dict[str, Any]:
    """Who a session was: empty fields are left out, since every char costs context."""
    head: dict[str, Any] = {"session_id": session_id}
    if info is not None:
        head |= {
            "title": info.title,
            "source": info.source,
            "started_at": _when(info.started_at),
            "model": info.model,
        }
    return {key: value for key, value in head.items() if value is not None}


def _hit(hit: SearchHit, *, with_context: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "message_id": hit.id,
        "role": hit.role,
        "timestamp": _when(hit.timestamp),
        "snippet": hit.snippet,
    }
    if hit.tool_name:
        item["tool_name"] = hit.tool_name
    if with_context and hit.context:
        item["context"] = [
            {
                "role": str(c.get("role", "")),
                "content": _clip(str(c.get("content", "")), _CONTEXT_CHARS),
            }
            for c in hit.context
        ]
    return item


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _bounded(payload: dict[str, Any], key: str, max_chars: int, *, keep_tail: bool = False) -> str:
    """``payload`` as JSON of at most ``max_chars``, dropping whole ``payload[key]`` items.

    Items are dropped from the end (or the start with ``keep_tail``) so what remains is
    still valid JSON the model can parse; a hard cut with a marker is the last resort.
    """
    items: list[Any] = payload[key]
    text = _dump(payload)
    if len(text) <= max_chars:
        return text
    shell = payload | {key: [], "truncated": True, "omitted": len(items)}
    budget = max_chars - len(_dump(shell)) - 16
    kept: list[Any] = []
    used = 0
    for item in reversed(items) if keep_tail else items:
        size = len(_dump(item)) + 2
        if used + size > budget:
            break
        kept.append(item)
        used += size
    if keep_tail:
        kept.reverse()
    text = _dump(payload | {key: kept, "truncated": True, "omitted": len(items) - len(kept)})
    if len(text) > max_chars:
        marker = f"\n...[session_search output truncated at {max_chars} chars]"
        text = text[: max(0, max_chars - len(marker))] + marker
    return text


# -- the tool ----------------------------------------------------------------------------


class SessionSearchTool:
    """Searches, reads and scrolls the transcripts in the agent's session store.

    Holds no state besides its output bound, so one instance can serve many agents; the
    store and the current session come from each call's :class:`ToolContext`.
    """

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        if max_chars < 500:
            raise ValueError("max_chars below 500 leaves no room for a useful answer")
        self.max_chars = max_chars
        self._spec = _spec(max_chars)

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def available(self) -> bool:
        """Always listed; a call without a store explains itself instead."""
        return True

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not isinstance(args, dict):
            return tool_error("arguments must be a JSON object")
        try:
            return ToolResult(await self._run(args, ctx))
        except BadInput as exc:
            return tool_error(str(exc), **exc.extra)
        except SessionStoreError as exc:
            return tool_error(f"the session store failed: {exc}")

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        query = _opt_str(args, "query")
        session_id = _opt_str(args, "session_id")
        sort = _choice(args, "sort", ("newest", "oldest"))
        detail = _choice(args, "detail", ("adaptive", "full")) or "adaptive"
        roles = _roles(args)
        around = int_arg(args, "around_message_id", 0, lo=1, hi=2**62) or None
        window = int_arg(args, "window", DEFAULT_WINDOW, lo=1, hi=MAX_WINDOW)
        limit = int_arg(args, "limit", 0, lo=1, hi=MAX_SESSIONS) or None
        if around is not None and session_id is None:
            raise BadInput("`around_message_id` needs the `session_id` it belongs to")
        store = ctx.service("sessions")
        if store is None:
            raise BadInput(_UNAVAILABLE)
        if around is not None and session_id is not None:
            return await self._scroll(store, session_id, around, window, roles)
        if query is not None:
            excluded = await _lineage(store, ctx.session_id)
            return await self._discover(
                store, query, limit or DEFAULT_SESSIONS, sort, roles, detail, session_id, excluded
            )
        if session_id is not None:
            return await self._read(store, session_id, sort, roles)
        excluded = await _lineage(store, ctx.session_id)
        return await self._browse(store, limit or DEFAULT_BROWSE, sort, excluded)

    async def _discover(
        self,
        store: SessionStore,
        query: str,
        limit: int,
        sort: str | None,
        roles: list[str] | None,
        detail: str,
        scope: str | None,
        excluded: set[str],
    ) -> str:
        if scope is not None:
            scope = await _resolve(store, scope)
        grouped: dict[str, list[SearchHit]] = {}
        for page in range(_MAX_PAGES):
            hits = await store.search_messages(
                query,
                role_filter=roles,
                limit=_PAGE,
                offset=page * _PAGE,
                sort="oldest" if sort == "oldest" else "newest",
            )
            for hit in hits:
                # an explicit scope is searched even when it is the current session
                in_scope = hit.session_id == scope if scope else hit.session_id not in excluded
                if not in_scope:
                    continue
                if hit.session_id in grouped or len(grouped) < limit:
                    grouped.setdefault(hit.session_id, []).append(hit)
            if len(hits) < _PAGE or len(grouped) >= limit:
                break
        sessions: list[dict[str, Any]] = []
        for sid, hits in grouped.items():
            entry = _session_head(sid, await store.get_session(sid))
            entry["matches"] = len(hits)
            entry["snippets"] = [
                _hit(hit, with_context=detail == "full" or index == 0)
                for index, hit in enumerate(hits[:_SNIPPETS_PER_SESSION])
            ]
            sessions.append(entry)
        payload: dict[str, Any] = {"mode": "discovery", "query": query, "count": len(sessions)}
        if sessions:
            payload["hint"] = (
                "Scroll around a hit with session_search(session_id=..., around_message_id=...)"
                " or read a whole session with session_search(session_id=...)."
            )
        else:
            payload["message"] = f"No earlier sessions mention {query!r}."
        payload["sessions"] = sessions
        return _bounded(payload, "sessions", self.max_chars)

    async def _read(
        self, store: SessionStore, session_id: str, sort: str | None, roles: list[str] | None
    ) -> str:
        sid = await _resolve(store, session_id)
        rows = await store.get_messages(sid)
        messages = [_message(r) for r in rows if roles is None or r.message.role in roles]
        payload = {"mode": "read"} | _session_head(sid, await store.get_session(sid))
        payload |= {
            "message_count": len(messages),
            "messages": messages,
        }
        return _bounded(payload, "messages", self.max_chars, keep_tail=sort == "newest")

    async def _scroll(
        self,
        store: SessionStore,
        session_id: str,
        around: int,
        window: int,
        roles: list[str] | None,
    ) -> str:
        sid = await _resolve(store, session_id)
        rows = [
            r
            for r in await store.get_messages(sid, include_inactive=True)
            if (r.active or r.compacted)
            and (roles is None or r.message.role in roles or r.id == around)
        ]
        index = next((i for i, r in enumerate(rows) if r.id == around), None)
        if index is None:
            raise BadInput(f"message {around} is not in session {sid!r}")
        start, stop = max(0, index - window), index + window + 1
        payload = {"mode": "scroll"} | _session_head(sid, await store.get_session(sid))
        payload |= {
            "around_message_id": around,
            "has_earlier": start > 0,
            "has_later": stop < len(rows),
            "messages": [_message(r, anchor=around) for r in rows[start:stop]],
        }
        return _bounded(payload, "messages", self.max_chars)

    async def _browse(
        self, store: SessionStore, limit: int, sort: str | None, excluded: set[str]
    ) -> str:
        infos = [
            info
            for info in await store.search_sessions(limit=limit + len(excluded))
            if info.id not in excluded
        ][:limit]
        if sort == "oldest":
            infos.reverse()
        sessions: list[dict[str, Any]] = []
        for info in infos:
            entry = _session_head(info.id, info) | {
                "last_active": _when(info.last_active),
                "message_count": info.message_count,
            }
            preview = await _preview(store, info.id)
            if preview:
                entry["preview"] = preview
            sessions.append(entry)
        payload: dict[str, Any] = {"mode": "browse", "count": len(sessions), "sessions": sessions}
        return _bounded(payload, "sessions", self.max_chars)

    def __repr__(self) -> str:
        return f"SessionSearchTool(max_chars={self.max_chars})"


async def _resolve(store: SessionStore, session_id: str) -> str:
    """The full id for an id or unique prefix; an unknown one is the model's to fix."""
    resolved = await store.resolve_session_id(session_id)
    if resolved is None:
        raise BadInput(
            f"no session {session_id!r}; find ids with session_search(query=...) or no arguments"
        )
    return resolved


async def _lineage(store: SessionStore, current: str | None) -> set[str]:
    """The current session and the compression ancestors it continues: one conversation."""
    if not current:
        return set()
    excluded = {current}
    session_id = current
    for _ in range(_MAX_LINEAGE):
        info = await store.get_session(session_id)
        if info is None or info.parent_session_id is None:
            break
        parent = await store.get_session(info.parent_session_id)
        if parent is None or parent.end_reason != "compression" or parent.id in excluded:
            break
        excluded.add(parent.id)
        session_id = parent.id
    return excluded


async def _preview(store: SessionStore, session_id: str) -> str | None:
    """The session's first user message, so a browse shows what each one was about."""
    for row in await store.get_messages(session_id, limit=8):
        if row.message.role == "user":
            text = " ".join(text_of(row.message.content).split())
            return _clip(text, _PREVIEW_CHARS) if text else None
    return None
