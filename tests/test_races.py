"""Races with real threads released together by a ``threading.Barrier``, repeated many times.

No sleep anywhere: a race either holds its invariant on every round or the test fails. The
switch interval is lowered so that the interpreter interleaves the racers far more often.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    Deadline,
    FinishResult,
    RunContext,
    RunState,
    RunTerminated,
    RunTimedOut,
)
from racing import race as _race
from strategies import limits, new_run

if TYPE_CHECKING:
    from collections.abc import Callable


ROUNDS = 500

REASON_FOR = {
    RunState.SUCCESS: CancellationReason.RUN_FINISHED,
    RunState.FAILED: CancellationReason.RUN_FINISHED,
    RunState.CANCELLED: CancellationReason.USER_REQUESTED,
    RunState.TIMED_OUT: CancellationReason.DEADLINE_EXCEEDED,
    RunState.BUDGET_EXHAUSTED: CancellationReason.BUDGET_EXHAUSTED,
}


# Every test here races real threads: the interpreter switches between them eagerly.
pytestmark = pytest.mark.usefixtures("eager_thread_switching")


# -- every way of ending, at once -------------------------------------------------------------

EARLY_NS, LATE_NS = 0, 1_000


class SkewedClock:
    """Reads at the deadline on the deadline racer's thread only, before it everywhere else.

    So only the deadline racer can record TIMED_OUT and only the budget racer can record
    BUDGET_EXHAUSTED: each outcome has exactly one possible author, and the winner is known.
    """

    def __init__(self) -> None:
        self.late_thread: int | None = None

    def monotonic_ns(self) -> int:
        return LATE_NS if threading.get_ident() == self.late_thread else EARLY_NS


@dataclass
class Outcome:
    won: bool = False
    termination: object = None
    errors: list[RunTerminated] = field(default_factory=list)


def _terminal_racers(
    ctx: RunContext, clock: SkewedClock
) -> dict[str, tuple[Outcome, Callable[[], None]]]:
    results = {name: Outcome() for name in ("succeed", "fail", "cancel", "deadline", "budget")}

    def finished(name: str, result: FinishResult) -> None:
        results[name].won = result.changed
        results[name].termination = result.termination

    def succeed() -> None:
        finished("succeed", ctx.lifecycle.succeed())

    def fail() -> None:
        finished("fail", ctx.lifecycle.fail("an exception handler"))

    def cancel() -> None:
        results["cancel"].won = ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)

    racers = {"succeed": succeed, "fail": fail, "cancel": cancel}
    racers["deadline"] = functools.partial(_deadline_racer, ctx, clock, results["deadline"])
    racers["budget"] = functools.partial(_budget_racer, ctx, results["budget"])
    return {name: (results[name], racers[name]) for name in results}


def _deadline_racer(ctx: RunContext, clock: SkewedClock, outcome: Outcome) -> None:
    """Check a boundary on the one thread where the clock reads the deadline."""
    clock.late_thread = threading.get_ident()
    try:
        ctx.check(RACE_BOUNDARY)
    except RunTimedOut as error:  # only this racer can make the run TIMED_OUT
        outcome.won = True
        outcome.errors.append(error)
    except RunTerminated as error:
        outcome.errors.append(error)
    else:  # pragma: no cover - the clock reads the deadline on this thread
        raise AssertionError("check passed at the deadline")


def _budget_racer(ctx: RunContext, outcome: Outcome) -> None:
    """Reserve a Model call past the limit."""
    try:
        ctx.reserve_model_call()  # the one Model call allowed is already used
    except BudgetExhausted as error:  # only this racer can exhaust the budget
        outcome.won = True
        outcome.errors.append(error)
    except RunTerminated as error:
        outcome.errors.append(error)
    else:  # pragma: no cover
        raise AssertionError("a reservation past the limit was granted")


RACE_BOUNDARY = Boundary.GUARD
WINNER_STATE = {
    "succeed": RunState.SUCCESS,
    "fail": RunState.FAILED,
    "cancel": RunState.CANCELLED,
    "deadline": RunState.TIMED_OUT,
    "budget": RunState.BUDGET_EXHAUSTED,
}


def test_every_way_of_ending_at_once_gives_one_outcome_one_winner_one_callback_each() -> None:
    seen: Counter[RunState] = Counter()
    for _ in range(ROUNDS):
        clock = SkewedClock()
        ctx = new_run(budget=limits(model_calls=1), clock=clock, deadline=Deadline.at_ns(LATE_NS))
        ctx.reserve_model_call()
        calls: list[list[CancellationReason]] = [[] for _ in range(3)]
        for record in calls:
            ctx.cancellation.register(record.append)
        racers = _terminal_racers(ctx, clock)

        _race([racer for _, racer in racers.values()])

        termination = ctx.lifecycle.termination
        assert termination is not None
        seen[termination.state] += 1
        winners = [name for name, (outcome, _) in racers.items() if outcome.won]
        assert len(winners) == 1, winners
        assert WINNER_STATE[winners[0]] is termination.state
        for outcome, _ in racers.values():
            assert outcome.termination in (None, termination)
            assert all(error.termination is termination for error in outcome.errors)
        expected = REASON_FOR[termination.state]
        assert calls == [[expected]] * 3  # every callback exactly once, with the right reason
        assert ctx.cancellation.reason is expected
        usage = ctx.budget.snapshot()
        assert usage.model_calls == 1
        # The budget says exhausted exactly when that is the run's outcome: a refusal and the
        # outcome it causes are one decision.
        assert (usage.exhausted is not None) is (termination.state is RunState.BUDGET_EXHAUSTED)
    assert sum(seen.values()) == ROUNDS


# -- callbacks against cancellation -----------------------------------------------------------


def _cancel(ctx: RunContext, reason: CancellationReason) -> None:
    ctx.cancellation.cancel(reason)


def _register_racing_cancel(registrars: int, per_registrar: int) -> None:
    ctx = new_run()
    ran: list[tuple[int, CancellationReason]] = []

    def make(key: int) -> Callable[[CancellationReason], None]:
        return lambda reason: ran.append((key, reason))

    def registrar(first: int) -> Callable[[], None]:
        def register_all() -> None:
            for key in range(first, first + per_registrar):
                ctx.cancellation.register(make(key))

        return register_all

    def cancel() -> None:
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)

    _race([*(registrar(i * per_registrar) for i in range(registrars)), cancel])

    keys = Counter(key for key, _ in ran)
    assert keys == Counter(range(registrars * per_registrar))  # each exactly once
    assert {reason for _, reason in ran} == {CancellationReason.USER_REQUESTED}


def test_registration_racing_cancellation_runs_every_callback_once() -> None:
    for _ in range(ROUNDS):
        _register_racing_cancel(registrars=4, per_registrar=25)


def _unregister_racing_cancel(removers: int, per_remover: int) -> None:
    ctx = new_run()
    ran: list[int] = []

    def make(key: int) -> Callable[[CancellationReason], None]:
        return lambda _: ran.append(key)

    registrations = [ctx.cancellation.register(make(key)) for key in range(removers * per_remover)]
    removed: list[int] = []

    def remover(first: int) -> Callable[[], None]:
        def remove_all() -> None:
            for key in range(first, first + per_remover):
                if registrations[key].unregister():
                    removed.append(key)

        return remove_all

    def cancel() -> None:
        ctx.cancellation.cancel(CancellationReason.SHUTDOWN)

    _race([*(remover(i * per_remover) for i in range(removers)), cancel])

    assert sorted(ran + removed) == list(range(removers * per_remover))  # once, one way


def test_unregister_racing_cancellation_either_removes_or_runs_each_callback() -> None:
    for _ in range(ROUNDS):
        _unregister_racing_cancel(removers=4, per_remover=25)


# -- reservations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tools", "budget", "dimension"),
    [
        pytest.param(8, limits(tool_calls=50_000), BudgetDimension.TOOL_CALLS, id="8-tools"),
        pytest.param(
            1,
            limits(tool_calls=10**9, per_tool_calls=50_000),
            BudgetDimension.PER_TOOL_CALLS,
            id="1-tool",
        ),
    ],
)
def test_concurrent_reservations_never_over_reserve_and_lose_nothing(
    tools: int, budget: BudgetLimits, dimension: BudgetDimension
) -> None:
    threads_n, per_thread, limit = 8, 10_000, 50_000
    ctx = new_run(budget=budget)
    results: list[list[bool]] = [[] for _ in range(threads_n)]

    def reserver(index: int) -> None:
        tool = f"tool-{index % tools}"
        out = results[index]
        reserve = ctx.reserve_tool_call
        for _ in range(per_thread):
            try:
                reserve(tool)
            except BudgetExhausted:
                out.append(False)
            else:
                out.append(True)

    _race([functools.partial(reserver, i) for i in range(threads_n)])

    granted = [sum(out) for out in results]
    usage = ctx.budget.snapshot()
    assert sum(granted) == usage.tool_calls == limit  # no over-reservation, no lost update
    assert sum(usage.per_tool_calls.values()) == usage.tool_calls
    if tools == threads_n:
        # A thread may get no call at all (the others took the budget before it ran), and a
        # Tool never granted a call has no entry.
        per_tool = usage.per_tool_calls
        assert [per_tool.get(f"tool-{i}", 0) for i in range(threads_n)] == granted
    for out in results:  # once refused, refused for good: the run is over
        first_refusal = out.index(False) if False in out else len(out)
        assert all(out[:first_refusal])
        assert not any(out[first_refusal:])
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    assert usage.exhausted is dimension


def _reserve_racing_success(reservers: int, per_reserver: int) -> None:
    ctx = new_run()
    granted_after: list[int] = []
    ended = threading.Event()

    def reserver() -> None:
        for _ in range(per_reserver):
            was_over = ended.is_set()
            try:
                ctx.reserve_tool_call("t")
            except RunTerminated:
                continue
            if was_over:
                granted_after.append(1)

    def finisher() -> None:
        ctx.lifecycle.succeed()
        ended.set()

    _race([*(reserver for _ in range(reservers)), finisher])

    assert granted_after == []
    usage = ctx.budget.snapshot()
    assert usage.tool_calls == usage.per_tool_calls.get("t", 0) <= reservers * per_reserver
    assert ctx.budget.snapshot().exhausted is None


def test_no_reservation_is_granted_after_the_run_ended() -> None:
    for _ in range(ROUNDS // 5):
        _reserve_racing_success(reservers=4, per_reserver=40)
