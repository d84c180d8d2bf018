"""The Hypothesis stateful machines: what the model side costs against the runtime side.

For each machine of ``diagnosis_harness.modelcheck._stateful`` (``RunMachine``, ``BudgetMachine``,
``RetryMachine``), three modes are timed in the same run, with the same rules, strategies,
preconditions and Hypothesis settings:

- **full**: the stateful test as users run it (``run_machine``, what ``model-check`` and the test
  suite call): every step is predicted on the python-statemachine models and a reference of plain
  counters, applied to the real runtime, compared, and the invariants checked;
- **runtime only**: the same steps, applied only to the real run (``RunContext`` on a
  ``ManualClock``, its ``HarnessRetryExecutor``, a ``RunCapacityCounter``); no model, no
  comparison, the invariant does nothing;
- **model only**: the same steps, fired only on the python-statemachine models (through the same
  ``LiveModels`` the probe uses), the guards computed from plain counters; no runtime.

A trivial machine (one rule incrementing an int, one invariant) is timed in the same run too: its
time per step is what Hypothesis itself costs, and every row is given as a multiple of it.

Steps are counted, not computed: every rule (and initialize rule) of every machine timed here is
re-declared, through Hypothesis's own ``@rule`` / ``@initialize`` / ``@precondition`` with the
original strategies and preconditions, as a wrapper that increments a counter and calls the
original body. The count is the number of rule executions Hypothesis actually performed. The
settings are derandomized, so each mode of one machine runs the very same step sequences; the
benchmark checks that the step counts agree and that model-only fires exactly the model events the
full test fires.

Each measurement is a whole ``run_state_machine_as_test`` call (engine set-up included); rounds
interleave the modes and keep the best of each, which is what a noisy 2-core machine allows.

Run: ``tox -e bench`` or ``python benchmarks/bench_model.py [--quick]``. Writes
``benchmarks/results/model.json`` and ``model.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import hypothesis
import statemachine
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    INITIALIZE_RULE_MARKER,
    RULE_MARKER,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from diagnosis_harness import (
    Boundary,
    CancellationReason,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    Registration,
    RunState,
    RunTerminated,
)
from diagnosis_harness._generated.tables import (
    BUDGET,
    LIFECYCLE,
    RETRY,
    BudgetEvent,
    LifecycleEvent,
    RetryEvent,
)
from diagnosis_harness.modelcheck import TransitionCoverage
from diagnosis_harness.modelcheck._models import LiveModels, ModelTiming
from diagnosis_harness.modelcheck._probe_script import Attempt, Effect
from diagnosis_harness.modelcheck._stateful import (
    MACHINES,
    MachineStats,
    _ProbeMachine,
    run_machine,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from diagnosis_harness.modelcheck._models import ModelInstance
    from diagnosis_harness.modelcheck._probe import RunProbe
    from diagnosis_harness.modelcheck._probe_config import ProbeConfig
    from diagnosis_harness.modelcheck._probe_scenarios import ProbeStep

RESULTS = Path(__file__).parent / "results"
MODES = ("full", "runtime only", "model only")
BASELINE = "baseline"
_RETURN = Attempt()

# -- counting rule executions ----------------------------------------------------------------------


@dataclass(slots=True)
class _Count:
    """Rule executions and machine instances (examples) of one measured run."""

    steps: int = 0
    examples: int = 0


def _counting(function: Callable[..., None], count: _Count) -> Callable[..., None]:
    def counted(self: RuleBasedStateMachine, **kwargs: object) -> None:
        count.steps += 1
        function(self, **kwargs)

    counted.__name__ = function.__name__
    counted.__qualname__ = function.__qualname__
    counted.__doc__ = function.__doc__
    return counted


_Declare: TypeAlias = "Callable[..., Callable[[Callable[..., None]], Callable[..., None]]]"
_DECLARATIONS: tuple[tuple[str, _Declare], ...] = (
    (RULE_MARKER, rule),
    (INITIALIZE_RULE_MARKER, initialize),
)
"""How a rule is declared, by the attribute Hypothesis marks it with."""


def _counted_rules(base: type[RuleBasedStateMachine], count: _Count) -> dict[str, object]:
    """Every rule and initialize rule of ``base``, re-declared to count its executions."""
    namespace: dict[str, object] = {}
    for name in dir(base):
        member = getattr(base, name)
        for marker, declare in _DECLARATIONS:
            declared: Any = getattr(member, marker, None)
            if declared is None:
                continue
            if declared.targets:
                raise NotImplementedError(f"{base.__name__}.{name} has target bundles")
            counted = _counting(declared.function, count)
            wrapper = declare(**declared.arguments)(counted)
            for condition in declared.preconditions:
                wrapper = precondition(condition)(wrapper)
            namespace[name] = wrapper
    return namespace


def _subclass(
    base: type[RuleBasedStateMachine], name: str, namespace: dict[str, object]
) -> type[RuleBasedStateMachine]:
    # types.new_class so that Hypothesis's metaclass builds the class.
    return types.new_class(name, (base,), exec_body=lambda ns: ns.update(namespace))


# -- the runtime-only driver -----------------------------------------------------------------------


class _Callback:
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[CancellationReason] = []

    def __call__(self, reason: CancellationReason) -> None:
        self.calls.append(reason)


class _RuntimeDriver:
    """The runtime calls a ``RunProbe`` makes, on the same objects, and nothing else."""

    def __init__(self, config: ProbeConfig) -> None:
        self.config = config
        self.clock = ManualClock()
        self.ctx = config.new_run(self.clock)  # the very run a RunProbe builds
        self.executor = HarnessRetryExecutor(self.ctx)
        self.capacity = config.new_capacity()
        self.registrations: list[Registration] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.trail: list[ProbeStep] = []  # the teardown reads it; no scenario is credited

    @property
    def life_state(self) -> RunState:
        return self.ctx.lifecycle.state

    @property
    def callbacks(self) -> int:
        return len(self.registrations)

    def check_invariants(self) -> None:
        """Nothing to compare the runtime with."""

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()
            self.loop = None

    def _call(self, fn: Callable[[], object]) -> RunTerminated | None:
        try:
            fn()
        except RunTerminated as error:
            return error
        return None

    def succeed(self) -> None:
        self.ctx.lifecycle.succeed()

    def fail(self, reason: str = "the operation failed") -> None:
        self.ctx.lifecycle.fail(reason)

    def cancel(self, reason: CancellationReason) -> None:
        self.ctx.cancellation.cancel(reason)

    def advance(self, ns: int) -> None:
        self.clock.advance_ns(ns)

    def reach_deadline(self) -> None:
        self.clock.advance_ns(max(0, self.config.deadline_ns - self.clock.monotonic_ns()))

    def check(self, boundary: Boundary) -> None:
        self._call(lambda: self.ctx.check(boundary))

    def reserve_model(self) -> RunTerminated | None:
        return self._call(self.ctx.reserve_model_call)

    def reserve_tool(self, tool: str) -> None:
        self._call(lambda: self.ctx.reserve_tool_call(tool))

    def reserve_bytes(self, n: int) -> None:
        self._call(lambda: self.ctx.reserve_bytes(n))

    def record_usage(self, input_tokens: int, output_tokens: int) -> None:
        self.ctx.record_token_usage(input_tokens=input_tokens, output_tokens=output_tokens)

    def reserve_capacity(self, n: int) -> None:
        assert self.capacity is not None
        self.capacity.try_reserve(n)

    def register(self) -> None:
        self.registrations.append(self.ctx.cancellation.register(_Callback()))

    def unregister(self, index: int) -> None:
        self.registrations[index].unregister()

    def execute(self, policy_name: str, script: Sequence[Attempt], *, use_async: bool) -> None:
        policy = self.config.policies[policy_name]
        invoked = 0

        def operation() -> object:
            nonlocal invoked
            invoked += 1
            step = script[invoked - 1] if invoked <= len(script) else _RETURN
            if step.effect is Effect.CANCEL:
                self.cancel(step.reason)
            elif step.effect is Effect.PASS_DEADLINE:
                self.reach_deadline()
            elif step.effect is Effect.MODEL_CALL:
                error = self.reserve_model()
                if error is not None:
                    raise error
            elif step.effect is Effect.FINISH_RUN:
                self.succeed()
            if step.failure is None:
                return object()
            raise HarnessFailure(step.failure, f"scripted attempt {invoked}")

        async def operation_async() -> object:
            return operation()

        try:
            if use_async:
                if self.loop is None:
                    self.loop = asyncio.new_event_loop()
                self.loop.run_until_complete(self.executor.execute_async(policy, operation_async))
            else:
                self.executor.execute(policy, operation)
        except (HarnessFailure, RunTerminated):
            pass


# -- the model-only driver -------------------------------------------------------------------------

_EVENT_FOR_REASON = {
    CancellationReason.DEADLINE_EXCEEDED: LifecycleEvent.TIME_OUT,
    CancellationReason.BUDGET_EXHAUSTED: LifecycleEvent.EXHAUST_BUDGET,
}
_KIND_AFTER = {
    RunState.TIMED_OUT: FailureKind.DEADLINE_EXCEEDED,
    RunState.BUDGET_EXHAUSTED: FailureKind.BUDGET_EXHAUSTED,
}


class _ModelDriver:
    """The model events a ``RunProbe`` predicts, fired on live models; guards from counters."""

    def __init__(self, config: ProbeConfig, timing: ModelTiming) -> None:
        self.config = config
        self.models = LiveModels(timing)
        self.life = self.models.new(LIFECYCLE)
        self.budget = self.models.new(BUDGET)
        self.now_ns = 0
        self.model_calls = 0
        self.per_tool: dict[str, int] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        self.run_bytes = 0
        self.capacity_used = 0
        self.registered = 0
        self.trail: list[ProbeStep] = []  # the teardown reads it; no scenario is credited

    @property
    def life_state(self) -> RunState:
        state = self.life.state
        assert isinstance(state, RunState)
        return state

    @property
    def callbacks(self) -> int:
        return self.registered

    def check_invariants(self) -> None:
        """Nothing to compare the models with."""

    def close(self) -> None:
        pass

    def _gate(self) -> bool:
        """True if a gate passes now; past the deadline, a live run times out."""
        if self.life_state is not RunState.RUNNING:
            return False
        if self.now_ns < self.config.deadline_ns:
            return True
        self.life.fire(LifecycleEvent.TIME_OUT, None)
        return False

    def _refuse(self, event: BudgetEvent) -> None:
        self.budget.fire(event, False)
        self.life.fire(LifecycleEvent.EXHAUST_BUDGET, None)

    def succeed(self) -> None:
        self.life.fire(LifecycleEvent.SUCCEED, None)

    def fail(self, reason: str = "the operation failed") -> None:
        del reason
        self.life.fire(LifecycleEvent.FAIL, None)

    def cancel(self, reason: CancellationReason) -> None:
        self.life.fire(_EVENT_FOR_REASON.get(reason, LifecycleEvent.CANCEL), None)

    def advance(self, ns: int) -> None:
        self.now_ns += ns

    def reach_deadline(self) -> None:
        self.now_ns = max(self.now_ns, self.config.deadline_ns)

    def check(self, boundary: Boundary) -> None:
        del boundary
        self._gate()

    def reserve_model(self) -> bool:
        if not self._gate():
            return False
        if self.model_calls < self.config.limits.model_calls:
            self.budget.fire(BudgetEvent.RESERVE, True)
            self.model_calls += 1
            return True
        self._refuse(BudgetEvent.RESERVE)
        return False

    def reserve_tool(self, tool: str) -> None:
        if not self._gate():
            return
        limits = self.config.limits
        used = self.per_tool.get(tool, 0)
        if sum(self.per_tool.values()) >= limits.tool_calls or used >= (
            limits.per_tool_overrides.get(tool, limits.per_tool_calls)
        ):
            self._refuse(BudgetEvent.RESERVE)
        else:
            self.budget.fire(BudgetEvent.RESERVE, True)
            self.per_tool[tool] = used + 1

    def reserve_bytes(self, n: int) -> None:
        if not self._gate():
            return
        if self.run_bytes + n <= self.config.limits.run_bytes:
            self.budget.fire(BudgetEvent.RESERVE, True)
            self.run_bytes += n
        else:
            self._refuse(BudgetEvent.RESERVE)

    def record_usage(self, input_tokens: int, output_tokens: int) -> None:
        limits = self.config.limits
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if (
            self.input_tokens > limits.input_tokens
            or self.output_tokens > limits.output_tokens
            or self.input_tokens + self.output_tokens > limits.total_tokens
        ):
            self._refuse(BudgetEvent.RECORD_USAGE)
        else:
            self.budget.fire(BudgetEvent.RECORD_USAGE, True)

    def reserve_capacity(self, n: int) -> None:
        limit = self.config.capacity_bytes
        assert limit is not None
        if self.capacity_used + n <= limit:
            self.capacity_used += n

    def register(self) -> None:
        self.registered += 1

    def unregister(self, index: int) -> None:
        assert 0 <= index < self.registered

    def execute(self, policy_name: str, script: Sequence[Attempt], *, use_async: bool) -> None:
        """The executor's loop on the retry model: gate, attempt, then succeed, fail or stop."""
        del use_async  # the model is the same for both
        policy = self.config.policies[policy_name]
        retry: ModelInstance = self.models.new(RETRY)
        number = 0
        while True:
            if not self._gate():
                retry.fire(RetryEvent.STOP, None)
                return
            number += 1
            retry.fire(RetryEvent.ATTEMPT, None)
            step = script[number - 1] if number <= len(script) else _RETURN
            kind = step.failure
            if step.effect is Effect.CANCEL:
                self.cancel(step.reason)
            elif step.effect is Effect.PASS_DEADLINE:
                self.reach_deadline()
            elif step.effect is Effect.MODEL_CALL:
                if not self.reserve_model():
                    kind = _KIND_AFTER.get(self.life_state, FailureKind.CANCELLED)
            elif step.effect is Effect.FINISH_RUN:
                self.succeed()
            if kind is None:
                retry.fire(RetryEvent.SUCCEED, None)
                return
            allowed = kind in policy.retryable and number < policy.max_attempts
            retry.fire(RetryEvent.FAIL, allowed)
            if not allowed:
                return


# -- the machines as measured ----------------------------------------------------------------------


def _build(machine: type[_ProbeMachine], mode: str, count: _Count) -> type[_ProbeMachine]:
    """``machine`` in ``mode``, its rules counting into ``count``."""

    def __init__(
        self: _ProbeMachine,
        coverage: TransitionCoverage | None = None,
        stats: MachineStats | None = None,
    ) -> None:
        count.examples += 1
        if mode == "full":
            _ProbeMachine.__init__(self, coverage, stats)
            return
        RuleBasedStateMachine.__init__(self)
        self.stats = MachineStats(machine.__name__) if stats is None else stats
        self.stats.begin_example()
        driver: object = (
            _RuntimeDriver(self.CONFIG)
            if mode == "runtime only"
            else _ModelDriver(self.CONFIG, self.stats.timing)
        )
        # The machine's rules call only the probe's step methods the drivers have.
        self.probe = cast("RunProbe", driver)

    namespace = {"__init__": __init__, **_counted_rules(machine, count)}
    name = f"{machine.__name__}_{mode.replace(' ', '_')}"
    return cast("type[_ProbeMachine]", _subclass(machine, name, namespace))


class _Baseline(RuleBasedStateMachine):
    """The least a stateful test can do: one rule incrementing an int, one invariant."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    @rule()
    def increment(self) -> None:
        self.n += 1

    @invariant()
    def non_negative(self) -> None:
        assert self.n >= 0


def _build_baseline(count: _Count) -> type[RuleBasedStateMachine]:
    def __init__(self: _Baseline) -> None:
        count.examples += 1
        _Baseline.__init__(self)

    return _subclass(
        _Baseline, "Baseline", {"__init__": __init__, **_counted_rules(_Baseline, count)}
    )


@dataclass(slots=True)
class _Measured:
    """One (machine, mode): its machine class, its counter, and the best round."""

    cls: type[RuleBasedStateMachine]
    count: _Count
    seconds: float = float("inf")
    steps: int = 0
    examples: int = 0
    timing: ModelTiming | None = None
    probe_steps: int = 0  # MachineStats.steps: the probe's own count of its steps

    def run(self, chosen: settings) -> None:
        self.count.steps = self.count.examples = 0
        stats: MachineStats | None = None
        gc.collect()
        started = time.perf_counter()
        if issubclass(self.cls, _ProbeMachine):
            # As the test suite and ``model-check`` do: with a coverage (only ``full`` uses it).
            stats = run_machine(self.cls, settings=chosen, coverage=TransitionCoverage())
        else:
            run_state_machine_as_test(self.cls, settings=chosen)
        seconds = time.perf_counter() - started
        if seconds < self.seconds:
            self.seconds = seconds
            self.steps, self.examples = self.count.steps, self.count.examples
            if stats is not None:
                self.timing, self.probe_steps = stats.timing, stats.steps

    @property
    def us_per_step(self) -> float:
        return self.seconds / self.steps * 1e6


def _settings(max_examples: int, steps: int) -> settings:
    return settings(
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=max_examples,
        stateful_step_count=steps,
        suppress_health_check=[HealthCheck.too_slow],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="fewer examples and rounds (a smoke run)"
    )
    args = parser.parse_args()
    max_examples, step_count, rounds = (20, 10, 3) if args.quick else (100, 30, 3)
    chosen = _settings(max_examples, step_count)
    count = _Count()
    baseline = _Measured(_build_baseline(count), count)
    cells: dict[tuple[str, str], _Measured] = {}
    for machine in MACHINES:
        for mode in MODES:
            count = _Count()
            cells[machine.__name__, mode] = _Measured(_build(machine, mode, count), count)
    for _ in range(rounds):
        baseline.run(chosen)
        for cell in cells.values():
            cell.run(chosen)

    base_us = baseline.us_per_step
    problems: list[str] = []
    machines: dict[str, object] = {}
    rows = [
        f"| {BASELINE} (1 rule, 1 invariant) | Hypothesis only | {baseline.steps:,} "
        f"| {baseline.seconds:.3f} | {1e6 / base_us:,.0f} | 1.00x |"
    ]
    split_rows = []
    for machine in MACHINES:
        name = machine.__name__
        modes: dict[str, object] = {}
        for mode in MODES:
            cell = cells[name, mode]
            modes[mode] = {
                "steps": cell.steps,
                "examples": cell.examples,
                "seconds": cell.seconds,
                "steps_per_second": cell.steps / cell.seconds,
                "us_per_step": cell.us_per_step,
                "x_baseline_time_per_step": cell.us_per_step / base_us,
            }
            rows.append(
                f"| {name} | {mode} | {cell.steps:,} | {cell.seconds:.3f} "
                f"| {cell.steps / cell.seconds:,.0f} | {cell.us_per_step / base_us:.1f}x |"
            )
        full, runtime, model = (cells[name, mode] for mode in MODES)
        if len({full.steps, runtime.steps, model.steps}) != 1:
            problems.append(
                f"{name}: step counts differ across modes "
                f"({full.steps}, {runtime.steps}, {model.steps}): not the same sequences"
            )
        assert full.timing is not None
        assert model.timing is not None
        if full.timing.model_events != model.timing.model_events:
            problems.append(
                f"{name}: model-only fired {model.timing.model_events} model events, "
                f"the full test {full.timing.model_events}"
            )
        in_runtime = full.timing.runtime_ns / 1e3 / full.steps
        in_models = full.timing.model_ns / 1e3 / full.steps
        machines[name] = {
            "modes": modes,
            "model_events": full.timing.model_events,
            "probe_counted_steps": full.probe_steps,
            "inside_full_us_per_step": {"runtime": in_runtime, "models": in_models},
            "model_only_minus_runtime_only_us_per_step": model.us_per_step - runtime.us_per_step,
        }
        split_rows.append(
            f"| {name} | {base_us:.0f} | {runtime.us_per_step:.0f} | {model.us_per_step:.0f} "
            f"| {full.us_per_step:.0f} | {in_runtime:.0f} | {in_models:.0f} "
            f"| {model.us_per_step - runtime.us_per_step:.0f} "
            f"| {full.timing.model_events / full.steps:.2f} |"
        )

    table = "\n".join(
        [
            f"Hypothesis {hypothesis.__version__}, python-statemachine {statemachine.__version__}, "
            f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {max_examples} examples x "
            f"up to {step_count} steps per machine (derandomized), best of {rounds} rounds. "
            "Steps are rule executions counted as Hypothesis ran them; the last column is the "
            "time per step as a multiple of the baseline's (bare Hypothesis).",
            "",
            "| machine | mode | steps | seconds | steps/s | vs Hypothesis baseline |",
            "|---|---|---:|---:|---:|---:|",
            *rows,
            "",
            "Per step, in microseconds. The two `in full:` columns are the probe's own timers "
            "around the runtime calls and the model events, inside the full test.",
            "",
            "| machine | baseline | runtime only | model only | full | in full: runtime "
            "| in full: models | model only - runtime only | model events / step |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *split_rows,
        ]
    )
    report = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "hypothesis": hypothesis.__version__,
        "python_statemachine": statemachine.__version__,
        "max_examples": max_examples,
        "stateful_step_count": step_count,
        "rounds": rounds,
        "baseline": {
            "steps": baseline.steps,
            "examples": baseline.examples,
            "seconds": baseline.seconds,
            "steps_per_second": baseline.steps / baseline.seconds,
            "us_per_step": base_us,
        },
        "machines": machines,
        "problems": problems,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "model.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "model.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
