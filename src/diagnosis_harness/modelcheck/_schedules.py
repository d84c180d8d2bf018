"""Exploring a race's schedules: every one (depth first) or Hypothesis-chosen ones.

Theory of operation. At each point a ``choose(runnable) -> actor`` strategy picks who
resumes: Hypothesis (``data.draw(st.sampled_from(runnable))``, :func:`search_schedules`) or a
depth-first enumerator of every choice sequence (:func:`explore_schedules`), which re-runs the
whole scenario once per schedule. Between two points an actor runs alone, so a schedule -- the
list of choices -- determines everything. Hypothesis is imported only inside
:func:`search_schedules` (it belongs to the ``modelcheck`` extra).

Each schedule runs a fresh :class:`~._races.Scenario` under the :class:`~._scheduler.Scheduler`
and checks its invariant; :class:`ScheduleExploration` counts the schedules, the outcomes and
the violations, and keeps the first violation's trace and choices, so it can be replayed.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, final

from ._scheduler import DEFAULT_TIMEOUT, InvariantViolation, SchedulerError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from ._races import Scenario
    from ._scheduler import Choose

__all__ = ["ScheduleExploration", "explore_schedules", "schedules", "search_schedules"]


@final
@dataclass(slots=True)
class ScheduleExploration:
    """What exploring one scenario's schedules found."""

    scenario: str
    locked: bool
    strategy: str  # "exhaustive" or "hypothesis"
    schedules: int = 0
    seconds: float = 0.0
    complete: bool = False  # exhaustive: the enumeration ran out; Hypothesis: no violation
    violations: int = 0
    first_violation: str | None = None
    first_violation_schedule: int | None = None  # 1-based
    first_violation_seconds: float | None = None
    first_violation_trace: tuple[str, ...] = ()
    first_violation_choices: tuple[int, ...] = ()  # the actor picked at each choice point
    last_violation_trace: tuple[str, ...] = ()  # after shrinking: Hypothesis's minimal schedule
    outcomes: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "lock": "exclusive" if self.locked else "unlocked",
            "strategy": self.strategy,
            "schedules": self.schedules,
            "complete": self.complete,
            "seconds": round(self.seconds, 3),
            "violations": self.violations,
            "first_violation": self.first_violation,
            "first_violation_schedule": self.first_violation_schedule,
            "first_violation_seconds": (
                None
                if self.first_violation_seconds is None
                else round(self.first_violation_seconds, 4)
            ),
            "first_violation_trace": list(self.first_violation_trace),
            "last_violation_trace": list(self.last_violation_trace),
            "outcomes": dict(sorted(self.outcomes.items())),
        }

    def record(
        self, started: float, label: str | None, violation: InvariantViolation | None
    ) -> None:
        self.schedules += 1
        if violation is None:
            assert label is not None
            self.outcomes[label] += 1
            return
        self.violations += 1
        self.last_violation_trace = violation.trace
        if self.first_violation is None:
            self.first_violation = str(violation).splitlines()[0]
            self.first_violation_schedule = self.schedules
            self.first_violation_seconds = time.perf_counter() - started
            self.first_violation_trace = violation.trace
            self.first_violation_choices = violation.choices


@final
class _Replay:
    """One run of the depth-first enumeration: replays ``prefix``, then takes the first option."""

    __slots__ = ("prefix", "sizes", "sizes_before", "taken")

    def __init__(self, prefix: list[int], sizes_before: list[int]) -> None:
        self.prefix = prefix
        self.sizes_before = sizes_before
        self.taken: list[int] = []
        self.sizes: list[int] = []

    def __call__(self, runnable: Sequence[int]) -> int:
        depth = len(self.taken)
        if depth < len(self.prefix):
            if self.sizes_before[depth] != len(runnable):
                raise SchedulerError(
                    f"replaying choice {depth}: {len(runnable)} runnable actors, "
                    f"{self.sizes_before[depth]} before: the scenario is not deterministic"
                )
            index = self.prefix[depth]
        else:
            index = 0
        self.taken.append(index)
        self.sizes.append(len(runnable))
        return runnable[index]


def schedules(run_one: Callable[[Choose], object]) -> Iterator[list[int]]:
    """Run ``run_one(choose)`` once per schedule, depth first; yields each choice sequence.

    A choice is the position in ``runnable``; points with one runnable actor are not choices.
    Raises :class:`SchedulerError` if a replayed prefix offers different options (the scenario
    is not deterministic).
    """
    replay = _Replay([], [])
    while True:
        run_one(replay)
        taken, sizes = replay.taken, replay.sizes
        yield list(taken)
        while taken and taken[-1] + 1 >= sizes[-1]:
            taken.pop()
            sizes.pop()
        if not taken:
            return
        taken[-1] += 1
        replay = _Replay(taken, sizes)


def explore_schedules(
    scenario: Scenario,
    *,
    locked: bool = True,
    stop_at_first_violation: bool = False,
    max_schedules: int | None = None,
    release_points: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> ScheduleExploration:
    """Run ``scenario`` under every schedule (depth first), checking its invariant after each."""
    result = ScheduleExploration(scenario.name, locked, "exhaustive")
    started = time.perf_counter()

    def run_one(choose: Choose) -> None:
        try:
            label = scenario.run(
                choose, locked=locked, release_points=release_points, timeout=timeout
            )
        except InvariantViolation as violation:
            result.record(started, None, violation)
        else:
            result.record(started, label, None)

    for _ in schedules(run_one):
        if stop_at_first_violation and result.violations:
            break
        if max_schedules is not None and result.schedules >= max_schedules:
            break
    else:
        result.complete = True
    result.seconds = time.perf_counter() - started
    return result


def search_schedules(
    scenario: Scenario,
    *,
    locked: bool = True,
    max_examples: int = 100,
    derandomize: bool = True,
    shrink: bool = False,
    release_points: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> ScheduleExploration:
    """Let Hypothesis choose ``max_examples`` schedules; stops at the first violation.

    Without ``shrink`` Hypothesis stops at the first violating schedule (then replays it once,
    so it counts twice); with it, ``last_violation_trace`` is the shrunk, minimal schedule.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: PLC0415
    from hypothesis import strategies as st  # noqa: PLC0415

    result = ScheduleExploration(scenario.name, locked, "hypothesis")
    started = time.perf_counter()
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
    )
    @given(st.data())
    def one_schedule(data: st.DataObject) -> None:
        def choose(runnable: Sequence[int]) -> int:
            return data.draw(st.sampled_from(runnable))

        try:
            label = scenario.run(
                choose, locked=locked, release_points=release_points, timeout=timeout
            )
        except InvariantViolation as violation:
            result.record(started, None, violation)
            raise
        result.record(started, label, None)

    try:
        one_schedule()
    except InvariantViolation:
        pass  # recorded; Hypothesis replays the failing schedule once, so it counts twice
    else:
        result.complete = True  # every example ran without a violation
    result.seconds = time.perf_counter() - started
    return result
