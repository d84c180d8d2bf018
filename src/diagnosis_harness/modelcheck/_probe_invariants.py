"""The invariants a probe checks after every step: the spec's sentences, on the real run.

* *A Run SHALL have exactly one terminal outcome*: the runtime's lifecycle is in the model's
  state; there is a termination exactly when that state is terminal; once recorded it is the same
  object for good -- "later success, failure, cancellation, deadline or budget events SHALL NOT
  replace the state, reason or timestamp of the first RunTermination".
* *Deadline and cancellation SHALL stop subsequent controlled work*: after the terminal outcome no
  reservation is granted (the counters equal the reference's, which did not move) and no retry
  attempt is invoked; the cancellation keeps the *first* reason; every registered callback has run
  exactly once, with that reason, once the run is over (and none before).
* *Run budgets SHALL be explicit, thread-safe, and observable*: no counter passes its limit except
  the token counters, and those only as the recorded actual usage that exhausted the budget; total
  Tool calls equal the sum per Tool; the snapshot equals the reference exactly; a budget that is
  EXHAUSTED has ended the run.
* *Harness retry SHALL be typed, bounded, and recorded*: every actual invocation is one
  ``AttemptRecord`` (numbered from 1, with its typed failure), no execution has more attempts than
  its policy allows, and the stop reason and what is re-raised are the table's answer (the last
  is :mod:`._probe_retry`'s, when an execution ends).

Invariant of this module: :class:`Invariants` only reads the run -- it holds the runtime to the
prediction and never moves either. It owns what the checks remember between steps: the first
termination seen, the callbacks registered and each execution's attempt count.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, final

from .. import BudgetState
from ._disagreement import disagree
from ._probe_reference import money_held, tool_limit

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .. import (
        BudgetUsage,
        CancellationReason,
        HarnessRetryExecutor,
        Registration,
        RetryPolicy,
        RunCapacityCounter,
        RunContext,
        RunTermination,
    )
    from ._probe_prediction import Prediction

__all__ = ["Invariants", "RecordingCallback"]


@final
class RecordingCallback:
    """A registered resource callback: what it received and whether it was removed first."""

    __slots__ = ("calls", "ctx", "registration", "removed", "terminal_at_call")

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.calls: list[CancellationReason] = []
        self.terminal_at_call: list[bool] = []
        self.removed = False
        self.registration: Registration | None = None

    def __call__(self, reason: CancellationReason) -> None:
        self.calls.append(reason)
        self.terminal_at_call.append(self.ctx.lifecycle.termination is not None)


@final
class Invariants:
    """Every invariant of the module docstring, held on one run against its prediction."""

    __slots__ = (
        "_callbacks",
        "_capacity",
        "_ctx",
        "_executions",
        "_executor",
        "_prediction",
        "_records_checked",
        "_seen",
    )

    def __init__(
        self,
        ctx: RunContext,
        executor: HarnessRetryExecutor,
        capacity: RunCapacityCounter | None,
        prediction: Prediction,
    ) -> None:
        self._ctx = ctx
        self._executor = executor
        self._capacity = capacity
        self._prediction = prediction
        self._seen: RunTermination | None = None  # the first termination, once recorded
        self._callbacks: list[RecordingCallback] = []
        self._executions: list[tuple[RetryPolicy, int]] = []  # (policy, attempts) per execution
        self._records_checked = 0  # executions whose records check has compared

    # -- what the checks remember ------------------------------------------------------------------

    @property
    def callbacks(self) -> Sequence[RecordingCallback]:
        return self._callbacks

    def add_callback(self, callback: RecordingCallback) -> None:
        """Hold ``callback`` to "runs exactly once, with the first reason, once the run is over"."""
        self._callbacks.append(callback)

    @property
    def executions(self) -> int:
        """How many retry executions ended."""
        return len(self._executions)

    def add_execution(self, policy: RetryPolicy, attempts: int) -> None:
        """An execution of ``policy`` ended with ``attempts`` attempt records."""
        self._executions.append((policy, attempts))

    # -- the checks ------------------------------------------------------------------------------

    def check(self) -> None:
        """Every invariant, on the run as it is now."""
        termination = self._check_outcome()
        self._check_cancellation()
        self._check_budget(termination)
        self._check_capacity()
        if self._records_checked != len(self._executions):  # the records change in execute only
            self._check_records()

    def _check_outcome(self) -> RunTermination | None:
        """A Run SHALL have exactly one terminal outcome, never replaced."""
        lifecycle, expected = self._ctx.lifecycle, self._prediction.life_state
        if lifecycle.state is not expected:
            raise disagree(
                f"lifecycle is {lifecycle.state.name}, the model {expected.name}",
                model=expected.name,
                runtime=lifecycle.state.name,
            )
        termination = lifecycle.termination
        if self._prediction.ref.termination is None:
            if termination is not None:
                raise disagree(f"a termination {termination!r} while the model is RUNNING")
            return None
        if termination is None:
            raise disagree("no termination although the model is terminal")
        self._check_first(termination)
        return termination

    def _check_first(self, termination: RunTermination) -> None:
        """The termination is the first one seen, with the reference's state, time and reason."""
        if self._seen is None:
            self._seen = termination
        elif termination is not self._seen:
            raise disagree(
                f"the first termination ({self._seen.state.name}) was replaced by "
                f"{termination.state.name}",
                model=repr(self._seen),
                runtime=repr(termination),
            )
        assert self._prediction.ref.termination is not None
        state, reason, at_ns = self._prediction.ref.termination
        if termination.state is not state or termination.at_ns != at_ns:
            raise disagree(
                f"termination {termination!r}, expected {state.name} at {at_ns} ns",
                model=f"{state.name} at {at_ns} ns",
                runtime=f"{termination.state.name} at {termination.at_ns} ns",
            )
        if (reason is not None and termination.reason != reason) or not termination.reason:
            raise disagree(f"termination reason {termination.reason!r}, expected {reason!r}")

    def _check_cancellation(self) -> None:
        """The first cancellation reason is kept; the run is cancelled exactly when it is over;
        every callback ran exactly once, with the first reason, once the run is over."""
        cancellation, first = self._ctx.cancellation, self._prediction.ref.first_reason
        if cancellation.reason is not first:
            raise disagree(f"cancellation reason {cancellation.reason}, expected {first}")
        if cancellation.is_cancelled is (first is None):
            raise disagree("is_cancelled disagrees with the run's terminal outcome")
        for number, callback in enumerate(self._callbacks):
            expected = [] if first is None or callback.removed else [first]
            if callback.calls != expected:
                raise disagree(f"callback {number} ran with {callback.calls}, expected {expected}")
            if not all(callback.terminal_at_call):
                raise disagree(f"callback {number} ran before the terminal outcome was recorded")

    def _check_budget(self, termination: RunTermination | None) -> None:
        """The budget is in the model's state, its snapshot the reference's, within its limits."""
        budget, expected = self._ctx.budget, self._prediction.budget_state
        if budget.state is not expected:
            raise disagree(
                f"budget is {budget.state.name}, the model {expected.name}",
                model=expected.name,
                runtime=budget.state.name,
            )
        if budget.state is BudgetState.EXHAUSTED and termination is None:
            raise disagree("the budget is EXHAUSTED but the run goes on")
        usage = budget.snapshot()
        self._check_usage(usage)
        self._check_limits(usage, exhausted=budget.state is BudgetState.EXHAUSTED)

    def _check_usage(self, usage: BudgetUsage) -> None:
        """Total Tool calls are the sum per Tool; the snapshot equals the reference exactly."""
        ref = self._prediction.ref
        per_tool = dict(usage.per_tool_calls)
        if usage.tool_calls != sum(per_tool.values()):
            raise disagree(f"total Tool calls {usage.tool_calls} != sum per Tool {per_tool}")
        expected_usage = (
            ref.model_calls,
            ref.per_tool,
            ref.input_tokens,
            ref.output_tokens,
            ref.input_tokens + ref.output_tokens,
            ref.run_bytes,
            ref.dimension,
            ref.cost_settled,
            money_held(ref),
        )
        actual_usage = (
            usage.model_calls,
            per_tool,
            usage.input_tokens,
            usage.output_tokens,
            usage.total_tokens,
            usage.run_bytes,
            usage.exhausted,
            usage.cost_units,
            usage.cost_held_units,
        )
        if actual_usage != expected_usage:
            raise disagree(
                f"usage {actual_usage}, expected {expected_usage}",
                model=expected_usage,
                runtime=actual_usage,
            )

    def _check_limits(self, usage: BudgetUsage, *, exhausted: bool) -> None:
        """No reservation passed its limit; token usage past one has exhausted the budget."""
        limits = self._prediction.config.limits
        if (
            usage.model_calls > limits.model_calls
            or usage.tool_calls > limits.tool_calls
            or usage.run_bytes > limits.run_bytes
            or any(count > tool_limit(limits, tool) for tool, count in usage.per_tool_calls.items())
        ):
            raise disagree(f"a reservation passed its limit: {usage}")
        over_tokens = (
            usage.input_tokens > limits.input_tokens
            or usage.output_tokens > limits.output_tokens
            or usage.total_tokens > limits.total_tokens
        )
        if over_tokens and not exhausted:
            raise disagree(f"token usage past a limit but the budget is not EXHAUSTED: {usage}")
        cost_limit = self._prediction.cost_limit_units
        over_money = (
            cost_limit is not None and usage.cost_units + usage.cost_held_units > cost_limit
        )
        if over_money and not exhausted:  # only a settle's actual passes it, and that exhausts
            raise disagree(f"settled + held past the money limit, the budget ACTIVE: {usage}")

    def _check_capacity(self) -> None:
        """The capacity counter beside the run holds the reference's usage, within its limit."""
        capacity = self._capacity
        if capacity is None:
            return
        expected = self._prediction.ref.capacity_used
        if capacity.used != expected:
            raise disagree(f"capacity used {capacity.used}, expected {expected}")
        limit = self._prediction.config.capacity_bytes
        assert limit is not None
        if capacity.used > limit:
            raise disagree("capacity passed its limit")

    def _check_records(self) -> None:
        """Every attempt is recorded; no execution has more than its policy allows."""
        self._records_checked = len(self._executions)
        attempts = self._executor.attempts
        recorded = [(a.policy, a.number, a.outcome, a.failure) for a in attempts]
        expected = self._prediction.ref.attempts
        if recorded != expected:
            raise disagree(f"attempt records {recorded}, expected {expected}")
        for policy, count in self._executions:
            if count > policy.max_attempts:
                raise disagree(
                    f"{policy.name}: {count} attempts > max_attempts {policy.max_attempts}"
                )
        for previous, attempt in itertools.pairwise(attempts):
            if attempt.started_ns < previous.ended_ns:
                raise disagree("attempt timestamps go backwards")
        if any(a.started_ns > a.ended_ns for a in attempts):
            raise disagree("an attempt ended before it started")
