"""The report as one self-contained HTML page a reviewer opens in a browser.

Self-contained means: one file, the stylesheet inline, the state diagrams inline SVG (from
:mod:`._diagram`), no script, no font, image or link that leaves the page; it renders the same
offline. Every piece of text from the spec, the tests or the tables goes through
:func:`html.escape`. Anchors are the stable IDs, so ``conformance.html#<scenario id>`` links to
one scenario.

Nothing a reader needs is behind a click: each scenario's WHEN/THEN steps are shown in its row,
and under a scenario that failed, each failed test's message and counterexample are shown
open. Test IDs may wrap only after a path separator (``/``, ``::``) or before a parameter
(``[``): a ``<wbr>`` marks each place, and the ID never breaks inside a word.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from ._diagram import TIMES, render_svg
from ._report import OUTCOMES, TEST_OUTCOMES
from ._summary import credits_phrase, identity_phrase, tests_phrase, verdict

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._report import (
        ConformanceReport,
        Counterexample,
        Outcome,
        RequirementReport,
        ScenarioReport,
        TableCoverage,
        TestOutcome,
        TestResult,
    )

__all__ = ["render_html"]

_CSS = """
:root{--ok:#2e7d32;--bad:#c62828;--skip:#a15c00;--none:#607d8b;--ink:#1a2b3c;--muted:#5b6675;
--line:#d8dee6;--bg:#f5f7fa;--card:#fff;--head:#eef2f6}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",
sans-serif;color:var(--ink);background:var(--bg)}
main{max-width:1200px;margin:0 auto;padding:8px 24px 48px}
header.page{background:var(--card);border-bottom:1px solid var(--line);padding:20px 24px}
header.page>div{max-width:1200px;margin:0 auto}
h1{font-size:1.55rem;margin:0 0 4px}
h2{font-size:1.25rem;margin:32px 0 12px;padding-bottom:4px;border-bottom:2px solid var(--line)}
h3{font-size:1.05rem;margin:0 0 6px}
.meta{color:var(--muted);margin:0}
.verdict{display:inline-block;margin-top:12px;padding:6px 14px;border-radius:8px;font-weight:600}
.verdict.ok{background:#e8f5e9;color:var(--ok)}
.verdict.bad{background:#ffebee;color:var(--bad)}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px}
.card .n{display:block;font-size:1.7rem;font-weight:700;line-height:1.2}
.card .k{color:var(--muted);font-size:.85rem}
.card.passed .n{color:var(--ok)}.card.failed .n{color:var(--bad)}
.card.skipped .n{color:var(--skip)}.card.uncovered .n{color:var(--none)}
.badge{display:inline-block;min-width:5.2em;text-align:center;padding:0 .55em;border-radius:999px;
font-size:.78rem;font-weight:600;color:#fff;background:var(--none);white-space:nowrap}
.badge.passed{background:var(--ok)}.badge.failed{background:var(--bad)}
.badge.skipped{background:var(--skip)}.badge.uncovered{background:var(--none)}
.badge.none{background:transparent;color:var(--muted);border:1px dashed var(--line)}
table{border-collapse:collapse;width:100%;background:var(--card);font-size:.92rem}
th,td{border:1px solid var(--line);padding:6px 8px;text-align:left;vertical-align:top}
th{background:var(--head);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.86em;
background:var(--head);padding:0 .3em;border-radius:4px;overflow-wrap:anywhere}
nav.toc ol{columns:2;column-gap:32px;margin:0;padding-left:1.4em}
nav.toc li{break-inside:avoid;margin:2px 0}
nav.toc a{color:var(--ink)}
.requirement{background:var(--card);border:1px solid var(--line);border-left:6px solid var(--none);
border-radius:10px;padding:14px 16px;margin:14px 0}
.requirement.passed{border-left-color:var(--ok)}.requirement.failed{border-left-color:var(--bad)}
.requirement.skipped{border-left-color:var(--skip)}
.requirement .text{color:#2c3e50;margin:6px 0 10px}
.requirement .text p{margin:0 0 6px}
.rid{color:var(--muted);font-size:.85rem;margin:0}
tr.failed>td:first-child{box-shadow:inset 4px 0 var(--bad)}
tr.uncovered>td:first-child{box-shadow:inset 4px 0 var(--none)}
tr.skipped>td:first-child{box-shadow:inset 4px 0 var(--skip)}
tr.passed>td:first-child{box-shadow:inset 4px 0 var(--ok)}
.sname{font-weight:600}
code.nodeid{overflow-wrap:normal;word-break:normal}
.why{margin:6px 0 2px;padding:8px 10px;background:#fff4f4;border:1px solid #f3c1c1;
border-radius:6px}
.why h4{margin:0 0 4px;font-size:.9rem}
.why pre{margin:4px 0;padding:6px 8px;background:#fff;border:1px solid var(--line);
border-radius:4px;white-space:pre-wrap;font:12.5px/1.4 ui-monospace,"DejaVu Sans Mono",monospace}
.why table{font-size:.85rem;margin-top:4px}
.why tr.disagree td{background:#ffe0e0;font-weight:600}
.steps{margin:4px 0 2px 1.1em;padding:0;color:var(--muted);font-size:.9em}
.steps b{color:var(--ink);font-size:.85em}
.sid{display:block;color:var(--muted);font-size:.75rem;margin-top:2px}
ul.tests{list-style:none;margin:0;padding:0}
ul.tests li{margin:1px 0}
.tag{font-size:.72rem;border:1px solid #7e57c2;color:#5e35b1;border-radius:4px;padding:0 .3em}
.muted{color:var(--muted)}
.rows{font-size:.88rem;color:var(--muted);margin:8px 0 0}
.machine{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px;
margin:14px 0}
.diagram{overflow-x:auto;padding:4px 0 8px}
.diagram svg{display:block;max-width:none}
.legend{font-size:.85rem;color:var(--muted);margin:4px 0 10px}
.legend span{display:inline-block;margin-right:16px}
.legend i{display:inline-block;width:26px;height:0;border-top:3px solid;vertical-align:middle;
margin-right:6px}
.legend i.covered{border-color:var(--ok)}.legend i.never{border-color:var(--bad);
border-top-style:dashed}.legend i.unrecorded{border-color:#455a64}
tr.never td{background:#fff4f4;color:var(--bad);font-weight:600}
table.coverage code{white-space:nowrap}
.problems td.level-ERROR{color:var(--bad);font-weight:700}
.problems td.level-WARNING{color:var(--skip);font-weight:700}
footer{color:var(--muted);font-size:.85rem;margin-top:40px}
@media print{body{background:#fff}.requirement,.machine{break-inside:avoid}}
"""

_MODEL_CHECK = ' <span class="tag">model check</span>'
_NEVER = ' class="never"'
_NEVER_TAKEN = ' <b style="color:var(--bad)">never</b>'
_INLINE_CODE = re.compile(r"`([^`]+)`")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _prose(text: str) -> str:
    """Escaped text with its Markdown code spans as ``<code>``."""
    return _INLINE_CODE.sub(r"<code>\1</code>", _e(text))


def _badge(outcome: Outcome, text: str | None = None) -> str:
    return f'<span class="badge {outcome}">{_e(text or outcome)}</span>'


def _nodeid(nodeid: str) -> str:
    """A test ID as ``<code>``, breakable after ``/`` and ``::`` and before ``[`` only."""
    text = _e(nodeid)
    for separator, marked in (("/", "/<wbr>"), ("::", "::<wbr>"), ("[", "<wbr>[")):
        text = text.replace(separator, marked)
    return f'<code class="nodeid">{text}</code>'


def _checked(test: TestResult) -> str:
    if test.checked is None:
        return ""
    return f" <span class='muted'>{test.checked.count:,} {_e(test.checked.kind)}</span>"


def _answer(text: str | None) -> str:
    return "—" if text is None else f"<code>{_e(text)}</code>"


def _counterexample(example: Counterexample) -> str:
    replay = f" · replay: <code>{_e(example.replay)}</code>" if example.replay else ""
    rows = []
    for step in example.steps:
        disagree = ' class="disagree"' if step.index == example.disagreement else ""
        rows.append(
            f'<tr{disagree}><td class="num">{step.index}</td>'
            f"<td><code>{_e(step.action)}</code></td>"
            f"<td>{_answer(step.model)}</td><td>{_answer(step.runtime)}</td></tr>"
        )
    message = f"<pre>{_e(example.message)}</pre>" if example.message else ""
    return (
        f"<h4>Counterexample: {_e(example.kind)}, {len(example.steps)} step(s){replay}</h4>"
        f"{message}"
        '<table class="counterexample"><thead><tr><th class="num">Step</th><th>Action</th>'
        f"<th>Model</th><th>Runtime</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _why(report: ScenarioReport) -> str:
    """Why the scenario failed: each failed test's message and counterexample, shown open."""
    parts = []
    for test in report.tests:
        if test.outcome != "failed":
            continue
        body = f"<h4>{_nodeid(test.nodeid)} failed</h4>"
        if test.message:
            body += f'<pre class="message">{_e(test.message)}</pre>'
        if test.counterexample is not None:
            body += _counterexample(test.counterexample)
        parts.append(f'<div class="why">{body}</div>')
    if not parts:
        return ""
    return f'<tr class="why-row"><td colspan="5">{"".join(parts)}</td></tr>'


def _kind(outcome: Outcome, count: int) -> str:
    if outcome == "uncovered":
        return '<span class="badge none">none</span>'
    return f"{_badge(outcome)} <span class='muted'>{count}</span>"


def _scenario_row(report: ScenarioReport) -> str:
    scenario = report.scenario
    steps = "".join(
        f"<li><b>{_e(step.keyword)}</b> {_prose(step.text)}</li>" for step in scenario.steps
    )
    examples = sum(not t.model_check for t in report.tests)
    if report.tests:
        items = "".join(
            f"<li>{_badge(t.outcome)} {_nodeid(t.nodeid)}"
            f"{_MODEL_CHECK if t.model_check else ''}{_checked(t)}</li>"
            for t in report.tests
        )
        tests = f'<ul class="tests">{items}</ul>'
    else:
        tests = '<span class="muted">no test names this scenario</span>'
    return (
        f'<tr class="{report.outcome}" id="{_e(scenario.id)}">'
        f'<td><span class="sname">{_e(scenario.name)}</span>'
        f'<ol class="steps">{steps}</ol>'
        f'<code class="sid">{_e(scenario.id)}</code></td>'
        f"<td>{_badge(report.outcome)}</td>"
        f"<td>{_kind(report.tested_outcome, examples)}</td>"
        f"<td>{_kind(report.model_checked_outcome, len(report.tests) - examples)}</td>"
        f"<td>{tests}</td></tr>{_why(report)}"
    )


def _requirement(report: RequirementReport, recorded: Mapping[str, bool]) -> str:
    r = report.requirement
    text = "".join(f"<p>{_prose(p)}</p>" for p in r.text.split("\n\n") if p)
    passed = sum(s.outcome == "passed" for s in report.scenarios)
    rows = "".join(_scenario_row(s) for s in report.scenarios) or (
        '<tr class="uncovered"><td colspan="5" class="muted">This requirement has no '
        "scenario.</td></tr>"
    )
    out = [
        f'<article class="requirement {report.outcome}" id="{_e(r.id)}">',
        f"<h3>{_badge(report.outcome)} {_e(r.name)}</h3>",
        f'<p class="rid"><code>{_e(r.id)}</code> · line {r.line} · {passed} of '
        f"{len(report.scenarios)} scenarios passed</p>",
        f'<div class="text">{text}</div>',
        '<table class="scenarios"><thead><tr><th style="width:34%">Scenario</th>'
        "<th>Outcome</th><th>Tested</th><th>Model-checked</th><th>Tests</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>",
    ]
    if report.rows:
        links = ", ".join(
            f'<a href="#machine-{_e(table)}-row-{row.index}">{_e(table)} #{row.index}</a>'
            + (f" ({row.count}{TIMES})" if recorded[table] and row.count else "")
            + (
                ' <b style="color:var(--bad)">never</b>'
                if recorded[table] and not row.count
                else ""
            )
            + (" (—)" if not recorded[table] else "")
            for table, row in report.rows
        )
        out.append(f'<p class="rows">Machine rows serving it: {links}</p>')
    out.append("</article>")
    return "\n".join(out)


def _machine(table: TableCoverage) -> str:
    name = _e(table.name)
    if table.recorded:
        never = ", ".join(f"#{row.index}" for row in table.uncovered) or "none"
        status = (
            f"{len(table.rows) - len(table.uncovered)} of {len(table.rows)} rows taken, "
            f"{table.total} transitions in all; never taken: {_e(never)}."
        )
    else:
        status = (
            "Not recorded: no check of this run took a row of this table, so each count is "
            "unknown (—), not zero."
        )
    rows = []
    for row in table.rows:
        guard = "" if row.guard is None else f"{'' if row.expect else '!'}{row.guard}"
        never_taken = table.recorded and row.count == 0
        count = "—" if not table.recorded else (str(row.count) if row.count else "never")
        rows.append(
            f'<tr id="machine-{name}-row-{row.index}"{_NEVER if never_taken else ""}>'
            f'<td class="num">{row.index}</td><td><code>{_e(row.source)}</code></td>'
            f"<td>{_e(row.event)}</td><td>{_e(guard)}</td><td><code>{_e(row.target)}</code></td>"
            f"<td>{_e(row.requirement)}</td><td class='num'>{count}</td></tr>"
        )
    legend = (
        '<p class="legend"><span><i class="covered"></i>taken (width grows with the count)</span>'
        '<span><i class="never"></i>never taken</span>'
        "<span>grey dashed box: state never reached</span>"
        "<span>double border: terminal</span><span>dot: initial</span></p>"
        if table.recorded
        else '<p class="legend"><span><i class="unrecorded"></i>transition</span>'
        "<span>double border: terminal</span><span>dot: initial</span></p>"
    )
    return "\n".join(
        [
            f'<section class="machine" id="machine-{name}">',
            f"<h3>The {name} machine <span class='muted'>— <code>{_e(table.source)}</code>"
            "</span></h3>",
            f'<p class="meta">{status}</p>',
            f'<div class="diagram">{render_svg(table)}</div>',
            legend,
            '<table class="coverage"><thead><tr><th class="num">#</th><th>Source</th>'
            "<th>Event</th><th>Guard</th><th>Target</th><th>Requirement</th>"
            f'<th class="num">Count</th></tr></thead><tbody>{"".join(rows)}</tbody></table>',
            "</section>",
        ]
    )


def _card(number: int, what: str, outcome: str = "") -> str:
    kind = f"card {outcome}".strip()
    return (
        f'<div class="{kind}"><span class="n">{number}</span>'
        f'<span class="k">{_e(what)}</span></div>'
    )


def _split(counts: Mapping[TestOutcome, int]) -> str:
    return ", ".join(f"{counts[o]} {o}" for o in TEST_OUTCOMES)


def render_html(report: ConformanceReport) -> str:
    """The report as one self-contained HTML page."""
    parsed, summary = report.parsed, report.summary
    capability = _e(report.capability)
    status = "ok" if report.all_passed else "bad"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Conformance report: {capability}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        '<header class="page"><div>',
        f"<h1>Conformance report: <code>{capability}</code></h1>",
        f'<p class="meta">Spec <code>{_e(parsed.source)}</code> · '
        f"{'strict ' if parsed.strict else ''}validation: "
        f"<b>{'valid' if parsed.valid else 'invalid'}</b></p>",
        f'<p class="meta identity">Made by {_e(identity_phrase(report.identity))}</p>',
        f'<p class="verdict {status}">{_e(verdict(report))}</p>',
        "</div></header>",
        "<main>",
        '<section id="summary"><h2>Summary</h2><div class="cards">',
        _card(summary.requirements, "requirements"),
        _card(summary.scenarios, "scenarios"),
    ]
    out += [
        _card(summary.scenarios_by_outcome[outcome], f"scenarios {outcome}", outcome)
        for outcome in OUTCOMES
    ]
    out += [
        _card(
            sum(summary.example_tested.values()),
            f"scenarios with an example test ({_split(summary.example_tested)})",
        ),
        _card(
            sum(summary.model_checked.values()),
            f"scenarios with a model check ({_split(summary.model_checked)})",
        ),
        _card(summary.tests, f"tests naming a scenario ({_split(summary.tests_by_outcome)})"),
        _card(
            summary.credits,
            f"test {TIMES} scenario credits ({_split(summary.credits_by_outcome)})",
        ),
        "</div>",
        f'<p class="meta">{_e(tests_phrase(summary))}; {_e(credits_phrase(summary))}. A test is '
        "one test item, counted once; a credit is one (test, scenario) pair, so a test naming "
        "two scenarios is one test and two credits.</p>",
        "</section>",
    ]
    if parsed.problems:
        out.append(
            '<section id="problems"><h2>Spec problems</h2><table class="problems"><thead><tr>'
            '<th>Level</th><th class="num">Line</th><th>Path</th><th>Message</th></tr></thead>'
            "<tbody>"
        )
        for problem in parsed.problems:
            line = "" if problem.line is None else str(problem.line)
            out.append(
                f'<tr><td class="level-{_e(problem.level)}">{_e(problem.level)}</td>'
                f'<td class="num">{line}</td><td><code>{_e(problem.path)}</code></td>'
                f"<td>{_e(problem.message)}</td></tr>"
            )
        out.append("</tbody></table></section>")
    if report.unknown:
        out.append(
            '<section id="unknown"><h2>Marks naming no scenario</h2><table><thead><tr>'
            "<th>Test</th><th>Requirement</th><th>Scenario</th><th>Problem</th></tr></thead>"
            "<tbody>"
        )
        for marker in report.unknown:
            hint = f"<br><i>{_e(marker.hint)}</i>" if marker.hint else ""
            out.append(
                f"<tr><td><code>{_e(marker.nodeid)}</code></td>"
                f"<td>{_e(marker.requirement or '—')}</td><td>{_e(marker.scenario or '—')}</td>"
                f"<td>{_e(marker.message)}{hint}</td></tr>"
            )
        out.append("</tbody></table></section>")
    out.append('<nav class="toc" id="contents"><h2>Requirements</h2><ol>')
    for requirement in report.requirements:
        r = requirement.requirement
        out.append(f'<li>{_badge(requirement.outcome)} <a href="#{_e(r.id)}">{_e(r.name)}</a></li>')
    out.append("</ol></nav>")
    recorded = {table.name: table.recorded for table in report.coverage}
    out.append('<section id="requirements">')
    out += [_requirement(requirement, recorded) for requirement in report.requirements]
    out.append("</section>")
    out.append('<section id="machines"><h2>State machines and transition coverage</h2>')
    out += [_machine(table) for table in report.coverage]
    if report.coverage_problems:
        items = "".join(f"<li>{_e(problem)}</li>" for problem in report.coverage_problems)
        out.append(f"<h3>Coverage problems</h3><ul>{items}</ul>")
    out.append("</section>")
    out += [
        f"<footer>Generated by {_e(identity_phrase(report.identity))} from "
        f"<code>{_e(parsed.source)}</code>. This page is self-contained: no script, no "
        "external resource.</footer>",
        "</main>",
        "</body>",
        "</html>",
    ]
    return "\n".join(out) + "\n"
