"""``diagnosis-harness model-check [--profile ci|deep] [--spin]``: every model check, from a wheel.

Theory of operation. The command runs, in order, against the installed package:

1. the exhaustive explorer (:mod:`._explore`): both breadth-first searches and every event
   sequence up to depth 4 (5 with ``deep``) against the real runtime;
2. the Hypothesis stateful machines (:mod:`._stateful`) under the chosen profile, registered here
   because ``conftest.py`` is not shipped;
3. the planted defects (:mod:`._planted`): each must be caught and shrunk to a short sequence;
4. the deterministic thread scheduler's checks, if this build has
   ``diagnosis_harness.modelcheck._scheduler`` (``run_checks(profile) -> dict``);
5. with ``--spin``, the Spin models, if this build has ``diagnosis_harness.modelcheck._spin``
   (``run_checks(profile, racers) -> dict``).

It prints one screen: states, edges and sequences explored; Hypothesis examples, steps and
steps per second (whole check, runtime only, model only); planted defects caught; the scheduler's
and Spin's summaries (states stored, properties proved -- whatever their dict holds); the
transition coverage per table; and the spec scenarios that were model-checked. ``deep`` draws a
progress bar on stderr. ``--coverage-out PATH`` writes the coverage of every row of every table,
with every check and the scenarios it proves, as JSON for the conformance report.

The optional checks' dict: scalar entries are printed as ``key: value``; a ``passed`` (or
``ok``) boolean decides whether the check passed, else a positive ``failures`` / ``errors`` /
``violations`` count fails it, else it passed. An optional check that raises fails the command.

Exit status: 0 when every check passed and every row was taken; 1 when something failed (or
``--spin`` was asked for and Spin is unavailable); 2 when the ``modelcheck`` extra (Hypothesis)
is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, final

from ._coverage import TransitionCoverage
from ._explore import Disagreement, explore

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["add_arguments", "main", "run"]

_DEPTH: Final = {"ci": 4, "deep": 5}
_SCHEDULER: Final = "diagnosis_harness.modelcheck._scheduler"
_SPIN: Final = "diagnosis_harness.modelcheck._spin"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``model-check`` options to ``parser``."""
    parser.add_argument(
        "--profile",
        choices=("ci", "deep"),
        default="ci",
        help="ci: derandomized, 100 examples x 30 steps, depth 4 (default); "
        "deep: 5,000 examples x 150 steps, depth 5, with a progress bar",
    )
    parser.add_argument(
        "--spin", action="store_true", help="also verify the Spin models (needs spin and gcc)"
    )
    parser.add_argument(
        "--racers",
        type=_positive,
        help="racing threads in the Spin models (default: the Spin check's own per profile)",
    )
    parser.add_argument(
        "--coverage-out",
        type=Path,
        metavar="PATH",
        help="write the transition coverage (every row, with its count) and the checks as JSON",
    )
    parser.add_argument(
        "--depth", type=_positive, help="explorer sequence depth (default: 4, or 5 with deep)"
    )
    parser.add_argument(
        "--max-examples", type=_positive, help="Hypothesis examples per machine (profile's)"
    )
    parser.add_argument("--steps", type=_positive, help="Hypothesis steps per example (profile's)")


# -- output ----------------------------------------------------------------------------------------


@final
class _Progress:
    """A one-line textual progress bar on a terminal stream; silent when disabled."""

    __slots__ = ("_enabled", "_last", "_stream", "_width")

    def __init__(self, stream: IO[str], *, enabled: bool, width: int = 30) -> None:
        self._stream = stream
        self._enabled = enabled
        self._width = width
        self._last = 0.0

    def update(
        self, label: str, done: int, total: int | None = None, *, force: bool = False
    ) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        if total:
            filled = min(self._width, self._width * done // total)
            bar = "#" * filled + "-" * (self._width - filled)
            text = f"{label:<24} [{bar}] {min(done, total):,}/{total:,}"
        else:
            text = f"{label:<24} {done:,}"
        self._stream.write(f"\r{text:<79}")
        self._stream.flush()

    def done(self) -> None:
        if self._enabled:
            self._stream.write("\r" + " " * 79 + "\r")
            self._stream.flush()


def _ok(passed: bool) -> str:
    return "ok" if passed else "FAILED"


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_scalar(item) for item in value) or "-"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    return str(value)


def _passed(result: Mapping[str, object]) -> bool:
    for key in ("passed", "ok"):
        value = result.get(key)
        if isinstance(value, bool):
            return value
    for key in ("failures", "errors", "violations"):
        value = result.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return False
    return True


def _pairs(check: Mapping[str, object]) -> list[tuple[str, str]]:
    """The (requirement, scenario) pairs a check says it proves.

    Either a ``scenarios`` list of pairs, or entries of a list (``details``, say) that passed and
    name a ``requirement`` and a ``spec_scenario``.
    """
    found: list[tuple[str, str]] = []
    pairs = check.get("scenarios")
    if isinstance(pairs, (list, tuple)):
        found.extend(
            (pair[0], pair[1])
            for pair in pairs
            if isinstance(pair, (list, tuple))
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], str)
        )
    for value in check.values():
        if not isinstance(value, list):
            continue
        for item in value:
            if not isinstance(item, Mapping) or not _passed(item):
                continue
            requirement, scenario = item.get("requirement"), item.get("spec_scenario")
            if isinstance(requirement, str) and isinstance(scenario, str):
                found.append((requirement, scenario))
    return found


def _summarize(result: Mapping[str, object]) -> list[str]:
    """One line per scalar entry; lists of results condensed to counts."""
    lines: list[str] = []
    for key, value in result.items():
        if key in ("passed", "ok"):
            continue
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            items: list[Mapping[str, object]] = value
            passed = sum(1 for item in items if _passed(item))
            lines.append(f"{key}: {len(items):,} ({passed:,} passed)")
            stored = [item.get("states_stored") for item in items]
            if any(isinstance(n, int) for n in stored):
                total = sum(n for n in stored if isinstance(n, int))
                lines.append(f"states stored: {total:,}")
            if any("property" in item for item in items):
                real = [item for item in items if not item.get("expected_violation")]
                seeded = [item for item in items if item.get("expected_violation")]
                proved = sum(1 for item in real if item.get("ok") is True)
                refuted = sum(1 for item in seeded if item.get("ok") is True)
                lines.append(f"properties proved: {proved}/{len(real)}")
                if seeded:
                    lines.append(f"seeded bugs refuted: {refuted}/{len(seeded)}")
            continue
        if isinstance(value, (list, tuple, Mapping)) and len(value) > 8:
            lines.append(f"{key}: {len(value):,} entries")
            continue
        lines.append(f"{key}: {_scalar(value)}")
    return lines


# -- the optional checks ---------------------------------------------------------------------------


def _load(name: str) -> ModuleType | str:
    """The module, or why it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        return f"{type(error).__name__}: {error}"


def _optional(
    title: str, name: str, call: Callable[[ModuleType], object], out: IO[str]
) -> tuple[bool | None, dict[str, object] | None]:
    """Run an optional check; (passed or None if unavailable, its result)."""
    module = _load(name)
    if isinstance(module, str):
        print(f"{title}: unavailable in this build ({module})", file=out)
        return None, None
    try:
        raw = call(module)
    except Exception as error:  # a broken optional check fails the command, it does not crash it
        print(f"{title}: FAILED ({type(error).__name__}: {error})", file=out)
        return False, {"passed": False, "error": f"{type(error).__name__}: {error}"}
    if not isinstance(raw, Mapping):
        print(f"{title}: FAILED (run_checks returned {raw!r}, not a dict)", file=out)
        return False, {"passed": False, "error": "run_checks did not return a dict"}
    result = {str(key): value for key, value in raw.items()}
    passed = _passed(result)
    print(f"{title}: {_ok(passed)}", file=out)
    for line in _summarize(result):
        print(f"  {line}", file=out)
    return passed, result


# -- the command -----------------------------------------------------------------------------------


def run(args: argparse.Namespace, *, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Run every model check; 0 only if all passed and every row of every table was taken."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        from hypothesis import settings  # noqa: PLC0415 - the optional extra, imported on use

        from . import _planted, _stateful  # noqa: PLC0415 - they import Hypothesis
    except ImportError as error:
        print(
            f"model-check needs the 'modelcheck' extra ({error}): "
            "pip install 'diagnosis-harness[modelcheck]'",
            file=err,
        )
        return 2
    profile: str = args.profile
    started = time.perf_counter()
    progress = _Progress(err, enabled=profile == "deep")
    coverage = TransitionCoverage()
    checks: list[dict[str, Any]] = []
    failed: list[str] = []
    print(f"diagnosis-harness model-check (profile {profile})", file=out)

    # 1. The explorer.
    depth = args.depth or _DEPTH[profile]

    def tick(what: str, done: int, total: int | None) -> None:
        progress.update(f"explorer: {what}", done, total)

    try:
        exploration = explore(depth=depth, coverage=coverage, tick=tick)
    except Disagreement as error:
        progress.done()
        print(f"explorer (depth {depth}): FAILED\n  {error}", file=out)
        failed.append("explorer")
        checks.append(
            {"name": "explorer", "kind": "exhaustive", "passed": False, "error": str(error)}
        )
    else:
        progress.done()
        print(
            f"explorer (depth {depth}): {exploration.states:,} states, {exploration.edges:,} "
            f"edges, {exploration.sequences:,} sequences, {exploration.steps:,} steps "
            f"in {exploration.seconds:.1f} s: ok",
            file=out,
        )
        print(
            f"  run: {exploration.run.states:,} states, {exploration.run.edges:,} edges, "
            f"{exploration.run.sequences:,} sequences; retry: {exploration.retry.states:,} "
            f"states, {exploration.retry.edges:,} edges, {exploration.retry.sequences:,} "
            "sequences",
            file=out,
        )
        checks.append(
            {
                "name": "explorer",
                "kind": "exhaustive",
                "passed": True,
                **exploration.as_dict(),
            }
        )

    # 2. The stateful machines.
    _stateful.register_profiles()
    base = _stateful.settings_for(profile)
    chosen = settings(
        base,
        max_examples=args.max_examples or base.max_examples,
        stateful_step_count=args.steps or base.stateful_step_count,
    )
    print(
        f"stateful ({chosen.max_examples:,} examples x {chosen.stateful_step_count} steps "
        "per machine):",
        file=out,
    )
    for machine in _stateful.MACHINES:
        name = machine.__name__
        stats = _stateful.MachineStats(name)
        stats.on_example = lambda s: progress.update(s.name, s.examples, chosen.max_examples)
        try:
            _stateful.run_machine(machine, settings=chosen, coverage=coverage, stats=stats)
        except Exception as error:  # a failing example; Hypothesis printed its reproduction
            passed = False
            failed.append(name)
            detail = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        else:
            passed, detail = True, ""
        progress.done()
        print(
            f"  {name:<14} {stats.examples:>6,} examples {stats.steps:>8,} steps "
            f"{stats.seconds:6.1f} s  {stats.steps_per_second:>6,.0f} steps/s "
            f"(runtime {stats.runtime_steps_per_second:,.0f}/s, "
            f"model {stats.model_steps_per_second:,.0f}/s): {_ok(passed)}",
            file=out,
        )
        if detail:
            print(f"    {detail}", file=out)
            print(f"    shrunk to: {'; '.join(stats.last_steps)}", file=out)
        checks.append(
            {
                "kind": "stateful",
                "passed": passed,
                "scenarios": [list(pair) for pair in _stateful.scenarios_of(machine)],
                **stats.as_dict(),
                **({"error": detail} if detail else {}),
            }
        )

    # 3. The planted defects.
    catches = []
    for number, defect in enumerate(_planted.DEFECTS, start=1):
        progress.update("planted defects", number - 1, len(_planted.DEFECTS), force=True)
        catches.append(_planted.hunt(defect))
    progress.done()
    caught = [c for c in catches if c.caught]
    shrunk = ", ".join(str(len(c.steps)) for c in caught)
    print(
        f"planted defects caught: {len(caught)}/{len(catches)} (shrunk to {shrunk} steps)",
        file=out,
    )
    for catch in catches:
        if catch.caught:
            print(f"  {catch.defect}: {'; '.join(catch.steps)}", file=out)
        else:
            print(f"  {catch.defect}: NOT CAUGHT ({catch.error})", file=out)
    if len(caught) != len(catches):
        failed.append("planted defects")
    checks.append(
        {
            "name": "planted defects",
            "kind": "planted",
            "passed": len(caught) == len(catches),
            "defects": [c.as_dict() for c in catches],
        }
    )

    # 4. The scheduler and 5. Spin, when this build has them.
    passed_scheduler, scheduler = _optional(
        "scheduler", _SCHEDULER, lambda module: module.run_checks(profile), out
    )
    if passed_scheduler is False:
        failed.append("scheduler")
    if scheduler is not None:
        checks.append({"name": "scheduler", "kind": "scheduled", **scheduler})
    if args.spin:
        racers: int | None = args.racers
        passed_spin, spin = _optional(
            "spin", _SPIN, lambda module: module.run_checks(profile, racers), out
        )
        if passed_spin is not True:
            failed.append("spin")
        if spin is not None:
            checks.append({"name": "spin", "kind": "spin", **spin})
    else:
        print("spin: skipped (pass --spin)", file=out)

    # Coverage and scenarios.
    tables = ", ".join(f"{name} {a}/{b}" for name, (a, b) in coverage.per_table().items())
    print(f"transition coverage: {tables}", file=out)
    uncovered = coverage.uncovered()
    if uncovered:
        failed.append("coverage")
        rows = ", ".join(f"{table} row {index}" for table, index in uncovered)
        print(f"  never taken: {rows}", file=out)
    proved = {pair for check in checks if check.get("passed") for pair in _pairs(check)}
    scenarios = sorted(proved)
    print(f"spec scenarios model-checked: {len(scenarios)}", file=out)
    for requirement, scenario in scenarios:
        print(f"  {scenario}  ({requirement})", file=out)

    if args.coverage_out is not None:
        data = coverage.as_dict()
        data["profile"] = profile
        data["checks"] = checks
        path: Path = args.coverage_out
        path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"coverage written to {path}", file=out)

    seconds = time.perf_counter() - started
    if failed:
        print(f"model-check FAILED ({', '.join(failed)}) in {seconds:.1f} s", file=out)
        return 1
    print(f"model-check passed in {seconds:.1f} s", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m diagnosis_harness.modelcheck._cli``: the command on its own."""
    parser = argparse.ArgumentParser(
        prog="diagnosis-harness model-check",
        description="Run every model check of the lifecycle, budget and retry tables.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
