"""What each process of the race tests does: attach to one run and act on it.

Started with the ``spawn`` start method (a fresh interpreter, as a worker on another host would
be), so each function takes only what pickles: the server's port, the store's namespace, the run
ID, and multiprocessing's own barriers, events and queues. Each returns what it saw on ``out``.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from diagnosis_harness import (
    Boundary,
    BudgetExhausted,
    CallHold,
    CancellationReason,
    ManualClock,
    RunContext,
    RunStoreUnavailable,
    RunTerminated,
)
from diagnosis_harness.pricing import from_units
from diagnosis_harness.redis import RedisRunStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier, Event

SESSION = "race-session"
_WAIT = 60.0  # seconds a worker waits for the others before the test fails (never a sleep)
_TRIES = 20  # see answered()

T = TypeVar("T")


def answered(call: Callable[[], T]) -> T:
    """``call()``, tried again while the store does not answer in time. Past the deadline an
    operation waits for the store only a grace of 0.25 s; eight processes started at once on a
    loaded 2-core machine can take longer. A user tries again the same way (nothing was
    granted); a stalled store would fail every try."""
    for _ in range(_TRIES - 1):
        try:
            return call()
        except RunStoreUnavailable:
            continue
    return call()


def attach(port: int, namespace: str, run_id: str, clock: Any = None) -> tuple[RunContext, Any]:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10.0)
    store = RedisRunStore(client, namespace=namespace)
    return RunContext.attach(session_id=SESSION, run_id=run_id, store=store, clock=clock), store


def termination_of(ctx: RunContext) -> tuple[str, str, int]:
    """The termination as every process must read it: state, reason, instant from the deadline."""
    termination = ctx.lifecycle.termination
    assert termination is not None
    return termination.state.name, termination.reason, termination.at_ns - ctx.deadline.instant_ns


def reserve_tools(
    *,
    port: int,
    namespace: str,
    run_id: str,
    worker: int,
    calls: int,
    tools: list[str],
    start: Barrier,
    out: Queue[Any],
) -> None:
    """``calls`` Tool-call reservations, cycling over ``tools``: how many of each were granted."""
    ctx, store = attach(port, namespace, run_id)
    granted = dict.fromkeys(tools, 0)
    refused = 0
    start.wait(_WAIT)
    for i in range(calls):
        tool = tools[(i + worker) % len(tools)]
        try:
            ctx.reserve_tool_call(tool)
        except RunTerminated:
            refused += 1
        else:
            granted[tool] += 1
    store.close()
    out.put((worker, granted, refused))


def _time_out(ctx: RunContext) -> bool:
    try:
        answered(lambda: ctx.check(Boundary.TOOL))  # at the deadline: raises
    except RunTerminated as error:
        return error.termination.state.name == "TIMED_OUT"
    return False


def _exhaust(ctx: RunContext) -> bool:
    try:
        ctx.reserve_model_call()  # the one Model call is used: raises, exhausting the budget
    except RunTerminated as error:
        return isinstance(error, BudgetExhausted) and "model_calls" in error.termination.reason
    return False


def _report_past_the_limit(ctx: RunContext) -> bool:
    with contextlib.suppress(RunTerminated):
        ctx.record_token_usage(input_tokens=1_000, output_tokens=0)
    termination = ctx.lifecycle.termination
    return termination is not None and "input_tokens" in termination.reason


def _cancel(reason: CancellationReason) -> Callable[[RunContext], bool]:
    return lambda ctx: ctx.cancellation.cancel(reason)


_WAYS_TO_END: dict[int, Callable[[RunContext], bool]] = {
    0: lambda ctx: ctx.lifecycle.succeed("the diagnosis is ready").changed,
    1: lambda ctx: ctx.lifecycle.fail("the Model answered nonsense").changed,
    2: _cancel(CancellationReason.USER_REQUESTED),
    3: _cancel(CancellationReason.CLIENT_DISCONNECTED),
    4: _time_out,  # its process's clock is at the deadline
    5: _exhaust,
    6: _report_past_the_limit,
    7: _cancel(CancellationReason.SHUTDOWN),
}
"""Each worker's way to end the run: whether its ending is the one recorded."""


def race_to_end(
    *,
    port: int,
    namespace: str,
    run_id: str,
    worker: int,
    start: Barrier,
    out: Queue[Any],
) -> None:
    """One way to end the run each, all at once: did this process's ending win, and what did it
    read? Its callback's calls are reported too (exactly one, with the stored reason)."""
    clock = ManualClock() if worker == 4 else None
    ctx, store = attach(port, namespace, run_id, clock)
    calls: list[CancellationReason] = []
    ran = threading.Event()

    def callback(reason: CancellationReason) -> None:
        calls.append(reason)
        ran.set()

    ctx.cancellation.register(callback)
    if clock is not None:  # this process's clock has passed the deadline; the others' have not
        clock.advance_ns(ctx.deadline.remaining_ns(clock))
    start.wait(_WAIT)
    try:
        won = _WAYS_TO_END[worker](ctx)
    except RunTerminated:
        won = False  # an ending came first, and this way to end raises it
    ran.wait(_WAIT)  # the listener, or an operation, delivers this process's callback
    read = answered(lambda: termination_of(ctx))
    answered(ctx.budget.snapshot)  # more reads of the ending: none may run the callback again
    store.close()
    out.put((worker, won, read, [reason.value for reason in calls]))


def await_cancel(
    *,
    port: int,
    namespace: str,
    run_id: str,
    worker: int,
    ready: Barrier,
    out: Queue[Any],
) -> None:
    """Register a callback, then do nothing with the run: the cancel must still reach it, once."""
    ctx, store = attach(port, namespace, run_id)
    calls: list[tuple[str, str]] = []
    ran = threading.Event()

    def callback(reason: CancellationReason) -> None:
        calls.append((threading.current_thread().name, reason.value))
        ran.set()

    ctx.cancellation.register(callback)
    ready.wait(_WAIT)  # every process has registered: the canceller may go
    delivered = ran.wait(_WAIT)
    with contextlib.suppress(RunTerminated):  # an operation that reads the ending again
        ctx.check(Boundary.TOOL)
    ctx.cancellation.register(lambda reason: calls.append(("inline", reason.value)))
    store.close()
    out.put((worker, delivered, calls))


def cancel_when_ready(
    *, port: int, namespace: str, run_id: str, ready: Barrier, out: Queue[Any]
) -> None:
    """Wait until every other process has registered, then cancel the run."""
    ctx, store = attach(port, namespace, run_id)
    mine: list[str] = []
    ctx.cancellation.register(lambda reason: mine.append(reason.value))
    ready.wait(_WAIT)
    won = ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    ran_before_return = list(mine)
    store.close()
    out.put(("canceller", won, ran_before_return))


def _settle(hold: CallHold, units: int, rng: random.Random, overshoot: bool) -> tuple[int, int]:
    """Settle ``hold`` (``units`` picodollars held) with a random actual cost, at most the hold
    or, when ``overshoot``, sometimes above it, and a Model call's tokens: (actual, tokens)."""
    actual = rng.randint(0, units)
    if overshoot and rng.random() < 0.05:
        actual = units + rng.randint(1, units)  # the call cost more than its worst case
    tokens = 0 if hold.boundary is Boundary.TOOL else rng.randint(0, 5)
    answered(
        lambda: hold.settle(
            cost=from_units(actual),
            **({} if hold.boundary is Boundary.TOOL else {"input_tokens": tokens}),
        )
    )
    return actual, tokens


def race_money(
    *,
    port: int,
    namespace: str,
    run_id: str,
    worker: int,
    max_units: int,
    overshoot: bool,
    tools: list[str],
    start: Barrier,
    out: Queue[Any],
) -> None:
    """Hold and settle until the money limit refuses a hold: up to two holds open at a time,
    Model and Tool calls mixed, each of a random max_cost up to ``max_units`` picodollars. The
    holds still open when the run ends settle after it (the calls happened). Reports the
    grants, the actual costs settled, the tokens, how far above their holds they went, and
    what a snapshot read right after each grant saw (as :func:`watch_money`)."""
    ctx, store = attach(port, namespace, run_id)
    rng = random.Random(worker)
    open_holds: list[tuple[CallHold, int]] = []
    granted = 0
    seen: list[tuple[int, bool]] = []  # as watch_money's
    totals = [0, 0, 0]  # actual costs settled, tokens, actual above the hold (picodollars)

    def settle(done: CallHold, held: int) -> None:
        actual, used = _settle(done, held, rng, overshoot)
        for i, value in enumerate((actual, used, max(0, actual - held))):
            totals[i] += value

    start.wait(_WAIT)
    while True:
        units = rng.randint(1, max_units)
        if rng.random() < 0.5:
            reserve = functools.partial(ctx.reserve_model_call, max_cost=from_units(units))
        else:
            tool = tools[rng.randrange(len(tools))]
            reserve = functools.partial(ctx.reserve_tool_call, tool, max_cost=from_units(units))
        try:
            hold = answered(reserve)
        except RunTerminated:
            break
        granted += 1
        open_holds.append((hold, units))
        usage = answered(ctx.budget.snapshot)  # read right after the grant, with its hold in it
        seen.append((usage.cost_units + usage.cost_held_units, usage.exhausted is None))
        if len(open_holds) == 2 or rng.random() < 0.5:
            settle(*open_holds.pop(rng.randrange(len(open_holds))))
    for done, held in open_holds:  # after the end: still recorded
        settle(done, held)
    store.close()
    settled, tokens, excess = totals
    out.put((worker, granted, settled, tokens, excess, seen))


def watch_money(
    *,
    port: int,
    namespace: str,
    run_id: str,
    limit_units: int,
    start: Barrier,
    stop: Event,
    out: Queue[Any],
) -> None:
    """Read snapshots while the others race, until ``stop``: each one's settled + held, and
    whether the budget was still ACTIVE (no limit reached) when it was read."""
    ctx, store = attach(port, namespace, run_id)
    seen: list[tuple[int, bool]] = []
    start.wait(_WAIT)
    while not stop.is_set():
        usage = answered(ctx.budget.snapshot)
        seen.append((usage.cost_units + usage.cost_held_units, usage.exhausted is None))
    store.close()
    out.put(("watcher", limit_units, seen))
