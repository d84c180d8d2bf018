"""What a store refuses before it writes anything; its keys and their expiry; the capacity."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
import redis
from redis.crc import key_slot
from redis.sentinel import Sentinel, SentinelConnectionPool

from diagnosis_harness import (
    BudgetLimits,
    CancellationReason,
    ManualClock,
    RunContext,
    RunStoreConflict,
    RunStoreUnavailable,
    UnsafeKeySegment,
)
from diagnosis_harness.redis import RedisRunStore

from .server import free_port

if TYPE_CHECKING:
    from collections.abc import Callable

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
)


def _create(
    store: RedisRunStore, run_id: str = "run-1", limits: BudgetLimits = LIMITS
) -> RunContext:
    return RunContext.create(
        session_id="s", run_id=run_id, limits=limits, timeout=60, clock=ManualClock(), store=store
    )


def test_a_client_that_is_not_connected_is_refused_naming_the_store() -> None:
    client = redis.Redis(host="127.0.0.1", port=free_port(), socket_timeout=0.5)
    with pytest.raises(RunStoreUnavailable, match=r"RedisRunStore\(namespace='ns'.*not connected"):
        RedisRunStore(client, namespace="ns")
    client.close()


def test_a_client_without_a_usable_socket_timeout_is_refused_saying_what_to_set(
    redis_server: RedisServer,
) -> None:
    """The client's socket_timeout is the store's timeout: without one (redis-py before 8 has
    none by default) a store would wait for a hung server as long as the run's deadline allows,
    every time; 0 would make its sockets non-blocking."""
    client = redis_server.client(socket_timeout=None)
    with pytest.raises(
        ValueError, match=r"socket_timeout \(seconds\), e\.g\. redis\.Redis\(\.\.\., "
    ):
        RedisRunStore(client, namespace="ns")
    client.close()
    for timeout in (0, -1.0, float("inf"), float("nan")):
        client = redis_server.client(socket_timeout=timeout)
        with pytest.raises(ValueError, match=r"socket_timeout must be a finite number > 0"):
            RedisRunStore(client, namespace="ns")
        client.close()


def test_a_client_on_a_pool_the_store_cannot_copy_is_refused(redis_server: RedisServer) -> None:
    """The store talks on a pool of its own with the client's settings (redis-py's retries
    off); it can make one from a ConnectionPool or a BlockingConnectionPool only."""
    # Reached through typed variables: redis-py annotates these in some releases only.
    make_sentinel: Callable[..., Sentinel] = Sentinel
    make_pool: Callable[..., redis.ConnectionPool] = SentinelConnectionPool
    make_blocking: Callable[..., redis.ConnectionPool] = redis.BlockingConnectionPool
    pool = make_pool("main", make_sentinel([("127.0.0.1", redis_server.port)]))
    with pytest.raises(TypeError, match=r"ConnectionPool or BlockingConnectionPool.*Sentinel"):
        RedisRunStore(redis.Redis(connection_pool=pool), namespace="ns")
    blocking = make_blocking(port=redis_server.port, socket_timeout=1.0)
    store = RedisRunStore(redis.Redis(connection_pool=blocking), namespace="ns")
    _create(store, f"run-{uuid.uuid4().hex}").reserve_model_call()
    store.close()
    blocking.disconnect()


def test_the_arguments_of_a_store_are_checked(client: redis.Redis) -> None:
    with pytest.raises(TypeError, match=r"client must be a redis\.Redis"):
        RedisRunStore("redis://localhost", namespace="ns")  # type: ignore[arg-type]  # the point
    for namespace in ("", "a b", "runs:*", "x" * 129):
        with pytest.raises(UnsafeKeySegment, match="namespace"):
            RedisRunStore(client, namespace=namespace)
    for expire_after in (0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="expire_after"):
            RedisRunStore(client, namespace="ns", expire_after=expire_after)


def test_a_run_id_that_would_make_an_unsafe_key_writes_nothing(
    store: RedisRunStore, client: redis.Redis, namespace: str
) -> None:
    for run_id in ("run:1", "run{1}", "run*", "rün"):
        with pytest.raises(UnsafeKeySegment, match="run_id"):
            _create(store, run_id)
        with pytest.raises(UnsafeKeySegment, match="run_id"):
            RunContext.attach(session_id="s", run_id=run_id, store=store)
    assert list(client.scan_iter(f"{namespace}:*")) == []


def test_limits_lua_cannot_compare_exactly_are_refused(store: RedisRunStore) -> None:
    too_big = BudgetLimits(
        model_calls=2**53,
        tool_calls=4,
        per_tool_calls=2,
        input_tokens=50,
        output_tokens=50,
        total_tokens=80,
        run_bytes=64,
    )
    with pytest.raises(ValueError, match=r"model_calls must be below 2\*\*53"):
        _create(store, limits=too_big)
    ctx = _create(store)
    with pytest.raises(ValueError, match=r"input_tokens must be below 2\*\*53"):
        ctx.record_token_usage(input_tokens=2**53, output_tokens=0)
    assert ctx.budget.snapshot().input_tokens == 0  # refused whole: nothing queued or recorded
    ctx.record_token_usage(input_tokens=1, output_tokens=0)


def test_keys_share_one_hash_tag_and_expire_after_the_run_ends(
    redis_backend: RedisBackend, namespace: str
) -> None:
    client = redis_backend.client()
    store = RedisRunStore(client, namespace=namespace, expire_after=30)
    ctx = _create(store)
    ctx.reserve_tool_call("search")
    ctx.record_token_usage(input_tokens=1, output_tokens=1)
    keys = sorted(key.decode() for key in client.scan_iter(f"{namespace}:*"))
    assert keys == [f"{namespace}:{{run-1}}:{part}" for part in ("ops", "run", "tools")]
    assert len({key_slot(key.encode()) for key in keys}) == 1  # one Redis Cluster slot
    assert all(client.ttl(key) == -1 for key in keys)  # live: no expiry
    ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    ctx.record_token_usage(input_tokens=1, output_tokens=1)  # after the end: still expires
    for key in keys:
        assert 0 < client.ttl(key) <= 30, key
    store.close()
    client.close()


def test_the_capacity_counter_is_shared_and_all_or_nothing(
    redis_backend: RedisBackend, namespace: str
) -> None:
    first, second = redis_backend.client(), redis_backend.client()
    store_a = RedisRunStore(first, namespace=namespace)
    store_b = RedisRunStore(second, namespace=namespace)
    _create(store_a)
    a = store_a.capacity_counter("run-1", 100)
    b = store_b.capacity_counter("run-1", 100)
    assert a.try_reserve(60)
    assert not b.try_reserve(41)  # 101 > 100: nothing reserved
    assert b.try_reserve(40)
    assert (a.used, b.remaining, a.limit) == (100, 0, 100)
    with pytest.raises(RunStoreConflict, match="has limit 100 bytes, not 50"):
        store_b.capacity_counter("run-1", 50)
    with pytest.raises(ValueError, match="n must be a positive int"):
        a.try_reserve(0)
    unknown = f"run-{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception, match="no run"):
        store_a.capacity_counter(unknown, 10)
    for store in (store_a, store_b):
        store.close()
        store.client.close()
