"""The Core imports only the standard library and python-statemachine (an import-linter check).

A fresh interpreter imports ``diagnosis_harness`` and every Core module and reports what the
import added to ``sys.modules``; whatever the interpreter had loaded before (``site`` and the
``.pth`` hooks of the environment) is not the library's doing and is left out.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
import textwrap

import pytest

import diagnosis_harness

INDEPENDENT = "Harness Core SHALL remain independent from current runtime and persistence"
ALLOWED_TOP_LEVEL = {"statemachine", "diagnosis_harness"}
FORBIDDEN = ("httpx", "requests", "openai", "anthropic", "redis", "sqlite3", "sqlalchemy", "yaml")
NOT_CORE = ("codegen", "conformance", "integrations", "modelcheck", "__main__")  # tooling
KNOWN_CORE = (
    "_boundary",
    "_budget",
    "_cancellation",
    "_capacity",
    "_clock",
    "_context",
    "_errors",
    "_failure",
    "_keys",
    "_lifecycle",
    "_machine",
    "_retry_policy",
    "_scope",
    "_validate",
    "testing",
    "_generated.tables",
    "_generated.models",
)


def core_modules() -> list[str]:
    """Every module of the package except the code generator and integrations, found on disk."""
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


def test_core_modules_are_found() -> None:
    names = core_modules()
    for known in KNOWN_CORE:
        assert f"diagnosis_harness.{known}" in names
    assert not any(".codegen" in name or ".integrations" in name for name in names)


@pytest.mark.spec(INDEPENDENT, "Stage 2 implementation completes")
def test_stage_2_implementation_completes() -> None:
    report = _imported_by_the_core()
    stdlib = set(report["stdlib"])
    imported = set(report["all"])
    top_level = {name.split(".")[0] for name in imported}

    # Nothing outside the standard library and python-statemachine...
    assert top_level - stdlib - ALLOWED_TOP_LEVEL == set()
    # ...in particular no HTTP client, Redis, database driver or YAML parser...
    for forbidden in FORBIDDEN:
        assert forbidden not in top_level, forbidden
    # ...and no integrations module, nor the code generator (it alone may need tomli).
    assert not any(name.startswith("diagnosis_harness.integrations") for name in imported)
    assert "tomli" not in top_level
    root_imports = set(report["root"])
    assert "diagnosis_harness.codegen" not in root_imports
    assert not any(name.startswith("diagnosis_harness.codegen") for name in imported)
    # Integrations depend on the public types directly: every exported name resolves.
    exported = diagnosis_harness.__all__
    assert exported == sorted(exported)
    for name in exported:
        assert getattr(diagnosis_harness, name) is not None, name


def test_the_probe_would_see_a_forbidden_import() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "json", "http.client", "statemachine"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    imported = set(json.loads(result.stdout)["all"])
    assert {"http.client", "statemachine"} <= imported
