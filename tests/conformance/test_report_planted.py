"""``diagnosis-harness report`` on a scratch copy of the project with one planted bug.

The copy holds ``src/``, ``specs/``, ``config/``, ``model/`` and ``pyproject.toml``; one line of
the runtime is changed, and the command runs from a fresh interpreter with the copy's ``src`` first
on ``PYTHONPATH`` (so the copy's package, plugin and suite are the ones imported: the first test
checks so). Two bugs, each confined to one machine:

* **lifecycle**: a later ``succeed()`` / ``fail()`` replaces the first terminal outcome;
* **budget**: the per-Tool limit lets one call too many through.

For each, the report must exit 1, charge the failure to the scenarios of the broken machine only,
say why (the assertion message; for a model check, its counterexample), and record the coverage
the checks took. These depend on the suite crediting each model-check item to the one scenario it
exercised: with the fixed marks of an explorer test credited to nine scenarios, a lifecycle bug
paints the budget and retry scenarios too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from diagnosis_harness.conformance.suite._support import (
    BUDGETS,
    PRIMITIVES,
    RETRY,
    TERMINAL,
)

from ._support import CHROMIUM, REPORTS, ROOT, chromium, read_json, visible_text

pytestmark = [pytest.mark.end_to_end, pytest.mark.version_independent]

CAPACITY = "Run byte limit would be exceeded"  # the capacity scenario, under PRIMITIVES
_COPIED = ("src", "specs", "config", "model")

_LIFECYCLE_BUG = (
    "src/diagnosis_harness/_local_run.py",
    """        row = LIFECYCLE.take(self._state, event)
        if row is None:
            return None
""",
    """        row = LIFECYCLE.take(self._state, event)
        if row is None and event in (LifecycleEvent.SUCCEED, LifecycleEvent.FAIL):
            row = LIFECYCLE.take(RunState.RUNNING, event)  # PLANTED: a later ending replaces
        if row is None:
            return None
""",
)
_BUDGET_BUG = (
    "src/diagnosis_harness/_local_run.py",
    "                and total < limits.tool_calls\n                and used < limit\n",
    "                and total < limits.tool_calls\n"
    "                and used <= limit  # PLANTED: one call past the per-Tool limit\n",
)


def _scratch_copy(directory: Path, bug: tuple[str, str, str]) -> Path:
    """A copy of the project in ``directory`` with ``bug`` (path, old text, new text) planted."""
    for name in _COPIED:
        shutil.copytree(
            ROOT / name,
            directory / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "_data"),
        )
    shutil.copy2(ROOT / "pyproject.toml", directory / "pyproject.toml")
    path, old, new = bug
    target = directory / path
    text = target.read_text("utf-8")
    assert text.count(old) == 1, f"the planted bug no longer fits {path}"
    target.write_text(text.replace(old, new), encoding="utf-8")
    return directory


def _report(copy: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    env["PYTHONPATH"] = str(copy / "src")
    done = subprocess.run(
        [sys.executable, "-m", "diagnosis_harness.conformance", "--out", "out"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done, read_json(copy / "out")  # validated against the schema


def _by_requirement(report: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    return {
        r["name"]: {s["name"]: s for s in r["scenarios"]}
        for r in report["items"][0]["requirements"]
    }


def _failed_tests(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in scenario["tests"] if t["outcome"] == "failed"]


@pytest.fixture(scope="module")
def lifecycle_bug(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    copy = _scratch_copy(tmp_path_factory.mktemp("lifecycle-bug"), _LIFECYCLE_BUG)
    done, report = _report(copy)
    return done, report, copy


@pytest.fixture(scope="module")
def budget_bug(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    copy = _scratch_copy(tmp_path_factory.mktemp("budget-bug"), _BUDGET_BUG)
    done, report = _report(copy)
    return done, report, copy


def _assert_charged_to(
    report: dict[str, Any], broken: dict[str, set[str]], intact: dict[str, set[str]]
) -> None:
    """Each ``broken`` scenario failed and each ``intact`` one passed, its own tests and checks
    included; every failed test says why."""
    requirements = _by_requirement(report)
    for requirement, names in broken.items():
        for name in names:
            assert requirements[requirement][name]["outcome"] == "failed", name
    for requirement, names in intact.items():
        for name in names:
            scenario = requirements[requirement][name]
            assert scenario["outcome"] == "passed", (name, _failed_tests(scenario))
    for scenarios in requirements.values():
        for scenario in scenarios.values():
            for test in _failed_tests(scenario):
                assert test["message"], test["nodeid"]  # why, for each failed test


def _counterexamples(report: dict[str, Any], requirement: str) -> list[dict[str, Any]]:
    return [
        t["counterexample"]
        for s in _by_requirement(report)[requirement].values()
        for t in _failed_tests(s)
        if t["model_check"] and t["counterexample"] is not None
    ]


def test_the_scratch_copy_is_what_runs(lifecycle_bug: tuple[Any, dict[str, Any], Path]) -> None:
    done, report, copy = lifecycle_bug
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    probe = subprocess.run(
        [sys.executable, "-c", "import diagnosis_harness; print(diagnosis_harness.__file__)"],
        env={**os.environ, "PYTHONPATH": str(copy / "src")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(probe.stdout.strip()).is_relative_to(copy / "src")
    assert report["summary"]["all_passed"] is False


def test_a_lifecycle_bug_fails_the_lifecycle_scenarios_only(
    lifecycle_bug: tuple[Any, dict[str, Any], Path],
) -> None:
    done, report, _ = lifecycle_bug
    assert done.returncode == 1
    _assert_charged_to(
        report,
        broken={
            TERMINAL: {"Success wins a terminal race", "Budget exhaustion wins a terminal race"}
        },
        intact={
            BUDGETS: {"Per-Tool budget is exhausted", "Actual Token usage exceeds the limit"},
            PRIMITIVES: {CAPACITY},
            RETRY: {
                "Router transport failure succeeds on retry",
                "Tool call fails",
                "Run is cancelled between attempts",
            },
        },
    )
    examples = _counterexamples(report, TERMINAL)
    assert examples, "no failed lifecycle model check carries its counterexample"
    for example in examples:
        assert example["steps"], example
        if example["disagreement"] is not None:
            [step] = [s for s in example["steps"] if s["index"] == example["disagreement"]]
            assert step["model"] != step["runtime"], step  # the two answers, where they differ
    last = done.stdout.rstrip().splitlines()[-1]
    failed = report["summary"]["scenarios"]["failed"]
    assert last.startswith(f"FAIL: {failed} of 16 scenarios failed"), last


def test_a_lifecycle_bug_keeps_the_coverage(
    lifecycle_bug: tuple[Any, dict[str, Any], Path],
) -> None:
    _, report, _ = lifecycle_bug
    for name, table in report["coverage"].items():
        assert table["recorded"] is True, name
        assert any(row["count"] for row in table["rows"]), name
    summary = report["summary"]["scenarios"]["model_checked"]
    assert summary["failed"] > 0  # counted as model-checked, though they failed
    assert summary["passed"] > 0


def test_a_budget_bug_fails_the_budget_scenarios_only(
    budget_bug: tuple[Any, dict[str, Any], Path],
) -> None:
    done, report, _ = budget_bug
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    _assert_charged_to(
        report,
        broken={BUDGETS: {"Per-Tool budget is exhausted"}},
        intact={
            TERMINAL: {"Success wins a terminal race", "Budget exhaustion wins a terminal race"},
            PRIMITIVES: {CAPACITY},
            RETRY: {
                "Router transport failure succeeds on retry",
                "Tool call fails",
                "Run is cancelled between attempts",
            },
        },
    )
    for table in report["coverage"].values():
        assert table["recorded"] is True


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
def test_the_failing_page_shows_why_without_a_click(
    lifecycle_bug: tuple[Any, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, report, copy = lifecycle_bug
    page = copy / "out" / "conformance.html"
    shown = visible_text(tmp_path, page)
    requirements = _by_requirement(report)
    for scenario in requirements[TERMINAL].values():
        for test in _failed_tests(scenario):
            first = test["message"].splitlines()[0]
            assert first in shown, first  # laid out, not behind a <details>
    REPORTS.mkdir(exist_ok=True)
    screenshot = REPORTS / "conformance-lifecycle-bug.png"
    screenshot.unlink(missing_ok=True)
    chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1280,3000", page.as_uri())
    assert screenshot.stat().st_size > 50_000
