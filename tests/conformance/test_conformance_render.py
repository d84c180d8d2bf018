"""The three renderings of one report (JSON, Markdown, HTML), its diagrams, and the HTML page in a
real headless browser (Debian's chromium), whose screenshot is kept as reports/ artifact."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness.conformance import (
    REPORT_FILES,
    Checked,
    ConformanceReport,
    Counterexample,
    CounterexampleStep,
    Identity,
    ParsedSpec,
    TestResult,
    build_report,
    parse_spec,
    render_html,
    render_json,
    render_markdown,
    write_reports,
)
from diagnosis_harness.conformance._diagram import render_svg
from diagnosis_harness.conformance._render_json import report_dict
from diagnosis_harness.conformance._report import default_tables, table_coverage
from diagnosis_harness.conformance.suite._support import TERMINAL

from ._support import CHROMIUM, SCHEMA_PATH, chromium, png_pixels, valid_report, visible_text

if TYPE_CHECKING:
    from diagnosis_harness.conformance import TestOutcome

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MARKDOWN = REPO / "specs" / "diagnosis-harness-run-context" / "spec.md"
REPORTS = REPO / "reports"
SCREENSHOT = REPORTS / "conformance-screenshot.png"
COVERAGE = {
    "lifecycle": {1: 40, 2: 12, 3: 7, 4: 3},  # 5: never
    "budget": {1: 300, 2: 4, 3: 50, 5: 20, 6: 2},  # 4: never
    "retry": {1: 100, 2: 3, 3: 60, 4: 30, 5: 10, 6: 30},  # 7: never
}
NEVER = {"lifecycle": [5], "budget": [4], "retry": [7]}
IDENTITY = Identity(version="1.2.3", python="3.12.1", commit="0123456789abcdef", dirty=True)
FAILURE = "AssertionError: the first outcome must stay\nassert 'FAILED' == 'SUCCEEDED'"
COUNTEREXAMPLE = Counterexample(
    kind="explored sequence",
    message="succeed() after fail() replaced the outcome",
    steps=(
        CounterexampleStep(index=0, action="start()", model="RUNNING", runtime="RUNNING"),
        CounterexampleStep(index=1, action="fail()", model="FAILED", runtime="FAILED"),
        CounterexampleStep(index=2, action="succeed()", model="FAILED", runtime="SUCCEEDED"),
    ),
    disagreement=2,
    replay="diagnosis-harness model-check --replay 0,1,2",
)


def _relative(path: Path) -> ParsedSpec:
    """The spec at ``path``, its source named relative to the checkout as the plugin names it
    (a report never carries an absolute path: the schema says so)."""
    return parse_spec(path.read_text("utf-8"), source=path.relative_to(REPO).as_posix())


@pytest.fixture(scope="module")
def parsed() -> ParsedSpec:
    return _relative(MARKDOWN)


def _sample(parsed: ParsedSpec, coverage: dict[str, dict[int, int]] | None = COVERAGE) -> Any:
    """Every outcome at least once, model checks, one unknown mark, and transition coverage."""
    results: list[TestResult] = []
    for i, scenario in enumerate(parsed.spec.scenarios):
        if i == 15:
            continue  # uncovered
        outcome: TestOutcome = "failed" if i == 2 else "skipped" if i == 5 else "passed"
        name = scenario.slug.replace("-", "_")
        results.append(
            TestResult(
                nodeid=f"tests/test_sample.py::test_{name}",
                requirement=scenario.requirement,
                scenario=scenario.name,
                outcome=outcome,
                duration=0.002,
                message=FAILURE if outcome == "failed" else None,
            )
        )
        if i % 4 == 0:
            check: TestOutcome = "failed" if i == 4 else "passed"
            results.append(
                TestResult(
                    nodeid=f"tests/stateful/test_model.py::TestMachine::runTest[{i}]",
                    requirement=scenario.requirement,
                    scenario=scenario.name,
                    outcome=check,
                    model_check=True,
                    duration=0.5,
                    message="Disagreement: the model and the runtime differ" if i == 4 else None,
                    checked=Checked(kind="sequences", count=1234),
                    counterexample=COUNTEREXAMPLE if i == 4 else None,
                )
            )
    results.append(
        TestResult(
            nodeid="tests/test_sample.py::test_typo",
            requirement=TERMINAL,
            scenario="Success wins the terminal race",
            outcome="passed",
        )
    )
    return build_report(parsed, results, coverage=coverage, identity=IDENTITY)


@pytest.fixture(scope="module")
def report(parsed: ParsedSpec) -> ConformanceReport:
    sample: ConformanceReport = _sample(parsed)
    return sample


# --- JSON ----------------------------------------------------------------------------------------


def test_json_is_shaped_like_openspec_validate(report: ConformanceReport) -> None:
    document = valid_report(json.loads(render_json(report)))
    assert document == report_dict(report)
    assert {"items", "summary", "version"} <= set(document)
    assert document["version"] == "1.2.3"
    [item] = document["items"]
    assert (item["id"], item["type"], item["valid"], item["issues"]) == (
        "diagnosis-harness-run-context",
        "spec",
        True,
        [],
    )
    summary = document["summary"]
    assert summary["totals"] == {"items": 1, "passed": 1, "failed": 0}
    assert summary["byType"] == {"spec": {"items": 1, "passed": 1, "failed": 0}}
    assert summary["scenarios"] == {
        "total": 16,
        "passed": 12,
        "failed": 2,
        "skipped": 1,
        "uncovered": 1,
        # each scenario with a test of the kind, by the outcome over those tests alone
        "example_tested": {"total": 15, "passed": 13, "failed": 1, "skipped": 1},
        "model_checked": {"total": 4, "passed": 3, "failed": 1, "skipped": 0},
    }
    assert summary["requirements"]["total"] == 8
    assert summary["tests"] == {
        "total": 19,
        "passed": 16,
        "failed": 2,
        "skipped": 1,
        "model_checks": 4,
    }
    assert summary["credits"] == {"total": 19, "passed": 16, "failed": 2, "skipped": 1}
    assert document["identity"] == {
        "version": "1.2.3",
        "commit": "0123456789abcdef",
        "dirty": True,
        "generated_at": None,
        "python": "3.12.1",
        "hypothesis_profile": None,
        "hypothesis_seed": None,
    }
    assert summary["unknown"] == 1
    assert summary["all_passed"] is False


def test_json_lists_every_scenario_with_its_tests_and_outcome(
    report: ConformanceReport, parsed: ParsedSpec
) -> None:
    [item] = valid_report(json.loads(render_json(report)))["items"]
    requirements = item["requirements"]
    assert [r["name"] for r in requirements] == [r.name for r in parsed.spec.requirements]
    assert [r["id"] for r in requirements] == [r.id for r in parsed.spec.requirements]
    scenarios = [s for r in requirements for s in r["scenarios"]]
    assert [s["id"] for s in scenarios] == [s.id for s in parsed.spec.scenarios]
    for scenario in scenarios:
        assert set(scenario) >= {"id", "name", "outcome", "tested", "model_checked", "tests"}
        assert scenario["outcome"] in {"passed", "failed", "skipped", "uncovered"}
        assert isinstance(scenario["tested"], bool)
        assert isinstance(scenario["model_checked"], bool)
        for test in scenario["tests"]:
            assert set(test) == {
                "nodeid",
                "outcome",
                "model_check",
                "duration",
                "message",
                "checked",
                "counterexample",
            }
    first = scenarios[0]
    assert (first["outcome"], first["tested"], first["model_checked"]) == ("passed", True, True)
    assert [t["model_check"] for t in first["tests"]] == [False, True]
    assert scenarios[2]["outcome"] == "failed"
    assert scenarios[2]["tests"][0]["message"] == FAILURE
    assert scenarios[5]["outcome"] == "skipped"
    check = scenarios[4]["tests"][1]
    assert (check["outcome"], check["checked"]) == ("failed", {"kind": "sequences", "count": 1234})
    assert check["counterexample"] == {
        "kind": "explored sequence",
        "message": "succeed() after fail() replaced the outcome",
        "steps": [
            {"index": 0, "action": "start()", "model": "RUNNING", "runtime": "RUNNING"},
            {"index": 1, "action": "fail()", "model": "FAILED", "runtime": "FAILED"},
            {"index": 2, "action": "succeed()", "model": "FAILED", "runtime": "SUCCEEDED"},
        ],
        "disagreement": 2,
        "replay": "diagnosis-harness model-check --replay 0,1,2",
    }
    assert first["tests"][0]["message"] is None  # a passed test has none
    assert (scenarios[15]["outcome"], scenarios[15]["tests"]) == ("uncovered", [])
    [unknown] = valid_report(json.loads(render_json(report)))["unknown"]
    assert unknown["nodeid"] == "tests/test_sample.py::test_typo"
    assert "Success wins a terminal race" in unknown["hint"]


def test_json_coverage_per_table(report: ConformanceReport) -> None:
    coverage = valid_report(json.loads(render_json(report)))["coverage"]
    assert list(coverage) == ["lifecycle", "budget", "retry"]
    for name, table in coverage.items():
        assert table["uncovered"] == NEVER[name]
        assert table["recorded"] is True
        for row in table["rows"]:
            assert set(row) == {
                "index",
                "source",
                "event",
                "guard",
                "expect",
                "target",
                "requirement",
                "count",
            }
            assert row["count"] == COVERAGE[name].get(row["index"], 0)
    assert coverage["lifecycle"]["unreached_states"] == ["BUDGET_EXHAUSTED"]
    assert coverage["retry"]["rows"][3]["guard"] == "retry_allowed"
    assert coverage["retry"]["terminal"] == ["SUCCEEDED", "FAILED", "STOPPED"]


def test_the_schema_ships_in_the_docs_and_rejects_what_the_report_never_writes(
    report: ConformanceReport,
) -> None:
    """The schema is linked from the reference page, and is strict enough to catch a drift."""
    assert SCHEMA_PATH.name in (SCHEMA_PATH.parent / "conformance.md").read_text("utf-8")
    document = valid_report(json.loads(render_json(report)))
    every = [s for r in document["items"][0]["requirements"] for s in r["scenarios"]]
    failed = every[2]["tests"][0]
    assert failed["outcome"] == "failed"
    failed["message"] = None  # a failed test must say why
    with pytest.raises(AssertionError, match="message"):
        valid_report(document)
    document = valid_report(json.loads(render_json(report)))
    document["items"][0]["source"] = "/home/someone/specs/x/spec.md"  # never absolute
    with pytest.raises(AssertionError, match="source"):
        valid_report(document)
    document = valid_report(json.loads(render_json(_sample(report.parsed, None))))
    document["coverage"]["lifecycle"]["rows"][0]["count"] = 0  # not recorded: unknown, not 0
    with pytest.raises(AssertionError, match="count"):
        valid_report(document)


def test_json_without_coverage_has_no_counts(parsed: ParsedSpec) -> None:
    coverage = valid_report(json.loads(render_json(_sample(parsed, None))))["coverage"]
    for table in coverage.values():
        assert table["recorded"] is False
        assert table["uncovered"] == []
        assert {row["count"] for row in table["rows"]} == {None}


def test_json_issues_of_an_invalid_spec() -> None:
    parsed = _relative(HERE / "fixtures" / "specs" / "duplicate-requirement" / "spec.md")
    document = valid_report(json.loads(render_json(build_report(parsed, [], tables=()))))
    [item] = document["items"]
    assert item["valid"] is False
    [issue] = item["issues"]
    assert issue["level"] == "ERROR"
    assert issue["path"] == "file"
    assert issue["line"] == 27
    assert issue["message"].startswith('Requirement header "### Requirement: Thing works"')
    assert document["summary"]["totals"] == {"items": 1, "passed": 0, "failed": 1}
    missing = _relative(HERE / "fixtures" / "specs" / "missing-purpose" / "spec.md")
    document = valid_report(json.loads(render_json(build_report(missing, [], tables=()))))
    [no_line] = document["items"][0]["issues"]
    assert "line" not in no_line  # as OpenSpec: no line, no key


# --- Markdown ------------------------------------------------------------------------------------


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_has_each_scenario_with_its_steps_and_tests(
    report: ConformanceReport, parsed: ParsedSpec
) -> None:
    text = render_markdown(report)
    lines = text.splitlines()
    for requirement in parsed.spec.requirements:
        heading = lines.index(f"### {requirement.name}")
        for scenario in requirement.scenarios:
            outcome = report.by_id[scenario.id].outcome
            shown = f"**{outcome}**" if outcome in {"failed", "uncovered"} else outcome
            at = lines.index(f"#### Scenario: {scenario.name} — {shown}", heading)
            steps = [f"- **{step.keyword}** {step.text}" for step in scenario.steps]
            start = lines.index(steps[0], at)  # WHEN/THEN under the scenario, verbatim
            assert lines[start : start + len(steps)] == steps
    assert (
        "- `tests/stateful/test_model.py::TestMachine::runTest[0]`: passed, model check, "
        "1,234 sequences checked"
    ) in lines
    assert "No test names this scenario." in text


def test_markdown_says_why_under_the_failed_scenario(
    report: ConformanceReport, parsed: ParsedSpec
) -> None:
    text = render_markdown(report)
    failed = parsed.spec.scenarios[2]
    section = text.split(f"#### Scenario: {failed.name} — **failed**")[1].split("#### ")[0]
    assert "```text\n  AssertionError: the first outcome must stay\n" in section
    checked = parsed.spec.scenarios[4]
    section = text.split(f"#### Scenario: {checked.name} — **failed**")[1].split("#### ")[0]
    assert "Counterexample (explored sequence, 3 step(s)); replay with " in section
    assert "`diagnosis-harness model-check --replay 0,1,2`" in section
    assert "| 2 ⚠ **disagree** | `succeed()` | `FAILED` | `SUCCEEDED` |" in section


def test_markdown_summary_problems_unknown_and_coverage(report: ConformanceReport) -> None:
    text = render_markdown(report)
    assert text.startswith("# Conformance report: `diagnosis-harness-run-context`\n")
    assert "| Scenarios | 16 | 12 | 2 | 1 | 1 |" in text
    assert "| Scenarios with an example test | 15 | 13 | 1 | 1 | — |" in text
    assert "| Scenarios with a model check | 4 | 3 | 1 | 0 | — |" in text
    assert "| Tests naming a scenario | 19 | 16 | 2 | 1 | — |" in text
    assert "| Test \N{MULTIPLICATION SIGN} scenario credits | 19 | 16 | 2 | 1 | — |" in text
    assert "**FAIL: 2 of 16 scenarios failed; 1 of 16 scenarios have no test; " in text
    assert "Made by diagnosis-harness 1.2.3, commit 0123456789ab (dirty), Python 3.12.1." in text
    assert "## Marks naming no scenario" in text
    assert "`tests/test_sample.py::test_typo`" in text
    assert text.count("| # | Source | Event | Guard | Target | Requirement | Count |") == 3
    assert "| 5 | RUNNING | exhaust_budget |  | BUDGET_EXHAUSTED |" in text
    assert "| **never** |" in text
    assert "| 4 | ATTEMPTING | fail | retry_allowed | AWAITING_RETRY |" in text
    assert "never taken: #7." in text
    assert text.endswith("\n")
    assert not text.endswith("\n\n")


def test_markdown_escapes_cells() -> None:
    spec = parse_spec(
        "# esc Specification\n\n## Purpose\n\nA purpose long enough for the validator to be "
        "quiet about it.\n\n## Requirements\n\n### Requirement: Pipes | and <b>tags</b>\n\n"
        "It SHALL escape.\n\n#### Scenario: A | B\n\n- **WHEN** x\n- **THEN** y\n"
    )
    result = TestResult(
        nodeid="t.py::test[a|<b>]",
        requirement="Pipes | and <b>tags</b>",
        scenario="A | B",
        outcome="passed",
    )
    text = render_markdown(build_report(spec, [result], tables=()))
    assert "#### Scenario: A \\| B — passed" in text
    assert "- `t.py::test[a\\|<b>]`: passed" in text
    assert "### Pipes \\| and &lt;b&gt;tags&lt;/b&gt;" in text
    assert "<b>" not in re.sub(r"`[^`]*`", "", text)  # markup only inside code spans, verbatim


# --- HTML ----------------------------------------------------------------------------------------

EXTERNAL = re.compile(
    r"""(?:\b(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*(?:[a-z]+:)?//)"""
    r"""|url\(\s*["']?\s*(?!#)|@import|<script|<link|<iframe|<object|<embed""",
    re.I,
)


def test_html_is_one_self_contained_page(report: ConformanceReport) -> None:
    page = render_html(report)
    assert page.startswith("<!DOCTYPE html>\n")
    assert '<meta charset="utf-8">' in page
    assert "<style>" in page
    assert EXTERNAL.search(page) is None, EXTERNAL.search(page)
    assert "http://" not in page  # not even the SVG namespace: inline SVG in HTML needs none
    assert "https://" not in page
    assert page.rstrip().endswith("</html>")


def test_html_shows_every_requirement_and_scenario(
    report: ConformanceReport, parsed: ParsedSpec
) -> None:
    page = render_html(report)
    for requirement in parsed.spec.requirements:
        assert f"{html.escape(requirement.name)}</h3>" in page
        assert f'id="{requirement.id}"' in page
        assert f'href="#{requirement.id}"' in page
        for scenario in requirement.scenarios:
            assert f'<tr class="{report.by_id[scenario.id].outcome}" id="{scenario.id}">' in page
            assert f'<span class="sname">{html.escape(scenario.name)}</span>' in page
            for step in scenario.steps:  # visible, not behind a <details>
                assert f"<li><b>{step.keyword}</b> " in page
    assert "<details" not in page
    assert page.count('<span class="tag">model check</span>') == 4
    assert (
        "FAIL: 2 of 16 scenarios failed; 1 of 16 scenarios have no test; 1 of 16 scenarios were "
        "only skipped; 1 spec mark(s) name no scenario"
    ) in page
    assert "did you mean @pytest.mark.spec(" in html.unescape(page)


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(match) for match in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def test_html_has_one_diagram_per_table_with_every_state(report: ConformanceReport) -> None:
    svgs = _svgs(render_html(report))
    tables = default_tables()
    assert len(svgs) == len(tables) == 3
    for svg, table in zip(svgs, tables, strict=True):
        assert svg.get("data-table") == table.name
        texts = {"".join(t.itertext()) for t in svg.iter("text")}
        for state in table.states:
            assert state.name in texts
        states = {g.get("data-state") for g in svg.iter("g") if "state" in (g.get("class") or "")}
        assert states == {state.name for state in table.states}
        edges = [g for g in svg.iter("g") if (g.get("class") or "").startswith("edge")]
        assert sorted(int(g.get("data-row") or 0) for g in edges) == [r.index for r in table.rows]
        never = sorted(int(g.get("data-row") or 0) for g in edges if g.get("class") == "edge never")
        assert never == NEVER[table.name]
        terminal = {
            g.get("data-state") for g in svg.iter("g") if "terminal" in (g.get("class") or "")
        }
        assert terminal == {state.name for state in table.terminal}
        initial = [g for g in svg.iter("g") if "initial" in (g.get("class") or "").split()]
        assert [g.get("data-state") for g in initial] == [table.initial.name]


def _rects(svg: ET.Element) -> list[tuple[float, float, float, float]]:
    boxes = []
    for group in svg.iter("g"):
        if "state" in (group.get("class") or "").split():
            rect = group.find("rect")
            assert rect is not None
            x, y = float(rect.get("x") or 0), float(rect.get("y") or 0)
            boxes.append(
                (x, y, x + float(rect.get("width") or 0), y + float(rect.get("height") or 0))
            )
    return boxes


@pytest.mark.parametrize("recorded", [True, False])
def test_diagram_boxes_do_not_overlap_and_fit_the_canvas(
    report: ConformanceReport, recorded: bool
) -> None:
    for table in default_tables():
        svg = ET.fromstring(
            render_svg(table_coverage(table, COVERAGE.get(table.name) if recorded else None))
        )
        left, top, width, height = (float(v) for v in (svg.get("viewBox") or "").split())
        boxes = _rects(svg)
        for i, a in enumerate(boxes):
            assert left <= a[0] <= a[2] <= left + width
            assert top <= a[1] <= a[3] <= top + height
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


def test_diagram_without_coverage_has_plain_labels() -> None:
    svg = render_svg(table_coverage(default_tables()[2], None))
    assert 'class="edge never"' not in svg
    assert svg.count('class="edge unrecorded"') == 7
    assert ">fail [!retry_allowed]</text>" in svg
    assert "unreached" not in svg


def test_diagram_labels_carry_counts() -> None:
    svg = render_svg(table_coverage(default_tables()[1], COVERAGE["budget"]))
    assert ">reserve [within_limits] \u00d7300</text>" in svg
    assert ">record_usage [!within_limits] · never</text>" in svg


def test_a_standalone_svg_is_well_formed_xml() -> None:
    svg = ET.fromstring(render_svg(table_coverage(default_tables()[0], None), standalone=True))
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"


def test_html_escapes_everything() -> None:
    evil = '<script>alert("x")</script>'
    spec = parse_spec(
        f"# esc Specification\n\n## Purpose\n\nA purpose long enough for the validator, {evil}."
        f"\n\n## Requirements\n\n### Requirement: Evil {evil}\n\nIt SHALL escape `{evil}`.\n\n"
        f"#### Scenario: Evil {evil}\n\n- **WHEN** {evil}\n- **THEN** {evil}\n",
        source=f"specs/{evil}/spec.md",
    )
    results = [
        TestResult(
            nodeid=f"t.py::test[{evil}&amp;]",
            requirement=f"Evil {evil}",
            scenario=f"Evil {evil}",
            outcome="failed",
        ),
        TestResult(nodeid=f"t.py::{evil}", requirement=evil, scenario=evil, outcome="passed"),
        TestResult(
            nodeid=f"u.py::{evil}",
            requirement=evil,
            scenario=evil,
            outcome="failed",
            message=evil,
            model_check=True,
            counterexample=Counterexample(
                kind=evil,
                message=evil,
                steps=(CounterexampleStep(index=0, action=evil, model=evil, runtime=evil),),
                disagreement=0,
                replay=evil,
            ),
        ),
    ]
    identity = Identity(version=evil, python=evil, commit=evil, generated_at=evil)
    page = render_html(build_report(spec, results, tables=(), identity=identity))
    assert "<script" not in page
    assert 'alert("x")' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    # a test ID may wrap after :: and before [, and nowhere else
    assert (
        "t.py::<wbr>test<wbr>[&lt;script&gt;alert(&quot;x&quot;)&lt;/<wbr>script&gt;&amp;amp;]"
        in page
    )
    assert "<code>&lt;script&gt;" in page  # a code span in the text is still escaped inside


def test_write_reports(report: ConformanceReport, tmp_path: Path) -> None:
    paths = write_reports(report, tmp_path / "out" / "nested")
    assert set(paths) == {"json", "markdown", "html"}
    assert {p.name for p in paths.values()} == set(REPORT_FILES.values())
    assert paths["json"].read_text(encoding="utf-8") == render_json(report)
    assert paths["markdown"].read_text(encoding="utf-8") == render_markdown(report)
    assert paths["html"].read_text(encoding="utf-8") == render_html(report)
    write_reports(report, tmp_path / "out" / "nested")  # replaces, does not fail


# --- the page in a real browser ------------------------------------------------------------------


# The browser renders the page the tests above check as text: the Python version changes nothing
# it sees, so CI runs this once (tox -e e2e), not in every py3* env.
@pytest.mark.version_independent
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH: the headless-browser check of the HTML report needs Debian's "
    "chromium package (apt-get install chromium)",
)
def test_the_page_renders_in_headless_chromium(
    report: ConformanceReport, parsed: ParsedSpec, tmp_path: Path
) -> None:
    page = tmp_path / "conformance.html"
    page.write_text(render_html(report), encoding="utf-8")

    dom = chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert "<title>Conformance report: diagnosis-harness-run-context</title>" in dom
    for requirement in parsed.spec.requirements:
        assert f"{html.escape(requirement.name, quote=False)}</h3>" in dom, requirement.name
    for scenario in parsed.spec.scenarios:
        assert html.escape(scenario.name, quote=False) in dom
    assert len(re.findall(r"<svg\b", dom)) == 3
    for table in default_tables():
        svg = re.search(rf'<svg\b[^>]*data-table="{table.name}".*?</svg>', dom, re.S)
        assert svg is not None, table.name
        for state in table.states:
            assert f">{state.name}</text>" in svg.group(0)

    # Without a click: the steps of every scenario, and why each failed test failed.
    shown = visible_text(tmp_path, page)
    assert "AssertionError: the first outcome must stay" in shown
    assert "succeed() after fail() replaced the outcome" in shown
    for scenario in parsed.spec.scenarios:
        assert scenario.steps[0].text.replace("`", "") in shown, scenario.name

    REPORTS.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    chromium(tmp_path, f"--screenshot={SCREENSHOT}", "--window-size=1280,4000", page.as_uri())
    data = SCREENSHOT.read_bytes()
    width, height, pixels = png_pixels(data)
    assert (width, height) == (1280, 4000)
    assert len(data) > 50_000  # a rendered page, not a blank one (about 1 kB)
    assert len(set(pixels)) > 64
