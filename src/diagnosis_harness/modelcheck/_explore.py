"""The run probe every model check drives, and the exhaustive explorer of the tables.

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

The explorer. :func:`explore` runs two breadth-first searches against the real runtime:

* **run**: the abstract state of one run -- lifecycle and budget state, every counter capped at
  its limit + 1 with the limits set to 1-3, whether the clock has reached the deadline, the first
  reason, the exhausted dimension (in a terminal state the reservation counters are frozen and
  steer no guard any more, so the abstraction forgets them). Its events are success, failure,
  cancellation with each reason, the clock reaching the deadline, a gate check, a Model call, a
  call of each of two Tools, a byte reservation and two kinds of token usage report. Each state
  is represented by the shortest path to it; an edge replays that path on a fresh run and applies
  one event, so every check runs against real objects.
* **retry**: the abstract state of one execution of the executor -- policy, attempts so far, and
  the run's state at each gate -- over scripted attempts (success, a retryable and a
  never-retried failure, failures that cancel the run, pass its deadline, spend its last Model
  call or finish it before the next gate).

Then it runs every event sequence up to depth 4 from the initial state, for both. The counts --
states, edges, sequences, steps -- and the coverage of every row are in :class:`Exploration`.

Why a memo of the model in the explorer: python-statemachine costs about 95 us per event and the
explorer applies hundreds of thousands; the generated models carry no data besides their state, so
the model's answer to (state, event, guard) is computed once by a real model instance and reused
(:class:`MemoModels`). The Hypothesis machines use live instances (:class:`LiveModels`).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, final

from statemachine.exceptions import TransitionNotAllowed

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
from .._generated.models import BudgetModel, LifecycleModel, RetryModel
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
from ._coverage import TransitionCoverage

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from statemachine import StateMachine

    from .. import Registration, RunTermination
    from .._backend import RunStore
    from .._machine import MachineTable

__all__ = [
    "EXPLICIT_REASONS",
    "SCENARIOS",
    "Attempt",
    "Disagreement",
    "Effect",
    "Exploration",
    "LiveModels",
    "MemoModels",
    "ModelTiming",
    "ProbeConfig",
    "RunProbe",
    "SearchFigures",
    "explore",
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

_REQ_LIFECYCLE = "A Run SHALL have exactly one terminal outcome"
_REQ_DEADLINE = "Deadline and cancellation SHALL stop subsequent controlled work"
_REQ_BUDGET = "Run budgets SHALL be explicit, thread-safe, and observable"
_REQ_RETRY = "Harness retry SHALL be typed, bounded, and recorded"

SCENARIOS: Final[tuple[tuple[str, str], ...]] = (
    (_REQ_LIFECYCLE, "Success wins a terminal race"),
    (_REQ_LIFECYCLE, "Budget exhaustion wins a terminal race"),
    (_REQ_DEADLINE, "Deadline expires before a Tool call"),
    (_REQ_DEADLINE, "Client disconnects"),
    (_REQ_BUDGET, "Per-Tool budget is exhausted"),
    (_REQ_BUDGET, "Actual Token usage exceeds the limit"),
    (_REQ_RETRY, "Router transport failure succeeds on retry"),
    (_REQ_RETRY, "Tool call fails"),
    (_REQ_RETRY, "Run is cancelled between attempts"),
)
"""The spec scenarios (requirement, scenario) the explorer model-checks."""


class Disagreement(AssertionError):
    """The runtime and the model (or the reference, or an invariant) disagree."""


# --- the models ----------------------------------------------------------------------------------


class ModelInstance(Protocol):
    """One python-statemachine model of one table, stepped by (event, guard value)."""

    @property
    def state(self) -> enum.Enum: ...

    def fire(self, event: enum.Enum, guard: bool | None) -> enum.Enum | None:
        """The new state, or ``None`` when the model refused (``TransitionNotAllowed``)."""
        ...


class ModelRunner(Protocol):
    """Makes :class:`ModelInstance` objects for the tables."""

    def new(self, table: MachineTable[Any, Any]) -> ModelInstance: ...


@final
@dataclass(slots=True)
class ModelTiming:
    """Where a probe's time went: in the runtime under test, and in the models."""

    runtime_ns: int = 0
    model_ns: int = 0
    model_events: int = 0
    runtime_calls: int = 0

    def add(self, other: ModelTiming) -> None:
        self.runtime_ns += other.runtime_ns
        self.model_ns += other.model_ns
        self.model_events += other.model_events
        self.runtime_calls += other.runtime_calls


_MODEL_CLASSES: Final[Mapping[str, type[StateMachine]]] = MappingProxyType(
    {LIFECYCLE.name: LifecycleModel, BUDGET.name: BudgetModel, RETRY.name: RetryModel}
)


def _guards(table: MachineTable[Any, Any], guard: bool | None) -> dict[str, bool]:
    return {} if guard is None else dict.fromkeys(table.guards, guard)


def _send(
    model: StateMachine, table: MachineTable[Any, Any], event: enum.Enum, guard: bool | None
) -> bool:
    """Fire ``event`` on a live model through its typed ``fire``; False if not allowed."""
    fire: Callable[..., None] = model.fire  # type: ignore[attr-defined]  # every generated one has
    try:
        fire(event.value, **_guards(table, guard))
    except TransitionNotAllowed:
        return False
    return True


def _model_state(model: StateMachine) -> enum.Enum:
    value = model.current_state_value
    assert isinstance(value, enum.Enum)
    return value


@final
class _LiveInstance:
    __slots__ = ("_model", "_table", "_timing")

    def __init__(self, table: MachineTable[Any, Any], timing: ModelTiming) -> None:
        self._table = table
        self._timing = timing
        started = _now_ns()
        self._model = _MODEL_CLASSES[table.name]()
        timing.model_ns += _now_ns() - started

    @property
    def state(self) -> enum.Enum:
        return _model_state(self._model)

    def fire(self, event: enum.Enum, guard: bool | None) -> enum.Enum | None:
        timing = self._timing
        started = _now_ns()
        taken = _send(self._model, self._table, event, guard)
        state = _model_state(self._model)
        timing.model_ns += _now_ns() - started
        timing.model_events += 1
        return state if taken else None


@final
class LiveModels:
    """Real python-statemachine instances, one per table per run (per execution for retry)."""

    __slots__ = ("timing",)

    def __init__(self, timing: ModelTiming | None = None) -> None:
        self.timing = ModelTiming() if timing is None else timing

    def new(self, table: MachineTable[Any, Any]) -> ModelInstance:
        return _LiveInstance(table, self.timing)


def _paths(table: MachineTable[Any, Any]) -> dict[enum.Enum, list[tuple[enum.Enum, bool | None]]]:
    """A shortest (event, guard) path to every state, over the table's rows."""
    paths: dict[enum.Enum, list[tuple[enum.Enum, bool | None]]] = {table.initial: []}
    queue = deque([table.initial])
    while queue:
        state = queue.popleft()
        for row in table.rows:
            if row.source is state and row.target not in paths:
                guard = None if row.guard is None else row.expect
                paths[row.target] = [*paths[state], (row.event, guard)]
                queue.append(row.target)
    return paths


@final
class _MemoInstance:
    __slots__ = ("_memo", "_state", "_table")

    def __init__(self, table: MachineTable[Any, Any], memo: MemoModels) -> None:
        self._table = table
        self._memo = memo
        self._state: enum.Enum = table.initial

    @property
    def state(self) -> enum.Enum:
        return self._state

    def fire(self, event: enum.Enum, guard: bool | None) -> enum.Enum | None:
        after = self._memo.answer(self._table, self._state, event, guard)
        if after is not None:
            self._state = after
        return after


@final
class MemoModels:
    """The models' answers to (state, event, guard), each computed once by a real instance.

    Exact for the generated models: they hold no data besides their state, so the answer depends
    on nothing else. ``answers`` counts the real model events it took.
    """

    __slots__ = ("_answers", "_paths", "answers")

    def __init__(self) -> None:
        self._answers: dict[tuple[str, enum.Enum, enum.Enum, bool | None], enum.Enum | None] = {}
        self._paths = {table.name: _paths(table) for table in (LIFECYCLE, BUDGET, RETRY)}
        self.answers = 0

    def new(self, table: MachineTable[Any, Any]) -> ModelInstance:
        return _MemoInstance(table, self)

    def answer(
        self, table: MachineTable[Any, Any], state: enum.Enum, event: enum.Enum, guard: bool | None
    ) -> enum.Enum | None:
        key = (table.name, state, event, guard)
        try:
            return self._answers[key]
        except KeyError:
            pass
        model = _MODEL_CLASSES[table.name]()
        for step, value in self._paths[table.name][state]:
            if not _send(model, table, step, value):
                raise Disagreement(f"{table.name} model refused its own path to {state.name}")
        if _model_state(model) is not state:
            raise Disagreement(f"{table.name} model's path does not lead to {state.name}")
        after = _model_state(model) if _send(model, table, event, guard) else None
        self.answers += 1
        self._answers[key] = after
        return after


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


def _fail(message: str) -> Disagreement:
    return Disagreement(message)


@final
class RunProbe:
    """One real run, its models and its reference, stepped together (see the module docstring)."""

    __slots__ = (
        "_budget",
        "_callbacks",
        "_executions",
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
                raise _fail(f"{what}: expected to pass, runtime raised {got!r}")
            return
        if got is None:
            raise _fail(f"{what}: expected {expected.__name__}, runtime let it pass")
        if type(got) is not expected:
            raise _fail(f"{what}: expected {expected.__name__}, runtime raised {got!r}")
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
        expected = self._end(LifecycleEvent.SUCCEED, CancellationReason.RUN_FINISHED, "succeeded")
        self._finish("succeed()", expected, self.ctx.lifecycle.succeed)

    def fail(self, reason: str = "the operation failed") -> None:
        """The run's owner (an exception handler) records failure."""
        expected = self._end(LifecycleEvent.FAIL, CancellationReason.RUN_FINISHED, reason)
        self._finish(f"fail({reason!r})", expected, lambda: self.ctx.lifecycle.fail(reason))

    def _finish(self, what: str, expected: bool, call: Callable[[], Any]) -> None:
        started = _now_ns()
        result = call()
        self.timing.runtime_ns += _now_ns() - started
        self.timing.runtime_calls += 1
        if result.changed is not expected:
            raise _fail(f"{what}: changed={result.changed}, the model says {expected}")
        if result.termination is not self.ctx.lifecycle.termination:
            raise _fail(f"{what}: returned another termination than the run's")
        self._checked()

    def cancel(self, reason: CancellationReason) -> None:
        """Cancellation is signalled with ``reason``."""
        expected = self._end(_EVENT_FOR_REASON[reason], reason, f"cancelled: {reason.name}")
        started = _now_ns()
        won = self.ctx.cancellation.cancel(reason)
        self.timing.runtime_ns += _now_ns() - started
        self.timing.runtime_calls += 1
        if won is not expected:
            raise _fail(f"cancel({reason.name}) returned {won}, the model says {expected}")
        self._checked()

    def advance(self, ns: int) -> None:
        """The clock moves forward ``ns`` nanoseconds (no boundary looks at it yet)."""
        self.ref.now_ns += ns
        self.clock.advance_ns(ns)
        self._checked()

    def reach_deadline(self) -> None:
        """The clock moves to the deadline exactly (or stays, once past it)."""
        self.advance(max(0, self.config.deadline_ns - self.ref.now_ns))

    def check(self, boundary: Boundary) -> None:
        """``ctx.check(boundary)``: the gate."""
        expected = self._gate()
        got = self._call(lambda: self.ctx.check(boundary))
        self._compare_error(f"check({boundary.name})", expected, got, boundary)
        self._checked()

    def reserve_model(self) -> RunTerminated | None:
        """``ctx.reserve_model_call()``; returns what it raised."""
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
            raise _fail(f"{what}: runtime ended in {record.state.name}, the model in {state.name}")
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
            raise _fail(f"{what}: stop {record.stop.name}, expected {expected_stop.name}")
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
            raise _fail(f"lifecycle is {lifecycle.state.name}, the model {self.life_state.name}")
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
                raise _fail(f"termination {self._seen!r} was replaced by {termination!r}")
            state, reason, at_ns = ref.termination
            if termination.state is not state or termination.at_ns != at_ns:
                raise _fail(f"termination {termination!r}, expected {state.name} at {at_ns} ns")
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
            raise _fail(f"budget is {budget.state.name}, the model {self.budget_state.name}")
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
            raise _fail(f"usage {actual_usage}, expected {expected_usage}")
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


# --- the explorer ---------------------------------------------------------------------------------


_NS = 1_000_000_000
_TOOL_A = "search"
_TOOL_B = "fetch"

EXPLORE_LIMITS = BudgetLimits(
    model_calls=1,
    tool_calls=2,
    per_tool_calls=1,
    input_tokens=1,
    output_tokens=3,
    total_tokens=3,
    run_bytes=2,
    per_tool_overrides={_TOOL_B: 2},
)
"""Small limits: every guard flips within two steps. (1, 0) twice passes the input limit,
(0, 3) twice the output limit, (1, 0) then (0, 3) only the total; search then search passes the
per-Tool limit, fetch twice then any Tool the total."""

EXPLORE_CONFIG = ProbeConfig(
    limits=EXPLORE_LIMITS,
    deadline_ns=10 * _NS,
    policies=policies_with_thrice(),
    callbacks=1,
)

RunEvent = tuple[str, "Callable[[RunProbe], object]"]

RUN_EVENTS: Final[tuple[RunEvent, ...]] = (
    ("succeed", RunProbe.succeed),
    ("fail", RunProbe.fail),
    *(
        (f"cancel({reason.name})", lambda probe, reason=reason: probe.cancel(reason))
        for reason in EXPLICIT_REASONS
    ),
    ("reach_deadline", RunProbe.reach_deadline),
    ("check(GUARD)", lambda probe: probe.check(Boundary.GUARD)),
    ("reserve_model_call", RunProbe.reserve_model),
    (f"reserve_tool_call({_TOOL_A})", lambda probe: probe.reserve_tool(_TOOL_A)),
    (f"reserve_tool_call({_TOOL_B})", lambda probe: probe.reserve_tool(_TOOL_B)),
    ("reserve_bytes(1)", lambda probe: probe.reserve_bytes(1)),
    ("record_usage(1, 0)", lambda probe: probe.record_usage(1, 0)),
    ("record_usage(0, 3)", lambda probe: probe.record_usage(0, 3)),
)
"""The run explorer's events: every way a run's state can change, each guard both ways."""

RETRY_POLICIES: Final = ("tool_call", "intent_router", THRICE.name)

RETRY_PRELUDES: Final[tuple[RunEvent, ...]] = (
    ("live", RunProbe.check_invariants),
    ("cancelled(SHUTDOWN)", lambda probe: probe.cancel(CancellationReason.SHUTDOWN)),
    ("deadline reached", RunProbe.reach_deadline),
    ("succeeded", RunProbe.succeed),
)
"""What happened to the run before the execution starts."""

RETRY_ATTEMPTS: Final[tuple[Attempt, ...]] = (
    Attempt(),
    Attempt(FailureKind.TRANSPORT),
    Attempt(FailureKind.BUSINESS_REJECTION),
    Attempt(FailureKind.TRANSPORT, Effect.CANCEL, CancellationReason.USER_REQUESTED),
    Attempt(FailureKind.TRANSPORT, Effect.PASS_DEADLINE),
    Attempt(FailureKind.TRANSPORT, Effect.MODEL_CALL),
    Attempt(FailureKind.RATE_LIMITED, Effect.FINISH_RUN),
)
"""The retry explorer's events: what each invocation of the operation does."""


@final
@dataclass(slots=True)
class SearchFigures:
    """What one search explored."""

    states: int = 0
    edges: int = 0
    sequences: int = 0
    steps: int = 0  # events applied to a real run, replays included


@final
@dataclass(slots=True)
class Exploration:
    """The explorer's result: figures per search, totals, and the rows taken."""

    depth: int
    run: SearchFigures
    retry: SearchFigures
    coverage: TransitionCoverage
    seconds: float
    model_answers: int  # real python-statemachine events behind the memo

    @property
    def states(self) -> int:
        return self.run.states + self.retry.states

    @property
    def edges(self) -> int:
        return self.run.edges + self.retry.edges

    @property
    def sequences(self) -> int:
        return self.run.sequences + self.retry.sequences

    @property
    def steps(self) -> int:
        return self.run.steps + self.retry.steps

    def as_dict(self) -> dict[str, object]:
        return {
            "depth": self.depth,
            "states": self.states,
            "edges": self.edges,
            "sequences": self.sequences,
            "steps": self.steps,
            "run": {
                "states": self.run.states,
                "edges": self.run.edges,
                "sequences": self.run.sequences,
                "steps": self.run.steps,
            },
            "retry": {
                "states": self.retry.states,
                "edges": self.retry.edges,
                "sequences": self.retry.sequences,
                "steps": self.retry.steps,
            },
            "seconds": round(self.seconds, 3),
            "scenarios": [list(pair) for pair in SCENARIOS],
        }


class _Explorer:
    """Shared plumbing: fresh probes on one memo and one coverage object."""

    def __init__(self, coverage: TransitionCoverage, config: ProbeConfig) -> None:
        self.memo = MemoModels()
        self.coverage = coverage
        self.config = config

    def probe(self) -> RunProbe:
        return RunProbe(self.config, models=self.memo, coverage=self.coverage)


def _run_replay(explorer: _Explorer, path: Sequence[int], figures: SearchFigures) -> RunProbe:
    """A fresh run driven along ``path``; the invariants are checked after its last event.

    Every proper prefix of ``path`` was itself explored (and checked) before: breadth first, a
    state's path is known before any edge from it, and the sequences are walked shortest first.
    The runtime is deterministic, so a replay only re-compares each answer with the prediction.
    """
    probe = explorer.probe()
    probe.checking = False
    last = len(path) - 1
    for position, event in enumerate(path):
        if position == last:
            probe.checking = True
        RUN_EVENTS[event][1](probe)
    figures.steps += len(path)
    return probe


Tick: TypeAlias = "Callable[[str, int, int | None], None]"
"""``tick(what, done, total or None)``: told now and then how far a search is (a progress bar)."""


def _explore_run(explorer: _Explorer, depth: int, tick: Tick) -> SearchFigures:
    figures = SearchFigures()
    # Breadth first over abstract states, each represented by the shortest path to it.
    initial = explorer.probe()
    initial.check_invariants()
    seen: dict[tuple[object, ...], tuple[int, ...]] = {initial.abstract(): ()}
    queue: deque[tuple[int, ...]] = deque([()])
    events = range(len(RUN_EVENTS))
    while queue:
        path = queue.popleft()
        for event in events:
            probe = _run_replay(explorer, (*path, event), figures)
            figures.edges += 1
            state = probe.abstract()
            if state not in seen:
                seen[state] = (*path, event)
                queue.append((*path, event))
        tick("run states", len(seen), None)
    figures.states = len(seen)
    # Then every sequence of 1 to `depth` events, shortest first, each on a fresh run.
    total = sum(len(events) ** length for length in range(1, depth + 1))
    for length in range(1, depth + 1):
        for path in itertools.product(events, repeat=length):
            _run_replay(explorer, path, figures)
            figures.sequences += 1
            if figures.sequences % 2048 == 0:
                tick("run sequences", figures.sequences, total)
    return figures


def _retry_run(
    explorer: _Explorer, policy: str, prelude: int, script: Sequence[Attempt]
) -> tuple[RunProbe, tuple[object, ...] | None, RetryState]:
    """One execution; the abstract state at the gate after the script, if it passed."""
    probe = explorer.probe()
    RETRY_PRELUDES[prelude][1](probe)
    at_gate: list[tuple[object, ...]] = []

    def listen(number: int) -> None:
        if number == len(script) + 1:
            at_gate.append((policy, "gate passed", number - 1, probe.abstract()))

    probe.on_attempt = listen
    state = probe.execute(policy, script)
    return probe, (at_gate[0] if at_gate else None), state


def _explore_retry(explorer: _Explorer, depth: int, tick: Tick) -> SearchFigures:
    figures = SearchFigures()
    seen: set[tuple[object, ...]] = set()
    roots = [
        (policy, prelude) for policy in RETRY_POLICIES for prelude in range(len(RETRY_PRELUDES))
    ]
    # Breadth first: a node is a script prefix whose next gate passed; its state is the
    # execution's abstract state there. A script whose execution ended is a leaf.
    queue: deque[tuple[str, int, tuple[Attempt, ...]]] = deque(
        (policy, prelude, ()) for policy, prelude in roots
    )
    while queue:
        policy, prelude, script = queue.popleft()
        probe, at_gate, final = _retry_run(explorer, policy, prelude, script)
        figures.steps += 2 + len(probe.executor.attempts)  # the prelude, the attempts, the end
        if at_gate is None:
            seen.add((policy, final, len(script), probe.abstract()))
            continue
        if at_gate in seen:
            continue
        seen.add(at_gate)
        for attempt in RETRY_ATTEMPTS:
            figures.edges += 1
            queue.append((policy, prelude, (*script, attempt)))
        tick("retry states", len(seen), None)
    figures.states = len(seen)

    # Every sequence of up to `depth` attempts, for every policy and prelude.
    def walk(policy: str, prelude: int, script: tuple[Attempt, ...]) -> None:
        probe, at_gate, _ = _retry_run(explorer, policy, prelude, script)
        figures.sequences += 1
        figures.steps += 2 + len(probe.executor.attempts)
        if at_gate is not None and len(script) < depth:
            for attempt in RETRY_ATTEMPTS:
                walk(policy, prelude, (*script, attempt))

    for policy, prelude in roots:
        walk(policy, prelude, ())
        tick("retry sequences", figures.sequences, None)
    return figures


def _noop(what: str, done: int, total: int | None) -> None:
    pass


def explore(
    *,
    depth: int = 4,
    coverage: TransitionCoverage | None = None,
    tick: Callable[[str, int, int | None], None] | None = None,
) -> Exploration:
    """Run both breadth-first searches and every sequence up to ``depth``; see the docstring.

    Raises :class:`Disagreement` at the first difference. ``tick(what, done, total)`` is called
    now and then (for a progress bar; ``total`` is ``None`` while unknown).
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth!r}")
    own = TransitionCoverage()
    explorer = _Explorer(own, EXPLORE_CONFIG)
    started = time.perf_counter()
    run = _explore_run(explorer, depth, tick or _noop)
    retry = _explore_retry(explorer, depth, tick or _noop)
    seconds = time.perf_counter() - started
    if coverage is not None:
        coverage.merge(own)
    return Exploration(
        depth=depth,
        run=run,
        retry=retry,
        coverage=own,
        seconds=seconds,
        model_answers=explorer.memo.answers,
    )
