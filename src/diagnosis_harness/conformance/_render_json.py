"""The report as JSON, shaped like ``openspec validate --json`` and extended per scenario.

``items`` / ``summary.totals`` / ``summary.byType`` and each issue's ``level``, ``path``,
``message`` and ``line`` (left out when unknown) are OpenSpec's; a program that reads the
validator's output reads this one. Added: per item the requirements with their scenarios, tests
and outcomes, each failed test's ``message`` and a model check's ``checked`` and
``counterexample``; in ``summary`` the scenario, requirement, test and credit counts and
``all_passed``; ``identity``; ``unknown`` (marks naming no scenario); ``coverage`` per machine
table, where a row's ``count`` is ``null`` when the table's coverage was not recorded and ``0``
when it was and the row was never taken. ``version`` is diagnosis-harness's (OpenSpec puts its
report-format version there).

The document's JSON Schema is ``docs/reference/conformance-report.schema.json``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._report import (
        Checked,
        ConformanceReport,
        Counterexample,
        ScenarioReport,
        TableCoverage,
        TestResult,
    )
    from ._spec import SpecProblem

__all__ = ["render_json", "report_dict"]


def _issue(problem: SpecProblem) -> dict[str, Any]:
    issue: dict[str, Any] = {"level": problem.level, "path": problem.path}
    if problem.line is not None:
        issue["line"] = problem.line
    issue["message"] = problem.message
    issue["code"] = problem.code
    return issue


def _checked(checked: Checked | None) -> dict[str, Any] | None:
    return None if checked is None else {"kind": checked.kind, "count": checked.count}


def _counterexample(example: Counterexample | None) -> dict[str, Any] | None:
    if example is None:
        return None
    return {
        "kind": example.kind,
        "message": example.message,
        "steps": [
            {"index": s.index, "action": s.action, "model": s.model, "runtime": s.runtime}
            for s in example.steps
        ],
        "disagreement": example.disagreement,
        "replay": example.replay,
    }


def _test(test: TestResult) -> dict[str, Any]:
    return {
        "nodeid": test.nodeid,
        "outcome": test.outcome,
        "model_check": test.model_check,
        "duration": test.duration,
        "message": test.message,
        "checked": _checked(test.checked),
        "counterexample": _counterexample(test.counterexample),
    }


def _scenario(report: ScenarioReport) -> dict[str, Any]:
    scenario = report.scenario
    return {
        "id": scenario.id,
        "name": scenario.name,
        "line": scenario.line,
        "outcome": report.outcome,
        "tested": report.tested,
        "model_checked": report.model_checked,
        "tested_outcome": report.tested_outcome,
        "model_checked_outcome": report.model_checked_outcome,
        "steps": [{"keyword": s.keyword, "text": s.text, "line": s.line} for s in scenario.steps],
        "tests": [_test(t) for t in report.tests],
    }


def _coverage(table: TableCoverage) -> dict[str, Any]:
    return {
        "source": table.source,
        "recorded": table.recorded,
        "states": list(table.states),
        "initial": table.initial,
        "terminal": [s for s in table.states if s in table.terminal],
        "rows": [
            {
                "index": row.index,
                "source": row.source,
                "event": row.event,
                "guard": row.guard,
                "expect": row.expect,
                "target": row.target,
                "requirement": row.requirement,
                "count": row.count if table.recorded else None,
            }
            for row in table.rows
        ],
        "uncovered": [row.index for row in table.uncovered],
        "unreached_states": (
            [s for s in table.states if s not in table.reached_states] if table.recorded else []
        ),
    }


def report_dict(report: ConformanceReport) -> dict[str, Any]:
    """The JSON document as plain Python data (what :func:`render_json` serialises)."""
    parsed, summary, identity = report.parsed, report.summary, report.identity
    valid = parsed.valid
    item = {
        "id": report.capability,
        "type": "spec",
        "valid": valid,
        "issues": [_issue(p) for p in parsed.problems],
        "source": parsed.source,
        "strict": parsed.strict,
        "requirements": [
            {
                "id": r.requirement.id,
                "name": r.requirement.name,
                "line": r.requirement.line,
                "outcome": r.outcome,
                "scenarios": [_scenario(s) for s in r.scenarios],
            }
            for r in report.requirements
        ],
    }
    totals = {"items": 1, "passed": int(valid), "failed": int(not valid)}
    return {
        "items": [item],
        "summary": {
            "totals": totals,
            "byType": {"spec": dict(totals)},
            "issues": {
                "errors": summary.errors,
                "warnings": summary.warnings,
                "info": summary.info,
            },
            "requirements": {"total": summary.requirements, **summary.requirements_by_outcome},
            "scenarios": {
                "total": summary.scenarios,
                **summary.scenarios_by_outcome,
                "example_tested": {
                    "total": sum(summary.example_tested.values()),
                    **summary.example_tested,
                },
                "model_checked": {
                    "total": sum(summary.model_checked.values()),
                    **summary.model_checked,
                },
            },
            "tests": {
                "total": summary.tests,
                **summary.tests_by_outcome,
                "model_checks": summary.model_check_tests,
            },
            "credits": {"total": summary.credits, **summary.credits_by_outcome},
            "unknown": summary.unknown,
            "all_passed": report.all_passed,
        },
        "version": identity.version,
        "generated_at": identity.generated_at,
        "identity": {
            "version": identity.version,
            "commit": identity.commit,
            "dirty": identity.dirty,
            "generated_at": identity.generated_at,
            "python": identity.python,
            "hypothesis_profile": identity.hypothesis_profile,
            "hypothesis_seed": identity.hypothesis_seed,
        },
        "unknown": [
            {
                "nodeid": u.nodeid,
                "requirement": u.requirement,
                "scenario": u.scenario,
                "message": u.message,
                "hint": u.hint,
                "outcome": u.outcome,
            }
            for u in report.unknown
        ],
        "coverage": {table.name: _coverage(table) for table in report.coverage},
        "coverage_problems": list(report.coverage_problems),
    }


def render_json(report: ConformanceReport, *, indent: int | None = None) -> str:
    """The report as a JSON document (non-ASCII kept, ending in a newline).

    Compact by default: the standard library encodes compact JSON in C, indented JSON in
    Python, 4 times slower (0.4 s for a report of 5,000 scenarios). ``indent=2`` for people.
    """
    return json.dumps(report_dict(report), indent=indent, ensure_ascii=False) + "\n"
