"""A run tree under Hypothesis: a parent and two children driven through any interleaving of
their reservations (money holds whole and partial, settles), usage reports, cancels, endings,
gate checks and a clock crossing their deadlines, every step checked against a reference
written from the semantics of ``RunContext.child`` (``modelcheck/_tree_stateful.py``).

The machine runs against the real runtime, so on every Python (like test_stateful_machines.py),
under the loaded Hypothesis profile (``ci``: 100 examples of 30 steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from diagnosis_harness import Boundary, BudgetLimits, CancellationReason, RunState
from diagnosis_harness._limits import BudgetDimension
from diagnosis_harness._local_run import LocalRun
from diagnosis_harness.conformance.suite._support import BUDGETS, DEADLINE
from diagnosis_harness.modelcheck._disagreement import Disagreement
from diagnosis_harness.modelcheck._tree_stateful import (
    CHILD_A,
    CHILD_A_LIMITS,
    CHILD_B,
    PARENT,
    PARENT_LIMITS,
    TREE_SCENARIOS,
    TreeMachine,
    TreeReference,
    check_tree_machine,
)

if TYPE_CHECKING:
    from diagnosis_harness._local_run import Deliveries

pytestmark = pytest.mark.model_check


@pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
@pytest.mark.spec(DEADLINE, "Client disconnects")
def test_a_parent_and_two_children_agree_with_the_reference_at_every_step() -> None:
    run_state_machine_as_test(TreeMachine, settings=settings())


def _hunt() -> BaseException | None:
    """Run the machine until it fails (derandomized, no database); the failure, or ``None``."""
    try:
        run_state_machine_as_test(
            TreeMachine,
            settings=settings(
                max_examples=200,
                stateful_step_count=30,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
                print_blob=False,
            ),
        )
    except (Disagreement, AssertionError, Flaky) as error:
        return error
    return None


def test_the_machine_catches_a_cascade_that_skips_a_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planted defect: the parent's ending leaves ``child-b`` live. The machine must see it
    (the callbacks of the step, the child's state, a live child of an ended run)."""
    cancel_by = LocalRun.__dict__["_cancel_by_locked"]

    def skipping(self: LocalRun, origin: LocalRun, at_ns: int) -> Deliveries:
        if self.run_id == CHILD_B:
            return []  # BUG: this child outlives its ended parent
        result: Deliveries = cancel_by(self, origin, at_ns)
        return result

    monkeypatch.setattr(LocalRun, "_cancel_by_locked", skipping)
    caught = _hunt()
    assert caught is not None
    assert CHILD_B in str(caught)


def test_the_command_credits_the_machine_and_charges_a_failure_to_its_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``check_tree_machine``, as ``model-check`` runs it: passing, both scenarios credited with
    the examples that exercised them; with a cascade that skips ``child-b``, failed, charged to
    the cancellation scenario alone, the shrunk steps as the counterexample."""
    small = settings(max_examples=30, stateful_step_count=20, derandomize=True, database=None)
    result = check_tree_machine(settings=small)
    assert result.passed, result.summary
    assert result.kind == "stateful"
    assert {r.scenario: r.passed for r in result.scenarios} == dict.fromkeys(TREE_SCENARIOS, True)
    examples = dict(result.figures)["examples"]
    assert isinstance(examples, int)
    assert examples >= 30
    assert all(0 < r.checked <= examples for r in result.scenarios)

    cancel_by = LocalRun.__dict__["_cancel_by_locked"]

    def skipping(self: LocalRun, origin: LocalRun, at_ns: int) -> Deliveries:
        if self.run_id == CHILD_B:
            return []  # BUG: this child outlives its ended parent
        result: Deliveries = cancel_by(self, origin, at_ns)
        return result

    monkeypatch.setattr(LocalRun, "_cancel_by_locked", skipping)
    failed = check_tree_machine(settings=settings(small, max_examples=200))
    assert not failed.passed
    verdicts = {r.scenario: r.passed for r in failed.scenarios}
    assert verdicts[DEADLINE, "Client disconnects"] is False
    (counterexample,) = failed.counterexamples
    assert counterexample.kind == "hypothesis"
    assert counterexample.message.startswith("TreeMachine: ")
    assert counterexample.steps
    last = counterexample.steps[-1].action
    assert last.endswith(("cancel(USER_REQUESTED)", "succeed()", "fail()", "check(GUARD)")), last


# -- the reference on its own: the semantics it encodes -------------------------------------------


def test_the_reference_cascades_a_parents_ending_children_first() -> None:
    ref = TreeReference()
    assert ref.cancel(CHILD_A)  # a child's own ending: the parent goes on
    assert ref.runs[PARENT].state is RunState.RUNNING
    ref.delivered.clear()
    assert ref.cancel(PARENT)
    assert ref.delivered == [
        (CHILD_B, CancellationReason.PARENT_ENDED),
        (PARENT, CancellationReason.USER_REQUESTED),
    ]
    assert ref.runs[CHILD_B].ending == "ancestor_ended"
    assert ref.runs[CHILD_B].origin == PARENT
    assert not ref.cancel(CHILD_B)  # ended already


def test_the_reference_refuses_at_the_lowest_level_that_cannot_grant() -> None:
    """``child-a``'s Model-call cap (2) is below its parent's (4): its third call is refused at
    the child, which ends alone; ``child-b`` (the parent's limits) then takes the parent's last
    two, and its next call is refused at the parent, which ends with it and cancels nobody
    else (``child-a`` has ended)."""
    assert CHILD_A_LIMITS.model_calls < PARENT_LIMITS.model_calls
    ref = TreeReference()
    for _ in range(CHILD_A_LIMITS.model_calls):
        assert ref.reserve(CHILD_A, Boundary.MODEL, hold=1) == 1
    assert ref.reserve(CHILD_A, Boundary.MODEL, hold=1) is None
    assert ref.runs[CHILD_A].state is RunState.BUDGET_EXHAUSTED
    assert ref.runs[CHILD_A].ending == "own"
    assert ref.runs[PARENT].state is RunState.RUNNING
    assert ref.runs[PARENT].model_calls == 2
    assert ref.reserve(CHILD_B, Boundary.MODEL, hold=1) == 1
    assert ref.reserve(CHILD_B, Boundary.MODEL, hold=1) == 1
    assert ref.reserve(CHILD_B, Boundary.MODEL, hold=1) is None
    b, parent = ref.runs[CHILD_B], ref.runs[PARENT]
    assert (b.state, b.ending, b.origin) == (RunState.BUDGET_EXHAUSTED, "ancestor_limit", PARENT)
    assert (parent.state, parent.ending) == (RunState.BUDGET_EXHAUSTED, "own")


def test_the_reference_holds_the_least_money_any_level_leaves() -> None:
    ref = TreeReference()
    assert ref.reserve(CHILD_B, Boundary.MODEL, hold=4) == 4  # the parent: 10 - 4 = 6 left
    assert ref.reserve(CHILD_A, Boundary.MODEL, hold=4) == 4  # the parent: 2 left, child-a: 2 left
    assert ref.reserve(CHILD_B, Boundary.MODEL, hold=4, least=1) == 2  # the parent's 2
    assert ref.reserve(CHILD_A, Boundary.MODEL, hold=4, least=1) is None  # nothing left above
    assert ref.runs[PARENT].exhausted is BudgetDimension.COST
    assert ref.runs[CHILD_A].ending == "ancestor_limit"
    assert ref.runs[CHILD_B].ending == "ancestor_ended"


def test_the_limits_leave_each_level_a_limit_that_binds_first() -> None:
    for name in ("model_calls", "tool_calls", "per_tool_calls", "run_bytes", "input_tokens"):
        assert getattr(CHILD_A_LIMITS, name) < getattr(PARENT_LIMITS, name), name
    assert CHILD_A_LIMITS.cost is not None
    assert PARENT_LIMITS.cost is not None
    assert CHILD_A_LIMITS.cost < PARENT_LIMITS.cost
    assert type(PARENT_LIMITS) is BudgetLimits
