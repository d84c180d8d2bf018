"""Paid Tools through ``GovernedTools(tool_prices=...)``: each call holds its price in its
reservation and settles it when it ends, so parallel calls never spend past the money limit; a
Tool without a price under a money limit is refused before the call; bad prices are refused."""

from __future__ import annotations

import asyncio
import functools
from decimal import Decimal
from typing import Any

import pytest

from diagnosis_harness import (
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    FailureKind,
    HarnessFailure,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunContext,
    RunState,
)
from diagnosis_harness.integrations import GovernedTools, UnknownToolPrice
from racing import race

pytestmark = pytest.mark.usefixtures("eager_thread_switching")

DIME = Decimal("0.10")
ZERO = Decimal(0)
CALLS = 16


def _run(*, cost: Decimal | None = Decimal("1.00"), tool_calls: int = 100) -> RunContext:
    limits = BudgetLimits(
        model_calls=10,
        tool_calls=tool_calls,
        per_tool_calls=tool_calls,
        input_tokens=1000,
        output_tokens=1000,
        total_tokens=2000,
        run_bytes=10_000,
        cost=cost,
    )
    policies = RetryPolicies(
        [
            *RetryPolicies.defaults().values(),
            RetryPolicy("flaky_tool", 3, frozenset({FailureKind.TIMEOUT})),
        ]
    )
    return RunContext.create(
        session_id="s-1",
        run_id="run-money",
        limits=limits,
        timeout=60,
        clock=ManualClock(),
        retry_policies=policies,
    )


def _spent(ctx: RunContext) -> tuple[Decimal, Decimal]:
    usage = ctx.budget.snapshot()
    return usage.cost, usage.cost_held


def _race_paid_calls() -> tuple[RunContext, list[int], list[int]]:
    """16 threads released together by a barrier, each one call of a $0.10 Tool, under $1.00."""
    ctx = _run()
    tools = GovernedTools(ctx, tool_prices={"search": DIME})
    ran: list[int] = []
    refused: list[int] = []

    def racer(i: int) -> None:
        try:
            tools.call("search", f"c{i}", ran.append, i)
        except BudgetExhausted:
            refused.append(i)

    race([functools.partial(racer, i) for i in range(CALLS)])
    return ctx, ran, refused


def test_sixteen_threads_of_a_dime_tool_under_a_dollar_run_exactly_ten() -> None:
    """Exactly 10 of the 16 racing calls run, every round; $1.00 settled, nothing left held.

    A call that ran while another's refusal ended the run is refused at its result (the run is
    over), but it ran, and is paid: the calls that never started are the refused ones that did
    not run."""
    for _ in range(30):
        ctx, ran, refused = _race_paid_calls()
        assert len(ran) == 10
        assert len(set(refused) - set(ran)) == CALLS - 10
        assert _spent(ctx) == (Decimal("1.00"), ZERO)
        usage = ctx.budget.snapshot()
        assert (usage.tool_calls, usage.exhausted) == (10, BudgetDimension.COST)
        assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


def test_sixteen_tasks_of_a_dime_tool_under_a_dollar_run_exactly_ten() -> None:
    """The async path, 16 calls under ``asyncio.gather``: the 10 granted ones all hold at once
    ($1.00 held while they run, nothing settled), the other 6 are refused; then $1.00 settled."""

    async def scenario() -> tuple[list[int], list[int], tuple[Decimal, Decimal]]:
        ctx = _run()
        tools = GovernedTools(ctx, tool_prices={"search": DIME})
        ran: list[int] = []
        refused: list[int] = []
        decided = asyncio.Condition()
        release = asyncio.Event()

        async def search(i: int) -> str:
            async with decided:
                ran.append(i)
                decided.notify_all()
            await release.wait()  # every granted call holds its price until all are decided
            return f"result {i}"

        async def governed(i: int) -> None:
            try:
                await tools.call_async("search", f"c{i}", search, i)
            except BudgetExhausted:
                async with decided:
                    refused.append(i)
                    decided.notify_all()

        async def coordinator() -> tuple[Decimal, Decimal]:
            async with decided:
                await decided.wait_for(lambda: len(ran) + len(set(refused) - set(ran)) == CALLS)
            while_running = _spent(ctx)
            release.set()
            return while_running

        watching = asyncio.ensure_future(coordinator())
        calls = [governed(i) for i in range(CALLS)]
        await asyncio.wait_for(asyncio.gather(*calls, watching), 30)
        while_running = watching.result()
        assert _spent(ctx) == (Decimal("1.00"), ZERO)
        assert ctx.budget.snapshot().exhausted is BudgetDimension.COST
        return ran, refused, while_running

    ran, refused, while_running = asyncio.run(scenario())
    assert len(ran) == 10
    assert len(set(refused) - set(ran)) == CALLS - 10
    assert while_running == (ZERO, Decimal("1.00"))


def test_a_call_that_ran_and_failed_is_still_paid() -> None:
    ctx = _run()
    tools = GovernedTools(ctx, tool_prices={"search": DIME})

    def broken() -> str:
        raise RuntimeError("the search API answered 500")

    with pytest.raises(RuntimeError, match="answered 500"):
        tools.call("search", "c1", broken)
    assert _spent(ctx) == (DIME, ZERO)
    assert ctx.lifecycle.state is RunState.RUNNING


def test_the_attempts_of_one_call_are_one_call_at_one_price() -> None:
    ctx = _run()
    tools = GovernedTools(ctx, policy="flaky_tool", tool_prices={"search": DIME})
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise HarnessFailure(FailureKind.TIMEOUT, "the search API timed out")
        return "found"

    assert tools.call("search", "c1", flaky) == "found"
    assert len(attempts) == 3
    assert _spent(ctx) == (DIME, ZERO)
    assert ctx.budget.snapshot().tool_calls == 1


def test_a_call_refused_before_it_ran_holds_and_pays_nothing() -> None:
    ctx = _run(cost=Decimal("0.05"))
    tools = GovernedTools(ctx, tool_prices={"search": DIME})
    ran: list[int] = []
    with pytest.raises(BudgetExhausted) as refused:
        tools.call("search", "c1", ran.append, 1)
    assert refused.value.dimension is BudgetDimension.COST
    assert ran == []
    assert _spent(ctx) == (ZERO, ZERO)


def test_a_tool_without_a_price_under_a_money_limit_is_refused_before_the_call() -> None:
    ctx = _run()
    tools = GovernedTools(ctx, tool_prices={"search": DIME})
    ran: list[int] = []
    with pytest.raises(UnknownToolPrice, match=r"Tool 'logs' has no price") as unknown:
        tools.call("logs", "c1", ran.append, 1)
    assert unknown.value.tool == "logs"
    assert "tool_prices={'logs': Decimal('0.10')}" in str(unknown.value)
    assert isinstance(unknown.value, LookupError)
    with pytest.raises(UnknownToolPrice):
        asyncio.run(tools.call_in_thread("logs", "c2", ran.append, 2))
    assert ran == []  # never called, and nothing reserved or held
    usage = ctx.budget.snapshot()
    assert (usage.tool_calls, usage.cost, usage.cost_held) == (0, ZERO, ZERO)
    assert ctx.lifecycle.state is RunState.RUNNING


def test_a_free_tool_under_a_money_limit_says_so_with_a_price_of_zero() -> None:
    ctx = _run()
    tools = GovernedTools(ctx, tool_prices={"logs": Decimal(0)})
    assert tools.call("logs", "c1", str.upper, "ok") == "OK"
    assert _spent(ctx) == (ZERO, ZERO)
    assert ctx.budget.snapshot().tool_calls == 1


def test_without_a_money_limit_prices_are_tracked_and_unpriced_tools_hold_nothing() -> None:
    ctx = _run(cost=None)
    tools = GovernedTools(ctx, tool_prices={"search": DIME})
    for i in range(3):
        tools.call("search", f"s{i}", str, i)
    tools.call("logs", "l1", str, 1)
    assert _spent(ctx) == (Decimal("0.30"), ZERO)
    assert tools.price_of("search") == DIME
    assert tools.price_of("logs") is None


def test_the_prices_are_a_read_only_copy() -> None:
    prices = {"search": DIME}
    tools = GovernedTools(_run(), tool_prices=prices)
    prices["search"] = Decimal(5)
    assert dict(tools.tool_prices) == {"search": DIME}
    with pytest.raises(TypeError):
        tools.tool_prices["search"] = Decimal(1)  # type: ignore[index]  # the mutation under test


@pytest.mark.parametrize(
    ("prices", "error", "says"),
    [
        ([("search", DIME)], TypeError, r"tool_prices must be a mapping of Tool name"),
        ({"search": 0.1}, TypeError, r"tool_prices\['search'\] must be a decimal.Decimal.*float"),
        ({"search": 1}, TypeError, r"tool_prices\['search'\] must be a decimal.Decimal"),
        ({"search": "0.10"}, TypeError, r"tool_prices\['search'\] must be a decimal.Decimal"),
        ({"search": Decimal("-0.10")}, ValueError, r"tool_prices\['search'\] must be a finite"),
        ({"search": Decimal("NaN")}, ValueError, r"tool_prices\['search'\] must be a finite"),
        ({"search": Decimal("Infinity")}, ValueError, r"tool_prices\['search'\] must be a finite"),
        ({" ": DIME}, TypeError, r"tool_prices keys must be non-blank str"),
        ({7: DIME}, TypeError, r"tool_prices keys must be non-blank str"),
    ],
)
def test_bad_prices_are_refused_at_construction(prices: Any, error: type, says: str) -> None:
    ctx = _run()
    with pytest.raises(error, match=says):
        GovernedTools(ctx, tool_prices=prices)
    assert _spent(ctx) == (ZERO, ZERO)
    assert ctx.budget.snapshot().tool_calls == 0
