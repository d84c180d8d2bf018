"""``diagnosis-harness report``: run the conformance suite and write the conformance report.

Runs the bundled suite (:mod:`diagnosis_harness.conformance.suite`) in-process under pytest with
the conformance plugin, against the shipped spec (or ``--spec PATH``), writes
``conformance.json``, ``conformance.md`` and ``conformance.html`` into ``--out`` (``reports/``)
and prints a one-screen summary. The exit status is 0 only when every scenario has a passing
test, no spec mark is unknown and the spec is valid; 1 when the report says otherwise; pytest's
own status when the run could not be made (2 interrupted, 3 internal error, 4 usage error).

The suite runs with ``-c suite.ini`` and ``--rootdir`` at the package's parent, so no
configuration file of the current directory (or of a project the wheel is installed into)
applies; the pytest cache is off; ``HYPOTHESIS_PROFILE`` is ``ci`` unless set. Spec marks that
name no scenario of the spec (``--spec`` pointing at another spec, say) are listed in the report
(``--spec-unknown=report``) rather than stopping the run, so the report shows what is uncovered.

``add_arguments`` / ``run`` are what ``diagnosis_harness.__main__`` wires as the ``report``
subcommand; :func:`main` is the same as a program of its own (``python -m
diagnosis_harness.conformance``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ._bundle import locate_spec, suite_dir
from ._summary import console_summary

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest

    from ._plugin import ConformanceState
    from ._report import ConformanceReport

__all__ = ["DEFAULT_OUT", "add_arguments", "main", "pytest_args", "run"]

DEFAULT_OUT: Final = "reports"
_PLUGIN_MODULE: Final = "diagnosis_harness.conformance._plugin"
_ENTRY_POINT: Final = "diagnosis_harness"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` options to ``parser``."""
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"directory for conformance.json, .md and .html (default: {DEFAULT_OUT}/)",
    )
    parser.add_argument(
        "--spec",
        default=None,
        metavar="PATH",
        help="the spec to check against (default: the spec shipped with diagnosis-harness)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show every test as pytest runs it (default: one dot per test)",
    )


def _plugin_arg() -> str:
    """``-p`` value loading the plugin once: its entry point's name when it is installed.

    Passing the module name while the entry point also loads it would register one module
    under two names, which pytest refuses.
    """
    for entry in importlib.metadata.entry_points(group="pytest11", name=_ENTRY_POINT):
        if entry.value == _PLUGIN_MODULE:
            return _ENTRY_POINT
    return _PLUGIN_MODULE


def pytest_args(spec: Path, out: Path, *, verbose: bool = False) -> list[str]:
    """The pytest command line ``run`` uses (for ``pytest.main``)."""
    suite = suite_dir()
    return [
        str(suite),
        "-c",
        str(suite / "suite.ini"),
        "--rootdir",
        str(suite.parents[2]),  # nodeids read diagnosis_harness/conformance/suite/...
        "-p",
        _plugin_arg(),
        "-p",
        "no:cacheprovider",
        "-v" if verbose else "-q",
        "--tb=short",
        "--spec",
        str(spec),
        "--spec-report",
        str(out),
        "--spec-unknown=report",
    ]


class _Capture:
    """A pytest plugin that keeps the conformance state of the run it is passed to."""

    def __init__(self) -> None:
        self.state: ConformanceState | None = None

    @staticmethod
    def _key() -> pytest.StashKey[ConformanceState]:
        from ._plugin import STATE_KEY  # noqa: PLC0415 - imports pytest, which run() checked

        return STATE_KEY

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        state = session.config.stash.get(self._key(), None)
        if state is not None:
            state.terminal_summary = False  # run() prints the summary

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # After the plugin's sessionfinish: the report is built and written by now.
        self.state = config.stash.get(self._key(), None)


def run(args: argparse.Namespace) -> int:
    """Run the suite as ``args`` say (see :func:`add_arguments`); the exit status."""
    if importlib.util.find_spec("pytest") is None:
        print(
            "diagnosis-harness report runs the conformance suite under pytest, which is not "
            "installed: pip install 'diagnosis-harness[report]'",
            file=sys.stderr,
        )
        return 2
    import pytest  # noqa: PLC0415 - the `report` extra; the Core never needs it

    origin: str
    if args.spec is None:
        try:
            located = locate_spec()
        except FileNotFoundError as error:
            print(f"diagnosis-harness report: {error}; pass --spec PATH", file=sys.stderr)
            return 2
        spec, origin = located.path, located.origin
    else:
        spec, origin = Path(args.spec).resolve(), "given"
        if not spec.is_file():
            print(f"diagnosis-harness report: no such spec file: {spec}", file=sys.stderr)
            return 2
    target = Path(args.out).resolve()
    capture = _Capture()
    saved = os.environ.get("HYPOTHESIS_PROFILE")
    if not saved:
        os.environ["HYPOTHESIS_PROFILE"] = "ci"
    try:
        status = int(
            pytest.main(pytest_args(spec, target, verbose=args.verbose), plugins=[capture])
        )
    finally:
        if not saved:
            os.environ.pop("HYPOTHESIS_PROFILE", None)
    sys.stdout.flush()
    state = capture.state
    reports = [] if state is None else state.reports
    if not reports:
        print(f"\nno conformance report: pytest exited with status {status}", file=sys.stderr)
        return status or 1
    report = reports[0]
    written = state.written[0] if state is not None and state.written else {}
    print()
    for line in summary_screen(report, origin=origin, written=written):
        print(line)
    if report.all_passed and status == 0:
        return 0
    return status if status not in (0, 1) else 1


def summary_screen(
    report: ConformanceReport,
    *,
    origin: str,
    written: dict[str, Path],
) -> list[str]:
    """The one-screen summary ``run`` prints (:func:`._summary.console_summary`)."""
    return console_summary(report, origin=origin, written=written, shown=_shown)


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    """``diagnosis-harness report`` as a program of its own."""
    parser = argparse.ArgumentParser(
        prog="diagnosis-harness report",
        description="Run the conformance suite and write reports/conformance.{json,md,html}.",
    )
    add_arguments(parser)
    return run(parser.parse_args(None if argv is None else list(argv)))
