"""``python -m diagnosis_harness ARGS`` with the scheduler's plan cut to one race per scenario.

``python small_model_check.py model-check ...`` runs the command as ``python -m`` would (the
package's ``__main__`` run as ``__main__``: its exit status, its closed-pipe handling), in a fresh
interpreter, with one change: ``model-check``'s scheduler step runs one race of each spec scenario
instead of the whole ``ci`` plan (5,000 schedules, most of the command's time even with
``--depth 1 --max-examples 1 --steps 1``). For the tests whose point is the process around the
checks -- what it writes in the working directory, how it ends into a closed pipe -- not the plan;
tests/modelcheck/test_scheduled_races.py runs the whole plan. Every other step runs as shipped.

Nothing of Hypothesis is imported before the command imports it (``modelcheck._cli`` imports it
only inside the run), so where Hypothesis keeps its files is decided as in a user's run.
"""

from __future__ import annotations

import runpy
import sys
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.modelcheck import _cli
from diagnosis_harness.modelcheck._race_checks import RaceCheck, plan, run_checks

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.modelcheck import CheckResult


def one_race_per_scenario(
    profile: str, *, tick: Callable[[str, int, int | None], None] | None = None
) -> CheckResult:
    """The scheduler's checks of ``profile``, the first race of each spec scenario."""
    chosen: dict[str, RaceCheck] = {}
    for check in plan(profile):
        chosen.setdefault(check.scenario.spec_scenario, check)
    return run_checks(profile, checks=list(chosen.values()), tick=tick)


if __name__ == "__main__":
    sys.argv = ["diagnosis_harness", *sys.argv[1:]]
    with pytest.MonkeyPatch.context() as patch:
        # The name _cli's run looks up when it runs, as the in-process tests patch it.
        patch.setattr(_cli, "run_checks", one_race_per_scenario)
        runpy.run_module("diagnosis_harness", run_name="__main__", alter_sys=True)
