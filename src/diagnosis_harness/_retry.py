"""``HarnessRetryExecutor``: typed, bounded retries that record every actual attempt.

Theory of operation. One ``execute`` walks one instance of the generated retry table
(``model/retry.toml``): the gate ``ctx.check(Boundary.RETRY)`` before every attempt (``attempt`` or
``stop``), the attempt, then ``succeed`` or ``fail`` with the guard ``retry_allowed`` -- the
failure's kind is retryable under the policy and attempts remain. Each actual invocation of the
operation becomes one :class:`AttemptRecord`; each execution one :class:`ExecutionRecord` that
also says why the loop stopped. A run that is over at the gate stops the loop: the gate's
``RunTerminated`` propagates and the operation is not invoked again.

The decisions are written once, in :class:`_Execution`, a step machine that the sync loop of
``execute`` and the async loop of ``execute_async`` both drive: the loops only call the operation
and wait between attempts, so a rule changed there changes for both.

What is never a failure to retry: ``RunTerminated`` (its kind is recorded, it is re-raised), and
``BaseException``s that are not ``Exception`` -- ``asyncio.CancelledError``, ``KeyboardInterrupt``,
``SystemExit`` -- which are recorded as ``INTERRUPTED`` and propagate at once. Unclassified
exceptions are ``UNKNOWN`` and never retried: nobody knows that asking again is safe. An attempt
the run's end left running in a thread (it raised :class:`AttemptAbandoned`) is recorded as
``ABANDONED``, and the run's ending is raised: the loop stops there, as at a gate that refuses.

On final failure the operation's own exception is re-raised, with the execution record attached as
``error.harness_execution`` (and as a note on Python 3.11+), never hidden in a wrapper.
"""

from __future__ import annotations

import contextlib
import enum
import math
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import CoroutineType, FunctionType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast, final

from ._boundary import Boundary
from ._context import RunContext
from ._endings import ENDINGS
from ._errors import IllegalTransition, RunTerminated
from ._failure import FailureKind, HarnessFailure
from ._generated.tables import RETRY, RetryEvent, RetryState
from ._retry_policy import RetryPolicy

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

    from ._endings import RunTermination

__all__ = [
    "AttemptAbandoned",
    "AttemptOutcome",
    "AttemptRecord",
    "Backoff",
    "Classifier",
    "ExecutionRecord",
    "HarnessRetryExecutor",
    "StopReason",
]

P = ParamSpec("P")
T = TypeVar("T")

Classifier = Callable[[Exception], "FailureKind | None"]
"""Maps an SDK's exception to a :class:`FailureKind`; ``None`` means "not mine" (UNKNOWN)."""


_Step = tuple[str, str, "bool | None"]  # (state name, event value, the guard's value or None)


def _steps() -> dict[_Step, str]:
    """Every legal step of the generated retry table, as the one engine takes it, by names.

    Asked of ``MachineTable.take`` once, for every (state, event, guard) from a state that is not
    terminal: the table alone says where an event leads. An execution then steps with one dict
    lookup on ``str``s, whose hashes are cached, where an enum member hashes in Python code. A
    step that is missing here is one the table has no row for: a ``KeyError`` is the bug's report.
    """
    steps: dict[_Step, str] = {}
    for state in RetryState:
        if state in RETRY.terminal:
            continue
        for event in RetryEvent:
            for guard in (None, True, False):
                try:
                    row = RETRY.take(state, event, guard)
                except IllegalTransition:
                    continue
                assert row is not None  # only a terminal state absorbs an event
                steps[state.name, event.value, guard] = row.target.name
    return steps


_NEXT = _steps()
_INITIAL = RETRY.initial.name
_ATTEMPT, _SUCCEED = RetryEvent.ATTEMPT.value, RetryEvent.SUCCEED.value
_FAIL, _STOP = RetryEvent.FAIL.value, RetryEvent.STOP.value
_RETRY = Boundary.RETRY
# inspect.CO_COROUTINE, a code flag fixed since Python 3.5: asyncio, inspect and random are
# imported where they are used (the async paths, a jitter), so that a sync user never pays for them.
_CO_COROUTINE = 0x80


class AttemptOutcome(enum.Enum):
    """How one actual invocation of the operation ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    """A ``BaseException`` that is not an ``Exception`` (task cancelled, Ctrl-C, exit) ended it."""
    ABANDONED = "abandoned"
    """The run ended while it ran in a thread, which cannot be stopped: nobody waits for it any
    more, and what it returns is discarded. Its failure kind is the run's ending's."""


_SUCCEEDED = AttemptOutcome.SUCCEEDED.name
_FAILED = AttemptOutcome.FAILED.name
_INTERRUPTED = AttemptOutcome.INTERRUPTED.name
_ABANDONED = AttemptOutcome.ABANDONED.name


@final
class AttemptAbandoned(Exception):
    """Raised by an attempt that the run's ``ending`` left running in a thread.

    The executor records the attempt ``ABANDONED`` and raises ``ending`` (never this exception),
    with the execution attached: the caller sees the run's ``RunTerminated``, as from a gate.
    """

    def __init__(self, ending: RunTerminated) -> None:
        super().__init__(f"attempt abandoned in its thread: {ending}")
        self.ending = ending


class StopReason(enum.Enum):
    """Why an execution's loop stopped."""

    SUCCEEDED = "succeeded"
    NOT_RETRYABLE = "not_retryable"
    """The failure's kind is not in the policy's retryable kinds."""
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    """A retryable failure on the policy's last permitted attempt."""
    RUN_TERMINATED = "run_terminated"
    """The run was over: at the gate before an attempt (the operation was not invoked again), or
    while an attempt ran in a thread, which was abandoned (its outcome is ``ABANDONED``)."""
    INTERRUPTED = "interrupted"
    """The operation raised a ``BaseException`` that is not an ``Exception``."""


_STOP_SUCCEEDED = StopReason.SUCCEEDED.name


@final
@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One actual invocation: numbered from 1, with the run clock's timestamps."""

    policy: str
    number: int
    outcome: AttemptOutcome
    failure: FailureKind | None
    started_ns: int
    ended_ns: int


@final
@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """One ``execute``: its attempts, why it stopped, and the run's termination if that was why.

    ``subject`` names what was executed (``Tool 'lookup'`` for a governed Tool call), or is
    ``None`` when the caller gave no name (:meth:`HarnessRetryExecutor.execute`).
    """

    policy: str
    attempts: tuple[AttemptRecord, ...]
    stop: StopReason
    state: RetryState
    termination: RunTermination | None = None
    subject: str | None = None

    def describe(self) -> str:
        """One line: ``harness retry [policy] subject: attempt 1 failed (KIND); ...; stop: X``."""
        parts = [
            f"attempt {a.number} {a.outcome.value}"
            + (f" ({a.failure.name})" if a.failure is not None else "")
            for a in self.attempts
        ]
        attempts = "; ".join(parts) or "no attempt"
        what = f"[{self.policy}]" if self.subject is None else f"[{self.policy}] {self.subject}"
        return f"harness retry {what}: {attempts}; stop: {self.stop.name}"


# Executions are kept raw and turned into ExecutionRecords when read (docs/performance.md says
# why). A raw execution is one flat tuple of str, int and None, enum members by name: (policy,
# subject, stop, state, termination), then (number, outcome, failure, started_ns, ended_ns) for
# each attempt. The cyclic GC stops tracking such a tuple at its first collection, so a long history
# costs it nothing. A termination keeps its record tracked, which is fine: a run ends once.
_Field = int | str | None
_RawExecution = tuple["_Field | RunTermination", ...]


def _materialize(raw: _RawExecution) -> ExecutionRecord:
    policy, subject, stop, state, termination = cast(
        "tuple[str, str | None, str, str, RunTermination | None]", raw[:5]
    )
    fields = cast("Iterator[Any]", iter(raw[5:]))
    attempts = tuple(
        AttemptRecord(
            policy,
            number,
            AttemptOutcome[outcome],
            None if failure is None else FailureKind[failure],
            started,
            ended,
        )
        for number, outcome, failure, started, ended in zip(
            fields, fields, fields, fields, fields, strict=True
        )
    )
    return ExecutionRecord(
        policy, attempts, StopReason[stop], RetryState[state], termination, subject
    )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Delay before retry ``n`` (from 1): ``min(maximum, initial * multiplier ** (n - 1))``.

    ``jitter`` in [0, 1] subtracts a random fraction of up to that share. The wait never passes the
    run's deadline and ends at once on cancellation; a zero delay makes no wait call at all.
    """

    initial: float = 0.0
    multiplier: float = 2.0
    maximum: float = 30.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        for name in ("initial", "multiplier", "maximum", "jitter"):
            value = getattr(self, name)
            if type(value) not in (int, float):
                raise TypeError(f"{name} must be a number (int or float, not bool), got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")
        if self.jitter > 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter!r}")

    def delay(self, retry: int) -> float:
        try:
            grown = self.initial * self.multiplier ** (retry - 1)
        except OverflowError:  # a large retry number: saturate instead of failing the attempt
            grown = math.inf if self.initial else 0.0
        base = min(self.maximum, grown)
        if self.jitter and base:
            import random  # noqa: PLC0415 - lazy: only a jitter draws

            base -= base * self.jitter * random.random()
        return base


def _subject(subject: object) -> str:
    """``subject`` if it can name what an execution ran, else a clear error."""
    if type(subject) is not str:
        raise TypeError(f"subject must be a str naming what is executed, got {subject!r}")
    if not subject.strip():
        raise ValueError(
            f"subject must be a non-blank str naming what is executed, got {subject!r}"
        )
    return subject


def _is_coroutine_function(fn: Callable[..., object]) -> bool:
    """``inspect.iscoroutinefunction(fn)``, answered without it for a plain ``def`` or lambda.

    For a function (not a method or partial) inspect reads only the code's flags and, on 3.12+,
    a marker attribute, which lives in the function's ``__dict__``: an empty one has none.
    """
    if isinstance(fn, FunctionType) and not fn.__dict__:  # FunctionType has no subclasses
        return bool(fn.__code__.co_flags & _CO_COROUTINE)
    # Lazy: rarely needed, costly to import. (`import m` when m is loaded is a dict lookup; a
    # `from m import f` in a function costs ten times more.)
    import inspect  # noqa: PLC0415

    return inspect.iscoroutinefunction(fn)


def _awaitable(value: object) -> None:
    """Refuses what ``execute_async``'s ``fn`` returned if it cannot be awaited: a plain
    function ran, and the error says so plainly."""
    import inspect  # noqa: PLC0415 - lazy: see _is_coroutine_function

    if not inspect.isawaitable(value):
        raise TypeError(f"fn must return an awaitable, got {value!r}: use execute")


def _attach(error: BaseException, record: ExecutionRecord) -> None:
    """Attach the history to the operation's own exception, without wrapping it."""
    error.harness_execution = record  # type: ignore[attr-defined]  # the documented extra attribute
    if sys.version_info >= (3, 11):
        error.add_note(record.describe())


def _waits(ctx: RunContext, seconds: float) -> Generator[float, bool, None]:
    """The waits of one pause of ``seconds``, decided once for :func:`pause` and
    :func:`pause_async`, which only wait: each is sent whether its wait ended on cancellation.

    No single wait exceeds ``Deadline.MAX_WAIT_SECONDS``; one that ended on that cap (a far
    deadline, a huge delay) was neither, and is followed by a wait for the rest of the delay. The
    pause ends on a cancellation, when the delay passed, or when the deadline came: the next gate
    decides.
    """
    cap = ctx.deadline.MAX_WAIT_SECONDS
    left = seconds
    while left > 0:
        step = min(left, ctx.deadline.remaining_seconds(ctx.clock))  # <= cap
        if (yield step) or step < cap:
            return
        left -= step


def pause(ctx: RunContext, seconds: float) -> None:
    """Wait ``seconds``, never past the run's deadline, ending at once on cancellation."""
    waits = _waits(ctx, seconds)
    with contextlib.suppress(StopIteration):
        step = next(waits)
        while True:
            step = waits.send(ctx.cancellation.wait(step))


async def pause_async(ctx: RunContext, seconds: float) -> None:
    """:func:`pause` for asyncio: the same waits, without blocking the loop."""
    import asyncio  # noqa: PLC0415 - lazy: a sync user never imports asyncio

    waits = _waits(ctx, seconds)
    with contextlib.suppress(StopIteration):
        step = next(waits)
        while True:
            cancelled = False
            # asyncio.TimeoutError is not TimeoutError before Python 3.11.
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(ctx.cancellation.wait_async(), step)
                cancelled = True
            step = waits.send(cancelled)


def _classify(classifier: Classifier | None, error: Exception) -> FailureKind:
    """The kind recorded for an attempt that raised ``error`` (see
    :meth:`HarnessRetryExecutor.classify`, which answers with this)."""
    if isinstance(error, RunTerminated):
        return ENDINGS[error.termination.state].failure
    if isinstance(error, HarnessFailure):
        return error.kind
    if classifier is not None:
        kind = classifier(error)
        if kind is not None:
            if type(kind) is not FailureKind:
                raise TypeError(f"classifier returned {kind!r}, not a FailureKind or None")
            return kind
    return FailureKind.UNKNOWN


@final
class _Config:
    """What every execution of one executor reads: its run, clock, journal, backoff, classifier.

    Built once by the executor and never changed, so an execution holds one reference to it.
    It holds nothing that refers back to the executor (no bound method of it): the executor and
    its run are then freed by reference counting when the last user drops them, not left as a
    cycle -- a whole RunContext's objects -- for the cyclic GC to find (one per governed agent
    run, a measurable share of the pydantic-ai step's cost).
    """

    __slots__ = ("backoff", "classifier", "ctx", "keep", "now", "policies")

    def __init__(
        self,
        ctx: RunContext,
        keep: Callable[[_RawExecution], None],
        backoff: Backoff | None,
        classifier: Classifier | None,
    ) -> None:
        self.ctx = ctx  # whose gate (ctx.check, looked up each time) is asked before every attempt
        self.policies = ctx.retry_policies  # a run's field, never reassigned
        self.now = ctx.clock.monotonic_ns
        self.keep = keep
        self.backoff = backoff
        self.classifier = classifier


@final
class _Execution:
    """One execution's decisions, written once for the sync and the async loop; free of I/O.

    A loop drives it and does only the calling and the waiting: :meth:`attempt` before each
    attempt (the gate), then :meth:`succeeded` or :meth:`failed` -- which says whether to re-raise
    or how long to wait -- and :meth:`interrupted` if that wait is. Every step fires one event on
    the generated retry table from the current state (``_NEXT``, the engine's steps): where an
    event leads, and which events are legal, is the table's to say, not this class's.

    Invariants: ``_state`` was reached from ``RETRY.initial`` by table rows only; ``_number``
    attempts were begun, and each that ended has its five fields in ``_attempts`` (see
    ``_RawExecution``); the execution is kept in the journal exactly once, when it ends (a terminal
    state, or its wait interrupted). Owned by the one thread or task whose loop drives it: unlocked.
    """

    __slots__ = ("_attempts", "_config", "_number", "_policy", "_started", "_state", "_subject")

    def __init__(
        self,
        config: _Config,
        policy: RetryPolicy | str,
        fn: Callable[..., object],
        subject: str | None,
    ) -> None:
        """Refuses bad input before any gate: it is the caller's mistake, not the run's end."""
        if type(policy) is not RetryPolicy:
            if not isinstance(policy, str):
                raise TypeError(f"policy must be a RetryPolicy or a policy name, got {policy!r}")
            policy = config.policies[policy]
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self._config = config
        self._policy = policy
        self._subject = subject
        self._state = _INITIAL
        self._number = 0  # attempts begun
        self._started = 0  # the run clock when the current attempt began
        self._attempts: list[_Field] = []  # the ended attempts' fields, flat

    def attempt(self) -> None:
        """The gate before an attempt: the attempt begins, or the run's ``RunTerminated`` is
        raised with this execution (stopped) attached."""
        config = self._config
        try:
            config.ctx.check(_RETRY)
        except RunTerminated as stopped:
            stop = StopReason.RUN_TERMINATED
            self._end(stopped, stop, _NEXT[self._state, _STOP, None], stopped.termination)
            raise
        self._state = _NEXT[self._state, _ATTEMPT, None]
        self._number += 1
        self._started = config.now()

    def succeeded(self) -> None:
        """The attempt returned: the execution ends, kept in the journal."""
        config = self._config
        attempts = self._attempts
        attempts.extend((self._number, _SUCCEEDED, None, self._started, config.now()))
        ended = self._state = _NEXT[self._state, _SUCCEED, None]
        config.keep((self._policy.name, self._subject, _STOP_SUCCEEDED, ended, None, *attempts))

    def failed(self, error: BaseException) -> float | None:
        """The attempt raised ``error``: the delay before the next attempt, or ``None`` when the
        execution ended (kept, attached to ``error``) and ``error`` is to be re-raised.

        Raises instead of returning when what must propagate is not ``error``: the run's ending
        for an abandoned attempt, the classifier's own exception when it failed.
        """
        config = self._config
        if isinstance(error, AttemptAbandoned):  # the run ended first: raise its ending
            ending = error.ending
            kind = ENDINGS[ending.termination.state].failure
            self._record(_ABANDONED, kind)
            state = _NEXT[self._state, _FAIL, False]
            self._end(ending, StopReason.RUN_TERMINATED, state, ending.termination)
            raise ending from ending.__cause__
        if not isinstance(error, Exception):  # CancelledError, KeyboardInterrupt, SystemExit
            self._record(_INTERRUPTED, None)
            self._end(error, StopReason.INTERRUPTED, _NEXT[self._state, _FAIL, False])
            return None
        try:
            kind = _classify(config.classifier, error)
        except Exception as broken:  # a classifier bug: the attempt still happened; record it
            self._record(_FAILED, FailureKind.UNKNOWN)
            state = _NEXT[self._state, _FAIL, False]
            self._end(broken, StopReason.NOT_RETRYABLE, state)
            raise broken from error
        policy, number = self._policy, self._number
        allowed = policy.may_retry(kind, number)
        self._attempts.extend((number, _FAILED, kind.name, self._started, config.now()))
        self._state = _NEXT[self._state, _FAIL, allowed]
        if allowed:
            backoff = config.backoff
            return 0.0 if backoff is None else backoff.delay(number)
        stop = (
            StopReason.ATTEMPTS_EXHAUSTED if kind in policy.retryable else StopReason.NOT_RETRYABLE
        )
        self._end(error, stop, self._state)
        return None

    def interrupted(self, interrupt: BaseException) -> None:
        """A ``BaseException`` during the wait between attempts: the execution stops there."""
        self._end(interrupt, StopReason.INTERRUPTED, _NEXT[self._state, _STOP, None])

    def _record(self, outcome: str, kind: FailureKind | None) -> None:
        """The current attempt ended with ``outcome``: its fields join the execution's."""
        failure = None if kind is None else kind.name
        now = self._config.now()
        self._attempts.extend((self._number, outcome, failure, self._started, now))

    def _end(
        self,
        error: BaseException,
        stop: StopReason,
        state: str,
        termination: RunTermination | None = None,
    ) -> None:
        """The execution ended in ``state`` (a name) without a result: keep it, attached to
        ``error``."""
        self._state = state
        attempts = self._attempts
        raw = (self._policy.name, self._subject, stop.name, state, termination, *attempts)
        self._config.keep(raw)
        _attach(error, _materialize(raw))


@final
class HarnessRetryExecutor:
    """Runs operations under a :class:`RetryPolicy` for one run; the only place retries happen.

    ``classifier`` maps your SDK's exceptions to kinds (see ``diagnosis_harness.integrations``);
    ``backoff`` spaces retries (none by default). Thread-safe: concurrent executions are all
    recorded, in the order they end.

    The run's state is not the executor's: it asks the run's gate before every attempt. What it
    owns is its history, which only grows: ``_raw`` receives each execution as it ends (appended
    by the executing thread), and ``_executions`` holds the records built from them, in order,
    under ``_lock``. Each execution's decisions are an :class:`_Execution`'s, the same for
    :meth:`execute` and :meth:`execute_async`: their loops only call and wait.
    """

    __slots__ = ("_classifier", "_config", "_ctx", "_executions", "_lock", "_raw")

    def __init__(
        self,
        ctx: RunContext,
        *,
        classifier: Classifier | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        if type(ctx) is not RunContext:
            raise TypeError(f"ctx must be a RunContext, got {ctx!r}")
        if classifier is not None and not callable(classifier):
            raise TypeError(f"classifier must be callable, got {classifier!r}")
        if backoff is not None and type(backoff) is not Backoff:
            raise TypeError(f"backoff must be a Backoff, got {backoff!r}")
        self._ctx = ctx
        self._classifier = classifier
        # Raw executions (see _RawExecution) go to a deque, whose appends and pops are thread-safe
        # without a lock; _lock protects _executions and lets one reader at a time move the raw
        # executions there, in the order they ended.
        self._lock = threading.Lock()
        self._raw: deque[_RawExecution] = deque()
        self._executions: list[ExecutionRecord] = []
        self._config = _Config(ctx, self._raw.append, backoff, classifier)

    @property
    def attempts(self) -> tuple[AttemptRecord, ...]:
        """Every actual attempt of every execution, in order."""
        return tuple(a for e in self.executions for a in e.attempts)

    @property
    def executions(self) -> tuple[ExecutionRecord, ...]:
        """Every execution, in the order they ended."""
        with self._lock:
            raw, executions = self._raw, self._executions
            while raw:  # only readers pop, one at a time: what `raw` holds stays until popped
                executions.append(_materialize(raw.popleft()))
            return tuple(executions)

    def execute(
        self, policy: RetryPolicy | str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Call ``fn(*args, **kwargs)`` under ``policy`` (or the run's policy of that name).

        Returns the first successful attempt's result; re-raises the last attempt's own exception
        or the gate's ``RunTerminated``.
        """
        return self._execute(None, policy, fn, args, kwargs)

    def execute_named(
        self,
        subject: str,
        policy: RetryPolicy | str,
        fn: Callable[P, T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """:meth:`execute`, its :class:`ExecutionRecord` naming ``subject``: what ran, as the
        journal should say it (``Tool 'lookup'``). ``subject`` is a non-blank ``str``."""
        return self._execute(_subject(subject), policy, fn, args, kwargs)

    def _execute(
        self,
        subject: str | None,
        policy: RetryPolicy | str,
        fn: Callable[..., T],
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> T:
        execution = _Execution(self._config, policy, fn, subject)
        if _is_coroutine_function(fn):  # refused before the gate: bad input, not the run's end
            raise TypeError(f"fn must not be a coroutine function, got {fn!r}: use execute_async")
        while True:
            execution.attempt()
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:
                delay = execution.failed(error)
                if delay is None:
                    raise
                if delay > 0:
                    try:
                        pause(self._ctx, delay)
                    except BaseException as interrupt:  # Ctrl-C during the wait: keep the record
                        execution.interrupted(interrupt)
                        raise
                continue
            if isinstance(result, CoroutineType):  # an async function: its body never ran
                result.close()
                raise TypeError(f"{fn!r} returned a coroutine: use execute_async")
            execution.succeeded()
            return result

    async def execute_async(
        self,
        policy: RetryPolicy | str,
        fn: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``await fn(*args, **kwargs)`` under ``policy``; waits between attempts do not block."""
        return await self._execute_async(None, policy, fn, args, kwargs)

    async def execute_named_async(
        self,
        subject: str,
        policy: RetryPolicy | str,
        fn: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """:meth:`execute_async`, its :class:`ExecutionRecord` naming ``subject``."""
        return await self._execute_async(_subject(subject), policy, fn, args, kwargs)

    async def _execute_async(
        self,
        subject: str | None,
        policy: RetryPolicy | str,
        fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> T:
        execution = _Execution(self._config, policy, fn, subject)
        while True:
            execution.attempt()
            try:
                awaitable = fn(*args, **kwargs)
                if type(awaitable) is not CoroutineType:  # a coroutine needs no more checking
                    _awaitable(awaitable)
                result = await awaitable
            except BaseException as error:
                delay = execution.failed(error)
                if delay is None:
                    raise
                if delay > 0:
                    try:
                        await pause_async(self._ctx, delay)
                    except BaseException as interrupt:  # the task was cancelled during the wait
                        execution.interrupted(interrupt)
                        raise
                continue
            execution.succeeded()
            return result

    def classify(self, error: Exception) -> FailureKind:
        """The kind this executor records for an attempt that raised ``error``.

        A ``RunTerminated`` is its ending's kind, a ``HarnessFailure`` its own, anything else the
        classifier's answer (``UNKNOWN`` without one, or when it answers ``None``). Public so
        that an observer of the attempts (the OpenTelemetry spans) names the same kind.
        """
        return _classify(self._classifier, error)
