"""The exhaustive explorer as a model check of the suite: every event sequence up to depth 3
against a real run, each step also fired on the python-statemachine models generated from
model/; a disagreement or a broken invariant raises. Its rows go into the report's coverage."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.modelcheck import explore
from diagnosis_harness.modelcheck._explore import SCENARIOS

if TYPE_CHECKING:
    from diagnosis_harness.modelcheck import TransitionCoverage

pytestmark = [pytest.mark.model_check, *(pytest.mark.spec(r, s) for r, s in SCENARIOS)]


def test_every_sequence_up_to_depth_3_agrees_with_the_model(
    transition_coverage: TransitionCoverage,
) -> None:
    result = explore(depth=3, coverage=transition_coverage)
    assert result.run.sequences > 0
    assert result.retry.sequences > 0
    assert result.coverage.uncovered() == []  # every row of every table was taken
