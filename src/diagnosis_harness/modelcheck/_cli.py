"""``diagnosis-harness model-check [--profile ci|dev|deep] [--spin] [--json]``: every model check.

Theory of operation. The command runs, in order, against the installed package, each check
returning a typed :class:`~._results.CheckResult`:

1. the exhaustive explorer (:mod:`._explorer`): both breadth-first searches and every event
   sequence up to depth 4 (5 with ``deep``) against the real runtime;
2. the Hypothesis stateful machines (:mod:`._stateful`) under the chosen profile
   (:mod:`._profiles`), and the run tree's (:mod:`._tree_stateful`);
3. the planted defects (:mod:`._planted`): each must be caught and shrunk to a short sequence;
4. the deterministic scheduler's race checks (:mod:`._race_checks`);
5. with ``--spin``, the Spin models (:mod:`._spin`).

Progress goes to stderr: a bar per step (rich) on a terminal, one line per step otherwise. The
summary goes to stdout: one line per check, the transition coverage, then each spec scenario
with what checked it and, for a failed one, its counterexample. ``--json`` prints the
:class:`~._results.ModelCheckSummary` as JSON instead. ``--coverage-out PATH`` writes the
coverage of every row of every table, with every check's result, as JSON.

The options, the exit statuses and the checks made before any check runs (the extra is
installed, ``--coverage-out`` can be written) are :mod:`diagnosis_harness._model_check_command`'s,
which imports nothing of the ``modelcheck`` extra; :func:`run` is handed arguments it checked.
Exit status: 0 when every check passed and every row was taken; 1 when something failed (or
``--spin`` was asked for and Spin is unavailable).

Nothing is written in the current directory (but ``--coverage-out``): Hypothesis keeps its files
-- its constants cache, the ``dev`` profile's example database -- under
``HYPOTHESIS_STORAGE_DIRECTORY``, ``.hypothesis/`` in the current directory by default, so the
command points it at a temporary directory removed when it ends, unless it is set. (The ``deep``
profile keeps its database in the user's cache on purpose: see ``_profiles``.)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Final, final

from . import _spin
from ._coverage import TransitionCoverage
from ._explorer import explore
from ._race_checks import run_checks
from ._results import CheckResult, ModelCheckSummary

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from rich.progress import Progress

    from ._spec_scenarios import SpecScenario

__all__ = ["main", "render", "run"]

_DEPTH: Final = {"ci": 4, "dev": 4, "deep": 5}
_SPIN_PROFILE: Final = {"ci": "ci", "dev": "ci", "deep": "deep"}


# -- progress --------------------------------------------------------------------------------------


def _quiet(what: str, done: int, total: int | None) -> None:
    del what, done, total  # off a terminal, one line per step is all the progress there is


@final
class _Steps:
    """Progress on stderr: a transient rich bar per step on a terminal, else one line per step."""

    __slots__ = ("_err", "_progress")

    def __init__(self, err: IO[str], progress: Progress | None) -> None:
        self._err = err
        self._progress = progress

    @contextmanager
    def step(self, title: str) -> Iterator[Callable[[str, int, int | None], None]]:
        progress = self._progress
        if progress is None:
            print(f"model-check: {title} ...", file=self._err, flush=True)
            yield _quiet
            return
        task = progress.add_task(title, total=None)

        def tick(what: str, done: int, total: int | None) -> None:
            progress.update(task, description=f"{title}: {what}", completed=done, total=total)

        try:
            yield tick
        finally:
            progress.remove_task(task)


def _progress(err: IO[str]) -> Progress | None:
    if not err.isatty():
        return None
    from rich.console import Console  # noqa: PLC0415 - the modelcheck extra, imported on use
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=err),
        transient=True,
    )


# -- the summary -----------------------------------------------------------------------------------


def _ok(passed: bool) -> str:
    return "ok" if passed else "FAILED"


def _scenario_lines(checks: tuple[CheckResult, ...]) -> list[str]:
    """Per spec scenario: passed or failed, and what checked it; a failure's counterexample."""
    order: list[SpecScenario] = []
    by_pair: dict[SpecScenario, list[tuple[CheckResult, int]]] = {}
    for check in checks:
        for index, result in enumerate(check.scenarios):
            if result.scenario not in by_pair:
                order.append(result.scenario)
                by_pair[result.scenario] = []
            by_pair[result.scenario].append((check, index))
    lines = [f"spec scenarios model-checked: {len(order)}"]
    for pair in order:
        entries = [(check, check.scenarios[index]) for check, index in by_pair[pair]]
        passed = all(result.passed for _, result in entries)
        what = "; ".join(
            f"{check.name} {result.checked:,} {result.unit}" for check, result in entries
        )
        lines.append(f"  {_ok(passed):<6} {pair[1]}  ({pair[0]})")
        lines.append(f"         {what}")
        for check, result in entries:
            if result.counterexample is not None:
                lines.append(f"         {check.name}: {result.counterexample.message}")
                lines.extend(
                    f"           {line}" for line in result.counterexample.text().splitlines()[1:]
                )
    return lines


def render(summary: ModelCheckSummary) -> str:
    """The readable summary the command prints (without ``--json``)."""
    lines = [f"diagnosis-harness model-check (profile {summary.profile})"]
    for check in summary.checks:
        lines.append(f"{check.name:<16} {check.summary}")
        lines.extend(f"  {line}" for line in check.details)
        lines.extend(f"  problem: {line}" for line in check.problems)
    tables = ", ".join(f"{table} {a}/{b}" for table, a, b in summary.coverage)
    lines.append(f"transition coverage: {tables}")
    if summary.never_taken:
        lines.append(f"  never taken: {', '.join(summary.never_taken)}")
    lines.extend(_scenario_lines(summary.checks))
    failed = [check.name for check in summary.checks if not check.passed]
    if summary.never_taken:
        failed.append("coverage")
    if failed:
        lines.append(f"model-check FAILED ({', '.join(failed)}) in {summary.seconds:.1f} s")
    else:
        lines.append(f"model-check passed in {summary.seconds:.1f} s")
    return "\n".join(lines) + "\n"


# -- the command -----------------------------------------------------------------------------------

_STORAGE: Final = "HYPOTHESIS_STORAGE_DIRECTORY"


@contextmanager
def _hypothesis_storage() -> Iterator[None]:
    """Hypothesis's files in a temporary directory for the block, unless ``_STORAGE`` is set.

    Hypothesis reads the variable the first time it stores anything in the process, which in
    the command's own process is during the checks.
    """
    if os.environ.get(_STORAGE):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="diagnosis-harness-model-check-") as scratch:
        os.environ[_STORAGE] = scratch
        try:
            yield
        finally:
            os.environ.pop(_STORAGE, None)


def _checks(
    args: argparse.Namespace, steps: _Steps, coverage: TransitionCoverage
) -> list[CheckResult]:
    """Run every check the arguments ask for, in order."""
    from hypothesis import settings  # noqa: PLC0415 - the optional extra, imported on use

    from . import _planted, _stateful, _tree_stateful  # noqa: PLC0415 - they import Hypothesis
    from ._profiles import settings_for  # noqa: PLC0415

    profile: str = args.profile
    depth = args.depth or _DEPTH[profile]
    results: list[CheckResult] = []
    with steps.step(f"explorer (depth {depth})") as tick:
        results.append(explore(depth=depth, coverage=coverage, tick=tick).as_check())
    base = settings_for(profile)
    chosen = settings(
        base,
        max_examples=args.max_examples or base.max_examples,
        stateful_step_count=args.steps or base.stateful_step_count,
    )
    for machine in _stateful.MACHINES:
        with steps.step(machine.__name__) as tick:
            stats = _stateful.MachineStats(machine.__name__)
            examples = chosen.max_examples
            stats.on_example = lambda s, tick=tick, n=examples: tick("examples", s.examples, n)
            results.append(
                _stateful.check_machine(machine, settings=chosen, coverage=coverage, stats=stats)
            )
    with steps.step("TreeMachine") as tick:
        results.append(_tree_stateful.check_tree_machine(settings=chosen, tick=tick))
    with steps.step("planted defects") as tick:
        results.append(_planted.check_planted(tick=tick))
    with steps.step("scheduler") as tick:
        results.append(run_checks(profile, tick=tick))
    if args.spin:
        with steps.step("spin") as tick:
            results.append(_spin.run_spin(_SPIN_PROFILE[profile], args.racers, tick=tick))
    else:
        results.append(
            CheckResult(
                name="spin",
                kind="spin",
                passed=True,
                summary="skipped (pass --spin)",
                figures=(("skipped", True),),
            )
        )
    return results


def run(args: argparse.Namespace, *, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Run every model check; 0 only if all passed and every row of every table was taken."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    started = time.perf_counter()
    coverage = TransitionCoverage()
    progress = _progress(err)
    steps = _Steps(err, progress)
    from hypothesis.reporting import with_reporter  # noqa: PLC0415 - the extra, on use

    # Hypothesis's own report of a failing example goes to stderr: stdout is the summary (or
    # the JSON document), and the counterexample is in it already.
    with _hypothesis_storage(), with_reporter(lambda text: print(text, file=err)):
        if progress is None:
            checks = _checks(args, steps, coverage)
        else:
            with progress:
                checks = _checks(args, steps, coverage)
    never = tuple(f"{table} row {index}" for table, index in coverage.uncovered())
    summary = ModelCheckSummary(
        profile=args.profile,
        passed=all(check.passed for check in checks) and not never,
        seconds=time.perf_counter() - started,
        checks=tuple(checks),
        coverage=tuple((table, a, b) for table, (a, b) in coverage.per_table().items()),
        never_taken=never,
    )
    if args.coverage_out is not None:
        data = coverage.as_dict()
        data["profile"] = args.profile
        data["checks"] = [check.as_json() for check in checks]
        path: Path = args.coverage_out
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if args.json:
        out.write(json.dumps(summary.as_json(), indent=2) + "\n")
    else:
        out.write(render(summary))
        if args.coverage_out is not None:
            print(f"coverage written to {args.coverage_out}", file=out)
    return 0 if summary.passed else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m diagnosis_harness.modelcheck._cli``: the same parser, checks and statuses as
    ``diagnosis-harness model-check``."""
    from ..__main__ import main as command_line  # noqa: PLC0415 - it imports this module

    return command_line(["model-check", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
