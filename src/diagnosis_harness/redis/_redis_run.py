"""``RedisRun``: the owner, in this process, of a run whose state lives in Redis.

Theory of operation. The run's state -- lifecycle state and termination, the first cancellation
reason, the budget's state, counters and exhausted limit -- is a hash (and the per-Tool counts a
second one) under the run's hash tag; every operation is one server-side script
(:mod:`._scripts`), so each decision is atomic across every process attached to the run.

What this process keeps is only what is its own: its callbacks and whether it has run them (a
:class:`~diagnosis_harness._cancellation.CancelSignal`), the termination once it has read it
(it never changes), and the usage reports the store has not acknowledged yet. Every answer of a
script carries the run's state: an owner that reads an ending -- in its own operation, in a read
of a property, or woken by the store's listener -- signals its ``CancelSignal`` with the stored
reason, which runs this process's callbacks exactly once. The thread whose operation recorded
the ending waits until they have run, wherever they ran, before it returns.

Trees. A child run (:meth:`RedisRun.create_child`) lives under its root's hash tag
(:class:`~._run_keys.RunKeys`), so each operation of a child is still one function call: it
checks and counts the child and every ancestor, and an ending ends every live descendant in the
same call (``lua/common.lua``). Each owner knows its ancestors (``_path``, fixed when made or
attached). The callbacks of one process run descendants first: an owner delivering its ending
first has every owner of its descendants in this process read theirs (they have ended with it)
and waits until their callbacks have run; the functions publish the endings deepest first, so
the listener wakes the owners in that order too. An owner whose operation ended its run has the
owners of its ancestors in this process read theirs before it returns (an ancestor's limit may
have ended them too).

Time. Redis holds every instant on the *run's timeline*: nanoseconds since the run (the root of
its tree: every run of a tree shares it) was created, on the Redis server's clock. Each process
maps its own clock onto it once, when it creates or attaches: ``offset = run_time_now -
clock.monotonic_ns()``, with ``run_time_now`` read from the server's ``TIME`` (halfway through
the round trip); a child made here takes its parent's offset. A boundary sends ``now_ns +
offset``; the deadline and every termination's ``at_ns`` come back as ``stored - offset``, on the
process's own clock. So all processes compare against one instant; a process's error is half a
round trip plus its clock's drift since it attached, and the hosts' wall clocks do not matter.

Bounded. Every operation -- a boundary, a usage report, an ending, a read of a property --
waits for the store at most until the run's deadline, or the store's timeout if sooner, and at
least the grace (:mod:`._bounded`); a lock it needs is waited for within the same bound. An
answer granting work that arrives at or after the deadline is not used: the boundary times the
run out instead. Past the deadline a boundary never grants.

Money. A reservation's hold and a settle's cost are integer picodollars, below 2**53 (Lua's
doubles are exact below it; the store refuses a money limit at or above it). The hold moves with
the call counters in the reservation's function, all or nothing; a settle records the cost and
tokens and releases the hold in the ``settle`` function, even past a limit or after the run ended.

Fail closed. A Redis error or a store that does not answer in time is
:class:`~diagnosis_harness.RunStoreUnavailable`: nothing was granted. Every write carries an
operation id the script remembers (:mod:`._ops`), so a write sent again -- by the store after a
lost connection, or as the id a reservation without an answer leaves to the next one like it --
is applied once. A usage report the store did not acknowledge is kept and sent again, with the
same id, before this process's next operation on the run.
"""

from __future__ import annotations

import contextlib
import threading
from types import MappingProxyType
from typing import TYPE_CHECKING, final

import redis

from .._boundary import Boundary
from .._cancellation import CancelSignal
from .._endings import CANCELLED, FinishResult, RunTermination, ending_of_cancel, error_for
from .._errors import RunStoreConflict, RunStoreUnavailable, UnknownRun
from .._generated.tables import BudgetState, LifecycleEvent, RunState
from .._limits import BudgetDimension, BudgetUsage
from ._ops import OperationIds
from ._protocol import STATUS_FIELDS, Created, Held, Passed, Status, Tree, Unknown, status_of
from ._run_keys import RunKeys
from ._stored import LUA_EXACT, cost_units, limits_of, run_fields

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._cancellation import CallbackErrorHandler, CancellationCallback
    from .._clock import Clock
    from .._endings import CancellationReason
    from .._limits import BudgetLimits
    from ._bounded import Bound
    from ._link import StoreLink
    from ._protocol import Answer, TreeRun
    from ._store import RedisRunStore

__all__ = ["LUA_EXACT", "RedisRun"]


@final
class RedisRun:
    """One run's owner in this process; implements :class:`~._backend.RunBackend`. Thread-safe.

    Fixed when made: the store (and its link), the keys, ``limits``, ``offset`` (this process's
    clock onto the tree's timeline), the clock, ``_path`` (the run's ancestors, parent first, root
    last: empty for a root), ``_priced`` (it or an ancestor has a money limit). Under ``_lock``:
    ``_signal`` (this process's callbacks). Set once and never changed: ``_termination`` (read
    from the store), ``_delivered`` (this process's callbacks have run). ``_unsent``, under
    ``_unsent_lock``: usage reports to send again. ``_ids``: the operation ids of this owner's
    writes (thread-safe itself).
    """

    __slots__ = (
        "__weakref__",
        "_clock",
        "_delivered",
        "_deliverer",
        "_expire_after_ms",
        "_ids",
        "_keys",
        "_limits",
        "_link",
        "_lock",
        "_offset",
        "_path",
        "_priced",
        "_signal",
        "_store",
        "_termination",
        "_unsent",
        "_unsent_lock",
        "deadline_ns",
    )

    def __init__(
        self,
        *,
        link: StoreLink,
        keys: RunKeys,
        limits: BudgetLimits,
        deadline_ns: int,
        offset: int,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
        store: RedisRunStore,
        path: tuple[str, ...],
        priced: bool,
        expire_after_ms: int,
    ) -> None:
        self._link = link
        self._store = store
        self._path = path
        self._priced = priced
        self._expire_after_ms = expire_after_ms  # how long a child's index outlives its deadline
        self._keys = keys
        self._limits = limits
        self.deadline_ns = deadline_ns  # the stored instant on this process's clock
        self._offset = offset
        self._clock = clock
        self._lock = threading.Lock()
        self._signal = CancelSignal(on_callback_error)
        self._termination: RunTermination | None = None
        self._delivered = threading.Event()
        self._deliverer: int | None = None  # the thread that runs this process's callbacks
        self._ids = OperationIds()
        self._unsent: list[tuple[str, int, int, int]] = []  # (op id, in, out, run time)
        self._unsent_lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._keys.run_id

    @property
    def parent_run_id(self) -> str | None:
        return self._path[0] if self._path else None

    @property
    def priced(self) -> bool:
        return self._priced

    @property
    def store(self) -> RedisRunStore:
        return self._store

    @property
    def limits(self) -> BudgetLimits:
        return self._limits

    def create_child(
        self,
        *,
        run_id: str,
        limits: BudgetLimits,
        deadline_ns: int,
        on_callback_error: CallbackErrorHandler,
    ) -> RedisRun:
        """Publish a child of this run in its tree and return its owner in this process.

        Two steps, as the child's ID and its tree are two slots: the ID is *claimed* under its
        own hash tag (``claim.lua``: an index naming the root, refused if a root or a child of
        any tree holds the ID), then the child is written under the root's tag
        (``create_child.lua``: refused, and the claim dropped, if this run has ended). Both carry
        one operation id, which a creation the store did not answer leaves to the next creation
        of the same ID: sent again, each step finds its own work done. A process that stops
        between the two leaves the claim alone: the ID stays taken -- and an attach by it finds
        no run -- until the claim expires, the child's deadline plus the store's
        ``expire_after`` after it was made. :class:`RunStoreConflict` for a taken ID; this run's
        ``RunTerminated`` once it has ended; ValueError for a number the functions cannot keep.
        """
        keys = RunKeys.of(self._keys.namespace, run_id, self._keys.root_id)
        fields = run_fields(limits)  # ValueError before anything is sent
        deadline_ns = min(deadline_ns, self.deadline_ns)
        bound = self._bound()
        left_ms = -(-(deadline_ns - self._clock.monotonic_ns()) // 1_000_000)  # rounded up
        write = ("create_child", run_id)
        op_id = self._ids.take(write)
        claim = keys.claim
        try:
            claimed = self._link.call(
                "claim",
                claim,
                [claim.channel, op_id, 0, keys.root_id, max(0, left_ms) + self._expire_after_ms,
                 "claim"],
                bound,
            )  # fmt: skip
            if claimed == Created("exists"):
                raise RunStoreConflict(
                    self._link.name, f"run {run_id!r} exists already in the store"
                )
            answer = self._link.call(
                "create_child",
                keys,
                [keys.channel, op_id, self._clock.monotonic_ns() + self._offset, self.run_id,
                 deadline_ns + self._offset, *fields],
                bound,
            )  # fmt: skip
        except redis.RedisError as error:
            self._ids.unanswered(write, op_id)
            raise self._link.unavailable(f"create of child run {run_id!r}", error) from error
        if answer != Created("ok"):
            with contextlib.suppress(redis.RedisError):  # else the claim expires by itself
                self._link.call("claim", claim, [claim.channel, op_id, 0, "", 0, "release"])
            if isinstance(answer, Unknown):
                raise self._link.unknown(self.run_id)
            if isinstance(answer, Status):  # this run has ended: its ending is the refusal
                self._learn(answer)
                termination = self._termination
                assert termination is not None  # the status shows the ending
                raise error_for(termination, None, answer.exhausted)
            raise RunStoreConflict(self._link.name, f"run {run_id!r} exists already in the store")
        child = RedisRun(
            link=self._link,
            keys=keys,
            limits=limits,
            deadline_ns=deadline_ns,
            offset=self._offset,  # one timeline for the tree
            clock=self._clock,
            on_callback_error=on_callback_error,
            store=self._store,
            path=(self.run_id, *self._path),
            priced=self._priced or limits.cost is not None,
            expire_after_ms=self._expire_after_ms,
        )
        self._link.watch(keys.channel, child)  # the listener reads it once subscribed
        return child

    @property
    def ending_delivered(self) -> bool:
        """This process has learned of the run's ending and run its callbacks."""
        return self._delivered.is_set()

    @property
    def state(self) -> RunState:
        termination = self.termination
        return RunState.RUNNING if termination is None else termination.state

    @property
    def termination(self) -> RunTermination | None:
        if self._termination is None:
            self.refresh()
        return self._termination

    @property
    def reason(self) -> CancellationReason | None:
        if self._signal.reason is None:
            self.refresh()
        return self._signal.reason

    @property
    def budget_state(self) -> BudgetState:
        return self._learn(self._read()).budget

    @property
    def exhausted(self) -> BudgetDimension | None:
        return self._learn(self._read()).exhausted

    def snapshot(self) -> BudgetUsage:
        """Every counter of the run, of each descendant (``children``) and the ancestors'
        room (``capped_by``), read in one function call (``tree.lua``)."""
        answer = self._run("tree")
        assert isinstance(answer, Tree)  # its one answer but Unknown, which _script raises
        self._learn(answer.runs[0].snapshot.status)
        return _usage_of(answer.runs)

    def refresh(self) -> None:
        """Read the run's stored state; an ending read here runs this process's callbacks."""
        self._learn(self._read())

    def refresh_from_listener(self) -> None:
        """The listener's :meth:`refresh`, read in the listener's thread: never raises. A run
        gone from the store is not watched any more: nothing will be published on its channel."""
        try:
            self._learn(self._read(in_this_thread=True))
        except RunStoreUnavailable:
            return  # the listener re-reads on its next connection; the operations read anyway
        except UnknownRun:
            self._link.forget(self._keys.channel, self)

    # -- the gate and the reservations ----------------------------------------------------------

    def check(self, boundary: Boundary, now_ns: int) -> None:
        self._decide(boundary, self._run("check", now_ns, boundary.name))

    def reserve_model_call(self, now_ns: int, hold: int = 0, least: int | None = None) -> int:
        self._check_hold(hold)
        if least is None:
            self._decide(Boundary.MODEL, self._run("reserve_model_call", now_ns, hold, grant=True))
            return hold
        # A partial hold: the function holds what the money left pays for, at least ``least``,
        # and answers the amount (Held), the same amount to a call sent again with the same id.
        answer = self._run("reserve_model_call", now_ns, hold, least, grant=True)
        self._decide(Boundary.MODEL, answer)
        assert isinstance(answer, Held)  # _decide raised for every other answer
        return answer.held

    def reserve_tool_call(self, tool: str, now_ns: int, hold: int = 0) -> None:
        self._check_hold(hold)
        answer = self._run("reserve_tool_call", now_ns, tool, repr(tool), hold, grant=True)
        self._decide(Boundary.TOOL, answer)

    def _check_hold(self, hold: int) -> None:
        """Refuse a hold the functions could not keep exactly: only without a money limit, as
        a hold above the limit (below 2**53, the store's check) is the limit's refusal."""
        if hold >= LUA_EXACT and not self._priced:
            raise ValueError(
                f"max_cost must be below 2**53 picodollars ($9,007.199254740992) in a "
                f"RedisRunStore, got {hold} picodollars"
            )

    def reserve_bytes(self, n: int, now_ns: int) -> None:
        self._decide(Boundary.CAPACITY, self._run("reserve_bytes", now_ns, n, grant=True))

    def record_token_usage(self, input_tokens: int, output_tokens: int, now_ns: int) -> None:
        _check_tokens(input_tokens, output_tokens)
        bound = self._bound()
        with self._locked(self._unsent_lock, bound, "record_token_usage"):
            run_time = now_ns + self._offset
            self._unsent.append((self._ids.new(), input_tokens, output_tokens, run_time))
        self._flush(bound)  # raises RunStoreUnavailable while the store does not answer

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
        """Release ``hold`` and record ``cost`` and the tokens in the store's ``settle``
        function, one step; past a limit it ends the run there, and this call takes the ending
        in (runs this process's callbacks) without raising for it.

        Bounded like every operation (at least the grace after the deadline). A settle the store
        did not answer raises :class:`RunStoreUnavailable` -- the caller's ``CallHold`` stays
        unsettled -- and leaves its operation id to the next settle of the same arguments (the
        caller settling that hold again): applied already, it is not applied twice. Two holds
        settled with the same arguments are interchangeable in the counters they move.
        """
        if cost >= LUA_EXACT:  # a settle the store could not add exactly is refused whole
            raise ValueError(
                f"cost must be below 2**53 picodollars ($9,007.199254740992) in a "
                f"RedisRunStore, got {cost} picodollars"
            )
        _check_tokens(input_tokens, output_tokens)
        answer = self._run(
            "settle",
            now_ns,
            boundary.name,
            hold,
            cost,
            input_tokens,
            output_tokens,
            grant=True,  # its id goes to the same settle asked again
        )
        self._ended(answer)

    # -- endings --------------------------------------------------------------------------------

    def finish(self, event: LifecycleEvent, reason: str) -> FinishResult:
        answer = self._ended(self._run("finish", self._clock.monotonic_ns(), event.value, reason))
        termination = self._termination
        assert termination is not None  # set by this ending or an earlier one
        return FinishResult(changed=answer.code == "ended_now", termination=termination)

    def cancel(self, reason: CancellationReason) -> bool:
        ending = ending_of_cancel(reason)
        answer = self._run(
            "cancel",
            self._clock.monotonic_ns(),
            reason.value,
            ending.event.value,
            CANCELLED.format(reason=reason.name),
        )
        return self._ended(answer).code == "ended_now"

    def register(self, callback: CancellationCallback) -> int | None:
        self.refresh()  # a run that ended elsewhere runs the callback inside register()
        return self._signal.register(self._lock, callback)

    def unregister(self, key: int) -> bool:
        return self._signal.unregister(self._lock, key)

    # -- talking to the store -------------------------------------------------------------------

    def _bound(self) -> Bound:
        """How long an operation beginning now waits for the store (see :mod:`._bounded`)."""
        return self._link.bound(self.deadline_ns - self._clock.monotonic_ns())

    @contextlib.contextmanager
    def _locked(self, lock: threading.Lock, bound: Bound, what: str) -> Iterator[None]:
        """Hold ``lock``, waited for within ``bound``: the thread holding it may be waiting for
        a store that does not answer."""
        if not lock.acquire(timeout=max(0.0, bound.left())):
            raise self._link.unavailable(
                f"{what} on run {self._keys.run_id!r}",
                redis.TimeoutError(
                    f"another thread's usage report waited for the store longer than "
                    f"{bound.seconds:.3g} s ({bound.why})"
                ),
            )
        try:
            yield
        finally:
            lock.release()

    def _run(
        self, operation: str, now_ns: int = 0, *args: str | int, grant: bool = False
    ) -> Answer:
        """Send what is unsent, then run ``operation``'s script: its answer.

        A grant (or a settle) that got no answer leaves its id to the next one like it
        (:mod:`._ops`).
        """
        bound = self._bound()
        if self._unsent:
            self._flush(bound)
        write = (operation, *args)
        op_id = self._ids.take(write) if grant else self._ids.new()
        try:
            return self._script(operation, op_id, now_ns + self._offset, *args, bound=bound)
        except RunStoreUnavailable:
            if grant:
                self._ids.unanswered(write, op_id)
            raise

    def _script(
        self, operation: str, op_id: str, run_time: int, *args: str | int, bound: Bound
    ) -> Answer:
        """``operation``'s answer, decoded; :class:`UnknownRun` for a run the store lacks."""
        try:
            answer = self._link.call(
                operation, self._keys, [self._keys.channel, op_id, run_time, *args], bound
            )
        except redis.RedisError as error:
            raise self._link.unavailable(
                f"{operation} on run {self._keys.run_id!r}", error
            ) from error
        if isinstance(answer, Unknown):
            raise self._link.unknown(self._keys.run_id)
        return answer

    def _flush(self, bound: Bound) -> None:
        """Send every usage report not yet acknowledged, in order, each with its own id.

        What the answers say is taken in after the lock is released: a callback an ending runs
        may report usage itself.
        """
        answers: list[Answer] = []
        try:
            with self._locked(self._unsent_lock, bound, "record_token_usage"):
                while self._unsent:
                    op_id, input_tokens, output_tokens, run_time = self._unsent[0]
                    answers.append(
                        self._script(
                            "record_token_usage",
                            op_id,
                            run_time,
                            input_tokens,
                            output_tokens,
                            bound=bound,
                        )
                    )
                    self._unsent.pop(0)
        finally:
            for answer in answers:
                self._ended(answer)

    def _read(self, *, in_this_thread: bool = False) -> Status:
        """The run's stored state, as a script's status (one command: atomic). Bounded as every
        operation is, or, ``in_this_thread`` (the listener's), by the store's timeout."""
        bound = None if in_this_thread else self._bound()
        try:
            values = self._link.read(self._keys.run, STATUS_FIELDS, bound)
        except redis.RedisError as error:
            raise self._link.unavailable(f"read of run {self._keys.run_id!r}", error) from error
        status = status_of(values)
        if isinstance(status, Unknown):
            raise self._link.unknown(self._keys.run_id)
        return status

    # -- what an answer says --------------------------------------------------------------------

    def _ended(self, answer: Answer) -> Status:
        """The status an operation that answers one (an ending, a usage report) got, taken in."""
        assert isinstance(answer, Status)  # what ANSWERS declares for those operations
        return self._learn(answer)

    def _learn(self, status: Status) -> Status:
        """Take in the state ``status`` carries: an ending runs this process's callbacks.

        Only a status that shows the ending delivers it, with the reason it carries: a status
        read before the ending (the listener's, say) may arrive after another thread took the
        ending in, and carries no reason; that thread delivers.
        """
        if status.state is RunState.RUNNING:
            return status
        if self._termination is None:
            assert status.at is not None  # set with the ending, in the same step
            at_ns = status.at - self._offset
            termination = RunTermination(status.state, status.reason, at_ns, status.boundary)
            with self._lock:
                if self._termination is None:
                    self._termination = termination
        if not self._delivered.is_set():
            assert status.signal is not None  # set with the ending, in the same step
            self._deliver(status.signal, ended_now=False)
        if status.code == "ended_now":
            self._await_delivery()
            self._refresh_ancestors()
        return status

    def _deliver(self, reason: CancellationReason, *, ended_now: bool) -> None:
        with self._lock:
            pending = self._signal.signal(reason)
            if pending is not None:
                self._deliverer = threading.get_ident()
        if pending is not None:
            try:
                self._deliver_descendants()
                self._signal.deliver(pending, reason)
            finally:
                self._delivered.set()
                self._link.forget(self._keys.channel, self)  # the listener has no more to do
        elif ended_now:
            self._await_delivery()

    def _tree_owners(self) -> list[RedisRun]:
        """The other owners in this process of runs of this run's tree that have not learned of
        their run's ending yet (those the store's listener watches)."""
        root = self._keys.root_id
        return [
            owner
            for owner in self._link.owners()
            if owner is not self and owner._keys.root_id == root  # noqa: SLF001 - same class
        ]

    def _deliver_descendants(self) -> None:
        """Before this run's callbacks, its descendants' in this process, deepest first: each has
        ended with it (an ended run has no live descendant), so a read delivers it, and its
        callbacks have run when this returns, whichever thread runs them."""
        below = [
            owner
            for owner in self._tree_owners()
            if self.run_id in owner._path  # noqa: SLF001 - same class
        ]
        below.sort(key=lambda owner: -len(owner._path))  # noqa: SLF001 - same class
        for owner in below:
            owner.refresh_from_listener()
            if owner.ending_delivered or owner._termination is not None:  # noqa: SLF001
                owner._await_delivery()  # noqa: SLF001 - same class

    def _refresh_ancestors(self) -> None:
        """After an operation of this owner ended its run: the owners in this process of its
        ancestors re-read theirs, nearest first -- a reservation or a usage report may have
        ended them too (an ancestor's limit), and their callbacks then run before this returns
        (each after its own descendants')."""
        if not self._path:
            return
        owners = self._tree_owners()
        for ancestor in self._path:
            for owner in owners:
                if owner.run_id == ancestor:
                    owner.refresh_from_listener()

    def _await_delivery(self) -> None:
        """The caller whose operation ended the run returns after the callbacks ran."""
        if self._deliverer != threading.get_ident():
            self._delivered.wait()

    def _decide(self, boundary: Boundary, answer: Answer) -> None:
        if isinstance(answer, (Passed, Held)):
            now_ns = self._clock.monotonic_ns()
            if now_ns < self.deadline_ns:
                return
            # Granted before the deadline, answered after it: the work would start late. The
            # gate, read now, times the run out (the reservation stays counted, unused).
            answer = self._run("check", now_ns, boundary.name)
            if isinstance(answer, Passed):  # pragma: no cover - live() is false past the deadline
                raise AssertionError(f"the store passed {boundary.name} past the deadline")
        status = self._ended(answer)
        termination = self._termination
        assert termination is not None
        raise error_for(termination, boundary, status.exhausted)

    def __repr__(self) -> str:
        return f"RedisRun(run_id={self._keys.run_id!r}, store={self._link.name})"


_ROOM_DIMENSIONS: tuple[BudgetDimension, ...] = (
    BudgetDimension.MODEL_CALLS,
    BudgetDimension.TOOL_CALLS,
    BudgetDimension.INPUT_TOKENS,
    BudgetDimension.OUTPUT_TOKENS,
    BudgetDimension.TOTAL_TOKENS,
    BudgetDimension.RUN_BYTES,
)


def _rooms(entry: TreeRun) -> dict[BudgetDimension, int]:
    """What a run's own limits leave, per limit (``COST`` only with a money limit), as the run
    in one process counts them (``LocalRun._rooms_locked``)."""
    limits = limits_of(entry.limits)
    s = entry.snapshot
    used = {
        BudgetDimension.MODEL_CALLS: s.model_calls,
        BudgetDimension.TOOL_CALLS: s.tool_calls,
        BudgetDimension.INPUT_TOKENS: s.input_tokens,
        BudgetDimension.OUTPUT_TOKENS: s.output_tokens,
        BudgetDimension.TOTAL_TOKENS: s.input_tokens + s.output_tokens,
        BudgetDimension.RUN_BYTES: s.run_bytes,
    }
    rooms = {d: getattr(limits, d.value) - used[d] for d in _ROOM_DIMENSIONS}
    money = cost_units(limits)
    if money is not None:
        rooms[BudgetDimension.COST] = money - s.cost - s.cost_held
    return rooms


def _usage_of(runs: tuple[TreeRun, ...]) -> BudgetUsage:
    """The first run's usage from a tree read: its counters, each descendant's (``children``,
    recursively, oldest first) and, for each run, ``capped_by``: per limit, the ancestor whose
    room is the least and below the run's own (the nearest on a tie)."""
    by_id = {entry.run_id: entry for entry in runs}
    children: dict[str, list[str]] = {}
    for entry in runs[1:]:
        if entry.parent is not None:
            children.setdefault(entry.parent, []).append(entry.run_id)
    rooms: dict[str, dict[BudgetDimension, int]] = {}

    def rooms_of(run_id: str) -> dict[BudgetDimension, int]:
        if run_id not in rooms:
            rooms[run_id] = _rooms(by_id[run_id])
        return rooms[run_id]

    def capped_by(entry: TreeRun) -> dict[BudgetDimension, str]:
        if entry.parent is None:
            return {}
        least = dict(rooms_of(entry.run_id))
        capped: dict[BudgetDimension, str] = {}
        ancestor: str | None = entry.parent
        while ancestor is not None:
            for dimension, room in rooms_of(ancestor).items():
                if dimension not in least or room < least[dimension]:
                    least[dimension] = room
                    capped[dimension] = ancestor
            ancestor = by_id[ancestor].parent
        return capped

    def usage(run_id: str) -> BudgetUsage:
        entry = by_id[run_id]
        s = entry.snapshot
        return BudgetUsage(
            model_calls=s.model_calls,
            tool_calls=s.tool_calls,
            per_tool_calls=s.per_tool,
            input_tokens=s.input_tokens,
            output_tokens=s.output_tokens,
            total_tokens=s.input_tokens + s.output_tokens,
            run_bytes=s.run_bytes,
            exhausted=s.exhausted,
            cost_units=s.cost,
            cost_held_units=s.cost_held,
            children=MappingProxyType({c: usage(c) for c in children.get(run_id, ())}),
            capped_by=MappingProxyType(capped_by(entry)),
        )

    return usage(runs[0].run_id)


def _check_tokens(input_tokens: int, output_tokens: int) -> None:
    """Refuse, whole and before anything is sent, tokens the store could not add exactly."""
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if value >= LUA_EXACT:
            raise ValueError(f"{name} must be below 2**53 in a RedisRunStore, got {value}")
