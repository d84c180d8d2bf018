"""The budget: seven required limits, all-or-nothing reservations, actual usage, one snapshot."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    BudgetState,
    BudgetUsage,
    CancellationReason,
    ManualClock,
    RunState,
    RunTerminated,
    RunTimedOut,
)
from strategies import limits, new_run, state

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness import RunContext

LIMIT_NAMES = (
    "model_calls",
    "tool_calls",
    "per_tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "run_bytes",
)


def _consistent(usage: BudgetUsage) -> None:
    assert usage.tool_calls == sum(usage.per_tool_calls.values())
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


# -- limits -----------------------------------------------------------------------------------


def test_the_dimensions_are_the_seven_limits_and_cost() -> None:
    assert tuple(d.value for d in BudgetDimension) == (*LIMIT_NAMES, "cost")


@pytest.mark.parametrize("missing", LIMIT_NAMES)
def test_every_limit_is_required(missing: str) -> None:
    values: dict[str, Any] = dict.fromkeys(LIMIT_NAMES, 5)
    del values[missing]
    with pytest.raises(TypeError, match=missing):
        BudgetLimits(**values)


@pytest.mark.parametrize("name", LIMIT_NAMES)
@pytest.mark.parametrize(
    ("value", "error"),
    [
        *((bad, TypeError) for bad in (True, False, 1.0, "5", None)),
        *((bad, ValueError) for bad in (0, -1)),
    ],
)
def test_every_limit_is_a_positive_int(name: str, value: object, error: type[Exception]) -> None:
    untyped: Any = limits
    with pytest.raises(error, match=rf"^{name}\b"):
        untyped(**{name: value})


def test_limits_are_kept_and_frozen() -> None:
    budget = limits(model_calls=3, run_bytes=9)
    assert (budget.model_calls, budget.run_bytes) == (3, 9)
    untyped: Any = budget
    with pytest.raises(dataclasses.FrozenInstanceError):
        untyped.model_calls = 4


def test_per_tool_overrides_are_a_private_frozen_copy() -> None:
    overrides = {"search": 1}
    budget = limits(per_tool_calls=3, per_tool_overrides=overrides)
    overrides["search"] = 100
    overrides["other"] = 100
    assert dict(budget.per_tool_overrides) == {"search": 1}
    assert budget.per_tool_limit("search") == 1
    assert budget.per_tool_limit("other") == 3
    untyped: Any = budget.per_tool_overrides
    with pytest.raises(TypeError):
        untyped["search"] = 5


# -- reservations -----------------------------------------------------------------------------


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


def test_model_calls_up_to_the_limit_then_exhausted() -> None:
    ctx = new_run(budget=limits(model_calls=3))
    released: list[CancellationReason] = []
    ctx.cancellation.register(released.append)
    for _ in range(3):
        ctx.reserve_model_call()
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_model_call()
    assert ctx.budget.snapshot().model_calls == 3  # the refused call reserved nothing
    _assert_exhausted_by(ctx, caught.value, BudgetDimension.MODEL_CALLS, 3)
    assert released == [CancellationReason.BUDGET_EXHAUSTED]


def test_total_tool_calls_across_tools() -> None:
    ctx = new_run(budget=limits(tool_calls=3, per_tool_calls=5))
    for tool in ("a", "b", "a"):
        ctx.reserve_tool_call(tool)
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_tool_call("c")
    usage = ctx.budget.snapshot()
    assert (usage.tool_calls, dict(usage.per_tool_calls)) == (3, {"a": 2, "b": 1})
    _consistent(usage)
    _assert_exhausted_by(ctx, caught.value, BudgetDimension.TOOL_CALLS, 3)


def test_per_tool_overrides_apply_to_their_tool_only() -> None:
    budget = limits(per_tool_calls=3, per_tool_overrides={"expensive": 1})
    ctx = new_run(budget=budget)
    for _ in range(3):
        ctx.reserve_tool_call("cheap")
    ctx.reserve_tool_call("expensive")
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_tool_call("expensive")
    _assert_exhausted_by(ctx, caught.value, BudgetDimension.PER_TOOL_CALLS, 1)
    assert "expensive" in caught.value.termination.reason
    assert dict(ctx.budget.snapshot().per_tool_calls) == {"cheap": 3, "expensive": 1}


def test_an_override_can_raise_a_tool_above_the_default() -> None:
    ctx = new_run(budget=limits(per_tool_calls=1, per_tool_overrides={"grep": 4}))
    for _ in range(4):
        ctx.reserve_tool_call("grep")
    with pytest.raises(BudgetExhausted):
        ctx.reserve_tool_call("grep")
    assert ctx.budget.snapshot().per_tool_calls["grep"] == 4


def test_an_override_belongs_to_its_tool_name_exactly_as_written() -> None:
    """Tool names are case-sensitive: the override of ``WebSearch`` limits ``WebSearch`` alone,
    and ``websearch`` is another Tool, under the default limit."""
    ctx = new_run(budget=limits(per_tool_calls=3, per_tool_overrides={"WebSearch": 1}))
    ctx.reserve_tool_call("WebSearch")
    for _ in range(3):
        ctx.reserve_tool_call("websearch")
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_tool_call("WebSearch")
    _assert_exhausted_by(ctx, caught.value, BudgetDimension.PER_TOOL_CALLS, 1)
    assert "'WebSearch'" in caught.value.termination.reason
    assert dict(ctx.budget.snapshot().per_tool_calls) == {"WebSearch": 1, "websearch": 3}


def test_bytes_up_to_the_limit_then_exhausted() -> None:
    ctx = new_run(budget=limits(run_bytes=100))
    ctx.reserve_bytes(60)
    ctx.reserve_bytes(40)
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_bytes(1)
    assert ctx.budget.snapshot().run_bytes == 100
    _assert_exhausted_by(ctx, caught.value, BudgetDimension.RUN_BYTES, 100)


def test_a_byte_reservation_too_big_reserves_nothing() -> None:
    ctx = new_run(budget=limits(run_bytes=100))
    ctx.reserve_bytes(10)
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_bytes(91)
    assert ctx.budget.snapshot().run_bytes == 10
    assert caught.value.boundary is Boundary.CAPACITY


def _other_work(ctx: RunContext) -> list[Callable[[], object]]:
    return [
        ctx.reserve_model_call,
        lambda: ctx.reserve_tool_call("t"),
        lambda: ctx.reserve_bytes(1),
        *(lambda b=b: ctx.check(b) for b in Boundary),
    ]


def test_after_exhaustion_all_controlled_work_is_rejected() -> None:
    ctx = new_run(budget=limits(model_calls=1))
    ctx.reserve_model_call()
    with pytest.raises(BudgetExhausted) as first:
        ctx.reserve_model_call()
    before = ctx.budget.snapshot()
    for work in _other_work(ctx):
        with pytest.raises(BudgetExhausted) as later:
            work()
        assert later.value.termination is first.value.termination
        assert later.value.dimension is BudgetDimension.MODEL_CALLS
    assert ctx.budget.snapshot() == before


RESERVATIONS: dict[str, Callable[[RunContext], object]] = {
    "model": lambda ctx: ctx.reserve_model_call(),
    "tool": lambda ctx: ctx.reserve_tool_call("t"),
    "bytes": lambda ctx: ctx.reserve_bytes(1),
}


@pytest.mark.parametrize("used_up", [False, True], ids=["within-limit", "limit-reached"])
@pytest.mark.parametrize("past_ns", [0, 1], ids=["at-deadline", "past-deadline"])
@pytest.mark.parametrize("kind", sorted(RESERVATIONS))
def test_a_reservation_refused_at_the_deadline_times_the_run_out(
    kind: str, past_ns: int, used_up: bool
) -> None:
    """From the deadline's own nanosecond on, a reservation is refused because the run is out of
    time -- even when its limit is reached too: the run is TIMED_OUT, the budget not exhausted."""
    clock = ManualClock()
    ctx = new_run(budget=limits(model_calls=1, tool_calls=1, run_bytes=1), clock=clock)
    reserve = RESERVATIONS[kind]
    if used_up:
        reserve(ctx)  # the one reservation the limit allows
    before = ctx.budget.snapshot()
    clock.advance_ns(ctx.deadline.instant_ns - clock.monotonic_ns() + past_ns)
    with pytest.raises(RunTimedOut) as caught:
        reserve(ctx)
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert caught.value.termination is termination
    assert (termination.state, termination.at_ns) == (
        RunState.TIMED_OUT,
        ctx.deadline.instant_ns + past_ns,
    )
    assert ctx.cancellation.reason is CancellationReason.DEADLINE_EXCEEDED
    assert ctx.budget.state is BudgetState.ACTIVE
    assert ctx.budget.snapshot() == before  # nothing reserved, nothing called exhausted


def test_the_first_limit_reached_stays_the_exhausted_one() -> None:
    """Usage past other limits, reported after the budget was exhausted, is recorded but does
    not rename the limit that exhausted it, nor the run's ending."""
    ctx = new_run(budget=limits(model_calls=1, input_tokens=10, output_tokens=10))
    ctx.reserve_model_call()
    with pytest.raises(BudgetExhausted):
        ctx.reserve_model_call()
    termination = ctx.lifecycle.termination
    ctx.record_token_usage(input_tokens=11, output_tokens=0)
    ctx.record_token_usage(input_tokens=0, output_tokens=11)
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens) == (11, 11)
    assert usage.exhausted is BudgetDimension.MODEL_CALLS
    assert ctx.budget.exhausted is BudgetDimension.MODEL_CALLS
    assert ctx.lifecycle.termination is termination
    with pytest.raises(BudgetExhausted) as later:
        ctx.reserve_tool_call("t")
    assert later.value.dimension is BudgetDimension.MODEL_CALLS


def test_after_a_cancel_the_first_token_limit_passed_is_the_exhausted_one() -> None:
    ctx = new_run(budget=limits(input_tokens=10, output_tokens=10))
    ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    ctx.record_token_usage(input_tokens=0, output_tokens=11)  # exhausts: output_tokens
    ctx.record_token_usage(input_tokens=11, output_tokens=0)  # input_tokens, checked first, later
    assert ctx.budget.snapshot().exhausted is BudgetDimension.OUTPUT_TOKENS
    assert state(ctx) is RunState.CANCELLED


# The spec's scenarios are shown in src/diagnosis_harness/conformance/suite/test_budgets.py.


# -- actual token usage -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("input_tokens", "output_tokens", "dimension"),
    [
        (101, 0, BudgetDimension.INPUT_TOKENS),
        (0, 101, BudgetDimension.OUTPUT_TOKENS),
        (80, 80, BudgetDimension.TOTAL_TOKENS),
        (500, 500, BudgetDimension.INPUT_TOKENS),  # the first dimension checked is named
    ],
)
def test_each_token_limit(
    input_tokens: int, output_tokens: int, dimension: BudgetDimension
) -> None:
    ctx = new_run(budget=limits(input_tokens=100, output_tokens=100, total_tokens=150))
    ctx.record_token_usage(input_tokens=input_tokens, output_tokens=output_tokens)  # no raise
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens) == (input_tokens, output_tokens)
    assert usage.exhausted is dimension
    assert state(ctx) is RunState.BUDGET_EXHAUSTED
    with pytest.raises(BudgetExhausted):
        ctx.check(Boundary.MODEL)


def test_usage_exactly_at_the_limits_is_allowed() -> None:
    ctx = new_run(budget=limits(input_tokens=100, output_tokens=100, total_tokens=150))
    ctx.record_token_usage(input_tokens=100, output_tokens=50)
    ctx.record_token_usage(input_tokens=0, output_tokens=0)
    assert state(ctx) is RunState.RUNNING
    assert ctx.budget.snapshot().exhausted is None
    ctx.record_token_usage(input_tokens=0, output_tokens=1)
    assert state(ctx) is RunState.BUDGET_EXHAUSTED


def test_usage_accumulates_across_responses() -> None:
    ctx = new_run(budget=limits(total_tokens=100))
    for _ in range(4):
        ctx.record_token_usage(input_tokens=20, output_tokens=5)
    assert ctx.budget.snapshot().total_tokens == 100
    assert state(ctx) is RunState.RUNNING
    ctx.record_token_usage(input_tokens=1, output_tokens=0)
    assert ctx.budget.snapshot().total_tokens == 101
    assert state(ctx) is RunState.BUDGET_EXHAUSTED


def test_usage_is_recorded_even_after_the_run_ended() -> None:
    ctx = new_run(budget=limits(input_tokens=10))
    termination = ctx.lifecycle.succeed().termination
    ctx.record_token_usage(input_tokens=50, output_tokens=7)  # a response that was in flight
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens) == (50, 7)
    assert ctx.lifecycle.termination is termination  # the outcome stays SUCCESS


def test_usage_past_a_limit_after_a_cancel_keeps_the_cancel() -> None:
    ctx = new_run(budget=limits(input_tokens=10))
    ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    ctx.record_token_usage(input_tokens=11, output_tokens=0)
    assert state(ctx) is RunState.CANCELLED
    assert ctx.budget.snapshot().input_tokens == 11


# -- snapshot ---------------------------------------------------------------------------------


def test_a_snapshot_is_an_immutable_point_in_time() -> None:
    ctx = new_run()
    ctx.reserve_tool_call("a")
    snapshot = ctx.budget.snapshot()
    ctx.reserve_tool_call("a")
    ctx.reserve_tool_call("b")
    assert dict(snapshot.per_tool_calls) == {"a": 1}
    assert snapshot.tool_calls == 1
    untyped: Any = snapshot
    with pytest.raises(dataclasses.FrozenInstanceError):
        untyped.tool_calls = 9
    with pytest.raises(TypeError):
        untyped.per_tool_calls["a"] = 9
    assert ctx.budget.snapshot().tool_calls == 3


def test_a_new_budget_is_empty() -> None:
    usage = new_run().budget.snapshot()
    assert usage == BudgetUsage(
        model_calls=0,
        tool_calls=0,
        per_tool_calls={},
        input_tokens=0,
        output_tokens=0,
        total_tokens=0,
        run_bytes=0,
        exhausted=None,
    )


@given(
    tool_limit=st.integers(1, 12),
    per_tool=st.integers(1, 6),
    calls=st.lists(st.sampled_from(["a", "b", "c"]), max_size=30),
)
def test_tool_reservations_match_a_simple_model(
    tool_limit: int, per_tool: int, calls: list[str]
) -> None:
    ctx = new_run(budget=limits(tool_calls=tool_limit, per_tool_calls=per_tool))
    model: dict[str, int] = {}
    over = False
    for tool in calls:
        fits = not over and sum(model.values()) < tool_limit and model.get(tool, 0) < per_tool
        refusal: RunTerminated | None = None
        try:
            ctx.reserve_tool_call(tool)
        except BudgetExhausted as error:
            refusal = error
        assert (refusal is None) is fits
        if fits:
            model[tool] = model.get(tool, 0) + 1
        else:
            over = True
        usage = ctx.budget.snapshot()
        assert dict(usage.per_tool_calls) == model
        _consistent(usage)
        assert usage.tool_calls <= tool_limit
    assert (state(ctx) is RunState.BUDGET_EXHAUSTED) is over
