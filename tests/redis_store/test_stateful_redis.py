"""The Hypothesis stateful machines of the in-memory run, run against the Redis store.

The very machines of ``diagnosis_harness.modelcheck._stateful`` -- the same rules, the same
python-statemachine models as the oracle, the same invariants after every step -- with the
run's owner a :class:`RedisRun`: only ``ProbeConfig.store`` differs. Every example creates a
run; :class:`FreshRuns` gives each one its own run ID in the one store, as a service creating
run after run would.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings
from redis.cluster import RedisCluster

from diagnosis_harness.modelcheck._stateful import MACHINES, run_machine

if TYPE_CHECKING:
    from diagnosis_harness import BudgetLimits, Clock
    from diagnosis_harness._backend import RunBackend
    from diagnosis_harness._cancellation import CallbackErrorHandler
    from diagnosis_harness.modelcheck._stateful import _ProbeMachine
    from diagnosis_harness.redis import RedisRunStore


class FreshRuns:
    """A ``RunStore`` that publishes every new run under a fresh ID of the one Redis store."""

    def __init__(self, store: RedisRunStore) -> None:
        self.store = store
        self.count = itertools.count()
        self.created: list[RunBackend] = []

    def create_run(
        self,
        *,
        session_id: str,
        run_id: str,
        limits: BudgetLimits,
        deadline_ns: int,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
    ) -> RunBackend:
        run = self.store.create_run(
            session_id=session_id,
            run_id=f"{run_id}-{next(self.count)}",
            limits=limits,
            deadline_ns=deadline_ns,
            clock=clock,
            on_callback_error=on_callback_error,
        )
        self.created.append(run)
        return run

    def attach_run(
        self,
        *,
        session_id: str,
        run_id: str,
        limits: BudgetLimits | None,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
    ) -> RunBackend:
        return self.store.attach_run(
            session_id=session_id,
            run_id=run_id,
            limits=limits,
            clock=clock,
            on_callback_error=on_callback_error,
        )


@pytest.mark.model_check
@pytest.mark.version_independent  # the scripts decide; CI runs it once, in `e2e`
@pytest.mark.parametrize("machine", MACHINES, ids=lambda machine: machine.__name__)
def test_the_in_memory_machines_hold_on_the_redis_store(
    store: RedisRunStore, machine: type[_ProbeMachine]
) -> None:
    runs = FreshRuns(store)
    on_redis = type(
        f"{machine.__name__}OnRedis",
        (machine,),
        {"CONFIG": dataclasses.replace(machine.CONFIG, store=runs)},
    )
    examples = settings().max_examples
    if isinstance(store.client, RedisCluster):
        # The same scripts as on the one server; the cluster adds where each call is sent,
        # which a quarter of the examples exercise as well as all of them (CI time).
        examples = max(10, examples // 4)
    stats = run_machine(on_redis, settings=settings(settings(), max_examples=examples))
    assert stats.examples >= examples
    assert stats.steps >= examples
    assert len(runs.created) >= stats.examples  # every example's run lived in Redis
