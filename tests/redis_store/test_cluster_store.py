"""The store on a 3-primary, 3-replica Redis Cluster: runs over every shard raced by processes,
and runs whose slot moves while a process reserves on them.

Real processes (``spawn``), the session's real cluster (:mod:`.cluster`), barriers and events;
nothing waits on a timer. The race is :func:`.cluster_workers.race`, which
``benchmarks/cluster_race.py`` runs at the issue's size (8 processes, 64 runs, 1,000 reservations
each); here it is small enough for CI. What a failover does is shown elsewhere. Marked
``version_independent``: the outcome is the cluster's and the scripts', whatever the Python.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from redis.crc import key_slot

from diagnosis_harness import BudgetLimits, CancellationReason, RunContext, RunState
from diagnosis_harness.redis._run_keys import RunKeys

from . import cluster_workers
from .cluster_workers import SESSION, connect, race

if TYPE_CHECKING:
    from .cluster import RedisClusterNodes

# Spawned interpreters, where coverage.py does not follow: run once, in `e2e-checks`.
pytestmark = [pytest.mark.version_independent, pytest.mark.end_to_end]

_SPAWN = multiprocessing.get_context("spawn")
_WAIT = 120.0
_FILLER = 2_000


def test_eight_processes_reserve_on_64_runs_over_three_shards_and_nothing_is_lost(
    redis_cluster: RedisClusterNodes,
) -> None:
    """Every process reserves on every run; a third of the runs fit every call, the others end
    at their total or per-Tool limit. Each run's snapshot counts exactly the grants the
    processes saw, no counter passes its limit, and the total is the sum per Tool."""
    figures = race(
        redis_cluster, f"race-{uuid.uuid4().hex[:8]}", processes=8, runs=64, reservations=30
    )
    assert figures.shards == 3  # the runs are spread over every primary
    assert figures.problems == ()
    assert (figures.over_reserved, figures.lost, figures.not_granted) == (0, 0, 0)
    assert figures.unequal_totals == 0
    assert figures.unanswered == 0
    assert figures.granted + figures.refused == 8 * 64 * 30
    assert figures.refused > 0  # two thirds of the runs ask for more than their limits


def _runs_in(slots: list[int], count: int) -> list[str]:
    """``count`` run IDs whose keys hash to ``slots`` (one run in each, as far as they go)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < min(count, len(slots)):
        run_id = f"moving-{i}"
        slot = key_slot(RunKeys.of("any", run_id).run.encode())  # the tag alone decides
        if slot in slots and slot not in found:
            found[slot] = run_id
        i += 1
    return list(found.values())


def _subscribed_on(
    cluster: RedisClusterNodes, port: int, channels: list[str], count: int, timeout: float = 30.0
) -> bool:
    """Whether each of ``channels`` has ``count`` subscribers on the node on ``port`` within
    ``timeout`` seconds, as the node itself reports."""
    give_up = time.monotonic() + timeout
    with cluster.node(port) as node:
        while time.monotonic() < give_up:
            if all(n == count for _channel, n in node.pubsub_shardnumsub(*channels)):
                return True
            threading.Event().wait(0.01)  # the listeners subscribe again on their own time
    return False


def _limits() -> BudgetLimits:
    return BudgetLimits(
        model_calls=1,
        tool_calls=1_000_000,
        per_tool_calls=1_000_000,
        input_tokens=1,
        output_tokens=1,
        total_tokens=2,
        run_bytes=1,
    )


def test_runs_whose_slot_moves_mid_run_go_on_and_their_endings_reach_another_process(
    redis_cluster: RedisClusterNodes,
) -> None:
    """A process reserves on two runs while ``redis-cli --cluster reshard`` moves their slots to
    another primary: its reservations go on after the move, the store counts exactly what it
    granted, and a cancel and an ending made here after the move run its callbacks -- which
    only its listener can do, following the runs' channels to their new owner."""
    source, target, _ = redis_cluster.primaries()
    first = redis_cluster.slots_of(source.port)[:4]
    cancelled, succeeded = _runs_in(first, 2)
    namespace = f"move-{uuid.uuid4().hex[:8]}"
    store = connect(source.port, namespace)
    contexts = [
        RunContext.create(
            session_id=SESSION, run_id=run_id, limits=_limits(), timeout=600.0, store=store
        )
        for run_id in (cancelled, succeeded)
    ]
    with redis_cluster.node(source.port) as node:
        # Keys of the runs' slots besides theirs, so that each slot takes redis-cli many MIGRATE
        # batches to move: the runs are reserved on while their slot is half moved, not only
        # before and after.
        filler = node.pipeline(transaction=False)
        for run_id in (cancelled, succeeded):
            for n in range(_FILLER):
                filler.set(f"filler:{{{run_id}}}:{n}", n)
        filler.execute()
    started = _SPAWN.Barrier(2)
    moved = _SPAWN.Event()
    out = _SPAWN.Queue()
    worker = _SPAWN.Process(
        target=cluster_workers.reserve_through_a_move,
        kwargs={
            "port": target.port,
            "namespace": namespace,
            "run_ids": [cancelled, succeeded],
            "after": 50,
            "started": started,
            "moved": moved,
            "out": out,
        },
    )
    worker.start()
    try:
        started.wait(_WAIT)  # it has attached, registered its callbacks and begun reserving
        slots = redis_cluster.reshard(len(first), source.port, target.port)
        moved.set()
        tag, before, after, failed = out.get(timeout=_WAIT)
        assert tag == "reserved"
        assert failed == []  # nothing refused, nothing unanswered: the move is not a fault
        assert all(sum(counts.values()) == 50 for counts in after)  # granted after the move
        # Both listeners, the worker's and this process's, follow the channels to the new owner
        # (the old one unsubscribed them when their slot left it).
        channels = [RunKeys.of(namespace, run_id).channel for run_id in (cancelled, succeeded)]
        assert _subscribed_on(redis_cluster, target.port, channels, 2)

        assert contexts[0].cancellation.cancel(CancellationReason.USER_REQUESTED)
        assert contexts[1].lifecycle.succeed("diagnosed after the move").changed
        tag, delivered, reasons = out.get(timeout=_WAIT)
        assert tag == "ended"
        assert delivered == [True, True]
        assert reasons == [["user_requested"], ["run_finished"]]  # each callback ran once
    finally:
        moved.set()
        worker.join(_WAIT)
    assert worker.exitcode == 0

    assert slots == first  # the fixture moved what the test picked the runs for
    for j, (ctx, run_id) in enumerate(zip(contexts, (cancelled, succeeded), strict=True)):
        usage = ctx.budget.snapshot()
        granted = Counter(before[j]) + Counter(after[j])
        assert dict(usage.per_tool_calls) == dict(granted)  # nothing lost, nothing doubled
        assert usage.tool_calls == sum(granted.values())
        keys = RunKeys.of(namespace, run_id)
        assert redis_cluster.primary_of(keys.run) == target.port
        with redis_cluster.node(target.port) as node:
            assert node.exists(keys.run) == 1  # the keys themselves moved
    assert contexts[0].lifecycle.state is RunState.CANCELLED
    assert contexts[1].lifecycle.state is RunState.SUCCESS
    store.close()
    store.client.close()
