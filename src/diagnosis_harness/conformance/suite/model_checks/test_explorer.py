"""The exhaustive explorer as a model check of the suite, one item per spec scenario.

Every event sequence up to depth 3 runs against a real run, each step also fired on the
python-statemachine models generated from ``model/``. Each scenario's item passes when every
sequence step that exercised it agreed with the model, and fails with the shortest
counterexample charged to it; a bug elsewhere leaves it green. Its rows go into the report's
coverage whether or not anything failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.modelcheck._explorer import SCENARIOS

from .._support import check_scenario

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.modelcheck import Exploration

pytestmark = pytest.mark.model_check


@pytest.mark.parametrize(
    "scenario",
    [pytest.param(pair, marks=pytest.mark.spec(*pair), id=pair[1]) for pair in SCENARIOS],
)
def test_explored_sequences_agree_with_the_model(
    scenario: tuple[str, str],
    exploration: Exploration,
    record_property: Callable[[str, object], None],
) -> None:
    result = next((r for r in exploration.scenarios if r.scenario == scenario), None)
    assert result is not None, f"the explorer did not exercise {scenario[1]!r}"
    check_scenario(record_property, result)


def test_every_row_is_taken_and_every_disagreement_is_a_scenarios(
    exploration: Exploration,
) -> None:
    """The explorer's own health: each table row taken, no failing step outside a scenario."""
    assert exploration.coverage.uncovered() == []
    assert exploration.run.sequences > 0
    assert exploration.retry.sequences > 0
    unattributed = [c.text() for c in exploration.unattributed]
    assert not unattributed, "\n\n".join(unattributed[:1])
