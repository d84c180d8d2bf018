"""The model-checking layer: the runtime checked against the tables in ``model/``.

Theory of operation. The tables in ``model/`` are the truth; the runtime walks tables generated
from them, and python-statemachine models generated from the same tables are the oracle. This
package checks the first against the second, from an installed wheel
(``diagnosis-harness model-check``):

* :mod:`._explore` -- the :class:`RunProbe` every check drives (one real run, its models, a
  reference of plain counters, and the invariants, which are the spec's sentences), and the
  exhaustive breadth-first explorer of each table's reachable states and of every event sequence
  up to depth 4;
* :mod:`._stateful` -- Hypothesis ``RuleBasedStateMachine`` s driving one run through any
  interleaving of its operations (needs the ``modelcheck`` extra);
* :mod:`._planted` -- known defects planted in the runtime, which the machines must catch and
  shrink to a few steps;
* :mod:`._coverage` -- :class:`TransitionCoverage`, the count of every row taken, for the
  conformance report;
* :mod:`._cli` -- the command.

Hypothesis is imported only by :mod:`._stateful`, :mod:`._planted` and, lazily, :mod:`._cli`:
importing this package needs only the core's dependencies.
"""

from __future__ import annotations

from ._coverage import TABLES, TransitionCoverage
from ._explore import Disagreement, Exploration, RunProbe, explore

__all__ = ["TABLES", "Disagreement", "Exploration", "RunProbe", "TransitionCoverage", "explore"]
