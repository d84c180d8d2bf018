"""The lifecycle: RUNNING, then the first terminal outcome only -- state, reason and time kept."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness import (
    Boundary,
    CancellationReason,
    FinishResult,
    ManualClock,
    RunState,
    RunTerminated,
    RunTermination,
)
from strategies import new_run

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness import RunContext

TERMINAL = {
    RunState.SUCCESS,
    RunState.FAILED,
    RunState.CANCELLED,
    RunState.TIMED_OUT,
    RunState.BUDGET_EXHAUSTED,
}


def test_a_run_starts_running_with_no_termination() -> None:
    ctx = new_run()
    assert ctx.lifecycle.state is RunState.RUNNING
    assert ctx.lifecycle.termination is None
    assert not ctx.lifecycle.is_terminal
    assert "RUNNING" in repr(ctx.lifecycle)


def test_the_states_are_exactly_running_and_the_five_outcomes() -> None:
    assert set(RunState) == TERMINAL | {RunState.RUNNING}


def test_succeed_records_success_with_the_clock_time() -> None:
    clock = ManualClock(1_000)
    ctx = new_run(clock=clock)
    clock.advance_ns(234)
    result = ctx.lifecycle.succeed()
    assert result == FinishResult(
        changed=True, termination=RunTermination(RunState.SUCCESS, "succeeded", 1_234)
    )
    assert ctx.lifecycle.termination is result.termination
    assert ctx.lifecycle.is_terminal


def test_succeed_takes_a_reason() -> None:
    ctx = new_run()
    assert ctx.lifecycle.succeed("diagnosis delivered").termination.reason == "diagnosis delivered"


def test_fail_records_failed_with_its_reason() -> None:
    clock = ManualClock(7)
    ctx = new_run(clock=clock)
    result = ctx.lifecycle.fail("model returned garbage")
    assert result.changed
    assert result.termination == RunTermination(RunState.FAILED, "model returned garbage", 7)


def _succeed(ctx: RunContext) -> None:
    ctx.lifecycle.succeed()


def _fail(ctx: RunContext) -> None:
    ctx.lifecycle.fail("handler saw an error")


def _cancel(ctx: RunContext) -> None:
    ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)


def _time_out(ctx: RunContext) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(60)
    ctx.check(Boundary.MODEL)


def _exhaust(ctx: RunContext) -> None:
    ctx.reserve_bytes(ctx.budget.limits.run_bytes + 1)


def _exhaust_tokens(ctx: RunContext) -> None:
    ctx.record_token_usage(input_tokens=ctx.budget.limits.input_tokens + 1, output_tokens=0)


ENDINGS: dict[str, tuple[Callable[[RunContext], None], RunState]] = {
    "succeed": (_succeed, RunState.SUCCESS),
    "fail": (_fail, RunState.FAILED),
    "cancel": (_cancel, RunState.CANCELLED),
    "time_out": (_time_out, RunState.TIMED_OUT),
    "exhaust": (_exhaust, RunState.BUDGET_EXHAUSTED),
    "exhaust_tokens": (_exhaust_tokens, RunState.BUDGET_EXHAUSTED),
}


def _attempt(ctx: RunContext, name: str) -> None:
    end, _ = ENDINGS[name]
    refusal: RunTerminated | None = None
    try:
        end(ctx)
    except RunTerminated as error:
        refusal = error
    assert refusal is None or refusal.termination is ctx.lifecycle.termination


@pytest.mark.parametrize("first", sorted(ENDINGS))
@pytest.mark.parametrize("later", sorted(ENDINGS))
def test_only_the_first_outcome_is_kept(first: str, later: str) -> None:
    clock = ManualClock(10)
    ctx = new_run(clock=clock, timeout=60)
    _attempt(ctx, first)
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is ENDINGS[first][1]
    snapshot = dataclasses.replace(termination)

    clock.advance(1_000)
    _attempt(ctx, later)

    assert ctx.lifecycle.termination is termination  # the very same object
    assert termination == snapshot  # state, reason and timestamp untouched
    assert ctx.lifecycle.state is ENDINGS[first][1]


def test_later_finish_attempts_return_changed_false_and_the_original() -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock)
    first = ctx.lifecycle.fail("first")
    clock.advance(5)
    for result in (ctx.lifecycle.succeed(), ctx.lifecycle.fail("second"), ctx.lifecycle.succeed()):
        assert result.changed is False
        assert result.termination is first.termination


@given(
    actions=st.lists(
        st.one_of(
            st.sampled_from(sorted(ENDINGS)),
            st.integers(min_value=0, max_value=10**10).map(lambda ns: f"advance:{ns}"),
        ),
        max_size=12,
    )
)
def test_any_sequence_of_endings_keeps_the_first(actions: list[str]) -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, timeout=60)
    first: RunTermination | None = None
    first_name: str | None = None
    for action in actions:
        if action.startswith("advance:"):
            clock.advance_ns(int(action.partition(":")[2]))
            continue
        before = clock.monotonic_ns()
        _attempt(ctx, action)
        if first is None:
            first, first_name = ctx.lifecycle.termination, action
            assert first is not None
            # A deadline passed by an earlier advance wins over whatever this action was.
            expected = ENDINGS[action][1]
            if before >= ctx.deadline.instant_ns and action in ("exhaust", "time_out"):
                expected = RunState.TIMED_OUT
            assert first.state is expected
            assert first.at_ns == clock.monotonic_ns()
        assert ctx.lifecycle.termination is first
    if first_name is None:
        assert ctx.lifecycle.state is RunState.RUNNING


def test_termination_and_finish_result_are_immutable() -> None:
    result = new_run().lifecycle.succeed()
    untyped: Any = result
    with pytest.raises(dataclasses.FrozenInstanceError):
        untyped.changed = False
    untyped = result.termination
    with pytest.raises(dataclasses.FrozenInstanceError):
        untyped.state = RunState.FAILED


# The spec's scenarios are shown in
# src/diagnosis_harness/conformance/suite/test_terminal_outcome.py.
