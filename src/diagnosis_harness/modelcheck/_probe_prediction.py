"""What a probe's step should do, decided by the models and the reference alone.

Theory of operation. A :class:`Prediction` owns the python-statemachine models of the run's
lifecycle and budget (generated from ``model/``) and the :class:`~._probe_reference.Reference`.
Each step of a probe asks it first: it works out from the model's state and the reference which
model event the step is (a refused reservation is budget ``reserve`` with ``within_limits=False``
and then lifecycle ``exhaust_budget``; a ``succeed()`` after the run ended is an event the final
state absorbs), fires it on the model, records the row taken in the coverage, and moves the
reference. Invariant: a prediction never reads the code under test -- the models decide every
state, the reference every guard and datum -- and every model move is a row of its table
(anything else raises :class:`~._disagreement.Disagreement`). :func:`compare_error` then holds
the runtime's answer to it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, final

from .. import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    CancellationReason,
    FailureKind,
    RunCancelled,
    RunFinished,
    RunState,
    RunTerminated,
    RunTimedOut,
)
from .._endings import LIFECYCLE_REASONS
from .._generated.tables import (
    BUDGET,
    LIFECYCLE,
    BudgetEvent,
    BudgetState,
    LifecycleEvent,
)
from ..pricing import from_units, to_units
from ._disagreement import disagree
from ._probe_reference import Reference, money_held, tool_limit

if TYPE_CHECKING:
    import enum
    from collections.abc import Mapping

    from .. import RunTermination
    from .._machine import MachineTable
    from ._coverage import TransitionCoverage
    from ._models import ModelInstance, ModelRunner
    from ._probe_config import ProbeConfig

__all__ = [
    "ERROR_FOR",
    "EXPLICIT_REASONS",
    "KIND_OF_ERROR",
    "PROBE_HOLD",
    "PROBE_HOLD_UNITS",
    "PROBE_TOOL_HOLD",
    "PROBE_TOOL_HOLD_UNITS",
    "Prediction",
    "compare_error",
]

EXPLICIT_REASONS: Final[tuple[CancellationReason, ...]] = tuple(
    reason for reason in CancellationReason if reason not in LIFECYCLE_REASONS
)
"""Every reason ``cancel()`` accepts (``RUN_FINISHED`` and ``PARENT_ENDED`` are the lifecycle's
own)."""

_EVENT_FOR_REASON: Final[Mapping[CancellationReason, LifecycleEvent]] = MappingProxyType(
    {
        reason: {
            CancellationReason.DEADLINE_EXCEEDED: LifecycleEvent.TIME_OUT,
            CancellationReason.BUDGET_EXHAUSTED: LifecycleEvent.EXHAUST_BUDGET,
        }.get(reason, LifecycleEvent.CANCEL)
        for reason in EXPLICIT_REASONS
    }
)
"""The lifecycle event an explicit cancellation with each reason is (spec: "produce CANCELLED")."""

ERROR_FOR: Final[Mapping[RunState, type[RunTerminated]]] = MappingProxyType(
    {
        RunState.SUCCESS: RunFinished,
        RunState.FAILED: RunFinished,
        RunState.CANCELLED: RunCancelled,
        RunState.TIMED_OUT: RunTimedOut,
        RunState.BUDGET_EXHAUSTED: BudgetExhausted,
    }
)
"""The error a gate raises once the run has each terminal outcome."""

KIND_OF_ERROR: Final[Mapping[type[RunTerminated], FailureKind]] = MappingProxyType(
    {
        RunTimedOut: FailureKind.DEADLINE_EXCEEDED,
        BudgetExhausted: FailureKind.BUDGET_EXHAUSTED,
        RunCancelled: FailureKind.CANCELLED,
        RunFinished: FailureKind.CANCELLED,
    }
)
"""How the executor classifies a ``RunTerminated`` an attempt raised: never a retryable kind."""

PROBE_HOLD: Final = from_units(5)
"""The ``max_cost`` a probe's Model call holds: five picodollars."""
PROBE_HOLD_UNITS: Final = 5
PROBE_TOOL_HOLD: Final = from_units(2)
"""The ``max_cost`` a probe's Tool call holds under a money limit (a run with one must give
every call's worst case): two picodollars, never settled, so it stays charged."""
PROBE_TOOL_HOLD_UNITS: Final = 2

_TOKEN_LIMITS: Final = (
    BudgetDimension.INPUT_TOKENS,
    BudgetDimension.OUTPUT_TOKENS,
    BudgetDimension.TOTAL_TOKENS,
)


@final
class Prediction:
    """The lifecycle and budget models and the reference of one probe (see the module docstring).

    ``ref`` is the reference; the retry model of an execution is stepped through :meth:`take`.
    """

    __slots__ = ("_budget", "_life", "config", "coverage", "ref")

    def __init__(
        self,
        config: ProbeConfig,
        models: ModelRunner,
        coverage: TransitionCoverage | None,
    ) -> None:
        self.config = config
        self.coverage = coverage
        self.ref = Reference()
        self._life = models.new(LIFECYCLE)
        self._budget = models.new(BUDGET)

    @property
    def life_state(self) -> RunState:
        state = self._life.state
        assert isinstance(state, RunState)
        return state

    @property
    def budget_state(self) -> BudgetState:
        state = self._budget.state
        assert isinstance(state, BudgetState)
        return state

    def take(
        self,
        model: ModelInstance,
        table: MachineTable[Any, Any],
        event: enum.Enum,
        guard: bool | None,
    ) -> bool:
        """Fire on the model; True if it moved, False if its final state absorbed the event."""
        before = model.state
        after = model.fire(event, guard)
        if after is None:
            if before not in table.terminal:
                raise disagree(
                    f"{table.name} model refused {event.value} (guard={guard}) "
                    f"in non-final state {before.name}"
                )
            return False
        row = table.row(before, event, guard)
        if row is None or row.target is not after:
            raise disagree(f"{table.name} model moved {before.name} -> {after.name} off the table")
        if self.coverage is not None:
            self.coverage.record(table, row)
        return True

    # -- endings and gates -------------------------------------------------------------------------

    def end(self, event: LifecycleEvent, signal: CancellationReason, reason: str | None) -> bool:
        """Predict an ending: the model decides whether it wins; the reference keeps its data."""
        if not self.take(self._life, LIFECYCLE, event, None):
            return False
        self.ref.termination = (self.life_state, reason, self.ref.now_ns)
        self.ref.first_reason = signal
        return True

    def cancel(self, reason: CancellationReason) -> bool:
        """Predict ``cancel(reason)``: whether it ends the run."""
        return self.end(_EVENT_FOR_REASON[reason], reason, f"cancelled: {reason.name}")

    def live(self) -> bool:
        """Whether a gate read now would pass: the model is RUNNING and the deadline is ahead."""
        return self.life_state is RunState.RUNNING and self.ref.now_ns < self.config.deadline_ns

    def gate(self) -> type[RunTerminated] | None:
        """Predict a gate: None if it passes, else the error (recording TIMED_OUT if first)."""
        if self.life_state is RunState.RUNNING:
            if self.ref.now_ns < self.config.deadline_ns:
                return None
            self.end(LifecycleEvent.TIME_OUT, CancellationReason.DEADLINE_EXCEEDED, None)
        return ERROR_FOR[self.life_state]

    def _refuse_budget(self, event: BudgetEvent, dimension: BudgetDimension) -> type[RunTerminated]:
        """Predict a budget refusal: ``event`` with within_limits=False, then exhaust_budget."""
        if self.take(self._budget, BUDGET, event, False):
            self.ref.dimension = dimension
        self.end(LifecycleEvent.EXHAUST_BUDGET, CancellationReason.BUDGET_EXHAUSTED, None)
        return ERROR_FOR[self.life_state]

    def _grant(self) -> None:
        self.take(self._budget, BUDGET, BudgetEvent.RESERVE, True)

    @property
    def cost_limit_units(self) -> int | None:
        """The money limit in picodollars (rounded up, as the run does), or ``None``."""
        cost = self.config.limits.cost
        return None if cost is None else to_units(cost, rounding="up")

    def _money_refuses(self, hold: int) -> bool:
        """Whether holding ``hold`` more would take settled + held past the money limit."""
        limit = self.cost_limit_units
        return limit is not None and self.ref.cost_settled + money_held(self.ref) + hold > limit

    @property
    def tool_hold_units(self) -> int:
        """What a Tool call holds: ``PROBE_TOOL_HOLD_UNITS`` under a money limit, else nothing."""
        limited = self.cost_limit_units is not None
        return PROBE_TOOL_HOLD_UNITS if limited else 0

    # -- reservations and usage --------------------------------------------------------------------

    def reserve_model(self, least: int | None = None) -> type[RunTerminated] | None:
        """Predict ``reserve_model_call()``: None if granted, else the error it raises.

        ``least`` (units): a partial hold (``min_cost``) of the probe's hold: under a money limit
        as much of it as the money left pays for, refused on ``COST`` only below ``least``;
        without one, the whole hold. The amount granted is the reference's newest hold."""
        expected = self.gate()
        if expected is not None:
            return expected
        ref, limits = self.ref, self.config.limits
        if ref.model_calls >= limits.model_calls:
            return self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.MODEL_CALLS)
        hold = PROBE_HOLD_UNITS
        granted = hold
        limit = self.cost_limit_units
        if limit is not None:
            granted = min(hold, limit - ref.cost_settled - money_held(ref))
            if granted < (hold if least is None else least):
                return self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.COST)
        self._grant()
        ref.model_calls += 1
        ref.holds.append(granted)
        return None

    def reserve_tool(self, tool: str) -> type[RunTerminated] | None:
        """Predict ``reserve_tool_call(tool)``: None if granted, else the error it raises."""
        expected = self.gate()
        if expected is not None:
            return expected
        limits, ref = self.config.limits, self.ref
        used = ref.per_tool.get(tool, 0)
        if sum(ref.per_tool.values()) >= limits.tool_calls:
            return self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.TOOL_CALLS)
        if used >= tool_limit(limits, tool):
            return self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.PER_TOOL_CALLS)
        hold = self.tool_hold_units
        if self._money_refuses(hold):  # named only when every call counter had room
            return self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.COST)
        self._grant()
        ref.per_tool[tool] = used + 1
        ref.tool_held += hold
        return None

    def reserve_bytes(self, n: int) -> type[RunTerminated] | None:
        """Predict ``reserve_bytes(n)``: None if granted, else the error it raises."""
        expected = self.gate()
        if expected is not None:
            return expected
        if self.ref.run_bytes + n > self.config.limits.run_bytes:
            return self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.RUN_BYTES)
        self._grant()
        self.ref.run_bytes += n
        return None

    def record_usage(self, input_tokens: int, output_tokens: int) -> None:
        """Predict ``record_token_usage``: recorded even past a limit, which exhausts the budget."""
        ref, limits = self.ref, self.config.limits
        ref.input_tokens += input_tokens
        ref.output_tokens += output_tokens
        used = (ref.input_tokens, ref.output_tokens, ref.input_tokens + ref.output_tokens)
        allowed = (limits.input_tokens, limits.output_tokens, limits.total_tokens)
        for dimension, count, limit in zip(_TOKEN_LIMITS, used, allowed, strict=True):
            if count > limit:  # the first limit passed: input, then output, then total
                self._refuse_budget(BudgetEvent.RECORD_USAGE, dimension)
                return
        self.take(self._budget, BUDGET, BudgetEvent.RECORD_USAGE, True)

    def settle(self, input_tokens: int, output_tokens: int, cost_units: int) -> None:
        """Predict the settle of the oldest hold: its cost and tokens recorded even past a limit
        (which exhausts the budget), its hold released."""
        ref, limits = self.ref, self.config.limits
        ref.cost_settled += cost_units
        ref.holds.pop(0)
        ref.input_tokens += input_tokens
        ref.output_tokens += output_tokens
        used = (ref.input_tokens, ref.output_tokens, ref.input_tokens + ref.output_tokens)
        allowed = (limits.input_tokens, limits.output_tokens, limits.total_tokens)
        for dimension, count, limit in zip(_TOKEN_LIMITS, used, allowed, strict=True):
            if count > limit:  # the first limit passed: input, then output, then total
                self._refuse_budget(BudgetEvent.SETTLE, dimension)
                return
        cost_limit = self.cost_limit_units
        if cost_limit is not None and ref.cost_settled + money_held(ref) > cost_limit:
            self._refuse_budget(BudgetEvent.SETTLE, BudgetDimension.COST)
            return
        self.take(self._budget, BUDGET, BudgetEvent.SETTLE, True)

    def reserve_capacity(self, n: int) -> bool:
        """Predict ``RunCapacityCounter.try_reserve(n)``: whether it is granted."""
        limit = self.config.capacity_bytes
        assert limit is not None
        granted = self.ref.capacity_used + n <= limit
        if granted:
            self.ref.capacity_used += n
        return granted

    # -- the explorer's view -----------------------------------------------------------------------

    def abstract(self) -> tuple[object, ...]:
        """The run's abstract state: counters capped at limit + 1, frozen ones forgotten."""
        ref, limits = self.ref, self.config.limits
        tokens = (
            min(ref.input_tokens, limits.input_tokens + 1),
            min(ref.output_tokens, limits.output_tokens + 1),
            min(ref.input_tokens + ref.output_tokens, limits.total_tokens + 1),
        )
        past = ref.now_ns >= self.config.deadline_ns
        if self.life_state is RunState.RUNNING:
            counters: tuple[object, ...] = (
                ref.model_calls,
                tuple(sorted(ref.per_tool.items())),
                ref.run_bytes,
            )
        else:
            counters = ()
        limit = self.cost_limit_units
        # Under a money limit the guards ahead read settled + the Tool holds (never released) and
        # the Model holds (each PROBE_HOLD_UNITS, released by a settle): within the limit while
        # the budget is ACTIVE, capped past it like the token counters.
        money = None if limit is None else min(ref.cost_settled + ref.tool_held, limit + 1)
        return (
            self.life_state,
            self.budget_state,
            counters,
            money,
            len(ref.holds),
            tokens,
            past,
            ref.first_reason,
            ref.dimension,
        )


def compare_error(
    what: str,
    expected: type[RunTerminated] | None,
    got: BaseException | None,
    boundary: Boundary | None,
    *,
    termination: RunTermination | None,
    dimension: BudgetDimension | None,
) -> None:
    """Hold the error a runtime call raised (``got``) to the predicted one (``expected``).

    The error must be of exactly the predicted type, carry the run's ``termination``, name
    ``boundary`` (when given) and, for a budget's, the reference's ``dimension``.
    """
    if expected is None:
        if got is not None:
            raise disagree(
                f"{what}: expected to pass, runtime raised {got!r}",
                model="passes",
                runtime=repr(got),
            )
        return
    if got is None:
        raise disagree(
            f"{what}: expected {expected.__name__}, runtime let it pass",
            model=f"raises {expected.__name__}",
            runtime="passes",
        )
    if type(got) is not expected:
        raise disagree(
            f"{what}: expected {expected.__name__}, runtime raised {got!r}",
            model=f"raises {expected.__name__}",
            runtime=repr(got),
        )
    assert isinstance(got, RunTerminated)
    if got.termination is not termination:
        raise disagree(f"{what}: the error carries another termination than the run's")
    if boundary is not None and got.boundary is not boundary:
        raise disagree(f"{what}: error names boundary {got.boundary}, expected {boundary}")
    if isinstance(got, BudgetExhausted) and got.dimension is not dimension:
        raise disagree(f"{what}: dimension {got.dimension}, expected {dimension}")
