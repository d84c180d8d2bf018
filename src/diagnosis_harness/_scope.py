"""``async with ctx.scope():`` -- bind a run to the asyncio task running the block.

The way ``asyncio.timeout`` turns its deadline into the cancellation of the current task, a scope
turns the run's end -- a cancellation from any thread, or its deadline even when no boundary is
reached -- into the cancellation of the task, and the block then raises the run's
``RunCancelled`` / ``RunTimedOut`` (the ``RunTerminated`` of its termination) from the task's
``CancelledError``. A cancellation of the task from anywhere else passes through untouched.

``ctx.scope(cut_on_budget=False)`` is for work the run already granted (a Tool call whose
reservation passed): an ending by budget exhaustion -- another call's refused reservation -- does
not cut it, so a call that fit is not left half done; the deadline and a cancellation still do.

The deadline is watched with a loop timer that re-reads the run's clock when it fires, so the
clock stays the only authority: a timer that fires before the clock has reached the deadline
re-arms for what the clock says is left -- with a :class:`ManualClock` time has not moved, and
the deadline is observed at the next boundary, ``ctx.check`` or firing after the clock passed
it. A timer never waits longer than ``Deadline.MAX_WAIT_SECONDS``: a far deadline
(``timeout=1e300``, ``Deadline.at_ns(10**400)``) re-arms, capped, until it is reached, instead
of overflowing the loop's timer.

The timer is armed, and the cancellation callback registered, once the block first yields to
the loop, not when it is entered: a task is cancelled only where it suspends, so a block that
runs to its end without yielding (an async Tool that returns at once) cannot be cut, and it has
exited -- that start cancelled -- before the loop would run it. So the common quick block costs
the loop one ``call_soon`` handle, not a timer in its heap and a callback on the run. The start
reads the run's clock and cancellation then, for the same deadline: a deadline that passed or a
cancellation that came in between is acted on at once, in the loop iteration where a timer or a
callback set at entry would have acted on it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, final

from ._boundary import Boundary
from ._endings import CancellationReason, error_for
from ._errors import BudgetExhausted, RunTerminated

if TYPE_CHECKING:
    import asyncio
    from types import TracebackType

    from ._cancellation import Registration
    from ._context import RunContext

__all__ = ["RunScope"]

_MIN_REARM_S = 0.001  # never spin: re-arm at least a millisecond later


@final
class RunScope:
    """The async context manager ``ctx.scope()`` returns; enter it once.

    Its fields are the scope's own, touched only on the loop's thread (the cancellation callback
    from another thread hands over with ``call_soon_threadsafe``): ``_task`` is the bound task
    until the block exits, then ``None``, so a late request cancels nothing; ``_cancel_requested``
    is set once, by the one request that cancelled the task; ``_timer`` is the one pending loop
    handle: the watch's start (a ``call_soon`` made at entry, run once the block has yielded,
    which registers ``_registration`` and arms the timer), then the armed deadline timer,
    replaced each time it re-arms.
    """

    __slots__ = (
        "_boundary",
        "_cancel_requested",
        "_ctx",
        "_cut_on_budget",
        "_entered",
        "_loop",
        "_registration",
        "_task",
        "_timer",
    )

    def __init__(
        self, ctx: RunContext, boundary: Boundary = Boundary.GUARD, *, cut_on_budget: bool = True
    ) -> None:
        self._ctx = ctx
        self._boundary = boundary  # the block's kind of work: its gate, and the deadline's
        self._cut_on_budget = cut_on_budget
        self._entered = False
        self._cancel_requested = False
        self._task: asyncio.Task[object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._registration: Registration | None = None
        self._timer: asyncio.Handle | None = None

    async def __aenter__(self) -> RunScope:
        # Imported here, not at the top: a scope exists only under asyncio, and a sync user of
        # the package never imports asyncio (it is half the package's import time).
        import asyncio  # noqa: PLC0415 - lazy: see above

        if self._entered:
            raise RuntimeError("a RunScope can be entered only once; call ctx.scope() again")
        self._entered = True
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("ctx.scope() must be used inside an asyncio task")
        self._task = task
        self._loop = asyncio.get_running_loop()
        # Raises at once if the run is already over: the block never starts.
        try:
            self._ctx.check(self._boundary)
        except RunTerminated as ended:
            if self._cuts(ended):
                raise
        # The cancellation callback and the deadline timer wait for the block's first yield (see
        # the module's docstring): until then nothing can cut it.
        self._timer = self._loop.call_soon(self._on_yield)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._registration is not None:
            self._registration.unregister()
        if self._timer is not None:
            self._timer.cancel()
        import asyncio  # noqa: PLC0415 - lazy (see __aenter__); imported by then, a dict lookup

        task, self._task = self._task, None  # a _cancel_task still queued must do nothing now
        if not self._cancel_requested or exc_type is not asyncio.CancelledError:
            return
        assert task is not None
        if sys.version_info >= (3, 11) and task.uncancel() > 0:
            return  # someone else cancelled the task too: theirs passes through
        termination = self._ctx.lifecycle.termination
        assert termination is not None  # we requested the cancellation only for an ended run
        raise error_for(termination, None, self._ctx.budget.exhausted) from exc

    # -- callbacks, on the loop's thread or any other --------------------------------------------

    def _cuts(self, ended: RunTerminated) -> bool:
        """Whether the run's ``ended`` cancels the block (see ``cut_on_budget``)."""
        return (
            self._cut_on_budget
            or not isinstance(ended, BudgetExhausted)
            or self._ctx.deadline.expired(self._ctx.clock)
        )

    def _cut_by(self, reason: CancellationReason) -> bool:
        """Whether a cancellation for ``reason`` cancels the block (see ``cut_on_budget``)."""
        # Granted work outlives a refusal elsewhere; the deadline timer still runs.
        return reason is not CancellationReason.BUDGET_EXHAUSTED or self._cut_on_budget

    def _on_cancel(self, reason: CancellationReason) -> None:
        if not self._cut_by(reason):
            return
        loop = self._loop
        assert loop is not None
        # A closed loop raises RuntimeError: there is no task left to cancel.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._cancel_task)

    def _cancel_task(self) -> None:
        task = self._task
        if task is None or task.done() or self._cancel_requested:
            return
        self._cancel_requested = True
        task.cancel("diagnosis run ended")

    def _on_yield(self) -> None:
        """The block has yielded to the loop (it would have exited, and cancelled this, if not):
        register for the run's cancellation and arm the deadline timer. A cancellation or a
        deadline that came in between is acted on at once, in the loop iteration where a
        registration or a timer made at entry would have acted on it."""
        ctx = self._ctx
        self._registration = ctx.cancellation.register(self._on_cancel)
        reason = ctx.cancellation.reason
        if reason is not None and self._cut_by(reason):
            self._cancel_task()  # the callback's request, queued, will find it done
        elif ctx.deadline.remaining_seconds(ctx.clock) <= 0:
            self._on_timer()
        else:
            self._arm()

    def _arm(self) -> None:
        loop = self._loop
        assert loop is not None
        # Capped at Deadline.MAX_WAIT_SECONDS: a delay past the platform's range would overflow.
        delay = max(self._ctx.deadline.remaining_seconds(self._ctx.clock), _MIN_REARM_S)
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        try:
            self._ctx.check(self._boundary)  # records TIMED_OUT if the clock says so
        except RunTerminated as ended:
            if self._cuts(ended):
                self._cancel_task()  # the cancellation callback may ask too: twice is a no-op
                return
        # Early: the wait was capped, or the run's clock is not the loop's (a ManualClock, a
        # clock behind the loop's). Only the run's clock says when the deadline is.
        self._arm()
