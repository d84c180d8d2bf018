"""The deterministic scheduler itself: one thread at a time, every schedule once, no hangs."""

from __future__ import annotations

import itertools
import math
import threading
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness._checkpoint import checkpoint
from diagnosis_harness.modelcheck._scheduler import (
    Deadlock,
    SchedLock,
    Scheduler,
    SchedulerError,
)
from diagnosis_harness.modelcheck._schedules import schedules

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

pytestmark = pytest.mark.model_check


def first(runnable: Sequence[int]) -> int:
    return runnable[0]


def last(runnable: Sequence[int]) -> int:
    return runnable[-1]


def test_actors_run_on_real_threads_one_at_a_time() -> None:
    running: list[int] = []
    idents: set[int] = set()
    overlaps: list[str] = []

    def actor(me: int) -> Callable[[], int]:
        def body() -> int:
            idents.add(threading.get_ident())
            for step in range(3):
                if running:
                    overlaps.append(f"{me} ran while {running} did, step {step}")
                running.append(me)
                running.remove(me)
                checkpoint("step")
            return me

        return body

    scheduler = Scheduler(last)
    results = scheduler.run([actor(i) for i in range(3)])

    assert results == [0, 1, 2]
    assert overlaps == []
    assert len(idents) == 3
    assert threading.get_ident() not in idents
    # `last` always resumes the highest runnable actor: actor 2 runs to its end first.
    assert [actor for actor, _ in scheduler.trace[:4]] == [2, 2, 2, 2]


def test_checkpoints_off_actor_threads_and_outside_a_run_do_nothing() -> None:
    checkpoint("no scheduler installed")
    scheduler = Scheduler(first)
    lock = scheduler.lock()
    with lock:  # the test thread: a plain bookkeeping lock
        assert lock.locked()
    assert not lock.locked()
    assert scheduler.run([lambda: checkpoint("inside")]) == [None]


def count_schedules(actors: int, points: int, *, lock: bool | None = None) -> tuple[int, set[str]]:
    """Every schedule of ``actors`` actors passing ``points`` checkpoints each, each inside a
    :class:`SchedLock` (``exclusive=lock``) unless ``lock`` is None."""
    traces: set[str] = set()

    def run_one(choose: Callable[[Sequence[int]], int]) -> None:
        scheduler = Scheduler(choose)
        shared = scheduler.lock(exclusive=bool(lock))

        def body() -> None:
            for _ in range(points):
                if lock is None:
                    checkpoint("step")
                else:
                    with shared:
                        checkpoint("inside")

        scheduler.run([body] * actors)
        traces.add(" ".join(f"{actor}@{site}" for actor, site in scheduler.trace))

    count = sum(1 for _ in schedules(run_one))
    return count, traces


@pytest.mark.parametrize(("actors", "points"), [(2, 1), (2, 4), (3, 1)])
def test_the_enumerator_runs_every_interleaving_exactly_once(actors: int, points: int) -> None:
    # Each actor is a sequence of `points + 1` segments (from its start and each checkpoint);
    # the schedules are the interleavings of those sequences: a multinomial coefficient.
    segments = points + 1
    expected = math.factorial(actors * segments) // math.factorial(segments) ** actors
    count, traces = count_schedules(actors, points)
    assert count == len(traces) == expected


def test_an_exclusive_lock_removes_exactly_the_overlapping_sections() -> None:
    # Two actors, each: start | acquire | checkpoint inside the lock, 3 segments: 20 orders.
    # With the lock, the two sections [acquire, end] may not overlap: X's section wholly before
    # Y's acquire (Y's start in any of 4 places), or the other way round: 8 orders.
    assert count_schedules(2, 1, lock=False)[0] == 20
    count, traces = count_schedules(2, 1, lock=True)
    assert count == len(traces) == 8


def taking_turns() -> Callable[[Sequence[int]], int]:
    turns = itertools.count()
    return lambda runnable: runnable[next(turns) % len(runnable)]


def test_a_non_exclusive_lock_lets_two_actors_hold_it() -> None:
    holders: list[int] = []
    overlap: list[list[int]] = []

    def actor(me: int, lock: SchedLock) -> Callable[[], None]:
        def body() -> None:
            with lock:
                holders.append(me)
                checkpoint("held")
                if len(holders) > 1:
                    overlap.append(list(holders))
                holders.remove(me)

        return body

    for exclusive in (True, False):
        scheduler = Scheduler(taking_turns())
        lock = scheduler.lock(exclusive=exclusive, name="l")
        # Taking turns: both reach the lock, actor 0 takes it, then actor 1 does if it can.
        scheduler.run([actor(0, lock), actor(1, lock)])
        assert bool(overlap) is not exclusive
        overlap.clear()


def test_actor_exceptions_are_re_raised_in_the_test_thread() -> None:
    def boom() -> None:
        checkpoint("before")
        raise KeyError("from an actor")

    scheduler = Scheduler(first)
    with pytest.raises(KeyError, match="from an actor"):
        scheduler.run([boom, lambda: None])
    with pytest.raises(SchedulerError, match="runs once"):
        scheduler.run([])


def test_lock_order_inversion_is_a_deadlock_not_a_hang() -> None:
    # Actor 1 reaches and takes b, actor 0 reaches and takes a: each then waits for the other.
    choices = iter([1, 1, 0, 0])

    def choose(runnable: Sequence[int]) -> int:
        return next(choices, runnable[0])

    scheduler = Scheduler(choose)
    a, b = scheduler.lock(name="a"), scheduler.lock(name="b")

    def ab() -> None:
        with a, b:
            pass

    def ba() -> None:
        with b, a:
            pass

    with pytest.raises(Deadlock, match="no live actor can run"):
        scheduler.run([ab, ba])
    # The controller unwound both parked actors and uninstalled itself.
    assert Scheduler(first).run([lambda: checkpoint("again")]) == [None]


def test_a_real_lock_re_acquired_is_reported() -> None:
    scheduler = Scheduler(first)
    lock = scheduler.lock()

    def twice() -> None:
        with lock, lock:
            pass

    with pytest.raises(Deadlock, match="already holds"):
        scheduler.run([twice])


def test_an_actor_blocked_outside_the_scheduler_fails_instead_of_hanging() -> None:
    release = threading.Event()
    scheduler = Scheduler(first, timeout=0.2)

    def blocked() -> None:
        release.wait(30)  # not a scheduling point: the controller must give up

    try:
        with pytest.raises(SchedulerError, match="did not"):
            scheduler.run([blocked])
    finally:
        release.set()
    # And the checkpoint hook is free again.
    assert Scheduler(first).run([lambda: None]) == [None]


def test_a_strategy_that_raises_unwinds_every_parked_actor() -> None:
    class Stop(BaseException):
        """What Hypothesis raises from ``data.draw`` when it abandons an example."""

    calls: list[int] = []

    def stop_at_the_second_choice(runnable: Sequence[int]) -> int:
        calls.append(1)
        if len(calls) > 1:
            raise Stop
        return runnable[0]

    cleaned: list[int] = []

    def actor(me: int) -> Callable[[], None]:
        def body() -> None:
            try:
                checkpoint("x")
            finally:
                cleaned.append(me)

        return body

    # The threads alive before, not their count: a thread of an earlier test (a Redis store's
    # listener, stopping once its store is collected) may end meanwhile.
    before = set(threading.enumerate())
    with pytest.raises(Stop):
        Scheduler(stop_at_the_second_choice).run([actor(0), actor(1)])
    assert cleaned == [0]  # actor 0 unwound from its checkpoint; actor 1 never began
    assert set(threading.enumerate()) <= before  # no actor's thread is left
    assert Scheduler(first).run([actor(2)]) == [None]
    assert cleaned == [0, 2]


def test_a_strategy_must_choose_a_runnable_actor() -> None:
    with pytest.raises(SchedulerError, match="not one of"):
        Scheduler(lambda _runnable: 99).run([lambda: None, lambda: None])


def test_a_scenario_that_is_not_deterministic_is_reported() -> None:
    runs: list[int] = []

    def run_one(choose: Callable[[Sequence[int]], int]) -> None:
        runs.append(1)
        actors = 2 if len(runs) == 1 else 3  # a different world on the replay
        Scheduler(choose).run([lambda: None] * actors)

    with pytest.raises(SchedulerError, match="not deterministic"):
        for _ in schedules(run_one):
            pass
