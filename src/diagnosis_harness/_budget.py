"""``ctx.budget``: the run's seven limits, its counters against them, one consistent snapshot.

A view over the run's state (:mod:`._local_run`). The ACTIVE -> EXHAUSTED decision is the generated
budget table (``model/budget.toml``), its guard ``within_limits`` computed from the counters. A
reservation is all or nothing across the total and per-Tool counters: the call that would pass a
limit reserves nothing, so total Tool calls always equal the sum per Tool. Reported token usage
is different: the tokens were spent, so they are recorded as reported even past a limit, and that
exhausts the budget for good. Reservations go through the run (``ctx.reserve_*``), which checks
the run's deadline and outcome in the same decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from ._backend import RunBackend
    from ._generated.tables import BudgetState
    from ._limits import BudgetDimension, BudgetLimits, BudgetUsage

__all__ = ["Budget"]


@final
class Budget:
    """The run's counters against its :class:`BudgetLimits`. Read it with :meth:`snapshot`."""

    __slots__ = ("_owner",)

    def __init__(self, run: RunBackend) -> None:
        self._owner = run

    @property
    def limits(self) -> BudgetLimits:
        return self._owner.limits

    @property
    def state(self) -> BudgetState:
        return self._owner.budget_state

    @property
    def exhausted(self) -> BudgetDimension | None:
        """The first limit that exhausted the budget, or ``None`` while ACTIVE."""
        return self._owner.exhausted

    def snapshot(self) -> BudgetUsage:
        """Every counter, read in one decision: ``tool_calls == sum(per_tool_calls.values())``."""
        return self._owner.snapshot()

    def __repr__(self) -> str:
        return f"Budget(state={self.state.name}, exhausted={self.exhausted})"
