"""The in-memory store's tables: session, message and lock records, and their row rules.

Why this module exists: the fake keeps what the SQL stores keep in tables (sessions,
messages as the JSON of their dict codec, one row per system prompt, compression locks)
as dataclasses in dicts, plus the row-level rules the SQL stores run as statements: the
next row id, inserting, recounting, keeping prompts once and collecting unused ones,
inheritance from a parent, the lineage view and the cascading delete. They live here so
``memory.py`` keeps to the port's methods, as ``sqlite.py`` and ``postgres.py`` do, and so
the search (``_memory_search``) and compression (``_memory_compaction``) parts read the
same tables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_adapters.sessions import _lineage
from hermes_adapters.sessions._lineage import Node
from hermes_adapters.sessions._store_common import (
    batch_timestamps,
    check_no_cycle,
    json_object,
    prompt_hash,
)
from hermes_core.errors import SessionNotFound, SessionStoreError
from hermes_core.messages import (
    AssistantMessage,
    Message,
    ToolMessage,
    Usage,
    message_from_dict,
    message_to_dict,
    text_of,
)
from hermes_core.ports.sessions import SessionInfo

__all__ = [
    "Encoded",
    "Lock",
    "Nodes",
    "Row",
    "Session",
    "Shared",
    "decode",
    "encode",
    "node",
]


@dataclass(slots=True)
class Session:
    id: str
    source: str
    started_at: float
    model: str | None = None
    model_config: dict[str, Any] = field(default_factory=dict)
    prompt_hash: str | None = None
    parent_session_id: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    title: str | None = None
    message_count: int = 0
    tool_call_count: int = 0
    api_call_count: int = 0
    usage: Usage = field(default_factory=Usage)
    activity_at: float | None = None
    identity: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Row:
    id: int
    session_id: str
    raw: str
    """The message's dict codec as JSON: what a SQL store would hold."""
    role: str
    text: str
    """Searchable text: content, tool name, tool-call names and arguments."""
    content_text: str
    tool_name: str | None
    tool_calls: int
    timestamp: float
    token_count: int | None = None
    active: bool = True
    compacted: bool = False
    origin_id: int | None = None
    """For a row re-cloned by ``archive_and_compact``: the id of the archived original."""


@dataclass(slots=True)
class Lock:
    holder: str
    acquired_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Encoded:
    raw: str
    role: str
    text: str
    content_text: str
    tool_name: str | None
    tool_calls: int

    @classmethod
    def of_row(cls, row: Row) -> Encoded:
        """A stored row's message, ready to be inserted again (a re-clone)."""
        return cls(row.raw, row.role, row.text, row.content_text, row.tool_name, row.tool_calls)


def encode(message: Message) -> Encoded:
    try:
        raw = json.dumps(message_to_dict(message), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(
            f"cannot store {message.role} message: it holds a value JSON cannot represent ({exc})"
        ) from exc
    content_text = text_of(message.content)
    parts = [content_text]
    tool_name: str | None = None
    tool_calls = 0
    if isinstance(message, ToolMessage):
        tool_name = message.name
        parts.append(message.name or "")
    elif isinstance(message, AssistantMessage):
        tool_calls = len(message.tool_calls)
        for call in message.tool_calls:
            parts.extend((call.name, call.arguments))
    text = "\n".join(part for part in parts if part)
    return Encoded(raw, message.role, text, content_text, tool_name, tool_calls)


def decode(raw: str) -> Message:
    return message_from_dict(json.loads(raw))


def node(session: Session) -> Node:
    return Node.of(
        session.id,
        session.source,
        session.parent_session_id,
        session.end_reason,
        session.model_config,
        session.started_at,
    )


class Nodes:
    """The sessions as the lineage walks see them (a ``_lineage.NodeReader``)."""

    def __init__(self, sessions: Mapping[str, Session], rows: Mapping[str, list[Row]]) -> None:
        self._sessions = sessions
        self._rows = rows

    async def node(self, session_id: str) -> Node | None:
        session = self._sessions.get(session_id)
        return node(session) if session is not None else None

    async def children(self, session_id: str) -> list[Node]:
        found = [node(s) for s in self._sessions.values() if s.parent_session_id == session_id]
        return sorted(found, key=lambda n: (n.started_at, n.id))

    async def has_messages(self, session_id: str) -> bool:
        return bool(self._rows.get(session_id))


@dataclass
class Shared:
    """The data behind one or more handles (see ``InMemorySessionStore.reopen``)."""

    sessions: dict[str, Session] = field(default_factory=dict)
    rows: dict[str, list[Row]] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    locks: dict[str, Lock] = field(default_factory=dict)
    last_id: int = 0

    # -- sessions -----------------------------------------------------------------------

    def require(self, session_id: str, operation: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise SessionNotFound(f"{operation}: no session {session_id!r}")
        return session

    def nodes(self) -> Nodes:
        return Nodes(self.sessions, self.rows)

    async def check_parent(self, session_id: str, parent_id: str) -> None:
        """The parent exists and linking it would not make a cycle."""
        self.require(parent_id, "create_session(parent_session_id)")

        async def parent_of(cursor: str) -> str | None:
            parent = self.sessions.get(cursor)
            return parent.parent_session_id if parent is not None else None

        await check_no_cycle(session_id, parent_id, "create_session", parent_of)

    def inherit(self, session: Session) -> None:
        """Fill the child's missing workspace (and, under a compression parent, chat) fields."""
        if session.parent_session_id is None:
            return
        parent = self.sessions.get(session.parent_session_id)
        if parent is None:
            return
        for name in _lineage.inherited_fields(parent.end_reason):
            if session.identity.get(name) is None and parent.identity.get(name) is not None:
                session.identity[name] = parent.identity[name]

    def store_prompt(self, prompt: str) -> str:
        digest = prompt_hash(prompt)
        self.prompts.setdefault(digest, prompt)
        return digest

    def gc_prompts(self) -> None:
        used = {s.prompt_hash for s in self.sessions.values()}
        for digest in [d for d in self.prompts if d not in used]:
            del self.prompts[digest]

    def info(self, session: Session) -> SessionInfo:
        rows = self.rows.get(session.id, ())
        marks = [r.timestamp for r in rows]
        if session.activity_at is not None:
            marks.append(session.activity_at)
        return SessionInfo(
            id=session.id,
            source=session.source,
            started_at=session.started_at,
            model=session.model,
            model_config=json_object(session.model_config, "model_config"),
            system_prompt=(
                self.prompts.get(session.prompt_hash) if session.prompt_hash is not None else None
            ),
            parent_session_id=session.parent_session_id,
            ended_at=session.ended_at,
            end_reason=session.end_reason,
            title=session.title,
            message_count=session.message_count,
            tool_call_count=session.tool_call_count,
            api_call_count=session.api_call_count,
            usage=session.usage,
            last_active=max(marks) if marks else session.started_at,
            identity=dict(session.identity),
        )

    async def delete(self, session_id: str) -> None:
        """Delete a session: delegate children go too, other children are orphaned."""
        doomed, orphans = await _lineage.cascade(self.nodes(), session_id)
        for orphan in orphans:
            self.sessions[orphan].parent_session_id = None
        for sid in doomed:
            self.rows.pop(sid, None)
            self.locks.pop(sid, None)
            self.sessions.pop(sid, None)

    # -- messages -----------------------------------------------------------------------

    def insert(
        self,
        session_id: str,
        encoded: Encoded,
        timestamp: float,
        *,
        token_count: int | None = None,
        origin_id: int | None = None,
    ) -> Row:
        self.last_id += 1
        row = Row(
            id=self.last_id,
            session_id=session_id,
            raw=encoded.raw,
            role=encoded.role,
            text=encoded.text,
            content_text=encoded.content_text,
            tool_name=encoded.tool_name,
            tool_calls=encoded.tool_calls,
            timestamp=timestamp,
            token_count=token_count,
            origin_id=origin_id,
        )
        self.rows.setdefault(session_id, []).append(row)
        return row

    def insert_batch(self, session_id: str, encoded: Sequence[Encoded], start: float) -> list[Row]:
        """Insert ``encoded`` with strictly increasing timestamps from ``start``."""
        stamps = batch_timestamps(start, len(encoded))
        return [self.insert(session_id, e, t) for e, t in zip(encoded, stamps, strict=True)]

    def recount(self, session: Session) -> None:
        active = [r for r in self.rows.get(session.id, ()) if r.active]
        session.message_count = len(active)
        session.tool_call_count = sum(r.tool_calls for r in active)

    def scoped_rows(self, session_id: str, *, include_inactive: bool) -> list[Row]:
        return [r for r in self.rows.get(session_id, ()) if include_inactive or r.active]

    def display_rows(self, session_id: str) -> list[Row]:
        """Active and compaction-archived rows, minus originals that were re-cloned."""
        rows = [r for r in self.rows.get(session_id, ()) if r.active or r.compacted]
        recloned = {r.origin_id for r in rows if r.active and r.origin_id is not None}
        return [r for r in rows if r.id not in recloned]
