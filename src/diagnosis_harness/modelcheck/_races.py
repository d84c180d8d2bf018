"""The race scenarios the deterministic scheduler checks, each tied to one spec scenario.

Theory of operation. A :class:`Scenario` builds fresh objects per schedule and returns the racing
actors and a check of the spec's invariant, which runs after every complete schedule and raises
:class:`~._scheduler.InvariantViolation`. Each race is one small :class:`Race` class: its
constructor makes the schedule's fresh objects -- a run on an :class:`ActorClock` with the
scheduler's lock, callbacks that record where they ran -- :meth:`Race.actors` returns the racers
and :meth:`Race.verdict` is the check. Invariant: a :class:`Race` object lives for one schedule
only, so nothing one schedule did is seen by the next. Each scenario names the one (requirement,
scenario) of the spec it exercises (``requirement``, ``spec_scenario``): a violation is charged
to it alone. The builders, which the profiles and the tests call: :func:`terminal_race`,
:func:`registration_race`, :func:`reservation_race`, :func:`model_call_race`,
:func:`snapshot_race`, :func:`capacity_race`, :func:`usage_race`, :func:`money_race`,
:func:`paid_tool_race` and :func:`tree_cancel_race` (a run tree: a parent's cancel racing its
children's reservations).
"""

from __future__ import annotations

import abc
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Final, final

from .._boundary import Boundary
from .._capacity import RunCapacityCounter
from .._clock import Deadline, ManualClock
from .._context import RunContext
from .._endings import CancellationReason
from .._errors import BudgetExhausted, RunTerminated, RunTimedOut
from .._generated.tables import RunState
from .._limits import BudgetDimension, BudgetLimits, BudgetUsage
from ._scheduler import (
    DEFAULT_TIMEOUT,
    Choose,
    InvariantViolation,
    SchedLock,
    Scheduler,
    SchedulerError,
)
from ._spec_scenarios import (
    BUDGET_WINS,
    CAPACITY,
    CLIENT_DISCONNECTS,
    PER_TOOL,
    SUCCESS_WINS,
    TOKENS_EXCEED,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._cancellation import Registration
    from .._endings import RunTermination
    from ._spec_scenarios import SpecScenario

__all__ = [
    "BUDGET_WINS",
    "CAPACITY",
    "CLIENT_DISCONNECTS",
    "PER_TOOL",
    "RACERS",
    "TERMINAL",
    "ActorClock",
    "CapacityRace",
    "ModelCallRace",
    "MoneyRace",
    "Race",
    "RegistrationRace",
    "ReservationRace",
    "Scenario",
    "SnapshotRace",
    "TerminalRace",
    "TreeCancelRace",
    "UsageRace",
    "capacity_race",
    "model_call_race",
    "money_race",
    "paid_tool_race",
    "registration_race",
    "reservation_race",
    "snapshot_race",
    "terminal_race",
    "tree_cancel_race",
    "usage_race",
]


TERMINAL: Final = SUCCESS_WINS


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
        picked: list[int] = []

        def recording(runnable: Sequence[int]) -> int:
            actor = choose(runnable)
            picked.append(actor)
            return actor

        scheduler = Scheduler(
            recording, timeout=timeout, names=self.actor_names, release_points=release_points
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
            violation.choices = tuple(picked)
            raise
        except Exception as error:
            if locked and not isinstance(error, AssertionError):
                raise
            wrapped = InvariantViolation(f"an actor raised {error!r}")
            wrapped.trace = scheduler.describe()
            wrapped.choices = tuple(picked)
            raise wrapped from error


class Race(abc.ABC):
    """One schedule of a race: the constructor makes its fresh objects (before any actor runs),
    :meth:`actors` the racers, :meth:`verdict` the invariant once every actor has finished."""

    __slots__ = ()

    @abc.abstractmethod
    def actors(self) -> list[Callable[[], object]]:
        """The racing actors, in the order of the scenario's ``actor_names``."""

    @abc.abstractmethod
    def verdict(self) -> str:
        """Raise :class:`InvariantViolation`, or return a short label of the outcome."""


def _scenario(
    name: str,
    spec: SpecScenario,
    actor_names: tuple[str, ...],
    make: Callable[[Scheduler, SchedLock], Race],
) -> Scenario:
    """A :class:`Scenario` whose every schedule races a fresh ``make(scheduler, lock)``."""

    def build(
        scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        race = make(scheduler, lock)
        return race.actors(), race.verdict

    requirement, spec_scenario = spec
    return Scenario(name, requirement, spec_scenario, actor_names, build)


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
    *,
    model_calls: int = 10**9,
    tool_calls: int = 10**9,
    per_tool_calls: int = 10**9,
    cost: Decimal | None = None,
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
        cost=cost,
    )


def _new_run(
    scheduler: Scheduler,
    lock: SchedLock,
    late: frozenset[int],
    *,
    model_calls: int = 10**9,
    tool_calls: int = 10**9,
    per_tool_calls: int = 10**9,
    cost: Decimal | None = None,
    run_id: str = "run-1",
) -> RunContext:
    return RunContext.create(
        session_id="session-1",
        run_id=run_id,
        limits=_limits(
            model_calls=model_calls, tool_calls=tool_calls, per_tool_calls=per_tool_calls, cost=cost
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


# -- the terminal race -----------------------------------------------------------------------------


@final
class TerminalRace(Race):
    """Racers each finishing one run a different way (names from :data:`RACERS`).

    Invariant: exactly one terminal outcome and one winner, whose state it is; every finish
    result and every error carries that one termination; every callback registered before the
    race ran exactly once, on the winner's thread, with the reason matching the outcome; the
    budget is exhausted exactly when that is the outcome.
    """

    __slots__ = ("_claims", "_ctx", "_delivered", "_racers", "_scheduler", "_seen")

    def __init__(self, scheduler: Scheduler, lock: SchedLock, racers: tuple[str, ...]) -> None:
        self._scheduler = scheduler
        self._racers = racers
        late = frozenset(i for i, name in enumerate(racers) if name == "deadline")
        self._ctx = _new_run(scheduler, lock, late, tool_calls=1, per_tool_calls=1)
        self._ctx.reserve_tool_call("t")  # the one Tool call allowed: the budget racer's exceeds it
        self._delivered: list[list[tuple[CancellationReason, int | None]]] = [
            [] for _ in range(TERMINAL_CALLBACKS)
        ]
        for record in self._delivered:
            self._ctx.cancellation.register(self._callback(record))
        self._claims: dict[int, bool] = {}  # actor -> whether its call says it ended the run
        self._seen: dict[int, RunTermination] = {}  # actor -> the termination its call returned

    def _callback(
        self, record: list[tuple[CancellationReason, int | None]]
    ) -> Callable[[CancellationReason], None]:
        def callback(reason: CancellationReason) -> None:
            record.append((reason, self._scheduler.current()))

        return callback

    def actors(self) -> list[Callable[[], object]]:
        return [self._actor(index, name) for index, name in enumerate(self._racers)]

    def _actor(self, index: int, name: str) -> Callable[[], None]:
        if name in ("succeed", "fail"):
            return lambda: self._finish(index, name)
        if name.startswith("cancel"):
            return lambda: self._cancel(index, name)
        if name == "deadline":
            return lambda: self._deadline(index)
        return lambda: self._budget(index)

    def _finish(self, index: int, name: str) -> None:
        lifecycle = self._ctx.lifecycle
        result = lifecycle.succeed() if name == "succeed" else lifecycle.fail("x")
        self._claims[index] = result.changed
        self._seen[index] = result.termination

    def _cancel(self, index: int, name: str) -> None:
        self._claims[index] = self._ctx.cancellation.cancel(RACERS[name][1])

    def _deadline(self, index: int) -> None:
        try:
            self._ctx.check(Boundary.TOOL)
        except RunTimedOut as error:  # only this racer reads the clock at the deadline
            self._claims[index] = True
            self._seen[index] = error.termination
        except RunTerminated as error:
            self._claims[index] = False
            self._seen[index] = error.termination
        else:
            raise InvariantViolation("check() passed at the deadline")

    def _budget(self, index: int) -> None:
        try:
            self._ctx.reserve_tool_call("t")
        except BudgetExhausted as error:  # only this racer reserves
            self._claims[index] = True
            self._seen[index] = error.termination
        except RunTerminated as error:
            self._claims[index] = False
            self._seen[index] = error.termination
        else:
            raise InvariantViolation("a Tool call past the budget was reserved")

    def verdict(self) -> str:
        ctx, racers = self._ctx, self._racers
        termination = ctx.lifecycle.termination
        if termination is None:
            raise InvariantViolation("the run has no terminal outcome")
        if ctx.lifecycle.state is not termination.state:
            raise InvariantViolation(f"state {ctx.lifecycle.state} but termination {termination}")
        winners = [racers[i] for i in sorted(self._claims) if self._claims[i]]
        if len(winners) != 1:
            raise InvariantViolation(f"{len(winners)} racers claim the win: {winners}")
        winner = winners[0]
        if termination.state is not RACERS[winner][0]:
            raise InvariantViolation(f"{winner} won but the run is {termination.state.name}")
        for index, other in self._seen.items():
            if other is not termination:
                raise InvariantViolation(
                    f"{racers[index]} saw {other}, the run ended {termination}"
                )
        self._check_delivery(winner)
        self._check_budget(termination)
        return winner

    def _check_delivery(self, winner: str) -> None:
        """The cancellation's reason is the winner's; each callback ran once, on its thread."""
        reason = RACERS[winner][1]
        if self._ctx.cancellation.reason is not reason:
            raise InvariantViolation(
                f"cancellation reason {self._ctx.cancellation.reason}, expected {reason}"
            )
        owner = self._racers.index(winner)
        for number, record in enumerate(self._delivered):
            if record != [(reason, owner)]:
                raise InvariantViolation(
                    f"callback {number} ran {record}; expected once with {reason.name} "
                    f"on {winner}'s thread (actor {owner})"
                )

    def _check_budget(self, termination: RunTermination) -> None:
        """The refused Tool call was not counted; the budget is exhausted iff that is the end."""
        usage = self._ctx.budget.snapshot()
        if usage.tool_calls != 1 or dict(usage.per_tool_calls) != {"t": 1}:
            raise InvariantViolation(f"the refused Tool call was counted: {usage}")
        if (usage.exhausted is not None) is not (termination.state is RunState.BUDGET_EXHAUSTED):
            raise InvariantViolation(
                f"budget exhausted={usage.exhausted} but the run is {termination}"
            )


def terminal_race(*racers: str) -> Scenario:
    """N racers finishing one run, each a different way (names from :data:`RACERS`).

    ``succeed()``, ``fail("x")``, ``cancel(USER_REQUESTED)``, ``cancel(CLIENT_DISCONNECTED)``,
    a ``check()`` that reads the clock at the deadline, and a ``reserve_tool_call`` past a
    Tool-call budget already used up. The invariant is :class:`TerminalRace`'s.
    """
    unknown = [name for name in racers if name not in RACERS]
    if unknown or len(set(racers)) != len(racers) or not racers:
        raise ValueError(f"racers must be distinct names from {sorted(RACERS)}, got {racers}")
    spec = BUDGET_WINS if "budget" in racers else TERMINAL
    return _scenario(
        f"terminal[{'+'.join(racers)}]",
        spec,
        tuple(racers),
        lambda scheduler, lock: TerminalRace(scheduler, lock, tuple(racers)),
    )


# -- callback registration racing a cancel ---------------------------------------------------------


@final
class RegistrationRace(Race):
    """Callback registration racing ``cancel(CLIENT_DISCONNECTED)``.

    Invariant: the cancel wins and the run is ``CANCELLED``; every callback ran exactly once with
    that reason, either on the cancelling thread or -- registered late -- inline, on its
    registrar's thread before ``register()`` returned; nothing stays registered; later Model and
    Tool boundaries are rejected with the same termination.
    """

    __slots__ = (
        "_ctx",
        "_inline",
        "_per_registrar",
        "_ran",
        "_registrars",
        "_registrations",
        "_scheduler",
        "_won",
    )

    def __init__(
        self, scheduler: Scheduler, lock: SchedLock, registrars: int, per_registrar: int
    ) -> None:
        self._scheduler = scheduler
        self._registrars = registrars
        self._per_registrar = per_registrar
        self._ctx = _new_run(scheduler, lock, frozenset())
        keys = range(registrars * per_registrar)
        # callback key -> (reason, actor) of each time it ran
        self._ran: dict[int, list[tuple[CancellationReason, int | None]]] = {k: [] for k in keys}
        self._inline: dict[int, bool] = {}  # key -> whether it had run when register() returned
        self._registrations: dict[int, Registration] = {}
        self._won: list[bool] = []  # what the one cancel() returned

    def actors(self) -> list[Callable[[], object]]:
        actors: list[Callable[[], object]] = [self._registrar(j) for j in range(self._registrars)]
        actors.append(self._cancel)
        return actors

    def _registrar(self, j: int) -> Callable[[], None]:
        def register_all() -> None:
            for key in range(j * self._per_registrar, (j + 1) * self._per_registrar):
                self._registrations[key] = self._ctx.cancellation.register(self._callback(key))
                self._inline[key] = bool(self._ran[key])

        return register_all

    def _callback(self, key: int) -> Callable[[CancellationReason], None]:
        def callback(reason: CancellationReason) -> None:
            self._ran[key].append((reason, self._scheduler.current()))

        return callback

    def _cancel(self) -> None:
        self._won.append(self._ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED))

    def verdict(self) -> str:
        if self._won != [True]:
            raise InvariantViolation(f"the one cancel() returned {self._won}")
        termination = self._ctx.lifecycle.termination
        if termination is None or termination.state is not RunState.CANCELLED:
            raise InvariantViolation(f"the run ended {termination}, expected CANCELLED")
        late = sum(self._ran_late(key, record) for key, record in self._ran.items())
        if any(registration.unregister() for registration in self._registrations.values()):
            raise InvariantViolation("a callback was still registered after the cancellation")
        for boundary in (Boundary.MODEL, Boundary.TOOL):
            self._check_rejected(boundary, termination)
        return f"{late} late"

    def _ran_late(self, key: int, record: list[tuple[CancellationReason, int | None]]) -> bool:
        """Whether callback ``key`` ran inline on its registrar (else it ran on the canceller)."""
        if len(record) != 1 or record[0][0] is not CancellationReason.CLIENT_DISCONNECTED:
            raise InvariantViolation(
                f"callback {key} ran {record}; expected once, CLIENT_DISCONNECTED"
            )
        where = record[0][1]
        if where == key // self._per_registrar:
            if not self._inline[key]:
                raise InvariantViolation(
                    f"late callback {key} ran on its registrar, but not inline"
                )
            return True
        if where != self._registrars:  # the canceller is the last actor
            raise InvariantViolation(f"callback {key} ran on actor {where}")
        return False

    def _check_rejected(self, boundary: Boundary, termination: RunTermination) -> None:
        try:
            self._ctx.check(boundary)
        except RunTerminated as error:
            if error.termination is not termination:
                raise InvariantViolation(f"{boundary} saw {error.termination}") from None
        else:
            raise InvariantViolation(f"the {boundary.name} boundary passed after the cancellation")


def registration_race(registrars: int, per_registrar: int = 1) -> Scenario:
    """Callback registration racing ``cancel(CLIENT_DISCONNECTED)`` (see
    :class:`RegistrationRace`)."""
    return _scenario(
        f"registration[{registrars}x{per_registrar}+cancel]",
        CLIENT_DISCONNECTS,
        (*(f"register{j}" for j in range(registrars)), "cancel"),
        lambda scheduler, lock: RegistrationRace(scheduler, lock, registrars, per_registrar),
    )


# -- Tool-call reservations racing -----------------------------------------------------------------


@final
class ReservationRace(Race):
    """Per-Tool and total Tool-call reservations racing; actor ``i`` reserves ``plans[i]``.

    An actor stops at its first refusal (the run is then over). Invariant: the counters equal the
    granted calls (refusals reserve nothing, no update is lost), total == sum per Tool, no limit is
    passed; a refusal ends the run as ``BUDGET_EXHAUSTED`` on a limit that is really reached.
    """

    __slots__ = ("_ctx", "_granted", "_per_tool_calls", "_plans", "_refused", "_tool_calls")

    def __init__(
        self,
        scheduler: Scheduler,
        lock: SchedLock,
        plans: tuple[tuple[str, ...], ...],
        *,
        tool_calls: int,
        per_tool_calls: int,
    ) -> None:
        self._plans = plans
        self._tool_calls = tool_calls
        self._per_tool_calls = per_tool_calls
        self._ctx = _new_run(
            scheduler, lock, frozenset(), tool_calls=tool_calls, per_tool_calls=per_tool_calls
        )
        self._granted: list[str] = []
        self._refused: list[RunTerminated] = []

    def actors(self) -> list[Callable[[], object]]:
        return [self._reserver(plan) for plan in self._plans]

    def _reserver(self, plan: tuple[str, ...]) -> Callable[[], None]:
        def reserve_all() -> None:
            for tool in plan:
                try:
                    self._ctx.reserve_tool_call(tool)
                except RunTerminated as error:
                    self._refused.append(error)
                    return
                self._granted.append(tool)

        return reserve_all

    def verdict(self) -> str:
        usage = self._ctx.budget.snapshot()
        self._check_counted(usage)
        termination = self._ctx.lifecycle.termination
        if not self._refused:
            if termination is not None or usage.exhausted is not None:
                raise InvariantViolation(f"nothing refused, yet the run is {termination}, {usage}")
            return "all granted"
        if termination is None or termination.state is not RunState.BUDGET_EXHAUSTED:
            raise InvariantViolation(f"a reservation was refused, yet the run is {termination}")
        if not all(isinstance(error, BudgetExhausted) for error in self._refused):
            raise InvariantViolation(f"refusals: {self._refused}")
        if any(error.termination is not termination for error in self._refused):
            raise InvariantViolation("a refusal carries another termination")
        if not self._reached(usage):
            raise InvariantViolation(
                f"exhausted {usage.exhausted} but no such limit is reached: {usage}"
            )
        assert usage.exhausted is not None
        return usage.exhausted.value

    def _check_counted(self, usage: BudgetUsage) -> None:
        """The counters equal the granted calls; total == sum per Tool; no limit passed."""
        per_tool = dict(usage.per_tool_calls)
        want = dict(Counter(self._granted))
        if usage.tool_calls != len(self._granted) or per_tool != want:
            raise InvariantViolation(
                f"counted {usage.tool_calls} total, {per_tool} per Tool; "
                f"granted {len(self._granted)}: {want}"
            )
        if sum(per_tool.values()) != usage.tool_calls:
            raise InvariantViolation(f"total {usage.tool_calls} != sum per Tool {per_tool}")
        if usage.tool_calls > self._tool_calls or any(
            n > self._per_tool_calls for n in per_tool.values()
        ):
            raise InvariantViolation(f"over-reserved: {usage}")

    def _reached(self, usage: BudgetUsage) -> bool:
        """Whether the limit the budget says it exhausted is really reached."""
        if usage.exhausted is BudgetDimension.TOOL_CALLS:
            return usage.tool_calls == self._tool_calls
        if usage.exhausted is BudgetDimension.PER_TOOL_CALLS:
            return self._per_tool_calls in dict(usage.per_tool_calls).values()
        return False


def reservation_race(
    plans: Sequence[Sequence[str]], *, tool_calls: int, per_tool_calls: int
) -> Scenario:
    """Per-Tool and total Tool-call reservations racing; actor ``i`` reserves ``plans[i]`` in turn
    (see :class:`ReservationRace`)."""
    frozen = tuple(tuple(plan) for plan in plans)
    return _scenario(
        f"reservations[{' | '.join(','.join(p) for p in frozen)}; "
        f"total {tool_calls}, per Tool {per_tool_calls}]",
        PER_TOOL,
        tuple(f"reserve[{','.join(plan)}]" for plan in frozen),
        lambda scheduler, lock: ReservationRace(
            scheduler, lock, frozen, tool_calls=tool_calls, per_tool_calls=per_tool_calls
        ),
    )


# -- Model-call reservations racing ----------------------------------------------------------------


@final
class ModelCallRace(Race):
    """Model-call reservations racing; actor ``i`` reserves ``calls[i]`` Model calls in turn.

    Every call of one actor after its first is the plain granted path, so a reservation that
    read and wrote the counter outside the run's lock would lose an update here. Invariant: the
    counter equals the granted calls and never passes the limit; a refusal ends the run as
    ``BUDGET_EXHAUSTED`` on ``MODEL_CALLS`` with the limit really reached.
    """

    __slots__ = ("_calls", "_ctx", "_granted", "_limit", "_refused")

    def __init__(
        self, scheduler: Scheduler, lock: SchedLock, calls: tuple[int, ...], *, limit: int
    ) -> None:
        self._calls = calls
        self._limit = limit
        self._ctx = _new_run(scheduler, lock, frozenset(), model_calls=limit)
        self._granted: list[int] = []  # the actor of each granted call
        self._refused: list[RunTerminated] = []

    def actors(self) -> list[Callable[[], object]]:
        return [self._reserver(i, n) for i, n in enumerate(self._calls)]

    def _reserver(self, actor: int, n: int) -> Callable[[], None]:
        def reserve_all() -> None:
            for _ in range(n):
                try:
                    self._ctx.reserve_model_call()
                except RunTerminated as error:
                    self._refused.append(error)
                    return
                self._granted.append(actor)

        return reserve_all

    def verdict(self) -> str:
        usage, limit = self._ctx.budget.snapshot(), self._limit
        if usage.model_calls != len(self._granted) or usage.model_calls > limit:
            raise InvariantViolation(
                f"counted {usage.model_calls} Model calls, granted {len(self._granted)}, "
                f"limit {limit}"
            )
        if not self._refused:
            return "all granted"
        exhausted = usage.exhausted is BudgetDimension.MODEL_CALLS
        if not exhausted or usage.model_calls != limit:
            raise InvariantViolation(f"refused with {usage}")
        return "exhausted"


def model_call_race(calls: Sequence[int], *, limit: int) -> Scenario:
    """Model-call reservations racing; actor ``i`` reserves ``calls[i]`` Model calls in turn (see
    :class:`ModelCallRace`)."""
    frozen = tuple(calls)
    return _scenario(
        f"model calls[{' | '.join(map(str, frozen))}; limit {limit}]",
        PER_TOOL,
        tuple(f"reserve_model_call x{n}" for n in frozen),
        lambda scheduler, lock: ModelCallRace(scheduler, lock, frozen, limit=limit),
    )


# -- budget snapshots racing reservations ----------------------------------------------------------


@final
class SnapshotRace(Race):
    """A reader taking budget snapshots while a reserver reserves ``plan``'s Tool calls.

    Invariant: every snapshot is one decision -- its total equals the sum of its per-Tool counts,
    and the counts it shows are a prefix of the reservations (never more than were granted).
    """

    __slots__ = ("_ctx", "_plan", "_seen", "_snapshots")

    def __init__(
        self, scheduler: Scheduler, lock: SchedLock, plan: tuple[str, ...], *, snapshots: int
    ) -> None:
        self._plan = plan
        self._snapshots = snapshots
        self._ctx = _new_run(scheduler, lock, frozenset())
        self._seen: list[BudgetUsage] = []

    def actors(self) -> list[Callable[[], object]]:
        return [self._reserve_all, self._read]

    def _reserve_all(self) -> None:
        for tool in self._plan:
            self._ctx.reserve_tool_call(tool)

    def _read(self) -> None:
        for _ in range(self._snapshots):
            self._seen.append(self._ctx.budget.snapshot())

    def verdict(self) -> str:
        for usage in self._seen:
            per_tool = dict(usage.per_tool_calls)
            if usage.tool_calls != sum(per_tool.values()):
                raise InvariantViolation(f"a torn snapshot: {usage.tool_calls} != {per_tool}")
            prefix = Counter(self._plan[: usage.tool_calls])
            if per_tool != dict(prefix):
                raise InvariantViolation(f"snapshot {per_tool} is not a prefix of {self._plan}")
        return "consistent"


def snapshot_race(plan: Sequence[str], *, snapshots: int = 2) -> Scenario:
    """A reader taking budget snapshots while a reserver reserves ``plan``'s Tool calls (see
    :class:`SnapshotRace`)."""
    frozen = tuple(plan)
    return _scenario(
        f"snapshot[{','.join(frozen)}]",
        PER_TOOL,
        (f"reserve[{','.join(frozen)}]", f"snapshot x{snapshots}"),
        lambda scheduler, lock: SnapshotRace(scheduler, lock, frozen, snapshots=snapshots),
    )


# -- capacity reservations racing ------------------------------------------------------------------


@final
class CapacityRace(Race):
    """``RunCapacityCounter.try_reserve`` racing; actor ``i`` tries ``sizes[i]`` in turn.

    Invariant: never above the limit; used == the sum of accepted reservations; every refusal is
    justified by the final usage (usage only grows, so ``used + n > limit`` still holds).
    """

    __slots__ = ("_accepted", "_counter", "_limit", "_rejected", "_sizes")

    def __init__(self, lock: SchedLock, sizes: tuple[tuple[int, ...], ...], *, limit: int) -> None:
        self._sizes = sizes
        self._limit = limit
        self._counter = RunCapacityCounter(limit, _lock=lock.as_lock())
        self._accepted: list[int] = []
        self._rejected: list[int] = []

    def actors(self) -> list[Callable[[], object]]:
        return [self._reserver(plan) for plan in self._sizes]

    def _reserver(self, plan: tuple[int, ...]) -> Callable[[], None]:
        def reserve_all() -> None:
            for n in plan:
                (self._accepted if self._counter.try_reserve(n) else self._rejected).append(n)

        return reserve_all

    def verdict(self) -> str:
        used, limit = self._counter.used, self._limit
        if used > limit:
            raise InvariantViolation(f"used {used} > limit {limit}")
        if used != sum(self._accepted):
            raise InvariantViolation(f"used {used} != sum of accepted {self._accepted}")
        if any(used + n <= limit for n in self._rejected):
            raise InvariantViolation(
                f"a reservation was refused although it fits: {self._rejected}, used {used}"
            )
        return f"used {used}"


def capacity_race(sizes: Sequence[Sequence[int]], *, limit: int) -> Scenario:
    """``RunCapacityCounter.try_reserve`` racing; actor ``i`` tries ``sizes[i]`` in turn (see
    :class:`CapacityRace`)."""
    frozen = tuple(tuple(plan) for plan in sizes)
    return _scenario(
        f"capacity[{' | '.join(','.join(map(str, p)) for p in frozen)}; limit {limit}]",
        CAPACITY,
        tuple(f"reserve[{','.join(map(str, plan))}]" for plan in frozen),
        lambda _scheduler, lock: CapacityRace(lock, frozen, limit=limit),
    )


# -- usage reports past a limit racing another ending ---------------------------------------------

# What each racer does: a usage report past the input (or output) token limit of 10, or a cancel.
USAGE_RACERS: Final[dict[str, Callable[[RunContext], object]]] = {
    "usage_in": lambda ctx: ctx.record_token_usage(input_tokens=11, output_tokens=0),
    "usage_out": lambda ctx: ctx.record_token_usage(input_tokens=0, output_tokens=11),
    "cancel": lambda ctx: ctx.cancellation.cancel(CancellationReason.USER_REQUESTED),
}
_USAGE_REASON: Final = {
    RunState.BUDGET_EXHAUSTED: CancellationReason.BUDGET_EXHAUSTED,
    RunState.CANCELLED: CancellationReason.USER_REQUESTED,
}
_USAGE_LIMITS: Final = BudgetLimits(
    model_calls=1,
    tool_calls=1,
    per_tool_calls=1,
    input_tokens=10,
    output_tokens=10,
    total_tokens=100,
    run_bytes=1,
)


@final
class UsageRace(Race):
    """Usage reports past a token limit racing each other or a cancel, on one run.

    Invariant: one terminal outcome, never replaced -- each racer reads, right after its own
    call, the termination the run keeps; the one callback ran once, with the outcome's reason;
    every report is recorded; the budget is exhausted (a report past a limit exhausts it even
    after the cancel), by a limit the ending names when the ending is the budget's.
    """

    __slots__ = ("_ctx", "_delivered", "_racers", "_returned", "_seen")

    def __init__(self, lock: SchedLock, racers: tuple[str, ...]) -> None:
        self._racers = racers
        self._ctx = RunContext.create(
            session_id="session-1",
            run_id="run-1",
            limits=_USAGE_LIMITS,
            timeout=30,
            clock=ManualClock(),
            _lock=lock.as_lock(),
        )
        self._delivered: list[CancellationReason] = []
        self._ctx.cancellation.register(self._delivered.append)
        self._seen: dict[str, RunTermination | None] = {}  # racer -> the termination after its call
        self._returned: dict[str, object] = {}  # racer -> what its call returned

    def actors(self) -> list[Callable[[], object]]:
        return [self._actor(name) for name in self._racers]

    def _actor(self, name: str) -> Callable[[], None]:
        def act() -> None:
            self._returned[name] = USAGE_RACERS[name](self._ctx)
            self._seen[name] = self._ctx.lifecycle.termination

        return act

    def verdict(self) -> str:
        ctx = self._ctx
        termination = ctx.lifecycle.termination
        if termination is None or ctx.lifecycle.state is not termination.state:
            raise InvariantViolation(f"state {ctx.lifecycle.state}, termination {termination}")
        for name, other in self._seen.items():
            if other is not termination:
                raise InvariantViolation(f"{name} saw {other}; the run ended {termination}")
        reason = _USAGE_REASON[termination.state]
        if self._delivered != [reason] or ctx.cancellation.reason is not reason:
            raise InvariantViolation(
                f"callback ran {self._delivered}, reason {ctx.cancellation.reason}, "
                f"the run ended {termination}"
            )
        cancelled = termination.state is RunState.CANCELLED
        if "cancel" in self._returned and self._returned["cancel"] is not cancelled:
            raise InvariantViolation(f"cancel() returned {self._returned['cancel']}: {termination}")
        return self._check_usage(termination)

    def _check_usage(self, termination: RunTermination) -> str:
        """Every report is recorded and the budget exhausted, by the limit the ending names."""
        usage = self._ctx.budget.snapshot()
        racers = self._racers
        reported = (11 * ("usage_in" in racers), 11 * ("usage_out" in racers))
        if (usage.input_tokens, usage.output_tokens) != reported:
            raise InvariantViolation(f"usage {usage}, reported {reported}")
        exhausted = usage.exhausted
        if exhausted is None:
            raise InvariantViolation(f"a report past a limit left the budget {usage}")
        if termination.state is RunState.BUDGET_EXHAUSTED and (
            exhausted.value not in termination.reason
        ):
            raise InvariantViolation(f"exhausted {exhausted.value}, the run ended {termination}")
        return f"{termination.state.name} {exhausted.value}"


def usage_race(*racers: str) -> Scenario:
    """Usage reports past a token limit racing each other or a cancel, on one run (see
    :class:`UsageRace`)."""
    return _scenario(
        f"usage[{'+'.join(racers)}]",
        TOKENS_EXCEED,
        tuple(racers),
        lambda _scheduler, lock: UsageRace(lock, tuple(racers)),
    )


# -- money holds racing settles and the run's ending ----------------------------------------------


def cents(amount: int) -> Decimal:
    """``amount`` US cents as a ``Decimal`` of dollars: the races' money is whole cents."""
    return Decimal(amount).scaleb(-2)


PAID_TOOL: Final = "paid"


@final
class MoneyRace(Race):
    """Paid Tool calls racing for one money limit, and perhaps the run's ending racing them.

    Payer ``i`` reserves a call of the paid Tool holding ``hold`` cents, then settles it at
    ``actuals[i]`` cents (below, at or above the hold); with ``watch`` it then reads a snapshot
    (one scheduling point more); with ``ender`` one more actor cancels the run at any point.
    Invariant: every snapshot shows settled + held within the limit, unless a settle's actual
    above its hold took it past (the budget is then EXHAUSTED on ``COST``); at the end nothing
    is held (every granted hold settled, even after the run ended), the money settled is the sum
    of the granted calls' actuals, the Tool calls counted are the granted ones (a refused hold
    reserves nothing); when every actual is the hold and nothing else ends the run, exactly
    ``limit // hold`` calls (or every call) run; a refusal is the budget's, on ``COST``, or the
    ending's.
    """

    __slots__ = (
        "_actuals",
        "_ctx",
        "_ended",
        "_ender",
        "_granted",
        "_hold",
        "_limit",
        "_refused",
        "_seen",
        "_watch",
    )

    def __init__(
        self,
        scheduler: Scheduler,
        lock: SchedLock,
        actuals: tuple[int, ...],
        *,
        hold: int,
        limit: int,
        ender: bool,
        watch: bool,
    ) -> None:
        self._actuals = actuals
        self._hold = hold
        self._limit = limit
        self._ender = ender
        self._watch = watch
        self._ctx = _new_run(scheduler, lock, frozenset(), cost=cents(limit))
        self._granted: list[int] = []  # the payers whose hold was granted
        self._refused: list[RunTerminated] = []
        self._seen: list[BudgetUsage] = []  # each payer's snapshot after its settle
        self._ended: list[bool] = []  # what the one cancel() returned

    def actors(self) -> list[Callable[[], object]]:
        actors: list[Callable[[], object]] = [self._payer(i) for i in range(len(self._actuals))]
        if self._ender:
            actors.append(self._end)
        return actors

    def _payer(self, payer: int) -> Callable[[], None]:
        def pay() -> None:
            try:
                hold = self._ctx.reserve_tool_call(PAID_TOOL, max_cost=cents(self._hold))
            except RunTerminated as error:
                self._refused.append(error)
                return
            self._granted.append(payer)
            hold.settle(cost=cents(self._actuals[payer]))  # even once the run is over
            if self._watch:  # one more scheduling point per payer: a snapshot between settles
                self._seen.append(self._ctx.budget.snapshot())

        return pay

    def _end(self) -> None:
        self._ended.append(self._ctx.cancellation.cancel(CancellationReason.USER_REQUESTED))

    def verdict(self) -> str:
        usage = self._ctx.budget.snapshot()
        limit = self._limit * _CENT
        over = any(self._actuals[i] > self._hold for i in self._granted)
        for seen in (*self._seen, usage):
            if seen.cost_units + seen.cost_held_units > limit and not (
                over and seen.exhausted is BudgetDimension.COST
            ):
                raise InvariantViolation(
                    f"settled + held past the limit ${cents(self._limit)}: {seen}"
                )
            if seen.cost_held_units < 0:
                raise InvariantViolation(f"negative money held: {seen}")
        settled = sum(self._actuals[i] for i in self._granted) * _CENT
        if usage.cost_held_units != 0 or usage.cost_units != settled:
            raise InvariantViolation(
                f"every granted hold settled at its actual: held {usage.cost_held}, settled "
                f"{usage.cost}, want ${cents(settled // _CENT)} of {self._granted}"
            )
        if usage.tool_calls != len(self._granted):
            raise InvariantViolation(
                f"counted {usage.tool_calls} calls, {len(self._granted)} granted"
            )
        termination = self._ctx.lifecycle.termination
        ended = bool(self._ended) and self._ended[0]
        exact = all(actual == self._hold for actual in self._actuals) and not ended
        fits = min(len(self._actuals), self._limit // self._hold)
        if exact and len(self._granted) != fits:
            raise InvariantViolation(f"{len(self._granted)} calls ran, {fits} fit the money")
        for error in self._refused:
            if isinstance(error, BudgetExhausted) and error.dimension not in (
                BudgetDimension.COST,
                None,  # refused by a run the budget had ended already
            ):
                raise InvariantViolation(f"a paid call refused on {error.dimension}")
            if error.termination is not termination:
                raise InvariantViolation(
                    f"a refusal carries {error.termination}, not {termination}"
                )
        budget_ended = termination is not None and termination.state is RunState.BUDGET_EXHAUSTED
        if budget_ended and usage.exhausted is not BudgetDimension.COST:
            raise InvariantViolation(f"the run ended on the budget, exhausted {usage.exhausted}")
        state = "RUNNING" if termination is None else termination.state.name
        on = "" if usage.exhausted is None else f" on {usage.exhausted.value}"  # names COST
        return f"{len(self._granted)} ran, {state}{on}"


_CENT: Final = 10_000_000_000
"""Picodollars in a cent."""


def money_race(
    actuals: Sequence[int],
    *,
    hold: int,
    limit: int,
    ender: bool = False,
    watch: bool = True,
    name: str | None = None,
) -> Scenario:
    """Paid Tool calls holding ``hold`` cents each, settled at ``actuals`` cents, racing for a
    ``limit`` of cents, and with ``ender`` a cancel racing them; with ``watch`` each payer
    takes a snapshot after its settle (see :class:`MoneyRace`)."""
    frozen = tuple(actuals)
    names = tuple(f"pay {hold}c, settle {actual}c" for actual in frozen)
    return _scenario(
        name
        or (
            f"money[{' | '.join(map(str, frozen))}; hold {hold}, limit {limit}"
            f"{' + cancel' if ender else ''}{'' if watch else ', unwatched'}]"
        ),
        PER_TOOL,
        (*names, "cancel") if ender else names,
        lambda scheduler, lock: MoneyRace(
            scheduler, lock, frozen, hold=hold, limit=limit, ender=ender, watch=watch
        ),
    )


def paid_tool_race(calls: int, *, price: int, limit: int) -> Scenario:
    """``calls`` parallel calls of a paid Tool of ``price`` cents, each settled at its price,
    under ``limit`` cents: exactly ``limit // price`` of them run (16 at 10c under $1.00: 10)."""
    return money_race(
        [price] * calls,
        hold=price,
        limit=limit,
        name=f"paid tool[{calls} x {price}c, limit {limit}]",
    )


# -- a run tree: the parent's cancel racing its children's reservations ----------------------------

TREE_PARENT: Final = "parent"


@final
class TreeCancelRace(Race):
    """A parent's ``cancel(CLIENT_DISCONNECTED)`` racing its children's Model-call reservations.

    The parent has ``len(calls)`` children, made before the race, each with one callback, and so
    has the parent; actor ``i`` reserves ``calls[i]`` Model calls on child ``i`` in turn (holding
    ``hold`` cents of the parent's money each when ``hold``), stopping at its first refusal; one
    more actor cancels the parent, then reads the tree's usage. Invariant: nothing is granted to
    any child after the parent's ending (the usage read after the cancel is the final usage);
    every child ended ``CANCELLED`` by the parent's ending, with the reason that names it, and
    every refusal carries its child's termination (a child stops only at a refusal); the
    parent's counters are its children's granted calls and holds (no update lost, nothing
    refused counted); each callback ran exactly once, with ``PARENT_ENDED`` for a child and the
    cancel's reason for the parent, every child's before the parent's.
    """

    __slots__ = (
        "_after_cancel",
        "_calls",
        "_children",
        "_delivered",
        "_granted",
        "_hold",
        "_refused",
        "_root",
    )

    def __init__(
        self, scheduler: Scheduler, lock: SchedLock, calls: tuple[int, ...], *, hold: int
    ) -> None:
        self._calls = calls
        self._hold = hold
        # The parent's limits race on nothing: only its ending refuses a child's call.
        self._root = _new_run(
            scheduler, lock, frozenset(), cost=cents(10**6) if hold else None, run_id=TREE_PARENT
        )
        self._children = [self._root.child(run_id=f"child-{i}") for i in range(len(calls))]
        self._delivered: list[tuple[str, CancellationReason]] = []
        for ctx in (self._root, *self._children):
            ctx.cancellation.register(self._callback(ctx.run_id))
        self._granted = [0] * len(calls)
        self._refused: list[list[RunTerminated]] = [[] for _ in calls]
        self._after_cancel: list[BudgetUsage] = []

    def _callback(self, run_id: str) -> Callable[[CancellationReason], None]:
        def callback(reason: CancellationReason) -> None:
            self._delivered.append((run_id, reason))

        return callback

    def actors(self) -> list[Callable[[], object]]:
        return [*(self._reserver(i) for i in range(len(self._calls))), self._cancel]

    def _reserver(self, index: int) -> Callable[[], None]:
        child = self._children[index]
        max_cost = cents(self._hold) if self._hold else None

        def reserve_all() -> None:
            for _ in range(self._calls[index]):
                try:
                    child.reserve_model_call(max_cost=max_cost)
                except RunTerminated as error:
                    self._refused[index].append(error)
                    return
                self._granted[index] += 1

        return reserve_all

    def _cancel(self) -> None:
        self._root.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
        self._after_cancel.append(self._root.budget.snapshot())

    def verdict(self) -> str:
        usage = self._root.budget.snapshot()
        if self._after_cancel and self._after_cancel[0] != usage:
            raise InvariantViolation(
                f"granted after the parent's ending: {self._after_cancel[0]} then {usage}"
            )
        held = self._hold * _CENT
        granted = sum(self._granted)
        if usage.model_calls != granted or usage.cost_held_units != granted * held:
            raise InvariantViolation(
                f"the parent counted {usage}, its children were granted {self._granted} calls"
            )
        root = self._root.lifecycle.termination
        if root is None or root.state is not RunState.CANCELLED:
            raise InvariantViolation(f"the parent ended {root}, not CANCELLED by its cancel")
        cascade = f"cancelled: ancestor run {TREE_PARENT!r} ended CANCELLED: "
        for index, child in enumerate(self._children):
            self._check_child(index, child, usage.children[child.run_id], cascade)
        self._check_callbacks()
        return f"{granted} granted"

    def _check_child(self, index: int, child: RunContext, usage: BudgetUsage, cascade: str) -> None:
        termination = child.lifecycle.termination
        if termination is None or termination.state is not RunState.CANCELLED:
            raise InvariantViolation(f"{child.run_id} outlived its parent: {termination}")
        if not termination.reason.startswith(cascade):
            raise InvariantViolation(f"{child.run_id} ended {termination.reason!r}")
        if usage.model_calls != self._granted[index]:
            raise InvariantViolation(
                f"{child.run_id} counted {usage.model_calls}, granted {self._granted[index]}"
            )
        refused = self._refused[index]
        if self._granted[index] < self._calls[index] and not refused:
            raise InvariantViolation(f"{child.run_id} stopped without a refusal")
        if any(error.termination is not termination for error in refused):
            raise InvariantViolation(f"a refusal of {child.run_id} carries another termination")

    def _check_callbacks(self) -> None:
        runs = [run_id for run_id, _ in self._delivered]
        want = sorted([TREE_PARENT, *(child.run_id for child in self._children)])
        if sorted(runs) != want:
            raise InvariantViolation(f"callbacks ran {runs}, want each of {want} once")
        if runs[-1] != TREE_PARENT:
            raise InvariantViolation(f"a child's callback ran after the parent's: {runs}")
        for run_id, reason in self._delivered:
            expected = (
                CancellationReason.CLIENT_DISCONNECTED
                if run_id == TREE_PARENT
                else CancellationReason.PARENT_ENDED
            )
            if reason is not expected:
                raise InvariantViolation(f"{run_id}'s callback got {reason}, not {expected}")


def tree_cancel_race(calls: Sequence[int], *, hold: int = 0) -> Scenario:
    """A parent's cancel racing ``len(calls)`` children reserving ``calls[i]`` Model calls each,
    holding ``hold`` cents of the parent's money per call when ``hold`` (see
    :class:`TreeCancelRace`)."""
    frozen = tuple(calls)
    if not frozen or any(n < 1 for n in frozen) or hold < 0:
        raise ValueError(f"calls must be >= 1 each and hold >= 0, got {frozen} and {hold}")
    money = f", hold {hold}c" if hold else ""
    return _scenario(
        f"tree cancel[{' | '.join(map(str, frozen))}{money}]",
        CLIENT_DISCONNECTS,
        (*(f"child-{i} reserves x{n}" for i, n in enumerate(frozen)), "cancel parent"),
        lambda scheduler, lock: TreeCancelRace(scheduler, lock, frozen, hold=hold),
    )
