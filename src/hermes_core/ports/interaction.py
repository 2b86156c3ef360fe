"""Host callbacks: questions for the user and approval of risky actions.

A headless agent has neither; tools then refuse with a message the model can read rather
than blocking on a hidden terminal prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

__all__ = ["ApprovalDecision", "Approver", "Clarifier"]

ApprovalDecision = Literal["once", "session", "always", "deny"]


@runtime_checkable
class Clarifier(Protocol):
    """Ask the user a question, optionally with up to four choices; returns the answer."""

    async def __call__(self, question: str, choices: Sequence[str] | None = None) -> str: ...


@runtime_checkable
class Approver(Protocol):
    """Decide whether a risky action (a dangerous command) may run."""

    async def __call__(self, action: str, reason: str) -> ApprovalDecision: ...
