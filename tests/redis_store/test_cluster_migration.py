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

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness import BudgetLimits, RunContext, RunState, RunStoreUnavailable
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._run_keys import RunKeys

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis

    from .cluster import RedisClusterNodes

# The session's cluster (conftest.py), left whole: the slot moves all the way. It behaves the same
# whatever the Python.
pytestmark = pytest.mark.version_independent

LIMITS = BudgetLimits(
    model_calls=100,
    tool_calls=100,
    per_tool_calls=100,
    input_tokens=1000,
    output_tokens=1000,
    total_tokens=2000,
    run_bytes=10_000,
)


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
