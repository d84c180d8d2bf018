"""Requirement: Harness retry SHALL be typed, bounded, and recorded.

Each scenario is shown twice: with ``HarnessRetryExecutor.execute`` and with ``execute_async``.
Every operation advances a ``ManualClock`` itself; a real wait is bounded (a thread join,
``asyncio.wait_for``), so that a bug fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import pytest

import diagnosis_harness._retry as retry_module
from diagnosis_harness import (
    AttemptOutcome,
    Backoff,
    CancellationReason,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    RetryPolicies,
    RunCancelled,
    RunState,
    StopReason,
)
from diagnosis_harness._generated.tables import RetryState
from diagnosis_harness.testing import FakeModel, FakeResponse, FakeTool

from ._support import RETRY, AsyncScripted, Scripted, attempts_summary, only_execution, run_on_clock

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from diagnosis_harness import RunContext

ROUTER = RetryPolicies.defaults()["intent_router"]
BOUND = 10.0  # seconds a wait may take before the test calls it a hang


def _run_async(coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coroutine, BOUND * 2))


# -- Scenario: Router transport failure succeeds on retry -------------------------------------


@pytest.mark.spec(RETRY, "Router transport failure succeeds on retry")
def test_router_transport_failure_succeeds_on_retry() -> None:
    ctx, _ = run_on_clock()
    router = FakeModel(
        [HarnessFailure(FailureKind.TRANSPORT, "connection reset"), FakeResponse("intent: logs")]
    )
    executor = HarnessRetryExecutor(ctx)

    response = executor.execute("intent_router", router.complete, ctx, "classify: disk full")

    assert response.text == "intent: logs"
    assert router.prompts == ["classify: disk full", "classify: disk full"]
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT),
        (2, AttemptOutcome.SUCCEEDED, None),
    ]
    execution = only_execution(executor)
    assert (execution.policy, execution.stop, execution.state) == (
        "intent_router",
        StopReason.SUCCEEDED,
        RetryState.SUCCEEDED,
    )
    assert execution.termination is None
    assert ctx.budget.snapshot().model_calls == 2  # both attempts went through the MODEL gate


@pytest.mark.spec(RETRY, "Router transport failure succeeds on retry")
def test_router_transport_failure_succeeds_on_retry_async() -> None:
    ctx, _ = run_on_clock()
    router = FakeModel([HarnessFailure(FailureKind.TRANSPORT), FakeResponse("intent: metrics")])

    async def classify(prompt: str) -> FakeResponse:
        await asyncio.sleep(0)
        return router.complete(ctx, prompt)

    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        response = await executor.execute_async("intent_router", classify, "cpu at 100%")
        assert response.text == "intent: metrics"

    _run_async(main())

    assert router.calls == 2
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT),
        (2, AttemptOutcome.SUCCEEDED, None),
    ]
    execution = only_execution(executor)
    assert (execution.stop, execution.state) == (StopReason.SUCCEEDED, RetryState.SUCCEEDED)


# -- Scenario: Tool call fails ----------------------------------------------------------------


@pytest.mark.spec(RETRY, "Tool call fails")
def test_tool_call_fails() -> None:
    ctx, _ = run_on_clock()
    failure = HarnessFailure(FailureKind.TRANSPORT, "tool backend unreachable")
    tool: FakeTool[str] = FakeTool("search_logs", "never returned", error=failure)
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(HarnessFailure) as raised:
        executor.execute("tool_call", tool, ctx, "call-1", query="disk")

    assert raised.value is failure
    assert tool.calls == 1
    assert tool.invocations[0].arguments == {"query": "disk"}
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT)
    ]
    execution = only_execution(executor)
    assert execution.state is RetryState.FAILED
    assert execution.stop in (StopReason.NOT_RETRYABLE, StopReason.ATTEMPTS_EXHAUSTED)
    assert failure.harness_execution == execution  # type: ignore[attr-defined]
    assert ctx.budget.snapshot().tool_calls == 1


@pytest.mark.spec(RETRY, "Tool call fails")
def test_tool_call_fails_async() -> None:
    ctx, _ = run_on_clock()
    failure = HarnessFailure(FailureKind.TRANSPORT, "unreachable")
    tool: FakeTool[str] = FakeTool("read_metrics", "never", error=failure)

    async def call_tool(tool_call_id: str) -> str:
        await asyncio.sleep(0)
        return tool(ctx, tool_call_id, window="5m")

    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        with pytest.raises(HarnessFailure) as raised:
            await executor.execute_async("tool_call", call_tool, "call-7")
        assert raised.value is failure

    _run_async(main())

    assert tool.calls == 1
    assert [i.tool_call_id for i in tool.invocations] == ["call-7"]
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT)
    ]
    execution = only_execution(executor)
    assert execution.state is RetryState.FAILED
    assert execution.stop in (StopReason.NOT_RETRYABLE, StopReason.ATTEMPTS_EXHAUSTED)
    assert failure.harness_execution == execution  # type: ignore[attr-defined]


# -- Scenario: Run is cancelled between attempts ----------------------------------------------


@pytest.mark.spec(RETRY, "Run is cancelled between attempts")
def test_run_is_cancelled_between_attempts() -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.TRANSPORT)

    def cancel_then_fail(_: int) -> None:
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    operation = Scripted([failure, "second result"], clock, before=cancel_then_fail)
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(RunCancelled) as raised:
        executor.execute("intent_router", operation)

    assert len(operation.calls) == 1
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT)
    ]
    execution = only_execution(executor)
    assert execution.stop is StopReason.RUN_TERMINATED
    assert execution.state is RetryState.STOPPED
    assert execution.termination is ctx.lifecycle.termination
    assert raised.value.termination is ctx.lifecycle.termination
    assert ctx.lifecycle.state is RunState.CANCELLED
    assert raised.value.harness_execution == execution  # type: ignore[attr-defined]


@pytest.mark.spec(RETRY, "Run is cancelled between attempts")
def test_run_is_cancelled_between_attempts_by_a_cancellation_callback() -> None:
    # The failure of the first attempt leads a resource's callback to cancel the whole run, the
    # way a client disconnect noticed by the transport would.
    ctx, clock = run_on_clock()
    seen: list[CancellationReason] = []
    ctx.cancellation.register(seen.append)

    def classify(error: Exception) -> FailureKind | None:
        if isinstance(error, ConnectionResetError):
            ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
            return FailureKind.TRANSPORT
        return None

    operation = Scripted([ConnectionResetError("peer gone"), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, classifier=classify)

    with pytest.raises(RunCancelled):
        executor.execute(ROUTER, operation)

    assert len(operation.calls) == 1
    assert seen == [CancellationReason.CLIENT_DISCONNECTED]
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT)
    ]
    assert only_execution(executor).stop is StopReason.RUN_TERMINATED


@pytest.mark.spec(RETRY, "Run is cancelled between attempts")
def test_run_is_cancelled_between_attempts_async() -> None:
    ctx, clock = run_on_clock()

    def cancel(_: int) -> None:
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    operation = AsyncScripted(
        [HarnessFailure(FailureKind.TIMEOUT), "unreached"], clock, before=cancel
    )
    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        with pytest.raises(RunCancelled) as raised:
            await executor.execute_async(ROUTER, operation)
        assert raised.value.termination is ctx.lifecycle.termination

    _run_async(main())

    assert len(operation.calls) == 1
    execution = only_execution(executor)
    assert attempts_summary(execution.attempts) == [(1, AttemptOutcome.FAILED, FailureKind.TIMEOUT)]
    assert (execution.stop, execution.state) == (StopReason.RUN_TERMINATED, RetryState.STOPPED)
    assert execution.termination is ctx.lifecycle.termination


@pytest.mark.spec(RETRY, "Run is cancelled between attempts")
def test_run_is_cancelled_between_attempts_during_the_async_backoff() -> None:
    ctx, clock = run_on_clock(timeout=600)
    operation = AsyncScripted([HarnessFailure(FailureKind.TRANSPORT), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=60, maximum=60))
    waiting = threading.Event()
    real_pause = retry_module.pause_async

    async def pause(ctx: RunContext, seconds: float) -> None:
        waiting.set()
        await real_pause(ctx, seconds)

    def canceller() -> None:
        if waiting.wait(BOUND):
            ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)

    async def main() -> None:
        with pytest.raises(RunCancelled):
            await asyncio.wait_for(executor.execute_async(ROUTER, operation), BOUND)

    thread = threading.Thread(target=canceller, daemon=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(retry_module, "pause_async", pause)
        thread.start()
        try:
            _run_async(main())
        finally:
            ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
            thread.join(BOUND)

    assert waiting.is_set()
    assert len(operation.calls) == 1
    assert only_execution(executor).stop is StopReason.RUN_TERMINATED
    assert ctx.cancellation.reason is CancellationReason.USER_REQUESTED
