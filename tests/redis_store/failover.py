"""One failover trial on a Redis Cluster: processes reserve on a shard while its primary changes.

A trial puts ``runs`` runs on one primary's slots (their hash tags chosen so), each with a limit
of Tool calls, and two more there that nobody reserves on. ``processes`` spawned processes
(fresh interpreters, as workers on other hosts) attach to all of them, register a callback on
each, and reserve Tool calls round robin over the first ones. Once every process has been granted
``progress_at`` reservations the trial fails the shard over, while they go on reserving:

- ``"failover"``: ``CLUSTER FAILOVER`` sent to the primary's replica (a maintenance window's
  manual failover: the primary stops taking writes until its replica has caught up);
- ``"kill"``: the primary is killed (SIGKILL); once its replica serves the slots, the killed node
  is started again on its port and rejoins as the new primary's replica (with
  ``durability="replica"`` no write is confirmed on that shard until then).

A process that reaches ``cap`` grants before the failover has finished waits for it (on an event,
not a timer): the limits are sized so that every run reaches its limit only after the failover.
Then the trial cancels one idle run and ends the other with success, and each process reserves
until each of its runs refuses (``BUDGET_EXHAUSTED``), waits for each of its callbacks, reads
every run again, and reports what it was granted, how often the store did not answer (it tries
again, as a user does: nothing was granted) and what its callbacks were called with.

What a trial counts (:class:`Trial`), per run and Tool: grants the processes saw but the store
does not count afterwards (``lost``: acknowledged writes a failover dropped), grants past a run's
limit (``over``), and the store's own counts past a limit (``exceeded``: never, whatever the
mode; the scripts refuse past a limit on whatever the primary holds).

Used by ``test_cluster_failover.py`` (a trial per case) and ``benchmarks/cluster_durability.py``
(repeated trials); :func:`revive` also by the tests that kill a primary themselves.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import multiprocessing
import re
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from redis.cluster import RedisCluster
from redis.crc import key_slot

from diagnosis_harness import (
    BudgetLimits,
    BudgetUsage,
    CancellationReason,
    RunContext,
    RunStoreUnavailable,
    RunTerminated,
)
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._run_keys import RunKeys

from .workers import answered

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier, Event

    from .cluster import RedisClusterNodes

__all__ = ["Durability", "Failure", "Plan", "Trial", "in_sync", "on_shard", "revive", "run_trial"]

Failure = Literal["failover", "kill"]
Durability = Literal["primary", "replica"]

SESSION = "failover-session"
TOOLS: Final = ("search", "fetch", "grep", "read")
TIMEOUT: Final = 2.0  # every client's socket_timeout: the store's timeout
_WAIT: Final = 120.0  # seconds anyone waits for another process before the trial fails
_TRIES: Final = 200  # a reservation tried again this often while the store does not answer
_SPAWN = multiprocessing.get_context("spawn")

# The reason each run's callback must run with, in every process.
EXHAUSTED: Final = CancellationReason.BUDGET_EXHAUSTED.value
CANCELLED: Final = CancellationReason.CLIENT_DISCONNECTED.value
FINISHED: Final = CancellationReason.RUN_FINISHED.value


def cluster_client(ports: tuple[int, ...]) -> RedisCluster:
    """A client of the cluster, which finds every node from the first of ``ports`` (all live
    when a client is made: a killed node is started again before the trial returns)."""
    return RedisCluster(host="127.0.0.1", port=ports[0], socket_timeout=TIMEOUT)


def on_shard(client: RedisCluster, namespace: str, port: int, count: int) -> list[str]:
    """``count`` fresh run IDs whose keys live on the primary on ``port``."""
    found: list[str] = []
    for i in itertools.count():
        run_id = f"run-{uuid.uuid4().hex[:8]}-{i}"
        slot = key_slot(RunKeys.of(namespace, run_id).run.encode())
        if client.nodes_manager.get_node_from_slot(slot).port == port:
            found.append(run_id)
            if len(found) == count:
                return found
    raise AssertionError("unreachable")  # pragma: no cover


def _online(cluster: RedisClusterNodes, primary_port: int) -> set[int]:
    """The ports of the replicas the primary on ``primary_port`` reports ``online`` (caught up,
    taking the replication stream: what ``durability="replica"`` needs)."""
    with cluster.node(primary_port) as client:
        info = client.info("replication")
    return {
        value["port"]
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    }


def _sync_at_once(cluster: RedisClusterNodes) -> None:
    for server in cluster.servers:
        if server.running:
            # A primary waits 5 s (Redis's default) for more replicas before a diskless full
            # sync; here a replica comes back alone.
            with cluster.node(server.port) as client:
                client.config_set("repl-diskless-sync-delay", 0)


def in_sync(cluster: RedisClusterNodes) -> None:
    """Return once every primary has a replica online: the cluster is whole as soon as its nodes
    agree on the slots, but a replica takes its first sync after that."""
    _sync_at_once(cluster)
    cluster.wait_whole(lambda: all(_online(cluster, p.port) for p in cluster.primaries()))


def revive(cluster: RedisClusterNodes, port: int, primary_port: int) -> None:
    """Start the killed node on ``port`` again (its own directory, so its own cluster config):
    it finds its slots taken by a newer epoch and turns into a replica of the node that took
    them, on ``primary_port``. Returns once that primary reports it online and the cluster is
    whole."""
    _sync_at_once(cluster)
    server = next(s for s in cluster.servers if s.port == port)
    server.start()
    # Asked of the primary alone until then: the node answers LOADING to everything while it
    # loads its first sync, which the cluster's own polling does not take for an answer.
    began = time.monotonic()
    while port not in _online(cluster, primary_port):
        assert time.monotonic() - began < _WAIT, f"the node on {port} did not come back"
        time.sleep(0.05)  # polling a server that converges by itself, not ordering a race

    def replica_of_it() -> bool:
        roles = {role.port: role for role in cluster.roles()}
        return not roles[port].primary and roles[port].primary_id == roles[primary_port].node_id

    cluster.wait_whole(replica_of_it)


# -- each process --------------------------------------------------------------------------------


def _record(calls: list[str], ran: threading.Event, reason: CancellationReason) -> None:
    calls.append(reason.value)
    ran.set()


def _reserve(ctx: RunContext, tool: str, missed: Counter[str]) -> None:
    """One reservation, tried again (the same call: the store's operation id keeps a write it
    sends again applied once) while the store does not answer; RunTerminated when refused."""
    for _ in range(_TRIES):
        try:
            ctx.reserve_tool_call(tool)
        except RunStoreUnavailable as error:
            # Counted by what the store said went wrong (its numbers left out): which refusals
            # a failover causes.
            cause = str(error).rsplit("nothing granted: ", 1)[-1]
            missed[re.sub(r"[0-9][0-9.]*", "N", cause)] += 1
            continue
        return
    ctx.reserve_tool_call(tool)


@dataclass(frozen=True)
class Plan:
    """What every process of a trial is given (it pickles: the processes are spawned)."""

    ports: tuple[int, ...]  # the cluster's nodes
    namespace: str
    durability: Durability
    runs: list[str]  # reserved on, round robin, until each refuses
    idle: list[str]  # attached to and watched only: the trial ends them
    progress_at: int  # grants after which a process tells the trial it is reserving
    cap: int  # grants after which a process waits for the failover to have finished


def reserve_through_failover(
    *,
    plan: Plan,
    worker: int,
    start: Barrier,
    progress: Queue[int],
    after: Event,
    out: Queue[Any],
) -> None:
    """Reserve round robin on the plan's runs until each refuses, through the failover; report
    what was granted and what the callbacks saw on ``out`` (see the module)."""
    try:
        out.put(_reserve_through_failover(plan, worker, start, progress, after))
    except BaseException:
        out.put(("error", worker, traceback.format_exc()))
        raise


def _reserve_through_failover(
    plan: Plan, worker: int, start: Barrier, progress: Queue[int], after: Event
) -> tuple[Any, ...]:
    client = cluster_client(plan.ports)
    store = RedisRunStore(client, namespace=plan.namespace, durability=plan.durability)
    contexts: dict[str, RunContext] = {}
    calls: dict[str, list[str]] = {}
    ended: dict[str, threading.Event] = {}
    for run_id in [*plan.runs, *plan.idle]:
        ctx = answered(functools.partial(_attach, store, run_id))
        calls[run_id], ended[run_id] = [], threading.Event()
        ctx.cancellation.register(functools.partial(_record, calls[run_id], ended[run_id]))
        contexts[run_id] = ctx
    granted: Counter[tuple[str, str]] = Counter()
    missed: Counter[str] = Counter()
    made = after_failover = 0
    capped = False
    live = list(plan.runs)
    start.wait(_WAIT)
    for i in itertools.count():
        if not live:
            break
        failed_over = after.is_set()
        if made >= plan.cap and not failed_over:
            capped = True
            assert after.wait(_WAIT), "the failover did not finish"
            failed_over = True
        run_id = live[i % len(live)]
        tool = TOOLS[(i + worker) % len(TOOLS)]
        try:
            _reserve(contexts[run_id], tool, missed)
        except RunTerminated:
            live.remove(run_id)
            continue
        granted[run_id, tool] += 1
        made += 1
        after_failover += failed_over
        if made == plan.progress_at:
            progress.put(worker)
    delivered = all(event.wait(_WAIT) for event in ended.values())
    for ctx in contexts.values():  # more reads of each ending: none may run a callback again
        with contextlib.suppress(RunStoreUnavailable):
            ctx.budget.snapshot()
    store.close()
    client.close()
    return (worker, dict(granted), dict(missed), after_failover, capped, delivered, calls)


# -- the trial -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial:
    """What one trial saw; see the module for each count."""

    failure: Failure
    durability: Durability
    limit: int  # each reserved run's Tool-call limit
    granted: int  # grants the processes saw, over every run
    stored: int  # the store's count of Tool calls afterwards, over every run
    lost: int  # grants seen but not counted by the store (per run and Tool)
    over: int  # grants seen past a run's limit
    exceeded: int  # the store's counts past a run's limit
    after_failover: int  # grants made once the failover had finished
    capped: int  # processes that reached the cap and waited for the failover to finish
    unavailable: int  # reservations the store did not answer (tried again)
    unconfirmed: int  # of which not confirmed by a replica
    refusals: dict[str, int]  # the store's messages, numbers left out, and how often
    failover_seconds: float  # from the failover's start until the cluster was whole again
    states: dict[str, str]  # each run's state in the store afterwards
    callbacks: list[dict[str, list[str]]]  # per process: each run's callback calls
    expected: dict[str, str]  # each run's one reason
    delivered: list[bool]  # per process: every callback ran within the wait

    @property
    def callbacks_once(self) -> bool:
        """Every process ran each run's callback exactly once, with the run's reason."""
        return all(self.delivered) and all(
            calls == {run_id: [reason] for run_id, reason in self.expected.items()}
            for calls in self.callbacks
        )


def _limits(tool_calls: int) -> BudgetLimits:
    return BudgetLimits(
        model_calls=1,
        tool_calls=tool_calls,
        per_tool_calls=tool_calls,  # four Tools share a run's calls: never the one that binds
        input_tokens=1,
        output_tokens=1,
        total_tokens=2,
        run_bytes=1,
    )


def _fail(cluster: RedisClusterNodes, failure: Failure, primary: int, replica: int) -> float:
    began = time.monotonic()
    if failure == "failover":
        cluster.failover(replica)
    else:
        cluster.kill(primary)  # returns once the replica serves the slots
        seconds = time.monotonic() - began
        revive(cluster, primary, replica)
        return seconds
    return time.monotonic() - began


def run_trial(
    cluster: RedisClusterNodes,
    *,
    failure: Failure,
    durability: Durability,
    shard: int = 0,
    processes: int = 3,
    runs: int = 2,
    progress_at: int = 100,
    cap: int = 600,
) -> Trial:
    """One trial on the ``shard``-th primary (by port); see the module."""
    primary = cluster.primaries()[shard % 3]
    replica = next(role for role in cluster.replicas() if role.primary_id == primary.node_id)
    ports = tuple(server.port for server in cluster.servers)
    namespace = f"f-{uuid.uuid4().hex[:8]}"
    # Room for every process's cap before the failover, and half as much again after it.
    limit = processes * (cap + cap // 2) // runs + processes
    client = cluster_client(ports)
    store = RedisRunStore(client, namespace=namespace, durability=durability)
    reserved_ids = on_shard(client, namespace, primary.port, runs + 2)
    cancelled, finished = reserved_ids[runs:]
    reserved_ids = reserved_ids[:runs]
    for run_id in reserved_ids:
        RunContext.create(
            session_id=SESSION, run_id=run_id, limits=_limits(limit), timeout=600, store=store
        )
    for run_id in (cancelled, finished):
        RunContext.create(
            session_id=SESSION, run_id=run_id, limits=_limits(1), timeout=600, store=store
        )
    plan = Plan(
        ports=ports,
        namespace=namespace,
        durability=durability,
        runs=reserved_ids,
        idle=[cancelled, finished],
        progress_at=progress_at,
        cap=cap,
    )
    start, after = _SPAWN.Barrier(processes), _SPAWN.Event()
    progress: Queue[int] = _SPAWN.Queue()
    out: Queue[Any] = _SPAWN.Queue()
    spawned = [
        _SPAWN.Process(
            target=reserve_through_failover,
            kwargs={
                "plan": plan,
                "worker": worker,
                "start": start,
                "progress": progress,
                "after": after,
                "out": out,
            },
        )
        for worker in range(processes)
    ]
    for process in spawned:
        process.start()
    try:
        for _ in spawned:  # every process is reserving: fail the shard over under them
            progress.get(timeout=_WAIT)
        failover_seconds = _fail(cluster, failure, primary.port, replica.port)
        after.set()
        # Endings made after the failover: every process must still learn of them, once.
        answered(
            lambda: _attach(store, cancelled).cancellation.cancel(
                CancellationReason.CLIENT_DISCONNECTED
            )
        )
        answered(lambda: _attach(store, finished).lifecycle.succeed("the diagnosis is ready"))
        results = [out.get(timeout=_WAIT) for _ in spawned]
    finally:
        after.set()  # a process waiting on it goes on, whatever failed here
        for process in spawned:
            process.join(_WAIT)
    errors = [result for result in results if result[0] == "error"]
    assert not errors, errors
    trial = _count(
        store=store,
        failure=failure,
        durability=durability,
        limit=limit,
        run_ids=reserved_ids,
        results=results,
        failover_seconds=failover_seconds,
    )
    expected = dict.fromkeys(reserved_ids, EXHAUSTED)
    expected |= {cancelled: CANCELLED, finished: FINISHED}
    states = {run_id: answered(functools.partial(_state, store, run_id)) for run_id in expected}
    store.close()
    client.close()
    return Trial(
        **trial,
        states=states,
        callbacks=[result[6] for result in results],
        expected=expected,
        delivered=[result[5] for result in results],
    )


def _attach(store: RedisRunStore, run_id: str) -> RunContext:
    return RunContext.attach(session_id=SESSION, run_id=run_id, store=store)


def _state(store: RedisRunStore, run_id: str) -> str:
    return _attach(store, run_id).lifecycle.state.name


def _usage(store: RedisRunStore, run_id: str) -> BudgetUsage:
    return _attach(store, run_id).budget.snapshot()


def _count(
    *,
    store: RedisRunStore,
    failure: Failure,
    durability: Durability,
    limit: int,
    run_ids: list[str],
    results: list[Any],
    failover_seconds: float,
) -> dict[str, Any]:
    seen: Counter[tuple[str, str]] = Counter()
    missed: Counter[str] = Counter()
    for _worker, granted, worker_missed, *_rest in results:
        seen.update(granted)
        missed.update(worker_missed)
    lost = over = exceeded = stored_total = 0
    for run_id in run_ids:
        usage = answered(functools.partial(_usage, store, run_id))
        stored = dict(usage.per_tool_calls)
        assert usage.tool_calls == sum(stored.values()), usage  # total == sum per Tool
        stored_total += usage.tool_calls
        lost += sum(max(0, seen[run_id, tool] - stored.get(tool, 0)) for tool in TOOLS)
        over += max(0, sum(seen[run_id, tool] for tool in TOOLS) - limit)
        exceeded += max(0, usage.tool_calls - limit)
    return {
        "failure": failure,
        "durability": durability,
        "limit": limit,
        "granted": sum(seen.values()),
        "stored": stored_total,
        "lost": lost,
        "over": over,
        "exceeded": exceeded,
        "after_failover": sum(result[3] for result in results),
        "capped": sum(bool(result[4]) for result in results),
        "unavailable": sum(missed.values()),
        "unconfirmed": sum(n for said, n in missed.items() if "not confirmed by a replica" in said),
        "refusals": dict(missed),
        "failover_seconds": failover_seconds,
    }
