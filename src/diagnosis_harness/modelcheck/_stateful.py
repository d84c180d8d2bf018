"""Hypothesis stateful tests: one run, driven through any interleaving of its operations.

Theory of operation. Each machine below is a ``RuleBasedStateMachine`` whose rules are the
operations of one diagnosis run -- a Model call, a Tool call (several Tools, one with a per-Tool
override), token usage reports under and over the limits, success, failure, cancellation with
each reason, the clock moving across the deadline, gate checks, byte reservations, callback
registrations, and retry executions whose operation follows a script of typed failures. Every
rule is one step of a :class:`~._probe.RunProbe`: the step is predicted on the python-statemachine
models generated from ``model/`` (live instances, one per table and one per retry execution),
with the guards computed by a reference of plain counters, then applied to the real runtime, and
the two must agree on state and outcome; the probe then checks the invariants, which are the
spec's sentences (listed in :mod:`._probe_invariants`). The machine's ``@invariant`` checks them
once more after every step, and Hypothesis shrinks any failing interleaving to a short one.

Three machines, because one run ends quickly and everything after its end is absorption:

* :class:`RunMachine` -- everything, interleaved freely: terminal races, absorption, cancellation
  and callbacks, the deadline, the budget and retries.
* :class:`BudgetMachine` -- the budget and the run's capacity counter with larger limits, so that
  long sequences of reservations and usage reports walk up to each limit; success and failure
  come only after the run has ended (late finish attempts).
* :class:`RetryMachine` -- executions under every policy with scripted failure kinds and effects
  between attempts (cancellation, the deadline, the last Model call, success recorded meanwhile),
  sync and async.

Credit. Every step is on the probe's trail with the spec scenarios it exercises; a machine's
result (:func:`check_machine`) counts, per scenario, the examples that exercised it, and charges
a failure -- the shrunk example, as a :class:`~._counterexample.Counterexample` -- to the
scenarios of the step that failed. The Hypothesis profiles are :mod:`._profiles`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Final, cast, final

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from .. import Boundary, BudgetLimits, CancellationReason, FailureKind, RunState
from .._failure import TECHNICAL
from ..pricing import from_units
from ._counterexample import Counterexample
from ._disagreement import Disagreement
from ._models import LiveModels, ModelTiming
from ._probe import RunProbe
from ._probe_config import ProbeConfig, policies_with_thrice
from ._probe_prediction import EXPLICIT_REASONS
from ._probe_script import Attempt, Effect
from ._results import CheckResult, ScenarioTally
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
    from collections.abc import Callable

    from ._coverage import TransitionCoverage
    from ._probe_scenarios import ProbeStep
    from ._spec_scenarios import SpecScenario

__all__ = [
    "MACHINES",
    "BudgetMachine",
    "MachineStats",
    "RetryMachine",
    "RunMachine",
    "check_machine",
    "run_machine",
]

_NS = 1_000_000_000

# -- statistics ------------------------------------------------------------------------------------


@final
@dataclass(slots=True)
class MachineStats:
    """What one machine's run did: examples, steps, where the time went, the last sequence."""

    name: str
    examples: int = 0
    steps: int = 0
    timing: ModelTiming = field(default_factory=ModelTiming)
    last_steps: list[str] = field(default_factory=list)  # the latest example's rules, in order
    seconds: float = 0.0
    on_example: Callable[[MachineStats], None] | None = None
    last_trail: list[ProbeStep] = field(default_factory=list)  # the latest example's probe steps
    exercised: Counter[SpecScenario] = field(default_factory=Counter)  # examples per scenario

    def begin_example(self) -> None:
        self.examples += 1
        self.last_steps = []
        if self.on_example is not None:
            self.on_example(self)

    def step(self, text: str) -> None:
        self.steps += 1
        self.last_steps.append(text)

    @staticmethod
    def _per_second(steps: int, ns: int) -> float:
        return steps / (ns / 1e9) if ns else 0.0

    @property
    def runtime_steps_per_second(self) -> float:
        """Steps per second if only the runtime's time counted."""
        return self._per_second(self.steps, self.timing.runtime_ns)

    @property
    def model_steps_per_second(self) -> float:
        """Steps per second if only the python-statemachine models' time counted."""
        return self._per_second(self.steps, self.timing.model_ns)

    @property
    def steps_per_second(self) -> float:
        """Steps per second of the whole check (Hypothesis, probe, runtime and models)."""
        return self.steps / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "examples": self.examples,
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "steps_per_second": round(self.steps_per_second),
            "runtime_steps_per_second": round(self.runtime_steps_per_second),
            "model_steps_per_second": round(self.model_steps_per_second),
            "model_events": self.timing.model_events,
        }


# -- strategies ------------------------------------------------------------------------------------

TOOLS: Final = ("search", "fetch", "grep")


def _name(kind: FailureKind) -> str:
    return kind.name


FAIL_REASONS: Final = ("the Tool raised", "the Model answered nonsense", "a guard rejected it")

_RETRIED_BY_EVERY_RETRYING_POLICY = [FailureKind.TRANSPORT, FailureKind.RATE_LIMITED]

attempts = st.builds(
    Attempt,
    # Failures every retrying policy retries, then any technical one, then any kind at all, are
    # drawn more often than uniformly, and so is "no effect": most executions worth having retry
    # at least once before an effect ends the run.
    failure=st.one_of(
        st.none(),
        st.sampled_from(_RETRIED_BY_EVERY_RETRYING_POLICY),
        st.sampled_from(sorted(TECHNICAL, key=_name)),
        st.sampled_from(FailureKind),
    ),
    effect=st.just(Effect.NONE) | st.sampled_from(Effect),
    reason=st.sampled_from(EXPLICIT_REASONS),
)
"""One scripted invocation: return or raise a typed failure, after an effect on the run."""

scripts = st.lists(attempts, max_size=4)
clock_steps = st.sampled_from([1, _NS, 3 * _NS]) | st.integers(min_value=0, max_value=4 * _NS)


def _policies(config: ProbeConfig) -> st.SearchStrategy[str]:
    """Any policy, the ones that retry drawn more often."""
    retrying = sorted(name for name, policy in config.policies.items() if policy.max_attempts > 1)
    return st.sampled_from(retrying) | st.sampled_from(sorted(config.policies))


# -- the machines ----------------------------------------------------------------------------------


class _ProbeMachine(RuleBasedStateMachine):
    """A machine stepping one :class:`RunProbe`; subclasses add the rules."""

    CONFIG: ClassVar[ProbeConfig]
    # The scenarios the machine is built to exercise (its tests' marks); a result credits the
    # ones its examples actually exercised (see check_machine).
    SCENARIOS: ClassVar[tuple[SpecScenario, ...]]

    def __init__(
        self, coverage: TransitionCoverage | None = None, stats: MachineStats | None = None
    ) -> None:
        super().__init__()
        self.stats = MachineStats(type(self).__name__) if stats is None else stats
        self.stats.begin_example()
        timing = self.stats.timing
        self.probe = RunProbe(
            self.CONFIG, models=LiveModels(timing), coverage=coverage, timing=timing
        )
        self.stats.last_trail = self.probe.trail

    @invariant()
    def the_spec_holds(self) -> None:
        """The spec's sentences, checked on the run as it is after every step."""
        self.probe.check_invariants()

    def teardown(self) -> None:
        self.probe.close()
        self.stats.exercised.update({pair for step in self.probe.trail for pair in step.scenarios})

    # Shared steps; each subclass exposes the ones it needs as rules.

    def _model_call(self, least: int | None = None) -> None:
        self.stats.step("reserve_model_call()" if least is None else f"reserve_model_call({least})")
        self.probe.reserve_model(least)

    def _tool_call(self, tool: str) -> None:
        self.stats.step(f"reserve_tool_call({tool!r})")
        self.probe.reserve_tool(tool)

    def _reserve_bytes(self, n: int) -> None:
        self.stats.step(f"reserve_bytes({n})")
        self.probe.reserve_bytes(n)

    def _record_usage(self, input_tokens: int, output_tokens: int) -> None:
        self.stats.step(f"record_token_usage({input_tokens}, {output_tokens})")
        self.probe.record_usage(input_tokens, output_tokens)

    def _settle(self, input_tokens: int, output_tokens: int, cost_units: int) -> None:
        self.stats.step(f"hold.settle({cost_units} units, {input_tokens}, {output_tokens})")
        self.probe.settle(input_tokens, output_tokens, cost_units)

    def _succeed(self) -> None:
        self.stats.step("lifecycle.succeed()")
        self.probe.succeed()

    def _fail(self, reason: str) -> None:
        self.stats.step(f"lifecycle.fail({reason!r})")
        self.probe.fail(reason)

    def _cancel(self, reason: CancellationReason) -> None:
        self.stats.step(f"cancel({reason.name})")
        self.probe.cancel(reason)

    def _advance(self, ns: int) -> None:
        self.stats.step(f"clock.advance_ns({ns})")
        self.probe.advance(ns)

    def _reach_deadline(self) -> None:
        self.stats.step("clock reaches the deadline")
        self.probe.reach_deadline()

    def _check(self, boundary: Boundary) -> None:
        self.stats.step(f"check({boundary.name})")
        self.probe.check(boundary)

    def _register(self) -> None:
        self.stats.step("cancellation.register(callback)")
        self.probe.register()

    def _unregister(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, self.probe.callbacks - 1), label="callback")
        self.stats.step(f"registration[{index}].unregister()")
        self.probe.unregister(index)

    def _execute(self, policy: str, script: list[Attempt], use_async: bool) -> None:
        steps = ", ".join(str(attempt) for attempt in script) or "return"
        how = "execute_async" if use_async else "execute"
        self.stats.step(f"{how}({policy!r}, [{steps}])")
        self.probe.execute(policy, script, use_async=use_async)

    def _ended(self) -> bool:
        return self.probe.life_state is not RunState.RUNNING


class RunMachine(_ProbeMachine):
    """Everything one run can meet, in any order."""

    CONFIG: ClassVar[ProbeConfig] = ProbeConfig(
        limits=BudgetLimits(
            model_calls=3,
            tool_calls=4,
            per_tool_calls=2,
            input_tokens=50,
            output_tokens=50,
            total_tokens=80,
            run_bytes=64,
            per_tool_overrides={"fetch": 1},
            # Model calls hold 5 picodollars, Tool calls 2, settles record 0 to 9: two Model
            # calls and two Tool calls fit; a third Model call is refused on COST, a settle
            # above its hold passes the limit.
            cost=from_units(14),
        ),
        deadline_ns=10 * _NS,
        policies=policies_with_thrice(),
    )
    SCENARIOS: ClassVar[tuple[SpecScenario, ...]] = (
        SUCCESS_WINS,
        BUDGET_WINS,
        DEADLINE_BEFORE_TOOL,
        CLIENT_DISCONNECTS,
        PER_TOOL,
        TOKENS_EXCEED,
        RETRY_CANCELLED,
    )

    @rule()
    def model_call(self) -> None:
        self._model_call()

    @rule(least=st.integers(0, 5))
    def partial_model_call(self, least: int) -> None:
        """A partial hold (``min_cost``) of the probe's hold of 5 units."""
        self._model_call(least)

    @rule(tool=st.sampled_from(TOOLS))
    def tool_call(self, tool: str) -> None:
        self._tool_call(tool)

    @rule(n=st.integers(1, 48))
    def reserve_bytes(self, n: int) -> None:
        self._reserve_bytes(n)

    @rule(input_tokens=st.integers(0, 60), output_tokens=st.integers(0, 60))
    def record_usage(self, input_tokens: int, output_tokens: int) -> None:
        self._record_usage(input_tokens, output_tokens)

    @rule(
        input_tokens=st.integers(0, 60),
        output_tokens=st.integers(0, 60),
        cost_units=st.integers(0, 9),
    )
    def settle(self, input_tokens: int, output_tokens: int, cost_units: int) -> None:
        self._settle(input_tokens, output_tokens, cost_units)

    @rule()
    def succeed(self) -> None:
        self._succeed()

    @rule(reason=st.sampled_from(FAIL_REASONS))
    def fail(self, reason: str) -> None:
        self._fail(reason)

    # The same step, drawn only while the run is live: with the settle rule the ci profile's
    # derandomized examples called fail() 175 times, never on a RUNNING run, and left the
    # lifecycle's RUNNING -> FAILED row untaken.
    @precondition(lambda self: not self._ended())
    @rule(reason=st.sampled_from(FAIL_REASONS))
    def fail_live(self, reason: str) -> None:
        self._fail(reason)

    @rule(reason=st.sampled_from(EXPLICIT_REASONS))
    def cancel(self, reason: CancellationReason) -> None:
        self._cancel(reason)

    @rule(ns=clock_steps)
    def advance(self, ns: int) -> None:
        self._advance(ns)

    @rule()
    def reach_deadline(self) -> None:
        self._reach_deadline()

    @rule(boundary=st.sampled_from(Boundary))
    def check(self, boundary: Boundary) -> None:
        self._check(boundary)

    @rule()
    def register(self) -> None:
        self._register()

    @precondition(lambda self: self.probe.callbacks > 0)
    @rule(data=st.data())
    def unregister(self, data: st.DataObject) -> None:
        self._unregister(data)

    @rule(policy=_policies(CONFIG), script=scripts, use_async=st.booleans())
    def execute(self, policy: str, script: list[Attempt], use_async: bool) -> None:
        self._execute(policy, script, use_async)


class BudgetMachine(_ProbeMachine):
    """Long sequences of reservations and usage reports, up to every limit, and the capacity."""

    CONFIG: ClassVar[ProbeConfig] = ProbeConfig(
        limits=BudgetLimits(
            model_calls=5,
            tool_calls=6,
            per_tool_calls=2,
            input_tokens=150,
            output_tokens=150,
            total_tokens=240,
            run_bytes=96,
            per_tool_overrides={"fetch": 1, "grep": 4},
            cost=from_units(24),  # 5 per Model call, 2 per Tool call: fewer than the counters
        ),
        deadline_ns=3_600 * _NS,
        policies=policies_with_thrice(),
        capacity_bytes=64,
    )
    SCENARIOS: ClassVar[tuple[SpecScenario, ...]] = (
        PER_TOOL,
        TOKENS_EXCEED,
        BUDGET_WINS,
        CAPACITY,
    )

    @rule()
    def model_call(self) -> None:
        self._model_call()

    @rule(tool=st.sampled_from(TOOLS))
    def tool_call(self, tool: str) -> None:
        self._tool_call(tool)

    @rule(n=st.integers(1, 40))
    def reserve_bytes(self, n: int) -> None:
        self._reserve_bytes(n)

    @rule(input_tokens=st.integers(0, 50), output_tokens=st.integers(0, 50))
    def record_usage(self, input_tokens: int, output_tokens: int) -> None:
        self._record_usage(input_tokens, output_tokens)

    @rule(
        input_tokens=st.integers(0, 50),
        output_tokens=st.integers(0, 50),
        cost_units=st.integers(0, 9),
    )
    def settle(self, input_tokens: int, output_tokens: int, cost_units: int) -> None:
        self._settle(input_tokens, output_tokens, cost_units)

    @rule(n=st.integers(1, 30))
    def reserve_capacity(self, n: int) -> None:
        self.stats.step(f"capacity.try_reserve({n})")
        self.probe.reserve_capacity(n)

    @rule(boundary=st.sampled_from(Boundary))
    def check(self, boundary: Boundary) -> None:
        self._check(boundary)

    @rule()
    def register(self) -> None:
        self._register()

    @precondition(lambda self: self._ended())
    @rule(reason=st.sampled_from(FAIL_REASONS))
    def late_failure(self, reason: str) -> None:
        """An exception handler reports failure after the run ended."""
        self._fail(reason)

    @precondition(lambda self: self._ended())
    @rule()
    def late_success(self) -> None:
        self._succeed()


class RetryMachine(_ProbeMachine):
    """Executions under every policy, with scripted failures and effects between attempts."""

    CONFIG: ClassVar[ProbeConfig] = ProbeConfig(
        limits=BudgetLimits(
            model_calls=6,
            tool_calls=100,
            per_tool_calls=100,
            input_tokens=10_000,
            output_tokens=10_000,
            total_tokens=20_000,
            run_bytes=1_000,
        ),
        deadline_ns=10 * _NS,
        policies=policies_with_thrice(),
    )
    SCENARIOS: ClassVar[tuple[SpecScenario, ...]] = (
        RETRY_TRANSPORT,
        RETRY_TOOL_FAILS,
        RETRY_CANCELLED,
        CLIENT_DISCONNECTS,
    )

    @initialize(callbacks=st.integers(0, 2))
    def callbacks(self, callbacks: int) -> None:
        for _ in range(callbacks):
            self._register()

    @rule(policy=_policies(CONFIG), script=scripts, use_async=st.booleans())
    def execute(self, policy: str, script: list[Attempt], use_async: bool) -> None:
        self._execute(policy, script, use_async)

    @rule(ns=st.integers(0, _NS))
    def advance(self, ns: int) -> None:
        self._advance(ns)

    @precondition(lambda self: self._ended())
    @rule(reason=st.sampled_from(FAIL_REASONS))
    def late_failure(self, reason: str) -> None:
        self._fail(reason)


MACHINES: Final[tuple[type[_ProbeMachine], ...]] = (RunMachine, BudgetMachine, RetryMachine)
"""Every stateful machine, in the order the command runs them."""


def run_machine(
    machine: type[_ProbeMachine],
    *,
    settings: settings | None = None,
    coverage: TransitionCoverage | None = None,
    stats: MachineStats | None = None,
) -> MachineStats:
    """Run ``machine`` as a test under ``settings`` (default: the loaded profile).

    Raises what a failing example raised, after Hypothesis shrank it; ``stats.last_steps`` is
    then the shrunk sequence.
    """
    stats = MachineStats(machine.__name__) if stats is None else stats

    def factory() -> _ProbeMachine:
        return machine(coverage, stats)

    started = time.perf_counter()
    try:
        # Hypothesis documents a factory (any callable returning a machine); its stub says type.
        run_state_machine_as_test(cast("type[RuleBasedStateMachine]", factory), settings=settings)
    finally:
        stats.seconds += time.perf_counter() - started
    return stats


def machine_counterexample(
    machine: type[_ProbeMachine], stats: MachineStats, error: BaseException
) -> Counterexample:
    """The shrunk example that failed (Hypothesis runs it last), as a counterexample."""
    actions = [step.action for step in stats.last_trail] or list(stats.last_steps)
    message = str(error).strip() or type(error).__name__
    model = error.model if isinstance(error, Disagreement) else None
    runtime = error.runtime if isinstance(error, Disagreement) else None
    return Counterexample.of(
        "hypothesis",
        f"{machine.__name__}: {message.splitlines()[0]}",
        actions,
        disagreement=len(actions) - 1 if actions else None,
        model=model,
        runtime=runtime,
        replay=(
            f"from diagnosis_harness.modelcheck._stateful import {machine.__name__}, "
            f"run_machine; run_machine({machine.__name__})  "
            "# under the same Hypothesis profile, which shrinks to these steps"
        ),
    )


def check_machine(
    machine: type[_ProbeMachine],
    *,
    settings: settings | None = None,
    coverage: TransitionCoverage | None = None,
    stats: MachineStats | None = None,
) -> CheckResult:
    """Run ``machine`` (as :func:`run_machine`); its typed result, per scenario.

    A scenario's count is the examples that exercised it. A failure is charged to the scenarios
    of the step that failed; if that step exercises none, it is one of ``problems``.
    """
    stats = MachineStats(machine.__name__) if stats is None else stats
    tally = ScenarioTally("examples")
    failure: BaseException | None = None
    try:
        run_machine(machine, settings=settings, coverage=coverage, stats=stats)
    except Exception as error:  # a failing example, shrunk; charged below
        failure = error
    for pair, examples in sorted(stats.exercised.items()):
        tally.count([pair], examples)
    problems: tuple[str, ...] = ()
    if failure is not None:
        counterexample = machine_counterexample(machine, stats, failure)
        step = next((step for step in reversed(stats.last_trail) if not step.nested), None)
        culprit = frozenset() if step is None else step.scenarios
        if culprit:
            tally.charge(sorted(culprit), counterexample, 0)
        else:
            problems = (f"{counterexample.message} (a step of no spec scenario)",)
    verdict = "ok" if failure is None else "FAILED"
    return CheckResult(
        name=machine.__name__,
        kind="stateful",
        passed=failure is None,
        summary=(
            f"{stats.examples:,} examples, {stats.steps:,} steps, {stats.seconds:.1f} s "
            f"({stats.steps_per_second:,.0f} steps/s; runtime "
            f"{stats.runtime_steps_per_second:,.0f}/s, model "
            f"{stats.model_steps_per_second:,.0f}/s): {verdict}"
        ),
        scenarios=tally.results(),
        problems=problems,
        figures=(
            ("examples", stats.examples),
            ("steps", stats.steps),
            ("seconds", round(stats.seconds, 3)),
            ("steps_per_second", round(stats.steps_per_second)),
            ("runtime_steps_per_second", round(stats.runtime_steps_per_second)),
            ("model_steps_per_second", round(stats.model_steps_per_second)),
            ("model_events", stats.timing.model_events),
        ),
    )
