"""The reference a probe keeps beside the run: the expected data, as plain counters and limits.

Invariant: the reference never reads the code under test. Its fields move only when the
prediction (:mod:`._probe_prediction`) says a step was granted or ended the run, so what it holds
is what the runtime must show: the counters, the first outcome's state, reason and timestamp, the
first cancellation reason, and the attempt records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from .. import AttemptOutcome, BudgetDimension, BudgetLimits, CancellationReason, FailureKind

if TYPE_CHECKING:
    from .. import RunState

__all__ = ["AttemptRow", "Reference", "money_held", "tool_limit"]

AttemptRow: TypeAlias = tuple[str, int, AttemptOutcome, FailureKind | None]
"""An attempt record as the reference keeps it: (policy, number, outcome, failure)."""


@dataclass(slots=True)
class Reference:
    """The expected data: plain counters and limits, independent of the code under test."""

    now_ns: int = 0
    model_calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    run_bytes: int = 0
    # money, in picodollars: the holds of Model calls not settled yet (oldest first), and the
    # actual costs settled
    holds: list[int] = field(default_factory=list)
    cost_settled: int = 0
    # the holds of Tool calls (taken under a money limit only): the probe never settles them,
    # so they stay charged at their worst case, as an unsettled hold does
    tool_held: int = 0
    capacity_used: int = 0
    dimension: BudgetDimension | None = None
    # (state, reason or None when any non-blank reason will do, at_ns) of the first outcome
    termination: tuple[RunState, str | None, int] | None = None
    first_reason: CancellationReason | None = None
    # the attempts of finished executions (the executor records an execution when it ends)
    attempts: list[AttemptRow] = field(default_factory=list)
    # the attempts of the execution in flight
    pending: list[AttemptRow] = field(default_factory=list)


def tool_limit(limits: BudgetLimits, tool: str) -> int:
    """The call limit of ``tool``: its override, else the per-Tool limit."""
    return limits.per_tool_overrides.get(tool, limits.per_tool_calls)


def money_held(ref: Reference) -> int:
    """The money the reference holds, in picodollars: every hold not settled yet."""
    return sum(ref.holds) + ref.tool_held
