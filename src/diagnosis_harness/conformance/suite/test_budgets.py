"""Requirement: Run budgets SHALL be explicit, thread-safe, and observable."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    BudgetDimension,
    BudgetExhausted,
    BudgetUsage,
    CancellationReason,
    RunState,
)
from diagnosis_harness.testing import FakeModel, FakeResponse, FakeTool

from ._support import BUDGETS, limits, new_run, state

if TYPE_CHECKING:
    from diagnosis_harness import RunContext


def _consistent(usage: BudgetUsage) -> None:
    assert usage.tool_calls == sum(usage.per_tool_calls.values())
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def _assert_exhausted_by(
    ctx: RunContext, caught: BudgetExhausted, dimension: BudgetDimension, limit: int
) -> None:
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.BUDGET_EXHAUSTED
    assert caught.termination is termination
    assert caught.dimension is dimension
    assert dimension.value in termination.reason
    assert str(limit) in termination.reason
    assert ctx.budget.snapshot().exhausted is dimension
    assert ctx.cancellation.reason is CancellationReason.BUDGET_EXHAUSTED


# -- Scenario: Per-Tool budget is exhausted ---------------------------------------------------


@pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
def test_per_tool_budget_is_exhausted() -> None:
    ctx = new_run(budget=limits(tool_calls=10, per_tool_calls=2))
    logs = FakeTool("logs", result="lines")
    metrics = FakeTool("metrics", result=0.5)
    metrics(ctx, "m-1")
    logs(ctx, "l-1")
    logs(ctx, "l-2")
    before = ctx.budget.snapshot()

    with pytest.raises(BudgetExhausted) as caught:
        logs(ctx, "l-3")  # one call beyond the per-Tool limit

    # The extra call is not reserved (nor invoked), and usage stays internally consistent.
    assert logs.calls == 2
    usage = ctx.budget.snapshot()
    assert dict(usage.per_tool_calls) == {"metrics": 1, "logs": 2}
    assert usage.tool_calls == 3 == before.tool_calls
    _consistent(usage)
    # The Run terminates as BUDGET_EXHAUSTED, naming the dimension and its limit.
    assert state(ctx) is RunState.BUDGET_EXHAUSTED
    _assert_exhausted_by(ctx, caught.value, BudgetDimension.PER_TOOL_CALLS, 2)
    assert "logs" in caught.value.termination.reason
    with pytest.raises(BudgetExhausted):
        metrics(ctx, "m-2")
    assert metrics.calls == 1


# -- Scenario: Actual Token usage exceeds the limit -------------------------------------------


@pytest.mark.spec(BUDGETS, "Actual Token usage exceeds the limit")
def test_actual_token_usage_exceeds_the_limit() -> None:
    ctx = new_run(budget=limits(input_tokens=1_000, output_tokens=1_000, total_tokens=150))
    model = FakeModel(
        [
            FakeResponse("first", input_tokens=100, output_tokens=90),  # 190 > 150 total
            FakeResponse("never returned"),
        ]
    )

    response = model.complete(ctx, "diagnose")  # the completed response is returned

    assert response.text == "first"
    usage = ctx.budget.snapshot()
    # The actual input, output and total usage remains recorded, above the limit.
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (100, 90, 190)
    assert usage.exhausted is BudgetDimension.TOTAL_TOKENS
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.BUDGET_EXHAUSTED
    assert "total_tokens" in termination.reason
    assert "150" in termination.reason
    assert ctx.cancellation.reason is CancellationReason.BUDGET_EXHAUSTED
    # The Core rejects the next controlled operation.
    with pytest.raises(BudgetExhausted) as caught:
        model.complete(ctx, "again")
    assert caught.value.dimension is BudgetDimension.TOTAL_TOKENS
    assert model.calls == 1
    assert ctx.budget.snapshot() == usage
