"""The bundled suite's model checks, end to end, with a planted bug: one item per scenario, and
an item fails only when a check that exercised its scenario failed.

The suite runs in a subprocess (as ``diagnosis-harness report`` runs it); a small plugin plants
the defect for the session and writes each item's outcome, its ``record_property`` values and
its failure message, which is the interface the conformance report reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from diagnosis_harness.conformance.suite._support import (
    BUDGETS,
    DEADLINE,
    PRIMITIVES,
    RETRY,
    TERMINAL,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "diagnosis-harness-run-context" / "spec.md"

DUMP = """
import json, os

ITEMS = []
PLANTED = []


def pytest_sessionstart(session):
    from diagnosis_harness.modelcheck import _planted

    defect = {d.name: d for d in _planted.DEFECTS}[os.environ["PLANT"]]
    PLANTED.append(defect.plant())
    PLANTED[0].__enter__()

def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        ITEMS.append({
            "nodeid": report.nodeid,
            "outcome": report.outcome,
            "properties": dict(report.user_properties),
            "message": report.longreprtext,
        })

def pytest_sessionfinish(session):
    PLANTED[0].__exit__(None, None, None)
    with open(os.environ["DUMP_TO"], "w", encoding="utf-8") as file:
        json.dump(ITEMS, file)
"""


def _run_suite_model_checks(tmp_path: Path, defect: str) -> dict[str, dict[str, Any]]:
    """Each item of the suite's model checks, by its parameter (the scenario), or its name."""
    (tmp_path / "dump_items.py").write_text(textwrap.dedent(DUMP), encoding="utf-8")
    suite = ROOT / "src" / "diagnosis_harness" / "conformance" / "suite"
    args = [
        str(suite / "model_checks"),
        "-c",
        str(suite / "suite.ini"),
        "--rootdir",
        str(suite.parents[2]),
        "-p",
        "no:cacheprovider",
        "-p",
        "dump_items",
        "-q",
        "--spec",
        str(SPEC),
        "--spec-report",
        str(tmp_path / "report"),
    ]
    dump = tmp_path / "items.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(tmp_path),
            "DUMP_TO": str(dump),
            "PLANT": defect,
            "HYPOTHESIS_PROFILE": "ci",
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert dump.exists(), done.stdout + done.stderr
    items = json.loads(dump.read_text(encoding="utf-8"))
    by_key: dict[str, dict[str, Any]] = {}
    for item in items:
        name = item["nodeid"].rpartition("::")[2]
        kind = "explorer" if "test_explorer.py" in item["nodeid"] else "schedules"
        by_key[f"{kind}: {name.partition('[')[2].rstrip(']') or name}"] = item
    return by_key


def _failed(items: dict[str, dict[str, Any]]) -> set[str]:
    return {key for key, item in items.items() if item["outcome"] == "failed"}


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_a_lifecycle_bug_fails_only_the_items_of_the_scenarios_it_breaks(tmp_path: Path) -> None:
    items = _run_suite_model_checks(tmp_path, "replaceable-terminal")
    assert _failed(items) == {
        "explorer: Success wins a terminal race",
        "explorer: Budget exhaustion wins a terminal race",
        "explorer: Deadline expires before a Tool call",
        "explorer: Client disconnects",
        "schedules: Success wins a terminal race",
        "schedules: Budget exhaustion wins a terminal race",
        "schedules: Actual Token usage exceeds the limit",  # a report past a limit rewrites it
        # The run-tree race: the replaceable ending cascades nothing, so the children of a
        # cancelled parent stay live.
        "schedules: Client disconnects",
    }  # the registration races end the run once: a replaceable end does not show there
    for scenario in ("Per-Tool budget is exhausted", "Run byte limit would be exceeded"):
        assert items[f"schedules: {scenario}"]["outcome"] == "passed"
    for scenario in (
        "Per-Tool budget is exhausted",
        "Actual Token usage exceeds the limit",
        "Router transport failure succeeds on retry",
        "Tool call fails",
        "Run is cancelled between attempts",
    ):
        item = items[f"explorer: {scenario}"]
        assert item["outcome"] == "passed"
        assert item["properties"]["checked"]["kind"] == "sequences"
        assert item["properties"]["checked"]["count"] > 0
        assert "counterexample" not in item["properties"]
    # A failed item: its message is the counterexample's text, its properties the JSON form.
    failed = items["explorer: Success wins a terminal race"]
    counterexample = failed["properties"]["counterexample"]
    assert counterexample["kind"] == "sequence"
    assert [s["action"] for s in counterexample["steps"]] == ["succeed", "succeed"]
    assert counterexample["disagreement"] == 1
    step = counterexample["steps"][1]
    assert (step["model"], step["runtime"]) == ("changed=False", "changed=True")
    assert failed["message"].splitlines()[0] == counterexample["message"]
    assert "replay_sequence" in counterexample["replay"]
    schedule = items["schedules: Success wins a terminal race"]["properties"]
    assert schedule["checked"]["kind"] == "schedules"
    assert schedule["counterexample"]["kind"] == "schedule"
    # The requirement names the suite marks with are the spec's.
    assert {TERMINAL, DEADLINE, BUDGETS, RETRY, PRIMITIVES}


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_a_budget_bug_fails_only_the_per_tool_items(tmp_path: Path) -> None:
    items = _run_suite_model_checks(tmp_path, "tool-total-before-check")
    assert _failed(items) == {
        "explorer: Per-Tool budget is exhausted",
        "schedules: Per-Tool budget is exhausted",
    }
    explorer = items["explorer: Per-Tool budget is exhausted"]["properties"]
    counterexample = explorer["counterexample"]
    assert [s["action"] for s in counterexample["steps"]] == [
        "reserve_tool_call(search)",
        "reserve_tool_call(search)",
    ]
    schedule = items["schedules: Per-Tool budget is exhausted"]["properties"]["counterexample"]
    assert schedule["kind"] == "schedule"
    assert schedule["steps"][-1]["action"] == "the invariant is checked"
    assert "replay_schedule" in schedule["replay"]
