"""``GovernedTools``: a framework's Tool call reserved, keyed by its own ID, retried by policy, its
result's bytes counted -- and bad input refused before anything changes."""

from __future__ import annotations

import asyncio
import functools

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunContext,
    RunState,
    RunTimedOut,
    StopReason,
    UnsafeKeySegment,
)
from diagnosis_harness.integrations import GovernedTools, result_bytes
from racing import race

pytestmark = pytest.mark.usefixtures("eager_thread_switching")


def _limits(**overrides: object) -> BudgetLimits:
    values: dict[str, object] = {
        "model_calls": 10,
        "tool_calls": 10,
        "per_tool_calls": 10,
        "input_tokens": 1000,
        "output_tokens": 1000,
        "total_tokens": 2000,
        "run_bytes": 1000,
        **overrides,
    }
    return BudgetLimits(**values)  # type: ignore[arg-type]  # the keywords are BudgetLimits' own


def _run(clock: ManualClock | None = None, **overrides: object) -> RunContext:
    policies = RetryPolicies(
        [
            *RetryPolicies.defaults().values(),
            RetryPolicy("flaky_tool", 3, frozenset({FailureKind.TIMEOUT})),
        ]
    )
    return RunContext.create(
        session_id="s-1",
        run_id="run-7",
        limits=_limits(**overrides),
        timeout=60,
        clock=clock or ManualClock(),
        retry_policies=policies,
    )


def test_a_governed_call_reserves_runs_and_counts_its_result() -> None:
    ctx = _run()
    tools = GovernedTools(ctx)
    calls: list[str] = []

    def logs(service: str) -> str:
        calls.append(service)
        return "é" * 10  # 20 bytes in UTF-8

    assert tools.call("logs", "call_abc", logs, "checkout") == "é" * 10
    usage = ctx.budget.snapshot()
    assert calls == ["checkout"]
    assert (usage.tool_calls, dict(usage.per_tool_calls), usage.run_bytes) == (1, {"logs": 1}, 20)
    [execution] = tools.executor.executions
    assert (execution.policy, execution.stop, len(execution.attempts)) == (
        "tool_call",
        StopReason.SUCCEEDED,
        1,
    )


def test_the_key_holds_the_framework_id_verbatim() -> None:
    tools = GovernedTools(_run(), key_prefix="diag")
    assert tools.key("toolu_01A09q90qw90lq917835lq9") == "diag:run-7:toolu_01A09q90qw90lq917835lq9"
    assert tools.key_for("logs", "call_X.1-a") == "diag:run-7:call_X.1-a"


def test_check_is_a_deprecated_alias_of_key_for() -> None:
    tools = GovernedTools(_run(), key_prefix="diag")
    with pytest.warns(DeprecationWarning, match="key_for"):
        assert tools.check("logs", "call_X.1-a") == "diag:run-7:call_X.1-a"
    with pytest.warns(DeprecationWarning, match="key_for"), pytest.raises(ValueError, match="tool"):
        tools.check(" ", "call_X.1-a")


@pytest.mark.parametrize(
    ("tool", "tool_call_id", "error"),
    [
        pytest.param("logs", "call:1", UnsafeKeySegment, id="separator-in-id"),
        pytest.param("logs", "call*", UnsafeKeySegment, id="glob-in-id"),
        pytest.param("logs", "", UnsafeKeySegment, id="empty-id"),
        pytest.param("logs", "x" * 129, UnsafeKeySegment, id="id-too-long"),
        pytest.param("logs", 7, TypeError, id="id-not-a-str"),
        pytest.param("  ", "call_1", ValueError, id="blank-tool"),
        pytest.param(None, "call_1", TypeError, id="tool-not-a-str"),
    ],
)
def test_bad_input_is_refused_before_anything_runs_or_is_reserved(
    tool: object, tool_call_id: object, error: type[Exception]
) -> None:
    ctx = _run()
    tools = GovernedTools(ctx)
    ran: list[object] = []
    with pytest.raises(error, match=r"tool_call_id|tool must"):
        tools.call(tool, tool_call_id, ran.append, "x")  # type: ignore[arg-type]  # bad on purpose
    assert ran == []
    assert ctx.budget.snapshot().tool_calls == 0
    assert ctx.lifecycle.state is RunState.RUNNING
    assert tools.executor.executions == ()


def test_an_unknown_policy_name_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"policy must name one of .*tool_call.*'tool_cal'"):
        GovernedTools(_run(), policy="tool_cal")


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"key_prefix": "a:b"}, id="unsafe-prefix"),
        pytest.param({"measure": 3}, id="measure-not-callable"),
        pytest.param({"executor": object()}, id="not-an-executor"),
        pytest.param({"policy": 1}, id="policy-not-a-name"),
    ],
)
def test_bad_configuration_is_a_clear_error(kwargs: dict[str, object]) -> None:
    with pytest.raises((TypeError, ValueError)):
        GovernedTools(_run(), **kwargs)  # type: ignore[arg-type]  # bad on purpose


def test_the_per_tool_limit_refuses_the_call_and_ends_the_run() -> None:
    ctx = _run(per_tool_calls=2, per_tool_overrides={"metrics": 1})
    tools = GovernedTools(ctx)
    ran: list[str] = []
    tools.call("metrics", "c1", ran.append, "first")
    with pytest.raises(BudgetExhausted) as refused:
        tools.call("metrics", "c2", ran.append, "second")
    assert ran == ["first"]
    assert refused.value.dimension is BudgetDimension.PER_TOOL_CALLS
    assert refused.value.boundary is Boundary.TOOL
    assert refused.value.termination is ctx.lifecycle.termination
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


def test_a_result_past_the_byte_budget_ends_the_run_after_the_tool_ran() -> None:
    ctx = _run(run_bytes=8)
    tools = GovernedTools(ctx)
    assert tools.call("logs", "c1", lambda: b"12345678") == b"12345678"
    with pytest.raises(BudgetExhausted) as refused:
        tools.call("logs", "c2", lambda: "9")
    assert refused.value.dimension is BudgetDimension.RUN_BYTES
    assert ctx.budget.snapshot().run_bytes == 8


def test_retries_follow_the_policy_and_are_one_tool_call_under_one_key() -> None:
    ctx = _run()
    tools = GovernedTools(ctx, policy="flaky_tool")
    seen: list[str] = []

    def flaky(key: str) -> str:
        seen.append(key)
        if len(seen) < 3:
            raise HarnessFailure(FailureKind.TIMEOUT, "slow backend")
        return "ok"

    key = tools.key("call_9")
    assert tools.call("logs", "call_9", flaky, key) == "ok"
    assert seen == ["tool:run-7:call_9"] * 3
    assert ctx.budget.snapshot().tool_calls == 1
    [execution] = tools.executor.executions
    failures = [a.failure for a in execution.attempts]
    assert failures == [FailureKind.TIMEOUT, FailureKind.TIMEOUT, None]


def test_a_run_past_its_deadline_refuses_the_call() -> None:
    clock = ManualClock()
    ctx = _run(clock)
    tools = GovernedTools(ctx)
    clock.advance(60)
    ran: list[int] = []
    with pytest.raises(RunTimedOut):
        tools.call("logs", "c1", ran.append, 1)
    assert ran == []
    assert ctx.lifecycle.state is RunState.TIMED_OUT


def test_the_async_call_is_governed_the_same_way() -> None:
    ctx = _run(tool_calls=1)
    tools = GovernedTools(ctx)

    async def deploys(n: int) -> list[int]:
        await asyncio.sleep(0)
        return list(range(n))

    async def scenario() -> None:
        assert await tools.call_async("deploys", "c1", deploys, 3) == [0, 1, 2]
        with pytest.raises(BudgetExhausted):
            await tools.call_async("deploys", "c2", deploys, 3)

    asyncio.run(scenario())
    assert ctx.budget.snapshot().run_bytes == len(b"[0, 1, 2]")


def test_a_coroutine_function_is_refused_by_the_sync_call() -> None:
    ctx = _run()

    async def tool() -> None:
        return None

    with pytest.raises(TypeError, match="call_async"):
        GovernedTools(ctx).call("logs", "c1", tool)  # type: ignore[unused-coroutine]  # refused
    assert ctx.budget.snapshot().tool_calls == 0


def test_a_shared_executor_keeps_one_journal() -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx)
    tools = GovernedTools(ctx, executor=executor)
    tools.call("logs", "c1", lambda: "x")
    assert tools.executor is executor
    assert len(executor.executions) == 1


def _race_for_the_last_calls(calls: int, limit: int) -> tuple[RunContext, list[int], list[int]]:
    """``calls`` threads, one Tool call each, released together under a limit of ``limit``."""
    ctx = _run(tool_calls=limit, per_tool_calls=calls)
    tools = GovernedTools(ctx)
    ran: list[int] = []
    refused: list[int] = []

    def racer(i: int) -> None:
        try:
            tools.call("logs", f"c{i}", ran.append, i)
        except BudgetExhausted:
            refused.append(i)

    race([functools.partial(racer, i) for i in range(calls)])
    return ctx, ran, refused


def test_threads_racing_for_the_last_calls_run_exactly_as_many_as_fit() -> None:
    """16 threads under a limit of 9: exactly 9 run and 7 never start, every round.

    A call that ran while another's refusal ended the run has its result's bytes refused too
    (the run is over): the calls that never started are the refused ones that did not run."""
    for _ in range(50):
        ctx, ran, refused = _race_for_the_last_calls(16, 9)
        assert len(ran) == 9
        assert len(set(refused) - set(ran)) == 7
        usage = ctx.budget.snapshot()
        assert (usage.tool_calls, usage.exhausted) == (9, BudgetDimension.TOOL_CALLS)
        assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


@pytest.mark.parametrize(
    ("result", "size"),
    [
        ("abc", 3),
        ("é", 2),
        (b"\x00\x01", 2),
        (bytearray(b"abcd"), 4),
        (memoryview(b"abcde"), 5),
        ({"a": 1}, len(b'{"a": 1}')),
        ([], 2),
        (None, 4),
    ],
)
def test_result_bytes_measures_what_a_model_would_receive(result: object, size: int) -> None:
    assert result_bytes(result) == size


def test_an_empty_result_reserves_nothing() -> None:
    ctx = _run()
    GovernedTools(ctx).call("logs", "c1", lambda: "")
    assert ctx.budget.snapshot().run_bytes == 0


def test_a_measure_that_returns_nonsense_is_a_clear_error() -> None:
    ctx = _run()
    tools = GovernedTools(ctx, measure=lambda _result: -1)
    with pytest.raises(TypeError, match="measure must return an int >= 0"):
        tools.call("logs", "c1", lambda: "x")
