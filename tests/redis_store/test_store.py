"""A run in Redis means what it means in one process: create, attach, reserve, end, cancel."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    BudgetState,
    CancellationReason,
    Deadline,
    ManualClock,
    RunCancelled,
    RunContext,
    RunFinished,
    RunState,
    RunStoreConflict,
    RunTimedOut,
    UnknownRun,
    UnsafeKeySegment,
)
from diagnosis_harness._limits import COUNTED_DIMENSIONS
from diagnosis_harness.redis import RedisRunStore

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis

LIMITS = BudgetLimits(
    model_calls=3,
    tool_calls=4,
    per_tool_calls=2,
    input_tokens=50,
    output_tokens=50,
    total_tokens=80,
    run_bytes=64,
    per_tool_overrides={"fetch": 1},
)


def same_termination(a: RunContext, b: RunContext) -> bool:
    """The same state, reason and instant: each process gives the instant on its own clock, so
    its distance to the deadline (one instant for all) is what they share."""
    x, y = a.lifecycle.termination, b.lifecycle.termination
    assert x is not None
    assert y is not None
    return (x.state, x.reason, x.at_ns - a.deadline.instant_ns) == (
        y.state,
        y.reason,
        y.at_ns - b.deadline.instant_ns,
    )


def _create(
    store: RedisRunStore, clock: ManualClock | None = None, run_id: str = "run-1"
) -> RunContext:
    return RunContext.create(
        session_id="session-1",
        run_id=run_id,
        limits=LIMITS,
        deadline=Deadline.at_ns(10_000_000_000),
        clock=ManualClock() if clock is None else clock,
        store=store,
    )


def _attach(store: RedisRunStore, clock: ManualClock | None = None) -> RunContext:
    return RunContext.attach(
        session_id="session-1",
        run_id="run-1",
        store=store,
        clock=ManualClock() if clock is None else clock,
    )


def test_a_created_run_is_seen_by_an_attached_context(store: RedisRunStore) -> None:
    ctx = _create(store)
    other = _attach(store)
    assert other.budget.limits == LIMITS
    ctx.reserve_tool_call("search")
    other.reserve_tool_call("search")
    with pytest.raises(BudgetExhausted) as refused:
        other.reserve_tool_call("search")
    assert refused.value.dimension is BudgetDimension.PER_TOOL_CALLS
    usage = ctx.budget.snapshot()
    assert usage.per_tool_calls == {"search": 2}
    assert usage.tool_calls == 2
    assert usage.exhausted is BudgetDimension.PER_TOOL_CALLS
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    assert ctx.budget.exhausted is BudgetDimension.PER_TOOL_CALLS
    assert ctx.budget.state is BudgetState.EXHAUSTED
    assert ctx.cancellation.reason is CancellationReason.BUDGET_EXHAUSTED
    with pytest.raises(BudgetExhausted) as again:
        ctx.check(Boundary.MODEL)
    assert again.value.dimension is BudgetDimension.PER_TOOL_CALLS


def test_the_first_ending_wins_everywhere(store: RedisRunStore) -> None:
    clock = ManualClock(5)
    ctx = _create(store, clock)
    other = _attach(store)
    assert other.lifecycle.succeed().changed
    result = ctx.lifecycle.fail("too late")
    assert not result.changed
    assert result.termination.state is RunState.SUCCESS
    assert same_termination(ctx, other)
    assert not ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    assert ctx.cancellation.reason is CancellationReason.RUN_FINISHED
    with pytest.raises(RunFinished):
        ctx.reserve_model_call()


def test_a_cancel_runs_each_process_callbacks_once_and_inline_after(store: RedisRunStore) -> None:
    ctx = _create(store)
    other = _attach(store)
    seen: list[tuple[str, CancellationReason]] = []
    ctx.cancellation.register(lambda reason: seen.append(("ctx", reason)))
    other.cancellation.register(lambda reason: seen.append(("other", reason)))
    assert other.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    assert ("other", CancellationReason.CLIENT_DISCONNECTED) in seen  # before cancel() returned
    assert ctx.lifecycle.state is RunState.CANCELLED  # a read learns of it and runs the callbacks
    assert sorted(seen) == [
        ("ctx", CancellationReason.CLIENT_DISCONNECTED),
        ("other", CancellationReason.CLIENT_DISCONNECTED),
    ]
    late: list[CancellationReason] = []
    third = _attach(store)
    third.cancellation.register(late.append)
    assert late == [CancellationReason.CLIENT_DISCONNECTED]  # ran inside register()
    with pytest.raises(RunCancelled):
        third.reserve_tool_call("grep")


def test_the_deadline_is_one_instant_on_each_clock(store: RedisRunStore) -> None:
    ctx = _create(store, ManualClock(0))
    late_clock = ManualClock(7_000_000_000)  # attached on a clock 7 s ahead of the creator's
    other = _attach(store, late_clock)
    assert other.deadline.instant_ns - late_clock.monotonic_ns() == pytest.approx(
        10_000_000_000, abs=50_000_000
    )
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance_ns(10_000_000_000)
    with pytest.raises(RunTimedOut):
        ctx.check(Boundary.TOOL)
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.TIMED_OUT
    assert termination.at_ns == 10_000_000_000  # the boundary's reading, on the creator's clock
    assert same_termination(ctx, other)


def test_usage_is_recorded_past_a_limit_and_the_next_operation_anywhere_refused(
    store: RedisRunStore,
) -> None:
    ctx = _create(store)
    other = _attach(store)
    ctx.record_token_usage(input_tokens=60, output_tokens=1)
    assert ctx.budget.snapshot().input_tokens == 60
    with pytest.raises(BudgetExhausted) as refused:
        other.reserve_model_call()
    assert refused.value.dimension is BudgetDimension.INPUT_TOKENS
    other.record_token_usage(input_tokens=5, output_tokens=5)
    assert ctx.budget.snapshot().total_tokens == 71


def test_bad_input_is_refused_and_changes_nothing(
    store: RedisRunStore, client: redis.Redis
) -> None:
    with pytest.raises(UnsafeKeySegment, match="namespace"):
        RedisRunStore(client, namespace="a:b")
    with pytest.raises(UnsafeKeySegment, match="run_id"):
        _create(store, run_id="run*")
    _create(store)
    with pytest.raises(RunStoreConflict, match="exists already"):
        _create(store)
    with pytest.raises(UnknownRun, match="no run 'run-2'"):
        RunContext.attach(session_id="session-1", run_id="run-2", store=store)
    with pytest.raises(RunStoreConflict, match="belongs to session"):
        RunContext.attach(session_id="session-2", run_id="run-1", store=store)
    other = BudgetLimits(
        model_calls=4,
        tool_calls=4,
        per_tool_calls=2,
        input_tokens=50,
        output_tokens=50,
        total_tokens=80,
        run_bytes=64,
    )
    with pytest.raises(RunStoreConflict, match="limits"):
        RunContext.attach(session_id="session-1", run_id="run-1", store=store, limits=other)
    assert (
        RunContext.attach(
            session_id="session-1", run_id="run-1", store=store, limits=LIMITS
        ).budget.limits
        == LIMITS
    )


LIMIT_CHANGES = [
    *(
        pytest.param({d.value: getattr(LIMITS, d.value) + 1}, id=d.value)
        for d in COUNTED_DIMENSIONS
    ),
    pytest.param({"per_tool_overrides": {"fetch": 2}}, id="override-changed"),
    pytest.param({"per_tool_overrides": {}}, id="override-dropped"),
    pytest.param({"per_tool_overrides": {"fetch": 1, "grep": 1}}, id="override-added"),
]


@pytest.mark.parametrize("change", LIMIT_CHANGES)
def test_an_attach_whose_limits_differ_in_any_one_field_is_refused(
    store: RedisRunStore, change: dict[str, object]
) -> None:
    """Every limit is compared, the per-Tool overrides too: an owner given limits that differ
    from the stored ones in a single field is refused, and the refusal names that field."""
    _create(store)
    other = dataclasses.replace(LIMITS, **change)  # type: ignore[arg-type]  # BudgetLimits' own fields
    with pytest.raises(RunStoreConflict, match="limits") as refused:
        RunContext.attach(session_id="session-1", run_id="run-1", store=store, limits=other)
    [field] = change
    assert f"{field}=" in str(refused.value)
    assert _attach(store).budget.limits == LIMITS


@pytest.mark.parametrize(
    ("exact", "more", "dimension"),
    [
        pytest.param((50, 30), (1, 0), BudgetDimension.INPUT_TOKENS, id="input-then-input"),
        pytest.param((50, 30), (0, 1), BudgetDimension.TOTAL_TOKENS, id="input-then-total"),
        pytest.param((30, 50), (0, 1), BudgetDimension.OUTPUT_TOKENS, id="output-then-output"),
        pytest.param((30, 50), (1, 0), BudgetDimension.TOTAL_TOKENS, id="output-then-total"),
    ],
)
def test_usage_exactly_at_the_token_limits_keeps_the_run_and_one_more_token_ends_it(
    store: RedisRunStore,
    exact: tuple[int, int],
    more: tuple[int, int],
    dimension: BudgetDimension,
) -> None:
    """Input (or output) and total tokens exactly at their limits (50 and 80) exhaust nothing:
    a limit is passed, not reached. One more token passes one."""
    ctx = _create(store)
    ctx.record_token_usage(input_tokens=exact[0], output_tokens=exact[1])
    assert ctx.lifecycle.state is RunState.RUNNING
    assert ctx.budget.state is BudgetState.ACTIVE
    assert ctx.budget.snapshot().exhausted is None
    _attach(store).reserve_model_call()  # another process is still granted work
    ctx.record_token_usage(input_tokens=more[0], output_tokens=more[1])
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.BUDGET_EXHAUSTED
    assert ctx.budget.snapshot().exhausted is dimension


@pytest.mark.parametrize("sizes", [(64,), (60, 4)], ids=["one", "two"])
def test_byte_reservations_that_fill_the_limit_exactly_are_granted(
    store: RedisRunStore, sizes: tuple[int, ...]
) -> None:
    ctx = _create(store)  # run_bytes=64
    for n in sizes:
        ctx.reserve_bytes(n)
    assert ctx.budget.snapshot().run_bytes == 64
    assert ctx.lifecycle.state is RunState.RUNNING
    with pytest.raises(BudgetExhausted) as refused:
        _attach(store).reserve_bytes(1)
    assert refused.value.dimension is BudgetDimension.RUN_BYTES
    assert ctx.budget.snapshot().run_bytes == 64


def test_a_callback_may_report_usage_when_usage_ends_the_run(store: RedisRunStore) -> None:
    ctx = _create(store)
    ctx.cancellation.register(
        lambda _reason: ctx.record_token_usage(input_tokens=1, output_tokens=0)
    )
    ctx.record_token_usage(input_tokens=60, output_tokens=0)  # past the limit: the callback runs
    assert ctx.budget.snapshot().input_tokens == 61


@pytest.mark.parametrize(
    ("late_ns", "boundary", "reserve", "said"),
    [
        (1_716_340_112, Boundary.TOOL, lambda ctx: ctx.reserve_tool_call("grep"), "1.716 s"),
        (784_108, Boundary.CAPACITY, lambda ctx: ctx.reserve_bytes(1), "0.000784108 s"),
        (0, Boundary.MODEL, lambda ctx: ctx.reserve_model_call(), "0 s"),
    ],
    ids=["seconds", "below-a-millisecond", "at-the-deadline"],
)
def test_a_deadline_on_the_server_is_worded_as_in_one_process(
    store: RedisRunStore,
    late_ns: int,
    boundary: Boundary,
    reserve: Callable[[RunContext], None],
    said: str,
) -> None:
    """The server's time-out says how far past the deadline, in seconds, and which boundary
    looked -- the words a run in one process records (the Lua copy of the core's wording)."""
    clock = ManualClock()
    ctx = _create(store, clock)
    clock.advance_ns(ctx.deadline.instant_ns + late_ns)
    with pytest.raises(RunTimedOut) as caught:
        reserve(ctx)
    reason = f"deadline exceeded: {said} past it when the {boundary.name} boundary checked"
    assert caught.value.termination.reason == reason
    local_clock = ManualClock()
    local = RunContext.create(
        session_id="s", run_id="r", limits=LIMITS, deadline=ctx.deadline, clock=local_clock
    )
    local_clock.advance_ns(ctx.deadline.instant_ns + late_ns)
    with pytest.raises(RunTimedOut) as in_one_process:
        reserve(local)
    assert in_one_process.value.termination.reason == reason
