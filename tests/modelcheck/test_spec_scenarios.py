"""The spec scenarios the model checks name are the spec's, verbatim: a renamed scenario would
otherwise leave a check crediting a scenario that no longer exists."""

from __future__ import annotations

import re
from pathlib import Path

from diagnosis_harness.conformance.suite import _support
from diagnosis_harness.modelcheck import _spec_scenarios

SPEC = Path(__file__).resolve().parents[2] / "specs" / "diagnosis-harness-run-context" / "spec.md"


def _spec_pairs() -> set[tuple[str, str]]:
    pairs = set()
    requirement = ""
    for line in SPEC.read_text(encoding="utf-8").splitlines():
        if found := re.match(r"^### Requirement: (.+)$", line):
            requirement = found.group(1).strip()
        elif found := re.match(r"^#### Scenario: (.+)$", line):
            pairs.add((requirement, found.group(1).strip()))
    return pairs


def test_every_scenario_the_model_checks_name_is_in_the_spec() -> None:
    named = {
        value
        for name, value in vars(_spec_scenarios).items()
        if name.isupper() and isinstance(value, tuple)
    }
    assert len(named) == 10
    assert named <= _spec_pairs()


def test_the_requirement_names_are_the_suites() -> None:
    assert _spec_scenarios.LIFECYCLE == _support.TERMINAL
    assert _spec_scenarios.DEADLINE == _support.DEADLINE
    assert _spec_scenarios.BUDGET == _support.BUDGETS
    assert _spec_scenarios.RETRY == _support.RETRY
    assert _spec_scenarios.PRIMITIVES == _support.PRIMITIVES
