"""Fixtures of the model checks: the session's transition coverage, and each check run once.

``transition_coverage`` (from the conformance plugin) is the session's
:class:`TransitionCoverage`: every model check of the session adds the rows it took, and the
conformance report prints the counts.
``hypothesis_coverage`` holds only the rows the Hypothesis machines took, so that a test can say
that the explorer *and* the Hypothesis runs each took every row. The explorer and each machine
run once per session, whichever test asks first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from diagnosis_harness.modelcheck import Exploration, TransitionCoverage, explore
from diagnosis_harness.modelcheck._stateful import MachineStats, run_machine

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.modelcheck._stateful import _ProbeMachine


@pytest.fixture(scope="session")
def hypothesis_coverage() -> TransitionCoverage:
    """The rows the Hypothesis machines took (also in ``transition_coverage``)."""
    return TransitionCoverage()


@pytest.fixture(scope="session")
def exploration(transition_coverage: TransitionCoverage) -> Exploration:
    """The explorer at depth 4, once per session; its rows go into ``transition_coverage``."""
    return explore(depth=4, coverage=transition_coverage)


@pytest.fixture(scope="session")
def stateful_runner(
    transition_coverage: TransitionCoverage, hypothesis_coverage: TransitionCoverage
) -> Callable[[type[_ProbeMachine]], MachineStats]:
    """Run a machine under the loaded Hypothesis profile, once per session; its statistics."""
    done: dict[type[_ProbeMachine], MachineStats] = {}

    def run(machine: type[_ProbeMachine]) -> MachineStats:
        if machine not in done:
            rows = TransitionCoverage()
            stats = run_machine(machine, settings=settings(), coverage=rows)
            hypothesis_coverage.merge(rows)
            transition_coverage.merge(rows)
            done[machine] = stats
        return done[machine]

    return run
