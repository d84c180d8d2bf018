"""``diagnosis-harness`` (or ``python -m diagnosis_harness``): the project's command line."""

from __future__ import annotations

import argparse
import sys

from ._demo import run_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="diagnosis-harness",
        description="Explicit RunContext for LLM diagnosis runs, with generated state machines.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("demo", help="narrate a run that hits its deadline")
    args = parser.parse_args(argv)
    assert args.command == "demo"  # argparse refuses any other
    return run_demo()


if __name__ == "__main__":
    sys.exit(main())
