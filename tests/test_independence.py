"""The Core imports only the standard library and python-statemachine (an import-linter check).

A fresh interpreter imports ``diagnosis_harness`` and every Core module and reports what the
import added to ``sys.modules``; whatever the interpreter had loaded before (``site`` and the
``.pth`` hooks of the environment) is not the library's doing and is left out.

These tests check the probe itself; the scenario (Stage 2 implementation completes) is shown in
``src/diagnosis_harness/conformance/suite/test_core_independence.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

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
    "testing",
    "_generated.tables",
    "_generated.models",
)


def test_core_modules_are_found() -> None:
    names = core_modules()
    for known in KNOWN_CORE:
        assert f"diagnosis_harness.{known}" in names
    assert not any(".codegen" in name or ".integrations" in name for name in names)


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
