"""The report as GitHub-flavoured Markdown: a summary, one table per requirement, one coverage
table per machine.

Every cell is escaped for a table (``|`` and line breaks) and, outside code spans, for HTML
(``<``, ``>``, ``&``), so a name or test ID cannot break the layout or add markup; the only HTML
written is ``<br>`` between the tests of a cell. Test IDs and paths are code spans, verbatim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._diagram import TIMES
from ._report import OUTCOMES

if TYPE_CHECKING:
    from ._report import ConformanceReport, Outcome, ScenarioReport, TableCoverage

__all__ = ["render_markdown"]


def _cell(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return " ".join(text.replace("|", "\\|").split())


def _code(text: str) -> str:
    """A code span: shown verbatim (no HTML inside one is markup), only ``|`` escaped."""
    body = " ".join(text.replace("|", "\\|").split())
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def _taken(count: int) -> str:
    return f" ({count}{TIMES})" if count else " (**never**)"


def _outcome(outcome: Outcome) -> str:
    return f"**{outcome}**" if outcome in {"failed", "uncovered"} else outcome


def _kind(outcome: Outcome, count: int) -> str:
    if outcome == "uncovered":
        return "—"
    return f"{_outcome(outcome)} ({count})"


def _scenario_row(report: ScenarioReport) -> str:
    examples = sum(not t.model_check for t in report.tests)
    checks = len(report.tests) - examples
    tests = (
        "<br>".join(
            f"{_code(t.nodeid)} {t.outcome}{', model check' if t.model_check else ''}"
            for t in report.tests
        )
        or "—"
    )
    return (
        f"| {_cell(report.scenario.name)} | {_outcome(report.outcome)} | "
        f"{_kind(report.tested_outcome, examples)} | "
        f"{_kind(report.model_checked_outcome, checks)} | {tests} |"
    )


def _coverage(table: TableCoverage) -> list[str]:
    lines = [f"### {_cell(table.name)} — {_code(table.source)}", ""]
    if table.recorded:
        never = ", ".join(f"#{row.index}" for row in table.uncovered) or "none"
        lines.append(
            f"{len(table.rows) - len(table.uncovered)} of {len(table.rows)} rows taken, "
            f"{table.total} transitions in all; never taken: {never}."
        )
    else:
        lines.append("No transition coverage was recorded (no stateful run reported any).")
    lines += [
        "",
        "| # | Source | Event | Guard | Target | Requirement | Count |",
        "|---:|---|---|---|---|---|---:|",
    ]
    for row in table.rows:
        guard = "" if row.guard is None else f"{'' if row.expect else '!'}{row.guard}"
        count = "—" if not table.recorded else (str(row.count) if row.count else "**never**")
        lines.append(
            f"| {row.index} | {_cell(row.source)} | {_cell(row.event)} | {_cell(guard)} | "
            f"{_cell(row.target)} | {_cell(row.requirement)} | {count} |"
        )
    lines.append("")
    return lines


def render_markdown(report: ConformanceReport) -> str:
    """The report as one Markdown document."""
    parsed, summary = report.parsed, report.summary
    out: list[str] = [f"# Conformance report: {_code(report.capability)}", ""]
    verdict = "valid" if parsed.valid else "**invalid**"
    stamp = f", {_cell(report.generated_at)}" if report.generated_at else ""
    out.append(
        f"Spec {_code(parsed.source)} ({parsed.form} form), "
        f"{'strict ' if parsed.strict else ''}validation: {verdict}. "
        f"diagnosis-harness {_cell(report.version)}{stamp}."
    )
    out.append("")
    verdict_line = (
        "**All scenarios passed.**"
        if report.all_passed
        else "**Not all scenarios passed**"
        + (f"; {summary.unknown} mark(s) name no scenario." if summary.unknown else ".")
    )
    out.append(verdict_line)
    out += [
        "",
        "| | Total | Passed | Failed | Skipped | Uncovered | Tested | Model-checked |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        "| Requirements | {} | {} | — | — |".format(
            summary.requirements,
            " | ".join(str(summary.requirements_by_outcome[o]) for o in OUTCOMES),
        ),
        "| Scenarios | {} | {} | {} | {} |".format(
            summary.scenarios,
            " | ".join(str(summary.scenarios_by_outcome[o]) for o in OUTCOMES),
            summary.tested,
            summary.model_checked,
        ),
        "",
        f"{summary.tests} test results matched a scenario: "
        f"{summary.tests_by_outcome['passed']} passed, {summary.tests_by_outcome['failed']} "
        f"failed, {summary.tests_by_outcome['skipped']} skipped; "
        f"{summary.model_checks} of them from model checks.",
        "",
    ]
    if parsed.problems:
        out += ["## Spec problems", "", "| Level | Line | Path | Message |", "|---|---:|---|---|"]
        for problem in parsed.problems:
            line = "" if problem.line is None else str(problem.line)
            out.append(
                f"| {problem.level} | {line} | {_code(problem.path)} | {_cell(problem.message)} |"
            )
        out.append("")
    if report.unknown:
        out += [
            "## Marks naming no scenario",
            "",
            "| Test | Requirement | Scenario | Problem |",
            "|---|---|---|---|",
        ]
        for marker in report.unknown:
            note = marker.message + (f"; {marker.hint}" if marker.hint else "")
            out.append(
                f"| {_code(marker.nodeid)} | {_cell(marker.requirement or '—')} | "
                f"{_cell(marker.scenario or '—')} | {_cell(note)} |"
            )
        out.append("")
    out += ["## Requirements", ""]
    recorded = {table.name: table.recorded for table in report.coverage}
    for requirement in report.requirements:
        r = requirement.requirement
        out += [
            f"### {_cell(r.name)}",
            "",
            f"{_code(r.id)}, line {r.line}: {_outcome(requirement.outcome)}.",
            "",
            "| Scenario | Outcome | Tested | Model-checked | Tests |",
            "|---|---|---|---|---|",
        ]
        out += [_scenario_row(s) for s in requirement.scenarios]
        if not requirement.scenarios:
            out.append("| — | **uncovered** | — | — | — |")
        if requirement.rows:
            served = ", ".join(
                f"{_cell(table)} #{row.index}{_taken(row.count) if recorded[table] else ''}"
                for table, row in requirement.rows
            )
            out += ["", f"Machine rows serving it: {served}."]
        out.append("")
    out += ["## Transition coverage", ""]
    for table in report.coverage:
        out += _coverage(table)
    if report.coverage_problems:
        out += ["Coverage problems:", ""]
        out += [f"- {_cell(text)}" for text in report.coverage_problems]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
