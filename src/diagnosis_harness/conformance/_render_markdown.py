"""The report as GitHub-flavoured Markdown: the verdict and counts, then each requirement with
its scenarios (their WHEN/THEN steps, their tests and, for a failed test, why), then one coverage
table per machine.

Every cell is escaped for a table (``|`` and line breaks) and, outside code spans, for HTML
(``<``, ``>``, ``&``), so a name or test ID cannot break the layout or add markup; the only HTML
written is ``<br>``. Test IDs and paths are code spans, verbatim; failure messages are fenced
code blocks, verbatim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._diagram import TIMES
from ._report import OUTCOMES, TEST_OUTCOMES
from ._summary import credits_phrase, identity_phrase, tests_phrase, verdict

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._report import (
        ConformanceReport,
        Counterexample,
        Outcome,
        ScenarioReport,
        TableCoverage,
        TestOutcome,
        TestResult,
    )

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


def _block(text: str, indent: str = "") -> list[str]:
    """A fenced code block holding ``text`` verbatim (the fence outgrows any backticks in it)."""
    fence = "```"
    while fence in text:
        fence += "`"
    return [
        f"{indent}{fence}text",
        *(f"{indent}{line}" for line in text.splitlines()),
        indent + fence,
    ]


def _taken(count: int) -> str:
    return f" ({count}{TIMES})" if count else " (**never**)"


def _outcome(outcome: Outcome) -> str:
    return f"**{outcome}**" if outcome in {"failed", "uncovered"} else outcome


def _counts(counts: Mapping[TestOutcome, int]) -> str:
    return " | ".join(str(counts[o]) for o in TEST_OUTCOMES) + " | —"


def _counterexample(example: Counterexample) -> list[str]:
    replay = f"; replay with {_code(example.replay)}" if example.replay else ""
    out = [
        "",
        f"  Counterexample ({_cell(example.kind)}, {len(example.steps)} step(s)){replay}:",
        "",
    ]
    if example.message:
        out += [*_block(example.message, "  "), ""]
    out += ["  | Step | Action | Model | Runtime |", "  |---:|---|---|---|"]
    for step in example.steps:
        mark = " ⚠ **disagree**" if step.index == example.disagreement else ""
        out.append(
            f"  | {step.index}{mark} | {_code(step.action)} | "
            f"{_code(step.model) if step.model is not None else '—'} | "
            f"{_code(step.runtime) if step.runtime is not None else '—'} |"
        )
    return out


def _test(test: TestResult) -> list[str]:
    kind = ", model check" if test.model_check else ""
    checked = (
        f", {test.checked.count:,} {test.checked.kind} checked" if test.checked is not None else ""
    )
    out = [f"- {_code(test.nodeid)}: {_outcome(test.outcome)}{kind}{checked}"]
    if test.message:
        out += ["", *_block(test.message, "  ")]
    if test.counterexample is not None:
        out += _counterexample(test.counterexample)
    if len(out) > 1:
        out.append("")
    return out


def _scenario(report: ScenarioReport) -> list[str]:
    scenario = report.scenario
    out = [
        f"#### Scenario: {_cell(scenario.name)} — {_outcome(report.outcome)}",
        "",
        f"{_code(scenario.id)}, line {scenario.line}. Example tests: "
        f"{_kind(report.tested_outcome)}; model checks: {_kind(report.model_checked_outcome)}.",
        "",
    ]
    out += [f"- **{step.keyword}** {_cell(step.text)}" for step in scenario.steps]
    out += ["", "Tests:" if report.tests else "No test names this scenario.", ""]
    for test in report.tests:
        out += _test(test)
    if out[-1] != "":
        out.append("")
    return out


def _kind(outcome: Outcome) -> str:
    return "none" if outcome == "uncovered" else _outcome(outcome)


def _coverage(table: TableCoverage) -> list[str]:
    lines = [f"### {_cell(table.name)} — {_code(table.source)}", ""]
    if table.recorded:
        never = ", ".join(f"#{row.index}" for row in table.uncovered) or "none"
        lines.append(
            f"{len(table.rows) - len(table.uncovered)} of {len(table.rows)} rows taken, "
            f"{table.total} transitions in all; never taken: {never}."
        )
    else:
        lines.append(
            "Not recorded: no check of this run took a row of this table, so each count is "
            "unknown (—), not zero."
        )
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
    validity = "valid" if parsed.valid else "**invalid**"
    out += [
        f"Spec {_code(parsed.source)}, {'strict ' if parsed.strict else ''}validation: {validity}.",
        "",
        f"Made by {_cell(identity_phrase(report.identity))}.",
        "",
        f"**{_cell(verdict(report))}**",
        "",
        "| Count of | Total | Passed | Failed | Skipped | Uncovered |",
        "|---|---:|---:|---:|---:|---:|",
        "| Requirements | {} | {} |".format(
            summary.requirements,
            " | ".join(str(summary.requirements_by_outcome[o]) for o in OUTCOMES),
        ),
        "| Scenarios | {} | {} |".format(
            summary.scenarios,
            " | ".join(str(summary.scenarios_by_outcome[o]) for o in OUTCOMES),
        ),
        f"| Scenarios with an example test | {sum(summary.example_tested.values())} | "
        f"{_counts(summary.example_tested)} |",
        f"| Scenarios with a model check | {sum(summary.model_checked.values())} | "
        f"{_counts(summary.model_checked)} |",
        f"| Tests naming a scenario | {summary.tests} | {_counts(summary.tests_by_outcome)} |",
        f"| Test {TIMES} scenario credits | {summary.credits} | "
        f"{_counts(summary.credits_by_outcome)} |",
        "",
        f"{_cell(tests_phrase(summary))}; {_cell(credits_phrase(summary))}. A test is one "
        "test item, counted once; a credit is one (test, scenario) pair, so a test naming two "
        "scenarios is one test and two credits.",
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
        ]
        if requirement.rows:
            served = ", ".join(
                f"{_cell(table)} #{row.index}{_taken(row.count) if recorded[table] else ' (—)'}"
                for table, row in requirement.rows
            )
            out += [f"Machine rows serving it: {served}.", ""]
        if not requirement.scenarios:
            out += ["This requirement has no scenario: **uncovered**.", ""]
        for scenario in requirement.scenarios:
            out += _scenario(scenario)
    out += ["## Transition coverage", ""]
    for table in report.coverage:
        out += _coverage(table)
    if report.coverage_problems:
        out += ["Coverage problems:", ""]
        out += [f"- {_cell(text)}" for text in report.coverage_problems]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
