"""Spin: the terminal compare-and-set, the callbacks and the budget reservation with its money
holds and settles, 5 racers each, and a run tree (a root and three children, 2 calls each).

Every real model must hold each property (``errors: 0``) and every seeded-bug model must be
refuted (``errors: N`` with N >= 1). The verdict is read off pan's report: pan exits 0 either
way. Without Spin and gcc the checks skip, naming the install line; the rendering and the
report parsing are tested everywhere.
"""

from __future__ import annotations

import dataclasses
import shutil
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness._generated.tables import LIFECYCLE, LifecycleEvent, RunState
from diagnosis_harness._machine import MachineTable, Row
from diagnosis_harness.conformance.suite._support import BUDGETS, DEADLINE, TERMINAL
from diagnosis_harness.modelcheck import _spin
from diagnosis_harness.modelcheck._spin import (
    PROFILES,
    SpinModel,
    build_models,
    check_model,
    parse_pan_output,
    render_budget,
    render_callbacks,
    render_terminal_cas,
    render_tree,
    run_checks,
    spin_unavailable_reason,
)

if TYPE_CHECKING:
    from diagnosis_harness.modelcheck._spin import ModelResult

# Spin verifies Promela models generated from the tables: nothing here depends on the Python
# version, so CI runs the module once (tox -e e2e), not in every py3* env.
pytestmark = pytest.mark.version_independent

RACERS = PROFILES["ci"]

_MISSING = spin_unavailable_reason()
needs_spin = pytest.mark.skipif(
    _MISSING is not None,
    reason=f"Spin is not installed: {_MISSING or ''}",
)
MODELS = {model.name: model for model in build_models(RACERS)}


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str], ModelResult]:
    """Every (model, property) of the CI profile, checked once for the whole module."""
    return {
        (result["name"], result["property"]): result
        for model in MODELS.values()
        for result in check_model(model)
    }


def _cases(name: str) -> list[str]:
    return list(MODELS[name].properties)


def _holds(result: ModelResult) -> None:
    assert result["detail"] is None, result
    assert result["errors"] == 0, result
    assert result["states_stored"], result
    assert result["ok"], result


def _refuted(result: ModelResult) -> None:
    assert result["detail"] is None, result
    assert result["errors"] is not None, result
    assert result["errors"] >= 1, result
    assert result["ok"], result


# -- the real models hold, the seeded bugs are refuted -----------------------------------------


@needs_spin
@pytest.mark.model_check
@pytest.mark.spec(TERMINAL, "Success wins a terminal race")
@pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race")
@pytest.mark.parametrize("prop", _cases("terminal_cas"))
def test_terminal_cas_holds(results: dict[tuple[str, str], ModelResult], prop: str) -> None:
    result = results["terminal_cas", prop]
    _holds(result)
    assert result["racers"] == RACERS


@needs_spin
@pytest.mark.model_check
@pytest.mark.parametrize("prop", _cases("terminal_cas_seeded_bug"))
def test_terminal_cas_seeded_bug_is_refuted(
    results: dict[tuple[str, str], ModelResult], prop: str
) -> None:
    _refuted(results["terminal_cas_seeded_bug", prop])


@needs_spin
@pytest.mark.model_check
@pytest.mark.spec(DEADLINE, "Client disconnects")
@pytest.mark.parametrize("prop", _cases("callbacks"))
def test_callbacks_hold(results: dict[tuple[str, str], ModelResult], prop: str) -> None:
    _holds(results["callbacks", prop])


@needs_spin
@pytest.mark.model_check
@pytest.mark.parametrize("prop", _cases("callbacks_seeded_bug"))
def test_callbacks_seeded_bug_is_refuted(
    results: dict[tuple[str, str], ModelResult], prop: str
) -> None:
    _refuted(results["callbacks_seeded_bug", prop])


@needs_spin
@pytest.mark.model_check
@pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
@pytest.mark.parametrize("prop", _cases("budget"))
def test_budget_holds(results: dict[tuple[str, str], ModelResult], prop: str) -> None:
    _holds(results["budget", prop])


@needs_spin
@pytest.mark.model_check
@pytest.mark.parametrize("prop", _cases("budget_seeded_bug"))
def test_budget_seeded_bug_is_refuted(
    results: dict[tuple[str, str], ModelResult], prop: str
) -> None:
    _refuted(results["budget_seeded_bug", prop])


@needs_spin
@pytest.mark.model_check
@pytest.mark.parametrize("prop", _cases("budget_unheld_seeded_bug"))
def test_budget_holds_checked_against_spend_so_far_are_refuted(
    results: dict[tuple[str, str], ModelResult], prop: str
) -> None:
    """A hold checked against the money settled only -- a limit on spend so far, which holds
    nothing -- lets racing holds pass the limit with no settle to blame: Spin finds it."""
    result = results["budget_unheld_seeded_bug", prop]
    _refuted(result)
    assert result["final"] is not None
    assert "overrun = 0" in result["final"]


@needs_spin
@pytest.mark.model_check
@pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
@pytest.mark.spec(DEADLINE, "Client disconnects")
@pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race")
@pytest.mark.parametrize("prop", _cases("tree"))
def test_run_tree_holds(results: dict[tuple[str, str], ModelResult], prop: str) -> None:
    """A root and three children racing: no level passes its limit, the root's counters are
    its children's, every child of an ended root has ended in the same step, one ending per
    run, nothing granted after the root's ending."""
    _holds(results["tree", prop])


@needs_spin
@pytest.mark.model_check
@pytest.mark.parametrize(
    ("bug", "prop"),
    [(bug, prop) for bug, props in _spin.TREE_BUG_PROPERTIES.items() for prop in props],
)
def test_run_tree_seeded_bugs_are_refuted(
    results: dict[tuple[str, str], ModelResult], bug: str, prop: str
) -> None:
    result = results[f"tree_{bug}_seeded_bug", prop]
    _refuted(result)
    assert result["final"] is not None
    if bug in {"child_only", "check_then_act"}:  # the root went past its limits
        assert "overrun[0] = 0" in result["final"]


@needs_spin
@pytest.mark.model_check
def test_the_run_tree_model_reaches_every_situation_it_is_meant_to_race() -> None:
    """Each situation of ``TREE_SITUATIONS`` happens in some interleaving: Spin refutes a
    claim that it never does. (A model that never refused at the root would prove nothing.)"""
    situations = _spin.TREE_SITUATIONS
    claims = "".join(f"ltl reach_{name} {{ [] !({expr}) }}\n" for name, expr in situations.items())
    model = SpinModel(
        "tree_reach",
        RACERS,
        render_tree(_spin.tree_calls(RACERS)) + "\n" + claims,
        tuple(f"reach_{name}" for name in situations),
        expected_violation=True,
    )
    reached = {result["property"]: result for result in check_model(model)}
    for name in situations:
        _refuted(reached[f"reach_{name}"])


def test_the_run_tree_model_is_rendered_with_limits_a_child_can_exhaust() -> None:
    calls = _spin.tree_calls(RACERS)
    assert calls == 2
    assert _spin.tree_calls(PROFILES["deep"]) == 3
    assert _spin.tree_calls(3) == 1
    limits = _spin.tree_limits(calls)
    children = _spin.TREE_CHILDREN
    text = render_tree(calls)
    for name, value in limits.items():
        assert f"#define {name.upper()} {value}" in text
    assert "#define SEEDED_BUG 0" in text
    # The root cannot grant every child's calls, nor every child's first full hold.
    assert limits["root_call_limit"] < children * calls
    assert limits["root_money"] < children * _spin.TREE_HOLD
    # A child's money lets one full hold and one partial hold through.
    assert _spin.TREE_HOLD < limits["child_money"] < 2 * _spin.TREE_HOLD
    assert "CASCADE_ONE(1); CASCADE_ONE(2); CASCADE_ONE(3)" in text
    skipping = render_tree(calls, seeded_bug="cascade_skips")
    assert "#define END_ROOT() END(0); CASCADE_ONE(1); CASCADE_ONE(2)   /* BUG" in skipping
    assert "#define SEEDED_BUG 1" in render_tree(calls, seeded_bug=True)
    for bug, number in _spin.TREE_SEEDED_BUGS.items():
        assert f"#define SEEDED_BUG {number}" in render_tree(calls, seeded_bug=bug)
    with pytest.raises(ValueError, match="seeded_bug must be a bool or one of"):
        render_tree(calls, seeded_bug="late")
    with pytest.raises(ValueError, match="calls per child"):
        render_tree(0)


def test_every_model_is_checked_on_the_properties_the_issue_names() -> None:
    assert set(MODELS["terminal_cas"].properties) >= {"stable", "one_winner"}
    assert "once" in MODELS["callbacks"].properties
    assert "within_limits" in MODELS["budget"].properties
    # Money: settled + held within the limit but by a settle's actual, a refused hold holds
    # nothing and no hold is negative, every hold settled in the end (even after the run ended).
    assert {"money_within", "consistent", "all_settled"} <= set(MODELS["budget"].properties)
    # A run tree: no level passes its limit, every descendant of an ended run ends, exactly one
    # ending per run; each seeded bug of the tree refuted.
    assert {"within_limits", "descendants_end", "one_ending"} <= set(MODELS["tree"].properties)
    assert {name for name in MODELS if name.startswith("tree_")} == {
        f"tree_{bug}_seeded_bug" for bug in _spin.TREE_SEEDED_BUGS
    }
    for model in MODELS.values():
        for prop in model.properties:
            assert f"ltl {prop} {{" in model.text, (model.name, prop)
        bug = model.name.endswith("_seeded_bug")
        assert model.expected_violation is bug, model.name


# -- the terminal compare-and-set is the lifecycle table ---------------------------------------


def _with_rows(
    table: MachineTable[RunState, LifecycleEvent],
    rows: tuple[Row[RunState, LifecycleEvent], ...],
    terminal: frozenset[RunState],
) -> MachineTable[RunState, LifecycleEvent]:
    return dataclasses.replace(table, rows=rows, terminal=terminal)  # transitions follow the rows


def test_terminal_cas_is_rendered_from_the_table() -> None:
    text = render_terminal_cas(LIFECYCLE, RACERS)
    for row in LIFECYCLE.rows:
        assert (
            f":: cur == {row.source.name} && event == e_{row.event.value} -> "
            f"state = {row.target.name}   /* row {row.index} */"
        ) in text
    for state in LIFECYCLE.terminal:
        assert f"(state == {state.name} -> [] (state == {state.name}))" in text
    assert f"mtype state = {LIFECYCLE.initial.name};" in text
    assert f"#define RACERS {RACERS}" in text

    # Another set of terminal states is another model.
    fewer = _with_rows(LIFECYCLE, LIFECYCLE.rows, LIFECYCLE.terminal - {RunState.SUCCESS})
    changed = render_terminal_cas(fewer, RACERS)
    assert changed != text
    assert "state == SUCCESS -> [] (state == SUCCESS)" not in changed
    assert "s == SUCCESS ||" not in changed


def test_the_seeded_bug_differs_only_in_where_the_state_is_read() -> None:
    real = render_terminal_cas(LIFECYCLE, RACERS).splitlines()
    bug = render_terminal_cas(LIFECYCLE, RACERS, seeded_bug=True).splitlines()
    added = [line.strip() for line in bug if line not in real]
    removed = [line.strip() for line in real if line not in bug]
    assert "cur = state;   /* BUG: the lock is not held here */" in added
    assert removed[-1] == "cur = state;"


@needs_spin
@pytest.mark.model_check
def test_spin_refutes_a_table_whose_terminal_state_can_be_left() -> None:
    # A copy of the lifecycle table with a row out of SUCCESS (the generator refuses one).
    leaving = Row(
        index=len(LIFECYCLE.rows) + 1,
        source=RunState.SUCCESS,
        event=LifecycleEvent.FAIL,
        target=RunState.FAILED,
        guard=None,
        expect=True,
        requirement=TERMINAL,
    )
    table = _with_rows(LIFECYCLE, (*LIFECYCLE.rows, leaving), LIFECYCLE.terminal)
    model = SpinModel("leaving_terminal", 3, render_terminal_cas(table, 3), ("stable",))
    [result] = check_model(model)
    assert result["errors"] is not None
    assert result["errors"] >= 1
    assert not result["ok"]


@needs_spin
@pytest.mark.model_check
def test_spin_refutes_a_table_with_an_unmarked_dead_end() -> None:
    # SUCCESS is no longer terminal but has no row out: a later event is an IllegalTransition.
    table = _with_rows(LIFECYCLE, LIFECYCLE.rows, LIFECYCLE.terminal - {RunState.SUCCESS})
    model = SpinModel("dead_end", 2, render_terminal_cas(table, 2), ("stable",), True)
    [result] = check_model(model)
    _refuted(result)


# -- reading pan ---------------------------------------------------------------------------------

_REFUTED = """\
pan: ltl formula once
pan:1: assertion violated  !( !((runs[0]<=1))) (at depth 58)
pan: wrote callbacks_seeded_bug.pml.trail

(Spin Version 6.5.2 -- 6 December 2019)
Warning: Search not completed
	+ Partial Order Reduction

Full statespace search for:
	never claim         	+ (once)
	assertion violations	+ (if within scope of claim)
	acceptance   cycles 	+ (fairness disabled)
	invalid end states	- (disabled by never claim)

State-vector 80 byte, depth reached 121, errors: 1
      242 states, stored
       27 states, matched
"""


def test_pan_report_is_read_from_its_lines() -> None:
    report = parse_pan_output(_REFUTED)
    assert report.errors == 1
    assert report.states_stored == 242
    assert report.depth == 121
    assert report.claim == "once"
    assert not report.truncated
    big = parse_pan_output("errors: 0\n 1.16404e+06 states, stored\n")
    assert big.states_stored == 1_164_040
    assert parse_pan_output("pan: out of memory\n").errors is None


@needs_spin
@pytest.mark.model_check
def test_the_verdict_is_the_errors_line_not_the_exit_status() -> None:
    text = "byte x = 0;\nactive proctype P() { x = 2 }\nltl small { [] (x < 2) }\n"
    # A real model that fails is not ok; the same model as a seeded bug is.
    [failing] = check_model(SpinModel("tiny", 1, text, ("small",)))
    assert failing["errors"] == 1
    assert not failing["ok"]
    [refuted] = check_model(SpinModel("tiny", 1, text, ("small",), expected_violation=True))
    assert refuted["ok"]
    # A model Spin cannot parse has no verdict at all.
    [broken] = check_model(SpinModel("broken", 1, "proctype {", ("small",)))
    assert broken["errors"] is None
    assert not broken["ok"]
    assert broken["detail"] is not None
    assert broken["detail"].startswith("spin -a exited")


# -- availability and profiles ------------------------------------------------------------------


def test_without_spin_the_checks_report_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    summary = run_checks("ci")
    assert summary["available"] is False
    assert summary["passed"] is False
    assert summary["models"] == []
    assert summary["reason"] is not None
    assert "apt-get install -y --no-install-recommends spin gcc libc6-dev" in summary["reason"]
    assert summary["racers"] == 5


def test_profiles_and_racer_bounds() -> None:
    assert dict(PROFILES) == {"ci": 5, "deep": 7}
    with pytest.raises(ValueError, match="profile must be one of"):
        run_checks("nightly")
    with pytest.raises(ValueError, match="racers"):
        render_callbacks(2)
    with pytest.raises(ValueError, match="racers"):
        render_budget(2)
    with pytest.raises(ValueError, match="racers"):
        render_terminal_cas(LIFECYCLE, 0)
    assert "#define CALLBACKS 5" in render_callbacks(7)
    tool_limit, per_tool_limit = _spin.budget_limits(RACERS)
    assert f"#define TOOL_LIMIT {tool_limit}" in render_budget(RACERS)
    assert f"#define PER_TOOL_LIMIT {per_tool_limit}" in render_budget(RACERS)
    assert tool_limit < RACERS
    assert per_tool_limit * 2 < RACERS
    with pytest.raises(ValueError, match="seeded_bug must be a bool or one of"):
        render_budget(RACERS, seeded_bug="spent")


def test_the_budget_model_races_money_that_cannot_all_be_held() -> None:
    """Fewer holds fit the money limit than the Tool-call limit lets through, so a hold is
    refused on money alone; an actual above its hold passes the limit only by a settle."""
    text = render_budget(RACERS)
    hold, limit = _spin.BUDGET_HOLD, _spin.money_limit(RACERS)
    tool_limit, _ = _spin.budget_limits(RACERS)
    assert f"#define HOLD {hold}" in text
    assert f"#define COST_LIMIT {limit}" in text
    assert hold * tool_limit > limit  # the money refuses before the Tool calls do
    assert limit // hold >= 2  # two holds race for the money
    assert ":: actual = HOLD + 1" in text  # a settle may record more than its hold
    assert "#define SEEDED_BUG 0" in text
    assert "#define SEEDED_BUG 1" in render_budget(RACERS, seeded_bug=True)
    unheld = render_budget(RACERS, seeded_bug="unheld")
    assert "#define SEEDED_BUG 2" in unheld
    assert "holding[0] + holding[1] + holding[2] + holding[3] + holding[4]" in text


@needs_spin
@pytest.mark.model_check
def test_run_checks_summarises_every_result() -> None:
    summary = run_checks("ci", racers=3)
    assert summary["available"] is True
    assert summary["reason"] is None
    assert summary["racers"] == 3
    assert {(r["name"], r["property"]) for r in summary["models"]} == {
        (model.name, prop) for model in build_models(3) for prop in model.properties
    }
    assert summary["passed"] is True, [r for r in summary["models"] if not r["ok"]]


@needs_spin
@pytest.mark.model_check
def test_a_violated_property_is_charged_to_its_scenario_with_the_spin_trail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seeded-bug budget model posing as the real one: Spin's violation of
    ``within_limits`` comes back as a counterexample charged to the per-Tool scenario, its
    steps the trail pan wrote, the globals at its end as the runtime's answer."""
    broken = _spin.SpinModel(
        "budget", 3, _spin.render_budget(3, seeded_bug=True), ("within_limits",)
    )
    fine = _spin.SpinModel("callbacks", 3, _spin.render_callbacks(3), ("once",))

    def build_models(racers: int) -> tuple[_spin.SpinModel, ...]:
        assert racers == 3
        return (broken, fine)

    monkeypatch.setattr(_spin, "build_models", build_models)
    result = _spin.run_spin("ci", 3)
    assert not result.passed
    verdicts = {r.scenario: r.passed for r in result.scenarios}
    assert verdicts == {
        (BUDGETS, "Per-Tool budget is exhausted"): False,
        (DEADLINE, "Client disconnects"): True,
    }
    (counterexample,) = result.counterexamples
    assert counterexample.kind == "spin"
    assert counterexample.message.startswith("budget: within_limits is violated")
    assert len(counterexample.steps) > 3
    assert all(step.action.startswith("proc ") for step in counterexample.steps)
    at = counterexample.at
    assert at is not None
    assert at.index == len(counterexample.steps) - 1
    assert at.model == "within_limits holds"
    assert at.runtime is not None
    assert "tool_calls = " in at.runtime
    assert "spin -t -p budget.pml" in counterexample.replay
