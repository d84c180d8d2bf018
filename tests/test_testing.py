"""``diagnosis_harness.testing``: ManualClock, FakeModel and FakeTool behave as documented."""

from __future__ import annotations

import dataclasses
import doctest
import threading
from decimal import Decimal
from typing import Any

import pytest

import diagnosis_harness
import diagnosis_harness.testing as testing_module
from diagnosis_harness import (
    BudgetDimension,
    BudgetExhausted,
    CancellationReason,
    FailureKind,
    HarnessFailure,
    RunCancelled,
    RunTimedOut,
)
from diagnosis_harness.testing import FakeModel, FakeResponse, FakeTool, ManualClock
from strategies import limits, new_run


def test_the_module_doctest_passes() -> None:
    result = doctest.testmod(testing_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_manual_clock_is_the_root_export() -> None:
    assert ManualClock is diagnosis_harness.ManualClock
    assert set(testing_module.__all__) >= {"FakeModel", "FakeResponse", "FakeTool", "ManualClock"}


# -- FakeModel --------------------------------------------------------------------------------


def test_fake_model_answers_from_its_script_in_order() -> None:
    ctx = new_run()
    model = FakeModel([FakeResponse("one", 1, 2), FakeResponse("two", 3, 4)])
    assert model.complete(ctx, "p1").text == "one"
    assert model.complete(ctx, "p2").text == "two"
    assert model.prompts == ["p1", "p2"]
    assert model.calls == 2
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (2, 4, 6)


def test_fake_model_raises_a_scripted_exception_after_reserving() -> None:
    ctx = new_run()
    failure = HarnessFailure(FailureKind.TRANSPORT, "connection reset")
    model = FakeModel([failure, FakeResponse("ok")])
    with pytest.raises(HarnessFailure) as caught:
        model.complete(ctx, "p1")
    assert caught.value is failure
    assert model.complete(ctx, "p2").text == "ok"
    assert model.prompts == ["p1", "p2"]
    assert ctx.budget.snapshot().model_calls == 2  # the failed call was a real call


def test_fake_model_refused_call_consumes_nothing() -> None:
    ctx = new_run(budget=limits(model_calls=1))
    model = FakeModel([FakeResponse("a"), FakeResponse("b")])
    model.complete(ctx, "p1")
    with pytest.raises(BudgetExhausted):
        model.complete(ctx, "p2")
    assert model.prompts == ["p1"]
    ctx2 = new_run()
    ctx2.cancellation.cancel(CancellationReason.USER_REQUESTED)
    with pytest.raises(RunCancelled):
        model.complete(ctx2, "p3")
    assert model.calls == 1


def test_fake_model_out_of_script_is_a_test_error() -> None:
    ctx = new_run()
    model = FakeModel([])
    with pytest.raises(AssertionError, match="exhausted"):
        model.complete(ctx, "p")


def test_fake_model_records_usage_past_a_limit_and_still_returns() -> None:
    ctx = new_run(budget=limits(output_tokens=5))
    model = FakeModel([FakeResponse("long", input_tokens=1, output_tokens=50)])
    assert model.complete(ctx, "p").text == "long"
    assert ctx.budget.snapshot().output_tokens == 50


def test_fake_model_rejects_bad_script_items() -> None:
    untyped: Any = FakeModel
    with pytest.raises(TypeError, match="script"):
        untyped(["not a response"])


@pytest.mark.parametrize("field", ["input_tokens", "output_tokens"])
@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (True, TypeError), (1.5, TypeError)]
)
def test_fake_response_rejects_bad_token_counts(
    field: str, value: object, error: type[Exception]
) -> None:
    untyped: Any = FakeResponse
    with pytest.raises(error, match=field):
        untyped("text", **{field: value})


def test_fake_response_is_frozen() -> None:
    untyped: Any = FakeResponse("x", 1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        untyped.text = "y"


# -- FakeTool ---------------------------------------------------------------------------------


def test_fake_tool_returns_its_result_and_records_each_invocation() -> None:
    ctx = new_run()
    tool = FakeTool("search", result=["hit"])
    assert tool(ctx, "call-1", query="disk", limit=3) == ["hit"]
    assert tool.calls == 1
    (invocation,) = tool.invocations
    assert invocation.tool_call_id == "call-1"
    assert invocation.arguments == {"query": "disk", "limit": 3}
    assert invocation.context is ctx
    assert invocation.thread_id == threading.get_ident()
    assert ctx.budget.snapshot().per_tool_calls == {"search": 1}
    assert tool.name == "search"


def test_fake_tool_raises_its_error_after_reserving() -> None:
    ctx = new_run()
    error = HarnessFailure(FailureKind.SERVER_ERROR, "500")
    tool = FakeTool("search", result=None, error=error)
    with pytest.raises(HarnessFailure) as caught:
        tool(ctx, "call-1")
    assert caught.value is error
    assert tool.calls == 1
    assert ctx.budget.snapshot().tool_calls == 1


def test_fake_tool_is_not_invoked_when_the_run_is_over() -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, timeout=1)
    tool = FakeTool("search", result=1)
    clock.advance(1)
    with pytest.raises(RunTimedOut):
        tool(ctx, "call-1")
    assert tool.invocations == []


def test_fake_tool_barrier_holds_invocations_in_flight_together() -> None:
    ctx = new_run()
    barrier = threading.Barrier(3, timeout=10)
    tool = FakeTool("search", result="r", barrier=barrier)
    results: list[str] = []

    def call(i: int) -> None:
        results.append(tool(ctx, f"call-{i}"))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == ["r"] * 3
    assert tool.calls == 3
    assert len({i.thread_id for i in tool.invocations}) == 3


@pytest.mark.parametrize(("name", "error"), [("", ValueError), ("  ", ValueError), (3, TypeError)])
def test_fake_tool_needs_a_name(name: object, error: type[Exception]) -> None:
    untyped: Any = FakeTool
    with pytest.raises(error, match="name"):
        untyped(name, result=None)


# -- the fakes on a money budget ------------------------------------------------------------


def test_fake_model_holds_max_cost_and_settles_each_response_cost() -> None:
    ctx = new_run(budget=limits(cost=Decimal("1.00")))
    model = FakeModel(
        [FakeResponse("a", 10, 5, cost=Decimal("0.25")), FakeResponse("b", 1, 1)],
        max_cost=Decimal("0.50"),
    )
    model.complete(ctx, "p1")
    model.complete(ctx, "p2")  # no cost: settled at zero
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (Decimal("0.25"), Decimal(0))
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (2, 11, 6)


def test_fake_model_refused_hold_sends_nothing() -> None:
    ctx = new_run(budget=limits(cost=Decimal("1.00")))
    model = FakeModel([FakeResponse("a", cost=Decimal("0.90"))] * 3, max_cost=Decimal("0.60"))
    model.complete(ctx, "p1")  # 0.90 settled: 0.10 left, less than the next worst case
    with pytest.raises(BudgetExhausted) as refused:
        model.complete(ctx, "p2")
    assert refused.value.dimension is BudgetDimension.COST
    assert model.prompts == ["p1"]


def test_fake_model_scripted_exception_stays_held_at_its_worst_case() -> None:
    ctx = new_run(budget=limits(cost=Decimal("1.00")))
    failure = HarnessFailure(FailureKind.TRANSPORT, "connection reset")
    model = FakeModel([failure], max_cost=Decimal("0.30"))
    with pytest.raises(HarnessFailure):
        model.complete(ctx, "p1")
    assert ctx.budget.snapshot().cost_held == Decimal("0.30")


def test_fake_model_without_max_cost_on_a_money_budget_is_refused() -> None:
    ctx = new_run(budget=limits(cost=Decimal("1.00")))
    model = FakeModel([FakeResponse("a")])
    with pytest.raises(ValueError, match="max_cost"):
        model.complete(ctx, "p1")
    assert model.prompts == []
    assert ctx.budget.snapshot().model_calls == 0


def test_fake_tool_price_is_held_and_settled_also_when_it_raises() -> None:
    ctx = new_run(budget=limits(cost=Decimal("1.00")))
    paid = FakeTool("search", result="r", price=Decimal("0.10"))
    failing = FakeTool("fetch", result="r", price=Decimal("0.20"), error=RuntimeError("boom"))
    paid(ctx, "call-1")
    with pytest.raises(RuntimeError, match="boom"):
        failing(ctx, "call-2")
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (Decimal("0.30"), Decimal(0))


def test_sixteen_parallel_paid_fake_tool_calls_under_a_dollar_run_exactly_ten() -> None:
    ctx = new_run(budget=limits(cost=Decimal("1.00")))
    start = threading.Barrier(16, timeout=10)
    tool = FakeTool("search", result="r", price=Decimal("0.10"))
    refused: list[BudgetDimension | None] = []

    def call(i: int) -> None:
        start.wait()
        try:
            tool(ctx, f"call-{i}")
        except BudgetExhausted as error:
            refused.append(error.dimension)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert tool.calls == 10
    assert refused == [BudgetDimension.COST] * 6
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held, usage.tool_calls) == (Decimal("1.00"), Decimal(0), 10)


@pytest.mark.parametrize("bad", [0.1, -1, "0.1", Decimal("-0.01"), Decimal("NaN")])
def test_fakes_refuse_a_bad_price(bad: object) -> None:
    untyped: Any = bad
    with pytest.raises((TypeError, ValueError), match="price"):
        FakeTool("search", result="r", price=untyped)
    with pytest.raises((TypeError, ValueError), match="max_cost"):
        FakeModel([], max_cost=untyped)
    with pytest.raises((TypeError, ValueError), match="cost"):
        FakeResponse("a", cost=untyped)
