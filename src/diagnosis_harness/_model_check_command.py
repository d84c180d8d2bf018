"""``diagnosis-harness model-check``'s command line: its options, exit statuses and the checks
made before any model check runs.

Theory of operation. The model checks live in :mod:`diagnosis_harness.modelcheck`, whose
package imports python-statemachine (and its checks Hypothesis and rich): the ``modelcheck``
extra. This module imports none of it, so that on a bare ``pip install diagnosis-harness``
``diagnosis-harness model-check --help`` still shows the options and exit statuses, and the
command itself says which extra to install (status 2) instead of failing on an import.

:func:`run` checks, in order, before any check runs, and stops at the first problem with status
2 and a message naming it: the extra's modules can be found; ``--coverage-out`` names a file the
command can write (its directory exists, it is not a directory, a file can be opened there --
a file the probe made is removed again). Only then is :mod:`diagnosis_harness.modelcheck._cli`
imported and run.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Final

from ._exit_statuses import exit_status_lines

__all__ = [
    "EXIT_STATUSES",
    "EXTRA_MODULES",
    "add_arguments",
    "check_coverage_out",
    "missing_modules",
    "run",
]

_PROG: Final = "diagnosis-harness model-check"
_INSTALL: Final = "pip install 'diagnosis-harness[modelcheck]'"

EXTRA_MODULES: Final = ("statemachine", "hypothesis", "rich")
"""The top-level modules the ``modelcheck`` extra brings (python-statemachine, Hypothesis, rich)."""

EXIT_STATUSES: Final = {
    0: "every check passed and every row of every table was taken",
    1: "a check failed, a row of a table was never taken, or --spin was asked for and Spin is"
    " unavailable",
    2: "a usage or environment error: a bad option, a --coverage-out that cannot be written,"
    " the modelcheck extra missing (no check ran)",
    141: "stdout's reader closed the pipe early (as a program killed by SIGPIPE)",
}
"""The command's exit statuses and what each means (``--help`` shows them)."""


def _epilog() -> str:
    lines = exit_status_lines(EXIT_STATUSES)
    lines += [
        "",
        f"Needs the modelcheck extra: {_INSTALL}",
        "The options are checked before any check runs: a bad one stops the command at once",
        "with status 2.",
    ]
    return "\n".join(lines)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``model-check`` options (and the exit statuses, as the epilog) to ``parser``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _epilog()
    parser.add_argument(
        "--profile",
        choices=("ci", "dev", "deep"),
        default="ci",
        help="ci: derandomized, 100 examples x 30 steps, depth 4 (default); dev: the same with "
        "random seeds; deep: 5,000 examples x 150 steps, depth 5",
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
        "--json",
        action="store_true",
        help="print the result as JSON (every check, its scenarios and counterexamples)",
    )
    parser.add_argument(
        "--coverage-out",
        type=Path,
        metavar="PATH",
        help="write the transition coverage (every row, with its count) and the checks as JSON"
        " (PATH's directory must exist; checked before any check runs)",
    )
    parser.add_argument(
        "--depth", type=_positive, help="explorer sequence depth (default: 4, or 5 with deep)"
    )
    parser.add_argument(
        "--max-examples", type=_positive, help="Hypothesis examples per machine (profile's)"
    )
    parser.add_argument("--steps", type=_positive, help="Hypothesis steps per example (profile's)")


def missing_modules() -> list[str]:
    """The modules of the ``modelcheck`` extra that cannot be found, in :data:`EXTRA_MODULES`'s
    order (empty when the extra is installed)."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


def check_coverage_out(path: Path) -> str | None:
    """``None`` when ``path`` can be written, else why not, naming ``--coverage-out``.

    A file is opened for appending (an existing one is not changed); one the probe created is
    removed, so a refused or failed run leaves nothing behind.
    """
    if path.is_dir():
        return f"--coverage-out: cannot write {path}: a directory (PATH names the JSON file)"
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        if not path.parent.exists():
            reason = f"{reason}: the directory {path.parent} does not exist"
        elif not path.parent.is_dir():
            reason = f"{reason}: {path.parent} is not a directory"
        return f"--coverage-out: cannot write {path}: {reason}"
    if not existed:
        path.unlink()
    return None


def run(args: argparse.Namespace) -> int:
    """Check the extra and ``--coverage-out``, then run every model check; the exit status
    (:data:`EXIT_STATUSES`)."""
    missing = missing_modules()
    if missing:
        print(
            f"{_PROG} needs the modelcheck extra (python-statemachine, Hypothesis, rich;"
            f" not installed: {', '.join(missing)}): {_INSTALL}",
            file=sys.stderr,
        )
        return 2
    if args.coverage_out is not None:
        problem = check_coverage_out(args.coverage_out)
        if problem is not None:
            print(f"{_PROG}: {problem}", file=sys.stderr)
            return 2
    from .modelcheck import _cli  # noqa: PLC0415 - the extra, checked above

    return _cli.run(args)
