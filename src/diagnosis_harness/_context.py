"""``RunContext``: the one explicit object every Model, Tool, retry, capacity and guard boundary
gets.

Theory of operation. The context is a frozen, slotted dataclass of handles; it is passed as an
argument, never looked up (no thread-local storage, no context variables), so a Fake Tool on another
thread or in another task sees the very same objects. The handles -- ``lifecycle``,
``cancellation``, ``budget`` -- and the context's own gate and reservations are views over one
owner of the run's mutable state (:class:`~._backend.RunBackend`, in this process a
:class:`~._local_run.LocalRun`), which makes "check the deadline and the terminal outcome, then
reserve" one decision. The context reads the clock; the owner decides with that reading, so an
ending a boundary causes is stamped with the instant the boundary observed.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any, final

from ._boundary import Boundary
from ._budget import Budget, granted_hold, money_units
from ._cancellation import Cancellation, checked_error_handler
from ._clock import Clock, Deadline, SystemClock
from ._errors import InvalidRunIdentity, InvalidRunIdentityType
from ._lifecycle import Lifecycle
from ._limits import BudgetLimits
from ._local_run import LocalRun
from ._retry_policy import RetryPolicies
from ._scope import RunScope
from ._validate import non_blank_str, non_negative_int, positive_int, seconds

if TYPE_CHECKING:
    import threading
    from decimal import Decimal

    from ._backend import RunBackend, RunStore
    from ._budget import CallHold
    from ._cancellation import CallbackErrorHandler

__all__ = ["RunContext"]

_CREATE_KEY = object()  # only RunContext.create holds it: the parts must belong to one run
_MAX_COST_REQUIRED = (
    "{call} needs max_cost=Decimal(...): the run has a money limit (BudgetLimits.cost), so each "
    "call must hold its worst case before it is made"
)
_NOT_BUILT: Any = None  # the default that lets a direct call reach the TypeError that says so


def _checked_clock(clock: Clock | None) -> Clock:
    if clock is None:
        return SystemClock()
    if not callable(getattr(clock, "monotonic_ns", None)):
        raise TypeError(f"clock must have monotonic_ns() -> int, got {clock!r}")
    return clock


def _checked_store(store: RunStore) -> RunStore:
    for method in ("create_run", "attach_run"):
        if not callable(getattr(store, method, None)):
            raise TypeError(
                f"store must be a run store (RedisRunStore, say) with {method}(), got {store!r}"
            )
    return store


def _identity(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidRunIdentityType(f"{name} must be a non-blank str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidRunIdentity(f"{name} must not be blank or whitespace, got {value!r}")
    return value


@final
@dataclass(frozen=True, slots=True, eq=False)
class RunContext:
    """Everything a diagnosis run's boundaries need, passed explicitly; build it with ``create``.

    Every field is fixed for the run. ``lifecycle``, ``cancellation`` and ``budget`` are views of
    the run's one state owner, the same one the context's own methods decide with.
    ``parent_run_id`` names the run this one is a child of (:meth:`child`), ``None`` for a root.
    """

    session_id: str
    run_id: str
    deadline: Deadline
    clock: Clock
    cancellation: Cancellation
    budget: Budget
    retry_policies: RetryPolicies
    lifecycle: Lifecycle
    parent_run_id: str | None = None
    _owner: RunBackend = field(default=_NOT_BUILT, repr=False)
    # Whether the run or an ancestor has a money limit, read once here from the owner: every
    # reservation asks, and a field costs nothing where the owner's property costs a call.
    _priced: bool = field(default=False, repr=False)
    _key: InitVar[object] = None

    def __post_init__(self, _key: object) -> None:
        if _key is not _CREATE_KEY:
            raise TypeError("build a RunContext with RunContext.create(...)")

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
        store: RunStore | None = None,
        _lock: threading.Lock | None = None,
    ) -> RunContext:
        """Validate everything, then build one run's context.

        Exactly one of ``deadline`` and ``timeout`` (seconds from now on ``clock``) is required.
        Identity is checked first: a bad ID raises :class:`InvalidRunIdentity` (also a
        ``TypeError`` when it is not a ``str``) before any part of the run exists.
        ``on_callback_error(error, callback)`` receives what a cancellation callback raised
        (default: logged). ``_lock`` lets the model checks' scheduler supply the run's lock.

        With ``store`` (a ``RedisRunStore``, say) the run is published there, for other processes
        to :meth:`attach` to, and its state lives there; a run ID the store holds already raises
        :class:`~diagnosis_harness.RunStoreConflict`. Without it the run lives in this process.
        """
        session_id = _identity("session_id", session_id)
        run_id = _identity("run_id", run_id)
        if type(limits) is not BudgetLimits:
            raise TypeError(f"limits must be BudgetLimits, got {limits!r}")
        clock = _checked_clock(clock)
        if store is not None:
            store = _checked_store(store)
            if _lock is not None:
                raise ValueError("_lock is for a run in this process; a store's run has none")
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
        handler = checked_error_handler(on_callback_error)
        run: RunBackend
        if store is None:
            run = LocalRun(
                run_id=run_id,
                limits=limits,
                deadline_ns=deadline.instant_ns,
                clock=clock,
                on_callback_error=handler,
                lock=_lock,
            )
        else:
            run = store.create_run(
                session_id=session_id,
                run_id=run_id,
                limits=limits,
                deadline_ns=deadline.instant_ns,
                clock=clock,
                on_callback_error=handler,
            )
        return cls._of(
            session_id=session_id,
            run_id=run_id,
            deadline=deadline,
            clock=clock,
            retry_policies=retry_policies,
            run=run,
        )

    @classmethod
    def attach(
        cls,
        *,
        session_id: str,
        run_id: str,
        store: RunStore,
        clock: Clock | None = None,
        limits: BudgetLimits | None = None,
        retry_policies: RetryPolicies | None = None,
        on_callback_error: CallbackErrorHandler | None = None,
    ) -> RunContext:
        """A context on a run another process published with ``create(..., store=...)``.

        The run's limits and deadline are the stored ones; the deadline, one instant for every
        process, is mapped onto ``clock`` (see the store's documentation for how). ``limits``,
        when given, must equal the stored ones, else :class:`~diagnosis_harness.RunStoreConflict`
        naming the limits that differ -- a worker that expects other limits than the run has is
        a configuration error. An unknown run raises :class:`~diagnosis_harness.UnknownRun`, a
        ``session_id`` other than the stored one ``RunStoreConflict``; a refused attach leaves
        nothing behind in the store or this process. Retry policies and the callback error
        handler are this process's own.
        """
        session_id = _identity("session_id", session_id)
        run_id = _identity("run_id", run_id)
        store = _checked_store(store)
        if limits is not None and type(limits) is not BudgetLimits:
            raise TypeError(f"limits must be BudgetLimits or None, got {limits!r}")
        clock = _checked_clock(clock)
        if retry_policies is None:
            retry_policies = RetryPolicies.defaults()
        elif type(retry_policies) is not RetryPolicies:
            raise TypeError(f"retry_policies must be RetryPolicies, got {retry_policies!r}")
        run = store.attach_run(
            session_id=session_id,
            run_id=run_id,
            limits=limits,
            clock=clock,
            on_callback_error=checked_error_handler(on_callback_error),
        )
        deadline = Deadline.at_ns(run.deadline_ns)
        return cls._of(
            session_id=session_id,
            run_id=run_id,
            deadline=deadline,
            clock=clock,
            retry_policies=retry_policies,
            run=run,
        )

    @classmethod
    def _of(
        cls,
        *,
        session_id: str,
        run_id: str,
        deadline: Deadline,
        clock: Clock,
        retry_policies: RetryPolicies,
        run: RunBackend,
    ) -> RunContext:
        """The context whose handles are views of ``run``."""
        return cls(
            session_id,
            run_id,
            deadline,
            clock,
            Cancellation(_owner=run),
            Budget(run),
            retry_policies,
            Lifecycle(run),
            run.parent_run_id,
            run,
            run.priced,
            _CREATE_KEY,
        )

    def child(
        self,
        *,
        run_id: str,
        limits: BudgetLimits | None = None,
        timeout: float | None = None,
        deadline: Deadline | None = None,
        retry_policies: RetryPolicies | None = None,
        on_callback_error: CallbackErrorHandler | None = None,
        store: RunStore | None = None,
    ) -> RunContext:
        """A child run of this one -- a sub-agent's -- that draws on this run's budget, deadline
        and cancellation.

        Every reservation of the child (and of its own children) is granted only if the child
        and every run above it can grant it, in one all-or-nothing decision, and then counts in
        each: this run's counters include its children's usage as it happens, and
        ``snapshot().children`` gives each child's own. ``limits`` is the child's own cap (its
        share); without it the child is capped by this run alone (its limits are this run's). A
        cap above what this run has left is allowed -- this run caps it anyway, and the child's
        ``snapshot().capped_by`` says which limits bind where.

        The child's deadline is the earlier of its own (``timeout`` seconds from now, or
        ``deadline``; at most one) and this run's. When this run ends, however it ends, every
        live descendant ends ``CANCELLED`` with it (signalled ``PARENT_ENDED``), their callbacks
        before this run's. A child's ending never ends this run, except that a reservation or a
        usage report that passes this run's limit exhausts this run as well: it is this run's
        budget.

        The child has this run's session, clock and (by default) retry policies, and lives where
        this run does; ``store``, when given, must be that store. Refused, with nothing created:
        a child of an ended run (this run's ``RunTerminated``), a ``run_id`` its tree holds
        already (ValueError; a run cannot be its own ancestor), or one the store holds
        (``RunStoreConflict``).
        """
        run_id = _identity("run_id", run_id)
        if limits is None:
            limits = self._owner.limits
        elif type(limits) is not BudgetLimits:
            raise TypeError(f"limits must be BudgetLimits or None, got {limits!r}")
        if timeout is not None and deadline is not None:
            raise ValueError("give at most one of deadline and timeout (neither: the parent's)")
        if timeout is not None:
            own_ns = Deadline.after(self.clock, seconds("timeout", timeout)).instant_ns
        elif deadline is None:
            own_ns = self.deadline.instant_ns
        elif type(deadline) is Deadline:
            own_ns = deadline.instant_ns
        else:
            raise TypeError(f"deadline must be a Deadline or None, got {deadline!r}")
        if retry_policies is None:
            retry_policies = self.retry_policies
        elif type(retry_policies) is not RetryPolicies:
            raise TypeError(f"retry_policies must be RetryPolicies, got {retry_policies!r}")
        handler = checked_error_handler(on_callback_error)
        if store is not None and store is not self._owner.store:
            where = "this process" if self._owner.store is None else repr(self._owner.store)
            raise ValueError(
                f"store must be the parent's store or None: a child lives in its parent's tree, "
                f"and run {self.run_id!r} lives in {where}, got {store!r}"
            )
        run = self._owner.create_child(
            run_id=run_id, limits=limits, deadline_ns=own_ns, on_callback_error=handler
        )
        return self._of(
            session_id=self.session_id,
            run_id=run_id,
            deadline=Deadline.at_ns(run.deadline_ns),
            clock=self.clock,
            retry_policies=retry_policies,
            run=run,
        )

    # -- the gate and the boundaries: each reads the clock once, and the run decides -----------

    def check(self, boundary: Boundary) -> None:
        """Pass if the run is live and before its deadline; else raise its ``RunTerminated``.

        At or after the deadline the first boundary to see it records ``TIMED_OUT`` and signals
        ``DEADLINE_EXCEEDED``.
        """
        if boundary.__class__ is not Boundary:
            raise TypeError(f"boundary must be a Boundary, got {boundary!r}")
        self._owner.check(boundary, self.clock.monotonic_ns())

    def reserve_model_call(
        self, *, max_cost: Decimal | None = None, min_cost: Decimal | None = None
    ) -> CallHold:
        """Check the MODEL boundary and reserve one Model call and its ``max_cost``, in one
        decision; return the call's :class:`CallHold`, to settle with the actual cost.

        ``max_cost`` (a ``Decimal`` of US dollars >= 0) is the call's worst case, held against
        the money limit (``BudgetLimits.cost``): refused, with nothing reserved, when settled +
        held + ``max_cost`` would pass it (``BudgetExhausted`` on ``COST``). With a money limit it
        is required (ValueError, nothing reserved); without one it is optional, and tracked.

        ``min_cost`` (a ``Decimal`` <= ``max_cost``; only with ``max_cost``) makes the hold
        partial: the run holds as much of ``max_cost`` as the money left pays for, but at least
        ``min_cost``, reading the money left and holding it in the same decision; refused on
        ``COST`` only when not even ``min_cost`` fits. The hold's ``max_cost`` is what was held
        (all of ``max_cost`` without a money limit): a caller sizes its call to it.
        """
        owner = self._owner
        clock = self.clock
        if max_cost is None:
            if min_cost is not None:  # nothing is reserved
                raise ValueError(
                    "min_cost needs max_cost: give the call's worst case as max_cost=Decimal(...) "
                    f"and the least it can be made with as min_cost, got min_cost={min_cost!r}"
                )
            if self._priced:  # nothing is reserved
                raise ValueError(_MAX_COST_REQUIRED.format(call="reserve_model_call()"))
            owner.reserve_model_call(clock.monotonic_ns())
            return granted_hold(owner, clock, None, 0)
        hold = money_units("max_cost", max_cost)
        least = None if min_cost is None else money_units("min_cost", min_cost)
        if least is not None and least > hold:  # nothing is reserved
            raise ValueError(
                f"min_cost must be at most max_cost, got min_cost={min_cost!r} and "
                f"max_cost={max_cost!r}"
            )
        held = owner.reserve_model_call(clock.monotonic_ns(), hold, least)
        return granted_hold(owner, clock, None, held)

    def reserve_tool_call(self, tool: str, *, max_cost: Decimal | None = None) -> CallHold:
        """Check the TOOL boundary and reserve one call of ``tool`` (total and per Tool) and its
        ``max_cost``, in one decision; return its :class:`CallHold` (see
        :meth:`reserve_model_call` for ``max_cost``)."""
        if type(tool) is not str or not tool.strip():  # the common case checked inline
            non_blank_str("tool", tool)  # raises, or passes a non-blank str subclass
        owner = self._owner
        clock = self.clock
        if max_cost is None:
            if self._priced:  # nothing is reserved
                raise ValueError(_MAX_COST_REQUIRED.format(call=f"reserve_tool_call({tool!r})"))
            owner.reserve_tool_call(tool, clock.monotonic_ns())
            return granted_hold(owner, clock, tool, 0)
        hold = money_units("max_cost", max_cost)
        owner.reserve_tool_call(tool, clock.monotonic_ns(), hold)
        return granted_hold(owner, clock, tool, hold)

    def reserve_bytes(self, n: int) -> None:
        """Check the CAPACITY boundary and reserve ``n`` (> 0) bytes of the run's byte budget."""
        self._owner.reserve_bytes(positive_int("n", n), self.clock.monotonic_ns())

    def record_token_usage(self, *, input_tokens: int, output_tokens: int) -> None:
        """Record a completed Model response's actual usage, as reported, even past a limit.

        Past a limit the run becomes ``BUDGET_EXHAUSTED`` (unless already over) and the next
        controlled operation is rejected; this call itself does not raise for it.
        """
        non_negative_int("input_tokens", input_tokens)
        non_negative_int("output_tokens", output_tokens)
        self._owner.record_token_usage(input_tokens, output_tokens, self.clock.monotonic_ns())

    def scope(self, boundary: Boundary = Boundary.GUARD, *, cut_on_budget: bool = True) -> RunScope:
        """``async with ctx.scope():`` -- the run's cancellation or deadline cancels this task.

        ``boundary`` is the kind of work the block does (``Boundary.MODEL`` for a model
        request): the gate the scope checks on entry, and the boundary a deadline its timer
        finds passed is recorded at (``first seen when the MODEL boundary checked``).
        ``cut_on_budget=False``: an ending by budget exhaustion does not cancel the block (for
        work already granted); the deadline and a cancel still do.
        """
        if boundary.__class__ is not Boundary:
            raise TypeError(f"boundary must be a Boundary, got {boundary!r}")
        if type(cut_on_budget) is not bool:
            raise TypeError(f"cut_on_budget must be a bool, got {cut_on_budget!r}")
        return RunScope(self, boundary, cut_on_budget=cut_on_budget)

    def __repr__(self) -> str:
        return (
            f"RunContext(session_id={self.session_id!r}, run_id={self.run_id!r}, "
            f"state={self.lifecycle.state.name})"
        )
