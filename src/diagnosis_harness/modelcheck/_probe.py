"""The run probe every model check drives: the oracle.

Theory of operation. A :class:`RunProbe` owns one real run -- a ``RunContext`` on a
``ManualClock``, its ``HarnessRetryExecutor`` and optionally a ``RunCapacityCounter`` -- and,
beside it, three things that are *not* the code under test, one module each:

* the **prediction** (:mod:`._probe_prediction`): the python-statemachine models generated from
  ``model/`` (``LifecycleModel``, ``BudgetModel`` and one ``RetryModel`` per retry execution),
  which decide every **state**, and a small **reference** of plain counters and limits
  (:mod:`._probe_reference`), which decides every **guard** (``within_limits``,
  ``retry_allowed``) and every datum (usage, the first reason, the termination's timestamp);
* the **invariants** (:mod:`._probe_invariants`), which are the spec's sentences;
* the **scenarios** each step exercises (:mod:`._probe_scenarios`).

Each public step (``reserve_tool("search")``, ``cancel(reason)``, ``execute(policy, script)``,
...) is first appended to :attr:`RunProbe.trail` with the spec scenarios it exercises, then
predicted (the model event it is, fired on the model, the row taken recorded in a
:class:`TransitionCoverage`), then applied to the real run, and compared: the runtime's answer
(granted, refused with which error, changed or not) with the prediction, and then every
invariant. Any difference raises :class:`Disagreement`, an ``AssertionError``, so pytest and
Hypothesis treat it as a failed check and Hypothesis shrinks the steps that led to it. A retry
execution, its operation following a script of :mod:`._probe_script`, is :mod:`._probe_retry`'s;
the run a probe builds is a :class:`~._probe_config.ProbeConfig`.

Invariant of the driver: every step is noted, predicted, applied and compared in that order, and
the invariants run after every step (unless :attr:`RunProbe.checking` is off while the explorer
replays a prefix it checked before). So when a step raises, the last step not taken inside a
retry execution (:attr:`RunProbe.culprit`) is the one that disagreed, and its scenarios are the
ones to charge.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, final

from .. import (
    Boundary,
    CallHold,
    CancellationReason,
    HarnessRetryExecutor,
    ManualClock,
    RunTerminated,
)
from .._generated.tables import LifecycleEvent
from ..pricing import from_units
from ._disagreement import disagree
from ._models import ModelTiming
from ._probe_invariants import Invariants, RecordingCallback
from ._probe_prediction import PROBE_HOLD, PROBE_TOOL_HOLD, Prediction, compare_error
from ._probe_retry import RetryExecution
from ._probe_scenarios import ProbeStep, step_scenarios

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._generated.tables import BudgetState, RetryState, RunState
    from ._coverage import TransitionCoverage
    from ._models import ModelRunner
    from ._probe_config import ProbeConfig
    from ._probe_reference import Reference
    from ._probe_script import Attempt

__all__ = ["RunProbe"]

_now_ns = time.perf_counter_ns


@final
class RunProbe:
    """One real run, its prediction and its invariants, stepped together (see the module
    docstring)."""

    __slots__ = (
        "_holds",
        "_in_execution",
        "_loop",
        "capacity",
        "checking",
        "clock",
        "config",
        "coverage",
        "ctx",
        "executor",
        "invariants",
        "models",
        "on_attempt",
        "prediction",
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
        started = _now_ns()
        self.clock = ManualClock()
        self.ctx = config.new_run(self.clock)
        self.executor = HarnessRetryExecutor(self.ctx)
        self.capacity = config.new_capacity()
        self.timing.runtime_ns += _now_ns() - started
        self.prediction = Prediction(config, models, coverage)
        self.invariants = Invariants(self.ctx, self.executor, self.capacity, self.prediction)
        self._loop: asyncio.AbstractEventLoop | None = None  # made by the first async execution
        # Called with the attempt number when an operation is invoked (the explorer listens).
        self.on_attempt: Callable[[int], None] | None = None
        # False while the explorer replays a prefix it checked before: each step still compares
        # the runtime's answer with the prediction, but the invariants wait for the last step.
        self.checking = True
        # Every step taken, appended before it is applied: after a raise, the last is the culprit.
        self.trail: list[ProbeStep] = []
        self._in_execution = False
        self._holds: list[CallHold] = []  # the Model calls' holds not settled yet, oldest first
        for _ in range(config.callbacks):
            callback = RecordingCallback(self.ctx)
            self.invariants.add_callback(callback)
            callback.registration = self.ctx.cancellation.register(callback)

    # -- what the model and the reference say ------------------------------------------------------

    @property
    def ref(self) -> Reference:
        """The reference: the expected data, as plain counters and limits."""
        return self.prediction.ref

    @property
    def life_state(self) -> RunState:
        return self.prediction.life_state

    @property
    def budget_state(self) -> BudgetState:
        return self.prediction.budget_state

    def abstract(self) -> tuple[object, ...]:
        """The run's abstract state: counters capped at limit + 1, frozen ones forgotten."""
        return self.prediction.abstract()

    def _note(self, kind: str, action: str, **about: Any) -> None:
        """Append the step about to be applied, with the scenarios it exercises."""
        scenarios = step_scenarios(kind, self.prediction, **about)
        self.trail.append(ProbeStep(action, scenarios, self._in_execution))

    @property
    def culprit(self) -> ProbeStep | None:
        """The step a raise came from: the last one not taken inside a retry execution (a
        disagreement inside an attempt surfaces when the execution ends)."""
        return next((step for step in reversed(self.trail) if not step.nested), None)

    # -- comparing -------------------------------------------------------------------------------

    def _compare_error(
        self,
        what: str,
        expected: type[RunTerminated] | None,
        got: BaseException | None,
        boundary: Boundary | None,
    ) -> None:
        compare_error(
            what,
            expected,
            got,
            boundary,
            termination=self.ctx.lifecycle.termination,
            dimension=self.prediction.ref.dimension,
        )

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
        expected = self.prediction.end(
            LifecycleEvent.SUCCEED, CancellationReason.RUN_FINISHED, "succeeded"
        )
        self._finish("succeed()", expected, self.ctx.lifecycle.succeed)

    def fail(self, reason: str = "the operation failed") -> None:
        """The run's owner (an exception handler) records failure."""
        self._note("fail", f"fail({reason!r})")
        expected = self.prediction.end(LifecycleEvent.FAIL, CancellationReason.RUN_FINISHED, reason)
        self._finish(f"fail({reason!r})", expected, lambda: self.ctx.lifecycle.fail(reason))

    def _finish(self, what: str, expected: bool, call: Callable[[], Any]) -> None:
        started = _now_ns()
        result = call()
        self.timing.runtime_ns += _now_ns() - started
        self.timing.runtime_calls += 1
        if result.changed is not expected:
            raise disagree(
                f"{what}: changed={result.changed}, the model says {expected}",
                model=f"changed={expected}",
                runtime=f"changed={result.changed}",
            )
        if result.termination is not self.ctx.lifecycle.termination:
            raise disagree(f"{what}: returned another termination than the run's")
        self._checked()

    def cancel(self, reason: CancellationReason) -> None:
        """Cancellation is signalled with ``reason``."""
        self._note("cancel", f"cancel({reason.name})", reason=reason)
        expected = self.prediction.cancel(reason)
        started = _now_ns()
        won = self.ctx.cancellation.cancel(reason)
        self.timing.runtime_ns += _now_ns() - started
        self.timing.runtime_calls += 1
        if won is not expected:
            raise disagree(
                f"cancel({reason.name}) returned {won}, the model says {expected}",
                model=expected,
                runtime=won,
            )
        self._checked()

    def advance(self, ns: int) -> None:
        """The clock moves forward ``ns`` nanoseconds (no boundary looks at it yet)."""
        self._note("advance", f"clock.advance_ns({ns})")
        self.prediction.ref.now_ns += ns
        self.clock.advance_ns(ns)
        self._checked()

    def reach_deadline(self) -> None:
        """The clock moves to the deadline exactly (or stays, once past it)."""
        self.advance(max(0, self.config.deadline_ns - self.prediction.ref.now_ns))

    def check(self, boundary: Boundary) -> None:
        """``ctx.check(boundary)``: the gate."""
        self._note("check", f"check({boundary.name})")
        expected = self.prediction.gate()
        got = self._call(lambda: self.ctx.check(boundary))
        self._compare_error(f"check({boundary.name})", expected, got, boundary)
        self._checked()

    def reserve_model(self, least: int | None = None) -> RunTerminated | None:
        """``ctx.reserve_model_call()``; returns what it raised. ``least`` (units, with a run
        that holds money): a partial hold, ``min_cost=least``; what it held is compared."""
        max_cost = PROBE_HOLD
        min_cost = None if least is None else from_units(least)
        what = f"reserve_model_call(max_cost={max_cost}, min_cost={min_cost})"
        self._note("reserve_model", what)
        expected = self.prediction.reserve_model(None if min_cost is None else least)
        got = self._call(
            lambda: self._holds.append(
                self.ctx.reserve_model_call(max_cost=max_cost, min_cost=min_cost)
            )
        )
        granted = self._reserved("reserve_model_call()", expected, got, Boundary.MODEL)
        if got is None:
            held, predicted = self._holds[-1].max_cost, self.prediction.ref.holds[-1]
            if held != from_units(predicted):
                raise disagree(f"{what} held {held}, expected {predicted} units")
        return granted

    def reserve_tool(self, tool: str) -> RunTerminated | None:
        """``ctx.reserve_tool_call(tool)``, holding ``PROBE_TOOL_HOLD`` under a money limit (the
        hold is never settled: it stays charged); returns what it raised."""
        max_cost = PROBE_TOOL_HOLD if self.prediction.tool_hold_units else None
        held = "" if max_cost is None else f", max_cost={max_cost}"
        self._note("reserve_tool", f"reserve_tool_call({tool!r}{held})")
        expected = self.prediction.reserve_tool(tool)
        got = self._call(lambda: self.ctx.reserve_tool_call(tool, max_cost=max_cost))
        return self._reserved(f"reserve_tool_call({tool!r})", expected, got, Boundary.TOOL)

    def reserve_bytes(self, n: int) -> RunTerminated | None:
        """``ctx.reserve_bytes(n)``; returns what it raised."""
        self._note("reserve_bytes", f"reserve_bytes({n})")
        expected = self.prediction.reserve_bytes(n)
        got = self._call(lambda: self.ctx.reserve_bytes(n))
        return self._reserved(f"reserve_bytes({n})", expected, got, Boundary.CAPACITY)

    def _reserved(
        self,
        what: str,
        expected: type[RunTerminated] | None,
        got: BaseException | None,
        boundary: Boundary,
    ) -> RunTerminated | None:
        self._compare_error(what, expected, got, boundary)
        self._checked()
        assert got is None or isinstance(got, RunTerminated)
        return got

    def record_usage(self, input_tokens: int, output_tokens: int) -> None:
        """``ctx.record_token_usage(...)``: the actual usage is recorded, even past a limit."""
        self._note("record_usage", f"record_token_usage({input_tokens}, {output_tokens})")
        self.prediction.record_usage(input_tokens, output_tokens)
        got = self._call(
            lambda: self.ctx.record_token_usage(
                input_tokens=input_tokens, output_tokens=output_tokens
            )
        )
        if got is not None:
            raise disagree(f"record_token_usage raised {got!r}; it records and never raises")
        self._checked()

    def settle(self, input_tokens: int, output_tokens: int, cost_units: int) -> None:
        """``hold.settle(...)`` of the oldest Model call's hold not settled yet (nothing when
        every hold is settled): recorded even past a limit, even after the run ended."""
        if not self._holds:
            return
        what = f"hold.settle(cost={cost_units} units, {input_tokens}, {output_tokens})"
        self._note("record_usage", what)  # to the spec, a settle reports a call's usage
        self.prediction.settle(input_tokens, output_tokens, cost_units)
        hold = self._holds.pop(0)
        cost = from_units(cost_units)
        got = self._call(
            lambda: hold.settle(cost=cost, input_tokens=input_tokens, output_tokens=output_tokens)
        )
        if got is not None:
            raise disagree(f"{what} raised {got!r}; it records and never raises")
        self._checked()

    def reserve_capacity(self, n: int) -> None:
        """``RunCapacityCounter.try_reserve(n)`` on the counter beside the run."""
        self._note("reserve_capacity", f"capacity.try_reserve({n})")
        counter = self.capacity
        assert counter is not None, "the probe has no capacity counter"
        expected = self.prediction.reserve_capacity(n)
        started = _now_ns()
        granted = counter.try_reserve(n)
        self.timing.runtime_ns += _now_ns() - started
        if granted is not expected:
            raise disagree(f"try_reserve({n}) returned {granted}, expected {expected}")
        self._checked()

    def register(self) -> None:
        """``ctx.cancellation.register(callback)``; runs at once if the run is already over."""
        self._note("register", "cancellation.register(callback)")
        callback = RecordingCallback(self.ctx)
        self.invariants.add_callback(callback)
        started = _now_ns()
        callback.registration = self.ctx.cancellation.register(callback)
        self.timing.runtime_ns += _now_ns() - started
        self._checked()

    @property
    def callbacks(self) -> int:
        return len(self.invariants.callbacks)

    def unregister(self, index: int) -> None:
        """``Registration.unregister()`` of the callback registered ``index``-th."""
        self._note("unregister", f"registration[{index}].unregister()")
        callback = self.invariants.callbacks[index]
        expected = not callback.calls and not callback.removed
        assert callback.registration is not None
        removed = callback.registration.unregister()
        if removed is not expected:
            raise disagree(
                f"unregister() of callback {index} returned {removed}, expected {expected}"
            )
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
        execution = RetryExecution(self, policy, script)
        started = _now_ns()
        result: object = None
        raised: BaseException | None = None
        self._in_execution = True
        try:
            if use_async:
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                running = self.executor.execute_async(policy, execution.operation_async)
                result = self._loop.run_until_complete(running)
            else:
                result = self.executor.execute(policy, execution.operation)
        except Exception as error:
            raised = error
        finally:
            self._in_execution = False
        self.timing.runtime_ns += _now_ns() - started - execution.inner_ns
        self.timing.runtime_calls += 1
        state = execution.settle(result, raised)
        self._checked()
        return state

    # -- the invariants ----------------------------------------------------------------------------

    def _checked(self) -> None:
        """After a step: the invariants, unless a replay of steps already checked is running."""
        if self.checking:
            self.invariants.check()

    def check_invariants(self) -> None:
        """Every invariant of :mod:`._probe_invariants`, on the run as it is now."""
        self.invariants.check()
