"""Worker threads a run can walk away from: where a sync Tool call runs, so the run need not wait.

Theory of operation. A thread cannot be stopped from outside, so a sync Tool call still running
when its run ends (the deadline, a cancel from any thread or process) cannot be cut; it can only
be *abandoned*: whoever waits for it stops waiting, raises the run's ending, and discards
whatever the call returns later. For that the call must not run on the waiter's own thread, nor
on a thread something else waits for: :class:`WorkerThreads` runs each call in a new thread of
its own, which is

- a *daemon* thread: the interpreter does not wait for it at exit, and nobody joins it -- not
  ``asyncio.run``, whose shutdown waits for the loop's default executor (where
  ``asyncio.to_thread`` would have put the call), nor the interpreter's exit, which joins every
  ``ThreadPoolExecutor`` worker and every non-daemon thread (anyio's worker threads included);
- *new* for each call, never pooled: an abandoned call holds no worker a later call would queue
  behind, and when it finishes its thread ends.

One ``WorkerThreads`` serves one attempt of one Tool call (``GovernedTools`` makes one per
attempt): when the run's end interrupts the attempt, :attr:`WorkerThreads.running` says whether a
call was left running -- abandoned, its late result set on a Future nobody reads. :func:`wait`
is the waiting side for a sync caller: it returns the call's result, or raises the run's
``RunTerminated`` as soon as the run ends, whichever comes first.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, final

from ._boundary import Boundary
from ._errors import BudgetExhausted

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._context import RunContext

__all__ = ["WorkerThreads", "wait"]

P = ParamSpec("P")
T = TypeVar("T")


@final
class WorkerThreads(Executor):
    """A ``concurrent.futures.Executor`` running each call in a new daemon thread.

    ``name`` names the threads (``diagnosis-harness {name}``), so an abandoned one is recognisable
    in a thread dump. ``_calls`` holds the Futures of the calls submitted, in order; only
    :meth:`submit` appends (a list's append is atomic), anyone may read their state.
    """

    __slots__ = ("_calls", "_name")

    def __init__(self, name: str) -> None:
        self._name = f"diagnosis-harness {name}"
        self._calls: list[Future[Any]] = []

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return  # cancelled before it started: it never runs
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:  # the Future carries it to whoever still waits
                future.set_exception(error)
            else:
                future.set_result(result)

        self._calls.append(future)
        threading.Thread(target=run, name=self._name, daemon=True).start()
        return future

    @property
    def running(self) -> int:
        """How many submitted calls have not finished (started or not)."""
        return sum(1 for call in self._calls if not call.done())

    def __repr__(self) -> str:
        return f"WorkerThreads(name={self._name!r}, running={self.running})"


def wait(ctx: RunContext, future: Future[T]) -> T:
    """Block this thread until ``future`` is done or ``ctx``'s run ends, whichever is first.

    Returns the call's result (or raises its exception); raises the run's ``RunTerminated`` --
    the deadline first seen at the TOOL boundary -- when the run's deadline passes or it is
    cancelled first, however long the call still runs. An ending by budget exhaustion (another
    call's refusal) does not stop the wait: the call was granted, it may finish, until the
    deadline. Never waits past the deadline on the run's clock, nor past a cancellation.
    """
    done = threading.Event()
    woken = threading.Event()  # done, or the run's cancellation signalled

    def finished(_future: Future[T]) -> None:
        done.set()
        woken.set()

    future.add_done_callback(finished)
    registration = ctx.cancellation.register(lambda _reason: woken.set())
    try:
        while not future.done():
            # Capped at Deadline.MAX_WAIT_SECONDS; a wait that ends early re-checks the clock.
            left = ctx.deadline.remaining_seconds(ctx.clock)
            try:
                ctx.check(Boundary.TOOL)  # raises once the run is over or past its deadline
            except BudgetExhausted:
                if left == 0.0:
                    raise
                done.wait(left)  # granted work outlives a refusal elsewhere, to the deadline
                continue
            woken.wait(left)
    finally:
        registration.unregister()
    return future.result()
