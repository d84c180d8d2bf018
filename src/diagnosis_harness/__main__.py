"""``diagnosis-harness`` (or ``python -m diagnosis_harness``): the project's command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="diagnosis-harness",
        description="Explicit RunContext for LLM diagnosis runs, with generated state machines.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("demo", help="narrate a run that hits its deadline")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo()
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
