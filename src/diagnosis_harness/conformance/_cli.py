"""``diagnosis-harness report``: run the conformance suite and write the conformance report.

Runs the bundled suite (:mod:`diagnosis_harness.conformance.suite`) in-process under pytest with
the conformance plugin, against the shipped spec (or ``--spec PATH``), writes
``conformance.json``, ``conformance.md`` and ``conformance.html`` into ``--out`` (``reports/``)
and prints a one-screen summary.

Theory of operation. The arguments are checked before the suite runs, and a bad one stops the
command at once with status 2 and a message naming it (:class:`UsageProblem`): the spec must
exist and be valid (every error and warning of it is listed; a directory in OpenSpec's layout,
``specs/<capability>/spec.md``, names its one spec), and ``--out`` must be a directory the
command can write (it is created, and a file is created and removed in it, before the suite
starts). Only then does pytest run. The exit status (:data:`EXIT_STATUSES`) is 0 when every
scenario has a passing test, 1 when the report says otherwise, 2 when the run could not be made
or finished (a usage, spec or environment error, pytest interrupted or failing internally).

Nothing is written outside ``--out``: the suite runs with ``-c suite.ini`` and ``--rootdir`` at
the package's parent, so no configuration file of the current directory (or of a project the
wheel is installed into) applies; the pytest cache is off; the suite's ``tmp_path`` directories
(``--basetemp``) and Hypothesis's directory (``.hypothesis/``: example database, constants
cache; unless ``HYPOTHESIS_STORAGE_DIRECTORY`` is set) are in one temporary directory, removed
after the run; ``HYPOTHESIS_PROFILE`` is ``ci`` unless set. Spec marks that name no scenario of
the spec (``--spec`` pointing at another spec, say) are listed in the report
(``--spec-unknown=report``) rather than stopping the run, so the report shows what is
uncovered.

``add_arguments`` / ``run`` are what ``diagnosis_harness.__main__`` wires as the ``report``
subcommand; :func:`main` is the same as a program of its own (``python -m
diagnosis_harness.conformance``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from .._exit_statuses import exit_status_lines
from . import REPORT_FILES
from ._bundle import locate_spec, suite_dir
from ._spec import load_spec
from ._summary import console_summary

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pytest

    from ._plugin import ConformanceState
    from ._report import ConformanceReport
    from ._spec import ParsedSpec

__all__ = [
    "DEFAULT_OUT",
    "EXIT_STATUSES",
    "UsageProblem",
    "add_arguments",
    "check_out",
    "check_spec",
    "main",
    "pytest_args",
    "run",
]

DEFAULT_OUT: Final = "reports"
_PLUGIN_MODULE: Final = "diagnosis_harness.conformance._plugin"
_ENTRY_POINT: Final = "diagnosis_harness"
_PROG: Final = "diagnosis-harness report"

EXIT_STATUSES: Final = {
    0: "every scenario has a passing test and no spec mark is unknown",
    1: "a scenario failed, was skipped or is uncovered, or a spec mark names no scenario",
    2: "a usage, spec or environment error: a bad option, a missing or invalid spec, an --out"
    " that cannot be written, the report extra missing, pytest interrupted or failing"
    " internally (the suite did not run, or did not finish)",
    141: "stdout's reader closed the pipe early (as a program killed by SIGPIPE)",
}
"""The command's exit statuses and what each means (``--help`` shows them)."""


def _epilog() -> str:
    lines = exit_status_lines(EXIT_STATUSES)
    lines += [
        "",
        "The options are checked before the suite runs: a bad one stops the command at once",
        "with status 2. Nothing is written outside --out.",
    ]
    return "\n".join(lines)


@final
class UsageProblem(Exception):
    """An argument the command cannot run with; its message names the argument and the fix."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` options (and the exit statuses, as the epilog) to ``parser``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _epilog()
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"directory for conformance.json, .md and .html (default: {DEFAULT_OUT}/; created"
        " if missing, the three files replaced)",
    )
    parser.add_argument(
        "--spec",
        default=None,
        metavar="PATH",
        help="the spec to check against: a spec.md, or a directory holding one spec in"
        " OpenSpec's layout (specs/<capability>/spec.md); default: the spec shipped with"
        " diagnosis-harness",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show every test as pytest runs it (default: one dot per test)",
    )


def check_spec(given: str | None) -> tuple[ParsedSpec, Path, str]:
    """The spec ``--spec`` names (``None``: the shipped one), read and valid; its path and
    origin (``"shipped"``, ``"checkout"`` or ``"given"``).

    A directory is read in OpenSpec's layout: ``DIR/spec.md``, else ``DIR/<capability>/spec.md``,
    else ``DIR/specs/<capability>/spec.md`` or ``DIR/openspec/specs/<capability>/spec.md``; it
    must hold exactly one spec. Raises :class:`UsageProblem` for a missing, unreadable or invalid
    spec, listing every error (and warning: the check is OpenSpec's ``--strict``).
    """
    origin: str
    if given is None:
        try:
            located = locate_spec()
        except FileNotFoundError as error:
            raise UsageProblem(f"{error}; pass --spec PATH") from None
        path, origin = located.path, located.origin
    else:
        path, origin = _spec_file(Path(given).resolve()), "given"
    try:
        parsed = load_spec(path)
    except (OSError, UnicodeDecodeError) as error:
        raise UsageProblem(f"--spec: cannot read {_shown(path)}: {error}") from None
    if not parsed.valid:
        blocking = [p for p in parsed.problems if p.level in ("ERROR", "WARNING")]
        lines = [
            f"--spec: {_shown(path)} is not a valid spec ({len(parsed.errors)} error(s),"
            f" {len(parsed.warnings)} warning(s); warnings count, as openspec validate --strict):"
        ]
        shown: set[str] = set()  # OpenSpec repeats its example under each missing section
        for problem in blocking:
            where = f"{_shown(path)}:{problem.line}" if problem.line else _shown(path)
            first, _, rest = problem.message.partition("\n")
            lines.append(f"  {where}: {problem.level} ({problem.path}): {first}")
            if rest and rest not in shown:
                shown.add(rest)
                lines.extend(f"      {line}" for line in rest.splitlines())
        raise UsageProblem("\n".join(lines))
    return parsed, path, origin


def _spec_file(path: Path) -> Path:
    """The spec file ``path`` names: itself, or the one spec of a directory (see check_spec)."""
    if not path.exists():
        raise UsageProblem(f"--spec: no such spec file or directory: {_shown(path)}")
    if not path.is_dir():
        return path
    if (path / "spec.md").is_file():
        return path / "spec.md"
    for pattern in ("*/spec.md", "specs/*/spec.md", "openspec/specs/*/spec.md"):
        found = sorted(p for p in path.glob(pattern) if p.is_file())
        if len(found) == 1:
            return found[0]
        if found:
            names = ", ".join(_shown(p) for p in found)
            raise UsageProblem(
                f"--spec: {_shown(path)} holds {len(found)} specs ({names}); the report checks"
                " one: pass --spec with one of them"
            )
    raise UsageProblem(
        f"--spec: no spec in the directory {_shown(path)}: expected OpenSpec's layout,"
        " specs/<capability>/spec.md (or a spec.md file)"
    )


def check_out(given: str) -> Path:
    """The ``--out`` directory, created if missing and shown writable by making and removing a
    file in it. Raises :class:`UsageProblem` when it is a file, or cannot be made or written."""
    target = Path(given).resolve()
    if target.exists() and not target.is_dir():
        raise UsageProblem(
            f"--out: {_shown(target)} is a file, not a directory; --out names the directory that"
            f" receives {', '.join(REPORT_FILES.values())}"
        )
    for name in REPORT_FILES.values():
        if (target / name).is_dir():
            raise UsageProblem(
                f"--out: {_shown(target / name)} is a directory; the report would replace it"
            )
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=target):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        raise UsageProblem(f"--out: cannot write to {_shown(target)}: {reason}") from None
    return target


@contextlib.contextmanager
def _run_environment() -> Iterator[Path]:
    """A scratch directory, removed on exit, for pytest's ``tmp_path`` directories (passed as
    ``--basetemp``) and Hypothesis's files; ``HYPOTHESIS_PROFILE=ci`` unless set.

    Hypothesis reads ``HYPOTHESIS_STORAGE_DIRECTORY`` (unless set) the first time it stores
    anything in the process; the command's own process (``diagnosis-harness report``) has not
    by then.
    """
    with tempfile.TemporaryDirectory(prefix="diagnosis-harness-report-") as scratch:
        defaults = {
            "HYPOTHESIS_PROFILE": "ci",
            "HYPOTHESIS_STORAGE_DIRECTORY": str(Path(scratch) / "hypothesis"),
        }
        unset = [name for name in defaults if not os.environ.get(name)]
        for name in unset:
            os.environ[name] = defaults[name]
        try:
            yield Path(scratch)
        finally:
            for name in unset:
                os.environ.pop(name, None)


def _plugin_arg() -> str:
    """``-p`` value loading the plugin once: its entry point's name when it is installed.

    Passing the module name while the entry point also loads it would register one module
    under two names, which pytest refuses.
    """
    for entry in importlib.metadata.entry_points(group="pytest11", name=_ENTRY_POINT):
        if entry.value == _PLUGIN_MODULE:
            return _ENTRY_POINT
    return _PLUGIN_MODULE


def pytest_args(
    spec: Path, out: Path, *, verbose: bool = False, basetemp: Path | None = None
) -> list[str]:
    """The pytest command line ``run`` uses (for ``pytest.main``); ``basetemp`` is where the
    suite's ``tmp_path`` directories go (default: pytest's, in the system's temporary
    directory, kept for three runs)."""
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
        *([] if basetemp is None else ["--basetemp", str(basetemp)]),
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
    """Run the suite as ``args`` say (see :func:`add_arguments`); the exit status
    (:data:`EXIT_STATUSES`)."""
    if importlib.util.find_spec("pytest") is None:
        print(
            f"{_PROG} runs the conformance suite under pytest, which is not "
            "installed: pip install 'diagnosis-harness[report]'",
            file=sys.stderr,
        )
        return 2
    import pytest  # noqa: PLC0415 - the `report` extra; the Core never needs it

    try:
        _, spec, origin = check_spec(args.spec)
        target = check_out(args.out)
    except UsageProblem as problem:
        print(f"{_PROG}: {problem}", file=sys.stderr)
        return 2
    capture = _Capture()
    with _run_environment() as scratch:
        command = pytest_args(spec, target, verbose=args.verbose, basetemp=scratch / "pytest")
        status = int(pytest.main(command, plugins=[capture]))
    sys.stdout.flush()
    state = capture.state
    reports = [] if state is None else state.reports
    if not reports:
        print(
            f"\n{_PROG}: no conformance report: pytest exited with status {status}", file=sys.stderr
        )
        return 2
    report = reports[0]
    written = state.written[0] if state is not None and state.written else {}
    print()
    for line in summary_screen(report, origin=origin, written=written):
        print(line)
    if status not in (0, 1):  # interrupted, an internal error: the report may be partial
        print(
            f"{_PROG}: pytest exited with status {status}: the run did not finish", file=sys.stderr
        )
        return 2
    return 0 if report.all_passed and status == 0 else 1


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
    """``diagnosis-harness report`` as a program of its own: the same parser, statuses and
    closed-pipe handling as the subcommand."""
    from ..__main__ import main as command_line  # noqa: PLC0415 - it imports this module

    return command_line(["report", *(sys.argv[1:] if argv is None else argv)])
