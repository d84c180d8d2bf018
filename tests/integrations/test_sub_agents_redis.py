"""Sub-agents of a pydantic-ai agent whose run lives in Redis: ``HarnessCapability.delegate``.

The parent's run is in a real ``redis-server``; ``delegate`` makes each child in the same store,
under the root's hash tag. The figures of ``test_sub_agents.py`` again, and the cancel from
another process (``canceller.py``, spawned): a worker attached to the parent by its ID cancels it
while three sub-agents' requests are held by the loopback provider. No sleep.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from diagnosis_harness import (
    BudgetLimits,
    CancellationReason,
    RunCancelled,
    RunContext,
    RunState,
)
from diagnosis_harness.integrations import ModelClientConfig, async_openai_client
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability
from diagnosis_harness.redis import RedisRunStore
from racing import BOUND
from redis_store.server import REDIS_SERVER, RedisServer

from . import canceller
from .loopback import LoopbackServer, Reply
from .test_sub_agents import Deps, _bounded, _delegating_parent, _limits, _race_round

if TYPE_CHECKING:
    from collections.abc import Iterator

ROUNDS = 10
_SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    server = RedisServer(tmp_path_factory.mktemp("sub-agents-redis"))
    server.start()
    yield server
    server.stop()


def _store(server: RedisServer) -> RedisRunStore:
    """A store of its own namespace: run IDs are unique store-wide, and each round reuses its."""
    return RedisRunStore(server.client(), namespace=f"sub-{uuid.uuid4().hex[:12]}")


def _parent(store: RedisRunStore, **overrides: Any) -> RunContext:
    limits: BudgetLimits = _limits(**overrides)
    return RunContext.create(
        session_id=canceller.SESSION, run_id="diagnosis", limits=limits, timeout=60, store=store
    )


def test_two_parallel_sub_agents_of_a_parent_in_redis_run_exactly_its_nine_tool_calls(
    redis_server: RedisServer,
) -> None:
    for round_number in range(ROUNDS):
        store = _store(redis_server)
        try:
            parent = _parent(store, tool_calls=9)
            harness = HarnessCapability(parent)
            started: Counter[str] = Counter()
            _bounded(_race_round(harness, started, random.Random(round_number)))

            usage = parent.budget.snapshot()
            assert usage.tool_calls == 9
            counted = {area: child.tool_calls for area, child in usage.children.items()}
            assert set(counted) == {"logs", "metrics"}
            assert all(n <= 6 for n in counted.values()), counted
            assert sum(counted.values()) == 7
            assert started == counted
            assert parent.lifecycle.state is RunState.BUDGET_EXHAUSTED
        finally:
            store.close()


def test_a_parent_in_redis_cancelled_by_another_process_cuts_three_sub_agents_mid_request(
    redis_server: RedisServer, loopback: LoopbackServer
) -> None:
    loopback.default = Reply(stall=threading.Event())  # never set: only a cut ends a request
    client = async_openai_client(ModelClientConfig(base_url=loopback.openai_url), api_key="test")
    sub_agent: Agent[None, str] = Agent(
        OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    )
    store = _store(redis_server)
    ours, theirs = _SPAWN.Pipe()
    other = _SPAWN.Process(
        target=canceller.serve, args=(redis_server.port, store.namespace, theirs)
    )
    other.start()
    try:
        parent = _parent(store)
        harness = HarnessCapability(parent)
        areas = ["logs", "metrics", "traces"]
        agent = _delegating_parent(areas, sub_agent, _limits(model_calls=5))
        ours.send(parent.run_id)
        assert ours.poll(BOUND)
        assert ours.recv() == "attached"
        called: list[tuple[str, CancellationReason]] = []
        lock = threading.Lock()
        won: list[bool] = []

        def on_cancel(run_id: str) -> Any:
            def callback(reason: CancellationReason) -> None:
                with lock:
                    called.append((run_id, reason))

            return callback

        def cancel_from_the_other_process() -> None:
            try:
                loopback.wait_for_stalled(3, timeout=BOUND)
            except AssertionError:
                return  # the agent run failed first: the test says how, not this thread
            for area in areas:
                harness.sub_agents[area].ctx.cancellation.register(on_cancel(area))
            parent.cancellation.register(on_cancel(parent.run_id))
            ours.send("cancel")
            assert ours.poll(BOUND)
            won.append(ours.recv()[1])

        cancelling = threading.Thread(target=cancel_from_the_other_process, daemon=True)
        cancelling.start()
        with pytest.raises(RunCancelled):
            _bounded(agent.run("why?", deps=Deps(harness), capabilities=[harness]))
        cancelling.join(BOUND)
        assert won == [True]

        assert loopback.count == loopback.stalled == 3  # all three cut in flight
        for area in areas:
            child = harness.sub_agents[area].ctx
            assert child.lifecycle.state is RunState.CANCELLED
            assert child.cancellation.reason is CancellationReason.PARENT_ENDED
            with pytest.raises(RunCancelled):
                child.reserve_model_call()
            with pytest.raises(RunCancelled):
                child.reserve_tool_call("search")
        assert parent.lifecycle.state is RunState.CANCELLED
        with lock:
            assert Counter(run for run, _ in called) == dict.fromkeys([*areas, "diagnosis"], 1)
            assert called[-1] == ("diagnosis", CancellationReason.USER_REQUESTED)
        usage = parent.budget.snapshot()
        assert usage.model_calls == 1 + 3
        assert loopback.count == 3  # nothing sent after the cancel
    finally:
        ours.send(None)
        other.join(BOUND)
        store.close()
    assert other.exitcode == 0
