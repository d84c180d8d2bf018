"""The run a probe builds: its limits, its deadline, its retry policies, its capacity.

Invariant: a :class:`ProbeConfig` is frozen, so every probe made from one configuration starts
from the same run -- what the explorer relies on when it replays a prefix on a fresh probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from .. import (
    BudgetLimits,
    Deadline,
    FailureKind,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunCapacityCounter,
    RunContext,
)

if TYPE_CHECKING:
    from .._backend import RunStore

__all__ = ["THRICE", "ProbeConfig", "policies_with_thrice"]


@final
@dataclass(frozen=True, slots=True)
class ProbeConfig:
    """The run a probe builds: its limits, its deadline, its retry policies, its capacity."""

    limits: BudgetLimits
    deadline_ns: int
    policies: RetryPolicies
    capacity_bytes: int | None = None  # a RunCapacityCounter beside the run, if given
    callbacks: int = 0  # callbacks registered when the run is created
    store: RunStore | None = None  # where the run lives; None: in this process (LocalRun)

    def new_run(self, clock: ManualClock) -> RunContext:
        """The run this configuration describes, on ``clock``."""
        return RunContext.create(
            session_id="model-check",
            run_id="run-1",
            limits=self.limits,
            deadline=Deadline.at_ns(self.deadline_ns),
            clock=clock,
            retry_policies=self.policies,
            store=self.store,
        )

    def new_capacity(self) -> RunCapacityCounter | None:
        return None if self.capacity_bytes is None else RunCapacityCounter(self.capacity_bytes)


THRICE = RetryPolicy("thrice", 3, frozenset({FailureKind.TRANSPORT, FailureKind.RATE_LIMITED}))
"""A policy with three attempts, so that two retries in a row are explored."""


def policies_with_thrice() -> RetryPolicies:
    defaults = RetryPolicies.defaults()
    return RetryPolicies([*(defaults[name] for name in defaults), THRICE])
