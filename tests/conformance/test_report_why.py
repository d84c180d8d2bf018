"""What the report says when something fails: the message, the counterexample, the coverage
recorded all the same, which scenarios are charged, and which code made it.

Each test runs pytest in-process on files written by ``pytester`` (the plugin comes in through its
entry point) and reads the three files it writes; every ``conformance.json`` is validated against
the shipped JSON Schema (``read_json``).
"""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness.conformance._identity import project_root, shown_path

from ._support import OTHERS, THINGS, read_json, scenarios

if TYPE_CHECKING:
    from pathlib import Path

pytest_plugins = ["pytester"]

COUNTEREXAMPLE: dict[str, Any] = {
    "kind": "hypothesis",
    "message": "the second terminal outcome replaced the first",
    "steps": [
        {"index": 0, "action": "fail()", "model": "FAILED", "runtime": "FAILED"},
        {"index": 1, "action": "succeed()", "model": "FAILED", "runtime": "SUCCEEDED"},
    ],
    "disagreement": 1,
    "replay": "pytest 'test_checks.py::test_lifecycle_check'",
}

CHECKS = f"""
import pytest

@pytest.mark.model_check
@pytest.mark.spec({THINGS!r}, "First thing")
def test_lifecycle_check(record_property, transition_coverage):
    transition_coverage.record("lifecycle", 1)  # taken before the check failed
    record_property("checked", {{"kind": "sequences", "count": 48}})
    record_property("counterexample", {COUNTEREXAMPLE!r})
    assert "SUCCEEDED" == "FAILED", "the first terminal outcome must stay"

@pytest.mark.model_check
@pytest.mark.spec({THINGS!r}, "Second thing")
def test_budget_check(record_property):
    record_property("checked", {{"kind": "schedules", "count": 10407}})

@pytest.mark.spec({THINGS!r}, "Second thing")
def test_budget_example():
    pass

@pytest.mark.spec({OTHERS!r}, "Fourth thing")
def test_example_fails():
    limit = 3
    assert limit == 4, "the per-Tool limit is 4"
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", *args)


@pytest.fixture
def failing(pytester: pytest.Pytester, small_spec: Path) -> tuple[pytest.RunResult, Path]:
    pytester.makepyfile(test_checks=CHECKS)
    out = pytester.path / "out"
    result = run(pytester, "--spec", str(small_spec), "--spec-report", str(out))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=2)
    return result, out


def _tests(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["nodeid"].split("::")[1]: t for s in scenarios(report).values() for t in s["tests"]}


def test_a_failure_is_charged_to_the_failed_items_scenarios_only(
    failing: tuple[pytest.RunResult, Path],
) -> None:
    result, out = failing
    report = read_json(out)
    outcomes = {name: s["outcome"] for name, s in scenarios(report).items()}
    assert outcomes == {
        "First thing": "failed",  # its model check failed
        "Second thing": "passed",  # its own check and example passed: not painted
        "Third thing": "uncovered",
        "Fourth thing": "failed",
        "Fifth thing": "uncovered",
    }
    summary = report["summary"]
    # the model-checked scenarios are counted whether their checks passed or failed
    assert summary["scenarios"]["model_checked"] == {
        "total": 2,
        "passed": 1,
        "failed": 1,
        "skipped": 0,
    }
    assert summary["tests"] == {
        "total": 4,
        "passed": 2,
        "failed": 2,
        "skipped": 0,
        "model_checks": 2,
    }
    assert summary["credits"] == {"total": 4, "passed": 2, "failed": 2, "skipped": 0}
    result.stdout.fnmatch_lines(["FAIL: 2 of 5 scenarios failed; 2 of 5 scenarios have no test"])


def test_each_failed_test_says_why_in_the_json(failing: tuple[pytest.RunResult, Path]) -> None:
    _, out = failing
    tests = _tests(read_json(out))
    check = tests["test_lifecycle_check"]
    assert check["message"].startswith("AssertionError: the first terminal outcome must stay")
    assert check["checked"] == {"kind": "sequences", "count": 48}
    assert check["counterexample"] == COUNTEREXAMPLE
    example = tests["test_example_fails"]
    assert example["message"].splitlines()[0] == "AssertionError: the per-Tool limit is 4"
    assert "assert 3 == 4" in example["message"]  # pytest's explanation comes along
    assert example["counterexample"] is None
    passed = tests["test_budget_check"]
    assert (passed["message"], passed["counterexample"]) == (None, None)
    assert passed["checked"] == {"kind": "schedules", "count": 10407}


def test_each_failed_test_says_why_in_the_markdown(
    failing: tuple[pytest.RunResult, Path],
) -> None:
    _, out = failing
    text = (out / "conformance.md").read_text("utf-8")
    first = text.split("#### Scenario: First thing — **failed**")[1].split("#### ")[0]
    assert "- **WHEN** the first thing happens" in first
    assert "  AssertionError: the first terminal outcome must stay" in first
    assert "Counterexample (hypothesis, 2 step(s)); replay with " in first
    assert "| 1 ⚠ **disagree** | `succeed()` | `FAILED` | `SUCCEEDED` |" in first
    fourth = text.split("#### Scenario: Fourth thing — **failed**")[1].split("#### ")[0]
    assert "  AssertionError: the per-Tool limit is 4" in fourth
    second = text.split("#### Scenario: Second thing — passed")[1].split("#### ")[0]
    assert "```" not in second  # nothing to explain under a scenario that passed


def test_each_failed_test_says_why_in_the_html_without_a_click(
    failing: tuple[pytest.RunResult, Path],
) -> None:
    _, out = failing
    page = (out / "conformance.html").read_text("utf-8")
    assert "<details" not in page  # nothing collapsed: steps and reasons are shown
    assert '<pre class="message">AssertionError: the first terminal outcome must stay' in page
    assert '<tr class="disagree"><td class="num">1</td><td><code>succeed()</code>' in page
    assert "AssertionError: the per-Tool limit is 4" in page


def test_the_console_says_why(failing: tuple[pytest.RunResult, Path]) -> None:
    result, _ = failing
    result.stdout.fnmatch_lines(
        [
            "  FAILED        Things SHALL work / First thing",
            "      test_checks.py::test_lifecycle_check",
            "        AssertionError: the first terminal outcome must stay",
            "        counterexample: 2 step(s) (hypothesis); at step 1, succeed(): model FAILED, "
            "runtime SUCCEEDED; replay: pytest *",
        ]
    )


def test_coverage_taken_before_a_failure_is_recorded(
    failing: tuple[pytest.RunResult, Path],
) -> None:
    _, out = failing
    coverage = read_json(out)["coverage"]
    lifecycle = coverage["lifecycle"]
    assert lifecycle["recorded"] is True
    counts = [row["count"] for row in lifecycle["rows"]]
    assert counts[0] == 1
    assert set(counts[1:]) == {0}  # recorded and never taken
    # No check took a row of the others: a spec of one's own lists only the recorded table.
    assert set(coverage) == {"lifecycle"}
    text = (out / "conformance.md").read_text("utf-8")
    lifecycle_text = text.split("### lifecycle — ")[1].split("### ")[0]
    assert "1 of 5 rows taken" in lifecycle_text
    assert "**never**" in lifecycle_text


def test_a_malformed_property_is_named_not_dropped(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    pytester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.model_check
        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_bad_properties(record_property):
            record_property("checked", {{"kind": "sequence", "count": 1}})
            record_property("counterexample", {{"kind": "x", "steps": [{{"index": "0"}}]}})
            assert False, "broken"
        """
    )
    out = pytester.path / "out"
    run(pytester, "--spec", str(small_spec), "--spec-report", str(out))
    [test] = scenarios(read_json(out))["First thing"]["tests"]
    assert test["checked"] is None
    assert test["counterexample"] is None
    assert "record_property('checked', ...) is malformed: Checked.kind must be" in test["message"]
    assert "record_property('counterexample', ...) is malformed" in test["message"]
    assert test["message"].startswith("AssertionError: broken")


def _git(directory: Path, *args: str) -> None:
    subprocess.run(
        [
            "git",
            "-C",
            str(directory),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            *args,
        ],
        check=True,
        capture_output=True,
    )


def test_identity_and_paths_relative_to_the_project_root(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    pytester.makepyfile(
        test_one=f"""
        import pytest

        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_one():
            pass
        """
    )
    _git(pytester.path, "init", "-q")
    _git(pytester.path, "add", "-A")
    _git(pytester.path, "commit", "-q", "-m", "first")
    out = pytester.path / "out"
    run(pytester, "--spec", str(small_spec), "--spec-report", str(out))
    identity = read_json(out)["identity"]
    head = subprocess.run(
        ["git", "-C", str(pytester.path), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert (identity["commit"], identity["dirty"]) == (head, False)  # out/ is untracked
    assert identity["generated_at"].endswith("+00:00")  # UTC
    assert identity["python"].count(".") == 2
    # every file names paths relative to the root, none of this machine's
    for name in ("conformance.json", "conformance.md", "conformance.html"):
        text = (out / name).read_text("utf-8")
        assert str(pytester.path) not in text, name
        assert str(pytester.path.resolve()) not in text, name
    assert read_json(out)["items"][0]["source"] == "specs/toy/spec.md"

    (pytester.path / "test_one.py").write_text("# changed\n", encoding="utf-8")
    pytester.makepyfile(
        test_two=f"""
        import pytest

        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_two():
            pass
        """
    )
    run(pytester, "--spec", str(small_spec), "--spec-report", str(out))
    assert read_json(out)["identity"]["dirty"] is True  # a tracked file changed


def test_outside_a_git_checkout_commit_and_dirty_are_null(
    pytester: pytest.Pytester, small_spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))
    pytester.makepyfile(
        test_one=f"""
        import pytest

        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_one():
            pass
        """
    )
    out = pytester.path / "out"
    run(pytester, "--spec", str(small_spec), "--spec-report", str(out))
    data = read_json(out)
    assert (data["identity"]["commit"], data["identity"]["dirty"]) == (None, None)
    assert json.dumps(data).count(str(pytester.path)) == 0


def test_without_git_the_root_is_the_nearest_pyproject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``diagnosis-harness report`` runs pytest with its rootdir at ``src/``: the spec beside it,
    in ``specs/``, is still named relative to the project, not by its file name alone."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "project" / "src").mkdir(parents=True)
    (tmp_path / "project" / "pyproject.toml").write_text("", encoding="utf-8")
    src = tmp_path / "project" / "src"
    assert project_root(src) == tmp_path / "project"
    spec = tmp_path / "project" / "specs" / "x" / "spec.md"
    assert shown_path(spec, project_root(src)) == "specs/x/spec.md"
    assert shown_path(tmp_path / "elsewhere" / "spec.md", src) == "spec.md"  # never absolute
    bare = tmp_path / "bare"
    bare.mkdir()
    assert project_root(bare) == bare
