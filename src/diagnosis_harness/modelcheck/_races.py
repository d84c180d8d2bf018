"""The race scenarios the deterministic scheduler checks, each tied to one spec scenario.

Theory of operation. A :class:`Scenario` builds fresh objects per schedule -- a run on an
:class:`ActorClock` with the scheduler's lock, callbacks that record where they ran -- returns
the racing actors and a check of the spec's invariant, which runs after every complete schedule
and raises :class:`~._scheduler.InvariantViolation`. Each scenario names the one
(requirement, scenario) of the spec it exercises (``requirement``, ``spec_scenario``): a
violation is charged to it alone. The builders: :func:`terminal_race`,
:func:`registration_race`, :func:`reservation_race`, :func:`model_call_race`,
:func:`snapshot_race` and :func:`capacity_race`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
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

__all__ = [
    "BUDGET_WINS",
    "CAPACITY",
    "CLIENT_DISCONNECTS",
    "PER_TOOL",
    "RACERS",
    "TERMINAL",
    "ActorClock",
    "Scenario",
    "capacity_race",
    "model_call_race",
    "registration_race",
    "reservation_race",
    "snapshot_race",
    "terminal_race",
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


def usage_race(*racers: str) -> Scenario:
    """Usage reports past a token limit racing each other or a cancel, on one run.

    Invariant: one terminal outcome, never replaced -- each racer reads, right after its own
    call, the termination the run keeps; the one callback ran once, with the outcome's reason;
    every report is recorded; the budget is exhausted (a report past a limit exhausts it even
    after the cancel), by a limit the ending names when the ending is the budget's.
    """

    def build(
        _scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        limits = BudgetLimits(
            model_calls=1,
            tool_calls=1,
            per_tool_calls=1,
            input_tokens=10,
            output_tokens=10,
            total_tokens=100,
            run_bytes=1,
        )
        ctx = RunContext.create(
            session_id="session-1",
            run_id="run-1",
            limits=limits,
            timeout=30,
            clock=ManualClock(),
            _lock=lock.as_lock(),
        )
        delivered: list[CancellationReason] = []
        ctx.cancellation.register(delivered.append)
        seen: dict[str, RunTermination | None] = {}
        returned: dict[str, object] = {}

        def actor(name: str) -> Callable[[], None]:
            def act() -> None:
                returned[name] = USAGE_RACERS[name](ctx)
                seen[name] = ctx.lifecycle.termination

            return act

        def check() -> str:
            termination = ctx.lifecycle.termination
            if termination is None or ctx.lifecycle.state is not termination.state:
                raise InvariantViolation(f"state {ctx.lifecycle.state}, termination {termination}")
            for name, other in seen.items():
                if other is not termination:
                    raise InvariantViolation(f"{name} saw {other}; the run ended {termination}")
            reason = _USAGE_REASON[termination.state]
            if delivered != [reason] or ctx.cancellation.reason is not reason:
                raise InvariantViolation(
                    f"callback ran {delivered}, reason {ctx.cancellation.reason}, "
                    f"the run ended {termination}"
                )
            if "cancel" in returned and returned["cancel"] is not (
                termination.state is RunState.CANCELLED
            ):
                raise InvariantViolation(f"cancel() returned {returned['cancel']}: {termination}")
            usage = ctx.budget.snapshot()
            reported = (11 * ("usage_in" in racers), 11 * ("usage_out" in racers))
            if (usage.input_tokens, usage.output_tokens) != reported:
                raise InvariantViolation(f"usage {usage}, reported {reported}")
            exhausted = usage.exhausted
            if exhausted is None:
                raise InvariantViolation(f"a report past a limit left the budget {usage}")
            if termination.state is RunState.BUDGET_EXHAUSTED and (
                exhausted.value not in termination.reason
            ):
                raise InvariantViolation(
                    f"exhausted {exhausted.value}, the run ended {termination}"
                )
            return f"{termination.state.name} {exhausted.value}"

        return [actor(name) for name in racers], check

    return Scenario(f"usage[{'+'.join(racers)}]", *TOKENS_EXCEED, tuple(racers), build)
