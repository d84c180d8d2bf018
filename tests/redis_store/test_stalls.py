"""A server that stops answering holds no boundary past the run's deadline; lost answers count once.

The server is a real ``redis-server``, stopped with SIGSTOP (its port still accepts connections,
as a hung server's does) and let go on in the teardown at the latest; the lost answers come from
a loopback proxy in front of it (``proxy.py``) that passes a write on and drops the reply. Each
timed assertion is behaviour -- a boundary ends by the deadline it was given, plus ``_SLACK`` of
scheduling on a loaded machine -- not speed. Cost: about 8 s in all, mostly the deadlines waited
out on purpose.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import redis

from diagnosis_harness import (
    Boundary,
    BudgetLimits,
    CancellationReason,
    Deadline,
    ManualClock,
    RunContext,
    RunState,
    RunStoreUnavailable,
    RunTimedOut,
)
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._bounded import GRACE_SECONDS
from diagnosis_harness.redis._store import RunKeys

from .proxy import Proxy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .server import RedisServer

pytestmark = pytest.mark.version_independent

LIMITS = BudgetLimits(
    model_calls=5,
    tool_calls=6,
    per_tool_calls=4,
    input_tokens=1_000,
    output_tokens=1_000,
    total_tokens=2_000,
    run_bytes=1_000,
)
_DEADLINE = 0.6  # seconds: the run's, on the system clock
_SLACK = 0.5  # seconds of scheduling on a loaded 2-core machine
_NS = 1_000_000_000


def _create(store: RedisRunStore, timeout: float) -> RunContext:
    return RunContext.create(
        session_id="s", run_id=uuid.uuid4().hex, limits=LIMITS, timeout=timeout, store=store
    )


def _ends_within(seconds: float, call: Callable[[], object]) -> RunStoreUnavailable:
    """Run ``call``; it must raise ``RunStoreUnavailable`` within ``seconds`` + ``_SLACK``."""
    started = time.monotonic()
    with pytest.raises(RunStoreUnavailable, match="nothing granted") as raised:
        call()
    took = time.monotonic() - started
    assert took <= seconds + _SLACK, f"{call} took {took:.2f} s (bound {seconds} s): {raised.value}"
    return raised.value


@pytest.fixture
def paused(fresh_server: RedisServer) -> Iterator[RedisServer]:
    """The test pauses the server; it goes on at the end whatever happened."""
    yield fresh_server
    fresh_server.resume()


@pytest.mark.parametrize(
    "settings",
    [{}, {"socket_timeout": 2.0}],
    ids=["redis-py-defaults", "socket_timeout=2.0"],
)
def test_a_stalled_server_fails_every_boundary_and_read_by_the_deadline(
    paused: RedisServer, settings: dict[str, Any]
) -> None:
    """Before: 58.7 s (redis-py's defaults: 5 s socket timeout, ten retries) and 26.3 s for a
    deadline of 1.5 s. Now the first boundary gives up at the deadline, and every operation
    after it within the grace; nothing is granted, and once the server answers again the run
    has timed out."""
    client = redis.Redis(host="127.0.0.1", port=paused.port, **settings)
    if client.connection_pool.connection_kwargs.get("socket_timeout") is None:
        # redis-py before 8 has no default socket timeout: such a client is refused, saying
        # what to set, rather than trusted to give up.
        with pytest.raises(ValueError, match=r"client must have a socket_timeout"):
            RedisRunStore(client, namespace="stall")
        return
    store = RedisRunStore(client, namespace="stall")
    ctx = _create(store, _DEADLINE)
    ctx.reserve_model_call()
    paused.pause()
    left = (ctx.deadline.instant_ns - ctx.clock.monotonic_ns()) / _NS
    first = _ends_within(left, lambda: ctx.reserve_tool_call("search"))
    assert "the time left before the run's deadline" in str(first)
    assert ctx.clock.monotonic_ns() <= ctx.deadline.instant_ns + _SLACK * _NS
    past: list[Callable[[], object]] = [
        lambda: ctx.check(Boundary.MODEL),
        ctx.reserve_model_call,
        lambda: ctx.reserve_bytes(1),
        lambda: ctx.record_token_usage(input_tokens=1, output_tokens=1),
        lambda: ctx.lifecycle.state,
        lambda: ctx.lifecycle.termination,
        lambda: ctx.cancellation.reason,
        lambda: ctx.budget.state,
        ctx.budget.snapshot,
    ]  # not an ending: one the server ran late, once it went on, would decide the outcome
    for call in past:
        error = _ends_within(GRACE_SECONDS, call)
        assert "the grace at the run's deadline" in str(error)
    paused.resume()
    with pytest.raises(RunTimedOut):
        ctx.reserve_model_call()
    assert ctx.lifecycle.state is RunState.TIMED_OUT
    usage = ctx.budget.snapshot()
    assert usage.model_calls == 1  # the one granted before the stall; none after the deadline
    assert (usage.input_tokens, usage.output_tokens) == (1, 1)  # the report kept, sent once
    store.close()
    client.close()


def test_a_stall_that_ends_before_the_deadline_loses_and_doubles_nothing(
    paused: RedisServer,
) -> None:
    """The store's timeout (0.3 s) ends each wait long before the deadline. The reservation
    that got no answer was applied by the server once it went on; asked for again, it is
    granted on that count, not counted twice; the usage report is kept and sent once."""
    client = redis.Redis(host="127.0.0.1", port=paused.port, socket_timeout=0.3)
    store = RedisRunStore(client, namespace="stall")
    ctx = _create(store, 60.0)
    ctx.reserve_tool_call("search")
    paused.pause()
    error = _ends_within(0.3, lambda: ctx.reserve_tool_call("search"))
    assert "the store's timeout, the client's socket_timeout" in str(error)
    _ends_within(0.3, lambda: ctx.record_token_usage(input_tokens=7, output_tokens=3))
    paused.resume()
    ctx.reserve_tool_call("search")  # asked for again: the unanswered one, once
    ctx.reserve_tool_call("fetch")
    usage = ctx.budget.snapshot()
    assert usage.per_tool_calls == {"search": 2, "fetch": 1}
    assert usage.tool_calls == 3
    assert (usage.input_tokens, usage.output_tokens) == (7, 3)
    assert ctx.lifecycle.state is RunState.RUNNING
    store.close()
    client.close()


def test_a_stalled_server_does_not_hold_the_listener(fresh_server: RedisServer) -> None:
    """The listener's connection is lost, and its new one meets a server that accepts but never
    answers: its handshake fails within the store's timeout (redis-py's own retries would wait
    ten times as long), so ``close()`` returns within it."""
    proxy = Proxy(fresh_server.port)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=0.5)
    store = RedisRunStore(client, namespace="stall")
    ctx = _create(store, 60.0)
    assert store.watched_runs == {ctx.run_id}
    before = proxy.connections
    proxy.stall()
    proxy.cut()  # the listener's connection too: it makes a new one, which hangs
    assert proxy.wait_for_connections(before + 1)
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started <= 0.5 + _SLACK
    proxy.close()
    client.close()


@pytest.mark.parametrize(
    "timeout",
    [60.0, 8.0],  # the deadline beyond a connect and a read (5 s each), or not
    ids=["in-the-callers-thread", "on-a-worker"],
)
@pytest.mark.parametrize("ending", ["reservation", "cancel", "succeed", "create"])
def test_a_write_whose_answer_was_lost_is_sent_again_and_applied_once(
    fresh_server: RedisServer, ending: str, timeout: float
) -> None:
    """The server ran the write; the connection closed before its answer came back. The store
    sends it again, with the same id, on a new connection: a reservation is granted and counted
    once, a cancel or a finish learns that it was the one that ended the run (its callbacks ran
    once), a create finds the run its own (not a RunStoreConflict). Far from the deadline the
    command runs in the caller's thread, near it on one of the store's workers: both ways."""
    proxy = Proxy(fresh_server.port)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=5.0)
    store = RedisRunStore(client, namespace="lost")
    if ending == "create":
        proxy.lose_next_reply(b"FCALL")
        ctx = _create(store, timeout)
        assert ctx.lifecycle.state is RunState.RUNNING
    else:
        ctx = _create(store, timeout)
        seen: list[CancellationReason] = []
        ctx.cancellation.register(seen.append)
        proxy.lose_next_reply(b"FCALL")
        if ending == "reservation":
            ctx.reserve_tool_call("search")
            assert ctx.budget.snapshot().per_tool_calls == {"search": 1}
        elif ending == "cancel":
            assert ctx.cancellation.cancel(CancellationReason.SHUTDOWN) is True
            assert seen == [CancellationReason.SHUTDOWN]
        else:
            assert ctx.lifecycle.succeed().changed is True
            assert seen == [CancellationReason.RUN_FINISHED]
    assert proxy.connections >= 2  # the answer was lost: it was sent again on a new connection
    store.close()
    proxy.close()
    client.close()


def test_a_grant_answered_past_the_deadline_is_not_used(fresh_server: RedisServer) -> None:
    """The server granted the reservation at the boundary's reading, before the deadline; the
    answer came back after it. The work would start late: the boundary times the run out
    instead (the reservation stays counted, unused)."""
    proxy = Proxy(fresh_server.port)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=5.0)
    store = RedisRunStore(client, namespace="late")
    clock = ManualClock()
    ctx = RunContext.create(
        session_id="s",
        run_id=uuid.uuid4().hex,
        limits=LIMITS,
        deadline=Deadline.at_ns(10 * _NS),
        clock=clock,
        store=store,
    )
    outcome: list[BaseException | None] = []

    def reserve() -> None:
        try:
            ctx.reserve_tool_call("search")
            outcome.append(None)
        except BaseException as error:  # what the boundary raised, to check
            outcome.append(error)

    ctx.reserve_tool_call("fetch")  # the store's connection is made (its handshake not held)
    # The listener takes a connection of the same pool for its subscription; once it holds one,
    # the connection "fetch" used is idle, and the FCALL below is sent on it, not on a new
    # connection whose handshake the stall would hold instead.
    assert _subscribed(fresh_server, RunKeys.of("late", ctx.run_id).channel)
    proxy.stall()
    reserving = threading.Thread(target=reserve)
    reserving.start()
    assert proxy.wait_for_held(b"FCALL")  # sent, read at run time 0, held on its way
    clock.advance_ns(10 * _NS)  # the deadline passes meanwhile
    proxy.flow()
    reserving.join(30)
    [error] = outcome
    assert isinstance(error, RunTimedOut), error
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.TIMED_OUT
    # Counted, unused: read past the proxy, from the server itself -- the run's own snapshot is
    # past its deadline, bound by the grace, which a loaded machine's proxy may exceed.
    assert _tool_counts(fresh_server, RunKeys.of("late", ctx.run_id)) == {"fetch": 1, "search": 1}
    store.close()
    proxy.close()
    client.close()


def _tool_counts(server: RedisServer, keys: RunKeys) -> dict[str, int]:
    """Each Tool's call count of the run with ``keys``, read from ``server`` itself (the store
    keeps them as ``n:{tool}`` fields of the run's ``tools`` hash, as its snapshot reads them)."""
    direct = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5.0)
    try:
        fields = direct.hgetall(keys.all[1])
    finally:
        direct.close()
    counts: dict[str, int] = {}
    for name, count in fields.items():
        text = name.decode() if isinstance(name, bytes) else name
        if text.startswith("n:"):
            counts[text[2:]] = int(count)
    return counts


def _subscribed(server: RedisServer, channel: str, timeout: float = 30.0) -> bool:
    """Whether ``channel`` has a subscriber on ``server`` within ``timeout`` seconds: asked of
    the server itself, past the proxy."""
    direct = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5.0)
    give_up = time.monotonic() + timeout
    try:
        while time.monotonic() < give_up:
            [(_, count)] = direct.pubsub_shardnumsub(channel)
            if count:
                return True
            threading.Event().wait(0.01)  # the listener thread subscribes on its own time
        return False
    finally:
        direct.close()
