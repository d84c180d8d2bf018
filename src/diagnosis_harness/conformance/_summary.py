"""The words and counts every rendering of a report shares, and the console summary.

One vocabulary (see :class:`~._report.ReportSummary`): *scenarios* are counted once each, by
outcome; *tests* are test items that ran (pytest node IDs), each counted once; *credits* are
(test, scenario) pairs, so a test naming two scenarios is one test and two credits. The console,
the Markdown, the HTML and the JSON use these names for these numbers and no other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._diagram import TIMES
from ._report import TEST_OUTCOMES

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from ._report import ConformanceReport, Identity, ReportSummary, ScenarioReport, TestOutcome

__all__ = [
    "LIST_LIMIT",
    "checked_phrase",
    "console_summary",
    "credits_phrase",
    "identity_phrase",
    "tests_phrase",
    "verdict",
]

LIST_LIMIT: Final = 12  # scenarios without a pass listed on the console


def _split(counts: Mapping[TestOutcome, int]) -> str:
    return ", ".join(f"{counts[o]} {o}" for o in TEST_OUTCOMES)


def tests_phrase(s: ReportSummary) -> str:
    """``35 tests naming a scenario (32 passed, 3 failed, 0 skipped; 14 of them model checks)``:
    pytest's own count can be higher, by the tests that name no scenario."""
    return (
        f"{s.tests} tests naming a scenario ({_split(s.tests_by_outcome)}; "
        f"{s.model_check_tests} of them model checks)"
    )


def credits_phrase(s: ReportSummary) -> str:
    """``35 test x scenario credits (32 passed, 3 failed, 0 skipped)``, with a times sign."""
    return f"{s.credits} test {TIMES} scenario credits ({_split(s.credits_by_outcome)})"


def checked_phrase(s: ReportSummary) -> str:
    """How many scenarios have an example test and a model check, by the outcome of those."""
    tested, checked = sum(s.example_tested.values()), sum(s.model_checked.values())
    return (
        f"{tested} example-tested ({_split(s.example_tested)}), "
        f"{checked} model-checked ({_split(s.model_checked)})"
    )


def identity_phrase(identity: Identity) -> str:
    """``diagnosis-harness 0.1.0, commit 4b0694b (dirty), Python 3.11.7, Hypothesis profile ci
    (seed derandomized), 2026-12-03T21:00:00+00:00`` -- what is known of it."""
    parts = [f"diagnosis-harness {identity.version}"]
    if identity.commit:
        parts.append(f"commit {identity.commit[:12]}" + (" (dirty)" if identity.dirty else ""))
    parts.append(f"Python {identity.python}")
    if identity.hypothesis_profile:
        seed = f" (seed {identity.hypothesis_seed})" if identity.hypothesis_seed else ""
        parts.append(f"Hypothesis profile {identity.hypothesis_profile}{seed}")
    if identity.generated_at:
        parts.append(identity.generated_at)
    return ", ".join(parts)


def verdict(report: ConformanceReport) -> str:
    """``PASS: all 16 scenarios passed`` or ``FAIL: 3 of 16 scenarios failed, ...``: each
    reason counted as what it is."""
    s = report.summary
    by = s.scenarios_by_outcome
    if report.all_passed:
        return f"PASS: all {s.scenarios} scenarios passed"
    reasons: list[str] = []
    if by["failed"]:
        reasons.append(f"{by['failed']} of {s.scenarios} scenarios failed")
    if by["uncovered"]:
        reasons.append(f"{by['uncovered']} of {s.scenarios} scenarios have no test")
    if by["skipped"]:
        reasons.append(f"{by['skipped']} of {s.scenarios} scenarios were only skipped")
    if s.unknown:
        reasons.append(f"{s.unknown} spec mark(s) name no scenario")
    if not report.valid:
        reasons.append(f"the spec is invalid ({s.errors} error(s), {s.warnings} warning(s))")
    return "FAIL: " + "; ".join(reasons)


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 110 else line[:107] + "..."


def _why(scenario: ScenarioReport) -> list[str]:
    lines: list[str] = []
    for test in scenario.tests:
        if test.outcome != "failed":
            continue
        lines.append(f"      {test.nodeid}")
        if test.message:
            lines.append(f"        {_first_line(test.message)}")
        if test.counterexample is not None:
            example = test.counterexample
            step = example.disagreeing_step
            lines.append(
                f"        counterexample: {len(example.steps)} step(s) ({example.kind})"
                + (
                    f"; at step {step.index}, {step.action}: model {step.model}, "
                    f"runtime {step.runtime}"
                    if step is not None
                    else ""
                )
                + (f"; replay: {example.replay}" if example.replay else "")
            )
    return lines


def console_summary(
    report: ConformanceReport,
    *,
    origin: str | None = None,
    written: Mapping[str, Path] | None = None,
    shown: Callable[[Path], str] = str,
) -> list[str]:
    """The one-screen summary: identity, counts, each scenario without a pass with the first
    line of why, the files written, and the verdict line last.

    ``shown`` turns a written path into text (``str`` by default).
    """
    s = report.summary
    by, req = s.scenarios_by_outcome, s.requirements_by_outcome
    source = report.parsed.source + (f" ({origin})" if origin else "")
    lines = [
        f"conformance of {report.capability}",
        f"  made by       {identity_phrase(report.identity)}",
        f"  spec          {source}"
        + ("" if report.valid else f" -- INVALID: {s.errors} error(s), {s.warnings} warning(s)"),
        f"  requirements  {req['passed']}/{s.requirements} passed"
        f" ({req['failed']} failed, {req['skipped']} skipped, {req['uncovered']} uncovered)",
        f"  scenarios     {by['passed']}/{s.scenarios} passed"
        f" ({by['failed']} failed, {by['skipped']} skipped, {by['uncovered']} uncovered);"
        f" {checked_phrase(s)}",
        f"  tests         {tests_phrase(s)}",
        f"  credits       {credits_phrase(s)}",
    ]
    if report.coverage:
        parts = ", ".join(
            f"{t.name} {sum(1 for r in t.rows if r.count)}/{len(t.rows)}"
            if t.recorded
            else f"{t.name} not recorded"
            for t in report.coverage
        )
        lines.append(f"  transitions   rows taken: {parts}")
    lacking = [r for r in report.scenarios if r.outcome != "passed"]
    for scenario in lacking[:LIST_LIMIT]:
        lines.append(
            f"  {scenario.outcome.upper():12}  {scenario.scenario.requirement}"
            f" / {scenario.scenario.name}"
        )
        lines += _why(scenario)
    if len(lacking) > LIST_LIMIT:
        lines.append(f"  ... and {len(lacking) - LIST_LIMIT} more scenarios without a pass")
    for unknown in report.unknown[:LIST_LIMIT]:
        lines.append(
            f"  UNKNOWN MARK  {unknown.nodeid}: spec({unknown.requirement!r}, "
            f"{unknown.scenario!r}) {unknown.message}"
            + (f"; {unknown.hint}" if unknown.hint else "")
        )
    if len(report.unknown) > LIST_LIMIT:
        lines.append(f"  ... and {len(report.unknown) - LIST_LIMIT} more unknown marks")
    if written:
        lines.append("  wrote         " + ", ".join(shown(p) for p in written.values()))
    lines.append(verdict(report))
    return lines
