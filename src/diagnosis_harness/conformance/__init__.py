"""Conformance: which spec scenarios the tests show, model-check and never reach.

Read the spec (OpenSpec markdown or the seed's plain text) with :func:`parse_spec` /
:func:`load_spec`, collect one :class:`TestResult` per ``@pytest.mark.spec(requirement,
scenario)`` a test carries (``model_check=True`` for ``@pytest.mark.model_check`` tests), then
:func:`build_report` and render it as JSON (:func:`render_json`, shaped like ``openspec
validate --json``), Markdown (:func:`render_markdown`) or one self-contained HTML page
(:func:`render_html`), or all three with :func:`write_reports`::

    parsed = load_spec("specs/diagnosis-harness-run-context/spec.md")
    report = build_report(parsed, results, coverage=transition_coverage.as_dict())
    write_reports(report, "reports")

The Core never imports this package; it uses only the standard library and the Core's tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ._diagram import render_svg
from ._render_html import render_html
from ._render_json import render_json, report_dict
from ._render_markdown import render_markdown
from ._report import (
    OUTCOMES,
    Checked,
    ConformanceReport,
    Counterexample,
    CounterexampleStep,
    CoverageData,
    Identity,
    Outcome,
    ReportSummary,
    RequirementReport,
    RowCoverage,
    ScenarioReport,
    SupportsCounts,
    TableCoverage,
    TestOutcome,
    TestResult,
    UnknownMarker,
    build_report,
    coverage_counts,
    default_tables,
    fold_outcomes,
    table_coverage,
)
from ._spec import (
    Level,
    ParsedSpec,
    Requirement,
    Scenario,
    Spec,
    SpecForm,
    SpecProblem,
    Step,
    StepKeyword,
    find_scenario,
    load_spec,
    nearest_match,
    nearest_scenario,
    parse_markdown,
    parse_plain,
    parse_spec,
    slugify,
)

if TYPE_CHECKING:
    import os

__all__ = [
    "OUTCOMES",
    "REPORT_FILES",
    "Checked",
    "ConformanceReport",
    "Counterexample",
    "CounterexampleStep",
    "CoverageData",
    "Identity",
    "Level",
    "Outcome",
    "ParsedSpec",
    "ReportSummary",
    "Requirement",
    "RequirementReport",
    "RowCoverage",
    "Scenario",
    "ScenarioReport",
    "Spec",
    "SpecForm",
    "SpecProblem",
    "Step",
    "StepKeyword",
    "SupportsCounts",
    "TableCoverage",
    "TestOutcome",
    "TestResult",
    "UnknownMarker",
    "build_report",
    "coverage_counts",
    "default_tables",
    "find_scenario",
    "fold_outcomes",
    "load_spec",
    "nearest_match",
    "nearest_scenario",
    "parse_markdown",
    "parse_plain",
    "parse_spec",
    "render_html",
    "render_json",
    "render_markdown",
    "render_svg",
    "report_dict",
    "slugify",
    "table_coverage",
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
