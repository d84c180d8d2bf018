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

Time. Redis holds every instant on the *run's timeline*: nanoseconds since the run was created,
on the Redis server's clock. Each process maps its own clock onto it once, when it creates or
attaches: ``offset = run_time_now - clock.monotonic_ns()``, with ``run_time_now`` read from the
server's ``TIME`` (halfway through the round trip). A boundary sends ``now_ns + offset``; the
deadline and every termination's ``at_ns`` come back as ``stored - offset``, on the process's own
clock. So all processes compare against one instant; a process's error is half a round trip plus
its clock's drift since it attached, and the hosts' wall clocks do not matter.

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
from typing import TYPE_CHECKING, Final, final

import redis

from .._boundary import Boundary
from .._cancellation import CancelSignal
from .._endings import CANCELLED, FinishResult, RunTermination, ending_of_cancel, error_for
from .._errors import RunStoreUnavailable, UnknownRun
from .._generated.tables import BudgetState, LifecycleEvent, RunState
from .._limits import BudgetUsage
from ._ops import OperationIds
from ._protocol import STATUS_FIELDS, Held, Passed, Snapshot, Status, Unknown, status_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._backend import RunStore
    from .._cancellation import CallbackErrorHandler, CancellationCallback
    from .._clock import Clock
    from .._endings import CancellationReason
    from .._limits import BudgetDimension, BudgetLimits
    from ._bounded import Bound
    from ._link import StoreLink
    from ._protocol import Answer
    from ._store import RedisRunStore, RunKeys

__all__ = ["RedisRun"]

LUA_EXACT: Final = 2**53
"""Lua numbers are doubles, exact for integers below this: every limit, count and amount of
money (picodollars) the functions compare or add stays below it."""


@final
class RedisRun:
    """One run's owner in this process; implements :class:`~._backend.RunBackend`. Thread-safe.

    Fixed when made: the store's link, the keys, ``limits``, ``offset`` (this process's clock onto
    the run's timeline), the clock. Under ``_lock``: ``_signal`` (this process's callbacks). Set
    once and never changed: ``_termination`` (read from the store), ``_delivered`` (this process's
    callbacks have run). ``_unsent``, under ``_unsent_lock``: usage reports to send again. ``_ids``:
    the operation ids of this owner's writes (thread-safe itself).
    """

    __slots__ = (
        "__weakref__",
        "_clock",
        "_delivered",
        "_deliverer",
        "_ids",
        "_keys",
        "_limits",
        "_link",
        "_lock",
        "_offset",
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
    ) -> None:
        self._link = link
        self._store = store
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
        return None  # run trees on Redis: not yet

    @property
    def priced(self) -> bool:
        return self._limits.cost is not None

    @property
    def store(self) -> RunStore:
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
        """Not yet: a run tree lives in one process for now."""
        raise NotImplementedError(
            f"run {self.run_id!r} lives in a RedisRunStore, which keeps no run trees yet: "
            "create the parent without store= to give it children"
        )

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
        answer = self._run("snapshot")
        assert isinstance(answer, Snapshot)  # its one answer but Unknown, which _script raises
        self._learn(answer.status)
        return BudgetUsage(
            model_calls=answer.model_calls,
            tool_calls=answer.tool_calls,
            per_tool_calls=answer.per_tool,
            input_tokens=answer.input_tokens,
            output_tokens=answer.output_tokens,
            total_tokens=answer.input_tokens + answer.output_tokens,
            run_bytes=answer.run_bytes,
            exhausted=answer.exhausted,
            cost_units=answer.cost,
            cost_held_units=answer.cost_held,
        )

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
        if hold >= LUA_EXACT and self._limits.cost is None:
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
        return status

    def _deliver(self, reason: CancellationReason, *, ended_now: bool) -> None:
        with self._lock:
            pending = self._signal.signal(reason)
            if pending is not None:
                self._deliverer = threading.get_ident()
        if pending is not None:
            try:
                self._signal.deliver(pending, reason)
            finally:
                self._delivered.set()
                self._link.forget(self._keys.channel, self)  # the listener has no more to do
        elif ended_now:
            self._await_delivery()

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


def _check_tokens(input_tokens: int, output_tokens: int) -> None:
    """Refuse, whole and before anything is sent, tokens the store could not add exactly."""
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if value >= LUA_EXACT:
            raise ValueError(f"{name} must be below 2**53 in a RedisRunStore, got {value}")
