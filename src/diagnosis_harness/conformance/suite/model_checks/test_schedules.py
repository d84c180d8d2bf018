"""The deterministic scheduler as a model check of the suite, one item per spec scenario.

Every schedule of two and three racing real threads (``ci``) keeps each race's invariant with
the run's lock, and the deliberately unlocked variant of each race is caught, which shows the
schedules reach the race. Each race names its spec scenario: an item fails only when a race of
its scenario failed, with the violating schedule as the counterexample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.modelcheck._race_checks import plan

from .._support import check_scenario

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.modelcheck import CheckResult

pytestmark = pytest.mark.model_check

SCENARIOS = tuple(
    dict.fromkeys((c.scenario.requirement, c.scenario.spec_scenario) for c in plan("ci"))
)


@pytest.mark.parametrize(
    "scenario",
    [pytest.param(pair, marks=pytest.mark.spec(*pair), id=pair[1]) for pair in SCENARIOS],
)
def test_every_schedule_of_its_races_keeps_the_invariants(
    scenario: tuple[str, str],
    race_checks: CheckResult,
    record_property: Callable[[str, object], None],
) -> None:
    result = race_checks.scenario(scenario)
    assert result is not None, f"no race of {scenario[1]!r} ran"
    check_scenario(record_property, result)
