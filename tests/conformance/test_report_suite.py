"""The bundled suite on the project's spec, and ``diagnosis-harness report`` (the main job).

The suite and the command run in subprocesses (a fresh interpreter, as a user runs them), on the
spec of this checkout or a copy of it with one scenario renamed. Those tests, up to a minute each
(the suite's model checks included), are marked ``end_to_end`` and ``version_independent``: what
they show does not depend on the env's Python version, so CI runs them once, in ``tox -e e2e``.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diagnosis_harness.conformance import load_spec
from diagnosis_harness.conformance._cli import DEFAULT_OUT, add_arguments, main, pytest_args
from diagnosis_harness.conformance.suite._support import DEADLINE

from ._support import SPEC, SUITE, read_json, scenarios

pytest_plugins = ["pytester"]

RENAMED_FROM, RENAMED_TO = "Client disconnects", "Client disconnected"
SEED_SCENARIOS = 16
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "model-checks-and-report.md"


def _suite_args(spec: Path, *extra: str) -> list[str]:
    return [
        str(SUITE),
        "-c",
        str(SUITE / "suite.ini"),
        "--rootdir",
        str(SUITE.parents[2]),
        "-p",
        "no:cacheprovider",
        "--spec",
        str(spec),
        *extra,
    ]


def _renamed_copy(directory: Path) -> Path:
    """A copy of the spec in ``directory/specs/<capability>/`` with one scenario renamed."""
    text = SPEC.read_text(encoding="utf-8")
    heading = f"#### Scenario: {RENAMED_FROM}\n"
    assert text.count(heading) == 1
    copy = directory / "specs" / SPEC.parent.name / "spec.md"
    copy.parent.mkdir(parents=True)
    copy.write_text(text.replace(heading, f"#### Scenario: {RENAMED_TO}\n"), encoding="utf-8")
    return copy


def _report_command(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    return subprocess.run(
        [sys.executable, "-m", "diagnosis_harness.conformance", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_seed_spec_has_sixteen_scenarios() -> None:
    parsed = load_spec(SPEC)
    assert parsed.valid
    assert len(parsed.spec.scenarios) == SEED_SCENARIOS


@pytest.fixture(scope="module")
def on_our_spec(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``diagnosis-harness report`` on the default spec (this checkout's, or a wheel's copy), once
    for the module's tests of it, in an empty directory: that directory and the command's
    stdout. It must exit 0."""
    cwd = tmp_path_factory.mktemp("on-our-spec")
    done = _report_command(cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return cwd, done.stdout


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_on_our_spec_every_scenario_has_a_passing_test(on_our_spec: tuple[Path, str]) -> None:
    """What ``pytest --spec-strict`` requires of the suite on our spec -- every scenario has a
    passing test, no mark is unknown, the spec is valid (test_report_plugin.py checks that the
    option enforces it) -- read from the report command's run (the suite under the plugin)."""
    cwd, stdout = on_our_spec
    data = read_json(cwd / DEFAULT_OUT)
    summary = data["summary"]
    assert summary["all_passed"] is True
    assert summary["scenarios"]["total"] == SEED_SCENARIOS
    assert summary["scenarios"]["passed"] == SEED_SCENARIOS
    # by an example test each
    assert summary["scenarios"]["example_tested"]["passed"] == SEED_SCENARIOS
    assert summary["unknown"] == 0
    assert data["items"][0]["valid"] is True
    by_name = scenarios(data)
    assert set(by_name) == {s.name for s in load_spec(SPEC).spec.scenarios}
    for name, scenario in by_name.items():
        assert scenario["outcome"] == "passed", name
        assert any(t["outcome"] == "passed" for t in scenario["tests"]), name
        for test in scenario["tests"]:
            assert test["nodeid"].startswith("diagnosis_harness/conformance/suite/"), test
    lines = stdout.splitlines()
    start = lines.index("conformance of diagnosis-harness-run-context")
    assert fnmatch.fnmatch(
        lines[start + 2], "  spec          *specs/diagnosis-harness-run-context/spec.md*"
    )
    assert any(
        fnmatch.fnmatch(line, "  scenarios     16/16 passed (0 failed, 0 skipped, 0 uncovered)*")
        for line in lines[start:]
    )


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_a_renamed_scenario_fails_the_collection_naming_the_mark(
    pytester: pytest.Pytester,
) -> None:
    copy = _renamed_copy(pytester.path)
    result = pytester.runpytest_subprocess(*_suite_args(copy))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*/test_deadline_and_cancellation.py::test_client_disconnects: unknown @pytest.mark.*",
            f"*@pytest.mark.spec('{DEADLINE}', '{RENAMED_FROM}') names no scenario of *spec.md",
            f'*did you mean @pytest.mark.spec("{DEADLINE}", "{RENAMED_TO}")?',
            "*3 errors during collection*",  # the example test and two model checks carry the mark
        ]
    )


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_the_report_command_on_our_spec(on_our_spec: tuple[Path, str]) -> None:
    cwd, stdout = on_our_spec  # the default spec: this checkout's, or a wheel's copy
    reports = cwd / DEFAULT_OUT
    assert sorted(p.name for p in reports.iterdir()) == [
        "conformance.html",
        "conformance.json",
        "conformance.md",
    ]
    assert read_json(reports)["summary"]["all_passed"] is True
    lines = stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("conformance of "))
    summary = lines[start:]
    assert summary[0] == "conformance of diagnosis-harness-run-context"
    assert summary[1].startswith("  made by       diagnosis-harness ")
    assert summary[2].endswith(("spec.md (checkout)", "spec.md (shipped)"))
    assert len(summary) <= 20  # one screen, with room for pytest's own lines above
    assert "  scenarios     16/16 passed (0 failed, 0 skipped, 0 uncovered);" in stdout
    assert "  requirements  8/8 passed" in stdout
    assert "reports/conformance.json, reports/conformance.md, reports/conformance.html" in stdout
    assert summary[-1] == "PASS: all 16 scenarios passed"
    assert "- spec conformance -" not in stdout  # the plugin's section gives way
    # The guide shows this summary: the same lines, but for what changes from run to run.
    assert _normalised(_guide_summary()) == _normalised("\n".join(summary))


def _guide_summary() -> str:
    """The passing summary the guide shows (its block starting ``conformance of``)."""
    text = GUIDE.read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"```text\n(.*?)```", text, re.DOTALL)
    return next(block for block in blocks if block.startswith("conformance of "))


def _normalised(text: str) -> list[str]:
    """What differs between runs made alike: the commit and whether the checkout is dirty, the
    versions, the time, and whether the spec came from the checkout or a wheel (and where)."""
    lines = []
    for shown in text.strip().splitlines():
        line = re.sub(r" commit [0-9a-f]+( \(dirty\))?,", "", shown)  # none outside a checkout
        line = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", "T", line)
        line = re.sub(r"(diagnosis-harness|Python) \S+", r"\1 V", line)
        # An installed wheel's copy of the spec lies under site-packages.
        line = re.sub(r"^(  spec +)\S*/(specs/\S+)", r"\1\2", line)
        lines.append(line.replace("(shipped)", "(checkout)").rstrip())
    return lines


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_a_renamed_scenario_is_uncovered_and_its_mark_unknown(tmp_path: Path) -> None:
    copy = _renamed_copy(tmp_path)
    done = _report_command(tmp_path, "--spec", str(copy), "--out", "renamed")
    assert done.returncode == 1, done.stdout + done.stderr
    data = read_json(tmp_path / "renamed")
    by_name = scenarios(data)
    assert by_name[RENAMED_TO]["outcome"] == "uncovered"
    assert by_name[RENAMED_TO]["tests"] == []
    assert RENAMED_FROM not in by_name
    others = {name: s["outcome"] for name, s in by_name.items() if name != RENAMED_TO}
    assert set(others.values()) == {"passed"}
    assert len(others) == SEED_SCENARIOS - 1
    # The example test and the suite's model checks (explorer, schedules) of the renamed scenario.
    by_node = {u["nodeid"].rpartition("/")[2]: u for u in data["unknown"]}
    assert {node.partition("::")[0] for node in by_node} == {
        "test_deadline_and_cancellation.py",
        "test_explorer.py",
        "test_schedules.py",
    }
    unknown = by_node["test_deadline_and_cancellation.py::test_client_disconnects"]
    assert (unknown["requirement"], unknown["scenario"]) == (DEADLINE, RENAMED_FROM)
    assert unknown["hint"] == f'did you mean @pytest.mark.spec("{DEADLINE}", "{RENAMED_TO}")?'
    assert unknown["outcome"] == "passed"
    assert data["summary"]["all_passed"] is False
    assert f"UNCOVERED     {DEADLINE} / {RENAMED_TO}" in done.stdout
    assert "UNKNOWN MARK  " in done.stdout
    assert "test_client_disconnects" in done.stdout
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("FAIL: 1 of 16 scenarios have no test; ")
    assert last.endswith(" spec mark(s) name no scenario")


def test_a_missing_spec_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--spec", str(tmp_path / "nowhere.md")]) == 2
    assert "no such spec file" in capsys.readouterr().err


def test_the_command_line_pieces_the_lead_wires() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    assert (args.out, args.spec, args.verbose) == ("reports", None, False)
    args = parser.parse_args(["--out", "x", "--spec", "s.md", "-v"])
    assert (args.out, args.spec, args.verbose) == ("x", "s.md", True)
    command = pytest_args(SPEC, SUITE, verbose=False)
    assert "-p" in command
    assert "no:cacheprovider" in command
    assert "--spec-unknown=report" in command
