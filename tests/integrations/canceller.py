"""The other process of the stall matrix: attaches to a run in Redis and cancels it when told.

Started once per matrix with the ``spawn`` start method (a fresh interpreter, as a worker on
another host would be) and fed over a pipe, so the cross-process column pays for one interpreter,
not one per cell. It imports only the harness and redis-py.

The protocol, one run at a time: the test sends a run ID, the helper attaches and answers
``"attached"``; the test sends ``"cancel"`` once the stall is in progress, the helper cancels and
answers ``(monotonic seconds right before the cancel, whether its cancel won)``. ``None`` ends it.
``time.monotonic`` is the system-wide ``CLOCK_MONOTONIC`` on Linux, so the test compares the
helper's instant with its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import redis

from diagnosis_harness import CancellationReason, RunContext
from diagnosis_harness.redis import RedisRunStore

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

SESSION = "stall-matrix"


def serve(port: int, namespace: str, conn: Connection) -> None:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10.0)
    store = RedisRunStore(client, namespace=namespace)
    try:
        while (run_id := conn.recv()) is not None:
            ctx = RunContext.attach(session_id=SESSION, run_id=run_id, store=store)
            conn.send("attached")
            if conn.recv() != "cancel":  # the test gave up on the cell: next run
                continue
            at = time.monotonic()
            won = ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
            conn.send((at, won))
    finally:
        store.close()
        client.close()
