"""The conformance plugin's fixtures, registered by :mod:`._plugin` in a run that opted in only.

A module of their own: the plugin's module is loaded in every pytest run of an environment where
diagnosis-harness is installed, and pytest would offer every fixture defined there to every test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ._plugin import STATE_KEY

if TYPE_CHECKING:
    from ..modelcheck._coverage import TransitionCoverage

__all__ = ["transition_coverage"]


@pytest.fixture(scope="session")
def transition_coverage(request: pytest.FixtureRequest) -> TransitionCoverage:
    """The session's transition coverage: every model check records the rows it took here, and
    the conformance report shows the counts beside each row of each table."""
    from ..modelcheck._coverage import (  # noqa: PLC0415 - only model checks need it
        TransitionCoverage,
    )

    coverage = TransitionCoverage()
    state = request.config.stash.get(STATE_KEY, None)
    if state is not None:
        state.coverage = coverage
    return coverage
