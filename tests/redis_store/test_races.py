"""Eight processes on one run: reservations, a race of endings, a cancel that reaches them all.

Real processes (``spawn``: fresh interpreters, as workers on other hosts), one real server,
barriers to start them together; nothing waits on a timer. Marked ``version_independent``: the
outcome is the server's and the scripts', whatever the Python; CI runs them once.
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness import (
    BudgetDimension,
    BudgetLimits,
    CancellationReason,
    RunContext,
    RunState,
)
from diagnosis_harness.redis import RedisRunStore

from . import workers

if TYPE_CHECKING:
    from collections.abc import Callable

    from .server import RedisServer

# Eight spawned interpreters each, where coverage.py does not follow: run once, in `e2e`.
pytestmark = [pytest.mark.version_independent, pytest.mark.end_to_end]

PROCESSES = 8
_SPAWN = multiprocessing.get_context("spawn")
_WAIT = 120.0


def _create(
    server: RedisServer, namespace: str, limits: BudgetLimits, timeout: float = 600.0
) -> str:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    client = server.client()
    store = RedisRunStore(client, namespace=namespace)
    RunContext.create(
        session_id=workers.SESSION, run_id=run_id, limits=limits, timeout=timeout, store=store
    )
    store.close()
    client.close()
    return run_id


def _run_all(targets: list[tuple[Callable[..., None], dict[str, Any]]], out: Any) -> list[Any]:
    processes = [_SPAWN.Process(target=target, kwargs=kwargs) for target, kwargs in targets]
    for process in processes:
        process.start()
    results = [out.get(timeout=_WAIT) for _ in processes]
    for process in processes:
        process.join(_WAIT)
        assert process.exitcode == 0
    return results


def _limits(**changes: int) -> BudgetLimits:
    values = {
        "model_calls": 1_000,
        "tool_calls": 100_000,
        "per_tool_calls": 100_000,
        "input_tokens": 100,
        "output_tokens": 100_000,
        "total_tokens": 200_000,
        "run_bytes": 1_000,
    }
    values.update(changes)
    return BudgetLimits(**values)  # type: ignore[arg-type]  # the seven limits, all ints


TOOLS = ["search", "fetch", "grep", "read"]


@pytest.mark.parametrize(
    ("limits", "exhausted"),
    [
        (_limits(), None),  # every reservation fits: none may be lost
        (_limits(tool_calls=10_000, per_tool_calls=3_000), BudgetDimension.TOOL_CALLS),
        (_limits(per_tool_calls=2_500), BudgetDimension.PER_TOOL_CALLS),  # 4 x 2,500 < 16,000
    ],
    ids=["within-limits", "total-limit", "per-tool-limit"],
)
def test_eight_processes_reserve_2000_tool_calls_each(
    redis_server: RedisServer,
    namespace: str,
    limits: BudgetLimits,
    exhausted: BudgetDimension | None,
) -> None:
    run_id = _create(redis_server, namespace, limits)
    where = {"port": redis_server.port, "namespace": namespace, "run_id": run_id}
    start = _SPAWN.Barrier(PROCESSES)
    out = _SPAWN.Queue()
    results = _run_all(
        [
            (
                workers.reserve_tools,
                {
                    **where,
                    "worker": worker,
                    "calls": 2_000,
                    "tools": TOOLS,
                    "start": start,
                    "out": out,
                },
            )
            for worker in range(PROCESSES)
        ],
        out,
    )
    granted: Counter[str] = Counter()
    for _worker, by_tool, refused in results:
        granted.update(by_tool)
        assert sum(by_tool.values()) + refused == 2_000
    client = redis_server.client()
    store = RedisRunStore(client, namespace=namespace)
    ctx = RunContext.attach(session_id=workers.SESSION, run_id=run_id, store=store)
    usage = ctx.budget.snapshot()
    # 0 lost updates: the store counted exactly the grants the processes saw.
    assert usage.tool_calls == sum(granted.values())
    assert dict(usage.per_tool_calls) == dict(granted)
    assert usage.tool_calls == sum(usage.per_tool_calls.values())
    # 0 over-reservations: no counter past its limit; the limit that ended the run was reached.
    assert usage.tool_calls <= limits.tool_calls
    assert max(usage.per_tool_calls.values()) <= limits.per_tool_calls
    assert usage.exhausted is exhausted
    if exhausted is None:
        assert usage.tool_calls == PROCESSES * 2_000
        assert ctx.lifecycle.state is RunState.RUNNING
    elif exhausted is BudgetDimension.TOOL_CALLS:
        assert usage.tool_calls == limits.tool_calls
    else:
        assert max(usage.per_tool_calls.values()) == limits.per_tool_calls
    store.close()
    client.close()


@pytest.mark.parametrize("round_", range(6))
def test_eight_processes_race_to_end_the_run_one_wins(
    redis_server: RedisServer, namespace: str, round_: int
) -> None:
    """Success, failure, three cancels, the deadline, a refused reservation and usage past a
    limit, all at once: exactly one wins, and every process reads its termination."""
    run_id = _create(redis_server, namespace, _limits(model_calls=1), timeout=600.0)
    client = redis_server.client()
    store = RedisRunStore(client, namespace=namespace)
    RunContext.attach(session_id=workers.SESSION, run_id=run_id, store=store).reserve_model_call()
    store.close()
    client.close()
    where = {"port": redis_server.port, "namespace": namespace, "run_id": run_id}
    start = _SPAWN.Barrier(PROCESSES)
    out = _SPAWN.Queue()
    results = _run_all(
        [
            (workers.race_to_end, {**where, "worker": worker, "start": start, "out": out})
            for worker in range(PROCESSES)
        ],
        out,
    )
    winners = [worker for worker, won, _read, _calls in results if won]
    assert len(winners) == 1, results
    terminations = {read for _worker, _won, read, _calls in results}
    assert len(terminations) == 1, terminations
    ((state, _reason, _at),) = terminations
    signal = {
        "SUCCESS": "run_finished",
        "FAILED": "run_finished",
        "TIMED_OUT": "deadline_exceeded",
        "BUDGET_EXHAUSTED": "budget_exhausted",
    }
    for worker, _won, _read, calls in results:
        assert len(calls) == 1, (worker, calls)  # each process's callback ran exactly once
        if state in signal:
            assert calls == [signal[state]]
    assert len({tuple(calls) for *_rest, calls in results}) == 1  # the one first reason


def test_a_cancel_in_one_process_runs_the_callbacks_of_seven_others_once(
    redis_server: RedisServer, namespace: str
) -> None:
    run_id = _create(redis_server, namespace, _limits())
    ready = _SPAWN.Barrier(PROCESSES)
    out = _SPAWN.Queue()
    where = {"port": redis_server.port, "namespace": namespace, "run_id": run_id}
    results = _run_all(
        [(workers.cancel_when_ready, {**where, "ready": ready, "out": out})]
        + [
            (workers.await_cancel, {**where, "worker": worker, "ready": ready, "out": out})
            for worker in range(1, PROCESSES)
        ],
        out,
    )
    canceller = [result for result in results if result[0] == "canceller"]
    assert canceller == [("canceller", True, ["client_disconnected"])]  # ran before it returned
    others = [result for result in results if result[0] != "canceller"]
    assert len(others) == PROCESSES - 1
    for _worker, delivered, calls in others:
        assert delivered
        reasons = [reason for _thread, reason in calls]
        assert reasons == ["client_disconnected", "client_disconnected"]  # once, then inline
        assert calls[-1][0] == "inline"
    late: list[CancellationReason] = []
    client = redis_server.client()
    store = RedisRunStore(client, namespace=namespace)
    ctx = RunContext.attach(session_id=workers.SESSION, run_id=run_id, store=store)
    ctx.cancellation.register(late.append)
    assert late == [CancellationReason.CLIENT_DISCONNECTED]  # attached after: inside register()
    store.close()
    client.close()
