"""The money budget on a run in this process: ``BudgetLimits.cost``, the hold a reservation takes
(``max_cost``) in the same all-or-nothing decision as its call counters, ``CallHold.settle``, and
``snapshot().cost`` / ``cost_held``. Integer picodollars inside, ``Decimal`` dollars outside."""

from __future__ import annotations

import dataclasses
import threading
from decimal import Decimal
from typing import Any

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetState,
    CallHold,
    RunContext,
    RunState,
    RunTerminated,
)
from strategies import limits, new_run

D = Decimal
DOLLAR = D("1.00")


def money_run(cost: Decimal | None = DOLLAR, **overrides: Any) -> RunContext:
    return new_run(budget=limits(cost=cost, **overrides))


# -- the limit ----------------------------------------------------------------------------------


def test_the_money_limit_is_optional_and_none_by_default() -> None:
    assert limits().cost is None
    assert limits(cost=D("2.00")).cost == D("2.00")


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (2.0, TypeError),
        (2, TypeError),
        (True, TypeError),
        ("2.00", TypeError),
        (D("NaN"), ValueError),
        (D("Infinity"), ValueError),
        (D(0), ValueError),
        (D("-1"), ValueError),
    ],
    ids=repr,
)
def test_a_money_limit_is_a_finite_positive_decimal(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^cost must be a .*Decimal"):
        limits(cost=bad)


def test_a_float_limit_is_told_money_is_exact() -> None:
    with pytest.raises(TypeError, match="money is exact"):
        limits(cost=2.0)


def test_the_money_limit_is_part_of_equality_and_hash() -> None:
    assert limits(cost=D("1")) == limits(cost=D("1.00"))
    assert hash(limits(cost=D("1"))) == hash(limits(cost=D("1.00")))
    assert limits(cost=D("1")) != limits(cost=D("2"))
    assert limits(cost=D("1")) != limits()
    assert len({limits(), limits(cost=D("1")), limits(cost=D("1.0"))}) == 2


# -- holds --------------------------------------------------------------------------------------


def test_a_hold_cannot_be_built() -> None:
    with pytest.raises(TypeError, match=r"ctx\.reserve_model_call"):
        CallHold()


def test_a_hold_is_kept_until_settled_and_the_snapshot_says_so() -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("0.40"))
    assert (hold.boundary, hold.tool, hold.max_cost, hold.settled) == (
        Boundary.MODEL,
        None,
        D("0.4"),
        False,
    )
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held, usage.model_calls) == (D(0), D("0.4"), 1)
    hold.settle(cost=D("0.25"), input_tokens=100, output_tokens=20)
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (D("0.25"), D(0))
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (100, 20, 120)
    assert hold.settled
    assert ctx.budget.state is BudgetState.ACTIVE
    assert isinstance(usage.cost, Decimal)
    assert isinstance(usage.cost_held, Decimal)


def test_a_tool_hold_names_its_tool_and_refuses_tokens_changing_nothing() -> None:
    ctx = money_run()
    hold = ctx.reserve_tool_call("search", max_cost=D("0.10"))
    assert (hold.boundary, hold.tool) == (Boundary.TOOL, "search")
    before = ctx.budget.snapshot()
    with pytest.raises(ValueError, match="records no tokens"):
        hold.settle(cost=D("0.05"), input_tokens=1)
    assert ctx.budget.snapshot() == before
    assert not hold.settled
    hold.settle(cost=D("0.05"))
    assert ctx.budget.snapshot().cost == D("0.05")


def test_a_reservation_without_max_cost_is_refused_under_a_money_limit() -> None:
    ctx = money_run()
    before = ctx.budget.snapshot()
    with pytest.raises(ValueError, match=r"reserve_model_call\(\) needs max_cost"):
        ctx.reserve_model_call()
    with pytest.raises(ValueError, match=r"reserve_tool_call\('t'\) needs max_cost"):
        ctx.reserve_tool_call("t")
    assert ctx.budget.snapshot() == before
    assert ctx.lifecycle.state is RunState.RUNNING


def test_without_a_money_limit_max_cost_is_optional_and_tracked() -> None:
    ctx = money_run(cost=None)
    free = ctx.reserve_model_call()
    assert free.max_cost == 0
    paid = ctx.reserve_tool_call("t", max_cost=D("5"))
    assert ctx.budget.snapshot().cost_held == 5
    paid.settle(cost=D("7"))  # no limit: recorded, never exhausts
    free.settle(cost=D("0.5"), output_tokens=3)
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held, usage.output_tokens) == (D("7.5"), D(0), 3)
    assert ctx.budget.state is BudgetState.ACTIVE


@pytest.mark.parametrize("bad", [0.1, 1, "0.1", D("-0.01"), D("NaN")], ids=repr)
def test_a_bad_max_cost_is_refused_and_reserves_nothing(bad: Any) -> None:
    ctx = money_run()
    with pytest.raises((TypeError, ValueError), match="max_cost"):
        ctx.reserve_model_call(max_cost=bad)
    assert ctx.budget.snapshot().model_calls == 0


def test_a_hold_that_would_pass_the_limit_reserves_nothing_and_exhausts_on_cost() -> None:
    ctx = money_run(model_calls=5)
    ctx.reserve_model_call(max_cost=D("0.60"))
    before = ctx.budget.snapshot()
    with pytest.raises(BudgetExhausted) as refused:
        ctx.reserve_tool_call("t", max_cost=D("0.41"))
    assert refused.value.dimension is BudgetDimension.COST
    assert refused.value.boundary is Boundary.TOOL
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.BUDGET_EXHAUSTED
    assert termination.boundary is Boundary.TOOL
    assert termination.reason == (
        "cost limit $1 would be passed: a hold of $0.41 refused ($0 settled, $0.6 held)"
    )
    usage = ctx.budget.snapshot()
    assert (usage.tool_calls, usage.cost_held) == (before.tool_calls, before.cost_held)
    assert usage.exhausted is BudgetDimension.COST
    with pytest.raises(BudgetExhausted):  # the next reservation is refused, whatever it holds
        ctx.reserve_model_call(max_cost=D(0))


def test_a_model_hold_refused_on_cost_names_the_model_boundary() -> None:
    ctx = money_run()
    with pytest.raises(BudgetExhausted) as refused:
        ctx.reserve_model_call(max_cost=D("1.01"))
    assert (refused.value.dimension, refused.value.boundary) == (
        BudgetDimension.COST,
        Boundary.MODEL,
    )
    assert ctx.budget.snapshot().model_calls == 0


def test_a_hold_up_to_the_limit_exactly_is_granted() -> None:
    ctx = money_run()
    ctx.reserve_model_call(max_cost=DOLLAR)
    assert ctx.budget.snapshot().cost_held == DOLLAR


def test_amounts_are_rounded_up_to_a_picodollar() -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("1E-15"))
    assert hold.max_cost == D("1E-12")
    hold.settle(cost=D("1E-13"))
    assert ctx.budget.snapshot().cost == D("1E-12")


# -- settling -----------------------------------------------------------------------------------


def test_an_actual_above_max_cost_is_recorded_and_exhausts_the_run() -> None:
    ctx = money_run()
    hold = ctx.reserve_tool_call("t", max_cost=D("0.50"))
    hold.settle(cost=D("1.20"))  # does not raise: the call happened
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held, usage.exhausted) == (D("1.2"), D(0), BudgetDimension.COST)
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.BUDGET_EXHAUSTED
    assert termination.boundary is Boundary.TOOL
    assert termination.reason == "cost limit $1 exceeded: $1.2 settled, $0 held"
    with pytest.raises(BudgetExhausted) as refused:
        ctx.reserve_tool_call("t", max_cost=D(0))
    assert refused.value.dimension is BudgetDimension.COST


def test_an_actual_above_max_cost_within_the_limit_goes_on() -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("0.10"))
    hold.settle(cost=D("0.30"))
    assert ctx.budget.snapshot().cost == D("0.3")
    assert ctx.lifecycle.state is RunState.RUNNING


def test_tokens_past_their_limit_in_a_settle_exhaust_on_tokens() -> None:
    ctx = money_run(input_tokens=10)
    hold = ctx.reserve_model_call(max_cost=D("0.10"))
    hold.settle(cost=D("0.01"), input_tokens=11)
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.cost, usage.exhausted) == (
        11,
        D("0.01"),
        BudgetDimension.INPUT_TOKENS,
    )
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.boundary is Boundary.MODEL


def test_a_hold_granted_before_the_run_ended_still_settles_after() -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("0.40"))
    ctx.lifecycle.succeed()
    hold.settle(cost=D("0.30"), output_tokens=5)
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held, usage.output_tokens) == (D("0.3"), D(0), 5)
    assert ctx.lifecycle.state is RunState.SUCCESS


def test_a_settle_past_the_limit_after_the_run_ended_keeps_the_first_outcome() -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("0.40"))
    ctx.lifecycle.succeed()
    hold.settle(cost=D("3"))
    assert ctx.lifecycle.state is RunState.SUCCESS
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.exhausted) == (D("3"), BudgetDimension.COST)
    assert ctx.budget.state is BudgetState.EXHAUSTED


def test_a_hold_settles_once() -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("0.40"))
    hold.settle(cost=D("0.10"), input_tokens=1)
    before = ctx.budget.snapshot()
    with pytest.raises(RuntimeError, match=r"CallHold\(Model call.*settled already"):
        hold.settle(cost=D("0.10"), input_tokens=1)
    assert ctx.budget.snapshot() == before


def test_a_hold_never_settled_stays_charged_at_its_worst_case() -> None:
    ctx = money_run()
    ctx.reserve_model_call(max_cost=D("0.70"))
    ctx.lifecycle.fail("cut off")
    assert ctx.budget.snapshot().cost_held == D("0.7")


@pytest.mark.parametrize(
    "bad",
    [
        {"cost": 0.1},
        {"cost": D("-0.1")},
        {"cost": D("NaN")},
        {"cost": 1},
        {"cost": D("0.1"), "input_tokens": -1},
        {"cost": D("0.1"), "output_tokens": 1.0},
        {"cost": D("0.1"), "output_tokens": True},
    ],
    ids=repr,
)
def test_bad_settle_input_is_refused_and_changes_nothing(bad: dict[str, Any]) -> None:
    ctx = money_run()
    hold = ctx.reserve_model_call(max_cost=D("0.40"))
    before = ctx.budget.snapshot()
    with pytest.raises((TypeError, ValueError)):
        hold.settle(**bad)
    assert ctx.budget.snapshot() == before
    assert not hold.settled
    hold.settle(cost=D("0.1"))  # still settles once, afterwards
    assert ctx.budget.snapshot().cost == D("0.1")


def test_settle_takes_keywords_only() -> None:
    hold = money_run().reserve_model_call(max_cost=D("0.40"))
    untyped: Any = hold.settle
    with pytest.raises(TypeError):
        untyped(D("0.1"))


def test_limits_with_a_cost_replace_like_any_limit() -> None:
    assert dataclasses.replace(limits(), cost=D("3")).cost == D("3")


# -- threads ------------------------------------------------------------------------------------


def test_sixteen_parallel_paid_tool_calls_under_a_dollar_run_exactly_ten() -> None:
    ctx = money_run()
    barrier = threading.Barrier(16)
    granted: list[CallHold] = []
    refused: list[RunTerminated] = []
    lock = threading.Lock()

    def call() -> None:
        barrier.wait()
        try:
            hold = ctx.reserve_tool_call("paid", max_cost=D("0.10"))
        except RunTerminated as error:
            with lock:
                refused.append(error)
            return
        with lock:
            granted.append(hold)
        hold.settle(cost=D("0.10"))

    threads = [threading.Thread(target=call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(granted), len(refused)) == (10, 6)
    usage = ctx.budget.snapshot()
    assert (usage.tool_calls, usage.cost, usage.cost_held) == (10, DOLLAR, D(0))
    assert all(isinstance(error, BudgetExhausted) for error in refused)


def test_racing_holds_and_settles_never_pass_the_limit() -> None:
    """Threads hold and settle (each actual at most its hold) while a reader snapshots: settled
    plus held is never above the limit, and settled spend is the sum of the actual costs."""
    ctx = money_run(model_calls=10_000)
    workers, rounds = 8, 150
    barrier = threading.Barrier(workers + 1)
    stop = threading.Event()
    spent: list[Decimal] = []
    lock = threading.Lock()
    seen: list[Decimal] = []

    def work(number: int) -> None:
        barrier.wait()
        for i in range(rounds):
            max_cost = D(number + 1 + i % 5).scaleb(-3)
            try:
                hold = ctx.reserve_model_call(max_cost=max_cost)
            except RunTerminated:
                return
            actual = max_cost - D(i % 3).scaleb(-4)
            hold.settle(cost=actual, input_tokens=1)
            with lock:
                spent.append(actual)

    def watch() -> None:
        barrier.wait()
        while not stop.is_set():
            usage = ctx.budget.snapshot()
            seen.append(usage.cost + usage.cost_held)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    watcher = threading.Thread(target=watch)
    for thread in threads:
        thread.start()
    watcher.start()
    for thread in threads:
        thread.join()
    stop.set()
    watcher.join()
    usage = ctx.budget.snapshot()
    assert max(seen) <= DOLLAR
    assert usage.cost + usage.cost_held <= DOLLAR
    assert usage.cost == sum(spent)
    assert usage.cost_held == 0
    assert usage.input_tokens == len(spent)
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED  # the work wanted more than $1
    assert usage.exhausted is BudgetDimension.COST
