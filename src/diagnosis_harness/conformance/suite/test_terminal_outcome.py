"""Requirement: A Run SHALL have exactly one terminal outcome."""

from __future__ import annotations

import dataclasses

import pytest

from diagnosis_harness import (
    BudgetExhausted,
    CancellationReason,
    ManualClock,
    RunState,
    RunTermination,
)

from ._support import TERMINAL, limits, new_run, state


@pytest.mark.spec(TERMINAL, "Success wins a terminal race")
def test_success_wins_a_terminal_race() -> None:
    clock = ManualClock(100)
    ctx = new_run(clock=clock)
    won = ctx.lifecycle.succeed()
    clock.advance(1)

    failure = ctx.lifecycle.fail("a late exception handler")
    cancelled = ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)

    assert won.changed
    assert ctx.lifecycle.state is RunState.SUCCESS
    # Both later finish attempts report that they did not change the outcome.
    assert failure.changed is False
    assert failure.termination is won.termination
    assert cancelled is False
    assert ctx.lifecycle.termination is won.termination
    assert won.termination == RunTermination(RunState.SUCCESS, "succeeded", 100)


@pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race")
def test_budget_exhaustion_wins_a_terminal_race() -> None:
    clock = ManualClock(500)
    ctx = new_run(clock=clock, budget=limits(tool_calls=2))
    ctx.reserve_tool_call("a")
    ctx.reserve_tool_call("b")
    clock.advance_ns(20)
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_tool_call("c")
    exhausted = ctx.lifecycle.termination
    assert exhausted is not None
    original = dataclasses.replace(exhausted)
    clock.advance(3)

    # The exception handler reports failure, later.
    failure = ctx.lifecycle.fail(f"tool step failed: {caught.value}")

    assert failure.changed is False
    assert failure.termination is exhausted
    assert state(ctx) is RunState.BUDGET_EXHAUSTED
    assert ctx.lifecycle.termination is exhausted
    assert exhausted == original
    assert exhausted.at_ns == 520  # its original completion time
    assert "tool_calls" in exhausted.reason
    assert "2" in exhausted.reason
    assert not ctx.lifecycle.succeed().changed
    assert ctx.cancellation.cancel(CancellationReason.SHUTDOWN) is False
    assert ctx.lifecycle.termination == original
