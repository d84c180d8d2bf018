"""HarnessRetryExecutor.execute_async: the same table, gate and records, with awaitable waits.

Each test runs its own event loop with ``asyncio.run``; every real wait is bounded by
``asyncio.wait_for`` so that a bug fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

import diagnosis_harness._retry as retry_module
from diagnosis_harness import (
    AttemptOutcome,
    AttemptRecord,
    Backoff,
    BudgetExhausted,
    CancellationReason,
    Deadline,
    ExecutionRecord,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunCancelled,
    RunContext,
    RunFinished,
    RunState,
    RunTimedOut,
    StopReason,
    SystemClock,
)
from diagnosis_harness._generated.tables import RetryState
from diagnosis_harness.conformance.suite._support import (
    AsyncScripted,
    attempts_summary,
    only_execution,
    run_on_clock,
)
from diagnosis_harness.testing import FakeModel, FakeResponse
from strategies import limits, new_run

if TYPE_CHECKING:
    from collections.abc import Awaitable, Coroutine

    from diagnosis_harness import RunTerminated

TECHNICAL = frozenset(
    {
        FailureKind.TRANSPORT,
        FailureKind.TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.SERVER_ERROR,
        FailureKind.MALFORMED_RESPONSE,
    }
)
ROUTER = RetryPolicies.defaults()["intent_router"]
THREE_TRIES = RetryPolicy("three", 3, TECHNICAL)
BOUND = 10.0  # seconds a wait may take before the test calls it a hang


def _run_async(coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coroutine, BOUND * 2))


# The seed scenarios are shown in src/diagnosis_harness/conformance/suite/test_harness_retry.py.


# -- the gate -------------------------------------------------------------------------------------

ENDINGS: list[tuple[str, type[RunTerminated]]] = [
    ("cancel", RunCancelled),
    ("deadline", RunTimedOut),
    ("budget", BudgetExhausted),
    ("finish", RunFinished),
]


def _end_run(how: str, ctx: RunContext, clock: ManualClock) -> None:
    if how == "cancel":
        ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
    elif how == "deadline":
        clock.advance(45)
    elif how == "budget":
        ctx.record_token_usage(input_tokens=0, output_tokens=99)
    else:
        ctx.lifecycle.fail("gave up")


@pytest.mark.parametrize(("how", "error"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_a_run_over_before_the_first_attempt_never_awaits_the_operation(
    how: str, error: type[RunTerminated]
) -> None:
    ctx, clock = run_on_clock(budget=limits(output_tokens=10))
    _end_run(how, ctx, clock)
    operation = AsyncScripted(["unreached"], clock)
    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        with pytest.raises(error):
            await executor.execute_async(THREE_TRIES, operation)

    _run_async(main())
    assert operation.calls == []
    assert only_execution(executor) == ExecutionRecord(
        "three", (), StopReason.RUN_TERMINATED, RetryState.STOPPED, ctx.lifecycle.termination
    )


@pytest.mark.parametrize(("how", "error"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_a_run_ended_during_an_attempt_rejects_the_next_async_attempt(
    how: str, error: type[RunTerminated]
) -> None:
    ctx, clock = run_on_clock(budget=limits(output_tokens=10))
    operation = AsyncScripted(
        [HarnessFailure(FailureKind.SERVER_ERROR), "unreached"],
        clock,
        before=lambda _: _end_run(how, ctx, clock),
    )
    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        with pytest.raises(error):
            await executor.execute_async(THREE_TRIES, operation)

    _run_async(main())
    assert len(operation.calls) == 1
    execution = only_execution(executor)
    assert attempts_summary(execution.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.SERVER_ERROR)
    ]
    assert execution.stop is StopReason.RUN_TERMINATED


# -- records and re-raising -----------------------------------------------------------------------


def test_async_records_use_the_clocks_timestamps_and_pass_arguments() -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.RATE_LIMITED)
    operation = AsyncScripted([failure, failure, "third"], clock, step_ns=100)
    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        assert await executor.execute_async(THREE_TRIES, operation, "q", limit=3) == "third"

    _run_async(main())
    assert operation.calls == [(("q",), {"limit": 3})] * 3
    assert executor.attempts == (
        AttemptRecord("three", 1, AttemptOutcome.FAILED, FailureKind.RATE_LIMITED, 1_000, 1_100),
        AttemptRecord("three", 2, AttemptOutcome.FAILED, FailureKind.RATE_LIMITED, 1_100, 1_200),
        AttemptRecord("three", 3, AttemptOutcome.SUCCEEDED, None, 1_200, 1_300),
    )


def test_async_final_failure_reraises_the_same_exception_with_its_history() -> None:
    ctx, clock = run_on_clock()
    first = HarnessFailure(FailureKind.TRANSPORT)
    last = HarnessFailure(FailureKind.TRANSPORT)
    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        with pytest.raises(HarnessFailure) as raised:
            await executor.execute_async(ROUTER, AsyncScripted([first, last], clock))
        assert raised.value is last

    _run_async(main())
    record = only_execution(executor)
    assert record.stop is StopReason.ATTEMPTS_EXHAUSTED
    assert last.harness_execution == record  # type: ignore[attr-defined]
    notes: list[str] = getattr(last, "__notes__", [])
    assert notes == ([record.describe()] if sys.version_info >= (3, 11) else [])


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (HarnessFailure(FailureKind.BUSINESS_REJECTION), FailureKind.BUSINESS_REJECTION),
        (LookupError("unclassified"), FailureKind.UNKNOWN),
        (TimeoutError("an SDK's own timeout"), FailureKind.UNKNOWN),
    ],
    ids=["business-rejection", "unknown", "sdk-timeout"],
)
def test_async_non_retryable_failures_are_raised_after_one_attempt(
    error: Exception, kind: FailureKind
) -> None:
    ctx, clock = run_on_clock()
    operation = AsyncScripted([error, "unreached"], clock)
    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        with pytest.raises(type(error)) as raised:
            await executor.execute_async(RetryPolicy("all", 5, TECHNICAL), operation)
        assert raised.value is error

    _run_async(main())
    assert len(operation.calls) == 1
    assert attempts_summary(executor.attempts) == [(1, AttemptOutcome.FAILED, kind)]


def test_async_classifier_is_used() -> None:
    ctx, clock = run_on_clock()
    executor = HarnessRetryExecutor(
        ctx,
        classifier=lambda e: FailureKind.SERVER_ERROR if isinstance(e, OSError) else None,
    )
    operation = AsyncScripted([OSError("502"), "ok"], clock)

    async def main() -> None:
        assert await executor.execute_async(ROUTER, operation) == "ok"

    _run_async(main())
    assert [a.failure for a in executor.attempts] == [FailureKind.SERVER_ERROR, None]


def test_async_budget_refused_inside_the_operation_is_not_retried() -> None:
    ctx, _ = run_on_clock(budget=limits(model_calls=1))
    model = FakeModel([HarnessFailure(FailureKind.TRANSPORT), FakeResponse("unreached")])

    async def call() -> FakeResponse:
        return model.complete(ctx, "p")

    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        with pytest.raises(BudgetExhausted):
            await executor.execute_async(ROUTER, call)

    _run_async(main())
    assert model.calls == 1
    assert [a.failure for a in executor.attempts] == [
        FailureKind.TRANSPORT,
        FailureKind.BUDGET_EXHAUSTED,
    ]


# -- interruption ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "interrupt",
    [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(1)],
    ids=lambda e: type(e).__name__,
)
def test_async_base_exceptions_propagate_at_once_recorded_as_interrupted(
    interrupt: BaseException,
) -> None:
    ctx, clock = run_on_clock()
    operation = AsyncScripted([interrupt, "unreached"], clock, step_ns=5)
    executor = HarnessRetryExecutor(ctx, classifier=lambda _: FailureKind.TRANSPORT)
    caught: list[BaseException] = []

    async def main() -> None:
        try:
            await executor.execute_async(RetryPolicy("all", 5, TECHNICAL), operation)
        except BaseException as error:  # the interrupt itself, inspected below
            caught.append(error)

    asyncio.run(main())
    assert caught == [interrupt]
    assert len(operation.calls) == 1
    assert executor.attempts == (
        AttemptRecord("all", 1, AttemptOutcome.INTERRUPTED, None, 1_000, 1_005),
    )
    assert (only_execution(executor).stop, only_execution(executor).state) == (
        StopReason.INTERRUPTED,
        RetryState.FAILED,
    )


def test_cancelling_the_task_during_an_attempt_is_recorded_and_propagates() -> None:
    ctx, _ = run_on_clock()
    started = asyncio.Event()
    calls: list[int] = []

    async def hangs() -> str:
        calls.append(1)
        started.set()
        await asyncio.Event().wait()  # until the task is cancelled
        return "unreached"

    executor = HarnessRetryExecutor(ctx)

    async def main() -> None:
        task = asyncio.ensure_future(executor.execute_async(ROUTER, hangs))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    _run_async(main())
    assert calls == [1]
    (attempt,) = executor.attempts
    assert (attempt.outcome, attempt.failure) == (AttemptOutcome.INTERRUPTED, None)
    assert only_execution(executor).stop is StopReason.INTERRUPTED
    assert ctx.lifecycle.state is RunState.RUNNING  # a cancelled task is not a cancelled run


def test_cancelling_the_task_during_the_backoff_keeps_the_executions_record() -> None:
    # BUG: a task cancelled while waiting between attempts loses its execution: the actual first
    # attempt is never stored (executor.attempts stays empty) nor attached to the CancelledError.
    ctx, clock = run_on_clock(timeout=600)
    entered = asyncio.Event()
    operation = AsyncScripted([HarnessFailure(FailureKind.TRANSPORT), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=60, maximum=60))

    async def main() -> None:
        task = asyncio.ensure_future(executor.execute_async(ROUTER, operation))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    real_pause = retry_module.pause_async

    async def pause(ctx: RunContext, seconds: float) -> None:
        entered.set()
        await real_pause(ctx, seconds)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(retry_module, "pause_async", pause)
        asyncio.run(asyncio.wait_for(main(), BOUND))

    assert len(operation.calls) == 1
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT)
    ]


# -- backoff --------------------------------------------------------------------------------------


@dataclass
class AsyncPauseRecorder:
    calls: list[tuple[RunContext, float]] = field(default_factory=list)

    async def __call__(self, ctx: RunContext, seconds: float) -> None:
        self.calls.append((ctx, seconds))


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> AsyncPauseRecorder:
    recorder = AsyncPauseRecorder()
    monkeypatch.setattr(retry_module, "pause_async", recorder)
    return recorder


@pytest.mark.parametrize("backoff", [None, Backoff()], ids=["no-backoff", "zero-backoff"])
def test_async_zero_delay_makes_no_wait_call(
    backoff: Backoff | None, pauses: AsyncPauseRecorder
) -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.TIMEOUT)
    executor = HarnessRetryExecutor(ctx, backoff=backoff)

    async def main() -> None:
        operation = AsyncScripted([failure, failure, "ok"], clock)
        assert await executor.execute_async(THREE_TRIES, operation) == "ok"

    _run_async(main())
    assert pauses.calls == []


def test_async_positive_delay_waits_once_per_retry(pauses: AsyncPauseRecorder) -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.TIMEOUT)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=2, multiplier=3, maximum=100))

    async def main() -> None:
        assert await executor.execute_async(ROUTER, AsyncScripted([failure, "ok"], clock)) == "ok"
        assert pauses.calls == [(ctx, 2)]
        operation = AsyncScripted([failure, failure, "ok"], clock)
        assert await executor.execute_async(THREE_TRIES, operation) == "ok"

    _run_async(main())
    assert [seconds for _, seconds in pauses.calls] == [2, 2, 6]


def test_async_backoff_never_sleeps_past_the_deadline() -> None:
    ctx = new_run(clock=SystemClock(), timeout=0.05)
    calls: list[int] = []

    async def fails() -> str:
        calls.append(1)
        raise HarnessFailure(FailureKind.TRANSPORT)

    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=60, maximum=60))

    async def main() -> None:
        with pytest.raises(RunTimedOut):
            await asyncio.wait_for(executor.execute_async(ROUTER, fails), BOUND)

    asyncio.run(main())  # an asyncio.TimeoutError here would mean the backoff outlived the run
    assert calls == [1]
    assert ctx.lifecycle.state is RunState.TIMED_OUT
    assert only_execution(executor).stop is StopReason.RUN_TERMINATED


FAR = [
    pytest.param({"timeout": sys.float_info.max}, id="timeout=float-max"),
    pytest.param({"timeout": 1e300}, id="timeout=1e300"),
    pytest.param({"timeout": 10**400}, id="timeout=10**400"),
    pytest.param({"deadline": Deadline.at_ns(10**400)}, id="at_ns(10**400)"),
]


@pytest.mark.parametrize("far", FAR)
def test_async_backoff_under_a_far_deadline_waits_its_delay(far: dict[str, Any]) -> None:
    """The wait lasts the delay or the capped time left: no overflow, whatever the deadline."""
    ctx, clock = run_on_clock(**far)
    operation = AsyncScripted([HarnessFailure(FailureKind.TRANSPORT), "ok"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=0.001, maximum=0.001))

    async def main() -> None:
        assert await executor.execute_async(ROUTER, operation) == "ok"

    _run_async(main())
    assert len(operation.calls) == 2


def test_async_huge_backoff_under_a_far_deadline_waits_until_the_run_is_cancelled() -> None:
    ctx, clock = run_on_clock(deadline=Deadline.at_ns(10**400))
    entered = asyncio.Event()
    operation = AsyncScripted([HarnessFailure(FailureKind.TRANSPORT), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=1e300, maximum=1e300))
    real_pause = retry_module.pause_async

    async def pause(ctx: RunContext, seconds: float) -> None:
        entered.set()
        await real_pause(ctx, seconds)

    async def main() -> None:
        task = asyncio.ensure_future(executor.execute_async(ROUTER, operation))
        await entered.wait()  # set just before the pause, which then ran up to its wait
        ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
        with pytest.raises(RunCancelled):
            await task

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(retry_module, "pause_async", pause)
        _run_async(main())
    assert len(operation.calls) == 1


def test_async_backoff_longer_than_one_capped_wait_waits_again_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wait that ended on ``Deadline.MAX_WAIT_SECONDS`` was neither the delay nor the deadline.

    The cap is lowered to 10 ms so that a 50 ms backoff spans five capped waits.
    """
    monkeypatch.setattr(Deadline, "MAX_WAIT_SECONDS", 0.01)
    ctx, clock = run_on_clock(deadline=Deadline.at_ns(10**400))
    operation = AsyncScripted([HarnessFailure(FailureKind.TRANSPORT), "ok"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=0.05, maximum=0.05))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await executor.execute_async(ROUTER, operation) == "ok"
        waited = loop.time() - started
        assert waited >= 0.05, f"the backoff ended after one capped wait ({waited:.3f} s)"

    _run_async(main())


# -- concurrency in one loop ----------------------------------------------------------------------


def test_concurrent_async_executions_share_one_executor() -> None:
    ctx, clock = run_on_clock()
    executor = HarnessRetryExecutor(ctx)
    count = 30
    operations = [
        AsyncScripted([HarnessFailure(FailureKind.TRANSPORT)] * (i % 2) + [i], clock, step_ns=1)
        for i in range(count)
    ]

    async def main() -> None:
        runs: list[Awaitable[object]] = [
            executor.execute_async(RetryPolicy(f"op-{i}", 2, TECHNICAL), op)
            for i, op in enumerate(operations)
        ]
        assert await asyncio.gather(*runs) == list(range(count))

    _run_async(main())
    executions = {e.policy: e for e in executor.executions}
    assert len(executions) == count
    for i, operation in enumerate(operations):
        execution = executions[f"op-{i}"]
        assert len(execution.attempts) == len(operation.calls) == 1 + i % 2
        assert [a.number for a in execution.attempts] == list(range(1, 2 + i % 2))
        assert execution.stop is StopReason.SUCCEEDED


def test_a_plain_function_given_to_execute_async_fails_once_with_a_clear_error() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)
    ran: list[str] = []

    def operation() -> str:  # ran before its result could be awaited: that attempt happened
        ran.append("body")
        return "answer"

    untyped: Any = operation

    async def main() -> None:
        with pytest.raises(TypeError, match="fn must return an awaitable") as caught:
            await executor.execute_async("intent_router", untyped)
        assert "use execute" in str(caught.value)

    _run_async(main())
    assert ran == ["body"]  # once: a programming error is not a transient failure to retry
    (attempt,) = executor.attempts
    assert attempt.outcome is AttemptOutcome.FAILED
