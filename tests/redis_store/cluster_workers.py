"""Processes on the cluster: the race of reservations over every shard, and reservations through a
slot that moves.

:func:`race` is the whole race, from the runs' creation to the figures: the cluster tests run a
small one and ``benchmarks/cluster_race.py`` the issue's (8 processes, 64 runs, 1,000
reservations each). The workers are started with ``spawn`` (fresh interpreters, as workers on
other hosts), so each function takes only what pickles: the port of a node the cluster client
starts from, the namespace, the run IDs, and multiprocessing's own barriers, events and queues.
Each returns what it saw on ``out``. Nothing here waits on a timer: barriers start the workers
together, events say what happened, and a wait's bound only fails a test that would hang.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from redis.cluster import RedisCluster

from diagnosis_harness import (
    BudgetDimension,
    BudgetLimits,
    CancellationReason,
    RunContext,
    RunStoreUnavailable,
    RunTerminated,
)
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._run_keys import RunKeys

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier, Event

    from .cluster import RedisClusterNodes

__all__ = [
    "SESSION",
    "TOOLS",
    "RaceFigures",
    "connect",
    "race",
    "reserve_on_every_run",
    "reserve_through_a_move",
    "shards_of",
]

SESSION: Final = "cluster-session"
TOOLS: Final = ("search", "fetch", "grep", "read")
WAIT: Final = 300.0  # seconds a worker or the race waits for the others before it fails
_SPAWN: Final = multiprocessing.get_context("spawn")


def connect(port: int, namespace: str) -> RedisRunStore:
    """A store on the cluster, its client starting from the node on ``port``. The timeout is
    long: eight processes and six servers share two cores, and a round trip the machine's load
    delays is not what these figures are about."""
    client = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10.0)
    return RedisRunStore(client, namespace=namespace)


def shards_of(cluster: RedisClusterNodes, namespace: str, run_ids: list[str]) -> set[int]:
    """The ports of the primaries that hold ``run_ids`` (each run's hash key)."""
    return {cluster.primary_of(RunKeys.of(namespace, run_id).run) for run_id in run_ids}


# -- the race over every shard ----------------------------------------------------------------


def reserve_on_every_run(
    *,
    port: int,
    namespace: str,
    run_ids: list[str],
    worker: int,
    reservations: int,
    start: Barrier,
    out: Queue[Any],
) -> None:
    """``reservations`` Tool-call reservations on each run, a run after another, cycling over
    :data:`TOOLS`; reports, for each run, the grants by Tool, the refusals and the calls the
    store did not answer."""
    store = connect(port, namespace)
    contexts = [RunContext.attach(session_id=SESSION, run_id=r, store=store) for r in run_ids]
    granted = [Counter[str]() for _ in run_ids]
    refused = [0] * len(run_ids)
    unanswered = [0] * len(run_ids)
    start.wait(WAIT)
    for i in range(reservations):
        for j, ctx in enumerate(contexts):
            tool = TOOLS[(i + j + worker) % len(TOOLS)]
            try:
                ctx.reserve_tool_call(tool)
            except RunTerminated:
                refused[j] += 1
            except RunStoreUnavailable:
                unanswered[j] += 1  # granted or not, nobody knows: counted, never retried
            else:
                granted[j][tool] += 1
    store.close()
    store.client.close()
    out.put((worker, [dict(g) for g in granted], refused, unanswered))


def _limits(asked: int, kind: int) -> tuple[BudgetLimits, BudgetDimension | None]:
    """A run's limits, by ``kind``: every call fits (0), the total binds (1), each Tool's binds
    (2); with the limit expected to end the run. ``asked``: the calls all processes ask for."""
    per_tool_asked = asked // len(TOOLS)
    total, per_tool, ends = {
        0: (asked, asked, None),
        1: (asked * 3 // 4, asked, BudgetDimension.TOOL_CALLS),
        2: (asked, per_tool_asked * 3 // 4, BudgetDimension.PER_TOOL_CALLS),
    }[kind]
    limits = BudgetLimits(
        model_calls=1,
        tool_calls=total,
        per_tool_calls=per_tool,
        input_tokens=1,
        output_tokens=1,
        total_tokens=2,
        run_bytes=1,
    )
    return limits, ends


@dataclass(frozen=True, slots=True, kw_only=True)
class RaceFigures:
    """What :func:`race` counted. ``problems`` says, run by run, where a count is not right."""

    processes: int
    runs: int
    reservations: int  # asked by each process on each run
    shards: int  # primaries the runs are on
    granted: int
    refused: int
    unanswered: int  # RunStoreUnavailable: the store did not answer in time
    over_reserved: int  # counters past their limit (a run's total, or one Tool's)
    lost: int  # grants the processes saw that the store does not count
    not_granted: int  # calls the store counts that no process saw granted
    unequal_totals: int  # runs whose total is not the sum of its per-Tool counts
    seconds: float  # from the barrier that starts the processes to the last one's report
    problems: tuple[str, ...] = field(default=())

    @property
    def per_second(self) -> float:
        return (self.granted + self.refused + self.unanswered) / self.seconds


def _check_run(
    run_id: str,
    limits: BudgetLimits,
    ends: BudgetDimension | None,
    seen: Counter[str],
    ctx: RunContext,
) -> tuple[int, int, int, int, list[str]]:
    """One run's snapshot against the grants the processes saw: (over-reserved, lost, not
    granted, unequal totals, problems)."""
    usage = ctx.budget.snapshot()
    counted = Counter(dict(usage.per_tool_calls))
    over = int(usage.tool_calls > limits.tool_calls) + sum(
        n > limits.per_tool_calls for n in counted.values()
    )
    lost = sum((seen - counted).values())
    not_granted = sum((counted - seen).values())
    unequal = int(usage.tool_calls != sum(counted.values()))
    problems = []
    if over or lost or not_granted or unequal:
        problems.append(f"{run_id}: saw {dict(seen)}, counted {usage.tool_calls} = {dict(counted)}")
    reached = {
        None: usage.tool_calls == limits.tool_calls,  # every call asked fitted, and was granted
        BudgetDimension.TOOL_CALLS: usage.tool_calls == limits.tool_calls,
        BudgetDimension.PER_TOOL_CALLS: max(counted.values()) == limits.per_tool_calls,
    }[ends]
    if usage.exhausted is not ends or not reached:
        problems.append(f"{run_id}: ended by {usage.exhausted}, not {ends}: {usage}")
    return over, lost, not_granted, unequal, problems


def race(
    cluster: RedisClusterNodes, namespace: str, *, processes: int, runs: int, reservations: int
) -> RaceFigures:
    """``runs`` runs on the cluster; ``processes`` processes, started together, each making
    ``reservations`` Tool-call reservations on every run; then each run's snapshot against the
    grants the processes saw. A third of the runs have room for every call; in a third the total
    limit binds, in a third each Tool's (both below the calls asked, so refusals happen)."""
    asked = processes * reservations
    run_ids = [f"run-{i}" for i in range(runs)]
    plans = [_limits(asked, i % 3) for i in range(runs)]
    port = cluster.primaries()[0].port
    store = connect(port, namespace)
    contexts = [
        RunContext.create(
            session_id=SESSION, run_id=run_id, limits=limits, timeout=3_600.0, store=store
        )
        for run_id, (limits, _ends) in zip(run_ids, plans, strict=True)
    ]
    shards = len(shards_of(cluster, namespace, run_ids))
    start = _SPAWN.Barrier(processes + 1)
    out = _SPAWN.Queue()
    where = {"port": port, "namespace": namespace, "run_ids": run_ids}
    workers = [
        _SPAWN.Process(
            target=reserve_on_every_run,
            kwargs={**where, "worker": w, "reservations": reservations, "start": start, "out": out},
        )
        for w in range(processes)
    ]
    for process in workers:
        process.start()
    start.wait(WAIT)
    started = time.perf_counter()
    results = [out.get(timeout=WAIT) for _ in workers]
    seconds = time.perf_counter() - started
    for process in workers:
        process.join(WAIT)
        assert process.exitcode == 0
    seen = [Counter[str]() for _ in run_ids]
    for _worker, granted, _refused, _unanswered in results:
        for j, by_tool in enumerate(granted):
            seen[j].update(by_tool)
    checked = [
        _check_run(run_id, limits, ends, seen[j], contexts[j])
        for j, (run_id, (limits, ends)) in enumerate(zip(run_ids, plans, strict=True))
    ]
    store.close()
    store.client.close()
    return RaceFigures(
        processes=processes,
        runs=runs,
        reservations=reservations,
        shards=shards,
        granted=sum(sum(s.values()) for s in seen),
        refused=sum(sum(r[2]) for r in results),
        unanswered=sum(sum(r[3]) for r in results),
        over_reserved=sum(c[0] for c in checked),
        lost=sum(c[1] for c in checked),
        not_granted=sum(c[2] for c in checked),
        unequal_totals=sum(c[3] for c in checked),
        seconds=seconds,
        problems=tuple(problem for c in checked for problem in c[4]),
    )


# -- reservations through a slot that moves ----------------------------------------------------


def reserve_through_a_move(
    *,
    port: int,
    namespace: str,
    run_ids: list[str],
    after: int,
    started: Barrier,
    moved: Event,
    out: Queue[Any],
) -> None:
    """Reserve on ``run_ids`` in turn until ``moved`` is set (their slot moves meanwhile), then
    ``after`` more on each; report the grants by Tool of each run, before and after, and the
    calls refused or not answered. Then do nothing with the runs: each run's ending, made by
    another process, can only reach this one's callbacks through its listener, which must have
    followed the slot to its new owner; report the reasons each callback was run with."""
    store = connect(port, namespace)
    contexts = [RunContext.attach(session_id=SESSION, run_id=r, store=store) for r in run_ids]
    reasons: list[list[str]] = [[] for _ in run_ids]
    ran = [threading.Event() for _ in run_ids]

    def keeper(j: int) -> Callable[[CancellationReason], None]:
        def callback(reason: CancellationReason) -> None:
            reasons[j].append(reason.value)
            ran[j].set()

        return callback

    for j, ctx in enumerate(contexts):
        ctx.cancellation.register(keeper(j))
    before = [Counter[str]() for _ in run_ids]
    later = [Counter[str]() for _ in run_ids]
    failed: list[str] = []

    def reserve(j: int, i: int, into: list[Counter[str]]) -> None:
        tool = TOOLS[i // len(run_ids) % len(TOOLS)]
        try:
            contexts[j].reserve_tool_call(tool)
        except (RunTerminated, RunStoreUnavailable) as error:
            failed.append(f"{run_ids[j]}: {error!r}")
        else:
            into[j][tool] += 1

    started.wait(WAIT)
    i = 0
    while not moved.is_set():
        reserve(i % len(run_ids), i, before)
        i += 1
    for n in range(after):
        for j in range(len(run_ids)):
            reserve(j, n, later)
    out.put(("reserved", [dict(c) for c in before], [dict(c) for c in later], failed))
    delivered = [event.wait(WAIT) for event in ran]
    store.close()
    store.client.close()
    out.put(("ended", delivered, reasons))
