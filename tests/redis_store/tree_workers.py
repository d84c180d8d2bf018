"""What each process of the run-tree tests does: attach to a run of a tree and act on it.

Started with ``spawn`` (a fresh interpreter, as a worker on another host), each function takes
only what pickles -- the server's port, the store's namespace, run IDs, multiprocessing's own
barriers and queues -- and puts what it saw on ``out``. Nothing waits on a timer: a worker waits
for a barrier, or for the run's own cancellation, at most ``_WAIT`` seconds before the test fails.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import redis

from diagnosis_harness import BudgetLimits, RunContext, RunTerminated
from diagnosis_harness.redis import RedisRunStore

from .workers import SESSION, answered

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

_WAIT = 60.0


def _store(port: int, namespace: str) -> RedisRunStore:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10.0)
    return RedisRunStore(client, namespace=namespace)


def _attach(store: RedisRunStore, run_id: str) -> RunContext:
    return answered(lambda: RunContext.attach(session_id=SESSION, run_id=run_id, store=store))


def child_mid_call(
    *, port: int, namespace: str, child_id: str, in_call: Barrier, out: Queue[Any]
) -> None:
    """Attach to a child and to its parent in this process, make a Model call, and wait inside
    the child's scope -- a request in flight -- until the run's end cuts it: what was cut, the
    callbacks in the order they ran, and whether anything is granted afterwards."""
    store = _store(port, namespace)
    child = _attach(store, child_id)
    assert child.parent_run_id is not None
    parent = _attach(store, child.parent_run_id)
    calls: list[tuple[str, str]] = []
    parent_called = threading.Event()

    def on_parent(reason: Any) -> None:
        calls.append(("parent", reason.value))
        parent_called.set()

    child.cancellation.register(lambda reason: calls.append(("child", reason.value)))
    parent.cancellation.register(on_parent)
    answered(child.reserve_model_call)

    async def request() -> None:
        async with child.scope():
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, in_call.wait, _WAIT)  # in the call: tell the test
            await asyncio.Event().wait()  # the response that never comes: only the end cuts it

    try:
        asyncio.run(request())
        cut = "not cut"
    except RunTerminated as error:
        cut = type(error).__name__
    parent_called.wait(_WAIT)
    try:
        child.reserve_model_call()
        granted_after = True
    except RunTerminated:
        granted_after = False
    termination = child.lifecycle.termination
    reason = child.cancellation.reason
    out.put(
        (
            child_id,
            cut,
            list(calls),
            None if reason is None else reason.value,
            None if termination is None else termination.reason,
            granted_after,
        )
    )
    store.close()


def child_asks(
    *, port: int, namespace: str, child_id: str, asks: int, start: Barrier, out: Queue[Any]
) -> None:
    """Attach to a child and ask for ``asks`` Tool calls once every worker is ready: how many
    were granted before the first refusal."""
    store = _store(port, namespace)
    child = _attach(store, child_id)
    start.wait(_WAIT)
    granted = 0
    for _ in range(asks):
        try:
            answered(lambda: child.reserve_tool_call("search"))
        except RunTerminated:
            break
        granted += 1
    out.put((child_id, granted))
    store.close()


def make_child(
    *, port: int, namespace: str, parent_id: str, child_id: str, out: Queue[Any]
) -> None:
    """Attach to a run and give it a child here, which makes two Tool calls: what it is."""
    store = _store(port, namespace)
    parent = _attach(store, parent_id)
    limits = BudgetLimits(
        model_calls=5,
        tool_calls=6,
        per_tool_calls=6,
        input_tokens=100,
        output_tokens=100,
        total_tokens=200,
        run_bytes=1_000,
    )
    child = parent.child(run_id=child_id, limits=limits, timeout=3_600)
    answered(lambda: child.reserve_tool_call("grep"))
    answered(lambda: child.reserve_tool_call("grep"))
    made = child.budget.limits
    out.put(
        (
            child.parent_run_id,
            (made.model_calls, made.tool_calls),
            child.deadline == parent.deadline,
        )
    )
    store.close()
