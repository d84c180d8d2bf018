"""What a person reads when a run ends: the termination's reason, the refusal, the journal.

What these pin down: a deadline's reason says how far past, in seconds, and which boundary saw
it; a termination records the boundary that decided it, and every later refusal's message names
that one (a per-Tool limit reads ``TOOL boundary refused`` even when a Model call is what
raises it); a governed execution's journal line names what it ran.
"""

from __future__ import annotations

import asyncio

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    CancellationReason,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicy,
    RunContext,
    RunTerminated,
    RunTimedOut,
)
from strategies import limits, new_run


def _refusal(gate: object) -> RunTerminated:
    with pytest.raises(RunTerminated) as raised:
        gate()  # type: ignore[operator]  # a bound method of the run, called as the user would
    return raised.value


# -- deadlines: how far past, in seconds, and which boundary looked ------------------------------


@pytest.mark.parametrize(
    ("late_ns", "late"),
    [
        pytest.param(1_716_161_410, "1.716 s", id="seconds, to the millisecond"),
        pytest.param(3_600_000_000_000, "3600.000 s", id="an hour"),
        pytest.param(250_000, "0.00025 s", id="under a millisecond: exact"),
        pytest.param(0, "0 s", id="at the deadline"),
    ],
)
def test_a_deadline_reason_says_how_far_past_in_seconds_and_where(late_ns: int, late: str) -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, timeout=2)
    clock.advance_ns(2_000_000_000 + late_ns)
    error = _refusal(lambda: ctx.reserve_bytes(10))
    termination = error.termination
    reason = f"deadline exceeded: {late} past it when the CAPACITY boundary checked"
    assert termination.reason == reason
    assert str(error) == f"CAPACITY boundary refused: run is TIMED_OUT ({reason})"
    # The instants themselves stay on the objects, in nanoseconds.
    assert termination.at_ns - ctx.deadline.instant_ns == late_ns
    assert termination.boundary is Boundary.CAPACITY


def test_a_later_refusal_names_the_boundary_that_saw_the_deadline_first() -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, timeout=1)
    clock.advance(1.5)
    first = _refusal(lambda: ctx.reserve_tool_call("logs"))
    later = _refusal(ctx.reserve_model_call)
    assert str(first) == (
        "TOOL boundary refused: run is TIMED_OUT "
        "(deadline exceeded: 0.500 s past it when the TOOL boundary checked)"
    )
    assert str(later) == str(first)  # one ending, one wording, whichever gate refuses next
    assert later.boundary is Boundary.MODEL  # the gate that refused this work, as before
    assert later.termination is first.termination


# -- budget endings: the limit's own boundary leads the message ---------------------------------


def test_a_per_tool_limit_reads_tool_even_when_a_model_call_is_refused_next() -> None:
    ctx = new_run(budget=limits(per_tool_calls=3))
    for _ in range(3):
        ctx.reserve_tool_call("lookup")
    tool = _refusal(lambda: ctx.reserve_tool_call("lookup"))
    model = _refusal(ctx.reserve_model_call)
    reason = "per_tool_calls limit 3 for Tool 'lookup' reached: call 4 refused"
    assert str(tool) == f"TOOL boundary refused: run is BUDGET_EXHAUSTED ({reason})"
    assert str(model) == str(tool)
    assert model.boundary is Boundary.MODEL


@pytest.mark.parametrize(
    ("dimension", "spend", "boundary"),
    [
        (BudgetDimension.MODEL_CALLS, lambda ctx: ctx.reserve_model_call(), Boundary.MODEL),
        (BudgetDimension.TOOL_CALLS, lambda ctx: ctx.reserve_tool_call("t"), Boundary.TOOL),
        (BudgetDimension.RUN_BYTES, lambda ctx: ctx.reserve_bytes(2), Boundary.CAPACITY),
        (
            BudgetDimension.TOTAL_TOKENS,
            lambda ctx: ctx.record_token_usage(input_tokens=2, output_tokens=2),
            Boundary.MODEL,  # the usage a Model call reported
        ),
    ],
    ids=lambda value: getattr(value, "name", ""),
)
def test_each_limit_is_recorded_at_its_own_boundary(
    dimension: BudgetDimension, spend: object, boundary: Boundary
) -> None:
    ctx = new_run(budget=limits(**{dimension.value: 1}))

    def spend_until_refused() -> None:
        for _ in range(3):
            spend(ctx)  # type: ignore[operator]  # one of the lambdas above
            ctx.check(Boundary.GUARD)  # a usage report past a limit raises at the next gate

    with pytest.raises(RunTerminated):
        spend_until_refused()
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert ctx.budget.exhausted is dimension
    assert termination.boundary is boundary
    error = _refusal(lambda: ctx.check(Boundary.RETRY))
    assert str(error).startswith(f"{boundary.name} boundary refused: run is BUDGET_EXHAUSTED")


def test_an_ending_decided_outside_a_boundary_names_only_the_refusing_one() -> None:
    ctx = new_run()
    ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    assert ctx.lifecycle.termination is not None
    assert ctx.lifecycle.termination.boundary is None
    error = _refusal(ctx.reserve_model_call)
    assert str(error) == "MODEL boundary refused: run is CANCELLED (cancelled: CLIENT_DISCONNECTED)"


# -- a scope's deadline is recorded at the scope's boundary --------------------------------------


@pytest.mark.parametrize("boundary", [None, Boundary.MODEL], ids=["default", "MODEL"])
def test_a_deadline_a_scope_s_timer_finds_is_recorded_at_the_scope_s_boundary(
    boundary: Boundary | None,
) -> None:
    ctx = RunContext.create(session_id="s-1", run_id="r-1", limits=limits(), timeout=0.05)

    async def request() -> None:
        async with ctx.scope() if boundary is None else ctx.scope(boundary):
            await asyncio.sleep(10)  # stands for a model request the run must cut

    with pytest.raises(RunTimedOut) as raised:
        asyncio.run(request())
    expected = Boundary.GUARD if boundary is None else boundary
    assert raised.value.termination.boundary is expected
    assert raised.value.termination.reason.endswith(f"the {expected.name} boundary checked")


def test_a_scope_s_boundary_must_be_a_boundary() -> None:
    ctx = new_run()
    with pytest.raises(TypeError, match="boundary must be a Boundary, got 'model'"):
        ctx.scope("model")  # type: ignore[arg-type]  # the wrong type, on purpose


# -- the journal names what an execution ran ------------------------------------------------------


def test_a_named_execution_s_journal_line_names_it() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)
    failures = [HarnessFailure(FailureKind.TIMEOUT, "slow")]

    def lookup() -> str:
        if failures:
            raise failures.pop()
        return "found"

    flaky = RetryPolicy("flaky", 2, frozenset({FailureKind.TIMEOUT}))
    assert executor.execute_named("Tool 'lookup'", flaky, lookup) == "found"
    assert executor.execute("tool_call", lambda: "plain") == "plain"
    named, plain = executor.executions
    assert named.subject == "Tool 'lookup'"
    assert named.describe() == (
        "harness retry [flaky] Tool 'lookup': attempt 1 failed (TIMEOUT); attempt 2 succeeded; "
        "stop: SUCCEEDED"
    )
    assert plain.subject is None
    assert plain.describe() == "harness retry [tool_call]: attempt 1 succeeded; stop: SUCCEEDED"


def test_a_named_execution_that_fails_carries_its_name_on_the_error() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)

    async def broken() -> None:
        raise HarnessFailure(FailureKind.SERVER_ERROR, "502")

    with pytest.raises(HarnessFailure) as raised:
        asyncio.run(executor.execute_named_async("Tool 'parse'", "tool_call", broken))
    record = raised.value.harness_execution  # type: ignore[attr-defined]  # the documented extra attribute
    assert record.subject == "Tool 'parse'"
    assert record.describe().startswith("harness retry [tool_call] Tool 'parse': attempt 1 failed")


@pytest.mark.parametrize(
    ("subject", "error"), [(" ", ValueError), ("", ValueError), (None, TypeError), (3, TypeError)]
)
def test_a_subject_must_name_something_and_nothing_runs_otherwise(
    subject: object, error: type[Exception]
) -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)
    calls: list[int] = []
    with pytest.raises(error, match="subject must be a"):
        executor.execute_named(subject, "tool_call", calls.append, 1)  # type: ignore[arg-type]  # wrong on purpose
    assert calls == []
    assert executor.executions == ()
