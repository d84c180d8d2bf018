"""Conformance: which spec scenarios the tests show, model-check and never reach, and why not.

Read the spec (OpenSpec Markdown) with :func:`load_spec` / :func:`parse_spec`, collect one
:class:`TestResult` per test and scenario its ``@pytest.mark.spec(requirement, scenario)`` names
(``model_check=True`` for ``@pytest.mark.model_check`` tests; a failed one with its ``message``
and, for a model check, its :class:`Counterexample`), then :func:`build_report` and render it as
JSON (:func:`render_json`, shaped like ``openspec validate --json``; its schema is
``docs/reference/conformance-report.schema.json``), Markdown (:func:`render_markdown`) or one
self-contained HTML page (:func:`render_html`), or all three with :func:`write_reports`::

    parsed = load_spec("specs/diagnosis-harness-run-context/spec.md")
    report = build_report(parsed, results, coverage=transition_coverage)
    write_reports(report, "reports")

The pytest plugin (:mod:`._plugin`) does all of this for a pytest run, and ``diagnosis-harness
report`` for the bundled suite. The Core never imports this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ._render_html import render_html
from ._render_json import render_json
from ._render_markdown import render_markdown
from ._report import (
    Checked,
    ConformanceReport,
    Counterexample,
    CounterexampleStep,
    Identity,
    Outcome,
    ReportSummary,
    RequirementReport,
    RowCoverage,
    ScenarioReport,
    TableCoverage,
    TestOutcome,
    TestResult,
    UnknownMarker,
    build_report,
    coverage_counts,
    fold_outcomes,
)
from ._spec import (
    ParsedSpec,
    Requirement,
    Scenario,
    Spec,
    SpecProblem,
    Step,
    find_scenario,
    load_spec,
    parse_spec,
)

if TYPE_CHECKING:
    import os

__all__ = [
    "REPORT_FILES",
    "Checked",
    "ConformanceReport",
    "Counterexample",
    "CounterexampleStep",
    "Identity",
    "Outcome",
    "ParsedSpec",
    "ReportSummary",
    "Requirement",
    "RequirementReport",
    "RowCoverage",
    "Scenario",
    "ScenarioReport",
    "Spec",
    "SpecProblem",
    "Step",
    "TableCoverage",
    "TestOutcome",
    "TestResult",
    "UnknownMarker",
    "build_report",
    "coverage_counts",
    "find_scenario",
    "fold_outcomes",
    "load_spec",
    "parse_spec",
    "render_html",
    "render_json",
    "render_markdown",
    "write_reports",
]

REPORT_FILES = {
    "json": "conformance.json",
    "markdown": "conformance.md",
    "html": "conformance.html",
}
"""The file each :func:`write_reports` format goes to, by format."""


def write_reports(report: ConformanceReport, directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``conformance.json``, ``conformance.md`` and ``conformance.html`` into
    ``directory`` (created if missing, files replaced); return their paths by format."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    rendered = {
        "json": render_json(report),
        "markdown": render_markdown(report),
        "html": render_html(report),
    }
    paths: dict[str, Path] = {}
    for form, text in rendered.items():
        path = target / REPORT_FILES[form]
        path.write_text(text, encoding="utf-8", newline="\n")
        paths[form] = path
    return paths
