"""Constants and helpers of the conformance tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from diagnosis_harness.conformance._bundle import suite_dir

ROOT = Path(__file__).resolve().parents[2]
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


def read_json(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "conformance.json").read_text("utf-8"))
    return data


def scenarios(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every scenario of the report's one spec, by name."""
    return {
        scenario["name"]: scenario
        for requirement in report["items"][0]["requirements"]
        for scenario in requirement["scenarios"]
    }
