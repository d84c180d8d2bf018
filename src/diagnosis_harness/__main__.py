"""``diagnosis-harness`` (or ``python -m diagnosis_harness``): the project's command line.

``report`` and ``model-check`` need the ``report`` / ``modelcheck`` extras (pytest, Hypothesis,
python-statemachine). Each command's module (the one with its ``add_arguments`` and ``run``) is
imported only when that command is named, and imports nothing of its extra: ``COMMAND --help``
works on a bare install, and without the extra the command says which one to install and exits
with status 2. So ``demo`` needs nothing extra.

Every parser of the command line is a :class:`_Parser`: an argument it does not know is an error
of *that* parser, so ``diagnosis-harness report --bogus`` prints the ``report`` usage naming
``--bogus`` (argparse's own subparsers hand unknown arguments up to the top-level parser, whose
usage says nothing of ``report``'s options). Usage errors exit 2, argparse's convention.

A reader that closes the pipe early (``diagnosis-harness demo | head -1``) ends the command
quietly with :data:`CLOSED_PIPE_STATUS`, as a program killed by SIGPIPE would, instead of a
``BrokenPipeError`` traceback. The signal's default action is not restored for that: it would
also kill the process on a write to a closed *socket*, which the report's suite makes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, Final

from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["CLOSED_PIPE_STATUS", "main"]

CLOSED_PIPE_STATUS: Final = 141
"""The status when stdout's reader went away: 128 + SIGPIPE (13), as a shell shows it."""

# command -> (module with add_arguments(parser) and run(args) -> int, help)
_COMMANDS = {
    "report": (
        "diagnosis_harness.conformance._cli",
        "run the conformance suite and write reports/conformance.{json,md,html}",
    ),
    "model-check": (
        "diagnosis_harness._model_check_command",
        "run the model checks: tables explored, Hypothesis against the model, schedules, Spin",
    ),
    "demo": ("diagnosis_harness._demo", "narrate a run that hits its deadline"),
}


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that refuses, in its own usage, arguments it does not know."""

    def parse_known_args(  # type: ignore[override] # argparse's overloads; this one is all we use
        self,
        args: Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _dispatch(argv)
        finally:  # also after --help or --version, which exit through SystemExit
            sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    except BrokenPipeError:
        _silence_stdout()
        return CLOSED_PIPE_STATUS


def _dispatch(argv: list[str] | None) -> int:
    """Parse ``argv`` (default: the process's) and run the command it names; its status."""
    parser = _Parser(
        prog="diagnosis-harness",
        description="Explicit RunContext for LLM diagnosis runs, with generated state machines.",
        epilog="Run 'diagnosis-harness COMMAND --help' for a command's options and exit statuses.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    # Not required=True: argparse checks required arguments before unknown ones, so
    # `diagnosis-harness --bogus` would say "COMMAND is required" without naming --bogus.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    words = sys.argv[1:] if argv is None else argv
    chosen = next((word for word in words if word in _COMMANDS), None)
    for name, (module_name, help_text) in _COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen command's module is imported
            importlib.import_module(module_name).add_arguments(sub)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error(f"a command is required: {', '.join(_COMMANDS)}")
    module = importlib.import_module(_COMMANDS[args.command][0])
    result: int = module.run(args)
    return result


def _silence_stdout() -> None:
    """Point stdout's file descriptor at the null device, so the interpreter's last flush of
    what is still buffered does not fail again (and print "Exception ignored ...")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
