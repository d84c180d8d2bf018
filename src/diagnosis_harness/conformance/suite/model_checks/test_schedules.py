"""The deterministic scheduler as a model check of the suite: every schedule of two and three
racing real threads (ci profile) keeps the invariants with the run's lock, and the deliberately
unlocked variant of each scenario is caught, which shows the schedules reach the races."""

from __future__ import annotations

import pytest

from diagnosis_harness.modelcheck._scheduler import run_checks

from .._support import BUDGETS, DEADLINE, PRIMITIVES, TERMINAL

pytestmark = [
    pytest.mark.model_check,
    pytest.mark.spec(TERMINAL, "Success wins a terminal race"),
    pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race"),
    pytest.mark.spec(DEADLINE, "Client disconnects"),
    pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted"),
    pytest.mark.spec(PRIMITIVES, "Run byte limit would be exceeded"),
]


def test_every_schedule_of_the_races_keeps_the_invariants() -> None:
    summary = run_checks("ci")
    failed = [d for d in summary.get("details", []) if not d.get("passed")]
    assert summary["passed"], failed
