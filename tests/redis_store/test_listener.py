"""What a store's listener keeps: an entry for each live owner of a running run, and nothing else.

A refused ``attach`` or ``create`` registers nothing with the listener, subscribes nothing and
writes no key; an owner whose run ended, or that nobody holds any more, is forgotten and its
channel unsubscribed -- so a worker that attaches to run after run keeps no state for the runs it
is done with. Each owner of this process is woken on its own, also two owners of one run.

The listener works on its own thread. Where a test must know it has caught up, it watches a
*marker* run, cancels it from another store and waits for the marker's callback, which only the
listener can run -- twice: the first marker may share one SUBSCRIBE with channels watched before
it (and its confirmation may be read before theirs), but the second is watched after the first
was delivered, so its SUBSCRIBE is sent after every (un)subscription of channels watched or
dropped before the first marker, and its delivery comes after the server handled them and the
listener read everything that arrived before.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from diagnosis_harness import (
    BudgetLimits,
    CancellationReason,
    RunContext,
    RunStoreConflict,
    RunStoreUnavailable,
    UnknownRun,
)
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._store import RunKeys

from .conftest import single_server

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .conftest import RedisBackend
    from .server import RedisServer

LIMITS = BudgetLimits(
    model_calls=3,
    tool_calls=4,
    per_tool_calls=2,
    input_tokens=50,
    output_tokens=50,
    total_tokens=80,
    run_bytes=64,
    per_tool_overrides={"fetch": 1},
)
_WAIT_SECONDS = 30.0  # a bound on a wait for the listener thread, never a pause


@pytest.fixture
def other_store(redis_backend: RedisBackend, namespace: str) -> Iterator[RedisRunStore]:
    """A second store on the same runs, on a client of its own: another process, as far as the
    listener can tell."""
    store = RedisRunStore(redis_backend.client(), namespace=namespace)
    yield store
    store.close()
    store.client.close()


def _create(store: RedisRunStore, run_id: str = "run-1") -> RunContext:
    return RunContext.create(
        session_id="session-1", run_id=run_id, limits=LIMITS, timeout=600, store=store
    )


def _attach(store: RedisRunStore, run_id: str = "run-1") -> RunContext:
    return RunContext.attach(session_id="session-1", run_id=run_id, store=store)


def _stored(client: redis.Redis | RedisCluster, namespace: str) -> dict[bytes, object]:
    """Every key of the namespace with its content: what a refusal must leave as it was."""
    content: dict[bytes, object] = {}
    for key in sorted(client.scan_iter(f"{namespace}:*")):
        kind = client.type(key)
        content[key] = client.hgetall(key) if kind == b"hash" else (kind, client.dump(key))
    return content


def _channel(namespace: str, run_id: str) -> str:
    return RunKeys.of(namespace, run_id).channel


def _everywhere(client: redis.Redis | RedisCluster) -> dict[str, Any]:
    """A PUBSUB command's arguments to ask every node: redis-py's cluster client asks one node
    only, and a sharded channel is subscribed on the node of its slot."""
    return {"target_nodes": RedisCluster.ALL_NODES} if isinstance(client, RedisCluster) else {}


def _subscribers(client: redis.Redis | RedisCluster, namespace: str, run_id: str) -> int:
    [(_, count)] = client.pubsub_shardnumsub(_channel(namespace, run_id), **_everywhere(client))
    return int(count)


def _catch_up(listening: RedisRunStore, canceller: RedisRunStore, marker: str) -> set[bytes]:
    """Return once ``listening``'s listener has handled everything watched or dropped before;
    the markers' channels, which may stay subscribed a moment longer."""
    channels: set[bytes] = set()
    for step in ("a", "b"):
        run_id = f"{marker}-{step}"
        _deliver_a_marker(listening, canceller, run_id)
        channels.add(_channel(listening.namespace, run_id).encode())
    return channels


def _deliver_a_marker(listening: RedisRunStore, canceller: RedisRunStore, run_id: str) -> None:
    _create(canceller, run_id)
    ctx = _attach(listening, run_id)
    delivered = threading.Event()
    ctx.cancellation.register(lambda _reason: delivered.set())
    _attach(canceller, run_id).cancellation.cancel(CancellationReason.SHUTDOWN)
    assert delivered.wait(_WAIT_SECONDS), "the listener never delivered the marker's ending"


OTHER_LIMITS = dataclasses.replace(LIMITS, model_calls=4, per_tool_overrides={"fetch": 2})


def test_a_refused_limits_check_names_the_argument_and_what_differs(
    store: RedisRunStore,
) -> None:
    _create(store)
    with pytest.raises(RunStoreConflict) as refused:
        RunContext.attach(session_id="session-1", run_id="run-1", store=store, limits=OTHER_LIMITS)
    assert str(refused.value).endswith(
        "limits must be None or equal the run's stored limits; run 'run-1' is stored with "
        "model_calls=3, per_tool_overrides={'fetch': 1}; given model_calls=4, "
        "per_tool_overrides={'fetch': 2}"
    )  # only what differs


@pytest.mark.parametrize("refusal", ["limits", "unknown run", "session"])
def test_a_refused_attach_leaves_the_creators_registration_and_adds_none(
    store: RedisRunStore, other_store: RedisRunStore, namespace: str, refusal: str
) -> None:
    """The refused attach goes through the creator's own store: before, it replaced the creator's
    registration with its own, dead one, and the creator's callbacks were never run by the
    listener."""
    creator = _create(store)
    delivered = threading.Event()
    creator.cancellation.register(lambda _reason: delivered.set())
    before = (store.watched_runs, _stored(store.client, namespace))
    assert before[0] == {"run-1"}
    with pytest.raises((RunStoreConflict, UnknownRun)):
        RunContext.attach(
            session_id="session-2" if refusal == "session" else "session-1",
            run_id="run-2" if refusal == "unknown run" else "run-1",
            store=store,
            limits=OTHER_LIMITS if refusal == "limits" else None,
        )
    assert (store.watched_runs, _stored(store.client, namespace)) == before
    assert _attach(other_store).cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    assert delivered.wait(_WAIT_SECONDS)  # the listener still wakes the creator's owner


@pytest.mark.parametrize("refusal", ["limits", "unknown run", "session"])
def test_a_refused_attach_subscribes_nothing(
    store: RedisRunStore, other_store: RedisRunStore, namespace: str, refusal: str
) -> None:
    store.close()  # the creator's store listens to nothing: every subscriber is other_store's
    _create(store)
    with pytest.raises((RunStoreConflict, UnknownRun)) as refused:
        RunContext.attach(
            session_id="session-2" if refusal == "session" else "session-1",
            run_id="run-2" if refusal == "unknown run" else "run-1",
            store=other_store,
            limits=OTHER_LIMITS if refusal == "limits" else None,
        )
    assert other_store.watched_runs == frozenset()
    _catch_up(other_store, store, "marker")  # the refused owner is still alive, in `refused`
    assert refused.value is not None
    assert _subscribers(store.client, namespace, "run-1") == 0
    assert _subscribers(store.client, namespace, "run-2") == 0


def test_a_refused_create_leaves_nothing_behind(store: RedisRunStore, namespace: str) -> None:
    ctx = _create(store)
    before = (store.watched_runs, _stored(store.client, namespace))
    with pytest.raises(RunStoreConflict, match="exists already"):
        _create(store)
    huge = dataclasses.replace(LIMITS, model_calls=2**53)
    with pytest.raises(ValueError, match="model_calls must be below 2"):
        RunContext.create(
            session_id="session-1", run_id="run-2", limits=huge, timeout=600, store=store
        )
    assert (store.watched_runs, _stored(store.client, namespace)) == before
    assert ctx.lifecycle.termination is None


def test_an_owner_that_attaches_after_the_ending_is_never_watched(
    store: RedisRunStore, other_store: RedisRunStore
) -> None:
    _create(other_store).cancellation.cancel(CancellationReason.USER_REQUESTED)
    late = _attach(store)
    assert store.watched_runs == frozenset()
    seen: list[CancellationReason] = []
    late.cancellation.register(seen.append)
    assert seen == [CancellationReason.USER_REQUESTED]  # it ran inside register()


def test_a_store_that_does_not_answer_registers_nothing(fresh_server: RedisServer) -> None:
    # Retries without a pause keep the test quick; a killed server refuses at once either way.
    client = fresh_server.client(socket_timeout=2.0, retry=Retry(NoBackoff(), 1))
    store = RedisRunStore(client, namespace="down")
    _create(store).lifecycle.succeed()  # ended: no longer watched
    assert store.watched_runs == frozenset()
    fresh_server.kill()
    with pytest.raises(RunStoreUnavailable):
        _attach(store)
    with pytest.raises(RunStoreUnavailable):
        _create(store, "run-2")
    assert store.watched_runs == frozenset()
    fresh_server.start()  # without persistence: the run is gone
    with pytest.raises(UnknownRun):
        _attach(store)
    assert store.watched_runs == frozenset()
    store.close()
    store.client.close()


def test_two_owners_of_one_run_in_one_process_are_each_woken(
    store: RedisRunStore, other_store: RedisRunStore
) -> None:
    """Two contexts of one process on one run (two threads' attaches, say): the listener used to
    keep only the last one, and the first one's callbacks waited for its next operation."""
    _create(other_store)
    first, second = _attach(store), _attach(store)
    woken = [threading.Event(), threading.Event()]
    first.cancellation.register(lambda _reason: woken[0].set())
    second.cancellation.register(lambda _reason: woken[1].set())
    assert store.watched_runs == {"run-1"}
    assert _attach(other_store).cancellation.cancel(CancellationReason.SHUTDOWN)
    assert all(event.wait(_WAIT_SECONDS) for event in woken)
    _catch_up(store, other_store, "marker")
    assert store.watched_runs == frozenset()


def test_a_worker_that_attaches_to_run_after_run_keeps_no_state_for_them(
    store: RedisRunStore, other_store: RedisRunStore, namespace: str
) -> None:
    """A worker attaches, works and leaves, run after run: some runs it ends itself, some end
    elsewhere while it holds them, some it drops while they still run. Once it has dropped them,
    its listener watches none of them and no channel of them is subscribed."""
    runs = [f"run-{n}" for n in range(120)]
    for run_id in runs:
        _create(other_store, run_id)
    held: list[RunContext] = []
    for n, run_id in enumerate(runs):
        ctx = _attach(store, run_id)
        ctx.reserve_model_call()
        if n % 3 == 0:
            ctx.lifecycle.succeed()  # ended here: forgotten at once
            assert run_id not in store.watched_runs
        else:
            held.append(ctx)  # still running while this worker holds it
    assert store.watched_runs == {ctx.run_id for ctx in held}
    _catch_up(store, other_store, "marker-1")  # every held run's channel is subscribed now
    assert all(_subscribers(store.client, namespace, ctx.run_id) == 1 for ctx in held)
    ended_elsewhere = [ctx.run_id for ctx in held[::2]]
    for run_id in ended_elsewhere:
        _attach(other_store, run_id).cancellation.cancel(CancellationReason.SHUTDOWN)
    _catch_up(store, other_store, "marker-2")  # the listener has delivered those endings
    assert store.watched_runs == {ctx.run_id for ctx in held[1::2]}
    del held, ctx  # the runs still running are dropped without an ending
    gc.collect()
    assert store.watched_runs == frozenset()
    markers = _catch_up(store, other_store, "marker-3")
    assert all(_subscribers(store.client, namespace, run_id) == 0 for run_id in runs)
    subscribed = store.client.pubsub_shardchannels(f"{namespace}:*", **_everywhere(store.client))
    assert set(subscribed) <= markers


@single_server  # its store's client is a plain one with hooks, on the one server
def test_an_owner_dropped_right_after_the_listener_first_read_it_is_forgotten(
    redis_server: RedisServer, other_store: RedisRunStore
) -> None:
    """The listener holds no owner longer than it reads it: it used to keep the last owner it
    re-read as a new one in a local variable of its loop, alive until the next new owner came."""
    client = _ClientWithAHook(redis_server.port)
    store = RedisRunStore(client.client, namespace=other_store.namespace)
    _create(other_store)
    first = _attach(store)
    _catch_up(store, other_store, "marker")  # run-1's channel is subscribed
    read_by_the_listener = threading.Event()

    def on_the_listeners_read() -> None:
        if threading.current_thread().name == "diagnosis-harness-redis-listener":
            read_by_the_listener.set()
            client.after_read = None

    client.after_read = on_the_listeners_read
    second = _attach(store)  # a new owner on a subscribed channel: re-read by the listener
    assert read_by_the_listener.wait(_WAIT_SECONDS)
    assert store.watched_runs == {"run-1"}
    del first, second
    gc.collect()
    assert store.watched_runs == frozenset()
    store.close()
    client.close()


def test_a_store_nobody_holds_any_more_stops_its_listener(
    redis_backend: RedisBackend, namespace: str
) -> None:
    """A service that makes a store per request and forgets to close it must not keep threads
    and connections for each: the listener, and the store's workers if it started any, stop
    when the store is collected."""
    before = set(threading.enumerate())
    store = RedisRunStore(redis_backend.client(), namespace=namespace)
    ctx = _create(store)
    threads = [t for t in threading.enumerate() if t not in before]
    assert "diagnosis-harness-redis-listener" in {t.name for t in threads}
    del ctx, store
    gc.collect()
    for thread in threads:
        thread.join(_WAIT_SECONDS)
        assert not thread.is_alive(), thread.name


@single_server  # its store's client is a plain one with hooks, on the one server
def test_a_listener_read_that_an_ending_overtakes_is_harmless(
    redis_server: RedisServer, other_store: RedisRunStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The listener read the run running; before it took the answer in, this process ended the
    run and is running its callbacks. The stale answer must not deliver (it used to, with its
    empty signal: a ValueError, and the listener dropped its connection and started over)."""
    client = _ClientWithAHook(redis_server.port)
    store = RedisRunStore(client.client, namespace=other_store.namespace)
    listener_read, in_callbacks, release = threading.Event(), threading.Event(), threading.Event()

    def after_the_listeners_read() -> None:
        if threading.current_thread().name == "diagnosis-harness-redis-listener":
            client.after_read = None
            listener_read.set()
            assert in_callbacks.wait(_WAIT_SECONDS)  # the ending overtakes this read

    seen: list[CancellationReason] = []

    def slow_callback(reason: CancellationReason) -> None:
        seen.append(reason)
        in_callbacks.set()
        release.wait(_WAIT_SECONDS)

    client.after_read = after_the_listeners_read
    ctx = _create(store)  # the listener reads it once subscribed
    ctx.cancellation.register(slow_callback)
    assert listener_read.wait(_WAIT_SECONDS)  # it read the run running, and waits
    ender = threading.Thread(target=ctx.lifecycle.succeed)
    ender.start()
    assert in_callbacks.wait(_WAIT_SECONDS)
    _catch_up(store, other_store, "marker")  # the listener took its stale answer in
    release.set()
    ender.join()
    assert seen == [CancellationReason.RUN_FINISHED]
    assert store.watched_runs == frozenset()
    assert not [r for r in caplog.records if "listener failed" in r.getMessage()]
    store.close()
    client.close()


def test_a_closed_store_watches_nothing(store: RedisRunStore) -> None:
    ctx = _create(store)
    assert store.watched_runs == {"run-1"}
    store.close()
    assert store.watched_runs == frozenset()
    _create(store, f"run-{uuid.uuid4().hex[:6]}")
    assert store.watched_runs == frozenset()
    assert ctx.lifecycle.termination is None  # the owners still read the store


class _ClientWithAHook:
    """A real client whose connections run ``after_read`` right after each read of a run's
    state, in the thread that read it (until the hook clears it): the moment between an
    attach's first read and its watch, made to happen. ``after_script`` runs likewise once a
    script's answer is in, before the caller has it: an answer that reaches its caller late.
    The store talks on connections of its own made with the client's connection class, so the
    hooks are on the connection."""

    def __init__(self, port: int) -> None:
        self.after_read: Callable[[], None] | None = None
        self.after_script: Callable[[], None] | None = None
        hook = self

        class Connection(redis.Connection):
            sent: tuple[Any, ...] = ()

            def send_command(self, *args: Any, **kwargs: Any) -> None:
                self.sent = args
                send: Callable[..., None] = super().send_command
                send(*args, **kwargs)

            def read_response(self, *args: Any, **kwargs: Any) -> Any:
                read: Callable[..., Any] = super().read_response
                answer = read(*args, **kwargs)
                after = hook.after_read
                if after is not None and self.sent[:1] == ("HMGET",) and "state" in self.sent:
                    after()
                late = hook.after_script
                if late is not None and self.sent[:1] == ("FCALL",):
                    late()
                return answer

        pool = redis.ConnectionPool(
            connection_class=Connection, host="127.0.0.1", port=port, socket_timeout=5.0
        )
        self.client = redis.Redis(connection_pool=pool)

    def close(self) -> None:
        self.client.close()


@pytest.mark.parametrize("already_subscribed", [False, True])
@single_server  # its store's client is a plain one with hooks, on the one server
def test_an_ending_between_an_attachs_first_read_and_its_watch_is_delivered(
    redis_server: RedisServer, other_store: RedisRunStore, already_subscribed: bool
) -> None:
    """Its first read found the run running; the ending came before it was watched. The listener
    re-reads it once its channel's subscription is live: on a new subscription's confirmation,
    or at once when another owner of this process has the channel subscribed. For the latter,
    that owner's callback, which the listener runs on the ending's message, holds the listener
    until the late owner is watched: the message is past, and the channel still subscribed.
    No operation of the late owner reads the run before the check: only the listener can."""
    client = _ClientWithAHook(redis_server.port)
    store = RedisRunStore(client.client, namespace=other_store.namespace)
    _create(other_store)
    listener_held, late_watched = threading.Event(), threading.Event()
    if already_subscribed:
        first = _attach(store)

        def hold_the_listener(_reason: CancellationReason) -> None:
            listener_held.set()
            late_watched.wait(_WAIT_SECONDS)

        first.cancellation.register(hold_the_listener)
        _catch_up(store, other_store, "marker-1")  # first's channel is subscribed
    ended = threading.Event()

    def the_run_ends_elsewhere() -> None:
        client.after_read = None
        _attach(other_store).cancellation.cancel(CancellationReason.SHUTDOWN)
        if already_subscribed:
            assert listener_held.wait(_WAIT_SECONDS)  # the message is handled, without `late`
        ended.set()

    client.after_read = the_run_ends_elsewhere
    late = _attach(store)
    late_watched.set()
    assert ended.is_set()  # the hook ran, inside the attach
    _catch_up(store, other_store, "marker-2")
    assert "run-1" not in store.watched_runs  # the listener delivered the ending to `late`
    seen: list[CancellationReason] = []
    late.cancellation.register(seen.append)
    assert seen == [CancellationReason.SHUTDOWN]
    store.close()
    client.close()


_EARLY_RETURN_WINDOW = 0.5  # seconds a callback gives cancel() to return early, were it to


@single_server  # its store's client is a plain one with hooks, on the one server
def test_the_call_that_ends_the_run_returns_after_the_listener_ran_the_callbacks(
    redis_server: RedisServer, other_store: RedisRunStore
) -> None:
    """Whoever runs this process's callbacks, the call whose operation ended the run returns
    after they ran. Here the listener runs them: the cancel's own answer reaches it late, once
    the listener has started the callbacks; the callback then gives ``cancel()`` a bounded while
    to return, which it must not do before the callback has finished."""
    client = _ClientWithAHook(redis_server.port)
    store = RedisRunStore(client.client, namespace=other_store.namespace)
    ctx = _create(store)
    _catch_up(store, other_store, "marker")  # run-1's channel is subscribed
    started, finished, returned = threading.Event(), threading.Event(), threading.Event()
    ran_on: list[str] = []

    def callback(_reason: CancellationReason) -> None:
        ran_on.append(threading.current_thread().name)
        started.set()
        returned.wait(_EARLY_RETURN_WINDOW)
        finished.set()

    ctx.cancellation.register(callback)
    canceller = threading.get_ident()

    def late_answer() -> None:
        if threading.get_ident() == canceller:
            client.after_script = None
            assert started.wait(_WAIT_SECONDS), "the listener never ran the callback"

    client.after_script = late_answer
    assert ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    finished_before_the_return = finished.is_set()
    returned.set()
    assert ran_on == ["diagnosis-harness-redis-listener"]
    assert finished_before_the_return, "cancel() returned while the listener ran the callback"
    store.close()
    client.close()
