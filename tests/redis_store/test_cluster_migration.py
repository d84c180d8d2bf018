"""A run tree whose slot is half moved: a script stops before it writes, never half way.

While a Cluster slot migrates, its keys are on two nodes. A script runs on the source only if
every key it declares is still there; the keys of a tree's other runs it reaches are undeclared,
and one that has left stops the script at its first touch -- after what it already wrote, were it
not for the store's scripts touching every key of the tree first (``touch_tree`` in
``lua/common.lua``). An ending is the call that writes before it reaches other runs: it records
the run's own state, then cascades to its descendants. Here the grandchild's hash has moved; the
child's ending must fail whole (the child still running on the source, its descendant too), and
succeed whole once the slot has moved.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from redis.crc import key_slot

from diagnosis_harness import (
    CancellationReason,
    RunContext,
    RunState,
    RunStoreUnavailable,
)
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._run_keys import RunKeys
from diagnosis_harness.redis._servers import Servers
from strategies import limits

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis

    from .cluster import RedisClusterNodes

# The session's cluster (conftest.py), left whole: the slot moves all the way. It behaves the same
# whatever the Python.
pytestmark = pytest.mark.version_independent

_WAIT = 30.0  # a bound on a wait for the listener's thread, never a pause
LIMITS = limits()  # none reached: these tests are about where writes go


def _send(node: redis.Redis | redis.client.Pipeline, *args: object) -> Any:
    """A command redis-py has no typed method for (``CLUSTER SETSLOT``, ``MIGRATE``, ...)."""
    send: Callable[..., Any] = node.execute_command
    return send(*args)


def test_an_ending_on_a_half_moved_tree_fails_whole_then_succeeds_whole(
    redis_cluster: RedisClusterNodes,
) -> None:
    namespace = f"m-{uuid.uuid4().hex[:8]}"
    # The store's timeout (1 s) bounds each call: one that cannot run during the migration
    # gives up within it.
    store = RedisRunStore(redis_cluster.client(socket_timeout=1.0), namespace=namespace)
    root = RunContext.create(session_id="s", run_id="mig", limits=LIMITS, timeout=600, store=store)
    child = root.child(run_id="mig-c")
    grandchild = child.child(run_id="mig-g")
    child.reserve_tool_call("search")  # the child's tools and ops keys exist
    assert store.capacity_counter("mig-c", 1000).try_reserve(10)  # and its capacity key
    # Every key the child's calls declare exists now, so its scripts run on the slot's source.
    declared = RunKeys.of(namespace, "mig-c", "mig").all
    moved = RunKeys.of(namespace, "mig-g", "mig").run  # the grandchild's hash leaves first

    with redis_cluster.client() as admin:
        slot = admin.keyslot(moved)
        source = admin.get_node_from_key(moved)
        assert all(admin.exists(key) for key in declared)
    [source_role] = [p for p in redis_cluster.primaries() if p.port == source.port]
    [target_role, *_] = [p for p in redis_cluster.primaries() if p.port != source.port]
    on_source = redis_cluster.node(source_role.port)
    on_target = redis_cluster.node(target_role.port)
    try:
        _send(on_target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_role.node_id)
        _send(on_source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_role.node_id)
        _send(on_source, "MIGRATE", "127.0.0.1", target_role.port, "", 0, 5000, "KEYS", moved)

        with pytest.raises(RunStoreUnavailable):
            child.lifecycle.succeed()
        # Nothing written: the child still runs on the source, as does its descendant.
        assert on_source.hget(declared[0], "state") == RunState.RUNNING.value.encode()
        with on_target.pipeline(transaction=False) as pipe:  # ASKING: the slot is importing
            _send(pipe, "ASKING")
            pipe.hget(moved, "state")
            _, state = pipe.execute()
        assert state == RunState.RUNNING.value.encode()

        # The rest of the slot moves; then the slot is the target's, everywhere.
        keys = _send(on_source, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if keys:
            _send(on_source, "MIGRATE", "127.0.0.1", target_role.port, "", 0, 5000, "KEYS", *keys)
        for role in redis_cluster.primaries():
            _send(
                redis_cluster.node(role.port),
                "CLUSTER",
                "SETSLOT",
                slot,
                "NODE",
                target_role.node_id,
            )
    finally:
        on_source.close()
        on_target.close()

    assert child.lifecycle.succeed().changed
    assert child.lifecycle.state is RunState.SUCCESS
    assert grandchild.lifecycle.state is RunState.CANCELLED  # the cascade, whole
    assert root.budget.snapshot().tool_calls == 1  # nothing counted twice or lost on the way
    store.close()


def test_a_listener_that_read_a_stale_slot_map_still_follows_the_move(
    redis_cluster: RedisClusterNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot map a listener reads right after its subscription ended may come from a node
    that has not heard of the move yet: it subscribes where the slot was, which answers MOVED.
    It must read the map again and follow, not go on subscribing on the old node; the cancel
    made after the move then reaches this process's callback."""
    namespace = f"m-{uuid.uuid4().hex[:8]}"
    watcher = RedisRunStore(redis_cluster.client(), namespace=namespace)
    canceller = RedisRunStore(redis_cluster.client(), namespace=namespace)
    RunContext.create(session_id="s", run_id="stale", limits=LIMITS, timeout=600, store=canceller)
    ctx = RunContext.attach(session_id="s", run_id="stale", store=watcher)
    cancelled = threading.Event()
    ctx.cancellation.register(lambda _reason: cancelled.set())
    channel = RunKeys.of(namespace, "stale").channel
    source_port = redis_cluster.primary_of(channel)
    assert _subscribed(redis_cluster, source_port, channel)  # the listener is on the source

    reads = 0
    real_refresh = Servers.refresh

    def stale_once(servers: Servers) -> None:  # the first read after the move is stale
        nonlocal reads
        reads += 1
        if reads > 1:
            real_refresh(servers)

    monkeypatch.setattr(Servers, "refresh", stale_once)
    slot = key_slot(channel.encode())
    [target_role, *_] = [p for p in redis_cluster.primaries() if p.port != source_port]
    redis_cluster.move_slot(slot, source_port, target_role.port)

    assert _subscribed(redis_cluster, target_role.port, channel)
    assert reads >= 2  # it read the map again after the stale one
    ctx_canceller = RunContext.attach(session_id="s", run_id="stale", store=canceller)
    assert ctx_canceller.cancellation.cancel(CancellationReason.USER_REQUESTED)
    assert cancelled.wait(_WAIT)
    watcher.close()
    canceller.close()


def _subscribed(cluster: RedisClusterNodes, port: int, channel: str) -> bool:
    """Whether the node on ``port`` reports a subscriber of ``channel`` within :data:`_WAIT`
    seconds (the listener subscribes on its own thread)."""
    give_up = time.monotonic() + _WAIT
    with cluster.node(port) as node:
        while time.monotonic() < give_up:
            if any(n >= 1 for _channel, n in node.pubsub_shardnumsub(channel)):
                return True
            threading.Event().wait(0.01)  # polls the node's own report, orders nothing
    return False
