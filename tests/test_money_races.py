"""Money holds racing on real threads: settles whose actuals pass their holds, and the run's
ending racing paid calls. Every thread starts at a barrier; the verdicts hold for whatever
interleaving the threads got (the deterministic scheduler's races in ``tests/modelcheck`` go
through every one of the small cases)."""

from __future__ import annotations

import threading
from decimal import Decimal

from diagnosis_harness import (
    BudgetDimension,
    BudgetExhausted,
    BudgetUsage,
    CancellationReason,
    RunCancelled,
    RunContext,
    RunState,
    RunTerminated,
)
from strategies import limits, new_run

D = Decimal
DOLLAR = D("1.00")
DIME = D("0.10")


def _race(workers: list[threading.Thread]) -> None:
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()


def _paid_calls(
    ctx: RunContext, calls: int, *, actual: Decimal, barrier: threading.Barrier
) -> tuple[list[Decimal], list[RunTerminated], list[threading.Thread]]:
    """``calls`` threads, each holding $0.10 for one paid Tool call and settling ``actual``."""
    settled: list[Decimal] = []
    refused: list[RunTerminated] = []
    lock = threading.Lock()

    def call() -> None:
        barrier.wait()
        try:
            hold = ctx.reserve_tool_call("paid", max_cost=DIME)
        except RunTerminated as error:
            with lock:
                refused.append(error)
            return
        hold.settle(cost=actual)  # even once the run is over: the call happened
        with lock:
            settled.append(actual)

    return settled, refused, [threading.Thread(target=call) for _ in range(calls)]


def test_sixteen_paid_calls_racing_a_cancel_never_pass_the_limit_and_all_settle() -> None:
    """A cancel races sixteen $0.10 calls under $1.00, twenty times: at most ten run, every one
    that ran settles (after the end too), nothing stays held, a refusal holds nothing; when
    the budget ended the run, exactly ten ran."""
    outcomes: set[RunState] = set()
    for _ in range(20):
        ctx = new_run(budget=limits(cost=DOLLAR))
        barrier = threading.Barrier(17)
        settled, refused, threads = _paid_calls(ctx, 16, actual=DIME, barrier=barrier)

        def cancel(ctx: RunContext = ctx, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)

        _race([*threads, threading.Thread(target=cancel)])
        usage = ctx.budget.snapshot()
        state = ctx.lifecycle.state
        outcomes.add(state)
        assert len(settled) + len(refused) == 16
        assert len(settled) <= 10
        assert (usage.tool_calls, usage.cost, usage.cost_held) == (
            len(settled),
            DIME * len(settled),
            D(0),
        )
        assert all(isinstance(e, (BudgetExhausted, RunCancelled)) for e in refused)
        if state is RunState.BUDGET_EXHAUSTED:
            assert len(settled) == 10
            assert usage.exhausted is BudgetDimension.COST
        else:
            assert state is RunState.CANCELLED
    assert outcomes <= {RunState.BUDGET_EXHAUSTED, RunState.CANCELLED}


def test_actuals_above_their_holds_pass_the_limit_only_by_a_settle() -> None:
    """Sixteen $0.10 holds each settled at $0.15 under $1.00, a reader snapshotting all along:
    any snapshot with settled + held above $1.00 shows the budget exhausted on COST (only a
    settle's actual takes it there), and the money settled is the sum of the actuals."""
    ctx = new_run(budget=limits(cost=DOLLAR))
    barrier = threading.Barrier(17)
    settled, refused, threads = _paid_calls(ctx, 16, actual=D("0.15"), barrier=barrier)
    stop = threading.Event()
    seen: list[BudgetUsage] = []

    def watch() -> None:
        barrier.wait()
        while not stop.is_set():
            seen.append(ctx.budget.snapshot())

    watcher = threading.Thread(target=watch)
    watcher.start()
    _race(threads)
    stop.set()
    watcher.join()
    usage = ctx.budget.snapshot()
    for snapshot in (*seen, usage):
        assert snapshot.cost_held >= 0
        if snapshot.cost + snapshot.cost_held > DOLLAR:
            assert snapshot.exhausted is BudgetDimension.COST, snapshot
    assert len(settled) + len(refused) == 16
    assert 1 <= len(settled) <= 10  # a hold is granted only while settled + held fits
    assert (usage.cost, usage.cost_held) == (sum(settled), D(0))
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    assert usage.exhausted is BudgetDimension.COST
