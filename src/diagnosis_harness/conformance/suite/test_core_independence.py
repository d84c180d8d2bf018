"""Requirement: Harness Core SHALL remain independent from current runtime and persistence.

A fresh interpreter imports ``diagnosis_harness`` and every Core module and reports what the
import added to ``sys.modules``; whatever the interpreter had loaded before (``site`` and the
``.pth`` hooks of the environment) is not the library's doing and is left out.

Not Core, and never imported by it: the code generator, the integrations, the command line, and
the tooling that checks the Core from outside -- :mod:`diagnosis_harness.modelcheck` (Hypothesis)
and :mod:`diagnosis_harness.conformance` (this suite and its pytest plugin).
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
import textwrap

import pytest

import diagnosis_harness

from ._support import INDEPENDENCE

ALLOWED_TOP_LEVEL = {"statemachine", "diagnosis_harness"}
FORBIDDEN = (
    "httpx",
    "requests",
    "openai",
    "anthropic",
    "redis",
    "sqlite3",
    "sqlalchemy",
    "yaml",
    "pytest",
    "hypothesis",
)
NOT_CORE = ("codegen", "integrations", "__main__", "modelcheck", "conformance", "redis")


def core_modules() -> list[str]:
    """Every module of the package except those in ``NOT_CORE``, found on disk."""
    found: list[str] = []
    packages = [(diagnosis_harness.__path__, "diagnosis_harness.")]
    while packages:
        path, prefix = packages.pop()
        for info in pkgutil.iter_modules(path, prefix):
            if info.name.removeprefix("diagnosis_harness.").split(".")[0] in NOT_CORE:
                continue
            found.append(info.name)
            if info.ispkg:
                module_path = [f"{p}/{info.name.rpartition('.')[2]}" for p in path]
                packages.append((module_path, f"{info.name}."))
    return sorted(found)


PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    before = set(sys.modules)
    import diagnosis_harness
    after_root = set(sys.modules)
    for name in sys.argv[1:]:
        importlib.import_module(name)
    print(json.dumps({
        "root": sorted(after_root - before),
        "all": sorted(set(sys.modules) - before),
        "stdlib": sorted(sys.stdlib_module_names),
    }))
    """
)


def _imported_by_the_core() -> dict[str, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *core_modules()],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report: dict[str, list[str]] = json.loads(result.stdout)
    return report


@pytest.mark.spec(INDEPENDENCE, "Stage 2 implementation completes")
def test_stage_2_implementation_completes() -> None:
    modules = core_modules()
    for known in ("_context", "_budget", "_lifecycle", "_retry", "testing", "_generated.tables"):
        assert f"diagnosis_harness.{known}" in modules  # the probe below does import the Core
    report = _imported_by_the_core()
    stdlib = set(report["stdlib"])
    imported = set(report["all"])
    top_level = {name.split(".")[0] for name in imported}

    # Nothing outside the standard library and python-statemachine...
    assert top_level - stdlib - ALLOWED_TOP_LEVEL == set()
    # ...in particular no HTTP client, Redis, database driver, YAML parser or test tool...
    for forbidden in FORBIDDEN:
        assert forbidden not in top_level, forbidden
    # ...and none of the packages outside the Core, nor the code generator (it may need tomli).
    for outside in NOT_CORE:
        prefix = f"diagnosis_harness.{outside}"
        assert not any(name == prefix or name.startswith(f"{prefix}.") for name in imported)
    assert "tomli" not in top_level
    # Integrations depend on the public types directly: every exported name resolves.
    exported = diagnosis_harness.__all__
    assert exported == sorted(exported)
    for name in exported:
        assert getattr(diagnosis_harness, name) is not None, name
