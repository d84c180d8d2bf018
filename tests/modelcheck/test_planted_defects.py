"""Planted defects: each known bug must be caught by its machine and shrunk to a few steps."""

from __future__ import annotations

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetLimits,
    CancellationReason,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    RetryPolicy,
    RunContext,
    RunState,
)
from diagnosis_harness._local_run import LocalRun
from diagnosis_harness.conformance.suite._support import BUDGETS, RETRY, TERMINAL
from diagnosis_harness.modelcheck._planted import (
    DEFECTS,
    Defect,
    hunt,
    hunt_settings,
    replaceable_terminal,
    retry_ignores_cancellation,
    tool_total_before_check,
)
from diagnosis_harness.modelcheck._stateful import BudgetMachine, check_machine
from diagnosis_harness.testing import ManualClock

# These check the checkers (each planted bug is found and shrunk by its machine and the explorer),
# which does not depend on the Python version: CI runs them once (tox -e e2e). The machines
# themselves run against the real runtime on every version (test_stateful_machines.py).
pytestmark = pytest.mark.version_independent

MAX_SHRUNK_STEPS = 6


def new_run(per_tool_calls: int = 10) -> RunContext:
    limits = BudgetLimits(
        model_calls=10,
        tool_calls=10,
        per_tool_calls=per_tool_calls,
        input_tokens=100,
        output_tokens=100,
        total_tokens=200,
        run_bytes=100,
    )
    return RunContext.create(
        session_id="session-1", run_id="run-1", limits=limits, timeout=30, clock=ManualClock()
    )


@pytest.mark.model_check
@pytest.mark.parametrize(
    "defect",
    [
        pytest.param(DEFECTS[0], marks=pytest.mark.spec(TERMINAL, "Success wins a terminal race")),
        pytest.param(DEFECTS[1], marks=pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")),
        pytest.param(
            DEFECTS[2], marks=pytest.mark.spec(RETRY, "Run is cancelled between attempts")
        ),
    ],
    ids=[defect.name for defect in DEFECTS],
)
def test_planted_defect_is_caught_and_shrunk(defect: Defect) -> None:
    originals = {
        (owner, name): owner.__dict__[name]
        for owner, name in [
            (LocalRun, "_end_locked"),
            (LocalRun, "reserve_tool_call"),
            (RunContext, "check"),
            (HarnessRetryExecutor, "execute"),
            (HarnessRetryExecutor, "execute_async"),
        ]
    }
    catch = hunt(defect)
    assert catch.caught, catch.error
    assert 1 <= len(catch.steps) <= MAX_SHRUNK_STEPS, catch.steps
    assert catch.examples > 0
    assert catch.as_dict()["shrunk_steps"] == len(catch.steps)
    # The patch is undone.
    for (owner, name), original in originals.items():
        assert owner.__dict__[name] is original, f"{owner.__name__}.{name}"


def test_there_are_three_defects() -> None:
    assert [d.name for d in DEFECTS] == [
        "replaceable-terminal",
        "tool-total-before-check",
        "retry-ignores-cancellation",
    ]


# -- each defect is a real bug, shown by an example ------------------------------------------------


def test_replaceable_terminal_really_replaces() -> None:
    ctx = new_run()
    with replaceable_terminal():
        assert ctx.lifecycle.succeed().changed
        assert ctx.lifecycle.fail("later").changed  # the bug
        assert ctx.lifecycle.state is RunState.FAILED
    fresh = new_run()
    assert fresh.lifecycle.succeed().changed
    assert not fresh.lifecycle.fail("later").changed


def test_tool_total_before_check_really_miscounts() -> None:
    ctx = new_run(per_tool_calls=1)
    with tool_total_before_check():
        ctx.reserve_tool_call("search")
        with pytest.raises(Exception, match="per_tool_calls"):
            ctx.reserve_tool_call("search")
    usage = ctx.budget.snapshot()
    assert usage.tool_calls == 2  # the bug: the refused call was counted
    assert sum(usage.per_tool_calls.values()) == 1


def test_retry_ignores_cancellation_really_retries() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)
    policy = RetryPolicy("twice", 2, frozenset({FailureKind.TRANSPORT}))
    calls: list[int] = []

    def operation() -> str:
        calls.append(1)
        if len(calls) == 1:
            ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
            raise HarnessFailure(FailureKind.TRANSPORT)
        return "done"

    with retry_ignores_cancellation():
        assert executor.execute(policy, operation) == "done"  # the bug: invoked again
        with pytest.raises(Exception, match="CANCELLED"):
            ctx.check(Boundary.TOOL)  # other gates still work
    assert len(calls) == 2


# -- a Hypothesis machine charges a failure to the scenarios of the step that failed ---------------


@pytest.mark.model_check
@pytest.mark.parametrize(
    ("defect", "charged"),
    [
        (DEFECTS[1], {(BUDGETS, "Per-Tool budget is exhausted")}),
        (DEFECTS[2], {(RETRY, "Run is cancelled between attempts")}),
    ],
    ids=[DEFECTS[1].name, DEFECTS[2].name],
)
def test_a_machine_charges_its_failure_to_the_failing_steps_scenarios(
    defect: Defect, charged: set[tuple[str, str]]
) -> None:
    with defect.plant():
        result = check_machine(defect.machine, settings=hunt_settings())
    assert not result.passed
    failed = {r.scenario for r in result.scenarios if not r.passed}
    assert failed <= charged
    assert failed, result.problems
    assert {r.scenario for r in result.scenarios if r.passed}.isdisjoint(charged)
    assert all(r.unit == "examples" for r in result.scenarios)
    (counterexample,) = set(result.counterexamples)
    assert counterexample.kind == "hypothesis"
    assert counterexample.message.startswith(f"{defect.machine.__name__}: ")
    assert counterexample.steps
    assert counterexample.disagreement == len(counterexample.steps) - 1
    assert "run_machine" in counterexample.replay


def test_a_passing_machine_credits_the_scenarios_its_examples_exercised() -> None:
    result = check_machine(BudgetMachine, settings=hunt_settings(max_examples=30))
    assert result.passed
    credited = {r.scenario: r.checked for r in result.scenarios}
    assert credited[(BUDGETS, "Per-Tool budget is exhausted")] > 0
    assert all(r.passed and 0 < r.checked <= 30 for r in result.scenarios)
