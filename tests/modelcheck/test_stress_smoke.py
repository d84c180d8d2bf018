"""Smoke check with real, free-running threads: five racers finishing one run, 200 rounds.

The deterministic scheduler proves the races under every schedule it enumerates; this checks that
nothing in the library depends on running one thread at a time (no real lock replaced, no
scheduler installed). No sleeps: a ``threading.Barrier`` releases the racers together, and a
lowered switch interval makes the interpreter interleave them far more often.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    Deadline,
    RunCapacityCounter,
    RunContext,
    RunState,
    RunTerminated,
    RunTimedOut,
)
from racing import race

if TYPE_CHECKING:
    from collections.abc import Callable

# Real threads racing: the interpreter switches between them eagerly.
pytestmark = [pytest.mark.model_check, pytest.mark.usefixtures("eager_thread_switching")]

ROUNDS = 200
EARLY_NS, LATE_NS = 0, 1_000
WINS = {
    "succeed": (RunState.SUCCESS, CancellationReason.RUN_FINISHED),
    "fail": (RunState.FAILED, CancellationReason.RUN_FINISHED),
    "cancel": (RunState.CANCELLED, CancellationReason.CLIENT_DISCONNECTED),
    "deadline": (RunState.TIMED_OUT, CancellationReason.DEADLINE_EXCEEDED),
    "budget": (RunState.BUDGET_EXHAUSTED, CancellationReason.BUDGET_EXHAUSTED),
}


class DeadlineThreadClock:
    """At the deadline on the deadline racer's thread only: each outcome has one possible author."""

    def __init__(self) -> None:
        self.late_thread: int | None = None

    def monotonic_ns(self) -> int:
        return LATE_NS if threading.get_ident() == self.late_thread else EARLY_NS


def one_round() -> str:
    clock = DeadlineThreadClock()
    limit = 10**9
    ctx = RunContext.create(
        session_id="s",
        run_id="r",
        limits=BudgetLimits(
            model_calls=limit,
            tool_calls=1,
            per_tool_calls=1,
            input_tokens=limit,
            output_tokens=limit,
            total_tokens=limit,
            run_bytes=limit,
        ),
        deadline=Deadline.at_ns(LATE_NS),
        clock=clock,
    )
    ctx.reserve_tool_call("t")  # the budget racer's call is one past the limit
    delivered: list[list[tuple[CancellationReason, int]]] = [[], [], []]
    for record in delivered:

        def callback(
            reason: CancellationReason, record: list[tuple[CancellationReason, int]] = record
        ) -> None:
            record.append((reason, threading.get_ident()))

        ctx.cancellation.register(callback)
    claims: dict[str, tuple[bool, int]] = {}
    seen: list[object] = []

    def succeed() -> None:
        result = ctx.lifecycle.succeed()
        claims["succeed"] = (result.changed, threading.get_ident())
        seen.append(result.termination)

    def fail() -> None:
        result = ctx.lifecycle.fail("x")
        claims["fail"] = (result.changed, threading.get_ident())
        seen.append(result.termination)

    def cancel() -> None:
        won = ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
        claims["cancel"] = (won, threading.get_ident())

    def deadline() -> None:
        clock.late_thread = threading.get_ident()
        try:
            ctx.check(Boundary.TOOL)
        except RunTerminated as error:
            claims["deadline"] = (isinstance(error, RunTimedOut), threading.get_ident())
            seen.append(error.termination)
        else:
            raise AssertionError("check() passed at the deadline")

    def budget() -> None:
        try:
            ctx.reserve_tool_call("t")
        except RunTerminated as error:
            claims["budget"] = (isinstance(error, BudgetExhausted), threading.get_ident())
            seen.append(error.termination)
        else:
            raise AssertionError("a Tool call past the budget was reserved")

    race([succeed, fail, cancel, deadline, budget])

    termination = ctx.lifecycle.termination
    assert termination is not None
    winners = [name for name, (won, _) in claims.items() if won]
    assert len(winners) == 1, claims
    winner = winners[0]
    state, reason = WINS[winner]
    assert termination.state is state
    assert all(other is termination for other in seen)
    assert ctx.cancellation.reason is reason
    assert delivered == [[(reason, claims[winner][1])]] * 3  # once each, by the winner
    usage = ctx.budget.snapshot()
    assert usage.tool_calls == 1
    assert (usage.exhausted is not None) is (state is RunState.BUDGET_EXHAUSTED)
    return winner


def test_five_racers_finishing_one_run_with_real_threads() -> None:
    winners = Counter(one_round() for _ in range(ROUNDS))
    assert sum(winners.values()) == ROUNDS
    print(f"winners over {ROUNDS} rounds: {dict(winners)}")  # -rP shows it


def capacity_round(limit: int) -> None:
    counter = RunCapacityCounter(limit)
    accepted: list[list[int]] = [[] for _ in range(5)]
    rejected: list[list[int]] = [[] for _ in range(5)]

    def reserver(index: int) -> Callable[[], None]:
        n = index + 1

        def reserve_many() -> None:
            for _ in range(10):
                (accepted if counter.try_reserve(n) else rejected)[index].append(n)

        return reserve_many

    race([reserver(i) for i in range(5)])
    assert counter.used == sum(map(sum, accepted)) <= limit  # nothing lost, never over
    # Usage only grows: a refusal is still justified by the final usage.
    assert all(counter.used + n > limit for out in rejected for n in out)


def test_capacity_reservations_with_real_threads() -> None:
    for _ in range(ROUNDS):
        capacity_round(50)
