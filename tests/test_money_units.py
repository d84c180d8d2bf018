"""The amounts a hold or a settle is given, as picodollars: the same units however often the same
amount recurs (the conversion caches recurring amounts), and only a ``Decimal`` is an amount; a
hold settles once even when threads race to settle it."""

from __future__ import annotations

import functools
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness import BudgetLimits, CallHold, RunContext
from diagnosis_harness.pricing import to_units
from racing import race

BIG = 1 << 62


def _run(cost: Decimal | None = Decimal(10**7)) -> RunContext:
    limits = BudgetLimits(
        model_calls=BIG,
        tool_calls=BIG,
        per_tool_calls=BIG,
        input_tokens=BIG,
        output_tokens=BIG,
        total_tokens=BIG,
        run_bytes=BIG,
        cost=cost,
    )
    return RunContext.create(session_id="s-1", run_id="units", limits=limits, timeout=60)


amounts = st.decimals(min_value=0, max_value=10**6, allow_nan=False, allow_infinity=False)


@given(amount=amounts)
def test_a_hold_and_its_settle_are_the_amount_rounded_up_every_time(amount: Decimal) -> None:
    """Twice the same amount, and once an equal one written otherwise (``0.10``, ``0.1``): the
    same units each time, the units ``to_units`` rounds up to."""
    ctx = _run()
    units = to_units(amount)
    for written in (amount, amount, amount.normalize()):
        hold = ctx.reserve_tool_call("search", max_cost=written)
        assert ctx.budget.snapshot().cost_held_units == units
        hold.settle(cost=written)
        assert ctx.budget.snapshot().cost_held_units == 0
    assert ctx.budget.snapshot().cost_units == 3 * units


@pytest.mark.parametrize("bad", [1, True, 0.1, "0.10"])
def test_a_number_equal_to_an_amount_already_seen_is_not_an_amount(bad: object) -> None:
    ctx = _run()
    for seen in (Decimal(1), Decimal("0.1")):  # now recurring amounts, their units remembered
        ctx.reserve_tool_call("search", max_cost=seen).settle(cost=seen)
    before = ctx.budget.snapshot()
    with pytest.raises(TypeError, match=r"max_cost must be a decimal.Decimal"):
        ctx.reserve_tool_call("search", max_cost=bad)  # type: ignore[arg-type]  # under test
    hold = ctx.reserve_tool_call("search", max_cost=Decimal(1))
    with pytest.raises(TypeError, match=r"cost must be a decimal.Decimal"):
        hold.settle(cost=bad)  # type: ignore[arg-type]  # the bad input under test
    assert not hold.settled
    hold.settle(cost=Decimal(1))
    usage = ctx.budget.snapshot()
    assert usage.tool_calls == before.tool_calls + 1
    assert usage.cost == before.cost + 1


@pytest.mark.parametrize("bad", [Decimal("sNaN"), Decimal("NaN"), Decimal("-Infinity")])
def test_a_decimal_that_is_no_amount_is_refused_by_name(bad: Decimal) -> None:
    ctx = _run()
    with pytest.raises(ValueError, match=r"max_cost must be a finite Decimal"):
        ctx.reserve_tool_call("search", max_cost=bad)
    assert ctx.budget.snapshot().tool_calls == 0


def _race_to_settle(racers: int) -> tuple[RunContext, CallHold, list[int], list[int]]:
    """``racers`` threads, released together by a barrier, settling the same hold."""
    ctx = _run()
    hold = ctx.reserve_tool_call("search", max_cost=Decimal("0.10"))
    settled: list[int] = []
    refused: list[int] = []

    def settle(i: int) -> None:
        try:
            hold.settle(cost=Decimal("0.10"))
        except RuntimeError:
            refused.append(i)
        else:
            settled.append(i)

    race([functools.partial(settle, i) for i in range(racers)])
    return ctx, hold, settled, refused


@pytest.mark.usefixtures("eager_thread_switching")
def test_threads_racing_to_settle_one_hold_settle_it_once() -> None:
    """8 threads released together on the same hold: exactly one settles it, the others are
    told it is settled already, and the run records its cost once."""
    for _ in range(50):
        ctx, hold, settled, refused = _race_to_settle(8)
        assert (len(settled), len(refused)) == (1, 7)
        usage = ctx.budget.snapshot()
        assert (usage.cost, usage.cost_held) == (Decimal("0.1"), Decimal(0))
        assert hold.settled
