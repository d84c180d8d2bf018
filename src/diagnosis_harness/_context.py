"""``RunContext``: the one explicit object every Model, Tool, retry, capacity and guard boundary
gets.

Theory of operation. The context is a frozen, slotted dataclass of handles; it is passed as an
argument, never looked up (no thread-local storage, no context variables), so a Fake Tool on another
thread or in another task sees the very same objects. The mutable run state -- the lifecycle, the
cancellation reason and callbacks, the budget counters -- lives behind those handles under one
lock, the run's lock. One lock, because "check the deadline and the terminal outcome, then
reserve" must be one decision: a reservation is granted only while the run is live, and no
reservation is granted after the run has ended. Callbacks always run after that lock is released.

``check(boundary)`` is the gate. Its fast path reads the clock and one attribute and takes no
lock; only a run that is over, or a deadline that has passed, goes to the locked slow path, which
records ``TIMED_OUT`` (signalling ``DEADLINE_EXCEEDED``) the first time and raises the
``RunTerminated`` subclass of the run's one termination every time.
"""

from __future__ import annotations

import threading
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, NoReturn, final

from ._boundary import Boundary
from ._budget import Budget, BudgetLimits
from ._cancellation import Cancellation, CancellationReason
from ._clock import Clock, Deadline, SystemClock
from ._errors import (
    BudgetExhausted,
    InvalidRunIdentity,
    RunCancelled,
    RunFinished,
    RunTerminated,
    RunTimedOut,
)
from ._generated.tables import LifecycleEvent, RunState
from ._lifecycle import Lifecycle
from ._retry_policy import RetryPolicies
from ._scope import RunScope
from ._validate import non_blank_str, non_negative_int, positive_int, seconds

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._cancellation import CallbackErrorHandler, CancellationCallback
    from ._lifecycle import RunTermination

__all__ = ["RunContext"]

# What a run ending in each state signals; the callbacks are delivered after the lock is released.
_SIGNAL = {
    RunState.TIMED_OUT: CancellationReason.DEADLINE_EXCEEDED,
    RunState.BUDGET_EXHAUSTED: CancellationReason.BUDGET_EXHAUSTED,
}

_CREATE_KEY = object()  # only RunContext.create holds it: the parts must belong to one run


def _identity(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidRunIdentity(f"{name} must be a non-blank str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidRunIdentity(f"{name} must not be blank or whitespace, got {value!r}")
    return value


@final
@dataclass(frozen=True, slots=True, eq=False)
class RunContext:
    """Everything a diagnosis run's boundaries need, passed explicitly; build it with ``create``."""

    session_id: str
    run_id: str
    deadline: Deadline
    clock: Clock
    cancellation: Cancellation
    budget: Budget
    retry_policies: RetryPolicies
    lifecycle: Lifecycle
    _key: InitVar[object] = None
    # Cached for the gate's fast path; derived from the fields above, never reassigned.
    _now: Callable[[], int] = field(init=False, repr=False)
    _deadline_ns: int = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False)
    # The budget's granted paths, bound once: an attribute walk less on every reservation.
    _grant_model_call: Callable[[int, int, Lifecycle], bool] = field(init=False, repr=False)
    _grant_tool_call: Callable[[str, int, int, Lifecycle], bool] = field(init=False, repr=False)

    def __post_init__(self, _key: object) -> None:
        if _key is not _CREATE_KEY:
            raise TypeError("build a RunContext with RunContext.create(...)")
        object.__setattr__(self, "_now", self.clock.monotonic_ns)
        object.__setattr__(self, "_deadline_ns", self.deadline.instant_ns)
        object.__setattr__(self, "_lock", self.lifecycle._lock)
        object.__setattr__(self, "_grant_model_call", self.budget._grant_model_call)
        object.__setattr__(self, "_grant_tool_call", self.budget._grant_tool_call)

    @classmethod
    def create(
        cls,
        *,
        session_id: str,
        run_id: str,
        limits: BudgetLimits,
        deadline: Deadline | None = None,
        timeout: float | None = None,
        clock: Clock | None = None,
        retry_policies: RetryPolicies | None = None,
        on_callback_error: CallbackErrorHandler | None = None,
        _lock: threading.Lock | None = None,
    ) -> RunContext:
        """Validate everything, then build one run's context.

        Exactly one of ``deadline`` and ``timeout`` (seconds from now on ``clock``) is required.
        Identity is checked first: a bad ID raises :class:`InvalidRunIdentity` before any budget,
        cancellation or lifecycle object exists. ``on_callback_error(error, callback)`` receives
        what a cancellation callback raised (default: logged).
        """
        session_id = _identity("session_id", session_id)
        run_id = _identity("run_id", run_id)
        if type(limits) is not BudgetLimits:
            raise TypeError(f"limits must be BudgetLimits, got {limits!r}")
        if clock is None:
            clock = SystemClock()
        elif not callable(getattr(clock, "monotonic_ns", None)):
            raise TypeError(f"clock must have monotonic_ns() -> int, got {clock!r}")
        if (deadline is None) == (timeout is None):
            raise ValueError("give exactly one of deadline and timeout")
        if deadline is None:
            deadline = Deadline.after(clock, seconds("timeout", timeout))
        elif type(deadline) is not Deadline:
            raise TypeError(f"deadline must be a Deadline, got {deadline!r}")
        if retry_policies is None:
            retry_policies = RetryPolicies.defaults()
        elif type(retry_policies) is not RetryPolicies:
            raise TypeError(f"retry_policies must be RetryPolicies, got {retry_policies!r}")
        # One lock for the run's state; `_lock` lets the model checks' scheduler supply its own.
        lock = threading.Lock() if _lock is None else _lock
        cancellation = Cancellation(on_callback_error=on_callback_error, _lock=lock)
        lifecycle = Lifecycle(clock=clock, cancellation=cancellation)
        budget = Budget(limits, lock=lifecycle._lock)
        return cls(
            session_id,
            run_id,
            deadline,
            clock,
            cancellation,
            budget,
            retry_policies,
            lifecycle,
            _CREATE_KEY,
        )

    # -- the gate ---------------------------------------------------------------------------------

    def check(self, boundary: Boundary) -> None:
        """Pass if the run is live and before its deadline; else raise its ``RunTerminated``."""
        if boundary.__class__ is not Boundary:
            raise TypeError(f"boundary must be a Boundary, got {boundary!r}")
        now = self._now()
        if self.lifecycle._termination is None and now < self._deadline_ns:
            return
        self._reject(boundary, now)

    def reserve_model_call(self) -> None:
        """Check the MODEL boundary and reserve one Model call, atomically."""
        now = self._now()
        if self._grant_model_call(now, self._deadline_ns, self.lifecycle):
            return
        with self._lock:  # the full path: the run may be over or a limit reached
            if self.lifecycle._termination is None and now < self._deadline_ns:
                refusal = self.budget._reserve_model_call_locked()
                if refusal is None:
                    return
            else:
                refusal = None
            # The refusal and the outcome it causes are one decision, under the same lock.
            ended = self._end_locked(Boundary.MODEL, now, refusal)
        self._raise(Boundary.MODEL, *ended)

    def reserve_tool_call(self, tool: str) -> None:
        """Check the TOOL boundary and reserve one call of ``tool`` (total and per Tool)."""
        if tool.__class__ is not str:
            non_blank_str("tool", tool)  # raises the TypeError that names `tool`
        now = self._now()
        if self._grant_tool_call(tool, now, self._deadline_ns, self.lifecycle):
            return
        with self._lock:  # the full path: a new Tool, the run over or a limit reached
            if self.lifecycle._termination is None and now < self._deadline_ns:
                # The budget checks a Tool's name the first time it sees it, before any write:
                # that keeps a strip() off every later call of the same Tool.
                refusal = self.budget._reserve_tool_call_locked(tool)
                if refusal is None:
                    return
            else:
                non_blank_str("tool", tool)  # bad input is reported before the run's end
                refusal = None
            ended = self._end_locked(Boundary.TOOL, now, refusal)
        self._raise(Boundary.TOOL, *ended)

    def reserve_bytes(self, n: int) -> None:
        """Check the CAPACITY boundary and reserve ``n`` (> 0) bytes of the run's byte budget."""
        positive_int("n", n)
        now = self._now()
        with self._lock:
            if self.lifecycle._termination is None and now < self._deadline_ns:
                refusal = self.budget._reserve_bytes_locked(n)
                if refusal is None:
                    return
            else:
                refusal = None
            ended = self._end_locked(Boundary.CAPACITY, now, refusal)
        self._raise(Boundary.CAPACITY, *ended)

    def record_token_usage(self, *, input_tokens: int, output_tokens: int) -> None:
        """Record a completed Model response's actual usage, as reported, even past a limit.

        Past a limit the run becomes ``BUDGET_EXHAUSTED`` (unless already over) and the next
        controlled operation is rejected; this call itself does not raise for it.
        """
        non_negative_int("input_tokens", input_tokens)
        non_negative_int("output_tokens", output_tokens)
        now = self._now()
        with self._lock:
            refusal = self.budget._record_token_usage_locked(input_tokens, output_tokens)
            pending = None
            if refusal is not None:
                _, pending = self.lifecycle._end_locked(LifecycleEvent.EXHAUST_BUDGET, refusal, now)
        if pending:
            self.cancellation._deliver(pending, CancellationReason.BUDGET_EXHAUSTED)

    def scope(self) -> RunScope:
        """``async with ctx.scope():`` -- the run's cancellation or deadline cancels this task."""
        return RunScope(self)

    # -- slow paths -------------------------------------------------------------------------------

    def _reject(self, boundary: Boundary, now: int) -> NoReturn:
        """The gate's slow path: record TIMED_OUT if first to see the deadline, then raise."""
        with self._lock:
            ended = self._end_locked(boundary, now, None)
        self._raise(boundary, *ended)

    def _raise(
        self,
        boundary: Boundary,
        termination: RunTermination,
        pending: list[CancellationCallback] | None,
    ) -> NoReturn:
        """Outside the lock: deliver the callbacks an ending took, then raise the run's error."""
        if pending:
            self.cancellation._deliver(pending, _SIGNAL[termination.state])
        raise self._error(termination, boundary)

    def _end_locked(
        self, boundary: Boundary, now: int, refusal: str | None
    ) -> tuple[RunTermination, list[CancellationCallback] | None]:
        """End a live run for the budget ``refusal``, else for the deadline; the run's outcome."""
        lifecycle = self.lifecycle
        pending = None
        if lifecycle._termination is None:
            if refusal is not None:
                _, pending = lifecycle._end_locked(LifecycleEvent.EXHAUST_BUDGET, refusal, now)
            elif now >= self._deadline_ns:
                reason = (
                    f"deadline exceeded: now {now} ns >= deadline {self._deadline_ns} ns, "
                    f"first seen at the {boundary.name} boundary"
                )
                _, pending = lifecycle._end_locked(LifecycleEvent.TIME_OUT, reason, now)
        termination = lifecycle._termination
        assert termination is not None  # only an ended run or a passed deadline comes here
        return termination, pending

    def _error(self, termination: RunTermination, boundary: Boundary | None) -> RunTerminated:
        state = termination.state
        if state is RunState.TIMED_OUT:
            return RunTimedOut(termination, boundary)
        if state is RunState.CANCELLED:
            return RunCancelled(termination, boundary)
        if state is RunState.BUDGET_EXHAUSTED:
            return BudgetExhausted(termination, boundary, dimension=self.budget.exhausted)
        return RunFinished(termination, boundary)

    def __repr__(self) -> str:
        return (
            f"RunContext(session_id={self.session_id!r}, run_id={self.run_id!r}, "
            f"state={self.lifecycle.state.name})"
        )
