"""A RedisRunStore holds no money yet: a money limit, a hold of ``max_cost`` and a settled cost
are refused with an error that says so, before anything is written or reserved."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import Boundary, RunContext, UnknownRun
from diagnosis_harness.testing import ManualClock

from .test_store import LIMITS, _create

if TYPE_CHECKING:
    from diagnosis_harness.redis import RedisRunStore

MONEY = dataclasses.replace(LIMITS, cost=Decimal("1.00"))
LATER = "money budgets are not supported on a RedisRunStore yet"


def test_a_run_with_a_money_limit_is_refused_and_nothing_is_published(
    store: RedisRunStore,
) -> None:
    with pytest.raises(ValueError, match=LATER):
        RunContext.create(
            session_id="session-1",
            run_id="run-1",
            limits=MONEY,
            timeout=10,
            clock=ManualClock(),
            store=store,
        )
    with pytest.raises(UnknownRun):
        RunContext.attach(session_id="session-1", run_id="run-1", store=store)


def test_attaching_with_a_money_limit_is_refused(store: RedisRunStore) -> None:
    _create(store)
    with pytest.raises(ValueError, match=LATER):
        RunContext.attach(session_id="session-1", run_id="run-1", store=store, limits=MONEY)


def test_a_hold_of_max_cost_is_refused_and_reserves_nothing(store: RedisRunStore) -> None:
    ctx = _create(store)
    with pytest.raises(ValueError, match=LATER):
        ctx.reserve_model_call(max_cost=Decimal("0.10"))
    with pytest.raises(ValueError, match=LATER):
        ctx.reserve_tool_call("fetch", max_cost=Decimal(0))
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.tool_calls) == (0, 0)
    assert ctx.lifecycle.termination is None


def test_a_hold_without_max_cost_settles_its_tokens_but_no_cost(store: RedisRunStore) -> None:
    ctx = _create(store)
    hold = ctx.reserve_model_call()
    assert hold.boundary is Boundary.MODEL
    with pytest.raises(ValueError, match=LATER):
        hold.settle(cost=Decimal("0.01"), input_tokens=3)
    assert not hold.settled  # refused: nothing recorded, it may settle again
    hold.settle(cost=Decimal(0), input_tokens=3, output_tokens=4)
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens) == (3, 4)
    assert usage.cost == usage.cost_held == Decimal(0)
