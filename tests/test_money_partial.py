"""A partial hold: ``ctx.reserve_model_call(max_cost=X, min_cost=Y)`` holds as much of X as the
money left pays for, but at least Y, in the reservation's one decision, and is refused on
``COST`` only when not even Y fits. The hold's ``max_cost`` is what was held."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    CallHold,
    RunContext,
    RunState,
)
from strategies import limits, new_run

D = Decimal
DOLLAR = D("1.00")


def money_run(cost: Decimal | None = DOLLAR, **overrides: Any) -> RunContext:
    return new_run(budget=limits(cost=cost, **overrides))


def _money(ctx: RunContext) -> tuple[Decimal, Decimal]:
    usage = ctx.budget.snapshot()
    return usage.cost, usage.cost_held


def test_a_partial_hold_that_fits_whole_holds_all_of_max_cost() -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("0.40"), min_cost=D("0.10"))
    assert hold.max_cost == D("0.4")
    assert _money(ctx) == (D(0), D("0.4"))
    assert ctx.budget.snapshot().model_calls == 1


def test_a_partial_hold_takes_the_money_left_when_max_cost_does_not_fit() -> None:
    ctx = money_run(model_calls=5)
    ctx.reserve_tool_call("t", max_cost=D("0.70"))
    hold = ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.10"))
    assert hold.max_cost == D("0.3")  # what was held, not what was asked
    assert _money(ctx) == (D(0), DOLLAR)
    assert ctx.lifecycle.state is RunState.RUNNING
    hold.settle(cost=D("0.25"), output_tokens=3)  # releases what it held
    assert _money(ctx) == (D("0.25"), D("0.7"))


def test_a_partial_hold_down_to_min_cost_exactly_is_granted() -> None:
    ctx = money_run(model_calls=5)
    ctx.reserve_model_call(max_cost=D("0.90"))
    hold = ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.10"))
    assert hold.max_cost == D("0.1")
    assert _money(ctx) == (D(0), DOLLAR)


def test_a_partial_hold_is_refused_on_cost_only_when_not_even_min_cost_fits() -> None:
    ctx = money_run(model_calls=5)
    ctx.reserve_tool_call("t", max_cost=D("0.95"))
    with pytest.raises(BudgetExhausted) as refused:
        ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.10"))
    assert (refused.value.dimension, refused.value.boundary) == (
        BudgetDimension.COST,
        Boundary.MODEL,
    )
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.reason == (  # names the least hold the call could not have
        "cost limit $1 would be passed: a hold of $0.1 refused ($0 settled, $0.95 held)"
    )
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.cost_held) == (0, D("0.95"))


def test_min_cost_equal_to_max_cost_is_all_or_nothing() -> None:
    ctx = money_run(model_calls=5)
    ctx.reserve_tool_call("t", max_cost=D("0.70"))
    with pytest.raises(BudgetExhausted) as refused:
        ctx.reserve_model_call(max_cost=D("0.40"), min_cost=D("0.40"))
    assert refused.value.dimension is BudgetDimension.COST
    assert _money(ctx) == (D(0), D("0.7"))


def test_without_a_money_limit_max_cost_is_held_whole() -> None:
    ctx = money_run(cost=None)
    hold = ctx.reserve_model_call(max_cost=D("50"), min_cost=D("1"))
    assert hold.max_cost == D("50")
    assert _money(ctx) == (D(0), D("50"))


def test_a_partial_hold_is_still_refused_by_the_call_count_first() -> None:
    ctx = money_run(model_calls=1)
    ctx.reserve_model_call(max_cost=D("0.10"), min_cost=D("0.01"))
    with pytest.raises(BudgetExhausted) as refused:
        ctx.reserve_model_call(max_cost=D("0.10"), min_cost=D("0.01"))
    assert refused.value.dimension is BudgetDimension.MODEL_CALLS
    assert _money(ctx) == (D(0), D("0.1"))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_cost": D("0.10"), "min_cost": D("0.20")}, ValueError, "min_cost must be at most"),
        ({"min_cost": D("0.10")}, ValueError, "min_cost needs max_cost"),
        ({"max_cost": D("0.10"), "min_cost": 0.05}, TypeError, "min_cost .*not a float"),
        ({"max_cost": D("0.10"), "min_cost": 1}, TypeError, "min_cost"),
        ({"max_cost": D("0.10"), "min_cost": D("-0.01")}, ValueError, "min_cost"),
        ({"max_cost": D("0.10"), "min_cost": D("NaN")}, ValueError, "min_cost"),
        ({"max_cost": 0.10, "min_cost": D("0.05")}, TypeError, "max_cost"),
    ],
    ids=["above-max", "without-max", "float", "int", "negative", "nan", "float-max"],
)
def test_a_bad_min_cost_is_refused_naming_it_and_changes_nothing(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    ctx = money_run()
    ctx.reserve_tool_call("t", max_cost=D("0.30"))
    before = ctx.budget.snapshot()
    with pytest.raises(error, match=match):
        ctx.reserve_model_call(**kwargs)
    assert ctx.budget.snapshot() == before
    assert ctx.lifecycle.state is RunState.RUNNING


def test_racing_partial_holds_hold_exactly_the_money_there_is() -> None:
    """16 threads each ask $0.30, down to $0.05, of $1.00 at once: three get $0.30, one gets the
    $0.10 left, in whatever order; the rest are refused on COST once not $0.05 is left."""
    ctx = money_run(model_calls=100)
    barrier = threading.Barrier(16)
    held: list[Decimal] = []
    refused: list[BudgetExhausted] = []
    lock = threading.Lock()

    def call() -> None:
        barrier.wait()
        try:
            hold = ctx.reserve_model_call(max_cost=D("0.30"), min_cost=D("0.05"))
        except BudgetExhausted as error:
            with lock:
                refused.append(error)
            return
        with lock:
            held.append(hold.max_cost)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(held) == [D("0.1"), D("0.3"), D("0.3"), D("0.3")]
    assert len(refused) == 12
    assert all(error.dimension is BudgetDimension.COST for error in refused)
    assert _money(ctx) == (D(0), DOLLAR)
    assert ctx.budget.snapshot().model_calls == 4


def test_a_partial_hold_is_a_call_hold() -> None:
    hold = money_run().reserve_model_call(max_cost=D("0.10"), min_cost=D("0.01"))
    assert isinstance(hold, CallHold)
    assert (hold.boundary, hold.tool, hold.settled) == (Boundary.MODEL, None, False)
