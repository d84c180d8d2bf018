"""``LocalRun``: one run's mutable state, in this process, under one lock.

Theory of operation. Everything about a run that changes -- the lifecycle's state and its one
termination, the cancellation reason and callbacks, the budget's state, counters and exhausted
limit -- is a field of one :class:`LocalRun` and changes only under its ``_lock``. One lock,
because the decisions couple them: a reservation is granted only while the run is live and before
its deadline; the reservation that would pass a limit exhausts the budget and ends the run; an
ending signals cancellation, and a cancellation ends the run. Each public method is one such
decision: it takes the lock once, steps the generated tables with :meth:`MachineTable.take`,
writes the fields, and releases the lock before any user callback runs.

The handles (``RunContext``, ``Lifecycle``, ``Cancellation``, ``Budget``) are views that forward
here; :mod:`._backend` states the contract another implementation of this class must keep.
"""

from __future__ import annotations

import threading
from types import MappingProxyType
from typing import TYPE_CHECKING, NoReturn, TypeAlias, final

from . import _checkpoint
from ._boundary import Boundary
from ._cancellation import CancelSignal
from ._checkpoint import checkpoint
from ._endings import (
    ANCESTOR_ENDED,
    ANCESTOR_LIMIT,
    CANCELLED,
    COST_EXCEEDED,
    COST_REFUSED,
    LIMIT,
    LIMIT_BOUNDARY,
    MODEL_CALLS_REFUSED,
    PER_TOOL_CALLS_REFUSED,
    RUN_BYTES_REFUSED,
    TOKENS_EXCEEDED,
    TOOL_CALLS_REFUSED,
    CancellationReason,
    FinishResult,
    RunTermination,
    deadline_reason,
    ending_of,
    ending_of_cancel,
    error_for,
)
from ._generated.tables import BUDGET, LIFECYCLE, BudgetEvent, BudgetState, LifecycleEvent, RunState
from ._limits import BudgetDimension, BudgetLimits, BudgetUsage

if TYPE_CHECKING:
    from ._backend import RunStore
    from ._cancellation import CallbackErrorHandler, CancellationCallback, Pending
    from ._clock import Clock
    from ._machine import Row

__all__ = ["Deliveries", "LocalRun"]

Deliveries: TypeAlias = "list[tuple[CancelSignal, Pending]]"
"""The callbacks an ending took, per run, to run outside the lock in this order: a run's
descendants before the run (its cascade), each run's own in registration order."""

_RESERVE = BudgetEvent.RESERVE
_RECORD_USAGE = BudgetEvent.RECORD_USAGE
_SETTLE = BudgetEvent.SETTLE


# The budget's steps of a granted reservation and of a settle within the limits, taken from the
# generated table once: each is a pure function of (state, event, guard), and ACTIVE is the one
# state either is taken from (from EXHAUSTED, terminal, the table absorbs both). A decision
# commits one only while the budget is still in its source state, under the lock; otherwise it
# takes the refusal (or the absorbing) path. Taken here, not per call: a lookup through the table
# is a call, and the locked sections below make none (see the reservations' comment).
def _active_step(event: BudgetEvent) -> Row[BudgetState, BudgetEvent]:
    row = BUDGET.take(BudgetState.ACTIVE, event, True)
    if row is None:  # the table's rows are the contract: a table without them is not this one
        raise AssertionError(f"the budget table has no ACTIVE row for {event} within limits")
    return row


_GRANT = _active_step(_RESERVE)
_SETTLED = _active_step(_SETTLE)


def _dollars(units: int) -> str:
    """``units`` picodollars as a reader writes dollars (``$0.4``): for a reason text only."""
    from ._money import dollars  # noqa: PLC0415 - lazily: it loads decimal

    return f"${dollars(units)}"


def _tokens_over(
    limits: BudgetLimits, used_in: int, used_out: int
) -> tuple[BudgetDimension, int, int] | None:
    """The first token limit the tokens used pass, its limit and the tokens counted against it;
    ``None`` within them. One order for every recorder: input, output, then total."""
    if used_in > limits.input_tokens:
        return (BudgetDimension.INPUT_TOKENS, limits.input_tokens, used_in)
    if used_out > limits.output_tokens:
        return (BudgetDimension.OUTPUT_TOKENS, limits.output_tokens, used_out)
    if used_in + used_out > limits.total_tokens:
        return (BudgetDimension.TOTAL_TOKENS, limits.total_tokens, used_in + used_out)
    return None


@final
class LocalRun:
    """One run's state; implements :class:`~._backend.RunBackend`. Thread-safe.

    Fixed at creation: ``limits``, ``deadline_ns``, the clock. Under ``_lock``, and written only
    by this class:

    * ``_state`` / ``_termination``: RUNNING and ``None``, then one terminal state and the
      :class:`RunTermination` that reached it, never replaced. ``_termination is None`` exactly
      while ``_state`` is RUNNING; it is read without the lock by the gate's fast path.
    * ``_signal``: the first cancellation reason and the callbacks waiting for it. A set reason
      implies a terminal state (ending and signal are one decision); the converse holds too, as
      every ending signals.
    * ``_budget_state`` / ``_exhausted``: ACTIVE and ``None``, then EXHAUSTED and the first limit
      reached. EXHAUSTED implies the run has ended (``BUDGET_EXHAUSTED``, or an ending before the
      usage report that went over).
    * the counters: never past their limits, but for tokens and settled costs, which are recorded
      as reported; ``_tool_calls == sum(_per_tool.values())``.
    * money, in integer picodollars: ``_cost_settled`` (actual costs) and ``_cost_held`` (the
      ``max_cost`` of holds not settled yet). A hold is granted only if ``_cost_settled +
      _cost_held`` stays within ``_cost_limit`` (``None``: no money limit); a settle moves its
      hold out of ``_cost_held`` and its actual cost into ``_cost_settled``, even past the limit
      (which exhausts the budget). So while ACTIVE, settled + held never passes the limit.

    A run tree (:meth:`create_child`): every run of a tree shares its root's lock, so a decision
    about several runs is still one. ``_ancestors`` are the parent, its parent, and so on to the
    root, fixed at creation (``_path`` puts the run itself first, without a reference cycle: a
    root is freed without the cyclic GC); ``_children`` grows under the lock. A child's
    reservation is granted only if every run of its path grants it, and then counts in each: a
    run's counters include its descendants' usage. Every ending cascades in the same decision:
    an ended run has no live descendant. A run without a parent takes the single-run paths
    below, unchanged.
    """

    __slots__ = (
        "_ancestors",
        "_budget_state",
        "_children",
        "_clock",
        "_cost_held",
        "_cost_limit",
        "_cost_settled",
        "_deadline_ns",
        "_exhausted",
        "_input_tokens",
        "_limits",
        "_lock",
        "_model_calls",
        "_output_tokens",
        "_overrides",
        "_per_tool",
        "_priced",
        "_run_bytes",
        "_run_id",
        "_signal",
        "_state",
        "_termination",
        "_tool_calls",
        "_tree_ids",
    )

    def __init__(
        self,
        *,
        run_id: str,
        limits: BudgetLimits,
        deadline_ns: int,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
        lock: threading.Lock | None = None,
        parent: LocalRun | None = None,
    ) -> None:
        """A root run, or (``parent``, from :meth:`create_child` under the tree's lock) a child."""
        self._run_id = run_id
        self._children: list[LocalRun] = []
        if parent is None:
            self._ancestors: tuple[LocalRun, ...] = ()
            self._tree_ids = {run_id}  # every run ID of the tree, the one set its runs share
            lock = threading.Lock() if lock is None else lock
        else:
            self._ancestors = (parent, *parent._ancestors)
            self._tree_ids = parent._tree_ids
            lock = parent._lock
        self._limits: BudgetLimits = limits
        self._priced = any(run._limits.cost is not None for run in self._path)
        self._overrides = dict(limits.per_tool_overrides)  # a dict's lookup beats a proxy's
        self._deadline_ns = deadline_ns
        self._clock = clock
        self._lock: threading.Lock = lock
        self._state = LIFECYCLE.initial
        self._termination: RunTermination | None = None
        self._signal = CancelSignal(on_callback_error)
        self._budget_state = BUDGET.initial
        self._exhausted: BudgetDimension | None = None
        self._model_calls = 0
        self._tool_calls = 0
        self._per_tool: dict[str, int] = {}
        self._input_tokens = 0
        self._output_tokens = 0
        self._run_bytes = 0
        if limits.cost is None:
            self._cost_limit: int | None = None
        else:
            from ._money import to_units  # noqa: PLC0415 - lazily: it loads decimal

            self._cost_limit = to_units(limits.cost, rounding="up")
        self._cost_settled = 0
        self._cost_held = 0

    # -- reading ------------------------------------------------------------------------------

    @property
    def _path(self) -> tuple[LocalRun, ...]:
        """This run, then its ancestors, nearest first."""
        return (self, *self._ancestors)

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def parent_run_id(self) -> str | None:
        return self._ancestors[0]._run_id if self._ancestors else None

    @property
    def priced(self) -> bool:
        return self._priced

    @property
    def store(self) -> RunStore | None:
        return None  # the run lives in this process

    @property
    def limits(self) -> BudgetLimits:
        return self._limits

    @property
    def deadline_ns(self) -> int:
        return self._deadline_ns

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def termination(self) -> RunTermination | None:
        return self._termination

    @property
    def reason(self) -> CancellationReason | None:
        return self._signal.reason

    @property
    def budget_state(self) -> BudgetState:
        return self._budget_state

    @property
    def exhausted(self) -> BudgetDimension | None:
        return self._exhausted

    def snapshot(self) -> BudgetUsage:
        with self._lock:
            return self._snapshot_locked()

    def create_child(
        self,
        *,
        run_id: str,
        limits: BudgetLimits,
        deadline_ns: int,
        on_callback_error: CallbackErrorHandler,
    ) -> LocalRun:
        """A child run of this one, live while this one is: its deadline the earlier of
        ``deadline_ns`` and this run's. Refused with this run's ``RunTerminated`` once it has
        ended, and with a ValueError for a run ID its tree holds already; either changes nothing."""
        with self._lock:
            termination = self._termination
            if termination is not None:
                error = error_for(termination, None, self._exhausted)
            elif run_id in self._tree_ids:
                raise ValueError(
                    f"run_id {run_id!r} names a run of this tree already (the root "
                    f"{self._path[-1]._run_id!r} or one of its descendants): a run cannot be its "
                    "own ancestor, and a tree's run IDs are unique"
                )
            else:
                child = LocalRun(
                    run_id=run_id,
                    limits=limits,
                    deadline_ns=min(deadline_ns, self._deadline_ns),
                    clock=self._clock,
                    on_callback_error=on_callback_error,
                    parent=self,
                )
                self._children.append(child)
                self._tree_ids.add(run_id)
                return child
        raise error

    def _snapshot_locked(self) -> BudgetUsage:
        model_calls, tool_calls = self._model_calls, self._tool_calls
        checkpoint("budget.snapshot")  # between reading the totals and the per-Tool counts
        per_tool = MappingProxyType(dict(self._per_tool))
        children = {child._run_id: child._snapshot_locked() for child in self._children}
        return BudgetUsage(
            model_calls=model_calls,
            tool_calls=tool_calls,
            per_tool_calls=per_tool,
            input_tokens=self._input_tokens,
            output_tokens=self._output_tokens,
            total_tokens=self._input_tokens + self._output_tokens,
            run_bytes=self._run_bytes,
            exhausted=self._exhausted,
            cost_units=self._cost_settled,
            cost_held_units=self._cost_held,
            children=MappingProxyType(children),
            capped_by=MappingProxyType(self._capped_by_locked()),
        )

    def _rooms_locked(self) -> dict[BudgetDimension, int]:
        """What this run's own limits leave, per limit (``COST`` only with a money limit)."""
        limits = self._limits
        rooms = {
            BudgetDimension.MODEL_CALLS: limits.model_calls - self._model_calls,
            BudgetDimension.TOOL_CALLS: limits.tool_calls - self._tool_calls,
            BudgetDimension.INPUT_TOKENS: limits.input_tokens - self._input_tokens,
            BudgetDimension.OUTPUT_TOKENS: limits.output_tokens - self._output_tokens,
            BudgetDimension.TOTAL_TOKENS: limits.total_tokens
            - self._input_tokens
            - self._output_tokens,
            BudgetDimension.RUN_BYTES: limits.run_bytes - self._run_bytes,
        }
        if self._cost_limit is not None:
            rooms[BudgetDimension.COST] = self._cost_limit - self._cost_settled - self._cost_held
        return rooms

    def _capped_by_locked(self) -> dict[BudgetDimension, str]:
        """Per limit, the ancestor that leaves this run less than its own limit does, the one
        leaving the least (the nearest on a tie): the limit that binds this run there."""
        if not self._ancestors:
            return {}
        least = self._rooms_locked()
        capped: dict[BudgetDimension, str] = {}
        for ancestor in self._path[1:]:
            for dimension, room in ancestor._rooms_locked().items():
                if dimension not in least or room < least[dimension]:
                    least[dimension] = room
                    capped[dimension] = ancestor._run_id
        return capped

    # -- the gate and the reservations ----------------------------------------------------------

    def check(self, boundary: Boundary, now_ns: int) -> None:
        if self._termination is None and now_ns < self._deadline_ns:
            return  # a racy read is safe: a stale None is the check a moment earlier
        with self._lock:
            deliveries = self._time_out_locked(boundary, now_ns)
        self._refuse(boundary, deliveries)

    # The three reservations grant in one locked section that makes no call -- no method, no
    # dict.get(), no checkpoint() -- because CPython may switch threads at a call, and a thread
    # switched out while it holds the run's lock makes every other reserving thread queue behind
    # it (a lock convoy; docs/performance.md has the figures). So the budget's step, a pure
    # function of the state, is taken from the table beforehand (``_GRANT``), and committed under
    # the lock only if the budget is still in the state it is taken from. Everything else -- a
    # limit reached, a run that is over, an EXHAUSTED budget -- is decided by the refusal path,
    # under the same lock.

    def reserve_model_call(self, now_ns: int, hold: int = 0, least: int | None = None) -> int:
        if self._ancestors:  # a child: the tree decides
            return self._grant_in_tree(Boundary.MODEL, now_ns, hold=hold, least=least)
        limit = self._limits.model_calls
        cost_limit = self._cost_limit
        grant = _GRANT
        floor = hold if least is None else least
        with self._lock:
            used = self._model_calls
            # What the money left pays of ``hold``: all of it without a money limit, else as much
            # as fits, granted only if at least ``floor`` does -- read and held in this one
            # decision, so no hold from elsewhere lands between the read and the hold.
            if cost_limit is None:
                granted = hold
            else:
                room = cost_limit - self._cost_settled - self._cost_held
                granted = hold if hold <= room else room
            if (
                self._termination is None
                and now_ns < self._deadline_ns
                and used < limit
                and granted >= floor
                and self._budget_state is grant.source
            ):
                if _checkpoint.scheduler is not None:  # between the checks and the writes
                    _checkpoint.scheduler("budget")
                self._budget_state = grant.target
                # The call and its hold move together, after every check: all or nothing.
                self._model_calls = used + 1
                if granted:  # a hold of 0 writes nothing
                    self._cost_held += granted
                return granted
            if used >= limit or cost_limit is None:  # else the money limit refused the hold
                dimension = BudgetDimension.MODEL_CALLS
                detail = MODEL_CALLS_REFUSED.format(limit=limit, call=used + 1)
            else:
                dimension = BudgetDimension.COST
                detail = self._cost_refused_locked(floor)
            deliveries = self._refuse_locked(Boundary.MODEL, dimension, detail, now_ns)
        return self._refuse(Boundary.MODEL, deliveries)  # raises: the run has ended

    def reserve_tool_call(self, tool: str, now_ns: int, hold: int = 0) -> None:
        if self._ancestors:  # a child: the tree decides
            self._grant_in_tree(Boundary.TOOL, now_ns, tool=tool, hold=hold)
            return
        limits = self._limits
        overrides = self._overrides
        limit = overrides[tool] if tool in overrides else limits.per_tool_calls  # noqa: SIM401 - no call
        cost_limit = self._cost_limit
        grant = _GRANT
        with self._lock:
            total = self._tool_calls
            used = self._per_tool[tool] if tool in self._per_tool else 0  # noqa: SIM401 - no call
            if (
                self._termination is None
                and now_ns < self._deadline_ns
                and total < limits.tool_calls
                and used < limit
                and (
                    cost_limit is None or self._cost_settled + self._cost_held + hold <= cost_limit
                )
                and self._budget_state is grant.source
            ):
                if _checkpoint.scheduler is not None:  # between the checks and the writes
                    _checkpoint.scheduler("budget")
                self._budget_state = grant.target
                # The counters and the hold move together, after every check: total == sum per
                # Tool, and settled + held within the money limit.
                self._tool_calls = total + 1
                self._per_tool[tool] = used + 1
                if hold:  # a hold of 0 writes nothing
                    self._cost_held += hold
                return
            if used < limit and total < limits.tool_calls and cost_limit is not None:
                dimension = BudgetDimension.COST
                detail = self._cost_refused_locked(hold)
            elif total >= limits.tool_calls:
                dimension = BudgetDimension.TOOL_CALLS
                detail = TOOL_CALLS_REFUSED.format(
                    limit=limits.tool_calls, call=total + 1, tool=repr(tool)
                )
            else:
                dimension = BudgetDimension.PER_TOOL_CALLS
                detail = PER_TOOL_CALLS_REFUSED.format(limit=limit, tool=repr(tool), call=used + 1)
            deliveries = self._refuse_locked(Boundary.TOOL, dimension, detail, now_ns)
        self._refuse(Boundary.TOOL, deliveries)

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
        if self._ancestors:  # a child: the tree decides
            self._record_in_tree(
                _SETTLE,
                now_ns,
                boundary,
                tokens=(input_tokens, output_tokens),
                hold=hold,
                cost=cost,
            )
            return
        limits = self._limits
        cost_limit = self._cost_limit
        with self._lock:
            # The call happened: record its cost and tokens as reported, whatever the limits or
            # the run say, and release its hold.
            held = self._cost_held = self._cost_held - hold
            settled = self._cost_settled = self._cost_settled + cost
            over = None
            if input_tokens or output_tokens:  # a Tool call's settle has none: nothing to add
                used_in = self._input_tokens = self._input_tokens + input_tokens
                used_out = self._output_tokens = self._output_tokens + output_tokens
                over = _tokens_over(limits, used_in, used_out)
            if over is not None:
                dimension, limit, used = over
                detail = TOKENS_EXCEEDED.format(limit=limit, used=used)
            elif cost_limit is not None and settled + held > cost_limit:
                dimension = BudgetDimension.COST
                detail = COST_EXCEEDED.format(
                    limit=_dollars(cost_limit), settled=_dollars(settled), held=_dollars(held)
                )
            else:  # within the limits: ACTIVE stays ACTIVE, EXHAUSTED absorbs the settle
                if self._budget_state is _SETTLED.source:
                    if _checkpoint.scheduler is not None:  # between the checks and the write
                        _checkpoint.scheduler("budget")
                    self._budget_state = _SETTLED.target
                return
            deliveries = self._exhaust_locked(_SETTLE, dimension, detail, now_ns, boundary)
        self._deliver(deliveries)

    def reserve_bytes(self, n: int, now_ns: int) -> None:
        if self._ancestors:  # a child: the tree decides
            self._grant_in_tree(Boundary.CAPACITY, now_ns, n=n)
            return
        limit = self._limits.run_bytes
        grant = _GRANT
        with self._lock:
            used = self._run_bytes
            if (
                self._termination is None
                and now_ns < self._deadline_ns
                and used + n <= limit
                and self._budget_state is grant.source
            ):
                if _checkpoint.scheduler is not None:  # between the checks and the writes
                    _checkpoint.scheduler("budget")
                self._budget_state = grant.target
                self._run_bytes = used + n
                return
            detail = RUN_BYTES_REFUSED.format(limit=limit, n=n, used=used)
            deliveries = self._refuse_locked(
                Boundary.CAPACITY, BudgetDimension.RUN_BYTES, detail, now_ns
            )
        self._refuse(Boundary.CAPACITY, deliveries)

    def record_token_usage(self, input_tokens: int, output_tokens: int, now_ns: int) -> None:
        if self._ancestors:  # a child: the tree decides
            self._record_in_tree(_RECORD_USAGE, now_ns, None, tokens=(input_tokens, output_tokens))
            return
        limits = self._limits
        with self._lock:
            # The tokens were spent: record them as reported, whatever the limits or the run say.
            used_in = self._input_tokens = self._input_tokens + input_tokens
            used_out = self._output_tokens = self._output_tokens + output_tokens
            over = _tokens_over(limits, used_in, used_out)
            if over is None:
                self._step_budget_locked(_RECORD_USAGE)
                return
            dimension, limit, used = over
            detail = TOKENS_EXCEEDED.format(limit=limit, used=used)
            deliveries = self._exhaust_locked(_RECORD_USAGE, dimension, detail, now_ns)
        self._deliver(deliveries)

    # -- a child's decisions: every run of its path, in one locked section ----------------------

    def _grant_in_tree(
        self,
        boundary: Boundary,
        now_ns: int,
        *,
        tool: str = "",
        hold: int = 0,
        least: int | None = None,
        n: int = 0,
    ) -> int:
        """A child's reservation at ``boundary`` (MODEL: a Model call and ``hold``; TOOL: a call
        of ``tool`` and ``hold``; CAPACITY: ``n`` bytes), granted only if every run of its path
        grants it, and then counted in each; return the hold granted.

        The runs are asked nearest first, and the first to refuse decides: it and every run
        below it on the path end ``BUDGET_EXHAUSTED`` on its limit (it is their reservation the
        limit refused), and its other live descendants are cancelled. A partial money hold is
        the least any run of the path leaves, refused where it falls below ``least``. Only this
        run's own liveness and deadline are read: an ended run has no live descendant, and a
        child's deadline is at or before its parent's."""
        floor = hold if least is None else least
        with self._lock:
            if self._termination is not None or now_ns >= self._deadline_ns:
                deliveries = self._time_out_locked(boundary, now_ns)
            else:
                granted = hold
                for level, run in enumerate(self._path):
                    if run._cost_limit is not None:
                        granted = min(granted, run._cost_limit - run._cost_settled - run._cost_held)
                    refusal = run._refusal_locked(boundary, tool, granted, floor, n)
                    if refusal is not None:
                        deliveries = self._exhaust_path_locked(level, refusal, now_ns, boundary)
                        break
                else:
                    checkpoint("budget")  # between the checks and the writes
                    for run in self._path:
                        run._count_locked(boundary, tool, granted, n)
                    return granted
        return self._refuse(boundary, deliveries)

    def _refusal_locked(
        self, boundary: Boundary, tool: str, hold: int, floor: int, n: int
    ) -> tuple[BudgetDimension, str] | None:
        """The limit of this run that refuses the reservation and how (its reason's detail), in
        the order the single-run paths above name them; ``None`` if this run grants it. ``hold``
        is what the money left of the runs nearer the caller pays for, ``floor`` its least."""
        limits = self._limits
        if boundary is Boundary.MODEL:
            if self._model_calls >= limits.model_calls:
                detail = MODEL_CALLS_REFUSED.format(
                    limit=limits.model_calls, call=self._model_calls + 1
                )
                return (BudgetDimension.MODEL_CALLS, detail)
        elif boundary is Boundary.TOOL:
            if self._tool_calls >= limits.tool_calls:
                detail = TOOL_CALLS_REFUSED.format(
                    limit=limits.tool_calls, call=self._tool_calls + 1, tool=repr(tool)
                )
                return (BudgetDimension.TOOL_CALLS, detail)
            used = self._per_tool.get(tool, 0)
            limit = self._overrides.get(tool, limits.per_tool_calls)
            if used >= limit:
                detail = PER_TOOL_CALLS_REFUSED.format(limit=limit, tool=repr(tool), call=used + 1)
                return (BudgetDimension.PER_TOOL_CALLS, detail)
        elif self._run_bytes + n > limits.run_bytes:
            detail = RUN_BYTES_REFUSED.format(limit=limits.run_bytes, n=n, used=self._run_bytes)
            return (BudgetDimension.RUN_BYTES, detail)
        if self._cost_limit is not None and (
            hold < floor or self._cost_settled + self._cost_held + hold > self._cost_limit
        ):
            return (BudgetDimension.COST, self._cost_refused_locked(floor))
        return None

    def _count_locked(self, boundary: Boundary, tool: str, hold: int, n: int) -> None:
        """Count a granted reservation in this run (every check passed). The budget's step is
        the one taken from the table at import: the run is live, so its budget is ACTIVE."""
        assert self._budget_state is _GRANT.source  # EXHAUSTED only once the run has ended
        self._budget_state = _GRANT.target
        if boundary is Boundary.MODEL:
            self._model_calls += 1
        elif boundary is Boundary.TOOL:
            self._tool_calls += 1
            self._per_tool[tool] = self._per_tool.get(tool, 0) + 1
        else:
            self._run_bytes += n
        self._cost_held += hold

    def _record_in_tree(
        self,
        event: BudgetEvent,
        now_ns: int,
        boundary: Boundary | None,
        *,
        tokens: tuple[int, int],
        hold: int = 0,
        cost: int = 0,
    ) -> None:
        """A child's usage report (``RECORD_USAGE``) or settle (``SETTLE``: ``hold`` released,
        ``cost`` recorded), recorded as reported in every run of its path, whatever the limits or
        the runs' endings say. Every run it takes past a limit is EXHAUSTED; the farthest such
        run ends, and so does every live run below it on the path (its limit is theirs)."""
        with self._lock:
            overs: list[tuple[BudgetDimension, str] | None] = []
            input_tokens, output_tokens = tokens
            for run in self._path:
                run._cost_held -= hold
                run._cost_settled += cost
                run._input_tokens += input_tokens
                run._output_tokens += output_tokens
                overs.append(run._over_locked(event))
            nearest: list[int | None] = []  # per run, the nearest run above it that is over
            above = None
            for level in range(len(overs) - 1, -1, -1):
                nearest.append(above)
                if overs[level] is not None:
                    above = level
            nearest.reverse()
            deliveries: Deliveries = []
            # Nearest the caller first, so that each ending cascades only to runs off the path.
            for level, run in enumerate(self._path):
                over, source = overs[level], nearest[level]
                if over is not None:
                    ended = run._exhaust_locked(event, *over, now_ns, boundary)
                elif source is not None and run._termination is None:
                    over = overs[source]
                    assert over is not None  # nearest[] names only runs that are over
                    ended = run._exhaust_locked(
                        event, *over, now_ns, boundary, ancestor=self._path[source]
                    )
                else:  # within its limits: ACTIVE stays ACTIVE, EXHAUSTED absorbs the event
                    run._step_budget_locked(event)
                    continue
                deliveries += ended or []
        self._deliver(deliveries)

    def _over_locked(self, event: BudgetEvent) -> tuple[BudgetDimension, str] | None:
        """The limit this run's recorded usage passes, and how; ``None`` within them. A usage
        report is checked against the token limits, a settle against its money limit too."""
        over = _tokens_over(self._limits, self._input_tokens, self._output_tokens)
        if over is not None:
            dimension, limit, used = over
            return (dimension, TOKENS_EXCEEDED.format(limit=limit, used=used))
        cost_limit = self._cost_limit
        settled, held = self._cost_settled, self._cost_held
        if event is _SETTLE and cost_limit is not None and settled + held > cost_limit:
            detail = COST_EXCEEDED.format(
                limit=_dollars(cost_limit), settled=_dollars(settled), held=_dollars(held)
            )
            return (BudgetDimension.COST, detail)
        return None

    def _exhaust_path_locked(
        self, level: int, refusal: tuple[BudgetDimension, str], now_ns: int, boundary: Boundary
    ) -> Deliveries:
        """The run ``level`` steps up this run's path refused a reservation (``refusal``: its
        limit and how): it is EXHAUSTED, and every run below it on the path (live: this run is)
        ends with it, nearest the caller first so that each ending cascades only to runs off the
        path."""
        source = self._path[level]
        deliveries: Deliveries = []
        for run in self._path[:level]:
            ended = run._exhaust_locked(_RESERVE, *refusal, now_ns, boundary, ancestor=source)
            deliveries += ended or []
        deliveries += source._exhaust_locked(_RESERVE, *refusal, now_ns, boundary) or []
        return deliveries

    # -- endings --------------------------------------------------------------------------------

    def finish(self, event: LifecycleEvent, reason: str) -> FinishResult:
        with self._lock:
            deliveries = self._end_locked(event, reason, self._clock.monotonic_ns())
            termination = self._termination
        assert termination is not None  # set by this ending or an earlier one
        self._deliver(deliveries)
        return FinishResult(changed=deliveries is not None, termination=termination)

    def cancel(self, reason: CancellationReason) -> bool:
        with self._lock:
            pending = self._signal.signal(reason)
            if pending is None:
                return False
            event = ending_of_cancel(reason).event
            deliveries = self._end_locked(
                event, CANCELLED.format(reason=reason.name), self._clock.monotonic_ns()
            )
        # The cascade's callbacks (descendants first), then this run's own.
        self._deliver([*(deliveries or []), (self._signal, pending)])
        return True

    def register(self, callback: CancellationCallback) -> int | None:
        return self._signal.register(self._lock, callback)

    def unregister(self, key: int) -> bool:
        return self._signal.unregister(self._lock, key)

    # -- under the lock -------------------------------------------------------------------------

    def _step_budget_locked(self, event: BudgetEvent, within_limits: bool = True) -> bool:
        """Step the budget table; False when EXHAUSTED absorbed the event."""
        row = BUDGET.take(self._budget_state, event, within_limits)
        if row is None:
            return False
        checkpoint("budget")  # between the checks that decided the row and the writes after it
        self._budget_state = row.target
        return True

    def _cost_refused_locked(self, hold: int) -> str:
        """The detail of a hold the money limit refused (the limit is set: else it is granted)."""
        assert self._cost_limit is not None
        return COST_REFUSED.format(
            limit=_dollars(self._cost_limit),
            hold=_dollars(hold),
            settled=_dollars(self._cost_settled),
            held=_dollars(self._cost_held),
        )

    def _refuse_locked(
        self, boundary: Boundary, dimension: BudgetDimension, detail: str, now_ns: int
    ) -> Deliveries | None:
        """A reservation not granted: the run is over or past its deadline, else the limit of
        ``dimension`` refused it (``detail`` says how), which exhausts the budget."""
        if self._termination is not None or now_ns >= self._deadline_ns:
            return self._time_out_locked(boundary, now_ns)
        return self._exhaust_locked(_RESERVE, dimension, detail, now_ns, boundary)

    def _exhaust_locked(
        self,
        event: BudgetEvent,
        dimension: BudgetDimension,
        detail: str,
        now_ns: int,
        boundary: Boundary | None = None,
        *,
        ancestor: LocalRun | None = None,
    ) -> Deliveries | None:
        """The refused reservation or the usage past a limit: EXHAUSTED, and the run ends.

        ``boundary`` is the call's (a money limit is reached at a Model or a Tool call); by
        default the limit's own (``LIMIT_BOUNDARY``). ``ancestor``: the limit is that run's,
        reached by this run's reservation or usage (the reason says so)."""
        if not self._step_budget_locked(event, within_limits=False):
            return None  # exhausted already; the run ended then
        self._exhausted = dimension
        if ancestor is None:
            reason = LIMIT.format(dimension=dimension.value, detail=detail)
        else:
            reason = ANCESTOR_LIMIT.format(
                dimension=dimension.value, run=repr(ancestor._run_id), detail=detail
            )
        if boundary is None or dimension is not BudgetDimension.COST:
            boundary = LIMIT_BOUNDARY[dimension]
        return self._end_locked(LifecycleEvent.EXHAUST_BUDGET, reason, now_ns, boundary)

    def _time_out_locked(self, boundary: Boundary, now_ns: int) -> Deliveries | None:
        """A boundary saw the run not live: it ended, or ``now_ns`` is past the deadline."""
        if self._termination is not None:
            return None
        reason = deadline_reason(now_ns, self._deadline_ns, boundary)
        return self._end_locked(LifecycleEvent.TIME_OUT, reason, now_ns, boundary)

    def _end_locked(
        self,
        event: LifecycleEvent,
        reason: str,
        at_ns: int,
        boundary: Boundary | None = None,
        *,
        origin: LocalRun | None = None,
    ) -> Deliveries | None:
        """Record the ending ``event`` leads to, end every live descendant with it, and take
        the callbacks the signals release.

        ``boundary`` is where the harness decided it (``None`` for finish and cancel).
        ``None`` when the run had already ended (the event is absorbed); otherwise the callbacks
        to deliver, the descendants' first (this run's own are empty when it was already
        signalled, as by ``cancel()``). ``origin``: the ancestor whose ending this one is (the
        cascade names it in every descendant's reason).
        """
        row = LIFECYCLE.take(self._state, event)
        if row is None:
            return None
        checkpoint("lifecycle")  # between reading the state and writing it
        self._state = row.target
        self._termination = RunTermination(row.target, reason, at_ns, boundary)
        signal = ending_of(event).signal
        pending = None if signal is None else self._signal.signal(signal)
        deliveries: Deliveries = []
        for child in self._children:  # ended children have no live descendant: skipped whole
            if child._termination is None:
                deliveries += child._cancel_by_locked(self if origin is None else origin, at_ns)
        deliveries.append((self._signal, [] if pending is None else pending))
        return deliveries

    def _cancel_by_locked(self, origin: LocalRun, at_ns: int) -> Deliveries:
        """End this live run ``CANCELLED`` because ``origin``, a run above it, ended."""
        termination = origin._termination
        assert termination is not None  # the cascade follows the origin's ending
        reason = ANCESTOR_ENDED.format(
            run=repr(origin._run_id), state=termination.state.name, reason=termination.reason
        )
        deliveries = self._end_locked(LifecycleEvent.CANCEL, reason, at_ns, origin=origin)
        assert deliveries is not None  # the run is live: CANCEL is taken
        pending = self._signal.signal(CancellationReason.PARENT_ENDED)
        deliveries.append((self._signal, [] if pending is None else pending))
        return deliveries

    # -- outside the lock -----------------------------------------------------------------------

    @staticmethod
    def _deliver(deliveries: Deliveries | None) -> None:
        """Run the callbacks the endings took, in order, each with its own run's reason."""
        for signal, pending in deliveries or ():
            reason = signal.reason
            if pending and reason is not None:
                signal.deliver(pending, reason)

    def _refuse(self, boundary: Boundary, deliveries: Deliveries | None) -> NoReturn:
        """Deliver what the ending took, then raise the run's error; the run has ended."""
        self._deliver(deliveries)
        termination = self._termination
        assert termination is not None
        raise error_for(termination, boundary, self._exhausted)

    def __repr__(self) -> str:
        return f"LocalRun(state={self._state.name}, budget={self._budget_state.name})"
