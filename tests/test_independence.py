"""What the Core imports (an import-linter check): the standard library, and for the generated
models python-statemachine; ``import diagnosis_harness`` itself, the standard library only.

A fresh interpreter imports ``diagnosis_harness`` and every Core module and reports what the
import added to ``sys.modules``; whatever the interpreter had loaded before (``site`` and the
``.pth`` hooks of the environment) is not the library's doing and is left out.

These tests check the probe itself, what ``import diagnosis_harness`` alone loads, and that it
loads none of the standard library a sync user needs only later (asyncio, logging...); the
scenario (Stage 2 implementation completes) is shown in
``src/diagnosis_harness/conformance/suite/test_core_independence.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

import diagnosis_harness
from diagnosis_harness.conformance.suite.test_core_independence import PROBE, core_modules

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
    "pricing",
    "testing",
    "_generated.tables",
    "_generated.models",
)


def test_core_modules_are_found() -> None:
    names = core_modules()
    for known in KNOWN_CORE:
        assert f"diagnosis_harness.{known}" in names
    assert not any(".codegen" in name or ".integrations" in name for name in names)
    assert not any(name.startswith("diagnosis_harness.redis") for name in names)  # an extra


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


# What a user pays for at `import diagnosis_harness` only if something pulls it in by mistake:
# importlib.metadata (with email and zipfile, most of the import's time when the version was read
# through it), the models' python-statemachine (an extra now), and the test tools.
NOT_ON_IMPORT = ("importlib.metadata", "statemachine", "hypothesis", "pytest")


def test_importing_the_package_loads_no_metadata_reader_and_no_extra() -> None:
    # -S: no site, so no .pth hook of the environment has loaded importlib.metadata before the
    # probe looks (where one had, the import's own use of it would go unseen); the package is
    # found through PYTHONPATH instead, its parent directory alone.
    parent = Path(diagnosis_harness.__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, "importlib.metadata"],
        env={**os.environ, "PYTHONPATH": str(parent)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(result.stdout)
    assert "importlib.metadata" in report["all"]  # not loaded before: the probe would see it
    loaded = {
        name
        for name in report["root"]
        for unwanted in NOT_ON_IMPORT
        if name == unwanted or name.startswith(f"{unwanted}.")
    }
    assert loaded == set()


# -- what a sync user's import does not pay for -------------------------------------------------
#
# Loaded only on the path that needs it: asyncio (with concurrent.futures, ssl, socket) for the
# async entry points, logging for a callback's error, random for a jittered wait, inspect for a
# callable that is not a plain function; fractions (with decimal) not at all. Measured by
# benchmarks/bench_import.py: asyncio was half of the import's cost.
LAZY = (
    "asyncio",
    "concurrent.futures",
    "logging",
    "fractions",
    "decimal",
    "random",
    "inspect",
    "re",
)

# What any module of the core imports to exist at all (`from typing import ...`, `@dataclass`,
# `enum.Enum`, a lock): the floor the lazy imports are measured above. On Python 3.11 `typing`
# itself loads `re` and `dataclasses` loads `inspect`; where the floor loads one, the package is
# not to blame for it, and where it does not, the check below sees the package load it.
_FLOOR = "typing, dataclasses, enum, threading, contextlib, collections.abc, types"

_LAZY_PROBE = f"""
import json, sys
import {_FLOOR}
floor = set(sys.modules)
__import__(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - floor)))
"""


def _loaded_above_the_floor(module: str) -> set[str]:
    """The modules of ``LAZY`` that importing ``module`` adds, in a fresh interpreter, above what
    the floor loads."""
    # -S: no site, so no .pth hook of the environment has loaded one of them before the probe
    # looks; the package is found through PYTHONPATH, its parent directory alone.
    package_dir = Path(diagnosis_harness.__file__).resolve().parent
    result = subprocess.run(
        [sys.executable, "-S", "-c", _LAZY_PROBE, module],
        env={**os.environ, "PYTHONPATH": str(package_dir.parent)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    added: list[str] = json.loads(result.stdout)
    return {lazy for lazy in LAZY for name in added if name == lazy or name.startswith(f"{lazy}.")}


def test_importing_the_package_loads_nothing_a_sync_user_needs_only_later() -> None:
    """Cancellation imports asyncio in ``wait_async`` and logging on a callback's error, the
    retry executor and the scope asyncio on their async paths and random for a jitter; the clock
    needs no ``fractions``, the keys no ``re`` (seen only where ``typing`` does not load it)."""
    assert _loaded_above_the_floor("diagnosis_harness") == set()


def test_the_lazy_probe_would_see_a_lazy_import() -> None:
    assert _loaded_above_the_floor("asyncio") >= {"asyncio", "logging"}
    assert "fractions" in _loaded_above_the_floor("fractions")


# -- prices: genai-prices only for who makes a GenaiPrices -----------------------------------------

# genai-prices and what it imports (pydantic, its HTTP client for UpdatePrices).
PRICES_EXTRA = ("genai_prices", "pydantic", "httpx2")


def _loaded_by(code: str) -> set[str]:
    """The modules of ``PRICES_EXTRA`` a fresh interpreter has loaded after running ``code``."""
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(result.stdout)
    return {extra for extra in PRICES_EXTRA for name in loaded if name.split(".")[0] == extra}


def test_importing_pricing_loads_no_genai_prices() -> None:
    """``diagnosis_harness.pricing`` is the standard library only: PriceTable and the units work
    without the ``prices`` extra, and whoever imports the module pays for no price data."""
    assert _loaded_by("import diagnosis_harness.pricing") == set()


@pytest.mark.skipif(find_spec("genai_prices") is None, reason="genai-prices is Python 3.11+")
def test_the_pricing_probe_would_see_genai_prices() -> None:
    assert "genai_prices" in _loaded_by(
        "from diagnosis_harness.pricing import GenaiPrices\nGenaiPrices()"
    )
