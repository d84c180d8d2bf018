"""A reservation on the Redis run store, against a bare ``INCR`` round trip on the same connection.

The issue's budget: a reservation costs one round trip, so its time over a bare ``INCR`` timed in
the same run, on the same connection, is at most 1.5x. Both go through redis-py's
``Redis.execute_command`` path on one pooled connection of one client: the baseline is
``client.incr(key)``, the candidate ``ctx.reserve_tool_call("search")`` (one ``EVALSHA`` of
``reserve_tool_call.lua``, which checks the run, the deadline and both limits and reserves). They
alternate in batches, so a change in the machine's load falls on both; each figure is the median
of the batches' per-call times. Then reservations per second: one process, and eight processes
started together on a barrier against one run (wall time from the first start to the last end).

Needs ``redis-server`` (Debian's package; the benchmark starts its own on a free loopback port,
without persistence) and the ``redis`` extra. Run: ``tox -e bench`` or
``python benchmarks/bench_redis.py [--quick]``; writes ``benchmarks/results/redis.json`` and
``redis.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from diagnosis_harness import BudgetLimits, RunContext
from diagnosis_harness.redis import RedisRunStore

RESULTS = Path(__file__).parent / "results"
TARGET = 1.5
SESSION = "bench"
LIMITS = BudgetLimits(
    model_calls=1,
    tool_calls=10**12,
    per_tool_calls=10**12,
    input_tokens=1,
    output_tokens=1,
    total_tokens=1,
    run_bytes=1,
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start_server(directory: str) -> tuple[subprocess.Popen[bytes], int]:
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    port = _free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", directory, "--logfile", str(Path(directory) / "redis.log")]
    )  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0)
    for _ in range(2_000):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.005)  # waiting for the server to listen
    client.close()
    return process, port


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5.0)


def per_call_ns(call: Any, n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        call()
    return (time.perf_counter_ns() - start) / n


def alternating(incr: Any, reserve: Any, batches: int, batch: int) -> dict[str, float]:
    """Median per-call ns of ``incr`` and of ``reserve``, and their ratio: each warmed first,
    then ``batches`` batches of ``batch`` calls, the two taking turns at going first."""
    for call in (incr, reserve):  # warm the connections, the function cache and the code paths
        per_call_ns(call, batch)
    incr_ns: list[float] = []
    reserve_ns: list[float] = []
    for i in range(batches):
        order = [(incr, incr_ns), (reserve, reserve_ns)]
        for call, values in order if i % 2 == 0 else reversed(order):
            values.append(per_call_ns(call, batch))
    incr_median, reserve_median = statistics.median(incr_ns), statistics.median(reserve_ns)
    return {
        "incr_ns": incr_median,
        "reservation_ns": reserve_median,
        "ratio": reserve_median / incr_median,
    }


def ratio(port: int, batches: int, batch: int) -> dict[str, float]:
    """Median per-call ns of INCR and of a reservation, alternating batches on one connection."""
    client = _client(port)
    store = RedisRunStore(client, namespace="bench")
    ctx = RunContext.create(
        session_id=SESSION, run_id="ratio", limits=LIMITS, timeout=3_600, store=store
    )

    def incr() -> None:
        client.incr("bench:incr")

    def reserve() -> None:
        ctx.reserve_tool_call("search")

    figures = alternating(incr, reserve, batches, batch)
    store.close()
    client.close()
    return figures


def _reserve_many(port: int, run_id: str, n: int, start: Any, out: Any) -> None:
    client = _client(port)
    store = RedisRunStore(client, namespace="bench")
    ctx = RunContext.attach(session_id=SESSION, run_id=run_id, store=store)
    ctx.reserve_tool_call("search")  # warm
    start.wait()
    began = time.monotonic_ns()
    for _ in range(n):
        ctx.reserve_tool_call("search")
    out.put((began, time.monotonic_ns()))
    store.close()


def throughput(port: int, processes: int, n: int) -> float:
    """Reservations per second of ``processes`` processes, each making ``n``, on one run."""
    client = _client(port)
    store = RedisRunStore(client, namespace="bench")
    run_id = f"throughput-{processes}"
    RunContext.create(session_id=SESSION, run_id=run_id, limits=LIMITS, timeout=3_600, store=store)
    spawn = multiprocessing.get_context("spawn")
    start, out = spawn.Barrier(processes), spawn.Queue()
    workers = [
        spawn.Process(target=_reserve_many, args=(port, run_id, n, start, out))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    spans = [out.get() for _ in workers]
    for worker in workers:
        worker.join()
    seconds = (max(end for _, end in spans) - min(began for began, _ in spans)) / 1e9
    total = RunContext.attach(session_id=SESSION, run_id=run_id, store=store).budget.snapshot()
    assert total.tool_calls == processes * (n + 1), total  # none lost
    store.close()
    client.close()
    return float(processes * n / seconds)  # the spans came through a queue, as Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer batches")
    options, _ = parser.parse_known_args()
    batches, batch, n = (6, 200, 500) if options.quick else (30, 1_000, 4_000)
    with tempfile.TemporaryDirectory() as directory:
        process, port = _start_server(directory)
        try:
            measured = ratio(port, batches, batch)
            one = throughput(port, 1, n)
            eight = throughput(port, 8, n)
        finally:
            process.terminate()
            process.wait()
    verdict = "ok" if measured["ratio"] <= TARGET else "OVER TARGET"
    data = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "cpus": multiprocessing.cpu_count(),
        "batches": batches,
        "batch": batch,
        **{key: round(value, 3) for key, value in measured.items()},
        "target": TARGET,
        "reservations_per_second_1_process": round(one),
        "reservations_per_second_8_processes": round(eight),
    }
    table = "\n".join(
        [
            "| what | per call (median of batches) |",
            "|---|---|",
            f"| bare `INCR` round trip | {measured['incr_ns'] / 1000:.1f} µs |",
            f"| `ctx.reserve_tool_call()` on the Redis store | "
            f"{measured['reservation_ns'] / 1000:.1f} µs |",
            f"| ratio (target ≤ {TARGET}) | {measured['ratio']:.2f} ({verdict}) |",
            "",
            "| processes | reservations per second, one run |",
            "|---|---|",
            f"| 1 | {one:,.0f} |",
            f"| 8 | {eight:,.0f} |",
            "",
            f"{data['cpus']} CPUs, Python {data['python']}, redis-py {data['redis_py']}, "
            f"{data['date']}.",
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "redis.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "redis.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0 if measured["ratio"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
