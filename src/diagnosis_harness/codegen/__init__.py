"""The code generator: ``model/*.toml`` -> ``_generated/`` and ``docs/machines/``.

Run ``python -m diagnosis_harness.codegen`` from the repository root to regenerate, and
``python -m diagnosis_harness.codegen --check`` to fail (exit 1, naming each stale file) when the
checked-in output differs from what the tables produce. CI runs the check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._emit import render_all
from ._load import MachineSpec, TableError, load_machine, requirement_names

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "MachineSpec",
    "TableError",
    "generate",
    "load_all",
    "load_machine",
    "requirement_names",
    "stale_files",
]


def load_all(root: Path) -> list[MachineSpec]:
    """Load and validate every table under ``root/model``, citing ``root/specs/*/spec.md``."""
    model_dir = root / "model"
    paths = sorted(model_dir.glob("*.toml"))
    if not paths:
        raise TableError(
            model_dir, "directory", "no *.toml tables found", "run from the repository root"
        )
    specs = sorted((root / "specs").glob("*/spec.md"))
    if not specs:
        raise TableError(
            root / "specs",
            "directory",
            "no specs/*/spec.md found to check requirement references",
            "run from the repository root",
        )
    requirements: set[str] = set()
    for spec in specs:
        requirements |= requirement_names(spec.read_text(encoding="utf-8"))
    return [load_machine(path, requirements=requirements) for path in paths]


def generate(root: Path) -> dict[str, str]:
    """Every generated file's expected content, keyed by path relative to ``root``."""
    return render_all(load_all(root))


def stale_files(root: Path) -> list[str]:
    """The generated files whose checked-in content differs from the tables' output."""
    stale = []
    for relative, content in generate(root).items():
        path = root / relative
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            stale.append(relative)
    return stale
