"""Run trees in this process: ``ctx.child(...)``, a sub-agent's run that draws on its parent's
budget, deadline and cancellation. Every reservation is decided for the child and every ancestor
at once; usage rolls up as it happens; an ending cascades to every live descendant."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetState,
    CancellationReason,
    Deadline,
    InvalidRunIdentity,
    RunCancelled,
    RunContext,
    RunFinished,
    RunState,
    RunTimedOut,
)
from diagnosis_harness.testing import ManualClock
from strategies import limits, new_run, state

if TYPE_CHECKING:
    from collections.abc import Callable

D = Decimal


def _family(**parent_limits: object) -> tuple[RunContext, RunContext, RunContext]:
    parent = new_run(run_id="diag", budget=limits(**parent_limits))
    return parent, parent.child(run_id="logs"), parent.child(run_id="metrics")


# -- rollup and snapshots -------------------------------------------------------------------------


def test_a_childs_usage_counts_in_its_parent_as_it_happens() -> None:
    parent, logs, metrics = _family()
    logs.reserve_tool_call("grep")
    logs.reserve_model_call()
    metrics.reserve_tool_call("promql")
    metrics.reserve_bytes(100)
    metrics.record_token_usage(input_tokens=10, output_tokens=3)
    parent.reserve_tool_call("grep")

    usage = parent.budget.snapshot()
    assert (usage.tool_calls, usage.model_calls, usage.run_bytes) == (3, 1, 100)
    assert dict(usage.per_tool_calls) == {"grep": 2, "promql": 1}
    assert (usage.input_tokens, usage.output_tokens) == (10, 3)
    assert list(usage.children) == ["logs", "metrics"]  # in creation order
    assert dict(usage.children["logs"].per_tool_calls) == {"grep": 1}
    assert usage.children["metrics"].total_tokens == 13
    assert logs.budget.snapshot() == usage.children["logs"]
    assert not logs.budget.snapshot().children


def test_a_grandchilds_usage_counts_at_every_level() -> None:
    parent, logs, _ = _family()
    shard = logs.child(run_id="logs-shard-1")
    shard.reserve_tool_call("grep")
    assert parent.budget.snapshot().tool_calls == 1
    assert logs.budget.snapshot().tool_calls == 1
    assert parent.budget.snapshot().children["logs"].children["logs-shard-1"].tool_calls == 1
    assert shard.parent_run_id == "logs"
    assert logs.parent_run_id == "diag"
    assert parent.parent_run_id is None


def test_a_child_inherits_the_session_clock_and_retry_policies() -> None:
    parent, logs, _ = _family()
    assert logs.session_id == parent.session_id
    assert logs.clock is parent.clock
    assert logs.retry_policies is parent.retry_policies
    assert logs.budget.limits == parent.budget.limits  # capped by its parent alone


def test_a_cap_above_what_the_parent_has_left_is_allowed_and_the_snapshot_says_so() -> None:
    parent = new_run(run_id="diag", budget=limits(tool_calls=9))
    for _ in range(5):
        parent.reserve_tool_call("grep")
    child = parent.child(run_id="logs", limits=limits(tool_calls=6))
    usage = child.budget.snapshot()
    assert usage.capped_by[BudgetDimension.TOOL_CALLS] == "diag"  # 4 left there, 6 here
    assert BudgetDimension.MODEL_CALLS not in usage.capped_by  # the same room at both levels
    for _ in range(4):
        child.reserve_tool_call("grep")
    with pytest.raises(BudgetExhausted) as refused:
        child.reserve_tool_call("grep")  # the child's fifth: the parent's tenth
    assert refused.value.dimension is BudgetDimension.TOOL_CALLS
    assert parent.budget.snapshot().tool_calls == 9
    assert not parent.budget.snapshot().capped_by  # a root has no one above it


# -- all or nothing across the levels ------------------------------------------------------------


def _two_children_race() -> tuple[dict[str, int], RunContext]:
    """Two children capped at 6 under a parent limit of 9, released together, each asking for 8
    Tool calls; what each was granted, and the parent."""
    parent = new_run(run_id="diag", budget=limits(tool_calls=9))
    children = [parent.child(run_id=n, limits=limits(tool_calls=6)) for n in ("a", "b")]
    granted = {"a": 0, "b": 0}
    start = threading.Barrier(2)

    def ask(child: RunContext) -> None:
        start.wait()
        for _ in range(8):
            try:
                child.reserve_tool_call("search")
            except BudgetExhausted:
                return
            granted[child.run_id] += 1

    threads = [threading.Thread(target=ask, args=(c,)) for c in children]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return granted, parent


def test_two_children_capped_at_6_under_a_parent_limit_of_9_get_exactly_9() -> None:
    """The issue's figure, with real threads released together, over many rounds."""
    for _ in range(30):
        granted, parent = _two_children_race()
        usage = parent.budget.snapshot()
        assert sum(granted.values()) == 9 == usage.tool_calls
        assert max(granted.values()) <= 6
        assert {n: u.tool_calls for n, u in usage.children.items()} == granted
        assert state(parent) is RunState.BUDGET_EXHAUSTED  # the tenth ask passed its limit


def test_a_child_cap_reached_ends_the_child_and_not_its_parent() -> None:
    parent = new_run(run_id="diag")
    child = parent.child(run_id="logs", limits=limits(model_calls=1))
    child.reserve_model_call()
    with pytest.raises(BudgetExhausted) as refused:
        child.reserve_model_call()
    assert refused.value.dimension is BudgetDimension.MODEL_CALLS
    assert state(child) is RunState.BUDGET_EXHAUSTED
    assert state(parent) is RunState.RUNNING
    assert parent.budget.snapshot().model_calls == 1  # the refused call counted nowhere
    parent.reserve_model_call()


def test_a_child_that_reaches_its_parents_limit_exhausts_the_parent_and_cancels_its_sibling() -> (
    None
):
    parent, logs, metrics = _family(tool_calls=2)
    logs.reserve_tool_call("grep")
    metrics.reserve_tool_call("promql")
    seen: list[tuple[str, CancellationReason]] = []

    def keep(name: str) -> Callable[[CancellationReason], None]:
        return lambda reason: seen.append((name, reason))

    for ctx in (parent, logs, metrics):
        ctx.cancellation.register(keep(ctx.run_id))
    with pytest.raises(BudgetExhausted) as refused:
        logs.reserve_tool_call("grep")
    assert refused.value.dimension is BudgetDimension.TOOL_CALLS
    assert state(parent) is RunState.BUDGET_EXHAUSTED
    assert parent.budget.exhausted is BudgetDimension.TOOL_CALLS
    logs_end = logs.lifecycle.termination
    assert logs_end is not None
    assert logs_end.state is RunState.BUDGET_EXHAUSTED
    assert logs_end.reason.startswith("tool_calls limit of ancestor run 'diag' 2 reached")
    metrics_end = metrics.lifecycle.termination
    assert metrics_end is not None
    assert metrics_end.state is RunState.CANCELLED
    assert metrics_end.reason.startswith("cancelled: ancestor run 'diag' ended BUDGET_EXHAUSTED")
    assert metrics.cancellation.reason is CancellationReason.PARENT_ENDED
    # once each, every run's own reason, descendants before their ancestor
    assert sorted(seen) == sorted(
        [
            ("logs", CancellationReason.BUDGET_EXHAUSTED),
            ("metrics", CancellationReason.PARENT_ENDED),
            ("diag", CancellationReason.BUDGET_EXHAUSTED),
        ]
    )
    assert seen[-1][0] == "diag"
    assert parent.budget.snapshot().tool_calls == 2


def test_a_refused_reservation_counts_nowhere() -> None:
    parent = new_run(run_id="diag", budget=limits(per_tool_calls=1))
    child = parent.child(run_id="logs", limits=limits(tool_calls=5))
    child.reserve_tool_call("grep")
    with pytest.raises(BudgetExhausted):
        child.reserve_tool_call("grep")  # the parent's per-Tool limit refuses it
    for usage in (parent.budget.snapshot(), child.budget.snapshot()):
        assert usage.tool_calls == 1 == sum(usage.per_tool_calls.values())
    assert parent.budget.exhausted is BudgetDimension.PER_TOOL_CALLS


def test_bytes_are_reserved_at_every_level_or_none() -> None:
    parent = new_run(run_id="diag", budget=limits(run_bytes=100))
    child = parent.child(run_id="logs", limits=limits(run_bytes=80))
    child.reserve_bytes(60)
    parent.reserve_bytes(30)
    with pytest.raises(BudgetExhausted) as refused:
        child.reserve_bytes(20)  # 80 fits the child's cap, 110 not the parent's
    assert refused.value.dimension is BudgetDimension.RUN_BYTES
    assert parent.budget.snapshot().run_bytes == 90
    assert child.budget.snapshot().run_bytes == 60


def test_tokens_past_the_parents_limit_exhaust_the_parent_and_the_child() -> None:
    parent, logs, metrics = _family(total_tokens=100)
    logs.record_token_usage(input_tokens=50, output_tokens=10)
    metrics.record_token_usage(input_tokens=30, output_tokens=20)  # recorded as reported
    assert parent.budget.snapshot().total_tokens == 110
    assert state(parent) is RunState.BUDGET_EXHAUSTED
    assert parent.budget.exhausted is BudgetDimension.TOTAL_TOKENS
    assert state(metrics) is RunState.BUDGET_EXHAUSTED  # its usage passed its parent's limit
    assert state(logs) is RunState.CANCELLED
    assert metrics.budget.snapshot().total_tokens == 50


# -- money ---------------------------------------------------------------------------------------


def test_a_partial_hold_is_the_least_any_level_leaves() -> None:
    parent = new_run(run_id="diag", budget=limits(cost=D("1.00")))
    child = parent.child(run_id="logs", limits=limits(cost=D("0.50")))
    parent.reserve_tool_call("grep", max_cost=D("0.70")).settle(cost=D("0.70"))
    hold = child.reserve_model_call(max_cost=D("0.40"), min_cost=D("0.10"))
    assert hold.max_cost == D("0.30")  # the parent leaves $0.30, the child $0.50
    assert parent.budget.snapshot().cost_held == D("0.30")
    hold.settle(cost=D("0.20"), input_tokens=1, output_tokens=1)
    assert parent.budget.snapshot().cost == D("0.90")
    assert child.budget.snapshot().cost == D("0.20")
    assert parent.budget.snapshot().cost_held == 0


def test_a_child_of_a_priced_parent_must_hold_a_cost() -> None:
    parent = new_run(run_id="diag", budget=limits(cost=D("1.00")))
    child = parent.child(run_id="logs", limits=limits())  # no money limit of its own
    assert child.budget.limits.cost is None
    assert child.budget.priced  # its parent's money limit caps it
    assert not new_run().budget.priced
    with pytest.raises(ValueError, match="max_cost"):
        child.reserve_model_call()
    assert parent.budget.snapshot().model_calls == 0


def test_a_settle_after_the_child_ended_still_releases_the_hold_everywhere() -> None:
    parent = new_run(run_id="diag", budget=limits(cost=D("1.00")))
    child = parent.child(run_id="logs")
    hold = child.reserve_model_call(max_cost=D("0.40"))
    child.lifecycle.succeed()
    hold.settle(cost=D("0.25"), input_tokens=1, output_tokens=1)
    usage = parent.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (D("0.25"), D(0))
    assert state(parent) is RunState.RUNNING


def test_a_settle_past_the_parents_money_limit_exhausts_it() -> None:
    parent, logs, metrics = _family(cost=D("1.00"))
    hold = logs.reserve_model_call(max_cost=D("0.50"))
    metrics.reserve_tool_call("promql", max_cost=D("0.40"))
    hold.settle(cost=D("0.70"), input_tokens=1, output_tokens=1)  # above its hold, as reported
    assert state(parent) is RunState.BUDGET_EXHAUSTED
    assert parent.budget.exhausted is BudgetDimension.COST
    assert state(logs) is RunState.BUDGET_EXHAUSTED
    assert state(metrics) is RunState.CANCELLED


# -- endings ------------------------------------------------------------------------------------


def test_a_cancelled_parent_cuts_three_children_mid_call_each_callback_once() -> None:
    """Three children blocked on their cancellation (as a request in flight is, in its scope):
    the parent's cancel wakes each, every callback runs once, and nothing is granted after."""
    parent = new_run(run_id="diag")
    children = [parent.child(run_id=f"agent-{i}") for i in range(3)]
    order: list[str] = []
    counts: dict[str, int] = {}

    def callback(name: str) -> Callable[[CancellationReason], None]:
        def run(_reason: CancellationReason) -> None:
            counts[name] = counts.get(name, 0) + 1
            order.append(name)

        return run

    for ctx in (parent, *children):
        ctx.cancellation.register(callback(ctx.run_id))
    in_call = threading.Barrier(4)
    woke: list[bool] = []

    def call(child: RunContext) -> None:
        child.reserve_model_call()
        in_call.wait()
        woke.append(child.cancellation.wait(timeout=30))  # the "request", cut by the cancel

    threads = [threading.Thread(target=call, args=(c,)) for c in children]
    for t in threads:
        t.start()
    in_call.wait()
    assert parent.cancellation.cancel(CancellationReason.USER_REQUESTED)
    for t in threads:
        t.join()
    assert woke == [True, True, True]
    assert counts == {"diag": 1, "agent-0": 1, "agent-1": 1, "agent-2": 1}
    assert order[-1] == "diag"
    for child in children:
        termination = child.lifecycle.termination
        assert termination is not None
        assert termination.state is RunState.CANCELLED
        assert termination.reason == (
            "cancelled: ancestor run 'diag' ended CANCELLED: cancelled: USER_REQUESTED"
        )
        with pytest.raises(RunCancelled):
            child.reserve_model_call()
        with pytest.raises(RunCancelled):
            child.reserve_tool_call("grep")
    assert parent.budget.snapshot().model_calls == 3


@pytest.mark.parametrize("ending", ["succeed", "fail", "deadline"])
def test_every_ending_of_a_parent_cascades(ending: str) -> None:
    clock = ManualClock()
    parent = new_run(run_id="diag", clock=clock, timeout=10)
    child = parent.child(run_id="logs")
    grandchild = child.child(run_id="logs-1")
    if ending == "succeed":
        parent.lifecycle.succeed()
    elif ending == "fail":
        parent.lifecycle.fail("crashed")
    else:
        clock.advance(10)
        with pytest.raises(RunTimedOut):
            parent.check(Boundary.GUARD)
    parent_end = parent.lifecycle.termination
    assert parent_end is not None
    for descendant in (child, grandchild):
        termination = descendant.lifecycle.termination
        assert termination is not None
        assert termination.state is RunState.CANCELLED
        assert termination.reason.startswith(
            f"cancelled: ancestor run 'diag' ended {parent_end.state.name}: "
        )
        assert descendant.cancellation.reason is CancellationReason.PARENT_ENDED


@pytest.mark.parametrize("ending", ["succeed", "fail", "cancel", "deadline", "budget"])
def test_a_childs_ending_never_ends_its_parent_or_sibling(ending: str) -> None:
    clock = ManualClock()
    parent = new_run(run_id="diag", clock=clock, timeout=30)
    child = parent.child(run_id="logs", timeout=5, limits=limits(model_calls=1))
    sibling = parent.child(run_id="metrics")
    if ending == "succeed":
        child.lifecycle.succeed()
    elif ending == "fail":
        child.lifecycle.fail("no logs")
    elif ending == "cancel":
        child.cancellation.cancel(CancellationReason.USER_REQUESTED)
    elif ending == "deadline":
        clock.advance(5)
        with pytest.raises(RunTimedOut):
            child.check(Boundary.MODEL)
    else:
        child.reserve_model_call()
        with pytest.raises(BudgetExhausted):
            child.reserve_model_call()
    assert state(child) is not RunState.RUNNING
    assert state(parent) is RunState.RUNNING
    assert state(sibling) is RunState.RUNNING
    sibling.reserve_model_call()
    assert parent.budget.state is BudgetState.ACTIVE


def test_a_childs_deadline_is_the_earlier_of_its_own_and_its_parents() -> None:
    clock = ManualClock()
    parent = new_run(run_id="diag", clock=clock, timeout=10)
    assert parent.child(run_id="a", timeout=5).deadline.instant_ns == 5_000_000_000
    assert parent.child(run_id="b", timeout=60).deadline == parent.deadline
    assert parent.child(run_id="c").deadline == parent.deadline
    late = Deadline.at_ns(20_000_000_000)
    assert parent.child(run_id="d", deadline=late).deadline == parent.deadline


def test_a_child_that_outlives_its_own_deadline_times_out_alone() -> None:
    clock = ManualClock()
    parent = new_run(run_id="diag", clock=clock, timeout=10)
    child = parent.child(run_id="logs", timeout=2)
    clock.advance(2)
    with pytest.raises(RunTimedOut):
        child.reserve_tool_call("grep")
    assert state(parent) is RunState.RUNNING
    parent.reserve_tool_call("grep")
    assert parent.budget.snapshot().tool_calls == 1


# -- bad input ----------------------------------------------------------------------------------


def test_a_child_of_an_ended_run_is_refused_with_the_parents_ending() -> None:
    parent = new_run(run_id="diag")
    parent.lifecycle.succeed()
    with pytest.raises(RunFinished) as refused:
        parent.child(run_id="logs")
    assert refused.value.termination is parent.lifecycle.termination
    assert not parent.budget.snapshot().children


def test_a_run_id_its_tree_holds_already_is_refused() -> None:
    parent, logs, _ = _family()
    for name in ("diag", "logs", "metrics"):  # the root (a cycle), itself, a sibling
        with pytest.raises(ValueError, match=f"run_id {name!r} names a run of this tree"):
            logs.child(run_id=name)
    assert not logs.budget.snapshot().children
    assert list(parent.budget.snapshot().children) == ["logs", "metrics"]


def test_a_foreign_store_is_refused() -> None:
    parent = new_run(run_id="diag")

    class Store:
        def create_run(self) -> None: ...
        def attach_run(self) -> None: ...

    with pytest.raises(ValueError, match="store must be the parent's store"):
        parent.child(run_id="logs", store=Store())  # type: ignore[arg-type] # a wrong store
    assert not parent.budget.snapshot().children


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"run_id": " "}, InvalidRunIdentity, "run_id"),
        ({"run_id": "x", "limits": {"tool_calls": 1}}, TypeError, "limits"),
        ({"run_id": "x", "timeout": -1}, ValueError, "timeout"),
        ({"run_id": "x", "timeout": 1, "deadline": Deadline.at_ns(1)}, ValueError, "at most one"),
        ({"run_id": "x", "deadline": 5}, TypeError, "deadline"),
        ({"run_id": "x", "retry_policies": {}}, TypeError, "retry_policies"),
        ({"run_id": "x", "on_callback_error": 3}, TypeError, "on_callback_error"),
    ],
)
def test_bad_arguments_name_themselves_and_create_nothing(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    parent = new_run(run_id="diag")
    with pytest.raises(error, match=match):
        parent.child(**kwargs)  # type: ignore[arg-type] # each is a wrong type or value
    assert not parent.budget.snapshot().children
    parent.child(run_id="x")  # the ID was not taken


def test_parent_ended_is_not_a_reason_cancel_accepts() -> None:
    parent, logs, _ = _family()
    with pytest.raises(ValueError, match="PARENT_ENDED"):
        logs.cancellation.cancel(CancellationReason.PARENT_ENDED)
    assert state(logs) is RunState.RUNNING
    assert state(parent) is RunState.RUNNING
