"""The Redis run store on a 3-shard Redis Cluster: against one server, and against a bare ``INCR``.

Two figures the issue asks for, measured in one run of this script:

- **Reservations per second, 64 runs, one server vs the cluster.** 64 runs are created with the
  store; 1 process, then 8 processes started together on a barrier, each attach to all 64 and
  reserve Tool calls cycling over them (wall time from the first start to the last end). On the
  cluster the 64 runs' hash tags spread them over the 3 primaries. The counts are read back
  afterwards: none may be lost.
- **A reservation's time over a bare ``INCR`` on the cluster** (target: at most 1.5x). Both on
  one ``RedisCluster`` client with the same settings: the baseline ``client.incr(key)`` on a key
  of the run's own hash tag (so the same primary answers it), the candidate
  ``ctx.reserve_tool_call("search")`` (one ``FCALL`` of the store's library on that primary).
  They alternate in batches, so a change in the machine's load falls on both; each figure is the
  median of the batches' per-call times. The same pair is timed on the one server too, for
  comparison (``bench_redis.py`` measures that one in depth).

The one server and the cluster (3 primaries, 3 replicas, each a Debian ``redis-server`` on a free
loopback port, without persistence) are started by the test suite's own fixtures
(``tests/redis_store/server.py`` and ``cluster.py``), so the benchmark measures the cluster the
tests check. ``throughput`` also takes ``durability="replica"``: ``cluster_durability.py`` prices
that mode with it.

Needs ``redis-server`` and ``redis-cli`` (Debian's ``redis-server`` package) and the ``redis``
extra. Run: ``tox -e bench`` or ``python benchmarks/bench_redis_cluster.py [--quick]``; writes
``benchmarks/results/redis_cluster.json`` and ``redis_cluster.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import redis
from bench_redis import LIMITS, SESSION, alternating
from redis.cluster import RedisCluster
from redis.crc import key_slot

from diagnosis_harness import RunContext
from diagnosis_harness.redis import RedisRunStore

# The test suite's server and cluster fixtures (tests/redis_store/, imported as `redis_store`, as
# pytest imports it), so that there is one way to start a cluster in this repository.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from redis_store.cluster import REDIS_CLI, RedisClusterNodes
from redis_store.server import REDIS_SERVER, RedisServer

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

RESULTS = Path(__file__).parent / "results"
TARGET = 1.5
RUNS = 64
TIMEOUT = 5.0  # every client's socket_timeout: the store's timeout
Durability = Literal["primary", "replica"]


@dataclass(frozen=True)
class Target:
    """Where the runs live, in a form a spawned process can take: one server or a cluster."""

    cluster: bool
    ports: tuple[int, ...]  # the server's, or every node's (any live one finds the rest)

    def client(self) -> redis.Redis | RedisCluster:
        if self.cluster:  # the first node finds the others
            return RedisCluster(host="127.0.0.1", port=self.ports[0], socket_timeout=TIMEOUT)
        return redis.Redis(host="127.0.0.1", port=self.ports[0], socket_timeout=TIMEOUT)

    def store(self, client: Any, namespace: str, durability: Durability) -> RedisRunStore:
        return RedisRunStore(client, namespace=namespace, durability=durability)


def ratio(target: Target, batches: int, batch: int) -> dict[str, float]:
    """Median per-call ns of ``INCR`` and of a reservation, alternating batches, one client."""
    client = target.client()
    namespace = f"ratio-{uuid.uuid4().hex[:8]}"
    store = target.store(client, namespace, "primary")
    run_id = "ratio"
    ctx = RunContext.create(
        session_id=SESSION, run_id=run_id, limits=LIMITS, timeout=3_600, store=store
    )
    key = f"{namespace}:{{{run_id}}}:incr"  # the run's hash tag: the run's primary answers it

    def incr() -> None:
        client.incr(key)

    def reserve() -> None:
        ctx.reserve_tool_call("search")

    figures = alternating(incr, reserve, batches, batch)
    store.close()
    client.close()
    return figures


def _reserve_many(
    *,
    target: Target,
    namespace: str,
    durability: Durability,
    run_ids: list[str],
    worker: int,
    n: int,
    start: Barrier,
    out: Queue[tuple[int, int]],
) -> None:
    """Attach to every run, reserve once on each (warm), then ``n`` times cycling over them."""
    client = target.client()
    store = target.store(client, namespace, durability)
    contexts = [
        RunContext.attach(session_id=SESSION, run_id=run_id, store=store) for run_id in run_ids
    ]
    for ctx in contexts:
        ctx.reserve_tool_call("search")
    start.wait()
    began = time.monotonic_ns()
    for i in range(n):
        contexts[(i + worker) % len(contexts)].reserve_tool_call("search")
    out.put((began, time.monotonic_ns()))
    store.close()
    client.close()


def throughput(target: Target, processes: int, n: int, durability: Durability = "primary") -> float:
    """Reservations per second of ``processes`` processes, each making ``n`` over 64 runs."""
    client = target.client()
    namespace = f"throughput-{uuid.uuid4().hex[:8]}"
    store = target.store(client, namespace, durability)
    run_ids = [f"run-{i}" for i in range(RUNS)]
    for run_id in run_ids:
        RunContext.create(
            session_id=SESSION, run_id=run_id, limits=LIMITS, timeout=3_600, store=store
        )
    spawn = multiprocessing.get_context("spawn")
    start, out = spawn.Barrier(processes), spawn.Queue()
    workers = [
        spawn.Process(
            target=_reserve_many,
            kwargs={
                "target": target,
                "namespace": namespace,
                "durability": durability,
                "run_ids": run_ids,
                "worker": worker,
                "n": n,
                "start": start,
                "out": out,
            },
        )
        for worker in range(processes)
    ]
    for worker in workers:
        worker.start()
    spans = [out.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
        assert worker.exitcode == 0, worker.exitcode
    seconds = (max(end for _, end in spans) - min(began for began, _ in spans)) / 1e9
    counted = 0
    for run_id in run_ids:
        ctx = RunContext.attach(session_id=SESSION, run_id=run_id, store=store)
        counted += ctx.budget.snapshot().tool_calls
    assert counted == processes * (n + RUNS), (counted, processes * (n + RUNS))  # none lost
    store.close()
    client.close()
    return processes * n / float(seconds)  # the spans came through a queue


def rates(
    setups: dict[str, tuple[Target, Durability]], rounds: int, n: int
) -> dict[str, dict[str, float]]:
    """Reservations per second of each setup with 1 and 8 processes: the median of ``rounds``
    rounds, each measuring every setup in turn (in the reverse order every other round), so
    that a change in the machine's load falls on all of them."""
    seen: dict[str, dict[str, list[float]]] = {name: {"1": [], "8": []} for name in setups}
    for i in range(rounds):
        names = list(setups) if i % 2 == 0 else list(reversed(setups))
        for name in names:
            target, durability = setups[name]
            for processes in (1, 8):
                seen[name][str(processes)].append(throughput(target, processes, n, durability))
    return {
        name: {p: statistics.median(values) for p, values in by_processes.items()}
        for name, by_processes in seen.items()
    }


def load_average() -> float:
    """The machine's 1-minute load average: what else ran on its cores meanwhile."""
    return os.getloadavg()[0]


def spread(cluster: RedisClusterNodes) -> dict[int, int]:
    """How many of the 64 runs each primary holds (by its port)."""
    client = cluster.client()
    shards: dict[int, int] = {}
    for i in range(RUNS):
        slot = key_slot(f"ns:{{run-{i}}}:run".encode())  # a run's slot is its ID's (hash tag)
        port = client.nodes_manager.get_node_from_slot(slot).port
        shards[port] = shards.get(port, 0) + 1
    client.close()
    return shards


def _table(data: dict[str, Any]) -> str:
    one, cluster = data["one_server"], data["cluster"]
    verdict = "ok" if cluster["ratio"] <= TARGET else "OVER TARGET"
    lines = [
        f"| processes | one server: reservations per second, {RUNS} runs "
        f"| 3-shard cluster | cluster / one server |",
        "|---|---:|---:|---:|",
    ]
    for processes in ("1", "8"):
        single, sharded = one["per_second"][processes], cluster["per_second"][processes]
        lines.append(f"| {processes} | {single:,.0f} | {sharded:,.0f} | {sharded / single:.2f}x |")
    lines += [
        "",
        "| per call (median of batches) | one server | 3-shard cluster |",
        "|---|---:|---:|",
        f"| bare `INCR` round trip | {one['incr_ns'] / 1000:.1f} µs "
        f"| {cluster['incr_ns'] / 1000:.1f} µs |",
        f"| `ctx.reserve_tool_call()` | {one['reservation_ns'] / 1000:.1f} µs "
        f"| {cluster['reservation_ns'] / 1000:.1f} µs |",
        f"| ratio (target on the cluster ≤ {TARGET}) | {one['ratio']:.2f} "
        f"| {cluster['ratio']:.2f} ({verdict}) |",
        "",
        f"Reservations per second: median of {data['rounds']} interleaved rounds of "
        f"{data['reservations_per_process']:,} per process. The {RUNS} runs over the cluster's "
        f"primaries: {data['runs_per_primary']}. Load average "
        f"{' → '.join(str(load) for load in data['load_average'])}; "
        f"{data['cpus']} CPUs, Python {data['python']}, redis-py {data['redis_py']}, "
        f"{data['date']}.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer batches")
    options, _ = parser.parse_known_args()
    if REDIS_SERVER is None or REDIS_CLI is None:
        sys.exit("redis-server and redis-cli are not installed (apt-get install redis-server)")
    batches, batch, n, rounds = (6, 200, 500, 1) if options.quick else (30, 1_000, 2_000, 3)
    loads = [load_average()]
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory) / "one")
        server.directory.mkdir()
        cluster = RedisClusterNodes(Path(directory) / "cluster")
        try:
            server.start()
            cluster.start()
            targets = {
                "one_server": Target(cluster=False, ports=(server.port,)),
                "cluster": Target(cluster=True, ports=tuple(s.port for s in cluster.servers)),
            }
            measured: dict[str, dict[str, Any]] = {
                name: ratio(target, batches, batch) for name, target in targets.items()
            }
            per_second = rates(
                {name: (target, "primary") for name, target in targets.items()}, rounds, n
            )
            for name, values in per_second.items():
                measured[name]["per_second"] = values
            loads.append(load_average())
            runs_per_primary = sorted(spread(cluster).values())
        finally:
            cluster.stop()
            server.stop()
    data = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "cpus": multiprocessing.cpu_count(),
        "batches": batches,
        "batch": batch,
        "reservations_per_process": n,
        "rounds": rounds,
        "load_average": [round(load, 2) for load in loads],
        "runs": RUNS,
        "runs_per_primary": runs_per_primary,
        "target": TARGET,
        **{
            name: {
                "incr_ns": round(values["incr_ns"], 1),
                "reservation_ns": round(values["reservation_ns"], 1),
                "ratio": round(values["ratio"], 3),
                "per_second": {p: round(v) for p, v in values["per_second"].items()},
            }
            for name, values in measured.items()
        },
    }
    table = _table(data)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "redis_cluster.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "redis_cluster.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0 if measured["cluster"]["ratio"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
