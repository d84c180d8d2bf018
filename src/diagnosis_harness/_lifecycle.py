"""The run's lifecycle: RUNNING, then only the first terminal outcome, kept for good.

The transitions are the generated lifecycle table (``model/lifecycle.toml``); this module adds the
data each terminal outcome carries (:class:`RunTermination`: state, reason, clock timestamp) and
links the outcome to cancellation. Both live under one lock, the run's: the winner of the terminal
race is also the one that signals cancellation, so every resource callback runs exactly once
whichever way the run ends -- ``SUCCESS`` and ``FAILED`` signal ``RUN_FINISHED``, like Go's
``defer cancel()``. Losers get ``FinishResult(changed=False)`` with the original termination.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, final

from ._cancellation import CancellationReason
from ._generated.tables import LIFECYCLE, LifecycleEvent, RunState
from ._machine import TableMachine
from ._validate import non_blank_str

if TYPE_CHECKING:
    from ._cancellation import Cancellation, CancellationCallback
    from ._clock import Clock

__all__ = ["FinishResult", "Lifecycle", "RunTermination"]


@final
@dataclass(frozen=True, slots=True)
class RunTermination:
    """The run's one terminal outcome: never replaced once recorded."""

    state: RunState
    reason: str
    at_ns: int  # the run clock's monotonic_ns() when the outcome was recorded


@final
@dataclass(frozen=True, slots=True)
class FinishResult:
    """What a finish attempt did: ``changed`` only for the attempt that recorded the outcome."""

    changed: bool
    termination: RunTermination


# The cancellation reason each way of ending signals, so that resources are released once.
_SIGNAL_FOR = MappingProxyType(
    {
        LifecycleEvent.SUCCEED: CancellationReason.RUN_FINISHED,
        LifecycleEvent.FAIL: CancellationReason.RUN_FINISHED,
        LifecycleEvent.TIME_OUT: CancellationReason.DEADLINE_EXCEEDED,
        LifecycleEvent.EXHAUST_BUDGET: CancellationReason.BUDGET_EXHAUSTED,
    }
)
# The lifecycle event an explicit cancel() with each reason records.
_EVENT_FOR_REASON = MappingProxyType(
    {
        reason: {
            CancellationReason.DEADLINE_EXCEEDED: LifecycleEvent.TIME_OUT,
            CancellationReason.BUDGET_EXHAUSTED: LifecycleEvent.EXHAUST_BUDGET,
        }.get(reason, LifecycleEvent.CANCEL)
        for reason in CancellationReason
    }
)

_Ending = tuple[FinishResult, "list[CancellationCallback] | None"]


@final
class Lifecycle:
    """RUNNING until the first of SUCCESS, FAILED, CANCELLED, TIMED_OUT, BUDGET_EXHAUSTED."""

    __slots__ = ("__weakref__", "_cancellation", "_clock", "_lock", "_machine", "_termination")

    def __init__(self, *, clock: Clock, cancellation: Cancellation) -> None:
        self._clock = clock
        self._cancellation = cancellation
        # The cancellation's lock is the run's lock: it protects _machine, _termination and the
        # cancellation's reason, so one decision picks the terminal outcome and the first reason.
        self._lock = cancellation._lock
        self._machine = TableMachine(LIFECYCLE, lock=self._lock)
        self._termination: RunTermination | None = None
        cancellation._on_cancel = weakref.WeakMethod(self._on_cancel_locked)

    @property
    def state(self) -> RunState:
        return self._machine.state

    @property
    def termination(self) -> RunTermination | None:
        """The terminal outcome, or ``None`` while RUNNING."""
        return self._termination

    @property
    def is_terminal(self) -> bool:
        return self._termination is not None

    def succeed(self, reason: str = "succeeded") -> FinishResult:
        """Record SUCCESS unless the run already has a terminal outcome."""
        return self._end(LifecycleEvent.SUCCEED, non_blank_str("reason", reason))

    def fail(self, reason: str) -> FinishResult:
        """Record FAILED with ``reason`` unless the run already has a terminal outcome."""
        return self._end(LifecycleEvent.FAIL, non_blank_str("reason", reason))

    def _end(self, event: LifecycleEvent, reason: str, now_ns: int | None = None) -> FinishResult:
        with self._lock:
            result, pending = self._end_locked(event, reason, now_ns)
        if pending:
            self._cancellation._deliver(pending, _SIGNAL_FOR[event])
        return result

    def _end_locked(self, event: LifecycleEvent, reason: str, now_ns: int | None = None) -> _Ending:
        """Fire ``event``; the caller holds the run lock and delivers the returned callbacks."""
        row = self._machine.step_locked(event)
        if row is None:
            termination = self._termination
            assert termination is not None  # terminal states are reached only through here
            return FinishResult(changed=False, termination=termination), None
        at_ns = self._clock.monotonic_ns() if now_ns is None else now_ns
        termination = RunTermination(row.target, reason, at_ns)
        self._termination = termination
        signal = _SIGNAL_FOR.get(event)
        pending = None if signal is None else self._cancellation._signal_locked(signal)
        return FinishResult(changed=True, termination=termination), pending

    def _on_cancel_locked(self, reason: CancellationReason) -> None:
        """The winning cancel() records its outcome; absorbed if the run already ended."""
        self._end_locked(_EVENT_FOR_REASON[reason], f"cancelled: {reason.name}")

    def __repr__(self) -> str:
        return f"Lifecycle(state={self.state.name}, termination={self._termination!r})"
