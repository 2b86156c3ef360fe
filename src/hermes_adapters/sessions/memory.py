"""The in-memory session store: the trusted fake of :class:`~hermes_core.ports.SessionStore`.

Plain dicts and lists, no I/O. Every method is ``async def`` and never suspends (the shared
lineage walks it awaits only read dicts), so under one event loop each call is atomic, which
is what a transaction gives the SQL stores. The fake is meant to behave like them in
everything a caller can observe (REFERENCE.md §2), and is held to that by the same contract
suite:

- row ids strictly increase across the whole store; transcripts are ordered by id;
- messages are stored as the JSON of their dict codec and decoded on every read, so what
  a SQL store could not keep (a non-JSON value, say) is refused here too, and a caller
  mutating a returned message cannot touch the stored one;
- system prompts are kept once per sha256 and garbage-collected when no session uses them;
- search matches every query word as a case-insensitive substring (a stand-in for FTS5
  that also finds ``it's``, ``a/b.py`` or ``user@host`` literally) and ranks newest first.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

from hermes_adapters.sessions import _lineage
from hermes_adapters.sessions._lineage import COMPRESSION, FORK_MARKERS, Node
from hermes_core import invariants
from hermes_core.errors import (
    CompressionInProgress,
    ReadOnlyStore,
    SessionClosedForAppend,
    SessionNotFound,
    SessionStoreError,
    StoreClosed,
)
from hermes_core.messages import (
    AssistantMessage,
    Message,
    ToolMessage,
    Usage,
    message_from_dict,
    message_to_dict,
    text_of,
)
from hermes_core.ports.sessions import (
    IDENTITY_FIELDS,
    SearchHit,
    SessionInfo,
    SortOrder,
    StoredMessage,
)

__all__ = ["IDENTITY_FIELDS", "InMemorySessionStore", "new_session_id"]


_SESSION_FIELDS = ("model", "model_config", "system_prompt", "parent_session_id")
_BATCH_STEP = 1e-6
_MAX_QUERY_CHARS = 2048
_SNIPPET_TOKENS = 40
_CONTEXT_CHARS = 200


def new_session_id(now: datetime | None = None) -> str:
    """A fresh session id, ``YYYYMMDD_HHMMSS_<6hex>`` in local time."""
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
    return f"{stamp}_{secrets.token_hex(3)}"


# -- rows ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Session:
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
class _Row:
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
class _Lock:
    holder: str
    acquired_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class _Encoded:
    raw: str
    role: str
    text: str
    content_text: str
    tool_name: str | None
    tool_calls: int


def _encode(message: Message) -> _Encoded:
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
    return _Encoded(raw, message.role, text, content_text, tool_name, tool_calls)


def _decode(raw: str) -> Message:
    return message_from_dict(json.loads(raw))


def _json_copy(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A deep copy through JSON, as a SQL store would hand it back; refuses non-JSON values."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(f"{what} must be JSON-serialisable: {exc}") from exc
    return copied


def _prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def _batch_timestamps(start: float, count: int) -> list[float]:
    """``count`` timestamps from ``start``, each strictly greater than the one before."""
    stamps: list[float] = []
    now = start
    for _ in range(count):
        stamps.append(now)
        nxt = now + _BATCH_STEP
        now = nxt if nxt > now else math.nextafter(now, math.inf)
    return stamps


# -- search helpers ----------------------------------------------------------------------

_QUERY_PART = re.compile(r'"([^"]*\S[^"]*)"|(\S+)')
_TOKEN = re.compile(r"\S+")


def _compile_query(query: str) -> list[re.Pattern[str]]:
    """One case-insensitive pattern per word; a balanced ``"quoted phrase"`` is one term."""
    patterns: list[re.Pattern[str]] = []
    for match in _QUERY_PART.finditer(query[:_MAX_QUERY_CHARS]):
        phrase, word = match.groups()
        if phrase is not None:
            body = r"\s+".join(re.escape(w) for w in phrase.split())
        else:
            body = re.escape(word)
        patterns.append(re.compile(body, re.IGNORECASE))
    return patterns


def _snippet(text: str, start: int, end: int) -> str:
    """``text`` cut to about 40 tokens around ``[start, end)``, which is marked ``>>>…<<<``."""
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    first = next(i for i, (_, tok_end) in enumerate(tokens) if tok_end > start)
    last = max(i for i, (tok_start, _) in enumerate(tokens) if tok_start < end)
    width = max(_SNIPPET_TOKENS, last - first + 1)
    lo = max(0, first - (width - (last - first + 1)) // 2)
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


def _context_entry(row: _Row) -> dict[str, str]:
    return {"role": row.role, "content": row.content_text[:_CONTEXT_CHARS]}


# -- lineage helpers ---------------------------------------------------------------------


def _node(session: _Session) -> Node:
    return Node.of(
        session.id,
        session.source,
        session.parent_session_id,
        session.end_reason,
        session.model_config,
        session.started_at,
    )


class _Nodes:
    """The sessions as the lineage walks see them (a ``_lineage.NodeReader``)."""

    def __init__(self, sessions: Mapping[str, _Session], rows: Mapping[str, list[_Row]]) -> None:
        self._sessions = sessions
        self._rows = rows

    async def node(self, session_id: str) -> Node | None:
        session = self._sessions.get(session_id)
        return _node(session) if session is not None else None

    async def children(self, session_id: str) -> list[Node]:
        found = [_node(s) for s in self._sessions.values() if s.parent_session_id == session_id]
        return sorted(found, key=lambda n: (n.started_at, n.id))

    async def has_messages(self, session_id: str) -> bool:
        return bool(self._rows.get(session_id))


def _repair(messages: list[Message]) -> list[Message]:
    return invariants.repair(messages)


# -- the store ---------------------------------------------------------------------------


@dataclass
class _Shared:
    """The data behind one or more handles (see :meth:`InMemorySessionStore.reopen`)."""

    sessions: dict[str, _Session] = field(default_factory=dict)
    rows: dict[str, list[_Row]] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    locks: dict[str, _Lock] = field(default_factory=dict)
    last_id: int = 0


class InMemorySessionStore:
    """A :class:`~hermes_core.ports.SessionStore` held in memory.

    Args:
        read_only: refuse every write with ``ReadOnlyStore``.
        clock: the time source (epoch seconds) for start, end, message and lock times;
            inject one to test lock expiry or ordering without sleeping.
    """

    def __init__(
        self,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
        *,
        _shared: _Shared | None = None,
    ) -> None:
        self._read_only = read_only
        self._clock = clock
        self._closed = False
        self._shared = _shared or _Shared()
        self._sessions: dict[str, _Session] = self._shared.sessions
        self._rows: dict[str, list[_Row]] = self._shared.rows
        self._prompts: dict[str, str] = self._shared.prompts
        self._locks: dict[str, _Lock] = self._shared.locks

    def reopen(self, *, read_only: bool = False) -> InMemorySessionStore:
        """Another handle on the same data, as reopening a database file gives."""
        return InMemorySessionStore(read_only, self._clock, _shared=self._shared)

    async def __aenter__(self) -> InMemorySessionStore:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- guards and small helpers ---------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the in-memory session store was used after close()")

    def _check_writable(self, operation: str) -> None:
        self._check_open()
        if self._read_only:
            raise ReadOnlyStore(f"{operation}: the session store was opened read-only")

    def _require(self, session_id: str, operation: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(f"{operation}: no session {session_id!r}")
        return session

    def _check_appendable(self, session: _Session, operation: str) -> None:
        if session.end_reason == COMPRESSION:
            raise SessionClosedForAppend(
                f"{operation}: session {session.id!r} was ended by compression; "
                "write to its continuation (resolve_resume_session_id) instead"
            )

    def _next_id(self) -> int:
        self._shared.last_id += 1
        return self._shared.last_id

    def _insert(
        self,
        session_id: str,
        encoded: _Encoded,
        timestamp: float,
        *,
        token_count: int | None = None,
        origin_id: int | None = None,
    ) -> _Row:
        row = _Row(
            id=self._next_id(),
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
        self._rows.setdefault(session_id, []).append(row)
        return row

    def _recount(self, session: _Session) -> None:
        active = [r for r in self._rows.get(session.id, ()) if r.active]
        session.message_count = len(active)
        session.tool_call_count = sum(r.tool_calls for r in active)

    def _gc_prompts(self) -> None:
        used = {s.prompt_hash for s in self._sessions.values()}
        for digest in [d for d in self._prompts if d not in used]:
            del self._prompts[digest]

    def prompt_count(self) -> int:
        """How many distinct system prompts are stored (for tests of dedup and GC)."""
        return len(self._prompts)

    def _store_prompt(self, prompt: str) -> str:
        digest = _prompt_hash(prompt)
        self._prompts.setdefault(digest, prompt)
        return digest

    def _info(self, session: _Session) -> SessionInfo:
        rows = self._rows.get(session.id, ())
        marks = [r.timestamp for r in rows]
        if session.activity_at is not None:
            marks.append(session.activity_at)
        return SessionInfo(
            id=session.id,
            source=session.source,
            started_at=session.started_at,
            model=session.model,
            model_config=_json_copy(session.model_config, "model_config"),
            system_prompt=(
                self._prompts.get(session.prompt_hash) if session.prompt_hash is not None else None
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

    def _live_lock(self, session_id: str) -> _Lock | None:
        lock = self._locks.get(session_id)
        if lock is None or lock.expires_at < self._clock():
            return None
        return lock

    def _check_lease(self, session_id: str, lock_holder: str | None, operation: str) -> None:
        """Refuse a compaction when another holder owns (or has taken) the lock."""
        if lock_holder is None:
            live = self._live_lock(session_id)
            if live is not None:
                raise CompressionInProgress(
                    f"{operation}: session {session_id!r} is being compressed by {live.holder!r}"
                )
            return
        lock = self._locks.get(session_id)
        if lock is None or lock.holder != lock_holder:
            owner = f"held by {lock.holder!r}" if lock is not None else "not held"
            raise CompressionInProgress(
                f"{operation}: compression lock of session {session_id!r} is {owner}, "
                f"not by {lock_holder!r}"
            )

    # -- lineage ------------------------------------------------------------------------

    def _parent(self, session: _Session) -> _Session | None:
        if session.parent_session_id is None:
            return None
        return self._sessions.get(session.parent_session_id)

    def _children(self, session_id: str) -> list[_Session]:
        return [s for s in self._sessions.values() if s.parent_session_id == session_id]

    def _nodes(self) -> _Nodes:
        return _Nodes(self._sessions, self._rows)

    def _scoped_rows(self, session_id: str, *, include_inactive: bool) -> list[_Row]:
        return [r for r in self._rows.get(session_id, ()) if include_inactive or r.active]

    def _display_rows(self, session_id: str) -> list[_Row]:
        """Active and compaction-archived rows, minus originals that were re-cloned."""
        rows = [r for r in self._rows.get(session_id, ()) if r.active or r.compacted]
        recloned = {r.origin_id for r in rows if r.active and r.origin_id is not None}
        return [r for r in rows if r.id not in recloned]

    # -- sessions -------------------------------------------------------------------------

    async def create_session(self, session_id: str, source: str, **fields: Any) -> str:
        """Create a session, or fill only the fields the existing one lacks (an upsert).

        Fields: ``model``, ``model_config``, ``system_prompt``, ``parent_session_id`` and the
        identity fields (``IDENTITY_FIELDS``). A child inherits cwd, git and profile from its
        parent; a compression child also inherits the chat identity.

        Raises:
            TypeError: an unknown field was given.
            SessionNotFound: ``parent_session_id`` names no session.
            SessionStoreError: the id is empty, or the parent link would make a cycle.
        """
        self._check_writable("create_session")
        unknown = sorted(set(fields) - set(_SESSION_FIELDS) - set(IDENTITY_FIELDS))
        if unknown:
            raise TypeError(f"create_session() got unknown field(s): {', '.join(unknown)}")
        if not session_id:
            raise SessionStoreError("create_session: the session id must not be empty")
        parent_id = fields.get("parent_session_id")
        if parent_id is not None:
            self._check_parent(session_id, parent_id)
        model_config = fields.get("model_config")
        config = _json_copy(model_config, "model_config") if model_config is not None else None

        session = self._sessions.get(session_id)
        if session is None:
            session = _Session(id=session_id, source=source, started_at=self._clock())
            self._sessions[session_id] = session
            self._rows[session_id] = []
        if session.model is None and fields.get("model") is not None:
            session.model = fields["model"]
        if not session.model_config and config:
            session.model_config = config
        if session.prompt_hash is None and fields.get("system_prompt") is not None:
            session.prompt_hash = self._store_prompt(fields["system_prompt"])
        for name in IDENTITY_FIELDS:
            if session.identity.get(name) is None and fields.get(name) is not None:
                session.identity[name] = fields[name]
        if session.parent_session_id is None and parent_id is not None:
            session.parent_session_id = parent_id
            self._inherit(session)
        self._gc_prompts()
        return session_id

    def _check_parent(self, session_id: str, parent_id: str) -> None:
        self._require(parent_id, "create_session(parent_session_id)")
        cursor: str | None = parent_id
        seen: set[str] = set()
        while cursor is not None and cursor not in seen:
            if cursor == session_id:
                raise SessionStoreError(
                    f"create_session: making {parent_id!r} the parent of {session_id!r} "
                    "would create a cycle"
                )
            seen.add(cursor)
            parent = self._sessions.get(cursor)
            cursor = parent.parent_session_id if parent is not None else None

    def _inherit(self, session: _Session) -> None:
        parent = self._parent(session)
        if parent is None:
            return
        for name in _lineage.inherited_fields(parent.end_reason):
            if session.identity.get(name) is None and parent.identity.get(name) is not None:
                session.identity[name] = parent.identity[name]

    async def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **fields: Any
    ) -> str:
        """The same upsert as :meth:`create_session`."""
        return await self.create_session(session_id, source, model=model, **fields)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        self._check_open()
        session = self._sessions.get(session_id)
        return self._info(session) if session is not None else None

    async def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """The exact id, or the only id starting with the prefix, else ``None``."""
        self._check_open()
        if not id_or_prefix:
            return None
        if id_or_prefix in self._sessions:
            return id_or_prefix
        matches = [sid for sid in self._sessions if sid.startswith(id_or_prefix)]
        return matches[0] if len(matches) == 1 else None

    async def update_system_prompt(self, session_id: str, prompt: str) -> None:
        self._check_writable("update_system_prompt")
        session = self._require(session_id, "update_system_prompt")
        session.prompt_hash = self._store_prompt(prompt)
        self._gc_prompts()

    async def update_metadata(self, session_id: str, **fields: Any) -> None:
        """Set ``title``, ``model``, ``model_config`` keys (``None`` deletes) or identity fields.

        Raises:
            TypeError: an unknown field was given.
            SessionStoreError: the title is already used by another session.
        """
        self._check_writable("update_metadata")
        unknown = sorted(set(fields) - {"title", "model", "model_config"} - set(IDENTITY_FIELDS))
        if unknown:
            raise TypeError(f"update_metadata() got unknown field(s): {', '.join(unknown)}")
        session = self._require(session_id, "update_metadata")
        title = fields.get("title")
        if title is not None:
            owner = next(
                (s.id for s in self._sessions.values() if s.title == title and s.id != session_id),
                None,
            )
            if owner is not None:
                raise SessionStoreError(
                    f"update_metadata: title {title!r} is already used by session {owner!r}"
                )
        patch = fields.get("model_config")
        config = dict(session.model_config)
        if patch is not None:
            for key, value in _json_copy(patch, "model_config").items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
        if "title" in fields:
            session.title = title
        if "model" in fields:
            session.model = fields["model"]
        session.model_config = config
        for name in IDENTITY_FIELDS:
            if name in fields:
                if fields[name] is None:
                    session.identity.pop(name, None)
                else:
                    session.identity[name] = fields[name]

    async def update_token_counts(
        self,
        session_id: str,
        usage: Usage,
        *,
        api_calls: int = 0,
        model: str | None = None,
        absolute: bool = False,
    ) -> None:
        """Add ``usage`` and ``api_calls`` (or set them when ``absolute``); fill a missing model."""
        self._check_writable("update_token_counts")
        session = self._require(session_id, "update_token_counts")
        if absolute:
            session.usage = usage
            session.api_call_count = api_calls
        else:
            session.usage = session.usage + usage
            session.api_call_count += api_calls
        if session.model is None and model is not None:
            session.model = model
        session.activity_at = self._clock()

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session; a session already ended keeps its first end time and reason."""
        self._check_writable("end_session")
        session = self._require(session_id, "end_session")
        if session.ended_at is None:
            session.ended_at = self._clock()
            session.end_reason = end_reason

    async def reopen_session(self, session_id: str) -> None:
        self._check_writable("reopen_session")
        session = self._require(session_id, "reopen_session")
        session.ended_at = None
        session.end_reason = None

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session: delegate children go too, other children are orphaned."""
        self._check_writable("delete_session")
        if session_id not in self._sessions:
            return False
        self._delete(session_id, {session_id})
        self._gc_prompts()
        return True

    def _delete(self, session_id: str, doomed: set[str]) -> None:
        for child in self._children(session_id):
            if _node(child).is_delegate and child.id not in doomed:
                doomed.add(child.id)
                self._delete(child.id, doomed)
            else:
                child.parent_session_id = None
        self._rows.pop(session_id, None)
        self._locks.pop(session_id, None)
        self._sessions.pop(session_id, None)

    # -- messages -------------------------------------------------------------------------

    async def append_message(
        self,
        session_id: str,
        message: Message,
        *,
        timestamp: float | None = None,
        token_count: int | None = None,
    ) -> int:
        """Append one message and return its row id.

        Raises:
            SessionNotFound: no such session.
            SessionClosedForAppend: the session was ended by compression.
        """
        self._check_writable("append_message")
        session = self._require(session_id, "append_message")
        self._check_appendable(session, "append_message")
        encoded = _encode(message)
        stamp = self._clock() if timestamp is None else float(timestamp)
        row = self._insert(session_id, encoded, stamp, token_count=token_count)
        session.message_count += 1
        session.tool_call_count += encoded.tool_calls
        return row.id

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[int]:
        """Append atomically; timestamps inside the batch strictly increase."""
        self._check_writable("append_messages")
        session = self._require(session_id, "append_messages")
        self._check_appendable(session, "append_messages")
        encoded = [_encode(m) for m in messages]
        ids = [
            self._insert(session_id, enc, stamp).id
            for enc, stamp in zip(
                encoded, _batch_timestamps(self._clock(), len(encoded)), strict=True
            )
        ]
        session.message_count += len(encoded)
        session.tool_call_count += sum(enc.tool_calls for enc in encoded)
        return ids

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole transcript (archived rows included) with ``messages``."""
        self._check_writable("replace_messages")
        session = self._require(session_id, "replace_messages")
        encoded = [_encode(m) for m in messages]
        self._rows[session_id] = []
        for enc, stamp in zip(encoded, _batch_timestamps(self._clock(), len(encoded)), strict=True):
            self._insert(session_id, enc, stamp)
        self._recount(session)

    async def get_messages(
        self,
        session_id: str,
        *,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
        after_id: int | None = None,
    ) -> list[StoredMessage]:
        """Stored rows in insertion (id) order; archived rows only with ``include_inactive``."""
        self._check_open()
        rows = self._scoped_rows(session_id, include_inactive=include_inactive)
        if after_id is not None:
            rows = [r for r in rows if r.id > after_id]
        rows = rows[max(offset, 0) :]
        if limit is not None:
            rows = rows[: max(limit, 0)]
        return [
            StoredMessage(
                id=r.id,
                session_id=r.session_id,
                message=_decode(r.raw),
                timestamp=r.timestamp,
                active=r.active,
                compacted=r.compacted,
                token_count=r.token_count,
            )
            for r in rows
        ]

    async def get_conversation(
        self,
        session_id: str,
        *,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair: bool = False,
    ) -> list[Message]:
        """The transcript as messages; with ancestors, its compression lineage root first."""
        self._check_open()
        if include_ancestors:
            lineage = await _lineage.lineage(self._nodes(), session_id)
        else:
            lineage = [session_id]
        segments = [
            [_decode(r.raw) for r in self._scoped_rows(sid, include_inactive=include_inactive)]
            for sid in lineage
        ]
        messages = _lineage.dedupe_replayed_users(segments)
        return _repair(messages) if repair else messages

    # -- search ---------------------------------------------------------------------------

    async def search_messages(
        self,
        query: str,
        *,
        source_filter: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        role_filter: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: SortOrder | None = None,
        include_inactive: bool = False,
    ) -> list[SearchHit]:
        """Messages containing every query word (case-insensitive), newest first by default.

        Default scope: active rows and rows archived by compaction.
        """
        self._check_open()
        patterns = _compile_query(query)
        if not patterns or limit <= 0:
            return []
        found: list[tuple[_Row, _Session, re.Match[str], list[_Row]]] = []
        for session_id, all_rows in self._rows.items():
            session = self._sessions[session_id]
            if source_filter and session.source not in source_filter:
                continue
            if exclude_sources and session.source in exclude_sources:
                continue
            rows = [r for r in all_rows if include_inactive or r.active or r.compacted]
            for index, row in enumerate(rows):
                if role_filter and row.role not in role_filter:
                    continue
                matches = [p.search(row.text) for p in patterns]
                if not all(m is not None for m in matches):
                    continue
                first = min(
                    (m for m in matches if m is not None), key=lambda m: (m.start(), -m.end())
                )
                around = rows[max(index - 1, 0) : index + 2]
                found.append((row, session, first, around))
        found.sort(key=lambda item: (item[0].timestamp, item[0].id), reverse=sort != "oldest")
        page = found[max(offset, 0) : max(offset, 0) + limit]
        return [
            SearchHit(
                id=row.id,
                session_id=row.session_id,
                role=row.role,
                snippet=_snippet(row.text, match.start(), match.end()),
                timestamp=row.timestamp,
                source=session.source,
                model=session.model,
                session_started=session.started_at,
                tool_name=row.tool_name,
                context=tuple(_context_entry(r) for r in around),
            )
            for row, session, match, around in page
        ]

    async def search_sessions(
        self, *, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions, most recently active first."""
        self._check_open()
        infos = [
            self._info(s) for s in self._sessions.values() if source is None or s.source == source
        ]
        infos.sort(key=lambda i: (i.last_active or i.started_at, i.started_at, i.id), reverse=True)
        start = max(offset, 0)
        return infos[start : start + max(limit, 0)]

    # -- lineage and compression ------------------------------------------------------------

    async def resolve_resume_session_id(self, session_id: str) -> str:
        """Where a resume of ``session_id`` should land.

        Follows the compression chain to its tip, then walks the newest non-fork child
        (branches, resets and subagents are skipped) and returns the deepest session with
        messages on that walk, else the compression tip.
        """
        self._check_open()
        return await _lineage.resume_target(self._nodes(), session_id)

    async def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[Message], list[Message]]:
        """(model history of the tip, repaired; full display history of the lineage)."""
        self._check_open()
        model = _repair(
            [_decode(r.raw) for r in self._scoped_rows(session_id, include_inactive=False)]
        )
        segments = [
            [_decode(r.raw) for r in self._display_rows(sid)]
            for sid in await _lineage.lineage(self._nodes(), session_id)
        ]
        return model, _lineage.dedupe_replayed_users(segments)

    async def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Take the lock unless another holder has a live one; an expired lock is reclaimed.

        Re-acquiring a lock one already holds succeeds without extending it.
        """
        self._check_writable("try_acquire_compression_lock")
        if not session_id or not holder:
            return False
        now = self._clock()
        lock = self._locks.get(session_id)
        if lock is not None and lock.expires_at < now:
            lock = None
        if lock is None:
            lock = _Lock(holder=holder, acquired_at=now, expires_at=now + ttl_seconds)
            self._locks[session_id] = lock
        return lock.holder == holder

    async def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
        self._check_writable("refresh_compression_lock")
        lock = self._locks.get(session_id)
        if not holder or lock is None or lock.holder != holder:
            return False
        lock.expires_at = self._clock() + ttl_seconds
        return True

    async def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` owns it; otherwise do nothing."""
        self._check_writable("release_compression_lock")
        lock = self._locks.get(session_id)
        if lock is not None and lock.holder == holder:
            del self._locks[session_id]

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        self._check_open()
        lock = self._live_lock(session_id)
        return lock.holder if lock is not None else None

    async def archive_and_compact(
        self,
        session_id: str,
        compacted: Sequence[Message],
        *,
        model_config_patch: Mapping[str, Any] | None = None,
        watermark: int | None = None,
        lock_holder: str | None = None,
    ) -> int:
        """Archive active rows, insert ``compacted``, re-clone rows newer than ``watermark``.

        In one step: every active row becomes ``active=False, compacted=True``; ``compacted``
        is inserted as the new active transcript; active rows with an id above ``watermark``
        (they arrived while the summary was being written) are inserted again after it;
        counters are recomputed and ``model_config_patch`` is merged (``None`` deletes).

        Returns:
            The number of active rows afterwards (the new ``message_count``).

        Raises:
            CompressionInProgress: the lock is held by someone other than ``lock_holder``.
            SessionClosedForAppend: the session was ended by compression.
        """
        self._check_writable("archive_and_compact")
        session = self._require(session_id, "archive_and_compact")
        self._check_lease(session_id, lock_holder, "archive_and_compact")
        self._check_appendable(session, "archive_and_compact")
        encoded = [_encode(m) for m in compacted]
        patch = _json_copy(model_config_patch, "model_config_patch") if model_config_patch else {}
        rows = self._rows.setdefault(session_id, [])
        late = [r for r in rows if r.active and watermark is not None and r.id > watermark]
        for row in rows:
            if row.active:
                row.active = False
                row.compacted = True
        for enc, stamp in zip(encoded, _batch_timestamps(self._clock(), len(encoded)), strict=True):
            self._insert(session_id, enc, stamp)
        for row in late:
            clone = _Encoded(
                row.raw, row.role, row.text, row.content_text, row.tool_name, row.tool_calls
            )
            self._insert(
                session_id, clone, row.timestamp, token_count=row.token_count, origin_id=row.id
            )
        for key, value in patch.items():
            if value is None:
                session.model_config.pop(key, None)
            else:
                session.model_config[key] = value
        self._recount(session)
        return session.message_count

    async def publish_compression_child(
        self,
        parent_session_id: str,
        child_session_id: str,
        messages: Sequence[Message],
        *,
        source: str | None = None,
        lock_holder: str | None = None,
    ) -> str:
        """Rotation: a child holding ``messages``; the parent ends with 'compression'.

        The child inherits the parent's source (unless given), model, model_config (without
        fork markers), system prompt, workspace and chat identity.

        Raises:
            CompressionInProgress: the parent's lock is held by someone other than
                ``lock_holder``.
            SessionClosedForAppend: the parent was already ended by compression.
            SessionStoreError: the child id is empty or equals the parent's.
        """
        self._check_writable("publish_compression_child")
        parent = self._require(parent_session_id, "publish_compression_child")
        self._check_lease(parent_session_id, lock_holder, "publish_compression_child")
        self._check_appendable(parent, "publish_compression_child")
        if not child_session_id or child_session_id == parent_session_id:
            raise SessionStoreError(
                f"publish_compression_child: invalid child id {child_session_id!r} "
                f"for parent {parent_session_id!r}"
            )
        existing = self._sessions.get(child_session_id)
        if existing is not None and existing.parent_session_id not in (None, parent_session_id):
            raise SessionStoreError(
                f"publish_compression_child: session {child_session_id!r} already exists "
                f"as a child of {existing.parent_session_id!r}"
            )
        encoded = [_encode(m) for m in messages]
        if existing is not None:
            self._check_parent(child_session_id, parent_session_id)
        child = existing or _Session(
            id=child_session_id, source=source or parent.source, started_at=self._clock()
        )
        self._sessions[child_session_id] = child
        self._rows.setdefault(child_session_id, [])
        if child.model is None:
            child.model = parent.model
        if not child.model_config:
            child.model_config = {
                k: v for k, v in parent.model_config.items() if k not in FORK_MARKERS
            }
        if child.prompt_hash is None:
            child.prompt_hash = parent.prompt_hash
        child.parent_session_id = parent_session_id
        parent.ended_at = self._clock()
        parent.end_reason = COMPRESSION
        self._inherit(child)
        for enc, stamp in zip(encoded, _batch_timestamps(self._clock(), len(encoded)), strict=True):
            self._insert(child_session_id, enc, stamp)
        self._recount(child)
        self._gc_prompts()
        return child_session_id

    async def close(self) -> None:
        """Close the store; later calls raise ``StoreClosed``. Idempotent."""
        self._closed = True
