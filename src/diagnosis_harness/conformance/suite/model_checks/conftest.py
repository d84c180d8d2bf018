"""One run per session of each model check the suite's items share.

Each spec scenario is its own test item, but the explorer and the race checks run once: the
first item that asks runs them, the others read the same result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.modelcheck import explore
from diagnosis_harness.modelcheck._race_checks import run_checks

if TYPE_CHECKING:
    from diagnosis_harness.modelcheck import CheckResult, Exploration, TransitionCoverage

EXPLORER_DEPTH = 3
"""Every event sequence up to 3 events: a few seconds (``model-check`` goes to 4)."""


@pytest.fixture(scope="session")
def exploration(transition_coverage: TransitionCoverage) -> Exploration:
    """The explorer, once per session; its rows go into the report's coverage, pass or fail."""
    return explore(depth=EXPLORER_DEPTH, coverage=transition_coverage)


@pytest.fixture(scope="session")
def race_checks() -> CheckResult:
    """The scheduler's ``ci`` race checks, once per session."""
    return run_checks("ci")
