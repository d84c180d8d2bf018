"""Faults of the store: a crash and a restart, a pause past the deadline, a dropped connection.

Each test has a server of its own. What must hold: no work granted on a store that does not
answer (``RunStoreUnavailable``, naming the store), no over-reservation, no recorded usage lost
or counted twice. What survives a crash is the server's persistence: without an append-only file
the run is gone (``UnknownRun``: nothing is granted on a run the store has lost); with one
(``appendfsync always``) every acknowledged operation survives.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry

from diagnosis_harness import (
    Boundary,
    BudgetLimits,
    CancellationReason,
    Deadline,
    ManualClock,
    RunCancelled,
    RunContext,
    RunState,
    RunStoreUnavailable,
    RunTimedOut,
    UnknownRun,
)
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._link import StoreLink
from diagnosis_harness.redis._store import RunKeys

from .server import REDIS_SERVER, RedisServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import redis

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
_NS = 1_000_000_000


def _client(server: RedisServer, *, timeout: float = 2.0, retries: int = 1) -> redis.Redis:
    # Retries without a pause keep the tests quick; a retried call is applied once either way.
    return server.client(socket_timeout=timeout, retry=Retry(NoBackoff(), retries))


@pytest.fixture
def aof_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    server = RedisServer(tmp_path, appendonly=True)
    server.start()
    yield server
    server.stop()


def _run(store: RedisRunStore, clock: ManualClock) -> RunContext:
    return RunContext.create(
        session_id="s",
        run_id="run-1",
        limits=LIMITS,
        deadline=Deadline.at_ns(10 * _NS),
        clock=clock,
        store=store,
    )


def test_a_crash_without_persistence_loses_the_run_and_grants_nothing(
    fresh_server: RedisServer,
) -> None:
    store = RedisRunStore(_client(fresh_server), namespace="crash")
    ctx = _run(store, ManualClock())
    ctx.reserve_tool_call("search")
    fresh_server.kill()
    with pytest.raises(RunStoreUnavailable, match=r"RedisRunStore\(namespace='crash'") as down:
        ctx.reserve_tool_call("search")
    assert "nothing granted" in str(down.value)
    fresh_server.start()
    with pytest.raises(UnknownRun, match="lost when a server without persistence restarted"):
        ctx.reserve_tool_call("search")
    with pytest.raises(UnknownRun):
        RunContext.attach(session_id="s", run_id="run-1", store=store)
    store.close()
    store.client.close()


def test_a_crash_with_an_append_only_file_keeps_every_acknowledged_operation(
    aof_server: RedisServer,
) -> None:
    store = RedisRunStore(_client(aof_server), namespace="aof")
    clock = ManualClock()
    ctx = _run(store, clock)
    for tool in ("search", "search", "fetch"):
        ctx.reserve_tool_call(tool)
    ctx.record_token_usage(input_tokens=10, output_tokens=20)
    before = ctx.budget.snapshot()
    aof_server.kill()
    # Reported while the server is down: kept, and sent first once it answers again.
    with pytest.raises(RunStoreUnavailable):
        ctx.record_token_usage(input_tokens=5, output_tokens=5)
    with pytest.raises(RunStoreUnavailable):
        ctx.reserve_tool_call("search")  # nothing granted, nothing counted
    aof_server.start()
    after = ctx.budget.snapshot()
    assert after.per_tool_calls == before.per_tool_calls == {"search": 2, "fetch": 1}
    assert (after.input_tokens, after.output_tokens) == (15, 25)  # the unsent report, once
    ctx.reserve_tool_call("search")
    ctx.reserve_tool_call("grep")
    ctx.reserve_tool_call("grep")
    with pytest.raises(Exception, match="tool_calls"):
        ctx.reserve_tool_call("grep")  # the seventh: the limits survived with the counts
    assert ctx.budget.snapshot().tool_calls == LIMITS.tool_calls
    store.close()
    store.client.close()


def test_an_ending_survives_a_crash_with_an_append_only_file(aof_server: RedisServer) -> None:
    store = RedisRunStore(_client(aof_server), namespace="aof")
    ctx = _run(store, ManualClock())
    assert ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
    termination = ctx.lifecycle.termination
    aof_server.kill()
    aof_server.start()
    seen: list[CancellationReason] = []
    other = RunContext.attach(session_id="s", run_id="run-1", store=store)
    other.cancellation.register(seen.append)
    assert seen == [CancellationReason.SHUTDOWN]
    with pytest.raises(RunCancelled):
        other.reserve_model_call()  # a reconnected process reads the ending before it grants
    got = other.lifecycle.termination
    assert got is not None
    assert termination is not None
    assert (got.state, got.reason) == (termination.state, termination.reason)
    store.close()
    store.client.close()


def test_a_pause_past_the_deadline_grants_nothing(fresh_server: RedisServer) -> None:
    admin = fresh_server.client(single_connection_client=True)
    store = RedisRunStore(_client(fresh_server, timeout=0.3, retries=0), namespace="pause")
    clock = ManualClock()
    ctx = _run(store, clock)
    ctx.reserve_tool_call("search")
    # Every script writes, so WRITE pauses them all; the pause holds until it is lifted.
    admin.client_pause(600_000, all=False)  # CLIENT PAUSE 600000 WRITE
    try:
        with pytest.raises(RunStoreUnavailable, match="nothing granted"):
            ctx.reserve_tool_call("search")  # the store did not answer within socket_timeout
        with pytest.raises(RunStoreUnavailable):
            ctx.check(Boundary.MODEL)
        clock.advance_ns(10 * _NS)  # the pause lasted past the deadline
    finally:
        admin.client_unpause()
    with pytest.raises(RunTimedOut):
        ctx.reserve_tool_call("search")
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.TIMED_OUT
    assert termination.at_ns == 10 * _NS  # the reading of the boundary that saw it
    # A call the client gave up on may still have been applied when the pause ended (the server
    # ran it for a client that had gone): the only cost is a reservation nobody used, never one
    # past a limit.
    assert ctx.budget.snapshot().tool_calls in (1, 2)
    store.close()
    store.client.close()
    admin.close()


def test_a_connection_dropped_between_a_reservation_and_its_usage_report(
    fresh_server: RedisServer,
) -> None:
    admin = fresh_server.client(single_connection_client=True)
    store = RedisRunStore(_client(fresh_server, retries=1), namespace="drop")
    ctx = _run(store, ManualClock())
    ctx.reserve_model_call()
    killed = admin.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    ctx.record_token_usage(input_tokens=7, output_tokens=3)  # on a new connection
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (1, 7, 3)
    store.close()
    store.client.close()
    admin.close()


def test_a_retried_script_is_applied_once(client: redis.Redis, namespace: str) -> None:
    """What the client's retry after a lost reply sends: the same operation id, applied once."""
    store = RedisRunStore(client, namespace=namespace)
    ctx = _run(store, ManualClock())
    keys = RunKeys.of(namespace, ctx.run_id)  # the keys the run's owner sends its scripts
    link = StoreLink(client, "test")  # what the owners send on: the store's private plumbing
    for _ in range(3):
        link.call("reserve_tool_call", keys, [keys.channel, "op-1", 0, "search", "'search'"])
        link.call("record_token_usage", keys, [keys.channel, "op-2", 0, 4, 2])
    usage = ctx.budget.snapshot()
    assert (usage.tool_calls, usage.input_tokens, usage.output_tokens) == (1, 4, 2)
    store.close()
    store.client.close()


def test_an_idle_process_that_reconnects_after_the_cancel_runs_its_callback_once(
    aof_server: RedisServer,
) -> None:
    """Its listener lost the connection, so it never heard the ending published: it re-reads the
    run when it subscribes again, and runs its callback then, once."""
    idle_store = RedisRunStore(_client(aof_server), namespace="idle")
    idle = _run(idle_store, ManualClock())
    calls: list[CancellationReason] = []
    ran = threading.Event()

    def callback(reason: CancellationReason) -> None:
        calls.append(reason)
        ran.set()

    idle.cancellation.register(callback)
    aof_server.kill()
    aof_server.start()  # the idle process's listener reconnects on its own schedule
    canceller_store = RedisRunStore(_client(aof_server), namespace="idle")
    canceller = RunContext.attach(session_id="s", run_id="run-1", store=canceller_store)
    assert canceller.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    assert ran.wait(30)  # no operation of the idle process: its listener delivered it
    assert idle.lifecycle.state is RunState.CANCELLED  # a read of the ending runs nothing again
    assert calls == [CancellationReason.CLIENT_DISCONNECTED]
    idle_store.close()
    idle_store.client.close()
    canceller_store.close()
    canceller_store.client.close()
