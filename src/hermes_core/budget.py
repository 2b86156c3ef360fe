"""The iteration budget: how many model calls an agent tree may still make.

One budget is shared by a parent and every child it delegates to, so a fan-out of
sub-agents cannot multiply the spend the user allowed (Hermes today gives each agent its
own budget; we keep one per tree and say so in the docs). All methods run on the event
loop thread without awaiting, so they are atomic with respect to other tasks and need no
lock.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["BudgetPressure", "IterationBudget", "pressure_note"]


class BudgetPressure(IntEnum):
    """How close the budget is to its end: none, past 70%, past 90%."""

    NONE = 0
    CAUTION = 1
    WARNING = 2


CAUTION_AT = 0.7
WARNING_AT = 0.9


class IterationBudget:
    """A counter of model calls with refunds and pressure levels."""

    def __init__(self, max_total: int) -> None:
        if max_total < 1:
            raise ValueError(f"max_total must be at least 1, got {max_total}")
        self._max_total = max_total
        self._used = 0

    @property
    def max_total(self) -> int:
        return self._max_total

    @property
    def used(self) -> int:
        return self._used

    @property
    def remaining(self) -> int:
        return max(0, self._max_total - self._used)

    @property
    def exhausted(self) -> bool:
        return self._used >= self._max_total

    def consume(self) -> bool:
        """Take one unit; ``False`` (and nothing taken) once the budget is spent."""
        if self.exhausted:
            return False
        self._used += 1
        return True

    def refund(self) -> None:
        """Give one unit back (a restarted iteration, e.g. after compression)."""
        self._used = max(0, self._used - 1)

    def pressure(self) -> BudgetPressure:
        progress = self._used / self._max_total
        if progress >= WARNING_AT:
            return BudgetPressure.WARNING
        if progress >= CAUTION_AT:
            return BudgetPressure.CAUTION
        return BudgetPressure.NONE

    def __repr__(self) -> str:
        return f"IterationBudget(used={self._used}, max_total={self._max_total})"


def pressure_note(budget: IterationBudget) -> str | None:
    """The note users know from Hermes, or ``None`` below 70%."""
    level = budget.pressure()
    used, total, left = budget.used, budget.max_total, budget.remaining
    if level is BudgetPressure.WARNING:
        return (
            f"[BUDGET WARNING: Iteration {used}/{total}. Only {left} iteration(s) left. "
            "Provide your final response NOW. No more tool calls unless absolutely critical.]"
        )
    if level is BudgetPressure.CAUTION:
        return (
            f"[BUDGET: Iteration {used}/{total}. {left} iterations left. "
            "Start consolidating your work.]"
        )
    return None
