"""One run, two processes: an agent loop on one worker, a Tool worker on another.

Run it against a Redis server: ``python two_workers.py redis://127.0.0.1:6379/0``.
"""

from __future__ import annotations

import multiprocessing
import sys

import redis

from diagnosis_harness import (
    BudgetLimits,
    CancellationReason,
    RunContext,
    RunTerminated,
)
from diagnosis_harness.redis import RedisRunStore


def tool_worker(url: str, run_id: str, attached: multiprocessing.synchronize.Event) -> None:
    """Another process: attach to the run, spend its budget, and release a resource on cancel."""
    client = redis.Redis.from_url(url, socket_timeout=2.0)
    store = RedisRunStore(client, namespace="diagnosis")
    ctx = RunContext.attach(session_id="session-7", run_id=run_id, store=store)
    ctx.cancellation.register(
        lambda reason: print(f"tool worker: released ({reason.name})", flush=True)
    )
    ctx.reserve_tool_call("search")  # the same budget the agent loop reserves from
    attached.set()
    ctx.cancellation.wait(timeout=30)  # the listener runs the callback when the run ends
    store.close()


def main(url: str) -> None:
    client = redis.Redis.from_url(url, socket_timeout=2.0)
    store = RedisRunStore(client, namespace="diagnosis", expire_after=3_600)
    limits = BudgetLimits(
        model_calls=10,
        tool_calls=20,
        per_tool_calls=5,
        input_tokens=50_000,
        output_tokens=10_000,
        total_tokens=60_000,
        run_bytes=1_000_000,
    )
    ctx = RunContext.create(
        session_id="session-7", run_id="run-42", limits=limits, timeout=120, store=store
    )
    attached = multiprocessing.get_context("spawn").Event()
    worker = multiprocessing.get_context("spawn").Process(
        target=tool_worker, args=(url, ctx.run_id, attached)
    )
    worker.start()
    attached.wait(30)
    print("tool calls so far:", ctx.budget.snapshot().tool_calls, flush=True)
    ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)  # the client went away
    worker.join(30)
    try:
        ctx.reserve_model_call()
    except RunTerminated as error:
        print("agent loop:", error.termination.state.name, flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1])
