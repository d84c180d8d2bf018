"""The exhaustive explorer: every reachable abstract state, every event from it, and every event
sequence up to depth 4, against the real runtime, with the models' answers and the invariants.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    FailureKind,
    RunState,
    RunTermination,
)
from diagnosis_harness._generated.tables import LifecycleEvent, RetryState
from diagnosis_harness._local_run import LocalRun
from diagnosis_harness.conformance.suite._support import BUDGETS, DEADLINE, RETRY, TERMINAL
from diagnosis_harness.modelcheck import (
    Disagreement,
    Exploration,
    RunProbe,
    TransitionCoverage,
    explore,
    replay_execution,
    replay_sequence,
)
from diagnosis_harness.modelcheck._explorer import (
    EXPLORE_CONFIG,
    RETRY_ATTEMPTS,
    RETRY_POLICIES,
    RETRY_PRELUDES,
    RUN_EVENTS,
    SCENARIOS,
    UNPRICED_CONFIG,
)
from diagnosis_harness.modelcheck._models import LiveModels, MemoModels
from diagnosis_harness.modelcheck._planted import (
    DEFECTS,
    Defect,
    replaceable_terminal,
    retry_ignores_cancellation,
    tool_total_before_check,
)
from diagnosis_harness.modelcheck._probe_config import ProbeConfig, policies_with_thrice
from diagnosis_harness.modelcheck._probe_script import Attempt, Effect

if TYPE_CHECKING:
    from diagnosis_harness._local_run import Deliveries


@pytest.mark.model_check
@pytest.mark.spec(TERMINAL, "Success wins a terminal race")
@pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race")
@pytest.mark.spec(DEADLINE, "Deadline expires before a Tool call")
@pytest.mark.spec(DEADLINE, "Client disconnects")
@pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
@pytest.mark.spec(BUDGETS, "Actual Token usage exceeds the limit")
@pytest.mark.spec(RETRY, "Router transport failure succeeds on retry")
@pytest.mark.spec(RETRY, "Tool call fails")
@pytest.mark.spec(RETRY, "Run is cancelled between attempts")
def test_explorer_finds_no_disagreement(exploration: Exploration) -> None:
    events = len(RUN_EVENTS)
    assert exploration.depth == 4
    assert exploration.passed
    assert exploration.counterexamples == ()
    # Every sequence of 1 to 4 run events, and every retry script up to 4 attempts.
    assert exploration.run.sequences == sum(events**d for d in range(1, 5))
    assert exploration.retry.sequences > len(RETRY_POLICIES) * len(RETRY_PRELUDES)
    # Breadth first: every state was expanded by every event.
    assert exploration.run.edges == exploration_run_states_expanded(exploration) * events
    assert exploration.run.states > 100
    assert exploration.retry.states > 20
    assert exploration.steps > exploration.sequences
    assert exploration.coverage.uncovered() == []
    assert exploration.model_answers > 0
    # Every scenario the explorer names was exercised by some sequence, and passed.
    assert [r.scenario for r in exploration.scenarios] == list(SCENARIOS)
    assert all(r.passed and r.checked > 0 and r.unit == "sequences" for r in exploration.scenarios)


def exploration_run_states_expanded(exploration: Exploration) -> int:
    """Every run state found is expanded once (edges = states x events)."""
    return exploration.run.states


def test_explorer_marks_match_its_scenarios() -> None:
    marks = getattr(test_explorer_finds_no_disagreement, "pytestmark", [])
    assert {tuple(m.args) for m in marks if m.name == "spec"} == set(SCENARIOS)


def test_explorer_reports_its_figures(exploration: Exploration) -> None:
    check = exploration.as_check()
    figures = dict(check.figures)
    assert check.passed
    assert figures["states"] == exploration.run.states + exploration.retry.states
    assert figures["sequences"] == exploration.sequences
    assert figures["failing_sequences"] == 0
    assert [r.scenario for r in check.scenarios] == list(SCENARIOS)


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        explore(depth=0)


@pytest.mark.model_check
@pytest.mark.parametrize("defect", DEFECTS, ids=[d.name for d in DEFECTS])
def test_explorer_also_catches_each_planted_defect(defect: Defect) -> None:
    coverage = TransitionCoverage()
    with defect.plant():  # no defect is about money: the run without it is a third of the time
        result = explore(depth=1, coverage=coverage, priced=False)
    assert not result.passed
    assert result.failures > 0
    assert result.counterexamples
    assert sum(coverage.per_table()["lifecycle"]) > 0  # rows recorded though checks failed


# -- credit where it was earned: a planted bug fails its own scenarios and no others ---------------

LIFECYCLE_SCENARIOS = {
    (TERMINAL, "Success wins a terminal race"),
    (TERMINAL, "Budget exhaustion wins a terminal race"),
    # A later ending replaces TIMED_OUT or CANCELLED too, which these scenarios' THEN forbids.
    (DEADLINE, "Deadline expires before a Tool call"),
    (DEADLINE, "Client disconnects"),
}


def _verdicts(result: Exploration) -> dict[tuple[str, str], bool]:
    return {r.scenario: r.passed for r in result.scenarios}


def test_a_lifecycle_only_bug_is_charged_to_the_terminal_scenarios_only() -> None:
    coverage = TransitionCoverage()
    with replaceable_terminal():
        result = explore(depth=3, coverage=coverage, priced=False)
    verdicts = _verdicts(result)
    assert {pair for pair, passed in verdicts.items() if not passed} == LIFECYCLE_SCENARIOS
    for pair in SCENARIOS:
        if pair not in LIFECYCLE_SCENARIOS:  # budget, tokens, retry: exercised and green
            assert verdicts[pair], pair
    assert result.unattributed == ()
    assert coverage.uncovered() == []  # coverage is recorded although checks failed
    # The counterexample: the shortest sequence, with both answers at the step that differs.
    success = next(r for r in result.scenarios if r.scenario[1] == "Success wins a terminal race")
    counterexample = success.counterexample
    assert counterexample is not None
    assert counterexample.kind == "sequence"
    assert [step.action for step in counterexample.steps] == ["succeed", "succeed"]
    assert counterexample.disagreement == 1
    at = counterexample.at
    assert at is not None
    assert (at.model, at.runtime) == ("changed=False", "changed=True")
    assert counterexample.text().splitlines()[0] == counterexample.message
    assert "changed=True" in counterexample.message
    assert counterexample.replay.endswith("replay_sequence(['succeed', 'succeed'], priced=False)")
    with replaceable_terminal(), pytest.raises(Disagreement, match="changed=True"):
        replay_sequence([step.action for step in counterexample.steps], priced=False)
    replay_sequence([step.action for step in counterexample.steps])  # fixed: no disagreement


def test_a_budget_only_bug_is_charged_to_the_per_tool_scenario_only() -> None:
    with tool_total_before_check():
        result = explore(depth=3, priced=False)
    verdicts = _verdicts(result)
    assert {pair for pair, passed in verdicts.items() if not passed} == {
        (BUDGETS, "Per-Tool budget is exhausted")
    }
    per_tool = next(r for r in result.scenarios if r.scenario[1] == "Per-Tool budget is exhausted")
    counterexample = per_tool.counterexample
    assert counterexample is not None
    actions = [step.action for step in counterexample.steps]
    assert actions == ["reserve_tool_call(search)", "reserve_tool_call(search)"]
    assert counterexample.disagreement == 1
    assert "Tool calls" in counterexample.message


def test_a_retry_only_bug_is_charged_to_the_retry_scenarios_only() -> None:
    with retry_ignores_cancellation():
        result = explore(depth=2, priced=False)
    failed = {pair for pair, passed in _verdicts(result).items() if not passed}
    assert failed
    assert {requirement for requirement, _ in failed} == {RETRY}
    assert (RETRY, "Run is cancelled between attempts") in failed


def test_replaying_an_unknown_event_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown event 'explode'"):
        replay_sequence(["succeed", "explode"])
    with pytest.raises(ValueError, match="unknown policy"):
        replay_execution("nope", "live", [])


# -- the probe on its own --------------------------------------------------------------------------

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


def test_memo_and_live_models_agree() -> None:
    """The explorer's memo gives the same answers as live python-statemachine instances."""
    for models in (LiveModels(), MemoModels()):
        probe = RunProbe(CONFIG, models=models)
        probe.reserve_model()
        assert probe.reserve_model() is not None  # over the Model call limit
        assert probe.life_state is RunState.BUDGET_EXHAUSTED
        probe.succeed()
        probe.cancel(CancellationReason.SHUTDOWN)
        assert probe.life_state is RunState.BUDGET_EXHAUSTED
        probe.check_invariants()


def test_the_router_scenario_step_by_step() -> None:
    probe = RunProbe(CONFIG, models=LiveModels())
    script = [Attempt(FailureKind.TRANSPORT), Attempt()]
    assert probe.execute("intent_router", script) is RetryState.SUCCEEDED
    assert [(a.number, a.failure) for a in probe.executor.attempts] == [
        (1, FailureKind.TRANSPORT),
        (2, None),
    ]


def test_cancelled_between_attempts_stops() -> None:
    probe = RunProbe(CONFIG, models=LiveModels())
    script = [Attempt(FailureKind.TRANSPORT, Effect.CANCEL, CancellationReason.USER_REQUESTED)]
    assert probe.execute("intent_router", script, use_async=True) is RetryState.STOPPED
    assert len(probe.executor.attempts) == 1
    probe.close()


def test_the_tool_policy_fails_once() -> None:
    probe = RunProbe(CONFIG, models=MemoModels())
    assert probe.execute("tool_call", [Attempt(FailureKind.TRANSPORT)]) is RetryState.FAILED
    assert len(probe.executor.attempts) == 1


def test_capacity_and_callbacks() -> None:
    probe = RunProbe(CONFIG, models=MemoModels())
    probe.reserve_capacity(5)
    probe.reserve_capacity(4)  # refused: 9 > 8
    probe.register()
    probe.unregister(1)
    probe.reach_deadline()
    probe.check_invariants()  # the deadline passed but nobody looked: still RUNNING
    assert probe.ctx.lifecycle.state is RunState.RUNNING
    assert probe.reserve_tool("search") is not None
    assert probe.ctx.lifecycle.termination is not None
    assert probe.ctx.lifecycle.termination.state is RunState.TIMED_OUT
    probe.unregister(0)  # already ran: False


def test_the_explorers_run_holds_money_and_the_probe_predicts_cost() -> None:
    """The explorer's run has a money limit of 7 picodollars: fetch twice holds 4, so the Model
    call's hold of 5 is refused on COST (nothing held for it); on another run a Model call and a
    Tool call hold all 7, and the settle's actual of 6, above its hold, passes the limit and
    exhausts the run on COST. The probe predicted both, invariants included."""
    assert EXPLORE_CONFIG.limits.cost is not None
    probe = RunProbe(EXPLORE_CONFIG, models=MemoModels())
    assert probe.reserve_tool("fetch") is None
    assert probe.reserve_tool("fetch") is None
    refused = probe.reserve_model()
    assert isinstance(refused, BudgetExhausted)
    assert refused.dimension is BudgetDimension.COST
    usage = probe.ctx.budget.snapshot()
    assert (usage.model_calls, usage.cost_held_units) == (0, 4)

    probe = RunProbe(EXPLORE_CONFIG, models=MemoModels())
    assert probe.reserve_model() is None
    assert probe.reserve_tool("search") is None
    assert probe.ctx.budget.snapshot().cost_held_units == 7
    probe.settle(0, 3, 6)
    usage = probe.ctx.budget.snapshot()
    assert (usage.cost_units, usage.cost_held_units, usage.exhausted) == (
        6,
        2,
        BudgetDimension.COST,
    )
    assert probe.life_state is RunState.BUDGET_EXHAUSTED


def test_the_unpriced_explorer_is_the_same_run_without_its_money_limit() -> None:
    """``explore(priced=False)``, which the planted-defect checks use: the same limits but the
    money, every row still taken, fewer states, no disagreement; a Model call there is granted
    where the priced run refuses it on COST."""
    assert UNPRICED_CONFIG.limits == dataclasses.replace(EXPLORE_CONFIG.limits, cost=None)
    assert UNPRICED_CONFIG.policies is EXPLORE_CONFIG.policies
    coverage = TransitionCoverage()
    result = explore(depth=1, coverage=coverage, priced=False)
    assert result.passed
    assert coverage.uncovered() == []
    assert 100 < result.run.states < 1_000
    probe = replay_sequence(["reserve_tool_call(fetch)", "reserve_tool_call(fetch)"], priced=False)
    assert probe.reserve_model() is None
    usage = probe.ctx.budget.snapshot()
    assert (usage.model_calls, usage.exhausted) == (1, None)
    with pytest.raises(TypeError, match="priced"):
        explore(depth=1, priced=None)  # type: ignore[arg-type]  # a bad value, on purpose
    with pytest.raises(TypeError, match="priced"):
        replay_sequence([], priced=1)  # type: ignore[arg-type]  # a bad value, on purpose


def test_a_disagreement_names_what_differs() -> None:
    probe = RunProbe(CONFIG, models=MemoModels())
    probe.ctx.lifecycle.succeed()  # behind the probe's back: the model is still RUNNING
    with pytest.raises(Disagreement, match="lifecycle is SUCCESS, the model RUNNING"):
        probe.check_invariants()


def _time_out_rewriting(self: LocalRun, boundary: Boundary, now_ns: int) -> Deliveries | None:
    """A planted bug, written as ``LocalRun``'s own code: a boundary that finds the run timed out
    records the time-out again -- the same state at the same instant, its own boundary in the
    reason -- where the first ``RunTermination`` must stay."""
    first = self._termination
    reason = f"deadline exceeded, first seen at the {boundary.name} boundary"
    if first is None:
        return self._end_locked(LifecycleEvent.TIME_OUT, reason, now_ns)
    if first.state is RunState.TIMED_OUT:
        self._termination = RunTermination(first.state, reason, first.at_ns)
    return None


def test_a_termination_rewritten_at_the_same_instant_is_a_disagreement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first termination is kept as the same object for good: a rewrite keeping its state
    and instant (the reference knows no reason for a time-out) is seen only that way."""
    monkeypatch.setattr(LocalRun, "_time_out_locked", _time_out_rewriting)
    probe = RunProbe(CONFIG, models=MemoModels())
    probe.reach_deadline()
    probe.check(Boundary.TOOL)
    first = probe.ctx.lifecycle.termination
    assert first is not None
    with pytest.raises(Disagreement, match=r"first termination \(TIMED_OUT\) was replaced"):
        probe.check(Boundary.MODEL)
    rewritten = probe.ctx.lifecycle.termination
    assert rewritten is not None
    assert (rewritten.state, rewritten.at_ns) == (first.state, first.at_ns)
    assert rewritten.reason != first.reason


def test_every_retry_attempt_event_is_explored() -> None:
    effects = {attempt.effect for attempt in RETRY_ATTEMPTS}
    assert effects == set(Effect)
    assert any(a.failure is None for a in RETRY_ATTEMPTS)
    assert str(RETRY_ATTEMPTS[3]) == "cancel(USER_REQUESTED); raise TRANSPORT"
