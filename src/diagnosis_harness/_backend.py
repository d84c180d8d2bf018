"""The seam between a run's handles and the one owner of its mutable state.

``RunContext``, ``Lifecycle``, ``Cancellation`` and ``Budget`` hold no run state of their own:
each forwards to a :class:`RunBackend`, which owns the lifecycle's state and termination, the
cancellation reason and callbacks, and the budget's state and counters, and decides every change
to them atomically. :class:`~._local_run.LocalRun` keeps them in this process under one lock;
another implementation may keep them in another process (a server-side script per operation),
and fits without a change to the handles.

The contract every implementation keeps:

* **One decision per operation.** A reservation checks that the run is live, that ``now_ns`` is
  before the deadline and that the limits allow it, and reserves, in one atomic step: no work is
  granted after the run ended, and the call past a limit reserves nothing.
* **The first ending wins.** Once :attr:`termination` is set it never changes; every later
  ending is absorbed. The ending and the cancellation signal it implies are one decision.
* **Timestamps are the boundary's.** An ending a boundary caused is stamped with the ``now_ns``
  that boundary read, not with a second reading of the clock.
* **Callbacks run outside the decision**, in registration order, each exactly once; the caller
  that won the signal has run them all when its call returns.
* **Refusals raise** the :class:`~diagnosis_harness.RunTerminated` subclass that
  :func:`~._endings.error_for` gives for the run's termination; arguments were validated by the
  handles before they reach here.
* **A tree decides as one** (:meth:`RunBackend.create_child`). A child's reservation is granted
  only if it and every ancestor grant it, in one decision, and then counts in each; the first of
  them (nearest the child) to refuse ends, with every run below it on the path, on its limit.
  Usage and settles are recorded at every level. Every ending ends each live descendant
  ``CANCELLED`` (signalled ``PARENT_ENDED``) in the same decision, so an ended run has no live
  descendant; callbacks run descendants first.

A :class:`RunStore` makes owners that live outside this process (``RedisRunStore`` of the
``redis`` extra): ``RunContext.create(..., store=...)`` publishes a new run in it and
``RunContext.attach(...)`` opens one another process published. An owner from a store keeps the
contract above across every process attached to the run, and adds one rule: **it fails closed**.
When the store cannot be reached or does not answer in time the operation raises
:class:`~diagnosis_harness.RunStoreUnavailable`, no work is granted and nothing is recorded in
this process as if it had been.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._boundary import Boundary
    from ._cancellation import CallbackErrorHandler, CancellationCallback
    from ._clock import Clock
    from ._endings import CancellationReason, FinishResult, RunTermination
    from ._generated.tables import BudgetState, LifecycleEvent, RunState
    from ._limits import BudgetDimension, BudgetLimits, BudgetUsage

__all__ = ["CancellationOwner", "RunBackend", "RunStore"]


class CancellationOwner(Protocol):
    """What a :class:`~diagnosis_harness.Cancellation` handle needs of its owner."""

    @property
    def reason(self) -> CancellationReason | None:
        """The first reason, or ``None`` while not cancelled."""

    def cancel(self, reason: CancellationReason) -> bool:
        """Signal ``reason`` if none was; True only for the winner, after its callbacks ran."""

    def register(self, callback: CancellationCallback) -> int | None:
        """Keep ``callback`` and return its key; if already cancelled, run it now, return None."""

    def unregister(self, key: int) -> bool:
        """Remove a kept callback; True only if it was still waiting."""


class RunBackend(CancellationOwner, Protocol):
    """The one owner of a run's mutable state; see the module docstring for the contract."""

    @property
    def run_id(self) -> str: ...

    @property
    def parent_run_id(self) -> str | None:
        """The run this one is a child of, ``None`` for a root."""

    @property
    def priced(self) -> bool:
        """This run or one of its ancestors has a money limit: every call must hold a cost."""

    @property
    def store(self) -> RunStore | None:
        """The store the run lives in (its tree's), ``None`` for a run in this process."""

    @property
    def limits(self) -> BudgetLimits: ...

    @property
    def deadline_ns(self) -> int:
        """The deadline on the run clock's timeline: live while ``now_ns < deadline_ns``."""

    @property
    def state(self) -> RunState: ...

    @property
    def termination(self) -> RunTermination | None: ...

    @property
    def budget_state(self) -> BudgetState: ...

    @property
    def exhausted(self) -> BudgetDimension | None:
        """The limit that exhausted the budget, or ``None`` while ACTIVE."""

    def check(self, boundary: Boundary, now_ns: int) -> None:
        """Pass while live; else end the run ``TIMED_OUT`` if it is live and past the deadline,
        and raise the run's ``RunTerminated``."""

    def reserve_model_call(self, now_ns: int, hold: int = 0, least: int | None = None) -> int:
        """One Model call and its money hold (picodollars, rounded up), in one decision; return
        the hold granted.

        ``least`` ``None``: all or nothing -- ``hold`` whole, refused (``COST``) when it would
        take settled + held past the money limit. ``least`` (<= ``hold``): as much of ``hold`` as
        the money left pays for, refused only when not even ``least`` fits; the money left is
        read and held in the same decision, so a hold from elsewhere cannot land in between.
        Without a money limit ``hold`` is granted whole. Called without ``hold`` when the caller
        gave no ``max_cost``."""

    def reserve_tool_call(self, tool: str, now_ns: int, hold: int = 0) -> None:
        """One call of ``tool`` and its money ``hold``: the total, the Tool's own counter and the
        hold move together or not at all."""

    def settle(
        self,
        boundary: Boundary,
        hold: int,
        cost: int,
        *,
        input_tokens: int,
        output_tokens: int,
        now_ns: int,
    ) -> None:
        """Release a granted ``hold`` and record the actual ``cost`` (picodollars, rounded up) and
        tokens, as reported, in one decision, even past a limit or after the run ended; past a
        limit the budget is EXHAUSTED (``boundary`` is the call's). Never raises for a limit."""

    def reserve_bytes(self, n: int, now_ns: int) -> None: ...

    def record_token_usage(self, input_tokens: int, output_tokens: int, now_ns: int) -> None:
        """Record the usage as reported, even past a limit (which then ends the run)."""

    def finish(self, event: LifecycleEvent, reason: str) -> FinishResult:
        """Record ``SUCCEED`` or ``FAIL`` unless the run has ended; stamped by the run clock."""

    def snapshot(self) -> BudgetUsage:
        """Every counter, and every descendant's (``children``), read in one decision."""

    def create_child(
        self,
        *,
        run_id: str,
        limits: BudgetLimits,
        deadline_ns: int,
        on_callback_error: CallbackErrorHandler,
    ) -> RunBackend:
        """Make a child of this live run, in its tree (its store), with its own ``limits`` and
        the earlier of ``deadline_ns`` and this run's deadline. Refuse, changing nothing: with
        this run's ``RunTerminated`` once it has ended; a ``run_id`` the tree holds already
        (ValueError), or that the store holds (``RunStoreConflict``)."""


class RunStore(Protocol):
    """Where runs shared by several processes live; makes their owners. See the module docstring.

    Arguments reach a store validated by ``RunContext``, but for what only the store knows is
    unsafe (a run ID that would make an unsafe key, say), which it refuses before it writes.
    """

    def create_run(
        self,
        *,
        session_id: str,
        run_id: str,
        limits: BudgetLimits,
        deadline_ns: int,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
    ) -> RunBackend:
        """Publish a new run and return its owner in this process; refuse an existing run ID.

        ``deadline_ns`` is on ``clock``'s timeline; the store keeps it as one instant every
        process maps onto its own clock.
        """

    def attach_run(
        self,
        *,
        session_id: str,
        run_id: str,
        limits: BudgetLimits | None,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
    ) -> RunBackend:
        """The owner, in this process, of a run published before; refuse an unknown run ID, a
        session ID that differs from the stored one, or ``limits`` (when not ``None``) that
        differ from the stored ones -- a refusal leaves nothing behind. Its ``limits`` are the
        stored ones and its ``deadline_ns`` the stored instant on ``clock``'s timeline."""
