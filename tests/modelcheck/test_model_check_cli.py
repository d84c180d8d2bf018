"""``diagnosis-harness model-check``: the command's options, its summary, ``--json``, its exit
status, what it refuses before any check runs, and the output the guide shows."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness import _model_check_command
from diagnosis_harness.__main__ import main
from diagnosis_harness.modelcheck import (
    CheckResult,
    TransitionCoverage,
    _cli,
    _planted,
    _spin,
    _stateful,
)
from diagnosis_harness.modelcheck._explorer import explore as real_explore
from diagnosis_harness.modelcheck._results import ModelCheckSummary
from small_model_check import one_race_per_scenario

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.modelcheck._explorer import Exploration
    from installed import Venv

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "model-checks-and-report.md"
SMALL = ("--depth", "1", "--max-examples", "3", "--steps", "5")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _model_check_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def _explore_once(
    explorations: dict[tuple[int, bool], Exploration],
) -> Callable[..., Exploration]:
    """``explore`` for the tests whose point is what the command makes of the checks' results:
    the first call per ``(depth, priced)`` explores (the real explorer, about 5 s even at depth 1:
    its breadth-first searches do not depend on the depth); a later one hands back that
    :class:`Exploration`, merging its coverage into the caller's as ``explore`` itself does.
    The explorer is deterministic, so exploring again would find the same (but the timings).
    Only while nothing is planted: a planted bug changes what exploring finds."""

    def explore(
        *,
        depth: int = 4,
        coverage: TransitionCoverage | None = None,
        tick: Callable[[str, int, int | None], None] | None = None,
        priced: bool = True,
    ) -> Exploration:
        key = (depth, priced)
        if key not in explorations:
            explorations[key] = real_explore(depth=depth, tick=tick, priced=priced)
        found = explorations[key]
        if coverage is not None:
            coverage.merge(found.coverage)
        return found

    return explore


def _check_machine_once() -> Callable[..., CheckResult]:
    """``_stateful.check_machine`` for a test that runs the command twice alike under the ``ci``
    profile (derandomized: a second run of a machine finds, and shrinks to, the same): the first
    call per machine runs it; a later one hands back its result, merging the rows it took into
    the caller's coverage as the first run merged them into its own."""
    real = _stateful.check_machine
    done: dict[type[Any], tuple[CheckResult, TransitionCoverage]] = {}

    def check_machine(
        machine: type[Any],
        *,
        settings: Any = None,
        coverage: TransitionCoverage | None = None,
        stats: Any = None,
    ) -> CheckResult:
        if machine not in done:
            rows = TransitionCoverage()
            done[machine] = real(machine, settings=settings, coverage=rows, stats=stats), rows
        result, rows = done[machine]
        if coverage is not None:
            coverage.merge(rows)
        return result

    return check_machine


@pytest.fixture(scope="module")
def unplanted_explorations() -> dict[tuple[int, bool], Exploration]:
    """What ``explore`` found, per ``(depth, priced)``, with no bug planted: one exploration
    each for this module's runs of the command."""
    return {}


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch, small_races: None) -> None:
    """A small run with one planted defect (test_planted_defects.py hunts all three)."""
    monkeypatch.setattr(_planted, "DEFECTS", _planted.DEFECTS[:1])


@pytest.fixture
def small_races(
    monkeypatch: pytest.MonkeyPatch,
    unplanted_explorations: dict[tuple[int, bool], Exploration],
) -> None:
    """One race per scenario, the explorer's one exploration per module (``_explore_once``),
    and a fake Spin that proves one property and refutes one seeded bug."""
    monkeypatch.setattr(_cli, "run_checks", one_race_per_scenario)
    monkeypatch.setattr(_cli, "explore", _explore_once(unplanted_explorations))

    def fake_spin(profile: str, racers: int | None = None) -> _spin.SpinSummary:
        result = _spin.ModelResult(
            name="budget",
            racers=racers or 5,
            property="within_limits",
            errors=0,
            states_stored=10,
            seconds=0.1,
            expected_violation=False,
            ok=True,
            detail=None,
            trail=[],
            final=None,
        )
        seeded = _spin.ModelResult(
            {**result, "name": "budget_seeded_bug", "errors": 1, "expected_violation": True}
        )
        return _spin.SpinSummary(
            available=True,
            reason=None,
            profile=profile,
            racers=racers or 5,
            models=[result, seeded],
            passed=True,
        )

    monkeypatch.setattr(_spin, "run_checks", fake_spin)


def test_defaults() -> None:
    args = _args()
    assert args.profile == "ci"
    assert args.spin is False
    assert args.json is False
    assert args.racers is None
    assert args.coverage_out is None


@pytest.mark.parametrize("argv", [["--profile", "shallow"], ["--racers", "0"], ["--depth", "x"]])
def test_bad_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        _args(*argv)


@pytest.mark.usefixtures("small")
def test_a_small_run_prints_a_readable_summary_and_writes_the_coverage(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "coverage.json"
    args = _args("--spin", *SMALL, "--coverage-out", str(path))
    assert _cli.run(args, out=out, err=err) == 0, out.getvalue()
    text = out.getvalue()
    assert "explorer         depth 1:" in text
    for machine in ("RunMachine", "BudgetMachine", "RetryMachine", "TreeMachine"):
        assert f"\n{machine:<16} " in text
    assert "planted defects  1/1 caught" in text
    assert "the race found in 6/6 unlocked variants: ok" in text
    assert "spin             5 racers: 1/1 properties proved, 1/1 seeded bugs refuted" in text
    assert "transition coverage: lifecycle 5/5, budget 6/6, retry 7/7" in text
    assert "model-check passed" in text
    assert "None" not in text  # no raw key: value dump
    assert not re.search(r"^\s*\w+: \S+$", text, re.MULTILINE)
    # Off a terminal, progress is one line per step on stderr.
    assert err.getvalue().splitlines() == [
        "model-check: explorer (depth 1) ...",
        "model-check: RunMachine ...",
        "model-check: BudgetMachine ...",
        "model-check: RetryMachine ...",
        "model-check: TreeMachine ...",
        "model-check: planted defects ...",
        "model-check: scheduler ...",
        "model-check: spin ...",
    ]
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["covered"] == data["total"] == 18
    kinds = [check["kind"] for check in data["checks"]]
    assert kinds == ["exhaustive", *["stateful"] * 4, "planted", "scheduled", "spin"]


@pytest.mark.usefixtures("small")
def test_json_prints_the_typed_result_and_round_trips() -> None:
    out = io.StringIO()
    assert _cli.run(_args("--json", *SMALL), out=out, err=io.StringIO()) == 0
    data = json.loads(out.getvalue())
    summary = ModelCheckSummary.from_json(data)
    assert summary.as_json() == data
    assert summary.passed
    assert [check.name for check in summary.checks][:2] == ["explorer", "RunMachine"]
    explorer = summary.checks[0]
    assert explorer.scenarios
    assert all(r.unit == "sequences" and r.passed for r in explorer.scenarios)
    scheduler = next(check for check in summary.checks if check.kind == "scheduled")
    assert {r.unit for r in scheduler.scenarios} == {"schedules"}


def test_a_failure_is_shown_with_its_counterexample(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A planted lifecycle bug: the summary names the failed scenarios, and --json carries the
    counterexample, which round-trips; nothing else reaches stdout."""
    monkeypatch.setattr(_cli, "run_checks", one_race_per_scenario)
    monkeypatch.setattr(_planted, "DEFECTS", ())
    monkeypatch.setattr(_stateful, "MACHINES", (_stateful.RunMachine,))
    # Both runs below check alike under the same planted bug: one exploration and one run of
    # the machine for the two.
    monkeypatch.setattr(_cli, "explore", _explore_once({}))
    monkeypatch.setattr(_stateful, "check_machine", _check_machine_once())
    out, err = io.StringIO(), io.StringIO()
    argv = ("--depth", "1", "--max-examples", "100", "--steps", "10")
    with _planted.replaceable_terminal():
        status = _cli.run(_args(*argv), out=out, err=err)
    assert capsys.readouterr().out == ""
    text = out.getvalue()
    assert status == 1
    assert "model-check FAILED (explorer" in text
    assert "FAILED Success wins a terminal race" in text
    assert "ok     Per-Tool budget is exhausted" in text
    assert "model:   changed=False" in text
    assert "runtime: changed=True" in text
    out = io.StringIO()
    with _planted.replaceable_terminal():
        _cli.run(_args("--json", *argv), out=out, err=io.StringIO())
    data: dict[str, Any] = json.loads(out.getvalue())
    summary = ModelCheckSummary.from_json(data)
    assert summary.as_json() == data
    explorer, machine = summary.checks[:2]
    failed = [r for r in explorer.scenarios if not r.passed]
    assert failed
    assert all(r.counterexample is not None and r.counterexample.steps for r in failed)
    assert machine.name == "RunMachine"
    assert not machine.passed
    assert any(c.kind == "hypothesis" for c in machine.counterexamples)


def test_without_spin_it_says_so_and_spin_unavailable_fails(
    monkeypatch: pytest.MonkeyPatch,
    unplanted_explorations: dict[tuple[int, bool], Exploration],
) -> None:
    monkeypatch.setattr(_cli, "run_checks", one_race_per_scenario)
    monkeypatch.setattr(_cli, "explore", _explore_once(unplanted_explorations))
    monkeypatch.setattr(_planted, "DEFECTS", ())
    monkeypatch.setattr(_spin, "spin_unavailable_reason", lambda: "spin not found on PATH")
    out = io.StringIO()
    assert _cli.run(_args("--spin", *SMALL), out=out, err=io.StringIO()) == 1
    assert "spin             unavailable: spin not found on PATH" in out.getvalue()
    assert "model-check FAILED (spin)" in out.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.usefixtures("small")
def test_on_a_terminal_each_step_has_a_progress_bar() -> None:
    err = _Terminal()
    assert _cli.run(_args(*SMALL), out=io.StringIO(), err=err) == 0
    drawn = err.getvalue()
    for step in ("explorer (depth 1)", "RunMachine", "planted defects", "scheduler"):
        assert step in drawn
    assert "model-check: explorer (depth 1) ..." not in drawn  # not the plain lines


# -- what the command refuses before any check runs ---------------------------------------------


@pytest.fixture
def checks_run(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Namespace]:
    """The arguments each run of the checks was handed (the checks themselves do not run)."""
    handed: list[argparse.Namespace] = []

    def record(args: argparse.Namespace) -> int:
        handed.append(args)
        return 0

    monkeypatch.setattr(_cli, "run", record)
    return handed


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``, with a file's bytes (``None`` for a directory)."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes() if path.is_file() else None
        for path in root.rglob("*")
    }


def _unwritable(tmp_path: Path, kind: str) -> Path:
    if kind == "a directory":
        return tmp_path
    if kind == "in a missing directory":
        return tmp_path / "missing" / "coverage.json"
    file = tmp_path / "a-file"
    file.write_text("kept\n", encoding="utf-8")
    return file / "coverage.json"  # under a file


@pytest.mark.parametrize("kind", ["a directory", "in a missing directory", "under a file"])
def test_an_unwritable_coverage_out_is_refused_before_any_check_runs(
    tmp_path: Path,
    kind: str,
    checks_run: list[argparse.Namespace],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _unwritable(tmp_path, kind)
    before = _tree(tmp_path)
    assert main(["model-check", "--coverage-out", str(path)]) == 2
    shown = capsys.readouterr()
    assert checks_run == []
    assert shown.out == ""
    assert shown.err.startswith(
        f"diagnosis-harness model-check: --coverage-out: cannot write {path}: "
    )
    assert "Traceback" not in shown.err
    assert _tree(tmp_path) == before  # nothing made, nothing changed


def test_a_writable_coverage_out_is_left_as_it_was_until_the_checks_end(
    tmp_path: Path, checks_run: list[argparse.Namespace]
) -> None:
    """The probe creates no file the run might not write (a new path is gone again), and
    changes no file the run will replace."""
    new, existing = tmp_path / "new.json", tmp_path / "existing.json"
    existing.write_text("old\n", encoding="utf-8")
    assert main(["model-check", "--coverage-out", str(new)]) == 0
    assert main(["model-check", "--coverage-out", str(existing)]) == 0
    assert [args.coverage_out for args in checks_run] == [new, existing]
    assert not new.exists()
    assert existing.read_text(encoding="utf-8") == "old\n"


def test_without_the_extra_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
    checks_run: list[argparse.Namespace],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What the bare wheel shows end to end (below), in-process: python-statemachine found
    missing is named, with the extra's pip line."""
    real = importlib.util.find_spec

    def find_spec(name: str) -> object:
        return None if name == "statemachine" else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert main(["model-check", "--coverage-out", "/nowhere/coverage.json"]) == 2
    err = capsys.readouterr().err
    assert "not installed: statemachine" in err
    assert err.rstrip().endswith("pip install 'diagnosis-harness[modelcheck]'")
    assert checks_run == []


def test_help_lists_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["model-check", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "--coverage-out PATH" in text
    statuses = text[text.index("exit status:") :]
    for status in _model_check_command.EXIT_STATUSES:
        assert re.search(rf"^  {status} +\S", statuses, re.MULTILINE), status


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_on_a_bare_install_the_command_names_its_extra(bare_venv: Venv, tmp_path: Path) -> None:
    """``pip install diagnosis-harness`` and nothing else: ``--help`` shows the options and exit
    statuses; the command itself, and ``python -m``, say which extra to install, status 2, with
    no traceback."""
    script = str(bare_venv.script("diagnosis-harness"))
    helped = subprocess.run(
        [script, "model-check", "--help"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert helped.returncode == 0, helped.stderr
    assert "--coverage-out PATH" in helped.stdout
    assert "exit status:" in helped.stdout
    assert "pip install 'diagnosis-harness[modelcheck]'" in helped.stdout
    commands = (
        [script, "model-check"],
        [str(bare_venv.python), "-m", "diagnosis_harness", "model-check"],
    )
    for command in commands:
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        assert "Traceback" not in done.stderr
        assert done.stderr.rstrip().endswith("pip install 'diagnosis-harness[modelcheck]'")
        assert "not installed: statemachine, hypothesis, rich" in done.stderr


# -- the guide's output ----------------------------------------------------------------------------


def _normalised(text: str) -> list[str]:
    """Numbers and timings made ``N``, which checks exercised a scenario (a small run's machines
    reach fewer) and a planted defect's shrunk steps made ``...``: what a run's size or
    Hypothesis's version changes goes, the shape stays."""
    numbers = (re.sub(r"\d[\d,]*(\.\d+)?", "N", line).rstrip() for line in text.splitlines())
    checks = (re.sub(r"^( {9})\w+ N \w+(; .*)?$", r"\1...", line) for line in numbers)
    # A planted defect's shrunk example is Hypothesis's, and its shrinker differs across versions
    # and Pythons: the defect's name stays, its steps go.
    return [re.sub(r"^(  [a-z]+(-[a-z]+)+): .*$", r"\1: ...", line) for line in checks]


def _guide_block(start: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"```text\n(.*?)```", text, re.DOTALL)
    return next(block for block in blocks if block.startswith(start))


@pytest.mark.usefixtures("small_races")
def test_the_guide_shows_what_the_command_prints() -> None:
    out = io.StringIO()
    assert _cli.run(_args(*SMALL), out=out, err=io.StringIO()) == 0
    shown = _guide_block("diagnosis-harness model-check (profile ci)")
    assert _normalised(shown) == _normalised(out.getvalue())


# -- what a run leaves behind ----------------------------------------------------------------------


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_a_run_writes_nothing_in_the_working_directory(tmp_path: Path) -> None:
    """The command in a fresh interpreter, in an empty cwd, with ``TMPDIR`` a directory of its
    own and ``HYPOTHESIS_STORAGE_DIRECTORY`` unset: the cwd is still empty afterwards (it used
    to get ``.hypothesis/``, Hypothesis's constants cache), and so is ``TMPDIR`` -- the
    temporary directory the run kept Hypothesis's files in is gone. (Every step runs, but the
    scheduler's, cut to one race per scenario: ``tests/small_model_check.py``.)"""
    cwd, temp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPOTHESIS_", "PYTEST_"))}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "small_model_check.py"), "model-check", *SMALL],
        cwd=cwd,
        env=env | {"TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model-check passed" in done.stdout
    assert sorted(p.name for p in cwd.rglob("*")) == []
    assert sorted(p.name for p in temp.rglob("*")) == []


def test_a_storage_directory_the_user_set_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path))
    with _cli._hypothesis_storage():
        assert os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] == str(tmp_path)
    assert os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] == str(tmp_path)
