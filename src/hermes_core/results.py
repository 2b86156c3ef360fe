"""Bounding tool results: a tool's own cap, then a cap on the whole batch.

A huge result silently eats the context window; a silently cut one misleads the model.
So results over their limit keep their head and tail around a marker that says how much
was omitted, and the model can ask for the rest (``read_file`` offsets, narrower search).
"""

from __future__ import annotations

__all__ = ["BATCH_RESULT_CAP", "cap_batch", "truncate_result"]

BATCH_RESULT_CAP = 200_000
"""Characters all results of one tool batch may total before the largest are cut."""

HEAD_SHARE = 0.4


def truncate_result(text: str, max_chars: int | None) -> str:
    """``text`` if it fits, else 40% head + 60% tail around a visible marker."""
    if max_chars is None or len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    head = int(max_chars * HEAD_SHARE)
    tail = max_chars - head
    marker = (
        f"\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {len(text)} total] ...\n\n"
    )
    return text[:head] + marker + (text[-tail:] if tail else "")


def cap_batch(results: list[str], cap: int = BATCH_RESULT_CAP) -> list[str]:
    """Cut the largest results until the batch fits ``cap`` (markers aside)."""
    out = list(results)
    while sum(len(r) for r in out) > cap:
        largest = max(range(len(out)), key=lambda i: len(out[i]))
        others = sum(len(r) for i, r in enumerate(out) if i != largest)
        allowance = max(cap - others, cap // (2 * len(out)))
        shorter = truncate_result(out[largest], allowance)
        if len(shorter) >= len(out[largest]):
            break
        out[largest] = shorter
    return out
