"""``diagnosis-harness model-check``: the command's options, its summary, its exit status."""

from __future__ import annotations

import argparse
import io
import json
import sys
import types
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness.conformance.suite._support import TERMINAL
from diagnosis_harness.modelcheck import _cli, _planted

if TYPE_CHECKING:
    from pathlib import Path


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def _fake(monkeypatch: pytest.MonkeyPatch, name: str, result: object) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    module = types.ModuleType(name)

    def run_checks(*args: Any) -> object:
        calls.append(args)
        if isinstance(result, BaseException):
            raise result
        return result

    module.run_checks = run_checks  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_defaults() -> None:
    args = _args()
    assert args.profile == "ci"
    assert args.spin is False
    assert args.racers is None
    assert args.coverage_out is None


@pytest.mark.parametrize("argv", [["--profile", "shallow"], ["--racers", "0"], ["--depth", "x"]])
def test_bad_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        _args(*argv)


def test_a_small_run_prints_the_summary_and_writes_the_coverage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scheduler = _fake(
        monkeypatch,
        _cli._SCHEDULER,
        {
            "passed": True,
            "schedules": 2059,
            "details": [
                {
                    "passed": True,
                    "requirement": TERMINAL,
                    "spec_scenario": "Success wins a terminal race",
                }
            ],
        },
    )
    spin = _fake(
        monkeypatch,
        _cli._SPIN,
        {
            "passed": True,
            "racers": 5,
            "models": [
                {"property": "one_winner", "ok": True, "states_stored": 10, "errors": 0},
                {"property": "seeded", "ok": True, "expected_violation": True, "errors": 1},
            ],
        },
    )
    # One defect is enough here: test_planted_defects.py hunts all three.
    monkeypatch.setattr(_planted, "DEFECTS", _planted.DEFECTS[:1])
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "coverage.json"
    args = _args(
        "--spin", "--depth", "1", "--max-examples", "3", "--steps", "5",
        "--coverage-out", str(path),
    )  # fmt: skip
    assert _cli.run(args, out=out, err=err) == 0, out.getvalue()
    text = out.getvalue()
    assert "explorer (depth 1)" in text
    for machine in ("RunMachine", "BudgetMachine", "RetryMachine"):
        assert machine in text
    assert "planted defects caught: 1/1" in text
    assert "scheduler: ok" in text
    assert "schedules: 2,059" in text
    assert "states stored: 10" in text
    assert "properties proved: 1/1" in text
    assert "seeded bugs refuted: 1/1" in text
    assert "transition coverage: lifecycle 5/5, budget 4/4, retry 7/7" in text
    assert "model-check passed" in text
    assert err.getvalue() == ""  # no progress bar for ci
    assert scheduler == [("ci",)]
    assert spin == [("ci", None)]
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["covered"] == data["total"] == 16
    assert data["profile"] == "ci"
    kinds = [check["kind"] for check in data["checks"]]
    assert kinds == [
        "exhaustive",
        "stateful",
        "stateful",
        "stateful",
        "planted",
        "scheduled",
        "spin",
    ]
    assert all(check["passed"] for check in data["checks"])


def test_unavailable_and_failing_optional_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_planted, "DEFECTS", ())  # hunted in test_planted_defects.py
    monkeypatch.setattr(_cli, "_SCHEDULER", "diagnosis_harness.modelcheck._no_such_scheduler")
    _fake(monkeypatch, _cli._SPIN, {"passed": False, "available": False, "reason": "no spin"})
    out = io.StringIO()
    args = _args("--spin", "--depth", "1", "--max-examples", "2", "--steps", "3")
    assert _cli.run(args, out=out, err=io.StringIO()) == 1
    text = out.getvalue()
    assert "scheduler: unavailable in this build" in text
    assert "spin: FAILED" in text
    assert "reason: no spin" in text
    assert "model-check FAILED (spin)" in text


def test_an_optional_check_that_raises_fails_the_command() -> None:
    out = io.StringIO()

    def boom(module: types.ModuleType) -> object:
        raise RuntimeError("broken")

    passed, result = _cli._optional("spin", "json", boom, out)
    assert passed is False
    assert result is not None
    assert "spin: FAILED (RuntimeError: broken)" in out.getvalue()
    passed, result = _cli._optional("spin", "json", lambda _: 42, out)
    assert passed is False


def test_passed_reads_the_usual_keys() -> None:
    assert _cli._passed({"passed": True})
    assert not _cli._passed({"ok": False})
    assert not _cli._passed({"violations": 2})
    assert _cli._passed({"errors": 0, "schedules": 3})


def test_without_hypothesis_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    err = io.StringIO()
    assert _cli.run(_args(), out=io.StringIO(), err=err) == 2
    assert "pip install 'diagnosis-harness[modelcheck]'" in err.getvalue()


def test_the_progress_bar() -> None:
    stream = io.StringIO()
    bar = _cli._Progress(stream, enabled=True, width=10)
    bar.update("RunMachine", 50, 100, force=True)
    assert "[#####-----] 50/100" in stream.getvalue()
    bar.update("explorer", 7, force=True)
    assert "explorer" in stream.getvalue()
    bar.done()
    silent = io.StringIO()
    _cli._Progress(silent, enabled=False).update("x", 1, 2, force=True)
    assert silent.getvalue() == ""
