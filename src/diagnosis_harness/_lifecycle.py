"""``ctx.lifecycle``: RUNNING, then only the first terminal outcome, kept for good.

A view over the run's state (:mod:`._local_run`): the transitions are the generated lifecycle table
(``model/lifecycle.toml``), and what each ending carries and signals is :data:`._endings.ENDINGS`.
``SUCCESS`` and ``FAILED`` signal ``RUN_FINISHED``, like Go's ``defer cancel()``, so every resource
callback runs exactly once whichever way the run ends. Later attempts get
``FinishResult(changed=False)`` with the original termination.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ._generated.tables import LifecycleEvent, RunState
from ._validate import non_blank_str

if TYPE_CHECKING:
    from ._backend import RunBackend
    from ._endings import FinishResult, RunTermination

__all__ = ["Lifecycle"]


@final
class Lifecycle:
    """RUNNING until the first of SUCCESS, FAILED, CANCELLED, TIMED_OUT, BUDGET_EXHAUSTED."""

    __slots__ = ("_owner",)

    def __init__(self, run: RunBackend) -> None:
        self._owner = run

    @property
    def state(self) -> RunState:
        return self._owner.state

    @property
    def termination(self) -> RunTermination | None:
        """The terminal outcome, or ``None`` while RUNNING."""
        return self._owner.termination

    @property
    def is_terminal(self) -> bool:
        return self._owner.termination is not None

    def succeed(self, reason: str = "succeeded") -> FinishResult:
        """Record SUCCESS unless the run already has a terminal outcome."""
        return self._owner.finish(LifecycleEvent.SUCCEED, non_blank_str("reason", reason))

    def fail(self, reason: str) -> FinishResult:
        """Record FAILED with ``reason`` unless the run already has a terminal outcome."""
        return self._owner.finish(LifecycleEvent.FAIL, non_blank_str("reason", reason))

    def __repr__(self) -> str:
        return f"Lifecycle(state={self.state.name}, termination={self.termination!r})"
