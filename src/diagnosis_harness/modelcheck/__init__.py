"""The model-checking layer: the runtime checked against the tables in ``model/``.

Theory of operation. The tables in ``model/`` are the truth; the runtime walks tables generated
from them, and python-statemachine models generated from the same tables are the oracle. This
package checks the first against the second, from an installed wheel
(``diagnosis-harness model-check``), one idea per module:

* :mod:`._models` -- the generated models as the checks step them (live, or memoized);
* :mod:`._probe` -- the :class:`RunProbe` every check drives: one real run stepped beside its
  prediction (:mod:`._probe_prediction`: the models, and :mod:`._probe_reference`, a reference of
  plain counters), checked by the invariants (:mod:`._probe_invariants`, the spec's sentences),
  each step charged to the spec scenarios it exercises (:mod:`._probe_scenarios`); retry
  executions (:mod:`._probe_retry`) follow scripts (:mod:`._probe_script`), on the run a
  :mod:`._probe_config` describes;
* :mod:`._explorer` -- the exhaustive breadth-first explorer of each table's reachable states and
  of every event sequence up to depth 4;
* :mod:`._stateful` -- Hypothesis ``RuleBasedStateMachine`` s driving one run through any
  interleaving of its operations (needs the ``modelcheck`` extra); :mod:`._profiles`, the
  Hypothesis profiles;
* :mod:`._planted` -- known defects planted in the runtime, which the checks must catch;
* :mod:`._scheduler` (the deterministic scheduler of real threads), :mod:`._schedules`
  (exploring a race's schedules), :mod:`._races` (the race scenarios) and
  :mod:`._race_checks` (the races each profile checks);
* :mod:`._spin` -- the Spin models;
* :mod:`._results`, :mod:`._counterexample`, :mod:`._spec_scenarios` -- what every check
  returns: per spec scenario, what was checked and the shortest counterexample;
* :mod:`._coverage` -- :class:`TransitionCoverage`, the count of every row taken;
* :mod:`._cli` -- the command.

Hypothesis is imported only by :mod:`._stateful`, :mod:`._planted`, :mod:`._profiles` and,
lazily, :mod:`._schedules` and :mod:`._cli`: importing this package needs only the core's
dependencies and python-statemachine.
"""

from __future__ import annotations

from ._counterexample import Counterexample, Step
from ._coverage import TABLES, TransitionCoverage
from ._disagreement import Disagreement
from ._explorer import Exploration, explore, replay_execution, replay_sequence
from ._probe import RunProbe
from ._race_checks import replay_schedule
from ._results import CheckResult, ScenarioResult

__all__ = [
    "TABLES",
    "CheckResult",
    "Counterexample",
    "Disagreement",
    "Exploration",
    "RunProbe",
    "ScenarioResult",
    "Step",
    "TransitionCoverage",
    "explore",
    "replay_execution",
    "replay_schedule",
    "replay_sequence",
]
