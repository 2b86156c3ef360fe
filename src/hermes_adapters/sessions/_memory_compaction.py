"""Compression in the in-memory store: the compression lock, compaction and rotation.

Why this module exists: as in ``_sqlite_compaction`` and ``_pg_compaction``, compressing a
session is the store's most delicate write: a lock with a lease keeps two compressors
apart, ``archive_and_compact`` archives the active rows and re-clones the ones that
arrived while the summary was being written, ``publish_compression_child`` rotates into a
child that inherits the parent's settings. Here each is one uninterrupted step on the
shared tables (``_memory_rows``), with the store's clock passed in, so ``memory.py`` keeps
to the port's methods; the lease rule itself is shared by every store (``_store_common``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hermes_adapters.sessions._lineage import COMPRESSION, FORK_MARKERS
from hermes_adapters.sessions._memory_rows import Encoded, Lock, Session, Shared, encode
from hermes_adapters.sessions._store_common import (
    apply_patch,
    check_appendable,
    check_lease,
    check_rotation,
    config_patch,
)
from hermes_core.messages import Message

__all__ = [
    "acquire_lock",
    "archive_and_compact",
    "lock_holder",
    "publish_child",
    "refresh_lock",
    "release_lock",
]

Clock = Callable[[], float]


# -- the lock -------------------------------------------------------------------------------


def acquire_lock(
    shared: Shared, session_id: str, holder: str, ttl_seconds: float, clock: Clock
) -> bool:
    """Take the lock unless another holder has a live one; an expired lock is reclaimed."""
    now = clock()
    lock = shared.locks.get(session_id)
    if lock is not None and lock.expires_at < now:
        lock = None
    if lock is None:
        lock = Lock(holder=holder, acquired_at=now, expires_at=now + ttl_seconds)
        shared.locks[session_id] = lock
    return lock.holder == holder


def refresh_lock(
    shared: Shared, session_id: str, holder: str, ttl_seconds: float, clock: Clock
) -> bool:
    """Extend the lock while ``holder`` still owns it (even past expiry, if not taken)."""
    lock = shared.locks.get(session_id)
    if not holder or lock is None or lock.holder != holder:
        return False
    lock.expires_at = clock() + ttl_seconds
    return True


def release_lock(shared: Shared, session_id: str, holder: str) -> None:
    lock = shared.locks.get(session_id)
    if lock is not None and lock.holder == holder:
        del shared.locks[session_id]


def lock_holder(shared: Shared, session_id: str, clock: Clock) -> str | None:
    lock = shared.locks.get(session_id)
    if lock is None or lock.expires_at < clock():
        return None
    return lock.holder


def _check_lease(
    shared: Shared, session_id: str, holder: str | None, operation: str, clock: Clock
) -> None:
    lock = shared.locks.get(session_id)
    current = (lock.holder, lock.expires_at) if lock is not None else None
    check_lease(session_id, current, holder, clock, operation)


# -- compaction and rotation ----------------------------------------------------------------


def archive_and_compact(
    shared: Shared,
    session_id: str,
    compacted: Sequence[Message],
    patch: Mapping[str, Any] | None,
    watermark: int | None,
    holder: str | None,
    clock: Clock,
) -> int:
    """Archive the active rows, insert ``compacted``, re-clone rows above ``watermark``,
    merge ``patch`` into ``model_config``; return the new message count."""
    session = shared.require(session_id, "archive_and_compact")
    _check_lease(shared, session_id, holder, "archive_and_compact", clock)
    check_appendable(session.id, session.end_reason, "archive_and_compact")
    encoded = [encode(m) for m in compacted]
    changes = config_patch(patch)
    rows = shared.rows.setdefault(session_id, [])
    late = [r for r in rows if r.active and watermark is not None and r.id > watermark]
    for row in rows:
        if row.active:
            row.active = False
            row.compacted = True
    shared.insert_batch(session_id, encoded, clock())
    for row in late:
        shared.insert(
            session_id,
            Encoded.of_row(row),
            row.timestamp,
            token_count=row.token_count,
            origin_id=row.id,
        )
    apply_patch(session.model_config, changes)
    shared.recount(session)
    return session.message_count


async def publish_child(
    shared: Shared,
    parent_id: str,
    child_id: str,
    messages: Sequence[Message],
    source: str | None,
    holder: str | None,
    clock: Clock,
) -> str:
    """Rotation: the child, holding ``messages``, continues the parent, which ends."""
    operation = "publish_compression_child"
    parent = shared.require(parent_id, operation)
    _check_lease(shared, parent_id, holder, operation, clock)
    check_appendable(parent.id, parent.end_reason, operation)
    existing = shared.sessions.get(child_id)
    check_rotation(
        parent_id, child_id, existing.parent_session_id if existing is not None else None, operation
    )
    encoded = [encode(m) for m in messages]
    if existing is not None:
        await shared.check_parent(child_id, parent_id)
    child = existing or Session(id=child_id, source=source or parent.source, started_at=clock())
    shared.sessions[child_id] = child
    shared.rows.setdefault(child_id, [])
    _inherit_settings(child, parent)
    child.parent_session_id = parent_id
    parent.ended_at = clock()
    parent.end_reason = COMPRESSION
    shared.inherit(child)
    shared.insert_batch(child_id, encoded, clock())
    shared.recount(child)
    shared.gc_prompts()
    return child_id


def _inherit_settings(child: Session, parent: Session) -> None:
    """The model, ``model_config`` (without fork markers) and prompt the child lacks."""
    if child.model is None:
        child.model = parent.model
    if not child.model_config:
        child.model_config = {k: v for k, v in parent.model_config.items() if k not in FORK_MARKERS}
    if child.prompt_hash is None:
        child.prompt_hash = parent.prompt_hash
