"""Cancellation: the first reason wins, every callback runs exactly once, outside the lock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetExhausted,
    Cancellation,
    CancellationReason,
    RunCancelled,
    RunState,
    RunTerminated,
    RunTimedOut,
)
from diagnosis_harness._endings import LIFECYCLE_REASONS
from strategies import new_run, state

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness import RunContext

BOUND = 10.0  # seconds a thread may take before the test calls it stuck (never a sleep)
EXPLICIT_REASONS = [r for r in CancellationReason if r not in LIFECYCLE_REASONS]
OUTCOME_OF = {
    CancellationReason.CLIENT_DISCONNECTED: RunState.CANCELLED,
    CancellationReason.USER_REQUESTED: RunState.CANCELLED,
    CancellationReason.SHUTDOWN: RunState.CANCELLED,
    CancellationReason.DEADLINE_EXCEEDED: RunState.TIMED_OUT,
    CancellationReason.BUDGET_EXHAUSTED: RunState.BUDGET_EXHAUSTED,
}


def _in_thread(target: Callable[[], object]) -> threading.Thread:
    """Run ``target`` on a daemon thread and wait, boundedly, for it to finish."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "the thread is stuck: a lock was held, or something waited"
    return thread


def test_every_explicit_reason_is_documented() -> None:
    assert set(OUTCOME_OF) == set(EXPLICIT_REASONS)
    for name in ("CLIENT_DISCONNECTED", "DEADLINE_EXCEEDED", "BUDGET_EXHAUSTED"):
        assert CancellationReason[name] in CancellationReason
    assert CancellationReason["USER_REQUESTED"] in CancellationReason
    assert CancellationReason["SHUTDOWN"] in CancellationReason


def test_a_new_token_is_not_cancelled() -> None:
    ctx = new_run()
    assert not ctx.cancellation.is_cancelled
    assert ctx.cancellation.reason is None
    assert not ctx.cancellation.wait(0)


@pytest.mark.parametrize("first", EXPLICIT_REASONS)
def test_the_first_reason_wins(first: CancellationReason) -> None:
    ctx = new_run()
    assert ctx.cancellation.cancel(first) is True
    for later in EXPLICIT_REASONS:
        assert ctx.cancellation.cancel(later) is False
    assert ctx.cancellation.is_cancelled
    assert ctx.cancellation.reason is first


@pytest.mark.parametrize(("reason", "outcome"), list(OUTCOME_OF.items()))
def test_cancel_records_the_outcome_of_its_reason(
    reason: CancellationReason, outcome: RunState
) -> None:
    ctx = new_run()
    ctx.cancellation.cancel(reason)
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is outcome
    assert termination.at_ns == ctx.clock.monotonic_ns()
    expected: type[RunTerminated] = {
        RunState.CANCELLED: RunCancelled,
        RunState.TIMED_OUT: RunTimedOut,
        RunState.BUDGET_EXHAUSTED: BudgetExhausted,
    }[outcome]
    with pytest.raises(expected) as caught:
        ctx.check(Boundary.MODEL)
    assert type(caught.value) is expected
    assert caught.value.termination is termination


def test_cancel_for_budget_has_no_budget_dimension() -> None:
    ctx = new_run()
    ctx.cancellation.cancel(CancellationReason.BUDGET_EXHAUSTED)
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_model_call()
    assert caught.value.dimension is None
    assert ctx.budget.snapshot().model_calls == 0


@pytest.mark.parametrize("reason", [r for r in CancellationReason if r in LIFECYCLE_REASONS])
def test_a_lifecycle_reason_is_refused_and_changes_nothing(reason: CancellationReason) -> None:
    ctx = new_run()
    ran: list[CancellationReason] = []
    ctx.cancellation.register(ran.append)
    with pytest.raises(ValueError, match=reason.name):
        ctx.cancellation.cancel(reason)
    assert not ctx.cancellation.is_cancelled
    assert state(ctx) is RunState.RUNNING
    assert ran == []


def test_cancel_after_the_run_ended_returns_false_and_keeps_the_outcome() -> None:
    ctx = new_run()
    ran: list[CancellationReason] = []
    ctx.cancellation.register(ran.append)
    result = ctx.lifecycle.succeed()

    assert ran == [CancellationReason.RUN_FINISHED]  # released once, like a deferred cancel
    assert ctx.cancellation.reason is CancellationReason.RUN_FINISHED
    assert ctx.cancellation.cancel(CancellationReason.USER_REQUESTED) is False
    assert ctx.lifecycle.termination is result.termination
    assert ran == [CancellationReason.RUN_FINISHED]


# -- callbacks --------------------------------------------------------------------------------


def test_callbacks_run_once_in_registration_order_with_the_reason() -> None:
    ctx = new_run()
    calls: list[tuple[int, CancellationReason]] = []

    def recorder(i: int) -> Callable[[CancellationReason], None]:
        return lambda reason: calls.append((i, reason))

    for i in range(10):
        ctx.cancellation.register(recorder(i))

    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
    ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    ctx.lifecycle.fail("later")

    assert calls == [(i, CancellationReason.SHUTDOWN) for i in range(10)]


def test_the_same_callable_registered_twice_runs_twice() -> None:
    ctx = new_run()
    calls: list[CancellationReason] = []
    ctx.cancellation.register(calls.append)
    ctx.cancellation.register(calls.append)
    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
    assert calls == [CancellationReason.SHUTDOWN] * 2


def test_a_late_registration_runs_at_once_inline_on_the_registering_thread() -> None:
    ctx = new_run()
    ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    seen: list[tuple[CancellationReason, int]] = []

    def register() -> None:
        registration = ctx.cancellation.register(
            lambda reason: seen.append((reason, threading.get_ident()))
        )
        # Inline: it has already run when register() returns.
        assert seen == [(CancellationReason.USER_REQUESTED, threading.get_ident())]
        assert registration.unregister() is False

    thread = _in_thread(register)
    assert seen == [(CancellationReason.USER_REQUESTED, thread.ident)]


def test_callbacks_run_outside_the_lock() -> None:
    """A callback may use the run: check, snapshot, register, cancel, finish. No deadlock."""
    ctx = new_run()
    observed: list[object] = []

    def uses_the_run(reason: CancellationReason) -> None:
        try:
            ctx.check(Boundary.TOOL)
        except RunCancelled as error:
            observed.append(error.termination.state)
        observed.append(ctx.budget.snapshot().tool_calls)
        observed.append(ctx.lifecycle.state)
        ctx.cancellation.register(lambda inner: observed.append(("inner", inner)))
        observed.append(ctx.cancellation.cancel(CancellationReason.SHUTDOWN))
        observed.append(ctx.lifecycle.fail("from a callback").changed)
        observed.append(ctx.cancellation.wait(0))
        try:
            ctx.reserve_tool_call("t")
        except RunCancelled:
            observed.append("refused")

    ctx.cancellation.register(uses_the_run)
    _in_thread(lambda: ctx.cancellation.cancel(CancellationReason.USER_REQUESTED))

    assert observed == [
        RunState.CANCELLED,
        0,
        RunState.CANCELLED,
        ("inner", CancellationReason.USER_REQUESTED),
        False,
        False,
        True,
        "refused",
    ]


@pytest.mark.parametrize(
    "end",
    [
        pytest.param(lambda ctx: ctx.lifecycle.succeed(), id="succeed"),
        pytest.param(lambda ctx: ctx.lifecycle.fail("x"), id="fail"),
        pytest.param(lambda ctx: ctx.check(Boundary.MODEL), id="deadline"),
        pytest.param(lambda ctx: ctx.reserve_bytes(10**9), id="budget"),
        pytest.param(
            lambda ctx: ctx.record_token_usage(input_tokens=10**9, output_tokens=0), id="tokens"
        ),
    ],
)
def test_callbacks_run_outside_the_lock_however_the_run_ends(end: Callable[[Any], None]) -> None:
    ctx = new_run(timeout=0)
    snapshots: list[object] = []
    ctx.cancellation.register(lambda _: snapshots.append(ctx.budget.snapshot()))
    ctx.cancellation.register(lambda _: snapshots.append(ctx.lifecycle.termination))

    def ending() -> None:
        with contextlib.suppress(RunTerminated):
            end(ctx)

    _in_thread(ending)
    assert len(snapshots) == 2
    assert snapshots[1] is ctx.lifecycle.termination


def test_a_raising_callback_does_not_stop_the_others_and_goes_to_the_handler() -> None:
    handled: list[tuple[Exception, object]] = []
    ctx = new_run(on_callback_error=lambda error, callback: handled.append((error, callback)))
    ran: list[str] = []
    boom = RuntimeError("release failed")

    def first(_: CancellationReason) -> None:
        ran.append("first")

    def raises(_: CancellationReason) -> None:
        ran.append("raises")
        raise boom

    def last(_: CancellationReason) -> None:
        ran.append("last")

    for callback in (first, raises, last):
        ctx.cancellation.register(callback)

    assert ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED) is True  # no raise

    assert ran == ["first", "raises", "last"]
    assert handled == [(boom, raises)]
    assert state(ctx) is RunState.CANCELLED


def test_a_late_raising_callback_does_not_reach_the_registering_caller() -> None:
    handled: list[Exception] = []
    ctx = new_run(on_callback_error=lambda error, _: handled.append(error))
    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)

    def raises(_: CancellationReason) -> None:
        raise KeyError("late")

    ctx.cancellation.register(raises)
    assert [type(e) for e in handled] == [KeyError]


def test_by_default_callback_errors_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    ctx = new_run()
    boom = ValueError("cannot close the stream")
    ran: list[str] = []

    def raises(_: CancellationReason) -> None:
        raise boom

    ctx.cancellation.register(raises)
    ctx.cancellation.register(lambda _: ran.append("after"))
    with caplog.at_level(logging.ERROR, logger="diagnosis_harness"):
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)

    assert ran == ["after"]
    records = [r for r in caplog.records if r.name == "diagnosis_harness"]
    assert len(records) == 1
    assert records[0].levelno == logging.ERROR
    assert records[0].exc_info is not None
    assert records[0].exc_info[1] is boom


def test_a_failing_error_handler_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def bad_handler(error: Exception, callback: object) -> None:
        raise RuntimeError("handler broke")

    ctx = new_run(on_callback_error=bad_handler)
    ran: list[str] = []

    def raises(_: CancellationReason) -> None:
        raise ValueError("callback broke")

    ctx.cancellation.register(raises)
    ctx.cancellation.register(lambda _: ran.append("after"))
    with caplog.at_level(logging.ERROR, logger="diagnosis_harness"):
        assert ctx.cancellation.cancel(CancellationReason.USER_REQUESTED) is True

    assert ran == ["after"]
    assert any(r.name == "diagnosis_harness" for r in caplog.records)


# -- unregister -------------------------------------------------------------------------------


def test_unregister_before_cancellation_removes_the_callback() -> None:
    ctx = new_run()
    ran: list[str] = []
    kept = ctx.cancellation.register(lambda _: ran.append("kept"))
    removed = ctx.cancellation.register(lambda _: ran.append("removed"))

    assert removed.unregister() is True
    assert removed.unregister() is False  # only once
    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)

    assert ran == ["kept"]
    assert kept.unregister() is False  # it ran


def test_unregister_never_waits_for_a_running_callback() -> None:
    ctx = new_run()
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocks(_: CancellationReason) -> None:
        ran.append("blocks")
        started.set()
        assert release.wait(BOUND)

    blocking = ctx.cancellation.register(blocks)
    queued = ctx.cancellation.register(lambda _: ran.append("queued"))
    canceller = threading.Thread(
        target=ctx.cancellation.cancel, args=(CancellationReason.USER_REQUESTED,), daemon=True
    )
    canceller.start()
    try:
        assert started.wait(BOUND)
        results: list[bool] = []
        # On yet another thread, bounded: if unregister waited, this thread would be stuck.
        _in_thread(lambda: results.extend([blocking.unregister(), queued.unregister()]))
        # Both were taken by the signaller: too late to remove, so both will run exactly once.
        assert results == [False, False]
        assert ran == ["blocks"]
    finally:
        release.set()
        canceller.join(BOUND)
    assert not canceller.is_alive()
    assert ran == ["blocks", "queued"]


# -- waiting ----------------------------------------------------------------------------------


def test_wait_times_out_while_not_cancelled() -> None:
    ctx = new_run()
    assert ctx.cancellation.wait(0) is False
    assert ctx.cancellation.wait(0.001) is False


def test_wait_wakes_every_waiting_thread() -> None:
    ctx = new_run()
    waiting = threading.Barrier(5)
    results: list[bool] = []

    def waiter() -> None:
        waiting.wait()
        results.append(ctx.cancellation.wait(BOUND))

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    waiting.wait()
    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
    for thread in threads:
        thread.join(BOUND)
    assert results == [True] * 4
    assert ctx.cancellation.wait() is True
    assert ctx.cancellation.wait(0) is True


def test_wait_async_wakes_on_a_cancel_from_another_thread() -> None:
    ctx = new_run()

    async def scenario() -> tuple[CancellationReason, CancellationReason]:
        by_method = asyncio.create_task(ctx.cancellation.wait_async())
        by_await = asyncio.create_task(_await_token(ctx))
        await asyncio.sleep(0)  # one loop turn: both tasks are now waiting (not a timing sleep)
        assert not by_method.done()
        assert not by_await.done()
        await asyncio.to_thread(ctx.cancellation.cancel, CancellationReason.CLIENT_DISCONNECTED)
        first, second = await asyncio.wait_for(asyncio.gather(by_method, by_await), BOUND)
        return first, second

    assert asyncio.run(scenario()) == (CancellationReason.CLIENT_DISCONNECTED,) * 2


async def _await_token(ctx: RunContext) -> CancellationReason:
    return await ctx.cancellation


def test_wait_async_returns_at_once_when_already_cancelled() -> None:
    ctx = new_run()
    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)

    async def scenario() -> CancellationReason:
        return await asyncio.wait_for(ctx.cancellation.wait_async(), BOUND)

    assert asyncio.run(scenario()) is CancellationReason.SHUTDOWN


def test_a_cancelled_wait_async_leaves_the_token_alone() -> None:
    ctx = new_run()
    ran: list[CancellationReason] = []

    async def scenario() -> None:
        task = asyncio.create_task(ctx.cancellation.wait_async())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert not ctx.cancellation.is_cancelled
    ctx.cancellation.register(ran.append)
    # The loop is closed; the abandoned waiter must not break a later cancel.
    assert ctx.cancellation.cancel(CancellationReason.SHUTDOWN) is True
    assert ran == [CancellationReason.SHUTDOWN]


def test_a_standalone_token_works_without_a_run() -> None:
    token = Cancellation()
    ran: list[CancellationReason] = []
    token.register(ran.append)
    assert token.cancel(CancellationReason.SHUTDOWN) is True
    assert token.cancel(CancellationReason.USER_REQUESTED) is False
    assert ran == [CancellationReason.SHUTDOWN]
    assert token.wait(0)
    assert "SHUTDOWN" in repr(token)


# Scenario: Client disconnects -- shown in
# src/diagnosis_harness/conformance/suite/test_deadline_and_cancellation.py.
