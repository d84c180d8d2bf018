"""The run probe every model check drives: the oracle.

Theory of operation. A :class:`RunProbe` owns one real run -- a ``RunContext`` on a
``ManualClock``, its ``HarnessRetryExecutor`` and optionally a ``RunCapacityCounter`` -- and,
beside it, three things that are *not* the code under test:

* the python-statemachine models generated from ``model/`` (``LifecycleModel``, ``BudgetModel``
  and one ``RetryModel`` per retry execution): they decide every **state**;
* a small **reference** of plain counters and limits: it decides every **guard** (``within_limits``,
  ``retry_allowed``) and every datum (usage, the first reason, the termination's timestamp);
* the **invariants**, which are the spec's sentences (below).

Each public step (``reserve_tool("search")``, ``cancel(reason)``, ``execute(policy, script)``,
...) first predicts: it works out from the model's state and the reference which model event the
step is (a refused reservation is budget ``reserve`` with ``within_limits=False`` and then
lifecycle ``exhaust_budget``; a ``succeed()`` after the run ended is an event the final state
absorbs), fires it on the model, and records the row taken in a :class:`TransitionCoverage`. Then
it applies the step to the real run, and compares: the runtime's state with the model's, its
answer (granted, refused with which error, changed or not) with the prediction, and then every
invariant. Any difference raises :class:`Disagreement`, an ``AssertionError``, so pytest and
Hypothesis treat it as a failed check and Hypothesis shrinks the steps that led to it.

The invariants, in the spec's words:

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
  its policy allows, and the stop reason and what is re-raised are the table's answer.

Which scenarios a step exercises. Each step is appended to :attr:`RunProbe.trail` *before* it is
applied, with the spec scenarios it exercises (:meth:`RunProbe._scenarios`): decided from the
model's state before the step, the kind of step and the reference -- a Tool reservation on a
live run is "Per-Tool budget is exhausted", a late ``succeed()`` after budget exhaustion is
"Budget exhaustion wins a terminal race", and so on; a late ending after an outcome no scenario
names (``FAILED``, a cancellation other than the client's) counts for "Success wins a terminal
race", the spec's scenario of a first outcome staying. So when a step raises, the last step not
taken inside a retry execution (:attr:`RunProbe.culprit`) is the one that disagreed, and its
scenarios are the ones to charge.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, final

from .. import (
    AttemptOutcome,
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    Deadline,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunCancelled,
    RunCapacityCounter,
    RunContext,
    RunFinished,
    RunState,
    RunTerminated,
    RunTimedOut,
    StopReason,
)
from .._generated.tables import (
    BUDGET,
    LIFECYCLE,
    RETRY,
    BudgetEvent,
    BudgetState,
    LifecycleEvent,
    RetryEvent,
    RetryState,
)
from ._disagreement import Disagreement
from ._models import ModelTiming
from ._spec_scenarios import (
    BUDGET_WINS,
    CAPACITY,
    CLIENT_DISCONNECTS,
    DEADLINE_BEFORE_TOOL,
    PER_TOOL,
    RETRY_CANCELLED,
    RETRY_TOOL_FAILS,
    RETRY_TRANSPORT,
    SUCCESS_WINS,
    TOKENS_EXCEED,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from .. import Registration, RunTermination
    from .._backend import RunStore
    from .._machine import MachineTable
    from ._coverage import TransitionCoverage
    from ._models import ModelInstance, ModelRunner
    from ._spec_scenarios import SpecScenario

__all__ = [
    "EXPLICIT_REASONS",
    "THRICE",
    "Attempt",
    "Effect",
    "ProbeConfig",
    "ProbeStep",
    "RunProbe",
    "policies_with_thrice",
]

_now_ns = time.perf_counter_ns

EXPLICIT_REASONS: Final[tuple[CancellationReason, ...]] = tuple(
    reason for reason in CancellationReason if reason is not CancellationReason.RUN_FINISHED
)
"""Every reason ``cancel()`` accepts (``RUN_FINISHED`` is the lifecycle's own)."""

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

_ERROR_FOR: Final[Mapping[RunState, type[RunTerminated]]] = MappingProxyType(
    {
        RunState.SUCCESS: RunFinished,
        RunState.FAILED: RunFinished,
        RunState.CANCELLED: RunCancelled,
        RunState.TIMED_OUT: RunTimedOut,
        RunState.BUDGET_EXHAUSTED: BudgetExhausted,
    }
)
"""The error a gate raises once the run has each terminal outcome."""

_KIND_OF_ERROR: Final[Mapping[type[RunTerminated], FailureKind]] = MappingProxyType(
    {
        RunTimedOut: FailureKind.DEADLINE_EXCEEDED,
        BudgetExhausted: FailureKind.BUDGET_EXHAUSTED,
        RunCancelled: FailureKind.CANCELLED,
        RunFinished: FailureKind.CANCELLED,
    }
)
"""How the executor classifies a ``RunTerminated`` an attempt raised: never a retryable kind."""


# --- the scripted attempts of a retry execution ---------------------------------------------------


class Effect(enum.Enum):
    """What a scripted attempt does to the run before it returns or raises."""

    NONE = "none"
    CANCEL = "cancel"
    """``ctx.cancellation.cancel(reason)``: the run is cancelled before the next attempt."""
    PASS_DEADLINE = "pass_deadline"
    """The clock reaches the run's deadline."""
    MODEL_CALL = "model_call"
    """``ctx.reserve_model_call()``; a refusal is raised as the attempt's failure."""
    FINISH_RUN = "finish_run"
    """``ctx.lifecycle.succeed()``: the owner records success while the attempt is in flight."""


@final
@dataclass(frozen=True, slots=True)
class Attempt:
    """One scripted invocation of a retried operation."""

    failure: FailureKind | None = None  # None: the operation returns
    effect: Effect = Effect.NONE
    reason: CancellationReason = CancellationReason.CLIENT_DISCONNECTED  # for Effect.CANCEL

    def __str__(self) -> str:
        what = "return" if self.failure is None else f"raise {self.failure.name}"
        if self.effect is Effect.NONE:
            return what
        if self.effect is Effect.CANCEL:
            return f"cancel({self.reason.name}); {what}"
        return f"{self.effect.value}; {what}"


_RETURN = Attempt()


@final
@dataclass(frozen=True, slots=True)
class ProbeStep:
    """One step a probe took: what it was, and the spec scenarios it exercises."""

    action: str
    scenarios: frozenset[SpecScenario]
    nested: bool = False  # taken by an attempt inside a retry execution


_ENDINGS: Final = frozenset({"succeed", "fail", "cancel", "record_usage"})
"""Steps that may end a run (``record_token_usage`` past a limit exhausts the budget)."""
_GATES: Final = frozenset({"check", "reserve_model", "reserve_tool", "reserve_bytes", "execute"})
"""Steps that pass a gate, which refuses them once the run is over or past its deadline."""
_TOKENS: Final = frozenset(
    {BudgetDimension.INPUT_TOKENS, BudgetDimension.OUTPUT_TOKENS, BudgetDimension.TOTAL_TOKENS}
)
_FIRST_OUTCOME_KEPT: Final[Mapping[RunState, SpecScenario]] = MappingProxyType(
    {
        RunState.SUCCESS: SUCCESS_WINS,
        # The spec's scenario of a first outcome staying, for the outcomes none names.
        RunState.FAILED: SUCCESS_WINS,
        RunState.CANCELLED: SUCCESS_WINS,
        RunState.BUDGET_EXHAUSTED: BUDGET_WINS,
        RunState.TIMED_OUT: DEADLINE_BEFORE_TOOL,
    }
)
"""A later ending after each first outcome: the scenario that says the first one stays."""
_LIVE_STEP: Final[Mapping[str, SpecScenario]] = MappingProxyType(
    {
        "succeed": SUCCESS_WINS,
        "cancel": CLIENT_DISCONNECTS,  # with CLIENT_DISCONNECTED only
        "reserve_tool": PER_TOOL,
        "record_usage": TOKENS_EXCEED,
    }
)
"""The scenario a step on a live run, before its deadline, exercises."""


# --- the probe ------------------------------------------------------------------------------------


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


@final
class _Callback:
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


@dataclass(slots=True)
class _Reference:
    """The expected data: plain counters and limits, independent of the code under test."""

    now_ns: int = 0
    model_calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    run_bytes: int = 0
    capacity_used: int = 0
    dimension: BudgetDimension | None = None
    # (state, reason or None when any non-blank reason will do, at_ns) of the first outcome
    termination: tuple[RunState, str | None, int] | None = None
    first_reason: CancellationReason | None = None
    # the attempts of finished executions (the executor records an execution when it ends)
    attempts: list[tuple[str, int, AttemptOutcome, FailureKind | None]] = field(
        default_factory=list
    )
    # the attempts of the execution in flight
    pending: list[tuple[str, int, AttemptOutcome, FailureKind | None]] = field(default_factory=list)


def _tool_limit(limits: BudgetLimits, tool: str) -> int:
    return limits.per_tool_overrides.get(tool, limits.per_tool_calls)


def _fail(message: str, *, model: object = None, runtime: object = None) -> Disagreement:
    return Disagreement(
        message,
        model=None if model is None else str(model),
        runtime=None if runtime is None else str(runtime),
    )


@final
class RunProbe:
    """One real run, its models and its reference, stepped together (see the module docstring)."""

    __slots__ = (
        "_budget",
        "_callbacks",
        "_executions",
        "_in_execution",
        "_life",
        "_loop",
        "_records_checked",
        "_seen",
        "capacity",
        "checking",
        "clock",
        "config",
        "coverage",
        "ctx",
        "executor",
        "models",
        "on_attempt",
        "ref",
        "timing",
        "trail",
    )

    def __init__(
        self,
        config: ProbeConfig,
        *,
        models: ModelRunner,
        coverage: TransitionCoverage | None = None,
        timing: ModelTiming | None = None,
    ) -> None:
        self.config = config
        self.models = models
        self.coverage = coverage
        self.timing = ModelTiming() if timing is None else timing
        self.ref = _Reference()
        started = _now_ns()
        self.clock = ManualClock()
        self.ctx = config.new_run(self.clock)
        self.executor = HarnessRetryExecutor(self.ctx)
        self.capacity = config.new_capacity()
        self.timing.runtime_ns += _now_ns() - started
        self._life = models.new(LIFECYCLE)
        self._budget = models.new(BUDGET)
        self._seen: RunTermination | None = None
        self._callbacks: list[_Callback] = []
        self._executions: list[tuple[RetryPolicy, int]] = []  # (policy, attempts) per execution
        self._records_checked = 0  # executions whose records check_invariants has compared
        self._loop: asyncio.AbstractEventLoop | None = None  # made by the first async execution
        # Called with the attempt number when an operation is invoked (the explorer listens).
        self.on_attempt: Callable[[int], None] | None = None
        # False while the explorer replays a prefix it checked before: each step still compares
        # the runtime's answer with the prediction, but the invariants wait for the last step.
        self.checking = True
        # Every step taken, appended before it is applied: after a raise, the last is the culprit.
        self.trail: list[ProbeStep] = []
        self._in_execution = False
        for _ in range(config.callbacks):
            callback = _Callback(self.ctx)
            self._callbacks.append(callback)
            callback.registration = self.ctx.cancellation.register(callback)

    # -- what the model and the reference say ------------------------------------------------------

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

    def _take(
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
                raise _fail(
                    f"{table.name} model refused {event.value} (guard={guard}) "
                    f"in non-final state {before.name}"
                )
            return False
        row = table.row(before, event, guard)
        if row is None or row.target is not after:
            raise _fail(f"{table.name} model moved {before.name} -> {after.name} off the table")
        if self.coverage is not None:
            self.coverage.record(table, row)
        return True

    def _end(self, event: LifecycleEvent, signal: CancellationReason, reason: str | None) -> bool:
        """Predict an ending: the model decides whether it wins; the reference keeps its data."""
        if not self._take(self._life, LIFECYCLE, event, None):
            return False
        self.ref.termination = (self.life_state, reason, self.ref.now_ns)
        self.ref.first_reason = signal
        return True

    def _live(self) -> bool:
        """Whether a gate read now would pass: the model is RUNNING and the deadline is ahead."""
        return self.life_state is RunState.RUNNING and self.ref.now_ns < self.config.deadline_ns

    def _gate(self) -> type[RunTerminated] | None:
        """Predict a gate: None if it passes, else the error (recording TIMED_OUT if first)."""
        if self.life_state is RunState.RUNNING:
            if self.ref.now_ns < self.config.deadline_ns:
                return None
            self._end(LifecycleEvent.TIME_OUT, CancellationReason.DEADLINE_EXCEEDED, None)
        return _ERROR_FOR[self.life_state]

    def _refuse_budget(self, event: BudgetEvent, dimension: BudgetDimension) -> type[RunTerminated]:
        """Predict a budget refusal: ``event`` with within_limits=False, then exhaust_budget."""
        if self._take(self._budget, BUDGET, event, False):
            self.ref.dimension = dimension
        self._end(LifecycleEvent.EXHAUST_BUDGET, CancellationReason.BUDGET_EXHAUSTED, None)
        return _ERROR_FOR[self.life_state]

    def _note(self, kind: str, action: str, **about: Any) -> None:
        """Append the step about to be applied, with the scenarios it exercises."""
        self.trail.append(ProbeStep(action, self._scenarios(kind, **about), self._in_execution))

    @property
    def culprit(self) -> ProbeStep | None:
        """The step a raise came from: the last one not taken inside a retry execution (a
        disagreement inside an attempt surfaces when the execution ends)."""
        return next((step for step in reversed(self.trail) if not step.nested), None)

    def _scenarios(
        self,
        kind: str,
        *,
        reason: CancellationReason | None = None,
        policy: RetryPolicy | None = None,
        script: Sequence[Attempt] = (),
    ) -> frozenset[SpecScenario]:
        """The spec scenarios a step of ``kind`` exercises, from the state before it."""
        ref, state = self.ref, self.life_state
        found: SpecScenario | None = None
        if kind == "reserve_capacity":
            found = CAPACITY
        elif state is RunState.RUNNING:
            if kind in _GATES and ref.now_ns >= self.config.deadline_ns:
                found = DEADLINE_BEFORE_TOOL
            elif kind == "execute" and policy is not None:
                return _retry_scenarios(policy, script)
            else:
                found = _LIVE_STEP.get(kind)
                if kind == "cancel" and reason is not CancellationReason.CLIENT_DISCONNECTED:
                    found = None
        # The run is over: an ending must not replace the first outcome, a gate must refuse.
        elif (
            state is RunState.CANCELLED
            and ref.first_reason is CancellationReason.CLIENT_DISCONNECTED
            and kind in _ENDINGS | _GATES
        ):
            found = CLIENT_DISCONNECTS
        elif kind in _ENDINGS:
            found = _FIRST_OUTCOME_KEPT.get(state)
        elif kind in _GATES and state is RunState.TIMED_OUT:
            found = DEADLINE_BEFORE_TOOL
        elif kind in _GATES and state is RunState.BUDGET_EXHAUSTED and ref.dimension in _TOKENS:
            found = TOKENS_EXCEED  # "the Core rejects the next controlled operation"
        return frozenset() if found is None else frozenset({found})

    # -- comparing -------------------------------------------------------------------------------

    def _compare_error(
        self,
        what: str,
        expected: type[RunTerminated] | None,
        got: BaseException | None,
        boundary: Boundary | None,
    ) -> None:
        if expected is None:
            if got is not None:
                raise _fail(
                    f"{what}: expected to pass, runtime raised {got!r}",
                    model="passes",
                    runtime=repr(got),
                )
            return
        if got is None:
            raise _fail(
                f"{what}: expected {expected.__name__}, runtime let it pass",
                model=f"raises {expected.__name__}",
                runtime="passes",
            )
        if type(got) is not expected:
            raise _fail(
                f"{what}: expected {expected.__name__}, runtime raised {got!r}",
                model=f"raises {expected.__name__}",
                runtime=repr(got),
            )
        assert isinstance(got, RunTerminated)
        if got.termination is not self.ctx.lifecycle.termination:
            raise _fail(f"{what}: the error carries another termination than the run's")
        if boundary is not None and got.boundary is not boundary:
            raise _fail(f"{what}: error names boundary {got.boundary}, expected {boundary}")
        if isinstance(got, BudgetExhausted) and got.dimension is not self.ref.dimension:
            raise _fail(f"{what}: dimension {got.dimension}, expected {self.ref.dimension}")

    def _call(self, fn: Callable[[], object]) -> BaseException | None:
        """Run one runtime call, timed; the RunTerminated it raised, if any."""
        timing = self.timing
        started = _now_ns()
        try:
            fn()
        except RunTerminated as error:
            return error
        finally:
            timing.runtime_ns += _now_ns() - started
            timing.runtime_calls += 1
        return None

    # -- the steps ---------------------------------------------------------------------------------

    def succeed(self) -> None:
        """The run's owner records success."""
        self._note("succeed", "succeed()")
        expected = self._end(LifecycleEvent.SUCCEED, CancellationReason.RUN_FINISHED, "succeeded")
        self._finish("succeed()", expected, self.ctx.lifecycle.succeed)

    def fail(self, reason: str = "the operation failed") -> None:
        """The run's owner (an exception handler) records failure."""
        self._note("fail", f"fail({reason!r})")
        expected = self._end(LifecycleEvent.FAIL, CancellationReason.RUN_FINISHED, reason)
        self._finish(f"fail({reason!r})", expected, lambda: self.ctx.lifecycle.fail(reason))

    def _finish(self, what: str, expected: bool, call: Callable[[], Any]) -> None:
        started = _now_ns()
        result = call()
        self.timing.runtime_ns += _now_ns() - started
        self.timing.runtime_calls += 1
        if result.changed is not expected:
            raise _fail(
                f"{what}: changed={result.changed}, the model says {expected}",
                model=f"changed={expected}",
                runtime=f"changed={result.changed}",
            )
        if result.termination is not self.ctx.lifecycle.termination:
            raise _fail(f"{what}: returned another termination than the run's")
        self._checked()

    def cancel(self, reason: CancellationReason) -> None:
        """Cancellation is signalled with ``reason``."""
        self._note("cancel", f"cancel({reason.name})", reason=reason)
        expected = self._end(_EVENT_FOR_REASON[reason], reason, f"cancelled: {reason.name}")
        started = _now_ns()
        won = self.ctx.cancellation.cancel(reason)
        self.timing.runtime_ns += _now_ns() - started
        self.timing.runtime_calls += 1
        if won is not expected:
            raise _fail(
                f"cancel({reason.name}) returned {won}, the model says {expected}",
                model=expected,
                runtime=won,
            )
        self._checked()

    def advance(self, ns: int) -> None:
        """The clock moves forward ``ns`` nanoseconds (no boundary looks at it yet)."""
        self._note("advance", f"clock.advance_ns({ns})")
        self.ref.now_ns += ns
        self.clock.advance_ns(ns)
        self._checked()

    def reach_deadline(self) -> None:
        """The clock moves to the deadline exactly (or stays, once past it)."""
        self.advance(max(0, self.config.deadline_ns - self.ref.now_ns))

    def check(self, boundary: Boundary) -> None:
        """``ctx.check(boundary)``: the gate."""
        self._note("check", f"check({boundary.name})")
        expected = self._gate()
        got = self._call(lambda: self.ctx.check(boundary))
        self._compare_error(f"check({boundary.name})", expected, got, boundary)
        self._checked()

    def reserve_model(self) -> RunTerminated | None:
        """``ctx.reserve_model_call()``; returns what it raised."""
        self._note("reserve_model", "reserve_model_call()")
        expected = self._gate()
        if expected is None:
            if self.ref.model_calls < self.config.limits.model_calls:
                self._take(self._budget, BUDGET, BudgetEvent.RESERVE, True)
                self.ref.model_calls += 1
            else:
                expected = self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.MODEL_CALLS)
        got = self._call(self.ctx.reserve_model_call)
        self._compare_error("reserve_model_call()", expected, got, Boundary.MODEL)
        self._checked()
        assert got is None or isinstance(got, RunTerminated)
        return got

    def reserve_tool(self, tool: str) -> RunTerminated | None:
        """``ctx.reserve_tool_call(tool)``; returns what it raised."""
        self._note("reserve_tool", f"reserve_tool_call({tool!r})")
        expected = self._gate()
        if expected is None:
            limits = self.config.limits
            used = self.ref.per_tool.get(tool, 0)
            if sum(self.ref.per_tool.values()) >= limits.tool_calls:
                expected = self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.TOOL_CALLS)
            elif used >= _tool_limit(limits, tool):
                expected = self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.PER_TOOL_CALLS)
            else:
                self._take(self._budget, BUDGET, BudgetEvent.RESERVE, True)
                self.ref.per_tool[tool] = used + 1
        got = self._call(lambda: self.ctx.reserve_tool_call(tool))
        self._compare_error(f"reserve_tool_call({tool!r})", expected, got, Boundary.TOOL)
        self._checked()
        assert got is None or isinstance(got, RunTerminated)
        return got

    def reserve_bytes(self, n: int) -> RunTerminated | None:
        """``ctx.reserve_bytes(n)``; returns what it raised."""
        self._note("reserve_bytes", f"reserve_bytes({n})")
        expected = self._gate()
        if expected is None:
            if self.ref.run_bytes + n <= self.config.limits.run_bytes:
                self._take(self._budget, BUDGET, BudgetEvent.RESERVE, True)
                self.ref.run_bytes += n
            else:
                expected = self._refuse_budget(BudgetEvent.RESERVE, BudgetDimension.RUN_BYTES)
        got = self._call(lambda: self.ctx.reserve_bytes(n))
        self._compare_error(f"reserve_bytes({n})", expected, got, Boundary.CAPACITY)
        self._checked()
        assert got is None or isinstance(got, RunTerminated)
        return got

    def record_usage(self, input_tokens: int, output_tokens: int) -> None:
        """``ctx.record_token_usage(...)``: the actual usage is recorded, even past a limit."""
        self._note("record_usage", f"record_token_usage({input_tokens}, {output_tokens})")
        ref, limits = self.ref, self.config.limits
        ref.input_tokens += input_tokens
        ref.output_tokens += output_tokens
        total = ref.input_tokens + ref.output_tokens
        if ref.input_tokens > limits.input_tokens:
            self._refuse_budget(BudgetEvent.RECORD_USAGE, BudgetDimension.INPUT_TOKENS)
        elif ref.output_tokens > limits.output_tokens:
            self._refuse_budget(BudgetEvent.RECORD_USAGE, BudgetDimension.OUTPUT_TOKENS)
        elif total > limits.total_tokens:
            self._refuse_budget(BudgetEvent.RECORD_USAGE, BudgetDimension.TOTAL_TOKENS)
        else:
            self._take(self._budget, BUDGET, BudgetEvent.RECORD_USAGE, True)
        got = self._call(
            lambda: self.ctx.record_token_usage(
                input_tokens=input_tokens, output_tokens=output_tokens
            )
        )
        if got is not None:
            raise _fail(f"record_token_usage raised {got!r}; it records and never raises")
        self._checked()

    def reserve_capacity(self, n: int) -> None:
        """``RunCapacityCounter.try_reserve(n)`` on the counter beside the run."""
        self._note("reserve_capacity", f"capacity.try_reserve({n})")
        counter, limit = self.capacity, self.config.capacity_bytes
        assert counter is not None, "the probe has no capacity counter"
        assert limit is not None
        expected = self.ref.capacity_used + n <= limit
        if expected:
            self.ref.capacity_used += n
        started = _now_ns()
        granted = counter.try_reserve(n)
        self.timing.runtime_ns += _now_ns() - started
        if granted is not expected:
            raise _fail(f"try_reserve({n}) returned {granted}, expected {expected}")
        self._checked()

    def register(self) -> None:
        """``ctx.cancellation.register(callback)``; runs at once if the run is already over."""
        self._note("register", "cancellation.register(callback)")
        callback = _Callback(self.ctx)
        self._callbacks.append(callback)
        started = _now_ns()
        callback.registration = self.ctx.cancellation.register(callback)
        self.timing.runtime_ns += _now_ns() - started
        self._checked()

    @property
    def callbacks(self) -> int:
        return len(self._callbacks)

    def unregister(self, index: int) -> None:
        """``Registration.unregister()`` of the callback registered ``index``-th."""
        self._note("unregister", f"registration[{index}].unregister()")
        callback = self._callbacks[index]
        expected = not callback.calls and not callback.removed
        assert callback.registration is not None
        removed = callback.registration.unregister()
        if removed is not expected:
            raise _fail(f"unregister() of callback {index} returned {removed}, expected {expected}")
        if removed:
            callback.removed = True
        self._checked()

    def close(self) -> None:
        """Close the event loop async executions ran on, if any."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    # -- a retry execution -------------------------------------------------------------------------

    def execute(
        self, policy_name: str, script: Sequence[Attempt], *, use_async: bool = False
    ) -> RetryState:
        """``executor.execute(policy, operation)``, the operation following ``script``.

        Past the script the operation returns. Returns the execution's final state.
        """
        policy = self.config.policies[policy_name]
        how = "execute_async" if use_async else "execute"
        attempts = ", ".join(str(attempt) for attempt in script) or "return"
        self._note("execute", f"{how}({policy_name!r}, [{attempts}])", policy=policy, script=script)
        retry = self.models.new(RETRY)
        self.ref.pending = []
        invoked: list[BaseException | object] = []  # what each invocation raised or returned
        problems: list[str] = []
        inner_ns = 0  # time the operation spent in the probe's own predictions, not the runtime

        def operation() -> object:
            nonlocal inner_ns
            started = _now_ns()
            try:
                return self._attempt(policy, retry, script, invoked, problems)
            finally:
                inner_ns += _now_ns() - started

        async def operation_async() -> object:
            return operation()

        started = _now_ns()
        result: object = None
        raised: BaseException | None = None
        self._in_execution = True
        try:
            if use_async:
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                execution = self.executor.execute_async(policy, operation_async)
                result = self._loop.run_until_complete(execution)
            else:
                result = self.executor.execute(policy, operation)
        except Exception as error:
            raised = error
        finally:
            self._in_execution = False
        self.timing.runtime_ns += _now_ns() - started - inner_ns
        self.timing.runtime_calls += 1
        if problems:
            raise _fail("; ".join(problems))
        if isinstance(raised, Disagreement):
            raise raised
        return self._settle(policy, retry, invoked, result, raised)

    def _attempt(
        self,
        policy: RetryPolicy,
        retry: ModelInstance,
        script: Sequence[Attempt],
        invoked: list[BaseException | object],
        problems: list[str],
    ) -> object:
        """The operation's body for invocation ``len(invoked) + 1``."""
        number = len(invoked) + 1
        if not self._live():
            problems.append(
                f"{policy.name}: attempt {number} was invoked although the run is "
                f"{self.life_state.name} (now {self.ref.now_ns} ns, deadline "
                f"{self.config.deadline_ns} ns): the gate must have refused it"
            )
        if self.on_attempt is not None:
            self.on_attempt(number)
        self._take(retry, RETRY, RetryEvent.ATTEMPT, None)
        step = script[number - 1] if number <= len(script) else _RETURN
        error: BaseException | None = None
        if step.effect is Effect.CANCEL:
            self.cancel(step.reason)
        elif step.effect is Effect.PASS_DEADLINE:
            self.reach_deadline()
        elif step.effect is Effect.MODEL_CALL:
            error = self.reserve_model()
        elif step.effect is Effect.FINISH_RUN:
            self.succeed()
        if error is None and step.failure is None:
            outcome = object()
            invoked.append(outcome)
            self.ref.pending.append((policy.name, number, AttemptOutcome.SUCCEEDED, None))
            self._take(retry, RETRY, RetryEvent.SUCCEED, None)
            return outcome
        if error is None:
            assert step.failure is not None
            error = HarnessFailure(step.failure, f"scripted attempt {number}")
            kind = step.failure
        else:
            assert isinstance(error, RunTerminated)
            kind = _KIND_OF_ERROR[type(error)]
        allowed = kind in policy.retryable and number < policy.max_attempts
        invoked.append(error)
        self.ref.pending.append((policy.name, number, AttemptOutcome.FAILED, kind))
        self._take(retry, RETRY, RetryEvent.FAIL, allowed)
        raise error

    def _settle(
        self,
        policy: RetryPolicy,
        retry: ModelInstance,
        invoked: list[BaseException | object],
        result: object,
        raised: BaseException | None,
    ) -> RetryState:
        """After the execution: predict the last gate, then compare everything it left."""
        what = f"execute({policy.name!r})"
        pending = self.ref.pending
        self.ref.attempts.extend(pending)
        self.ref.pending = []
        gate_error: type[RunTerminated] | None = None
        if retry.state in (RetryState.READY, RetryState.AWAITING_RETRY):
            # The executor made no further attempt: the gate must have refused one.
            gate_error = self._gate()
            if gate_error is None:
                raise _fail(f"{what}: stopped in {retry.state.name} although the gate passes")
            self._take(retry, RETRY, RetryEvent.STOP, None)
        state = retry.state
        assert isinstance(state, RetryState)
        records = self.executor.executions
        record = records[-1] if records else None
        if record is None or len(records) != len(self._executions) + 1:
            raise _fail(f"{what}: the executor did not record exactly one execution")
        self._executions.append((policy, len(record.attempts)))
        if record.state is not state:
            raise _fail(
                f"{what}: runtime ended in {record.state.name}, the model in {state.name}",
                model=state.name,
                runtime=record.state.name,
            )
        if state is RetryState.SUCCEEDED:
            expected_stop = StopReason.SUCCEEDED
            if raised is not None or not invoked or result is not invoked[-1]:
                raise _fail(f"{what}: expected the last attempt's result, got {raised or result!r}")
        elif state is RetryState.FAILED:
            last = invoked[-1]
            kind = pending[-1][3]
            expected_stop = (
                StopReason.ATTEMPTS_EXHAUSTED
                if kind in policy.retryable
                else StopReason.NOT_RETRYABLE
            )
            if raised is not last:
                raise _fail(f"{what}: expected the operation's own {last!r}, got {raised!r}")
        else:
            expected_stop = StopReason.RUN_TERMINATED
            self._compare_error(what, gate_error, raised, Boundary.RETRY)
            if record.termination is not self.ctx.lifecycle.termination:
                raise _fail(f"{what}: the record's termination is not the run's")
        if record.stop is not expected_stop:
            raise _fail(
                f"{what}: stop {record.stop.name}, expected {expected_stop.name}",
                model=expected_stop.name,
                runtime=record.stop.name,
            )
        if len(record.attempts) != len(invoked):
            raise _fail(
                f"{what}: {len(invoked)} invocations but {len(record.attempts)} attempt records"
            )
        self._checked()
        return state

    # -- the invariants ----------------------------------------------------------------------------

    def _checked(self) -> None:
        """After a step: the invariants, unless a replay of steps already checked is running."""
        if self.checking:
            self.check_invariants()

    def check_invariants(self) -> None:
        """Every invariant of the module docstring, on the run as it is now."""
        ctx, ref, limits = self.ctx, self.ref, self.config.limits
        lifecycle = ctx.lifecycle
        # A Run SHALL have exactly one terminal outcome, never replaced.
        if lifecycle.state is not self.life_state:
            raise _fail(
                f"lifecycle is {lifecycle.state.name}, the model {self.life_state.name}",
                model=self.life_state.name,
                runtime=lifecycle.state.name,
            )
        termination = lifecycle.termination
        if ref.termination is None:
            if termination is not None:
                raise _fail(f"a termination {termination!r} while the model is RUNNING")
        else:
            if termination is None:
                raise _fail("no termination although the model is terminal")
            if self._seen is None:
                self._seen = termination
            elif termination is not self._seen:
                raise _fail(
                    f"the first termination ({self._seen.state.name}) was replaced by "
                    f"{termination.state.name}",
                    model=repr(self._seen),
                    runtime=repr(termination),
                )
            state, reason, at_ns = ref.termination
            if termination.state is not state or termination.at_ns != at_ns:
                raise _fail(
                    f"termination {termination!r}, expected {state.name} at {at_ns} ns",
                    model=f"{state.name} at {at_ns} ns",
                    runtime=f"{termination.state.name} at {termination.at_ns} ns",
                )
            if (reason is not None and termination.reason != reason) or not termination.reason:
                raise _fail(f"termination reason {termination.reason!r}, expected {reason!r}")
        # The first cancellation reason is kept; the run is cancelled exactly when it is over.
        cancellation = ctx.cancellation
        if cancellation.reason is not ref.first_reason:
            raise _fail(f"cancellation reason {cancellation.reason}, expected {ref.first_reason}")
        if cancellation.is_cancelled is (ref.first_reason is None):
            raise _fail("is_cancelled disagrees with the run's terminal outcome")
        # Every callback ran exactly once, with the first reason, once the run is over.
        for number, callback in enumerate(self._callbacks):
            expected = [] if ref.first_reason is None or callback.removed else [ref.first_reason]
            if callback.calls != expected:
                raise _fail(f"callback {number} ran with {callback.calls}, expected {expected}")
            if not all(callback.terminal_at_call):
                raise _fail(f"callback {number} ran before the terminal outcome was recorded")
        # Budget: no counter past its limit but the actual token usage; totals consistent.
        budget = ctx.budget
        if budget.state is not self.budget_state:
            raise _fail(
                f"budget is {budget.state.name}, the model {self.budget_state.name}",
                model=self.budget_state.name,
                runtime=budget.state.name,
            )
        if budget.state is BudgetState.EXHAUSTED and termination is None:
            raise _fail("the budget is EXHAUSTED but the run goes on")
        usage = budget.snapshot()
        per_tool = dict(usage.per_tool_calls)
        if usage.tool_calls != sum(per_tool.values()):
            raise _fail(f"total Tool calls {usage.tool_calls} != sum per Tool {per_tool}")
        expected_usage = (
            ref.model_calls,
            ref.per_tool,
            ref.input_tokens,
            ref.output_tokens,
            ref.input_tokens + ref.output_tokens,
            ref.run_bytes,
            ref.dimension,
        )
        actual_usage = (
            usage.model_calls,
            per_tool,
            usage.input_tokens,
            usage.output_tokens,
            usage.total_tokens,
            usage.run_bytes,
            usage.exhausted,
        )
        if actual_usage != expected_usage:
            raise _fail(
                f"usage {actual_usage}, expected {expected_usage}",
                model=expected_usage,
                runtime=actual_usage,
            )
        if (
            usage.model_calls > limits.model_calls
            or usage.tool_calls > limits.tool_calls
            or usage.run_bytes > limits.run_bytes
            or any(count > _tool_limit(limits, tool) for tool, count in per_tool.items())
        ):
            raise _fail(f"a reservation passed its limit: {usage}")
        over_tokens = (
            usage.input_tokens > limits.input_tokens
            or usage.output_tokens > limits.output_tokens
            or usage.total_tokens > limits.total_tokens
        )
        if over_tokens and budget.state is not BudgetState.EXHAUSTED:
            raise _fail(f"token usage past a limit but the budget is not EXHAUSTED: {usage}")
        if self.capacity is not None:
            if self.capacity.used != ref.capacity_used:
                raise _fail(f"capacity used {self.capacity.used}, expected {ref.capacity_used}")
            assert self.config.capacity_bytes is not None
            if self.capacity.used > self.config.capacity_bytes:
                raise _fail("capacity passed its limit")
        if self._records_checked != len(self._executions):  # the records change in execute only
            self._check_records()

    def _check_records(self) -> None:
        """Every attempt is recorded; no execution has more than its policy allows."""
        ref = self.ref
        self._records_checked = len(self._executions)
        attempts = self.executor.attempts
        recorded = [(a.policy, a.number, a.outcome, a.failure) for a in attempts]
        if recorded != ref.attempts:
            raise _fail(f"attempt records {recorded}, expected {ref.attempts}")
        for policy, count in self._executions:
            if count > policy.max_attempts:
                raise _fail(f"{policy.name}: {count} attempts > max_attempts {policy.max_attempts}")
        for previous, attempt in itertools.pairwise(attempts):
            if attempt.started_ns < previous.ended_ns:
                raise _fail("attempt timestamps go backwards")
        if any(a.started_ns > a.ended_ns for a in attempts):
            raise _fail("an attempt ended before it started")

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
        return (
            self.life_state,
            self.budget_state,
            counters,
            tokens,
            past,
            ref.first_reason,
            ref.dimension,
        )


def _retry_scenarios(policy: RetryPolicy, script: Sequence[Attempt]) -> frozenset[SpecScenario]:
    """The retry scenarios an execution on a live run exercises, from its policy and script."""
    found: set[SpecScenario] = set()
    first = script[0] if script else _RETURN
    if policy.max_attempts == 1 and first.failure is not None:
        found.add(RETRY_TOOL_FAILS)
    retried = [
        attempt
        for attempt in script[: policy.max_attempts - 1]
        if attempt.failure in policy.retryable
    ]
    if retried and first.effect is Effect.NONE and first.failure is FailureKind.TRANSPORT:
        found.add(RETRY_TRANSPORT)
    # The run stops (cancelled, past its deadline, finished, out of Model calls) while a
    # retryable failure is in flight: the executor must refuse the next attempt.
    if any(attempt.effect is not Effect.NONE for attempt in retried):
        found.add(RETRY_CANCELLED)
    return frozenset(found)
