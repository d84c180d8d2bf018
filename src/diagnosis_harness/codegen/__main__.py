"""``python -m diagnosis_harness.codegen [--check] [--root DIR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import generate, stale_files
from ._load import TableError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m diagnosis_harness.codegen",
        description="Generate the state machines and their docs from the tables in model/.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming each generated file that is stale",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path.cwd(),
        help="the repository root holding model/ and specs/ (default: the current directory)",
    )
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        if args.check:
            stale = stale_files(root)
            for relative in stale:
                print(
                    f"stale: {relative} (run python -m diagnosis_harness.codegen)", file=sys.stderr
                )
            if stale:
                return 1
            print("generated files are up to date with model/")
            return 0
        for relative, content in generate(root).items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text(encoding="utf-8") != content:
                path.write_text(content, encoding="utf-8")
                print(f"wrote {relative}")
        return 0
    except TableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
