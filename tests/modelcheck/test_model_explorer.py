"""The exhaustive explorer: every reachable abstract state, every event from it, and every event
sequence up to depth 4, against the real runtime, with the models' answers and the invariants.
"""

from __future__ import annotations

import pytest

from diagnosis_harness import BudgetLimits, CancellationReason, FailureKind, RunState
from diagnosis_harness._generated.tables import RetryState
from diagnosis_harness.conformance.suite._support import BUDGETS, DEADLINE, RETRY, TERMINAL
from diagnosis_harness.modelcheck import Disagreement, Exploration, RunProbe, explore
from diagnosis_harness.modelcheck._explore import (
    RETRY_ATTEMPTS,
    RETRY_POLICIES,
    RETRY_PRELUDES,
    RUN_EVENTS,
    SCENARIOS,
    Attempt,
    Effect,
    LiveModels,
    MemoModels,
    ProbeConfig,
    policies_with_thrice,
)
from diagnosis_harness.modelcheck._planted import DEFECTS


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


def exploration_run_states_expanded(exploration: Exploration) -> int:
    """Every run state found is expanded once (edges = states x events)."""
    return exploration.run.states


def test_explorer_marks_match_its_scenarios() -> None:
    marks = getattr(test_explorer_finds_no_disagreement, "pytestmark", [])
    assert {tuple(m.args) for m in marks if m.name == "spec"} == set(SCENARIOS)


def test_explorer_reports_its_figures(exploration: Exploration) -> None:
    data = exploration.as_dict()
    assert data["states"] == exploration.run.states + exploration.retry.states
    assert data["sequences"] == exploration.sequences
    assert data["scenarios"] == [list(pair) for pair in SCENARIOS]


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        explore(depth=0)


@pytest.mark.model_check
@pytest.mark.parametrize("defect", DEFECTS, ids=[d.name for d in DEFECTS])
def test_explorer_also_catches_each_planted_defect(defect: object) -> None:
    from diagnosis_harness.modelcheck._planted import Defect  # noqa: PLC0415

    assert isinstance(defect, Defect)
    with defect.plant(), pytest.raises(Disagreement):
        explore(depth=1)


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


def test_a_disagreement_names_what_differs() -> None:
    probe = RunProbe(CONFIG, models=MemoModels())
    probe.ctx.lifecycle.succeed()  # behind the probe's back: the model is still RUNNING
    with pytest.raises(Disagreement, match="lifecycle is SUCCESS, the model RUNNING"):
        probe.check_invariants()


def test_every_retry_attempt_event_is_explored() -> None:
    effects = {attempt.effect for attempt in RETRY_ATTEMPTS}
    assert effects == set(Effect)
    assert any(a.failure is None for a in RETRY_ATTEMPTS)
    assert str(RETRY_ATTEMPTS[3]) == "cancel(USER_REQUESTED); raise TRANSPORT"
