"""Session lineage rules and walks, written once for every session store.

Why this module exists: the in-memory, SQLite and PostgreSQL stores must agree exactly on
which sessions form a compression lineage, where a resume lands, what a child inherits
from its parent, what a delete takes along and how a lineage's transcripts are joined;
the contract suite holds them to it. Each store used to carry its own copy of these walks.
Here they are written against :class:`NodeReader`, so a store only says how to fetch one
session node and its children (a dict lookup, or a ``SELECT`` on its own connection inside
its own transaction).

The words: a *compression child* continues a parent that ended with ``"compression"``; a
*fork* (a branch, a reset or a subagent's session) starts something new and is never part
of its parent's lineage, whatever the parent's end reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_core.messages import Message

__all__ = [
    "BRANCHED",
    "CHAT_FIELDS",
    "COMPRESSION",
    "COMPRESSION_HOPS",
    "CONTINUATION_HOPS",
    "FORK_MARKERS",
    "WORKSPACE_FIELDS",
    "Node",
    "NodeReader",
    "cascade",
    "compression_tip",
    "dedupe_replayed_users",
    "inherited_fields",
    "joined_transcripts",
    "lineage",
    "resume_target",
]

COMPRESSION = "compression"
"""The end reason of a session rotated into a compression child."""
BRANCHED = "branched"
"""The end reason of a session that was branched: its children are forks."""
FORK_MARKERS = ("_branched_from", "_delegate_from", "_reset_from")
"""``model_config`` keys marking a session as a fork of its parent, not a continuation."""
WORKSPACE_FIELDS = ("cwd", "git_branch", "git_repo_root", "profile_name")
"""Inherited by every child from its parent."""
CHAT_FIELDS = (
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
)
"""Inherited by a compression child on top of the workspace fields: it is the same chat."""

COMPRESSION_HOPS = 100
"""How far a walk follows a compression chain: a bound on a corrupt (cyclic) lineage."""
CONTINUATION_HOPS = 32
"""How many non-fork children a resume walks down past the compression tip."""


def inherited_fields(parent_end_reason: str | None) -> tuple[str, ...]:
    """The identity fields a child fills from a parent that ended with this reason."""
    return WORKSPACE_FIELDS + (CHAT_FIELDS if parent_end_reason == COMPRESSION else ())


@dataclass(frozen=True, slots=True)
class Node:
    """What the lineage walks need of a session."""

    id: str
    source: str
    parent_id: str | None
    end_reason: str | None
    markers: frozenset[str]
    started_at: float

    @classmethod
    def of(
        cls,
        session_id: str,
        source: str,
        parent_id: str | None,
        end_reason: str | None,
        model_config: Mapping[str, Any],
        started_at: float,
    ) -> Node:
        """The node of a session; its fork markers are read from ``model_config``."""
        markers = frozenset(m for m in FORK_MARKERS if m in model_config)
        return cls(session_id, source, parent_id, end_reason, markers, started_at)

    @property
    def is_delegate(self) -> bool:
        """A subagent's session: deleted together with its parent."""
        return "_delegate_from" in self.markers or self.source == "tool"

    def is_fork(self, parent: Node | None) -> bool:
        """A branch, reset or subagent child: not a continuation of ``parent``."""
        return (
            bool(self.markers)
            or self.source == "tool"
            or (parent is not None and parent.end_reason == BRANCHED)
        )


class NodeReader(Protocol):
    """How a store hands its sessions to the walks (all reads, within one snapshot)."""

    async def node(self, session_id: str) -> Node | None:
        """The session's node, or ``None`` when there is no such session."""
        ...

    async def children(self, session_id: str) -> list[Node]:
        """The sessions whose parent is ``session_id``, oldest first (by start, then id)."""
        ...

    async def has_messages(self, session_id: str) -> bool:
        """Whether the session holds any message row (archived ones included)."""
        ...


async def lineage(reader: NodeReader, session_id: str) -> list[str]:
    """The compression lineage ending at ``session_id``, root first; a fork stands alone."""
    chain = [session_id]
    node = await reader.node(session_id)
    while node is not None and len(chain) <= COMPRESSION_HOPS:
        parent = await reader.node(node.parent_id) if node.parent_id is not None else None
        if parent is None or parent.end_reason != COMPRESSION or node.is_fork(parent):
            break
        if parent.id in chain:
            break
        chain.append(parent.id)
        node = parent
    chain.reverse()
    return chain


async def compression_tip(reader: NodeReader, session_id: str) -> str:
    """Follow compression children (the first published one at each hop) to the tip."""
    current = session_id
    seen = {current}
    for _ in range(COMPRESSION_HOPS):
        node = await reader.node(current)
        if node is None or node.end_reason != COMPRESSION:
            break
        children = [c for c in await reader.children(current) if not c.is_fork(node)]
        if not children or children[0].id in seen:
            break
        current = children[0].id
        seen.add(current)
    return current


async def resume_target(reader: NodeReader, session_id: str) -> str:
    """Where a resume of ``session_id`` should land.

    Follows the compression chain to its tip, then walks the newest non-fork child
    (branches, resets and subagents are skipped) and returns the deepest session with
    messages on that walk, else the compression tip. An empty id is returned as is.
    """
    if not session_id:
        return session_id
    tip = await compression_tip(reader, session_id)
    current, seen, best = tip, {tip}, None
    for _ in range(CONTINUATION_HOPS):
        if await reader.has_messages(current):
            best = current
        node = await reader.node(current)
        children = [c for c in await reader.children(current) if not c.is_fork(node)]
        if not children:
            break
        newest = max(children, key=lambda c: (c.started_at, c.id))
        if newest.id in seen:
            break
        current = newest.id
        seen.add(current)
    return best if best is not None else tip


async def cascade(reader: NodeReader, session_id: str) -> tuple[list[str], list[str]]:
    """What deleting ``session_id`` touches: (the sessions that go with it, its delegate
    descendants before their parents and itself last; the children left behind, whose
    parent link must be cleared first). Subagent sessions go with their parent; any other
    child, a branch say, is orphaned instead."""
    doomed, order, orphans = {session_id}, [], []

    async def walk(current: str) -> None:
        for child in await reader.children(current):
            if child.is_delegate and child.id not in doomed:
                doomed.add(child.id)
                await walk(child.id)
            else:
                orphans.append(child.id)
        order.append(current)

    await walk(session_id)
    return order, orphans


def dedupe_replayed_users(segments: Sequence[Sequence[Message]]) -> list[Message]:
    """Join a lineage's transcripts, dropping the user messages a later segment replays.

    A rotation copies the recent tail into the child, so a user message of a later segment
    equal to one of an earlier segment is that copy: each earlier user message absorbs at
    most one copy, and it stays in its original place.
    """
    joined: list[Message] = []
    for index, segment in enumerate(segments):
        unmatched = [m for m in joined if m.role == "user"] if index else []
        for message in segment:
            if message.role == "user" and message in unmatched:
                unmatched.remove(message)
                continue
            joined.append(message)
    return joined


async def joined_transcripts(
    reader: NodeReader,
    session_id: str,
    read: Callable[[str], Awaitable[Sequence[Message]]],
    *,
    ancestors: bool = True,
) -> list[Message]:
    """The transcripts ``read`` gives for the compression lineage ending at ``session_id``
    (root first), or for that session alone without ``ancestors``, joined by
    :func:`dedupe_replayed_users`."""
    ids = await lineage(reader, session_id) if ancestors else [session_id]
    return dedupe_replayed_users([await read(sid) for sid in ids])
