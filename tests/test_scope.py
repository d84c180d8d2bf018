"""``async with ctx.scope():`` -- the run's end cancels the task; a foreign cancel passes through.

Every scenario is bounded by ``asyncio.wait_for(..., BOUND)``: a broken scope fails, never hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetExhausted,
    CancellationReason,
    ManualClock,
    RunCancelled,
    RunFinished,
    RunScope,
    RunState,
    RunTerminated,
    RunTimedOut,
    SystemClock,
)
from strategies import limits, new_run, state

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from diagnosis_harness import RunContext

BOUND = 5.0


def _run(scenario: Callable[[], Coroutine[object, object, None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(scenario(), BOUND)

    asyncio.run(bounded())


async def _forever() -> None:
    await asyncio.Event().wait()  # nobody sets it: only a cancellation ends this


def _cancel_from_another_thread(ctx: RunContext, reason: CancellationReason) -> threading.Thread:
    thread = threading.Thread(target=ctx.cancellation.cancel, args=(reason,), daemon=True)
    thread.start()
    return thread


def test_scope_returns_a_run_scope() -> None:
    ctx = new_run()
    assert isinstance(ctx.scope(), RunScope)


def test_a_block_that_completes_leaves_the_run_running() -> None:
    ctx = new_run()

    async def scenario() -> None:
        async with ctx.scope() as scope:
            assert isinstance(scope, RunScope)
            await asyncio.sleep(0)
        await asyncio.sleep(0)

    _run(scenario)
    assert state(ctx) is RunState.RUNNING
    assert not ctx.cancellation.is_cancelled


def test_a_cancel_from_another_thread_raises_run_cancelled_from_the_block() -> None:
    ctx = new_run()
    after: list[str] = []

    async def scenario() -> None:
        threads: list[threading.Thread] = []

        async def block() -> None:
            async with ctx.scope():
                threads.append(_cancel_from_another_thread(ctx, CancellationReason.USER_REQUESTED))
                await _forever()

        with pytest.raises(RunCancelled) as caught:
            await block()
        threads[0].join(BOUND)
        assert caught.value.termination is ctx.lifecycle.termination
        assert isinstance(caught.value.__cause__, asyncio.CancelledError)
        # The task is no longer being cancelled: it can go on awaiting after the block.
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0
        after.append("went on")

    _run(scenario)
    assert after == ["went on"]
    assert state(ctx) is RunState.CANCELLED


def test_the_deadline_raises_run_timed_out_without_any_boundary() -> None:
    ctx = new_run(clock=SystemClock(), timeout=0.05)

    async def scenario() -> None:
        with pytest.raises(RunTimedOut) as caught:
            async with ctx.scope():
                await _forever()
        assert caught.value.termination is ctx.lifecycle.termination

    _run(scenario)
    assert state(ctx) is RunState.TIMED_OUT
    assert ctx.cancellation.reason is CancellationReason.DEADLINE_EXCEEDED


def test_a_foreign_task_cancel_passes_through_and_leaves_the_run_alone() -> None:
    ctx = new_run()

    async def scenario() -> None:
        entered = asyncio.Event()

        async def work() -> None:
            async with ctx.scope():
                entered.set()
                await _forever()

        task = asyncio.create_task(work())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    _run(scenario)
    assert state(ctx) is RunState.RUNNING
    assert not ctx.cancellation.is_cancelled
    assert ctx.cancellation.cancel(CancellationReason.SHUTDOWN)  # the scope let go cleanly


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        (lambda ctx: ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED), RunCancelled),
        (lambda ctx: ctx.cancellation.cancel(CancellationReason.DEADLINE_EXCEEDED), RunTimedOut),
        (lambda ctx: ctx.cancellation.cancel(CancellationReason.BUDGET_EXHAUSTED), BudgetExhausted),
        (lambda ctx: ctx.lifecycle.succeed(), RunFinished),
        (lambda ctx: ctx.lifecycle.fail("x"), RunFinished),
    ],
)
def test_a_scope_on_an_ended_run_raises_at_entry(
    end: Callable[[RunContext], object], expected: type[RunTerminated]
) -> None:
    ctx = new_run()
    end(ctx)
    body: list[str] = []

    async def scenario() -> None:
        with pytest.raises(expected) as caught:
            async with ctx.scope():
                body.append("ran")
        assert caught.value.termination is ctx.lifecycle.termination

    _run(scenario)
    assert body == []


def test_a_scope_past_its_deadline_raises_at_entry_and_records_it() -> None:
    ctx = new_run(timeout=0)

    async def scenario() -> None:
        with pytest.raises(RunTimedOut):
            async with ctx.scope():
                pytest.fail("the block must not start")

    _run(scenario)
    assert state(ctx) is RunState.TIMED_OUT


def test_a_scope_is_entered_once() -> None:
    ctx = new_run()

    async def scenario() -> None:
        scope = ctx.scope()
        async with scope:
            pass
        with pytest.raises(RuntimeError, match="once"):
            async with scope:
                pass

    _run(scenario)


def test_a_scope_outside_a_task_is_refused() -> None:
    ctx = new_run()
    coroutine = ctx.scope().__aenter__()
    with pytest.raises(RuntimeError):
        coroutine.send(None)
    coroutine.close()


def _deadline_at_a_boundary(ctx: RunContext, clock: ManualClock) -> None:
    clock.advance(30)
    ctx.check(Boundary.TOOL)


def _budget_at_a_boundary(ctx: RunContext, clock: ManualClock) -> None:
    ctx.reserve_model_call()  # the second: over the limit of 1


def _cancel_on_the_loop_thread(ctx: RunContext, clock: ManualClock) -> None:
    ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)


@pytest.mark.parametrize(
    "end_inside", [_deadline_at_a_boundary, _budget_at_a_boundary, _cancel_on_the_loop_thread]
)
def test_no_stray_cancellation_after_the_block_is_left(
    end_inside: Callable[[RunContext, ManualClock], None],
) -> None:
    """The run ends inside the block, and the block is left without awaiting again.

    The scope's callback has already scheduled ``task.cancel()`` on the loop; once the scope is
    exited that must not fire: the code after the block (an exception handler, cleanup) must
    not get a ``CancelledError`` out of nowhere.
    """
    clock = ManualClock()
    ctx = new_run(budget=limits(model_calls=1), clock=clock, timeout=30)
    ctx.reserve_model_call()
    after: list[str] = []

    async def scenario() -> None:
        with contextlib.suppress(RunTerminated):
            async with ctx.scope():
                end_inside(ctx, clock)
        await asyncio.sleep(0)  # cleanup after the block
        await asyncio.sleep(0)
        after.append("cleanup ran")

    _run(scenario)
    assert after == ["cleanup ran"]
    assert state(ctx) is not RunState.RUNNING
