"""``diagnosis-harness`` (or ``python -m diagnosis_harness``): the project's command line.

``report`` and ``model-check`` need the ``report`` / ``modelcheck`` extras (pytest, Hypothesis);
their modules are imported only when their command runs, so ``demo`` needs nothing extra.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module with add_arguments(parser) and run(args) -> int, help)
_COMMANDS = {
    "report": (
        "diagnosis_harness.conformance._cli",
        "run the conformance suite and write reports/conformance.{json,md,html}",
    ),
    "model-check": (
        "diagnosis_harness.modelcheck._cli",
        "run the model checks: tables explored, Hypothesis against the model, schedules, Spin",
    ),
    "demo": ("diagnosis_harness._demo", "narrate a run that hits its deadline"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="diagnosis-harness",
        description="Explicit RunContext for LLM diagnosis runs, with generated state machines.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    words = sys.argv[1:] if argv is None else argv
    chosen = next((word for word in words if word in _COMMANDS), None)
    for name, (module_name, help_text) in _COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen command's module is imported
            importlib.import_module(module_name).add_arguments(sub)
    args = parser.parse_args(argv)
    module = importlib.import_module(_COMMANDS[args.command][0])
    result: int = module.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
