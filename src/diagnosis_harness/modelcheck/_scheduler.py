"""A deterministic scheduler of real threads, and the race scenarios it checks.

Theory of operation. :class:`Scheduler` runs K actor callables on K real threads, but only one of
them runs at a time: every actor *parks* at each scheduling point and the controller (the calling
thread) wakes exactly one parked actor, which runs until its next point. The points are

* the start of the actor,
* every :func:`~diagnosis_harness._checkpoint.checkpoint` the library passes (installed with
  :func:`~diagnosis_harness._checkpoint.scheduled` for the duration of :meth:`Scheduler.run`),
* before each acquire of a :class:`SchedLock` (so another actor may take the lock first),
* after each release of a :class:`SchedLock` (so a waiter may run before the releaser goes on) --
  only with ``release_points=True``.

Without release points the code an actor runs after a release, up to its next point, stays with
the section it left. That loses no behaviour of the library: everything it shares between threads
is written under the run's lock (or the counter's), so what follows a release -- delivering the
callbacks it took, returning, the next call's lock-free reads of state it already decided --
commutes with the other actors' steps up to the next point, where they may run anyway. It cuts
the schedules of a three-actor terminal race from 3,660 to 210 (two actors: 32 to 10); the checks
run both ways, two actors with release points in ``ci``, three in ``deep``.

A :class:`SchedLock` is the lock the scheduler models: an actor parked before ``acquire`` while
another actor holds it is *not runnable*, so the scheduler never resumes an actor that cannot
proceed (and never blocks on a real lock). ``SchedLock(exclusive=False)`` is the deliberately
unlocked variant: it keeps every scheduling point but excludes nobody; handed to the library as
``_lock`` it shows that the checks find the race a missing lock lets in. No live actor runnable is
a :class:`Deadlock`; an actor that does not reach its next point within ``timeout`` (it blocked on
something the scheduler does not control) is a :class:`SchedulerError`; every actor thread is
joined with a timeout. An exception raised in an actor is captured and re-raised in the calling
thread once the run is over. Cancellation callbacks run on actor threads outside the lock.

The exploration of schedules is :mod:`._schedules`; the races, :mod:`._races`; the checks the
command runs, :mod:`._race_checks`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias, cast, final

from .._checkpoint import scheduled

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "DEFAULT_TIMEOUT",
    "Choose",
    "Deadlock",
    "InvariantViolation",
    "SchedLock",
    "Scheduler",
    "SchedulerError",
]

Choose: TypeAlias = Callable[[Sequence[int]], int]
"""``choose(runnable)``: the runnable actors' indices, ascending; returns the one to resume."""

DEFAULT_TIMEOUT: Final = 10.0  # seconds an actor may take between two points, and per join


class SchedulerError(RuntimeError):
    """The scheduler could not run the scenario: a bug in the scenario or in the scheduler."""


@final
class Deadlock(SchedulerError):
    """Every live actor waits for a :class:`SchedLock` another actor holds."""


class InvariantViolation(AssertionError):
    """A scenario's invariant failed after a complete schedule; ``trace`` is that schedule
    (one ``"actor: site"`` per resume), ``choices`` the actor picked at each choice point."""

    trace: tuple[str, ...] = ()
    choices: tuple[int, ...] = ()


class _Abort(BaseException):
    """Unwinds a parked actor when its run is abandoned (never escapes the actor's thread)."""


@final
@dataclass(frozen=True, slots=True)
class _Point:
    """Where a parked actor waits: a site name, and the lock it is about to acquire, if any."""

    site: str
    lock: SchedLock | None = None


_START = _Point("start")
_OUTSIDE = -1  # a SchedLock's holder when a non-actor thread (setup or checks) holds it


@final
class SchedLock:
    """A lock the :class:`Scheduler` models; pass :meth:`as_lock` wherever a ``_lock`` is taken.

    On an actor thread ``acquire`` is a scheduling point and waits cooperatively: the actor is not
    runnable while another actor holds the lock. With the scheduler's ``release_points``,
    ``release`` is a scheduling point once the lock is free. On any other thread (building the
    scenario, checking it afterwards) it is a plain, non-blocking bookkeeping lock.
    ``exclusive=False`` keeps the points but excludes nobody: the "deliberately unlocked"
    variant. Not re-entrant, like ``threading.Lock``.
    """

    __slots__ = ("_exclusive", "_holder", "_name", "_scheduler")

    def __init__(self, scheduler: Scheduler, *, exclusive: bool = True, name: str = "lock") -> None:
        self._scheduler = scheduler
        self._exclusive = exclusive
        self._name = name
        self._holder: int | None = None  # actor index, _OUTSIDE, or None when free

    @property
    def exclusive(self) -> bool:
        return self._exclusive

    @property
    def name(self) -> str:
        return self._name

    @property
    def holder(self) -> int | None:
        """The actor holding the lock (``_OUTSIDE`` off actor threads), or ``None`` when free."""
        return self._holder

    def as_lock(self) -> threading.Lock:
        """This lock, typed as what ``RunContext.create(_lock=...)`` and friends accept."""
        return cast("threading.Lock", self)

    def locked(self) -> bool:
        return self._holder is not None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock; on an actor thread, after letting the scheduler run another actor."""
        del timeout  # the scheduler decides when a waiter runs; a lock never times out here
        actor = self._scheduler.current()
        if actor is None:
            if self._holder is not None:
                raise SchedulerError(
                    f"{self._name} is held by actor {self._holder} outside a scheduled run"
                )
            if self._exclusive:
                self._holder = _OUTSIDE
            return True
        if self._exclusive and self._holder == actor:
            raise Deadlock(f"actor {actor} acquires {self._name}, which it already holds")
        if blocking:
            # Resumed only once the lock is free (see Scheduler._blocked).
            self._scheduler.park(actor, _Point(f"acquire {self._name}", self))
        if self._exclusive:
            if self._holder is not None:
                return False  # only a non-blocking acquire gets here
            self._holder = actor
        return True

    def release(self) -> None:
        actor = self._scheduler.current()
        if self._exclusive:
            expected = _OUTSIDE if actor is None else actor
            if self._holder != expected:
                raise RuntimeError(f"release of {self._name}, which this thread does not hold")
            self._holder = None
        if actor is not None and self._scheduler.parks_on_release:
            self._scheduler.park(actor, _Point(f"release {self._name}"))

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        kind = "exclusive" if self._exclusive else "unlocked"
        return f"SchedLock({self._name!r}, {kind}, holder={self._holder})"


@final
class Scheduler:
    """Runs actor callables on real threads, one at a time, switching only at points.

    One scheduler runs once: build it, make its locks (:meth:`lock`), build the scenario's objects
    with them, then :meth:`run` the actors. ``trace`` lists every resume as ``(actor, site)``.
    """

    def __init__(
        self,
        choose: Choose,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_steps: int = 100_000,
        release_points: bool = False,
        names: Sequence[str] = (),
    ) -> None:
        self._choose = choose
        self._timeout = timeout
        self._max_steps = max_steps
        self._release_points = release_points
        self._names = tuple(names)
        self._actor_of: dict[int, int] = {}  # thread ident -> actor index
        self._go: list[threading.Semaphore] = []
        self._back = threading.Semaphore(0)
        self._pending: list[_Point | None] = []  # None once the actor has finished
        self._results: list[object] = []
        self._errors: list[tuple[int, BaseException]] = []  # in the order they were raised
        self._aborted = False
        self._used = False
        self.trace: list[tuple[int, str]] = []

    def lock(self, *, exclusive: bool = True, name: str = "run lock") -> SchedLock:
        return SchedLock(self, exclusive=exclusive, name=name)

    @property
    def parks_on_release(self) -> bool:
        """Whether releasing a lock is a scheduling point (``release_points``, not aborted)."""
        return self._release_points and not self._aborted

    def current(self) -> int | None:
        """The index of the actor running on the calling thread, or ``None`` off actor threads."""
        return self._actor_of.get(threading.get_ident())

    def name(self, actor: int) -> str:
        return self._names[actor] if actor < len(self._names) else f"actor {actor}"

    def describe(self) -> tuple[str, ...]:
        """The trace as ``"name: site"`` lines, one per resume."""
        return tuple(f"{self.name(actor)}: {site}" for actor, site in self.trace)

    # -- the controller ---------------------------------------------------------------------------

    def run(self, actors: Sequence[Callable[[], object]]) -> list[object]:
        """Run every actor to its end under ``choose``; their results, in order.

        Re-raises the first exception an actor raised (after every actor has finished).
        """
        if self._used:
            raise SchedulerError("a Scheduler runs once; build a new one per schedule")
        self._used = True
        count = len(actors)
        self._go = [threading.Semaphore(0) for _ in range(count)]
        self._pending = [_START] * count
        self._results = [None] * count
        threads = [
            threading.Thread(
                target=self._actor_main,
                args=(index, actor),
                name=f"sched-{self.name(index)}",
                daemon=True,
            )
            for index, actor in enumerate(actors)
        ]
        with scheduled(self._checkpoint):
            try:
                for thread in threads:
                    thread.start()
                for index in range(count):  # every actor parks at its start first
                    self._wait_back(index, "its start")
                self._loop()
            finally:
                self._abort_and_join(threads)
        if self._errors:
            actor, error = self._errors[0]
            note = getattr(error, "add_note", None)
            if note is not None:
                note(f"raised in {self.name(actor)} of a scheduled run")
            raise error
        return self._results

    def _loop(self) -> None:
        steps = 0
        while True:
            live = [i for i, point in enumerate(self._pending) if point is not None]
            if not live:
                return
            runnable = [i for i in live if not self._blocked(i)]
            if not runnable:
                waits = ", ".join(f"{self.name(i)} at {self._pending[i]}" for i in live)
                raise Deadlock(f"no live actor can run: {waits}")
            steps += 1
            if steps > self._max_steps:
                raise SchedulerError(f"more than {self._max_steps} steps: a livelock?")
            actor = runnable[0] if len(runnable) == 1 else self._choose(runnable)
            if actor not in runnable:
                raise SchedulerError(f"choose returned {actor!r}, not one of {runnable}")
            point = self._pending[actor]
            assert point is not None
            self.trace.append((actor, point.site))
            self._go[actor].release()
            self._wait_back(actor, point.site)

    def _blocked(self, actor: int) -> bool:
        point = self._pending[actor]
        lock = None if point is None else point.lock
        return lock is not None and lock.exclusive and lock.holder is not None

    def _wait_back(self, actor: int, site: str) -> None:
        if not self._back.acquire(timeout=self._timeout):
            raise SchedulerError(
                f"{self.name(actor)} did not reach a scheduling point within {self._timeout} s "
                f"after {site}: it is blocked on something the scheduler does not control "
                f"(a real lock, an event, a sleep?)"
            )

    def _abort_and_join(self, threads: list[threading.Thread]) -> None:
        self._aborted = True
        for go in self._go:
            go.release()  # parked actors wake, see _aborted and unwind
        stuck = []
        for thread in threads:
            if thread.ident is None:
                continue  # never started
            thread.join(self._timeout)
            if thread.is_alive():
                stuck.append(thread.name)
        if stuck:
            raise SchedulerError(f"actor threads did not end within {self._timeout} s: {stuck}")

    # -- on actor threads -------------------------------------------------------------------------

    def _actor_main(self, actor: int, body: Callable[[], object]) -> None:
        self._actor_of[threading.get_ident()] = actor
        try:
            self.park(actor, _START)
            self._results[actor] = body()
        except _Abort:
            pass
        except BaseException as error:  # re-raised in the controller by run()
            self._errors.append((actor, error))
        finally:
            self._pending[actor] = None
            self._back.release()

    def _checkpoint(self, site: str) -> None:
        actor = self.current()
        if actor is not None:
            self.park(actor, _Point(site))

    def park(self, actor: int, point: _Point) -> None:
        """Hand control back to the controller and wait until it picks this actor again."""
        if self._aborted:
            raise _Abort
        self._pending[actor] = point
        self._back.release()
        go = self._go[actor]
        while not go.acquire(timeout=0.5):
            if self._aborted:
                raise _Abort
        if self._aborted:
            raise _Abort
