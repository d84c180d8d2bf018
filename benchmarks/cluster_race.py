"""The race on Redis Cluster at the issue's size: 8 processes, 64 runs, 1,000 reservations each.

Starts the tests' 3-primary, 3-replica cluster of Debian's ``redis-server`` (``tests/redis_store/
cluster.py``, on free loopback ports, in a temporary directory) and runs the tests' race
(``tests/redis_store/cluster_workers.py``, whose smaller instance CI runs): 64 runs spread over
the 3 shards, each of 8 processes started together on a barrier making 1,000 Tool-call
reservations on every run (512,000 in all). A third of the runs have room for every call; in a
third the total limit binds, in a third each Tool's. It prints what the store counted against
what the processes saw -- over-reservations, lost grants, calls counted but never granted, runs
whose total is not the sum per Tool: all must be 0 -- and the time from the barrier to the last
process's report. Exits 1 if a count that must be 0 is not.

Needs ``redis-server`` and ``redis-cli`` and the ``redis`` extra. Run:
``python benchmarks/cluster_race.py [--processes 8] [--runs 64] [--reservations 1000]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import redis

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=64)
    parser.add_argument("--reservations", type=int, default=1_000, help="per process and run")
    args = parser.parse_args()
    # The race and the cluster are the tests' own: one piece of code for the figure and for CI.
    # The spawned workers import the race's module by this path too (spawn passes sys.path on).
    sys.path.insert(0, str(TESTS))
    from redis_store.cluster import REDIS_CLI, RedisClusterNodes  # noqa: PLC0415
    from redis_store.cluster_workers import race  # noqa: PLC0415
    from redis_store.server import REDIS_SERVER  # noqa: PLC0415

    if REDIS_SERVER is None or REDIS_CLI is None:
        sys.exit("redis-server and redis-cli are needed (apt-get install redis-server)")
    with tempfile.TemporaryDirectory() as directory:
        cluster = RedisClusterNodes(Path(directory))
        try:
            cluster.start()
            figures = race(
                cluster,
                "bench",
                processes=args.processes,
                runs=args.runs,
                reservations=args.reservations,
            )
        finally:
            cluster.stop()
    print(
        f"{figures.processes} processes, {figures.runs} runs on {figures.shards} shards, "
        f"{figures.reservations:,} reservations each on every run"
    )
    print(f"granted {figures.granted:,}, refused {figures.refused:,}, "
          f"not answered {figures.unanswered:,}")  # fmt: skip
    print(f"over-reservations {figures.over_reserved}, lost {figures.lost}, "
          f"counted but not granted {figures.not_granted}, "
          f"runs whose total != sum per Tool {figures.unequal_totals}")  # fmt: skip
    grants = figures.granted / figures.seconds
    print(f"{figures.seconds:.1f} s: {figures.per_second:,.0f} reservations per second "
          f"(granted or refused), {grants:,.0f} grants per second")  # fmt: skip
    print(f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"redis-py {redis.__version__}")  # fmt: skip
    for problem in figures.problems:
        print(problem)
    wrong = figures.over_reserved + figures.lost + figures.not_granted + figures.unequal_totals
    return 1 if wrong or figures.problems or figures.shards != 3 else 0


if __name__ == "__main__":
    sys.exit(main())
