"""``async with ctx.scope():`` -- the run's end cancels the task; a foreign cancel passes through.

Every scenario is bounded by ``asyncio.wait_for(..., BOUND)``: a broken scope fails, never hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetExhausted,
    CancellationReason,
    Deadline,
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


# -- a cancellation of the task from elsewhere passes through untouched ----------------------------


async def _started(task: asyncio.Task[None], entered: asyncio.Event) -> None:
    """Wait, bounded, until ``task`` is inside its block; its own error if it never gets there."""
    waiter = asyncio.ensure_future(entered.wait())
    await asyncio.wait({task, waiter}, timeout=BOUND, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done():
        task.result()  # raises what broke the task before its block began
    assert entered.is_set(), "the block did not start within the bound"


def test_a_foreign_cancel_reaches_its_canceller_as_the_same_cancelled_error() -> None:
    """Untouched: not a ``RunTerminated``, not a new ``CancelledError``, its message kept."""
    ctx = new_run()

    async def scenario() -> None:
        entered = asyncio.Event()

        async def work() -> None:
            async with ctx.scope():
                entered.set()
                await _forever()

        task = asyncio.create_task(work())
        await _started(task, entered)
        task.cancel("from elsewhere")
        with pytest.raises(asyncio.CancelledError) as caught:
            await task
        assert task.cancelled()
        if sys.version_info >= (3, 11):  # 3.10's `await task` raises a new error, message lost
            assert caught.value.args == ("from elsewhere",)
        assert not isinstance(caught.value.__cause__, RunTerminated)

    _run(scenario)
    assert state(ctx) is RunState.RUNNING


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.uncancel() is new in Python 3.11")
@pytest.mark.parametrize("foreign_first", [True, False], ids=["foreign-first", "scope-first"])
def test_a_foreign_cancel_together_with_the_run_ending_passes_through(foreign_first: bool) -> None:
    """The run is cancelled and someone else cancels the task before it runs again.

    Both asked; the task's ``CancelledError`` is also the other canceller's, so it must reach
    them as a cancellation (``uncancel()`` leaves theirs counted), not as ``RunCancelled``.
    """
    ctx = new_run()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        entered = asyncio.Event()

        async def work() -> None:
            async with ctx.scope():
                entered.set()
                await _forever()

        task = asyncio.create_task(work())
        await _started(task, entered)
        if foreign_first:
            task.cancel("from elsewhere")
            ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
        else:
            # The scope's request is queued by the cancellation callback; ours runs right after
            # it, before the task wakes up.
            ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
            loop.call_soon(task.cancel, "from elsewhere")
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    _run(scenario)
    assert state(ctx) is RunState.CANCELLED


# -- the deadline timer re-reads the run's clock and re-arms when it fires early -------------------


class _LaggingClock:
    """The system's monotonic clock, except that its first read at or after ``lag_at`` answers
    one nanosecond before it: a timer that fires on time still finds the deadline not reached."""

    def __init__(self) -> None:
        self.lag_at: int | None = None
        self.lagged = threading.Event()

    def monotonic_ns(self) -> int:
        now = time.monotonic_ns()
        if self.lag_at is not None and now >= self.lag_at and not self.lagged.is_set():
            self.lagged.set()
            return self.lag_at - 1
        return now


def test_a_timer_that_fires_before_the_clock_reached_the_deadline_re_arms() -> None:
    clock = _LaggingClock()
    ctx = new_run(clock=clock, timeout=0.05)
    clock.lag_at = ctx.deadline.instant_ns

    async def scenario() -> None:
        with pytest.raises(RunTimedOut) as caught:
            async with ctx.scope():
                await _forever()  # only the scope's timer can end this: no boundary is reached
        assert caught.value.termination.at_ns >= ctx.deadline.instant_ns

    _run(scenario)  # a timer that gave up after its early firing would hang until the bound
    assert clock.lagged.is_set(), "the scenario never had the timer read the lagging clock"
    assert state(ctx) is RunState.TIMED_OUT


class _ReportingClock:
    """A :class:`ManualClock` that, once asked to, reports its next read through an asyncio event
    (set on the loop's thread: the reads reported are the scope's timer's)."""

    def __init__(self) -> None:
        self.manual = ManualClock()
        self._next_read: asyncio.Event | None = None

    def next_read(self) -> asyncio.Event:
        self._next_read = asyncio.Event()
        return self._next_read

    def monotonic_ns(self) -> int:
        if self._next_read is not None:
            self._next_read.set()
            self._next_read = None
        return self.manual.monotonic_ns()


def test_a_timer_that_found_the_clock_not_moved_observes_it_once_moved() -> None:
    """Run time is the clock's: the timer fires after 20 ms of loop time, finds the manual clock
    where it was, and waits again; once the clock passes the deadline the block is cancelled."""
    clock = _ReportingClock()
    ctx = new_run(clock=clock, timeout=0.02)

    async def scenario() -> None:
        entered = asyncio.Event()

        async def work() -> None:
            async with ctx.scope():
                entered.set()
                await _forever()

        task = asyncio.create_task(work())
        await _started(task, entered)
        read = clock.next_read()  # the scope's entry reads are over: the next is the timer's
        await asyncio.wait_for(read.wait(), BOUND)
        assert not task.done()
        assert state(ctx) is RunState.RUNNING  # the clock has not moved: nothing to do yet
        clock.manual.advance(0.02)
        with pytest.raises(RunTimedOut):
            await asyncio.wait_for(task, BOUND)  # a timer that did not re-arm: TimeoutError

    _run(scenario)
    assert state(ctx) is RunState.TIMED_OUT


# -- a deadline too far for any timer ------------------------------------------------------------

FAR = [
    pytest.param({"timeout": sys.float_info.max}, id="timeout=float-max"),
    pytest.param({"timeout": 1e300}, id="timeout=1e300"),
    pytest.param({"timeout": 10**400}, id="timeout=10**400"),
    pytest.param({"deadline": Deadline.at_ns(10**400)}, id="at_ns(10**400)"),
]


@pytest.mark.parametrize("far", FAR)
def test_a_scope_with_a_far_deadline_works_like_any_other(far: dict[str, Any]) -> None:
    """The scope's timer waits at most ``Deadline.MAX_WAIT_SECONDS``: nothing overflows."""
    ctx = new_run(clock=SystemClock(), **far)

    async def scenario() -> None:
        async with ctx.scope():
            await asyncio.sleep(0)
        assert state(ctx) is RunState.RUNNING
        threads: list[threading.Thread] = []

        async def cancelled_inside() -> None:
            async with ctx.scope():
                threads.append(_cancel_from_another_thread(ctx, CancellationReason.SHUTDOWN))
                await _forever()

        with pytest.raises(RunCancelled):
            await cancelled_inside()
        threads[0].join(BOUND)

    _run(scenario)
    assert state(ctx) is RunState.CANCELLED


class _FastForwardLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock a test can move ahead: a timer due in a day becomes due now."""

    ahead = 0.0

    def time(self) -> float:
        return super().time() + self.ahead


def test_a_deadline_past_the_capped_wait_is_still_observed_without_a_boundary() -> None:
    """The scope's timer waits a day at most, re-reads the clock, re-arms; at the deadline the
    block is cancelled. The loop's clock jumps a day at a time instead of anyone waiting."""
    clock = _ReportingClock()
    ctx = new_run(clock=clock, deadline=Deadline.at_ns(10**400))
    loop = _FastForwardLoop()

    async def scenario() -> None:
        entered = asyncio.Event()

        async def work() -> None:
            async with ctx.scope():
                entered.set()
                await _forever()

        task = asyncio.create_task(work())
        await _started(task, entered)
        read = clock.next_read()
        loop.ahead += Deadline.MAX_WAIT_SECONDS  # the capped timer is due
        await asyncio.wait_for(read.wait(), BOUND)  # it fired: the deadline is far away yet
        assert not task.done()
        clock.manual.advance_ns(10**400)  # the run's clock reaches the deadline
        loop.ahead += Deadline.MAX_WAIT_SECONDS  # the re-armed timer is due
        with pytest.raises(RunTimedOut):
            await asyncio.wait_for(task, BOUND)

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert state(ctx) is RunState.TIMED_OUT
