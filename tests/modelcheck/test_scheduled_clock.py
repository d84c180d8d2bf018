"""``ManualClock.advance_ns`` racing itself under the deterministic scheduler.

An advance is a read of the time and a write of the sum: two of them interleaved between the read
and the write lose one. ``advance_ns`` passes the checkpoint ``clock.advance`` exactly there, under
the clock's lock, so the enumerator tries every way of interleaving two and three advances. With
the scheduler's :class:`SchedLock` as the clock's lock no advance is ever lost; with the same lock
made non-exclusive (``locked=False``: every scheduling point kept, nobody excluded -- the lock
removed) some schedule loses one, which shows that these schedules can see the race at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import ManualClock
from diagnosis_harness._checkpoint import scheduled
from diagnosis_harness.modelcheck._races import Scenario
from diagnosis_harness.modelcheck._scheduler import InvariantViolation
from diagnosis_harness.modelcheck._schedules import explore_schedules as explore

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from diagnosis_harness.modelcheck._scheduler import SchedLock, Scheduler

pytestmark = [pytest.mark.model_check, pytest.mark.version_independent]

START_NS = 1_000


def advance_race(steps: Sequence[Sequence[int]]) -> Scenario:
    """Actor ``i`` advances one shared clock by each of ``steps[i]`` in turn (ns).

    Invariant: the clock ends at its start plus every step, and no actor sees it go back.
    """
    plans = tuple(tuple(plan) for plan in steps)
    expected = START_NS + sum(sum(plan) for plan in plans)

    def build(
        _scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        clock = ManualClock(START_NS, _lock=lock.as_lock())
        readings: list[list[int]] = [[] for _ in plans]

        def advancer(index: int) -> Callable[[], None]:
            def advance_all() -> None:
                for ns in plans[index]:
                    clock.advance_ns(ns)
                    readings[index].append(clock.monotonic_ns())

            return advance_all

        def check() -> str:
            now = clock.monotonic_ns()
            if now != expected:
                raise InvariantViolation(f"clock at {now}, expected {expected}: an advance lost")
            for seen in readings:
                if seen != sorted(seen):
                    raise InvariantViolation(f"an actor saw the clock go back: {seen}")
            return f"at {now}"

        return [advancer(index) for index in range(len(plans))], check

    return Scenario(
        f"clock.advance[{' | '.join(','.join(map(str, p)) for p in plans)}]",
        "Deadline and cancellation SHALL stop subsequent controlled work",
        "Deadline expires before a Tool call",
        tuple(f"advance[{','.join(map(str, plan))}]" for plan in plans),
        build,
    )


# Two actors under both scheduler modes; three only between sections, as the run's races do: with
# release points too their schedules grow from hundreds to tens of thousands.
RACES = [
    pytest.param([[1], [2]], False, id="two-advances-sections"),
    pytest.param([[1], [2]], True, id="two-advances-release-points"),
    pytest.param([[1, 4], [2]], False, id="two-then-one-sections"),
    pytest.param([[1, 4], [2]], True, id="two-then-one-release-points"),
    pytest.param([[1], [2], [4]], False, id="three-advances-sections"),
]


@pytest.mark.parametrize(("steps", "release_points"), RACES)
def test_every_schedule_of_concurrent_advances_loses_none(
    steps: list[list[int]], release_points: bool
) -> None:
    result = explore(advance_race(steps), release_points=release_points)
    assert result.complete
    assert result.violations == 0, (result.first_violation, result.first_violation_trace)
    assert result.schedules > 1  # the enumeration did interleave the advancers
    assert set(result.outcomes) == {f"at {START_NS + sum(map(sum, steps))}"}


@pytest.mark.parametrize(("steps", "release_points"), RACES)
def test_the_same_schedules_find_the_lost_advance_without_the_lock(
    steps: list[list[int]], release_points: bool
) -> None:
    result = explore(advance_race(steps), locked=False, release_points=release_points)
    assert result.complete
    assert result.violations > 0, "no schedule of the unlocked clock lost an advance"
    assert result.first_violation is not None
    assert "lost" in result.first_violation
    assert result.first_violation_trace  # the schedule that lost it, for a failure message
    # Some schedules keep every advance: the race depends on the interleaving.
    assert result.violations < result.schedules


def test_an_advance_passes_the_checkpoint_once_between_its_read_and_its_write() -> None:
    """The site the schedules switch at: without it no interleaving could split an advance."""
    clock = ManualClock(START_NS)
    seen: list[tuple[str, int]] = []
    with scheduled(lambda site: seen.append((site, clock.monotonic_ns()))):
        clock.advance_ns(5)
        clock.advance(1e-9)
    assert seen == [("clock.advance", START_NS), ("clock.advance", START_NS + 5)]
    assert clock.monotonic_ns() == START_NS + 6
