"""The spec parser: our spec gives its model; malformed specs give OpenSpec's problems.

``fixtures/specs/<name>/spec.md`` are small OpenSpec specs with one defect each, named by the
directory; ``fixtures/openspec-1.13.2.json`` is what ``openspec validate --specs --strict --json``
(1.13.2) said about them, recorded once, so the parity test runs offline.
``fixtures/seed-spec.txt`` is the seed spec in its plain-text form, as delivered: neither OpenSpec
nor this parser reads it as a spec.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from diagnosis_harness.conformance import (
    ParsedSpec,
    find_scenario,
    load_spec,
    parse_spec,
)
from diagnosis_harness.conformance._spec import nearest_match, nearest_scenario, slugify
from diagnosis_harness.conformance.suite._support import (
    BUDGETS,
    DEADLINE,
    HIDDEN_RETRY,
    INDEPENDENCE,
    PRIMITIVES,
    RETRY,
    RUN_CONTEXT,
    TERMINAL,
)
from diagnosis_harness.conformance.suite._support import REQUIREMENTS as SPEC_REQUIREMENTS

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPO = HERE.parents[1]
MARKDOWN = REPO / "specs" / "diagnosis-harness-run-context" / "spec.md"
PLAIN = FIXTURES / "seed-spec.txt"
CAPABILITY = "diagnosis-harness-run-context"

# The spec's requirements and their scenarios, in the spec's order: the parser's expected output,
# and the check that the shared requirement names are exactly the spec's.
REQUIREMENTS = {
    RUN_CONTEXT: [
        "Context crosses an asynchronous boundary",
        "Invalid identity starts a Run",
    ],
    DEADLINE: [
        "Deadline expires before a Tool call",
        "Client disconnects",
    ],
    BUDGETS: [
        "Per-Tool budget is exhausted",
        "Actual Token usage exceeds the limit",
    ],
    TERMINAL: [
        "Success wins a terminal race",
        "Budget exhaustion wins a terminal race",
    ],
    RETRY: [
        "Router transport failure succeeds on retry",
        "Tool call fails",
        "Run is cancelled between attempts",
    ],
    HIDDEN_RETRY: ["Retry configuration is loaded"],
    PRIMITIVES: [
        "Framework Tool Call ID is used in a key",
        "Unsafe key segment is supplied",
        "Run byte limit would be exceeded",
    ],
    INDEPENDENCE: ["Stage 2 implementation completes"],
}


@pytest.fixture(scope="module")
def markdown() -> ParsedSpec:
    return load_spec(MARKDOWN)


def _line_of(path: Path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip().endswith(text))


# --- our spec ------------------------------------------------------------------------------------


def test_our_spec_gives_the_eight_requirements_and_sixteen_scenarios(markdown: ParsedSpec) -> None:
    parsed = markdown
    assert parsed.spec.capability == CAPABILITY
    names = {r.name: [s.name for s in r.scenarios] for r in parsed.spec.requirements}
    assert names == REQUIREMENTS
    assert list(names) == list(REQUIREMENTS) == list(SPEC_REQUIREMENTS)  # in spec order
    assert len(parsed.spec.requirements) == 8
    assert len(parsed.spec.scenarios) == 16


def test_ids_name_the_capability_requirement_and_scenario(markdown: ParsedSpec) -> None:
    ids = [s.id for s in markdown.spec.scenarios]
    assert len(set(ids)) == 16
    assert ids[0] == (
        "diagnosis-harness-run-context/runcontext-shall-be-explicit-and-structurally-immutable/"
        "context-crosses-an-asynchronous-boundary"
    )
    assert (
        "diagnosis-harness-run-context/harness-retry-shall-be-typed-bounded-and-recorded/"
        "tool-call-fails"
    ) in ids
    for requirement in markdown.spec.requirements:
        assert requirement.id == f"{CAPABILITY}/{requirement.slug}"
        for scenario in requirement.scenarios:
            assert scenario.id == f"{requirement.id}/{scenario.slug}"
            assert scenario.requirement == requirement.name


def test_our_spec_in_markdown_has_no_problem(markdown: ParsedSpec) -> None:
    # What tools/openspec-validate.sh gets from OpenSpec's validator, in strict mode.
    assert markdown.problems == ()
    assert markdown.valid


def test_steps_and_lines_of_the_markdown_form(markdown: ParsedSpec) -> None:
    first = markdown.spec.requirements[0]
    assert first.line == _line_of(MARKDOWN, RUN_CONTEXT)
    assert "SHALL create, through `RunContext.create`" in first.text
    scenario = first.scenarios[0]
    assert scenario.line == _line_of(MARKDOWN, "Context crosses an asynchronous boundary")
    assert [s.keyword for s in scenario.steps] == ["WHEN", "THEN"]
    assert [s.line for s in scenario.steps] == [scenario.line + 2, scenario.line + 3]
    assert scenario.steps[0].text.startswith("a Fake Tool runs on another thread")
    deadline = find_scenario(
        markdown.spec,
        DEADLINE,
        "Deadline expires before a Tool call",
    )
    assert deadline is not None
    assert [s.keyword for s in deadline.steps] == ["WHEN", "THEN", "AND"]


def test_every_scenario_says_when_then_and_maybe_and(markdown: ParsedSpec) -> None:
    assert sum(len(s.steps) for s in markdown.spec.scenarios) == 38
    for scenario in markdown.spec.scenarios:
        keywords = [s.keyword for s in scenario.steps]
        assert keywords[:2] == ["WHEN", "THEN"]
        assert set(keywords[2:]) <= {"AND"}


def test_every_requirement_text_says_shall(markdown: ParsedSpec) -> None:
    for requirement in markdown.spec.requirements:
        assert re.search(r"\b(SHALL|MUST)\b", requirement.text), requirement.name
        assert "\n\n" not in requirement.text  # one paragraph each


def test_crlf_and_a_bom_read_the_same() -> None:
    text = MARKDOWN.read_text(encoding="utf-8")
    crlf = parse_spec("\ufeff" + text.replace("\n", "\r\n"), source=str(MARKDOWN))
    assert crlf.spec == load_spec(MARKDOWN).spec
    assert crlf.problems == ()


def test_the_seeds_plain_text_is_not_read_as_a_spec() -> None:
    """Only OpenSpec's Markdown form is read; a text in another form says what it lacks."""
    parsed = parse_spec(PLAIN.read_text(encoding="utf-8"), source="seed.txt")
    assert not parsed.valid
    assert {p.code for p in parsed.problems} >= {"missing-purpose", "missing-requirements-section"}
    assert parsed.spec.requirements == ()


def test_parsed_specs_are_frozen(markdown: ParsedSpec) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        markdown.spec.requirements[0].name = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        markdown.spec.scenarios[0].steps[0].text = "x"  # type: ignore[misc]


# --- slugs, capability ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        (RUN_CONTEXT, None),
        (BUDGETS, None),
        ("  Hello,  World!! ", "hello-world"),
        ("snake_case and `code`", "snake-case-and-code"),
        ("Per-Tool budget is exhausted", "per-tool-budget-is-exhausted"),
        ("定义 Diagnosis 终态", "定义-diagnosis-终态"),
    ],
)
def test_slugify(name: str, slug: str | None) -> None:
    expected = slug or "-".join(re.findall(r"[a-z0-9]+", name.lower()))
    assert slugify(name) == expected


def test_a_name_without_letters_still_has_a_stable_slug() -> None:
    assert slugify("!!!") == slugify("!!!")
    assert re.fullmatch(r"x-[0-9a-f]{8}", slugify("!!!"))
    assert slugify("!!!") != slugify("???")


def test_the_capability_comes_from_the_title_or_else_the_path() -> None:
    body = (FIXTURES / "specs" / "valid" / "spec.md").read_text(encoding="utf-8")
    untitled = "\n".join(body.splitlines()[1:])
    assert parse_spec(body).spec.capability == "valid"
    assert parse_spec(untitled, source="openspec/specs/from-path/spec.md").spec.capability == (
        "from-path"
    )
    mismatch = parse_spec(body, source="specs/elsewhere/spec.md")
    assert mismatch.spec.capability == "valid"
    assert [(p.level, p.code) for p in mismatch.problems] == [("INFO", "capability-mismatch")]
    unnamed = parse_spec(untitled)
    assert unnamed.spec.capability == "unnamed"
    assert [(p.level, p.code) for p in unnamed.problems] == [("WARNING", "no-capability")]


# --- malformed specs -----------------------------------------------------------------------------

# fixture -> every problem, as (level, code, line), in the order reported.
MALFORMED: dict[str, list[tuple[str, str, int | None]]] = {
    "valid": [],
    "duplicate-requirement": [("ERROR", "duplicate-requirement", 27)],
    "duplicate-scenario": [("ERROR", "duplicate-scenario", 18)],
    "no-shall": [("WARNING", "no-shall", 9)],
    "shall-in-header-only": [("WARNING", "no-shall", 9)],
    "empty-requirement-body": [("ERROR", "no-shall", 9)],
    "no-scenarios": [("ERROR", "no-scenarios", 9)],
    "missing-purpose": [("ERROR", "missing-purpose", None)],
    "brief-purpose": [("WARNING", "purpose-too-brief", 3)],
    "missing-when": [("ERROR", "missing-step", 13)],
    "missing-then": [("ERROR", "missing-step", 13)],
    "stray-scenario-line": [("ERROR", "missing-step", 13), ("ERROR", "stray-line", 16)],
    "mistyped-scenario-heading": [("ERROR", "stray-heading", 18), ("ERROR", "no-scenarios", 18)],
    "requirement-outside-requirements": [("ERROR", "requirement-outside-requirements", 7)],
    "missing-requirements-section": [("ERROR", "missing-requirements-section", None)],
    "no-requirements": [("ERROR", "no-requirements", 7)],
    "same-id": [("ERROR", "duplicate-id", 18)],
    "empty-scenario": [("ERROR", "empty-scenario", 18)],
}


def _fixture(name: str) -> ParsedSpec:
    path = FIXTURES / "specs" / name / "spec.md"
    return load_spec(path)


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_each_malformed_spec_reports_its_problem_with_its_line(name: str) -> None:
    parsed = _fixture(name)
    assert parsed.spec.capability == name
    assert [(p.level, p.code, p.line) for p in parsed.problems] == MALFORMED[name]
    assert parsed.valid is (name == "valid")


def test_messages_name_the_problem() -> None:
    [dup] = _fixture("duplicate-requirement").problems
    assert dup.path == "file"
    assert dup.message == (
        'Requirement header "### Requirement: Thing works" duplicates the requirement declared on '
        "line 9. Requirement names must be unique so spec updates cannot discard one block while "
        "updating another."
    )
    [scenario] = _fixture("duplicate-scenario").problems
    assert scenario.path == "requirements[0].scenarios[1]"
    assert "declared on line 13" in scenario.message
    assert '"Thing works"' in scenario.message
    [header_only] = _fixture("shall-in-header-only").problems
    assert header_only.message.startswith(
        'Requirement "The thing SHALL work" should contain SHALL or MUST in the requirement body'
    )
    when, stray = _fixture("stray-scenario-line").problems
    assert when.message == 'Scenario "It works" has no - **THEN** step'
    assert "'- THEN it works'" in stray.message
    [same] = _fixture("same-id").problems
    assert "same-id/thing-works-2" in same.message


def test_duplicates_keep_both_blocks_with_distinct_ids() -> None:
    spec = _fixture("duplicate-requirement").spec
    first, _, second = spec.requirements
    assert first.name == second.name
    assert (first.slug, second.slug) == ("thing-works", "thing-works-2")
    assert find_scenario(spec, "Thing works", "It works") is first.scenarios[0]
    scenarios = _fixture("duplicate-scenario").spec.requirements[0].scenarios
    assert [s.slug for s in scenarios] == ["it-works", "it-works-2"]


def test_an_empty_scenario_is_dropped_as_openspec_does() -> None:
    spec = _fixture("empty-scenario").spec
    assert [s.name for s in spec.requirements[0].scenarios] == ["It works"]


def test_strict_decides_whether_warnings_fail() -> None:
    path = FIXTURES / "specs" / "no-shall" / "spec.md"
    assert not load_spec(path).valid
    assert not load_spec(path, strict=True).valid
    lenient = load_spec(path, strict=False)
    assert lenient.valid
    assert [p.level for p in lenient.warnings] == ["WARNING"]
    assert lenient.errors == ()


def test_a_requirement_header_in_a_code_fence_is_text() -> None:
    body = (FIXTURES / "specs" / "valid" / "spec.md").read_text(encoding="utf-8")
    fenced = body.replace(
        "The thing SHALL work.\n",
        "The thing SHALL work.\n\n```markdown\n### Requirement: Not one\n```\n",
        1,
    )
    parsed = parse_spec(fenced)
    assert parsed.problems == ()
    assert [r.name for r in parsed.spec.requirements] == ["Thing works", "Other thing works"]
    assert "### Requirement: Not one" in parsed.spec.requirements[0].text


def test_a_long_requirement_text_is_noted_as_openspec_does() -> None:
    body = (FIXTURES / "specs" / "valid" / "spec.md").read_text(encoding="utf-8")
    long = body.replace("The thing SHALL work.", "The thing SHALL work " + "very " * 100 + "well.")
    [info] = parse_spec(long).problems
    assert (info.level, info.code, info.line, info.path) == (
        "INFO",
        "requirement-too-long",
        9,
        "requirements[0]",
    )
    assert parse_spec(long).valid


def test_a_delta_header_in_a_main_spec_is_an_error() -> None:
    body = (FIXTURES / "specs" / "valid" / "spec.md").read_text(encoding="utf-8")
    parsed = parse_spec(body + "\n## ADDED Requirements\n")
    assert [(p.code, p.line) for p in parsed.problems] == [("delta-header", 27)]


# --- the same problems as OpenSpec's validator ---------------------------------------------------

RECORDED = json.loads((FIXTURES / "openspec-1.13.2.json").read_text(encoding="utf-8"))
# OpenSpec passes these; the repository's structure check (tools/openspec-validate.sh: every
# scenario has - **WHEN** and - **THEN** bullets and nothing else) or ID uniqueness does not.
STRICTER_THAN_OPENSPEC = {
    "duplicate-scenario",
    "empty-scenario",
    "missing-then",
    "missing-when",
    "same-id",
    "stray-scenario-line",
}


def _openspec_path(path: str) -> str:
    return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)  # requirements.0.scenarios -> [0]


@pytest.mark.parametrize(
    "item", [i for i in RECORDED["items"] if i["id"] != "seed-plain-text"], ids=lambda i: i["id"]
)
def test_openspec_reports_nothing_we_miss(item: dict[str, object]) -> None:
    name = str(item["id"])
    parsed = _fixture(name)
    if name in STRICTER_THAN_OPENSPEC:
        assert item["valid"] is True
        assert parsed.valid is False
    else:
        assert parsed.valid is item["valid"]
    issues = item["issues"]
    assert isinstance(issues, list)
    errors_at = {_openspec_path(i["path"]) for i in issues if i["level"] == "ERROR"}
    for issue in issues:
        path = _openspec_path(issue["path"])
        if issue["level"] == "WARNING" and path in errors_at:
            continue  # OpenSpec says "no scenario" twice, as an ERROR and as a WARNING
        matches = [
            p
            for p in parsed.problems
            if p.level == issue["level"]
            and p.path == path
            and p.message.startswith(issue["message"].split(" (RFC 2119")[0])
            and ("line" not in issue or p.line == issue["line"])
        ]
        assert matches, (issue, parsed.problems)


def test_openspec_and_we_both_reject_the_plain_form() -> None:
    [item] = [i for i in RECORDED["items"] if i["id"] == "seed-plain-text"]
    assert item["valid"] is False
    assert item["issues"][0]["message"].startswith("Spec must have a Purpose section")
    assert not load_spec(PLAIN).valid


# --- lookups and hints ---------------------------------------------------------------------------


def test_find_scenario_needs_exact_names(markdown: ParsedSpec) -> None:
    found = find_scenario(markdown.spec, TERMINAL, "Success wins a terminal race")
    assert found is not None
    assert found.name == "Success wins a terminal race"
    assert find_scenario(markdown.spec, TERMINAL, "success wins a terminal race") is None
    assert find_scenario(markdown.spec, "No such requirement", "Tool call fails") is None


@pytest.mark.parametrize(
    ("requirement", "scenario", "expected"),
    [
        # a typo in the scenario
        (TERMINAL, "Success wins the terminal race", "Success wins a terminal race"),
        # a typo in the requirement
        (
            TERMINAL[:-3],
            "Budget exhaustion wins a terminal race",
            "Budget exhaustion wins a terminal race",
        ),
        # case and spacing
        (TERMINAL.lower(), "success  wins a terminal race", "Success wins a terminal race"),
        # the right scenario under the wrong requirement
        (HIDDEN_RETRY, "Tool call fails", "Tool call fails"),
        # a typo in both
        (
            TERMINAL[:-1],
            "Succes wins a terminal race",
            "Success wins a terminal race",
        ),
    ],
)
def test_nearest_match(
    markdown: ParsedSpec, requirement: str, scenario: str, expected: str
) -> None:
    match = nearest_match(markdown.spec, requirement, scenario)
    assert match is not None
    assert match.name == expected


def test_nearest_scenario_is_a_ready_hint(markdown: ParsedSpec) -> None:
    hint = nearest_scenario(markdown.spec, TERMINAL, "Success wins the terminal race")
    assert hint == (
        f'did you mean @pytest.mark.spec("{TERMINAL}", "Success wins a terminal race")?'
    )
    assert nearest_scenario(markdown.spec, TERMINAL, "Success wins a terminal race") is None
    assert nearest_scenario(markdown.spec, "Quantum flux", "Capacitor overheats badly") is None
