"""The seams of the probe's modules and of the race classes, each held on its own.

The explorer and the machines drive these pieces together; these tests hold each one to the
invariant its module docstring states: a prediction never needs the runtime, the invariants
catch the runtime moved behind the prediction's back, a step's scenarios are decided before it
(a gate past the deadline is the deadline's, even for a retry execution), and a race is made
fresh for every schedule with one actor per name.
"""

from __future__ import annotations

import pytest

from diagnosis_harness import (
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    FailureKind,
    RunState,
)
from diagnosis_harness._generated.tables import RetryState
from diagnosis_harness.modelcheck import Disagreement, RunProbe
from diagnosis_harness.modelcheck._models import LiveModels, MemoModels
from diagnosis_harness.modelcheck._probe_config import ProbeConfig, policies_with_thrice
from diagnosis_harness.modelcheck._probe_prediction import Prediction
from diagnosis_harness.modelcheck._probe_script import Attempt
from diagnosis_harness.modelcheck._race_checks import RaceCheck, plan
from diagnosis_harness.modelcheck._races import Race
from diagnosis_harness.modelcheck._scheduler import Scheduler
from diagnosis_harness.modelcheck._spec_scenarios import (
    BUDGET_WINS,
    CAPACITY,
    CLIENT_DISCONNECTS,
    DEADLINE_BEFORE_TOOL,
    PER_TOOL,
    RETRY_TRANSPORT,
    SUCCESS_WINS,
    TOKENS_EXCEED,
)

CONFIG = ProbeConfig(
    limits=BudgetLimits(
        model_calls=1,
        tool_calls=2,
        per_tool_calls=1,
        input_tokens=10,
        output_tokens=10,
        total_tokens=15,
        run_bytes=8,
    ),
    deadline_ns=1_000,
    policies=policies_with_thrice(),
    capacity_bytes=8,
    callbacks=1,
)


def test_a_prediction_needs_no_runtime() -> None:
    """The models and the reference alone answer every step: no run is made."""
    prediction = Prediction(CONFIG, LiveModels(), None)
    assert prediction.reserve_tool("search") is None
    assert prediction.reserve_tool("search") is BudgetExhausted  # over the per-Tool limit
    assert prediction.ref.dimension is BudgetDimension.PER_TOOL_CALLS
    assert prediction.life_state is RunState.BUDGET_EXHAUSTED
    assert prediction.reserve_model() is BudgetExhausted  # the gate: the run is over
    assert prediction.ref.model_calls == 0
    assert prediction.ref.per_tool == {"search": 1}


@pytest.mark.parametrize(
    ("input_tokens", "output_tokens", "dimension"),
    [
        (11, 11, BudgetDimension.INPUT_TOKENS),  # every token limit passed at once
        (5, 11, BudgetDimension.OUTPUT_TOKENS),  # output and total
        (8, 8, BudgetDimension.TOTAL_TOKENS),  # total only
    ],
)
def test_several_token_limits_passed_at_once_name_the_same_first_one(
    input_tokens: int, output_tokens: int, dimension: BudgetDimension
) -> None:
    """One report past several token limits: the prediction names the limit the runtime does
    (the explorer's reports pass one limit at a time)."""
    probe = RunProbe(CONFIG, models=MemoModels())
    probe.record_usage(input_tokens, output_tokens)  # a Disagreement if they differ
    assert probe.ref.dimension is dimension
    assert probe.ctx.budget.snapshot().exhausted is dimension


def test_usage_moved_behind_the_probe_is_a_disagreement() -> None:
    """The invariants hold the run's counters to the reference, not only its state."""
    probe = RunProbe(CONFIG, models=MemoModels())
    probe.ctx.reserve_tool_call("search")  # granted, but the reference did not move
    with pytest.raises(Disagreement, match="usage"):
        probe.check_invariants()


def test_an_execution_past_the_deadline_is_charged_to_the_deadline() -> None:
    """A step's scenarios are decided before it: an execution on a live run is a retry
    scenario; past the deadline, the gate refuses it and it is the deadline's."""
    live = RunProbe(CONFIG, models=MemoModels())
    script = [Attempt(FailureKind.TRANSPORT), Attempt()]
    assert live.execute("intent_router", script) is RetryState.SUCCEEDED
    assert live.trail[-1].scenarios == {RETRY_TRANSPORT}
    late = RunProbe(CONFIG, models=MemoModels())
    late.reach_deadline()
    assert late.execute("intent_router", script) is RetryState.STOPPED
    assert late.trail[-1].scenarios == {DEADLINE_BEFORE_TOOL}
    assert late.culprit is late.trail[-1]
    assert late.executor.attempts == ()


SPEC_SCENARIOS = {
    SUCCESS_WINS,
    BUDGET_WINS,
    CLIENT_DISCONNECTS,
    PER_TOOL,
    CAPACITY,
    TOKENS_EXCEED,
}


@pytest.mark.parametrize("check", plan("deep"), ids=lambda check: str(check.label))
def test_each_schedule_races_a_fresh_race_with_one_actor_per_name(check: RaceCheck) -> None:
    """Every race of every profile: its spec scenario is one of the spec's, each build makes a
    new :class:`Race`, and the actors match the names the scheduler's traces use."""
    scenario = check.scenario
    assert (scenario.requirement, scenario.spec_scenario) in SPEC_SCENARIOS
    races = []
    for _ in range(2):
        scheduler = Scheduler(lambda runnable: runnable[0], names=scenario.actor_names)
        actors, verdict = scenario.build(scheduler, scheduler.lock(exclusive=True))
        assert len(actors) == scenario.actors
        race = getattr(verdict, "__self__", None)  # the verdict is its race's bound method
        assert isinstance(race, Race)
        races.append(race)
    assert races[0] is not races[1]
