"""Constants and helpers of the conformance tests."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from diagnosis_harness.conformance._bundle import suite_dir

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "docs" / "reference" / "conformance-report.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text("utf-8"))
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SPEC = ROOT / "specs" / "diagnosis-harness-run-context" / "spec.md"
SUITE = suite_dir()

SMALL_SPEC = """\
# toy Specification

## Purpose

A toy capability for the plugin's tests, with a purpose long enough for the validator to accept.

## Requirements

### Requirement: Things SHALL work

The system SHALL do things.

#### Scenario: First thing

- **WHEN** the first thing happens
- **THEN** it works

#### Scenario: Second thing

- **WHEN** the second thing happens
- **THEN** it works

#### Scenario: Third thing

- **WHEN** the third thing happens
- **THEN** it works

### Requirement: Other things SHALL work too

The system SHALL do other things.

#### Scenario: Fourth thing

- **WHEN** the fourth thing happens
- **THEN** it works

#### Scenario: Fifth thing

- **WHEN** the fifth thing happens
- **THEN** it works
"""
THINGS = "Things SHALL work"
OTHERS = "Other things SHALL work too"


def valid_report(document: dict[str, Any]) -> dict[str, Any]:
    """``document``, after checking it against the shipped JSON Schema (every error listed)."""
    errors = sorted(_VALIDATOR.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors
    )
    return document


def read_json(directory: Path) -> dict[str, Any]:
    """The ``conformance.json`` in ``directory``, validated against the schema."""
    data: dict[str, Any] = json.loads((directory / "conformance.json").read_text("utf-8"))
    return valid_report(data)


def scenarios(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every scenario of the report's one spec, by name."""
    return {
        scenario["name"]: scenario
        for requirement in report["items"][0]["requirements"]
        for scenario in requirement["scenarios"]
    }


# -- the installed wheel (conftest.py's session fixtures) ------------------------------------------

STEP_TIMEOUT = 120  # seconds per step; the whole build takes a few seconds with a warm cache


def find_uv() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file():
        return str(beside)
    return shutil.which("uv")


def clean_env() -> dict[str, str]:
    """This environment less what would point a child at the checkout or change its pytest run
    (``PYTEST_ADDOPTS``, ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``, ...)."""
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", "PY_IGNORE_IMPORTMISMATCH", "HYPOTHESIS_PROFILE"}
    return {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("PYTEST_")}


def step(what: str, command: list[str], cwd: Path, *, offline_first: bool = False) -> None:
    """Run a build or install step; skip the test, saying why, when it cannot be done."""
    attempts = [[*command, "--offline"], command] if offline_first else [command]
    for attempt in attempts:
        try:
            done = subprocess.run(
                attempt,
                cwd=cwd,
                env=clean_env(),
                capture_output=True,
                text=True,
                timeout=STEP_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            pytest.skip(f"cannot {what}: {error}")
        if done.returncode == 0:
            return
    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
    pytest.skip(f"cannot {what} (offline, or no index?): " + " | ".join(tail))


@dataclasses.dataclass(frozen=True)
class Venv:
    """A virtual environment outside the checkout with the built wheel installed in it."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def script(self, name: str) -> Path:
        return self.root / "bin" / name

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        """``python *args`` of this environment, in ``cwd``."""
        return subprocess.run(
            [str(self.python), *args],
            cwd=cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )
