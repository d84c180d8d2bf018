"""The run's one owner of state (``LocalRun``), seen through the handles users hold.

What these pin down: an ending a boundary causes is stamped with the instant that boundary read
(not with a second reading of the clock); the handles hold no state of their own; the value types
the owner returns hash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetExhausted,
    CancellationReason,
    RunState,
    RunTerminated,
    RunTimedOut,
)
from strategies import limits, new_run

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness import RunContext


class TickingClock:
    """Moves one nanosecond on every reading and keeps them: a second reading is visible."""

    def __init__(self, start_ns: int = 0) -> None:
        self.readings: list[int] = []
        self._now = start_ns

    def monotonic_ns(self) -> int:
        self._now += 1
        self.readings.append(self._now)
        return self._now


def test_a_deadline_ending_is_stamped_with_the_reading_the_gate_took() -> None:
    clock = TickingClock()
    ctx = new_run(clock=clock, timeout=0.000_000_010)  # 10 ns after the creation's reading
    while True:
        before = len(clock.readings)
        try:
            ctx.check(Boundary.TOOL)
        except RunTimedOut as ended:
            termination = ended.termination
            break
    observed = clock.readings[before:]
    assert observed == [termination.at_ns]  # one reading, and the ending carries it
    assert termination.at_ns >= ctx.deadline.instant_ns
    # The reason is worded from the same reading: the first at or past the deadline, 0 ns late
    # (a second reading, one nanosecond on, would read 0.000000001 s).
    assert termination.at_ns == ctx.deadline.instant_ns
    assert termination.reason == "deadline exceeded: 0 s past it when the TOOL boundary checked"
    assert termination.boundary is Boundary.TOOL


@pytest.mark.parametrize(
    "overrun",
    [
        pytest.param(lambda ctx: ctx.reserve_model_call(), id="model-call"),
        pytest.param(lambda ctx: ctx.reserve_tool_call("t"), id="tool-call"),
        pytest.param(lambda ctx: ctx.reserve_bytes(2), id="bytes"),
    ],
)
def test_a_budget_ending_is_stamped_with_the_reading_the_reservation_took(
    overrun: Callable[[RunContext], None],
) -> None:
    clock = TickingClock()
    ctx = new_run(clock=clock, budget=limits(model_calls=1, tool_calls=1, run_bytes=1))
    ctx.reserve_model_call()
    ctx.reserve_tool_call("t")
    ctx.reserve_bytes(1)
    before = len(clock.readings)
    with pytest.raises(BudgetExhausted) as ended:
        overrun(ctx)
    assert clock.readings[before:] == [ended.value.termination.at_ns]


def test_a_usage_ending_is_stamped_with_the_reading_the_report_took() -> None:
    clock = TickingClock()
    ctx = new_run(clock=clock, budget=limits(input_tokens=5))
    before = len(clock.readings)
    ctx.record_token_usage(input_tokens=6, output_tokens=0)
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.BUDGET_EXHAUSTED
    assert clock.readings[before:] == [termination.at_ns]


@pytest.mark.parametrize("how", ["succeed", "fail", "cancel"])
def test_an_owner_ending_is_stamped_with_one_reading(how: str) -> None:
    clock = TickingClock()
    ctx = new_run(clock=clock)
    before = len(clock.readings)
    if how == "succeed":
        ctx.lifecycle.succeed()
    elif how == "fail":
        ctx.lifecycle.fail("boom")
    else:
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert clock.readings[before:] == [termination.at_ns]


def test_the_handles_are_views_of_one_state() -> None:
    """What one handle changes, every other handle and the gate see at once."""
    ctx = new_run(budget=limits(tool_calls=1))
    ctx.reserve_tool_call("t")
    with pytest.raises(BudgetExhausted):
        ctx.reserve_tool_call("t")
    assert ctx.budget.exhausted is ctx.budget.snapshot().exhausted
    assert ctx.cancellation.reason is CancellationReason.BUDGET_EXHAUSTED
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    with pytest.raises(BudgetExhausted) as again:
        ctx.check(Boundary.GUARD)
    assert again.value.termination is ctx.lifecycle.termination


def test_limits_and_snapshots_hash_by_value() -> None:
    """Both are frozen and compare by value; a mapping field must not make them unhashable."""
    with_overrides = limits(per_tool_overrides={"grep": 2})
    same = limits(per_tool_overrides={"grep": 2})
    other = limits(per_tool_overrides={"grep": 3})
    assert with_overrides == same
    assert hash(with_overrides) == hash(same)
    assert len({with_overrides, same, other, limits()}) == 3
    first, second = new_run(), new_run()
    for ctx in (first, second):
        ctx.reserve_tool_call("grep")
    assert first.budget.snapshot() == second.budget.snapshot()
    assert hash(first.budget.snapshot()) == hash(second.budget.snapshot())
    second.reserve_tool_call("grep")
    assert len({first.budget.snapshot(), second.budget.snapshot()}) == 2


def test_refusals_after_the_end_carry_the_first_termination() -> None:
    ctx = new_run()
    ctx.lifecycle.succeed()
    attempts: tuple[Callable[[], object], ...] = (
        ctx.reserve_model_call,
        lambda: ctx.reserve_tool_call("t"),
    )
    for attempt in attempts:
        with pytest.raises(RunTerminated) as refused:
            attempt()
        assert refused.value.termination is ctx.lifecycle.termination
