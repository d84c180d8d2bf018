"""The report's model: outcomes per scenario, tested and model-checked, unknown marks, coverage."""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import diagnosis_harness
from diagnosis_harness._generated.tables import BUDGET, LIFECYCLE, RETRY
from diagnosis_harness.conformance import (
    Checked,
    Counterexample,
    CounterexampleStep,
    Identity,
    ParsedSpec,
    TestOutcome,
    TestResult,
    UnknownMarker,
    build_report,
    coverage_counts,
    fold_outcomes,
    load_spec,
)
from diagnosis_harness.conformance._report import default_tables, table_coverage
from diagnosis_harness.conformance.suite._support import BUDGETS, RUN_CONTEXT, TERMINAL

# The retry table is RETRY in this module, so the requirement keeps a longer name.
from diagnosis_harness.conformance.suite._support import RETRY as RETRY_REQUIREMENT

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MARKDOWN = REPO / "specs" / "diagnosis-harness-run-context" / "spec.md"


@pytest.fixture(scope="module")
def parsed() -> ParsedSpec:
    return load_spec(MARKDOWN)


def result(
    requirement: str,
    scenario: str,
    outcome: TestOutcome = "passed",
    *,
    model_check: bool = False,
    nodeid: str | None = None,
) -> TestResult:
    return TestResult(
        nodeid=nodeid
        or f"tests/test_x.py::test_{'check_' if model_check else ''}"
        f"{scenario.lower().replace(' ', '_')}",
        requirement=requirement,
        scenario=scenario,
        outcome=outcome,
        model_check=model_check,
        duration=0.01,
    )


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([], "uncovered"),
        (["passed"], "passed"),
        (["passed", "passed"], "passed"),
        (["skipped"], "skipped"),
        (["skipped", "passed"], "passed"),
        (["passed", "failed"], "failed"),
        (["skipped", "failed"], "failed"),
        (["failed"], "failed"),
    ],
)
def test_fold_outcomes(outcomes: list[TestOutcome], expected: str) -> None:
    assert fold_outcomes(outcomes) == expected


RETRY_SCENARIOS = (
    "Router transport failure succeeds on retry",
    "Tool call fails",
    "Run is cancelled between attempts",
)


@pytest.mark.parametrize("failed", RETRY_SCENARIOS)
@pytest.mark.parametrize(
    "others", [None, "skipped", "passed"], ids=["uncovered", "skipped", "passed"]
)
def test_a_requirement_with_a_failed_scenario_failed(
    parsed: ParsedSpec, failed: str, others: TestOutcome | None
) -> None:
    """A requirement's outcome is its worst scenario's, failed worst of all: a failed scenario
    beside uncovered (or skipped, or passed) ones, before or after them, fails the requirement."""
    results = [result(RETRY_REQUIREMENT, failed, "failed")]
    if others is not None:
        results += [result(RETRY_REQUIREMENT, n, others) for n in RETRY_SCENARIOS if n != failed]
    report = build_report(parsed, results)
    [retry] = [r for r in report.requirements if r.requirement.name == RETRY_REQUIREMENT]
    assert {s.scenario.name: s.outcome for s in retry.scenarios} == {
        name: "failed" if name == failed else others or "uncovered" for name in RETRY_SCENARIOS
    }
    assert retry.outcome == "failed"
    assert report.summary.requirements_by_outcome["failed"] == 1
    assert report.failed


def test_outcomes_per_scenario_and_per_kind(parsed: ParsedSpec) -> None:
    results = [
        result(RUN_CONTEXT, "Context crosses an asynchronous boundary"),
        result(RUN_CONTEXT, "Context crosses an asynchronous boundary", model_check=True),
        result(RUN_CONTEXT, "Invalid identity starts a Run", "failed"),
        result(RUN_CONTEXT, "Invalid identity starts a Run", nodeid="tests/test_x.py::test_again"),
        result(TERMINAL, "Success wins a terminal race", "skipped"),
        result(TERMINAL, "Budget exhaustion wins a terminal race", model_check=True),
        result(TERMINAL, "Budget exhaustion wins a terminal race", "skipped"),
    ]
    report = build_report(parsed, results)
    by_name = {s.scenario.name: s for s in report.scenarios}

    context = by_name["Context crosses an asynchronous boundary"]
    assert (context.outcome, context.tested, context.model_checked) == ("passed", True, True)
    assert len(context.tests) == 2

    invalid = by_name["Invalid identity starts a Run"]
    assert (invalid.outcome, invalid.tested_outcome) == ("failed", "failed")
    assert (invalid.tested, invalid.model_checked) == (False, False)
    assert invalid.model_checked_outcome == "uncovered"

    success = by_name["Success wins a terminal race"]
    assert (success.outcome, success.tested, success.model_checked) == ("skipped", False, False)

    budget = by_name["Budget exhaustion wins a terminal race"]
    assert budget.outcome == "passed"  # the model check passed; the example test was skipped
    assert (budget.tested_outcome, budget.model_checked_outcome) == ("skipped", "passed")
    assert (budget.tested, budget.model_checked) == (False, True)

    uncovered = by_name["Tool call fails"]
    assert (uncovered.outcome, uncovered.tests) == ("uncovered", ())

    requirements = {r.requirement.name: r for r in report.requirements}
    assert requirements[RUN_CONTEXT].outcome == "failed"
    assert requirements[TERMINAL].outcome == "skipped"
    assert requirements[RETRY_REQUIREMENT].outcome == "uncovered"

    summary = report.summary
    assert (summary.requirements, summary.scenarios) == (8, 16)
    assert dict(summary.scenarios_by_outcome) == {
        "passed": 2,
        "failed": 1,
        "skipped": 1,
        "uncovered": 12,
    }
    assert dict(summary.requirements_by_outcome) == {
        "passed": 0,
        "failed": 1,
        "skipped": 1,
        "uncovered": 6,
    }
    # scenarios with an example test / a model check, by the outcome over those tests alone
    assert dict(summary.example_tested) == {"passed": 1, "failed": 1, "skipped": 2}
    assert dict(summary.model_checked) == {"passed": 2, "failed": 0, "skipped": 0}
    assert (summary.tests, summary.model_check_tests) == (7, 2)
    assert dict(summary.tests_by_outcome) == {"passed": 4, "failed": 1, "skipped": 2}
    assert summary.credits == 7
    assert report.failed
    assert not report.all_passed
    assert report.by_id[context.scenario.id] is context


def test_all_passed_needs_every_scenario_passed_and_no_unknown_mark(parsed: ParsedSpec) -> None:
    everything = [result(s.requirement, s.name) for s in parsed.spec.scenarios]
    report = build_report(parsed, everything)
    assert report.all_passed
    assert not report.failed
    assert dict(report.summary.example_tested) == {"passed": 16, "failed": 0, "skipped": 0}
    assert sum(report.summary.model_checked.values()) == 0

    assert not build_report(parsed, everything[1:]).all_passed
    stray = result(TERMINAL, "Nothing like this at all, really")
    assert not build_report(parsed, [*everything, stray]).all_passed
    invalid = load_spec(HERE / "fixtures" / "specs" / "no-shall" / "spec.md")
    assert not build_report(
        invalid, [result(s.requirement, s.name) for s in invalid.spec.scenarios]
    ).all_passed


def test_tests_are_counted_once_and_credits_once_per_scenario(parsed: ParsedSpec) -> None:
    """A test naming two scenarios is one test and two credits; its failure is charged to its
    own two scenarios and to no other."""
    both = "tests/test_x.py::test_both_races"
    results = [
        result(TERMINAL, "Success wins a terminal race", "failed", nodeid=both),
        result(TERMINAL, "Budget exhaustion wins a terminal race", "failed", nodeid=both),
        result(RUN_CONTEXT, "Context crosses an asynchronous boundary", model_check=True),
    ]
    report = build_report(parsed, results)
    summary = report.summary
    assert (summary.tests, dict(summary.tests_by_outcome)) == (
        2,
        {"passed": 1, "failed": 1, "skipped": 0},
    )
    assert (summary.credits, dict(summary.credits_by_outcome)) == (
        3,
        {"passed": 1, "failed": 2, "skipped": 0},
    )
    failed = {s.scenario.name for s in report.scenarios if s.outcome == "failed"}
    assert failed == {"Success wins a terminal race", "Budget exhaustion wins a terminal race"}
    assert dict(summary.model_checked) == {"passed": 1, "failed": 0, "skipped": 0}


def test_results_naming_no_scenario_are_listed_with_a_hint(parsed: ParsedSpec) -> None:
    typo = result(TERMINAL, "Success wins the terminal race", "failed", nodeid="t::typo")
    nonsense = result("Quantum flux", "Capacitor overheats badly", nodeid="t::nonsense")
    given = UnknownMarker(
        nodeid="t::malformed",
        requirement=None,
        scenario=None,
        message="@pytest.mark.spec takes (requirement, scenario)",
    )
    report = build_report(parsed, [typo, nonsense, typo], unknown_markers=[given])
    assert [u.nodeid for u in report.unknown] == [
        "t::malformed",
        "t::typo",
        "t::nonsense",
        "t::typo",
    ]
    _, first, second, third = report.unknown
    assert first.hint == (
        f'did you mean @pytest.mark.spec("{TERMINAL}", "Success wins a terminal race")?'
    )
    assert third.hint == first.hint
    assert first.outcome == "failed"
    assert second.hint is None
    assert report.summary.unknown == 4
    assert report.summary.tests == 0  # unknown marks are not counted as tests of a scenario
    scenario = next(
        s for s in report.scenarios if s.scenario.name == "Success wins a terminal race"
    )
    assert scenario.outcome == "uncovered"


def test_a_duplicate_requirement_s_tests_go_to_the_first_block() -> None:
    parsed = load_spec(HERE / "fixtures" / "specs" / "duplicate-requirement" / "spec.md")
    report = build_report(parsed, [result("Thing works", "It works")], tables=())
    first, _, second = report.requirements
    assert first.outcome == "passed"
    assert second.outcome == "uncovered"
    assert not report.valid


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("outcome", "xfailed", ValueError),
        ("outcome", "PASSED", ValueError),
        ("duration", -1.0, ValueError),
        ("duration", math.nan, ValueError),
        ("duration", math.inf, ValueError),
        ("model_check", 1, TypeError),
    ],
)
def test_a_test_result_rejects_nonsense(field: str, value: object, error: type[Exception]) -> None:
    arguments: dict[str, Any] = {
        "nodeid": "t::x",
        "requirement": TERMINAL,
        "scenario": "Success wins a terminal race",
        "outcome": "passed",
        field: value,
    }
    with pytest.raises(error, match=field):
        TestResult(**arguments)


def test_test_result_is_not_collected_as_a_test_class() -> None:
    assert TestResult.__test__ is False
    assert UnknownMarker.__test__ is False


def test_the_default_tables_are_the_generated_ones() -> None:
    assert default_tables() == (LIFECYCLE, BUDGET, RETRY)


def test_coverage_is_laid_over_every_table(parsed: ParsedSpec) -> None:
    coverage = {"lifecycle": {1: 5, 3: 2}, "retry": {1: 9, 2: 0, 3: 4, 4: 3, 5: 1, 6: 3, 7: 1}}
    report = build_report(parsed, [], coverage=coverage)
    lifecycle, budget, retry = report.coverage
    assert [t.name for t in report.coverage] == ["lifecycle", "budget", "retry"]
    assert lifecycle.recorded
    assert [row.count for row in lifecycle.rows] == [5, 0, 2, 0, 0]
    assert [row.index for row in lifecycle.uncovered] == [2, 4, 5]
    assert lifecycle.total == 7
    assert lifecycle.reached_states == {"RUNNING", "SUCCESS", "CANCELLED"}
    # A table the coverage does not name was not recorded: its counts are unknown, not zero.
    assert not budget.recorded
    assert budget.uncovered == ()
    assert [row.index for row in retry.uncovered] == [2]
    assert report.coverage_problems == ()
    row = lifecycle.rows[0]
    assert (row.source, row.event, row.target, row.guard) == ("RUNNING", "succeed", "SUCCESS", None)
    assert row.requirement == TERMINAL
    guarded = retry.rows[4]
    assert (guarded.guard, guarded.expect, guarded.label) == (
        "retry_allowed",
        False,
        "fail [!retry_allowed]",
    )
    assert retry.rows[3].label == "fail [retry_allowed]"


def test_without_coverage_nothing_is_called_uncovered(parsed: ParsedSpec) -> None:
    report = build_report(parsed, [])
    for table in report.coverage:
        assert not table.recorded
        assert table.uncovered == ()
        assert {row.count for row in table.rows} == {0}


def test_requirements_list_the_rows_that_serve_them(parsed: ParsedSpec) -> None:
    report = build_report(parsed, [], coverage={"retry": {1: 3}})
    served = {
        r.requirement.name: [(t, row.index) for t, row in r.rows] for r in report.requirements
    }
    assert served[RETRY_REQUIREMENT] == [
        ("retry", 1),
        ("retry", 3),
        ("retry", 4),
        ("retry", 5),
        ("retry", 6),
    ]
    assert served[TERMINAL] == [("lifecycle", 1), ("lifecycle", 2)]
    assert served[RUN_CONTEXT] == []
    # every row of model/ names a requirement of the spec
    assert report.coverage_problems == ()


def test_coverage_naming_unknown_tables_or_rows_is_reported(parsed: ParsedSpec) -> None:
    report = build_report(parsed, [], coverage={"lifecycle": {1: 1, 99: 2}, "warp": {1: 1}})
    assert report.coverage_problems == (
        "coverage of table 'lifecycle' names row 99, which it does not have",
        "coverage names table 'warp', which is not among ['budget', 'lifecycle', 'retry']",
    )


def test_rows_serving_a_requirement_the_spec_lacks_are_reported() -> None:
    other = load_spec(HERE / "fixtures" / "specs" / "valid" / "spec.md")
    report = build_report(other, [], tables=[BUDGET])
    assert len(report.coverage_problems) == 6
    assert report.coverage_problems[0] == (
        f"row budget #1 serves requirement '{BUDGETS}', which the spec does not have"
    )


def test_a_spec_of_your_own_gets_no_harness_table_by_default() -> None:
    """A user's own spec shares no requirement with the harness's rows: no table, no problem."""
    other = load_spec(HERE / "fixtures" / "specs" / "valid" / "spec.md")
    report = build_report(other, [], coverage={})
    assert report.coverage == ()
    assert report.coverage_problems == ()
    # A table the run recorded coverage of is shown all the same, with what it serves.
    report = build_report(other, [], coverage={"budget": {1: 3}})
    assert [machine.name for machine in report.coverage] == ["budget"]
    assert len(report.coverage_problems) == len(BUDGET.rows)


def test_the_harness_spec_gets_every_harness_table_by_default(parsed: ParsedSpec) -> None:
    report = build_report(parsed, [], coverage={"budget": {1: 3}})
    assert [machine.name for machine in report.coverage] == [t.name for t in default_tables()]
    assert report.coverage_problems == ()


@pytest.mark.parametrize("count", [-1, 1.5, True, "3"])
def test_a_count_must_be_a_natural_number(parsed: ParsedSpec, count: object) -> None:
    with pytest.raises(ValueError, match=r"coverage\['lifecycle'\]\[1\] must be an int >= 0"):
        build_report(parsed, [], coverage={"lifecycle": {1: count}})


class _Counter:
    """Stands in for modelcheck's TransitionCoverage: only ``counts()`` is read."""

    def counts(self) -> dict[tuple[str, int], int]:
        return {("lifecycle", 1): 3, ("lifecycle", 2): 0, ("retry", 4): 7}


def test_coverage_counts_reads_every_shape_the_model_checks_hand_over() -> None:
    expected = {"lifecycle": {1: 3, 2: 0}, "retry": {4: 7}}
    assert coverage_counts(_Counter()) == expected
    assert coverage_counts(_Counter().counts()) == expected
    assert coverage_counts(expected) == expected
    assert coverage_counts(json.loads(json.dumps(expected))) == expected  # "1" -> 1
    as_dict = {
        "tables": {
            "lifecycle": {
                "source": "model/lifecycle.toml",
                "rows": [{"index": 1, "count": 3}, {"index": 2, "count": 0}],
                "covered": 1,
                "total": 2,
            },
            "retry": {"rows": [{"index": 4, "event": "fail", "count": 7}]},
        },
        "covered": 2,
        "total": 3,
    }
    assert coverage_counts(as_dict) == expected
    assert coverage_counts(json.loads(json.dumps(as_dict))) == expected


@pytest.mark.parametrize(
    "bad",
    [["lifecycle"], {"lifecycle": 3}, {"lifecycle": {"one": 1}}, {("lifecycle", True): 1}],
)
def test_coverage_counts_refuses_other_shapes(bad: Any) -> None:
    with pytest.raises(ValueError, match="coverage"):
        coverage_counts(bad)


def test_build_report_takes_a_coverage_object(parsed: ParsedSpec) -> None:
    report = build_report(parsed, [], coverage=_Counter())
    lifecycle, budget, retry = report.coverage
    assert [row.count for row in lifecycle.rows] == [3, 0, 0, 0, 0]
    assert retry.rows[3].count == 7
    assert not budget.recorded  # its counts() names no budget row


def test_table_coverage_of_one_table() -> None:
    table = table_coverage(RETRY, {4: 2})
    assert table.states == (
        "READY",
        "ATTEMPTING",
        "AWAITING_RETRY",
        "SUCCEEDED",
        "FAILED",
        "STOPPED",
    )
    assert table.initial == "READY"
    assert table.terminal == {"SUCCEEDED", "FAILED", "STOPPED"}
    assert table.source == "model/retry.toml"
    assert [r.count for r in table.rows] == [0, 0, 0, 2, 0, 0, 0]


def test_identity_defaults_to_this_package_and_python(parsed: ParsedSpec) -> None:
    identity = build_report(parsed, []).identity
    assert identity.version == diagnosis_harness.__version__
    assert identity.python == platform.python_version()
    assert (identity.commit, identity.dirty, identity.generated_at) == (None, None, None)
    given = Identity(version="9.9", python="3.99", generated_at="today")
    report = build_report(parsed, [], identity=given)
    assert (report.version, report.generated_at, report.identity) == ("9.9", "today", given)


def test_a_counterexample_names_a_step_it_has() -> None:
    step = CounterexampleStep(index=0, action="start()")
    with pytest.raises(ValueError, match="disagreement names step 3"):
        Counterexample(kind="schedule", message="", steps=(step,), disagreement=3)


@pytest.mark.parametrize(("kind", "count"), [("sequence", 1), ("schedules", -1), ("examples", 1.5)])
def test_checked_takes_a_known_kind_and_a_natural_count(kind: Any, count: Any) -> None:
    with pytest.raises(ValueError, match=r"Checked\.(kind|count)"):
        Checked(kind=kind, count=count)


def test_the_core_does_not_import_conformance_and_conformance_needs_only_the_stdlib() -> None:
    probe = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import diagnosis_harness\n"
        "core = set(sys.modules)\n"
        "import diagnosis_harness.conformance\n"
        "print(json.dumps({'core': sorted(core - before), 'added': sorted(set(sys.modules) - core),"
        " 'stdlib': sorted(sys.stdlib_module_names)}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(out.stdout)
    assert not any(name.startswith("diagnosis_harness.conformance") for name in report["core"])
    outside = {
        name
        for name in report["added"]
        if name.split(".")[0] not in set(report["stdlib"]) | {"diagnosis_harness"}
    }
    assert outside == set()
