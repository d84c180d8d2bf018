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

At each point a ``choose(runnable) -> actor`` strategy picks who resumes: Hypothesis
(``data.draw(st.sampled_from(runnable))``, :func:`search`) or a depth-first enumerator of every
choice sequence (:func:`explore`), which re-runs the whole scenario once per schedule. Between two
points an actor runs alone, so a schedule -- the list of choices -- determines everything.

A :class:`SchedLock` is the lock the scheduler models: an actor parked before ``acquire`` while
another actor holds it is *not runnable*, so the scheduler never resumes an actor that cannot
proceed (and never blocks on a real lock). ``SchedLock(exclusive=False)`` is the deliberately
unlocked variant: it keeps every scheduling point but excludes nobody; handed to the library as
``_lock`` it shows that the checks find the race a missing lock lets in. No live actor runnable is
a :class:`Deadlock`; an actor that does not reach its next point within ``timeout`` (it blocked on
something the scheduler does not control) is a :class:`SchedulerError`; every actor thread is
joined with a timeout. An exception raised in an actor is captured and re-raised in the calling
thread once the run is over. Cancellation callbacks run on actor threads outside the lock.

The scenarios (:class:`Scenario`) build a fresh run per schedule, let the actors race, and check
the spec's invariant after every complete schedule, raising :class:`InvariantViolation`.
:func:`run_checks` runs them all for the ``modelcheck`` command line. Hypothesis is imported only
inside the functions that use it (it belongs to the ``modelcheck`` extra).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast, final

from .._boundary import Boundary
from .._capacity import RunCapacityCounter
from .._checkpoint import scheduled
from .._clock import Deadline
from .._context import RunContext
from .._endings import CancellationReason
from .._errors import BudgetExhausted, RunTerminated, RunTimedOut
from .._generated.tables import RunState
from .._limits import BudgetDimension, BudgetLimits, BudgetUsage

if TYPE_CHECKING:
    from types import TracebackType

    from .._cancellation import Registration
    from .._endings import RunTermination

__all__ = [
    "BUDGET_WINS",
    "CAPACITY",
    "CLIENT_DISCONNECTS",
    "PER_TOOL",
    "PROFILES",
    "RACERS",
    "TERMINAL",
    "ActorClock",
    "Choose",
    "Deadlock",
    "Exploration",
    "InvariantViolation",
    "Scenario",
    "SchedLock",
    "Scheduler",
    "SchedulerError",
    "capacity_race",
    "explore",
    "model_call_race",
    "registration_race",
    "reservation_race",
    "run_checks",
    "schedules",
    "search",
    "snapshot_race",
    "terminal_race",
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
    """A scenario's invariant failed after a complete schedule; ``trace`` is that schedule."""

    trace: tuple[str, ...] = ()


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


# -- exploring schedules --------------------------------------------------------------------------


@final
@dataclass(slots=True)
class Exploration:
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


def explore(
    scenario: Scenario,
    *,
    locked: bool = True,
    stop_at_first_violation: bool = False,
    max_schedules: int | None = None,
    release_points: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> Exploration:
    """Run ``scenario`` under every schedule (depth first), checking its invariant after each."""
    result = Exploration(scenario.name, locked, "exhaustive")
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


def search(
    scenario: Scenario,
    *,
    locked: bool = True,
    max_examples: int = 100,
    derandomize: bool = True,
    shrink: bool = False,
    release_points: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> Exploration:
    """Let Hypothesis choose ``max_examples`` schedules; stops at the first violation.

    Without ``shrink`` Hypothesis stops at the first violating schedule (then replays it once,
    so it counts twice); with it, ``last_violation_trace`` is the shrunk, minimal schedule.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: PLC0415
    from hypothesis import strategies as st  # noqa: PLC0415

    result = Exploration(scenario.name, locked, "hypothesis")
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


# -- scenarios ------------------------------------------------------------------------------------

TERMINAL: Final = ("A Run SHALL have exactly one terminal outcome", "Success wins a terminal race")
BUDGET_WINS: Final = (
    "A Run SHALL have exactly one terminal outcome",
    "Budget exhaustion wins a terminal race",
)
CLIENT_DISCONNECTS: Final = (
    "Deadline and cancellation SHALL stop subsequent controlled work",
    "Client disconnects",
)
PER_TOOL: Final = (
    "Run budgets SHALL be explicit, thread-safe, and observable",
    "Per-Tool budget is exhausted",
)
CAPACITY: Final = (
    "Tool invocation key and Run capacity primitives SHALL be safe and store-independent",
    "Run byte limit would be exceeded",
)


@final
@dataclass(frozen=True, slots=True)
class Scenario:
    """A race: ``build(scheduler, lock)`` makes fresh objects and returns the actors and a check.

    The check runs after every complete schedule; it raises :class:`InvariantViolation` or
    returns a short label of the outcome (which racer won, say) for the coverage counts.
    """

    name: str
    requirement: str
    spec_scenario: str
    actor_names: tuple[str, ...]
    build: Callable[[Scheduler, SchedLock], tuple[list[Callable[[], object]], Callable[[], str]]]

    @property
    def actors(self) -> int:
        return len(self.actor_names)

    def run(
        self,
        choose: Choose,
        *,
        locked: bool = True,
        release_points: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> str:
        """One schedule: build, race under ``choose``, check. Raises :class:`InvariantViolation`.

        With the unlocked variant any exception an actor raises counts as a violation too (the
        race may break the library's own assertions first); with the real lock only a failed
        assertion does, and anything else propagates.
        """
        scheduler = Scheduler(
            choose, timeout=timeout, names=self.actor_names, release_points=release_points
        )
        lock = scheduler.lock(exclusive=locked)
        actors, check = self.build(scheduler, lock)
        try:
            scheduler.run(actors)
            return check()
        except SchedulerError:
            raise
        except InvariantViolation as violation:
            violation.trace = scheduler.describe()
            raise
        except Exception as error:
            if locked and not isinstance(error, AssertionError):
                raise
            wrapped = InvariantViolation(f"an actor raised {error!r}")
            wrapped.trace = scheduler.describe()
            raise wrapped from error


EARLY_NS: Final = 0
LATE_NS: Final = 1_000  # the deadline in the scenarios' runs


@final
class ActorClock:
    """A clock at the deadline for some actors and before it for everyone else.

    So in a terminal race only the deadline racer can record ``TIMED_OUT`` and only the budget
    racer ``BUDGET_EXHAUSTED``: every outcome has one possible author and the winner is known. (A
    shared ``ManualClock`` past the deadline would make every reservation end the run as
    ``TIMED_OUT`` first, so budget exhaustion could never win.)
    """

    __slots__ = ("_late", "_scheduler")

    def __init__(self, scheduler: Scheduler, late: frozenset[int]) -> None:
        self._scheduler = scheduler
        self._late = late

    def monotonic_ns(self) -> int:
        return LATE_NS if self._scheduler.current() in self._late else EARLY_NS


def _limits(
    *, model_calls: int = 10**9, tool_calls: int = 10**9, per_tool_calls: int = 10**9
) -> BudgetLimits:
    generous = 10**9  # the limits a scenario does not race on
    return BudgetLimits(
        model_calls=model_calls,
        tool_calls=tool_calls,
        per_tool_calls=per_tool_calls,
        input_tokens=generous,
        output_tokens=generous,
        total_tokens=generous,
        run_bytes=generous,
    )


def _run(
    scheduler: Scheduler,
    lock: SchedLock,
    late: frozenset[int],
    *,
    model_calls: int = 10**9,
    tool_calls: int = 10**9,
    per_tool_calls: int = 10**9,
) -> RunContext:
    return RunContext.create(
        session_id="session-1",
        run_id="run-1",
        limits=_limits(
            model_calls=model_calls, tool_calls=tool_calls, per_tool_calls=per_tool_calls
        ),
        deadline=Deadline.at_ns(LATE_NS),
        clock=ActorClock(scheduler, late),
        _lock=lock.as_lock(),
    )


# The state each terminal racer records when it wins, and the reason its callbacks receive.
RACERS: Final = {
    "succeed": (RunState.SUCCESS, CancellationReason.RUN_FINISHED),
    "fail": (RunState.FAILED, CancellationReason.RUN_FINISHED),
    "cancel_user": (RunState.CANCELLED, CancellationReason.USER_REQUESTED),
    "cancel_client": (RunState.CANCELLED, CancellationReason.CLIENT_DISCONNECTED),
    "deadline": (RunState.TIMED_OUT, CancellationReason.DEADLINE_EXCEEDED),
    "budget": (RunState.BUDGET_EXHAUSTED, CancellationReason.BUDGET_EXHAUSTED),
}
TERMINAL_CALLBACKS: Final = 2  # registered before the race


def terminal_race(*racers: str) -> Scenario:
    """N racers finishing one run, each a different way (names from :data:`RACERS`).

    ``succeed()``, ``fail("x")``, ``cancel(USER_REQUESTED)``, ``cancel(CLIENT_DISCONNECTED)``,
    a ``check()`` that reads the clock at the deadline, and a ``reserve_tool_call`` past a
    Tool-call budget already used up. Invariant: exactly one terminal outcome and one winner,
    whose state it is; every finish result and every error carries that one termination; every
    callback registered before the race ran exactly once, on the winner's thread, with the reason
    matching the outcome; the budget is exhausted exactly when that is the outcome.
    """
    unknown = [name for name in racers if name not in RACERS]
    if unknown or len(set(racers)) != len(racers) or not racers:
        raise ValueError(f"racers must be distinct names from {sorted(RACERS)}, got {racers}")

    def build(
        scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        late = frozenset(i for i, name in enumerate(racers) if name == "deadline")
        ctx = _run(scheduler, lock, late, tool_calls=1, per_tool_calls=1)
        ctx.reserve_tool_call("t")  # the one Tool call allowed: the budget racer's exceeds it
        delivered: list[list[tuple[CancellationReason, int | None]]] = [
            [] for _ in range(TERMINAL_CALLBACKS)
        ]
        for record in delivered:

            def callback(
                reason: CancellationReason,
                record: list[tuple[CancellationReason, int | None]] = record,
            ) -> None:
                record.append((reason, scheduler.current()))

            ctx.cancellation.register(callback)
        claims: dict[int, bool] = {}
        seen: dict[int, RunTermination] = {}

        def make(index: int, name: str) -> Callable[[], None]:
            def finish() -> None:
                lifecycle = ctx.lifecycle
                result = lifecycle.succeed() if name == "succeed" else lifecycle.fail("x")
                claims[index] = result.changed
                seen[index] = result.termination

            def cancel() -> None:
                reason = RACERS[name][1]
                claims[index] = ctx.cancellation.cancel(reason)

            def deadline() -> None:
                try:
                    ctx.check(Boundary.TOOL)
                except RunTimedOut as error:  # only this racer reads the clock at the deadline
                    claims[index] = True
                    seen[index] = error.termination
                except RunTerminated as error:
                    claims[index] = False
                    seen[index] = error.termination
                else:
                    raise InvariantViolation("check() passed at the deadline")

            def budget() -> None:
                try:
                    ctx.reserve_tool_call("t")
                except BudgetExhausted as error:  # only this racer reserves
                    claims[index] = True
                    seen[index] = error.termination
                except RunTerminated as error:
                    claims[index] = False
                    seen[index] = error.termination
                else:
                    raise InvariantViolation("a Tool call past the budget was reserved")

            if name in ("succeed", "fail"):
                return finish
            if name.startswith("cancel"):
                return cancel
            return deadline if name == "deadline" else budget

        actors: list[Callable[[], object]] = [make(i, name) for i, name in enumerate(racers)]

        def check() -> str:
            termination = ctx.lifecycle.termination
            if termination is None:
                raise InvariantViolation("the run has no terminal outcome")
            if ctx.lifecycle.state is not termination.state:
                raise InvariantViolation(
                    f"state {ctx.lifecycle.state} but termination {termination}"
                )
            winners = [racers[i] for i in sorted(claims) if claims[i]]
            if len(winners) != 1:
                raise InvariantViolation(f"{len(winners)} racers claim the win: {winners}")
            winner = winners[0]
            state, reason = RACERS[winner]
            if termination.state is not state:
                raise InvariantViolation(f"{winner} won but the run is {termination.state.name}")
            for index, other in seen.items():
                if other is not termination:
                    raise InvariantViolation(
                        f"{racers[index]} saw {other}, the run ended {termination}"
                    )
            if ctx.cancellation.reason is not reason:
                raise InvariantViolation(
                    f"cancellation reason {ctx.cancellation.reason}, expected {reason}"
                )
            owner = racers.index(winner)
            for number, record in enumerate(delivered):
                if record != [(reason, owner)]:
                    raise InvariantViolation(
                        f"callback {number} ran {record}; expected once with {reason.name} "
                        f"on {winner}'s thread (actor {owner})"
                    )
            usage = ctx.budget.snapshot()
            if usage.tool_calls != 1 or dict(usage.per_tool_calls) != {"t": 1}:
                raise InvariantViolation(f"the refused Tool call was counted: {usage}")
            if (usage.exhausted is not None) is not (
                termination.state is RunState.BUDGET_EXHAUSTED
            ):
                raise InvariantViolation(
                    f"budget exhausted={usage.exhausted} but the run is {termination}"
                )
            return winner

        return actors, check

    label = "+".join(racers)
    requirement, spec_scenario = BUDGET_WINS if "budget" in racers else TERMINAL
    return Scenario(f"terminal[{label}]", requirement, spec_scenario, tuple(racers), build)


def registration_race(registrars: int, per_registrar: int = 1) -> Scenario:
    """Callback registration racing ``cancel(CLIENT_DISCONNECTED)``.

    Invariant: the cancel wins and the run is ``CANCELLED``; every callback ran exactly once with
    that reason, either on the cancelling thread or -- registered late -- inline, on its
    registrar's thread before ``register()`` returned; nothing stays registered; later Model and
    Tool boundaries are rejected with the same termination.
    """
    names = (*(f"register{j}" for j in range(registrars)), "cancel")
    canceller = registrars

    def build(
        scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        ctx = _run(scheduler, lock, frozenset())
        keys = range(registrars * per_registrar)
        ran: dict[int, list[tuple[CancellationReason, int | None]]] = {k: [] for k in keys}
        inline: dict[int, bool] = {}
        registrations: dict[int, Registration] = {}
        won: list[bool] = []

        def registrar(j: int) -> Callable[[], None]:
            def register_all() -> None:
                for key in range(j * per_registrar, (j + 1) * per_registrar):

                    def callback(reason: CancellationReason, key: int = key) -> None:
                        ran[key].append((reason, scheduler.current()))

                    registrations[key] = ctx.cancellation.register(callback)
                    inline[key] = bool(ran[key])

            return register_all

        def cancel() -> None:
            won.append(ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED))

        actors: list[Callable[[], object]] = [registrar(j) for j in range(registrars)]
        actors.append(cancel)

        def check() -> str:
            if won != [True]:
                raise InvariantViolation(f"the one cancel() returned {won}")
            termination = ctx.lifecycle.termination
            if termination is None or termination.state is not RunState.CANCELLED:
                raise InvariantViolation(f"the run ended {termination}, expected CANCELLED")
            late = 0
            for key, record in ran.items():
                owner = key // per_registrar
                if len(record) != 1 or record[0][0] is not CancellationReason.CLIENT_DISCONNECTED:
                    raise InvariantViolation(
                        f"callback {key} ran {record}; expected once, CLIENT_DISCONNECTED"
                    )
                where = record[0][1]
                if where == owner:
                    if not inline[key]:
                        raise InvariantViolation(
                            f"late callback {key} ran on its registrar, but not inline"
                        )
                    late += 1
                elif where != canceller:
                    raise InvariantViolation(f"callback {key} ran on actor {where}")
            if any(registration.unregister() for registration in registrations.values()):
                raise InvariantViolation("a callback was still registered after the cancellation")
            for boundary in (Boundary.MODEL, Boundary.TOOL):
                try:
                    ctx.check(boundary)
                except RunTerminated as error:
                    if error.termination is not termination:
                        raise InvariantViolation(f"{boundary} saw {error.termination}") from None
                else:
                    raise InvariantViolation(
                        f"the {boundary.name} boundary passed after the cancellation"
                    )
            return f"{late} late"

        return actors, check

    return Scenario(
        f"registration[{registrars}x{per_registrar}+cancel]",
        *CLIENT_DISCONNECTS,
        names,
        build,
    )


def reservation_race(
    plans: Sequence[Sequence[str]], *, tool_calls: int, per_tool_calls: int
) -> Scenario:
    """Per-Tool and total Tool-call reservations racing; actor ``i`` reserves ``plans[i]`` in turn.

    An actor stops at its first refusal (the run is then over). Invariant: the counters equal the
    granted calls (refusals reserve nothing, no update is lost), total == sum per Tool, no limit is
    passed; a refusal ends the run as ``BUDGET_EXHAUSTED`` on a limit that is really reached.
    """
    frozen = tuple(tuple(plan) for plan in plans)
    names = tuple(f"reserve[{','.join(plan)}]" for plan in frozen)

    def build(
        scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        ctx = _run(
            scheduler, lock, frozenset(), tool_calls=tool_calls, per_tool_calls=per_tool_calls
        )
        granted: list[str] = []
        refused: list[RunTerminated] = []

        def reserver(plan: tuple[str, ...]) -> Callable[[], None]:
            def reserve_all() -> None:
                for tool in plan:
                    try:
                        ctx.reserve_tool_call(tool)
                    except RunTerminated as error:
                        refused.append(error)
                        return
                    granted.append(tool)

            return reserve_all

        actors: list[Callable[[], object]] = [reserver(plan) for plan in frozen]

        def check() -> str:
            usage = ctx.budget.snapshot()
            per_tool = dict(usage.per_tool_calls)
            want = dict(Counter(granted))
            if usage.tool_calls != len(granted) or per_tool != want:
                raise InvariantViolation(
                    f"counted {usage.tool_calls} total, {per_tool} per Tool; "
                    f"granted {len(granted)}: {want}"
                )
            if sum(per_tool.values()) != usage.tool_calls:
                raise InvariantViolation(f"total {usage.tool_calls} != sum per Tool {per_tool}")
            if usage.tool_calls > tool_calls or any(n > per_tool_calls for n in per_tool.values()):
                raise InvariantViolation(f"over-reserved: {usage}")
            termination = ctx.lifecycle.termination
            if not refused:
                if termination is not None or usage.exhausted is not None:
                    raise InvariantViolation(
                        f"nothing refused, yet the run is {termination}, {usage}"
                    )
                return "all granted"
            if termination is None or termination.state is not RunState.BUDGET_EXHAUSTED:
                raise InvariantViolation(f"a reservation was refused, yet the run is {termination}")
            if not all(isinstance(error, BudgetExhausted) for error in refused):
                raise InvariantViolation(f"refusals: {refused}")
            if any(error.termination is not termination for error in refused):
                raise InvariantViolation("a refusal carries another termination")
            if usage.exhausted is BudgetDimension.TOOL_CALLS:
                reached = usage.tool_calls == tool_calls
            elif usage.exhausted is BudgetDimension.PER_TOOL_CALLS:
                reached = per_tool_calls in per_tool.values()
            else:
                reached = False
            if not reached:
                raise InvariantViolation(
                    f"exhausted {usage.exhausted} but no such limit is reached: {usage}"
                )
            assert usage.exhausted is not None
            return usage.exhausted.value

        return actors, check

    return Scenario(
        f"reservations[{' | '.join(','.join(p) for p in frozen)}; "
        f"total {tool_calls}, per Tool {per_tool_calls}]",
        *PER_TOOL,
        names,
        build,
    )


def model_call_race(calls: Sequence[int], *, limit: int) -> Scenario:
    """Model-call reservations racing; actor ``i`` reserves ``calls[i]`` Model calls in turn.

    Every call of one actor after its first is the plain granted path, so a reservation that
    read and wrote the counter outside the run's lock would lose an update here. Invariant: the
    counter equals the granted calls and never passes the limit; a refusal ends the run as
    ``BUDGET_EXHAUSTED`` on ``MODEL_CALLS`` with the limit really reached.
    """
    frozen = tuple(calls)
    names = tuple(f"reserve_model_call x{n}" for n in frozen)

    def build(
        scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        ctx = _run(scheduler, lock, frozenset(), model_calls=limit)
        granted: list[int] = []
        refused: list[RunTerminated] = []

        def reserver(actor: int, n: int) -> Callable[[], None]:
            def reserve_all() -> None:
                for _ in range(n):
                    try:
                        ctx.reserve_model_call()
                    except RunTerminated as error:
                        refused.append(error)
                        return
                    granted.append(actor)

            return reserve_all

        actors: list[Callable[[], object]] = [reserver(i, n) for i, n in enumerate(frozen)]

        def check() -> str:
            usage = ctx.budget.snapshot()
            if usage.model_calls != len(granted) or usage.model_calls > limit:
                raise InvariantViolation(
                    f"counted {usage.model_calls} Model calls, granted {len(granted)}, "
                    f"limit {limit}"
                )
            if not refused:
                return "all granted"
            exhausted = usage.exhausted is BudgetDimension.MODEL_CALLS
            if not exhausted or usage.model_calls != limit:
                raise InvariantViolation(f"refused with {usage}")
            return "exhausted"

        return actors, check

    return Scenario(
        f"model calls[{' | '.join(map(str, frozen))}; limit {limit}]", *PER_TOOL, names, build
    )


def snapshot_race(plan: Sequence[str], *, snapshots: int = 2) -> Scenario:
    """A reader taking budget snapshots while a reserver reserves ``plan``'s Tool calls.

    Invariant: every snapshot is one decision -- its total equals the sum of its per-Tool counts,
    and the counts it shows are a prefix of the reservations (never more than were granted).
    """
    frozen = tuple(plan)
    names = (f"reserve[{','.join(frozen)}]", f"snapshot x{snapshots}")

    def build(
        scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        ctx = _run(scheduler, lock, frozenset())
        seen: list[BudgetUsage] = []

        def reserve_all() -> None:
            for tool in frozen:
                ctx.reserve_tool_call(tool)

        def read() -> None:
            for _ in range(snapshots):
                seen.append(ctx.budget.snapshot())

        def check() -> str:
            for usage in seen:
                per_tool = dict(usage.per_tool_calls)
                if usage.tool_calls != sum(per_tool.values()):
                    raise InvariantViolation(f"a torn snapshot: {usage.tool_calls} != {per_tool}")
                prefix = Counter(frozen[: usage.tool_calls])
                if per_tool != dict(prefix):
                    raise InvariantViolation(f"snapshot {per_tool} is not a prefix of {frozen}")
            return "consistent"

        return [reserve_all, read], check

    return Scenario(f"snapshot[{','.join(frozen)}]", *PER_TOOL, names, build)


def capacity_race(sizes: Sequence[Sequence[int]], *, limit: int) -> Scenario:
    """``RunCapacityCounter.try_reserve`` racing; actor ``i`` tries ``sizes[i]`` in turn.

    Invariant: never above the limit; used == the sum of accepted reservations; every refusal is
    justified by the final usage (usage only grows, so ``used + n > limit`` still holds).
    """
    frozen = tuple(tuple(plan) for plan in sizes)
    names = tuple(f"reserve[{','.join(map(str, plan))}]" for plan in frozen)

    def build(
        _scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        counter = RunCapacityCounter(limit, _lock=lock.as_lock())
        accepted: list[int] = []
        rejected: list[int] = []

        def reserver(plan: tuple[int, ...]) -> Callable[[], None]:
            def reserve_all() -> None:
                for n in plan:
                    (accepted if counter.try_reserve(n) else rejected).append(n)

            return reserve_all

        actors: list[Callable[[], object]] = [reserver(plan) for plan in frozen]

        def check() -> str:
            used = counter.used
            if used > limit:
                raise InvariantViolation(f"used {used} > limit {limit}")
            if used != sum(accepted):
                raise InvariantViolation(f"used {used} != sum of accepted {accepted}")
            if any(used + n <= limit for n in rejected):
                raise InvariantViolation(
                    f"a reservation was refused although it fits: {rejected}, used {used}"
                )
            return f"used {used}"

        return actors, check

    return Scenario(
        f"capacity[{' | '.join(','.join(map(str, p)) for p in frozen)}; limit {limit}]",
        *CAPACITY,
        names,
        build,
    )


# -- the command line's entry point ---------------------------------------------------------------

PROFILES: Final = ("ci", "dev", "deep")


@final
@dataclass(frozen=True, slots=True)
class _Check:
    """One entry of a profile: a scenario, how its schedules are chosen, and how many."""

    scenario: Scenario
    examples: int | None = None  # None: every schedule (exhaustive); else Hypothesis examples
    release_points: bool = False


def _plan(profile: str) -> list[_Check]:
    two = [
        terminal_race("succeed", "fail"),
        terminal_race("budget", "fail"),
        terminal_race("cancel_client", "deadline"),
        terminal_race("cancel_user", "cancel_client"),
        registration_race(1, 2),
        reservation_race([["a"], ["a"]], tool_calls=2, per_tool_calls=1),
        reservation_race([["a", "b"], ["b"]], tool_calls=2, per_tool_calls=2),
        model_call_race([2, 1], limit=2),
        snapshot_race(["a", "b"]),
        capacity_race([[3], [3]], limit=5),
        capacity_race([[2, 3], [3]], limit=5),
    ]
    three = [
        terminal_race("succeed", "fail", "cancel_user"),
        terminal_race("budget", "fail", "deadline"),
        registration_race(2, 1),
        reservation_race([["a"], ["a"], ["b"]], tool_calls=2, per_tool_calls=1),
        capacity_race([[3], [2], [2]], limit=5),
    ]
    every_racer = terminal_race(*RACERS)
    four = terminal_race("succeed", "fail", "deadline", "budget")
    if profile != "deep":
        return [
            *(_Check(s) for s in two + three),
            *(_Check(s, release_points=True) for s in two),
            _Check(every_racer, examples=50),
            _Check(four, examples=50),
        ]
    raced = {frozenset(s.actor_names) for s in two}
    names = list(RACERS)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    two += [terminal_race(a, b) for a, b in pairs if frozenset((a, b)) not in raced]
    three += [
        terminal_race("succeed", "cancel_client", "budget"),
        terminal_race("fail", "cancel_user", "deadline"),
        registration_race(1, 3),
        reservation_race([["a", "b"], ["a"], ["b"]], tool_calls=2, per_tool_calls=1),
        capacity_race([[2, 3], [3], [1]], limit=5),
    ]
    fours = [
        four,
        registration_race(3, 1),
        reservation_race([["a"], ["a"], ["b"], ["b"]], tool_calls=3, per_tool_calls=1),
        capacity_race([[3], [2], [2], [1]], limit=5),
    ]
    return [
        *(_Check(s) for s in two + three + fours),
        *(_Check(s, release_points=True) for s in two + three),
        _Check(every_racer, examples=2_000),
        _Check(four, examples=2_000),
        _Check(terminal_race("cancel_user", "cancel_client", "deadline", "budget"), examples=2_000),
        _Check(registration_race(4, 2), examples=1_000),
        _Check(
            reservation_race([["a", "b"], ["a"], ["b"], ["a"]], tool_calls=3, per_tool_calls=2),
            examples=1_000,
        ),
        _Check(capacity_race([[2, 3], [3], [1], [4]], limit=6), examples=1_000),
    ]


def run_checks(profile: str) -> dict[str, Any]:
    """Run the scheduled race checks; a JSON-ready summary.

    Every scenario runs twice: with the real lock (no schedule may violate its invariant) and with
    the deliberately unlocked variant until the first violation (which must be found). ``ci``
    (a few seconds, derandomized): every two- and three-actor scenario exhaustively, the two-actor
    ones also with a scheduling point after each release, and the four- and six-racer terminal
    races under 50 Hypothesis-chosen schedules each. ``dev``: the same with random Hypothesis
    seeds. ``deep`` (minutes): more scenarios, four actors exhaustively, release points for every
    two- and three-actor scenario, and 1,000-2,000 Hypothesis schedules of four to six actors.
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    started = time.perf_counter()
    details: list[dict[str, Any]] = []
    found = 0
    passed = True
    total = 0
    for check in _plan(profile):
        scenario, examples, release = check.scenario, check.examples, check.release_points
        if examples is None:
            checked = explore(scenario, release_points=release)
            broken = explore(
                scenario, locked=False, release_points=release, stop_at_first_violation=True
            )
            ok = checked.complete and checked.violations == 0 and broken.violations > 0
        else:
            derandomize = profile == "ci"
            checked = search(scenario, max_examples=examples, derandomize=derandomize)
            broken = search(scenario, locked=False, max_examples=examples, derandomize=derandomize)
            ok = checked.violations == 0 and broken.violations > 0
        found += broken.violations > 0
        passed = passed and ok
        total += checked.schedules + broken.schedules
        details.append(
            {
                "scenario": scenario.name,
                "requirement": scenario.requirement,
                "spec_scenario": scenario.spec_scenario,
                "actors": scenario.actors,
                "release_points": release,
                "passed": ok,
                "locked": checked.summary(),
                "unlocked": broken.summary(),
            }
        )
    return {
        "profile": profile,
        "scenarios": len(details),
        "schedules": total,
        "races_found_in_unlocked_variants": found,
        "passed": passed,
        "seconds": round(time.perf_counter() - started, 3),
        "details": details,
    }
