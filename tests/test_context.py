"""RunContext: built only by ``create``, identity first, immutable, passed explicitly; the gate."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import gc
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import diagnosis_harness
from diagnosis_harness import (
    Boundary,
    BudgetExhausted,
    CancellationReason,
    Deadline,
    InvalidRunIdentity,
    ManualClock,
    RetryPolicies,
    RunContext,
    RunFinished,
    RunState,
    RunTerminated,
    RunTimedOut,
)

# The fixture that records what create() builds is the shipped suite's (exported below).
from diagnosis_harness.conformance.suite.test_run_context import constructed
from strategies import limits, new_run

__all__ = ["constructed"]  # a fixture: pytest finds it by its name in this module

if TYPE_CHECKING:
    from collections.abc import Callable

PACKAGE_DIR = Path(diagnosis_harness.__file__).resolve().parent
FIELDS = (
    "session_id",
    "run_id",
    "deadline",
    "clock",
    "cancellation",
    "budget",
    "retry_policies",
    "lifecycle",
    "parent_run_id",
)


def _handles(ctx: RunContext) -> tuple[object, ...]:
    return tuple(getattr(ctx, name) for name in FIELDS)


# -- structure --------------------------------------------------------------------------------


def test_the_context_holds_the_documented_fields() -> None:
    public = tuple(f.name for f in dataclasses.fields(RunContext) if not f.name.startswith("_"))
    assert public == FIELDS


@pytest.mark.parametrize("name", FIELDS)
def test_no_field_can_be_reassigned(name: str) -> None:
    ctx = new_run()
    before = getattr(ctx, name)
    untyped: Any = ctx
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(untyped, name, None)
    assert getattr(ctx, name) is before


def test_the_context_is_slotted_and_takes_no_new_attributes() -> None:
    ctx = new_run()
    assert not hasattr(ctx, "__dict__")
    untyped: Any = ctx
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        untyped.extra = 1
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        del untyped.run_id
    assert ctx.run_id == "run-1"


def test_the_context_cannot_be_built_around_create() -> None:
    ctx = new_run()
    untyped: Any = RunContext
    with pytest.raises(TypeError, match=r"RunContext\.create"):
        untyped(*_handles(ctx))
    with pytest.raises(TypeError):
        dataclasses.replace(ctx, run_id="other")


def test_create_keeps_what_it_was_given() -> None:
    clock = ManualClock(5)
    policies = RetryPolicies.defaults()
    deadline = Deadline.at_ns(500)
    ctx = RunContext.create(
        session_id="s-1",
        run_id="r-1",
        limits=limits(model_calls=3),
        deadline=deadline,
        clock=clock,
        retry_policies=policies,
    )
    assert (ctx.session_id, ctx.run_id) == ("s-1", "r-1")
    assert ctx.deadline is deadline
    assert ctx.clock is clock
    assert ctx.retry_policies is policies
    assert ctx.budget.limits.model_calls == 3
    assert ctx.lifecycle.state is RunState.RUNNING
    assert ctx.lifecycle.termination is None
    assert not ctx.cancellation.is_cancelled
    assert "r-1" in repr(ctx)


def test_default_retry_policies_are_the_seed_defaults() -> None:
    ctx = new_run()
    assert set(ctx.retry_policies) == set(RetryPolicies.defaults())
    assert ctx.retry_policies["intent_router"].max_attempts == 2


def test_two_runs_share_no_mutable_handle() -> None:
    a, b = new_run(run_id="a"), new_run(run_id="b")
    for name in ("cancellation", "budget", "lifecycle"):
        assert getattr(a, name) is not getattr(b, name)
    a.cancellation.cancel(CancellationReason.USER_REQUESTED)
    b.check(Boundary.MODEL)
    assert b.lifecycle.state is RunState.RUNNING


@pytest.mark.parametrize(
    ("deadline", "timeout"),
    [pytest.param(None, None, id="neither"), pytest.param(Deadline.at_ns(5), 1.0, id="both")],
)
def test_exactly_one_of_deadline_and_timeout(
    deadline: Deadline | None, timeout: float | None
) -> None:
    with pytest.raises(ValueError, match=r"deadline.*timeout"):
        RunContext.create(
            session_id="s",
            run_id="r",
            limits=limits(),
            deadline=deadline,
            timeout=timeout,
            clock=ManualClock(),
        )


# The spec's scenarios are shown in src/diagnosis_harness/conformance/suite/test_run_context.py and
# test_deadline_and_cancellation.py.


# -- passed explicitly: no thread-local or context-variable state ------------------------------


def _library_sources() -> list[Path]:
    return sorted(PACKAGE_DIR.rglob("*.py"))


def _thread_or_context_local_uses(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "contextvars"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[0] == "contextvars":
                found.append(f"from {module} import ...")
            if module in ("threading", "_threading_local"):
                found += [f"from {module} import {a.name}" for a in node.names if "local" in a.name]
        elif isinstance(node, ast.Attribute) and node.attr in ("local", "ContextVar"):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Constant) and node.value in ("contextvars", "_threading_local"):
            found.append(repr(node.value))  # importlib.import_module("contextvars") and friends
    return found


def test_the_library_uses_no_thread_local_or_context_variable_state() -> None:
    sources = _library_sources()
    assert len(sources) > 10
    offenders = {
        str(path.relative_to(PACKAGE_DIR)): uses
        for path in sources
        if (uses := _thread_or_context_local_uses(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


def test_the_source_scan_would_find_them() -> None:
    source = (
        "import threading, contextvars\n"
        "from threading import local\n"
        "state = threading.local()\n"
        "var = contextvars.ContextVar('x')\n"
    )
    assert len(_thread_or_context_local_uses(ast.parse(source))) >= 4


# -- invalid identity --------------------------------------------------------------------------


def test_both_ids_blank_names_the_session_first(constructed: list[str]) -> None:
    with pytest.raises(InvalidRunIdentity, match="session_id"):
        RunContext.create(session_id=" ", run_id=" ", limits=limits(), timeout=1)
    assert constructed == []


def test_the_recording_wrappers_do_see_a_valid_creation(constructed: list[str]) -> None:
    ctx = RunContext.create(session_id="s", run_id="r", limits=limits(), timeout=1)
    assert set(constructed) == {
        "Cancellation",
        "Lifecycle",
        "Budget",
        "Deadline.after",
        "RetryPolicies.defaults",
    }
    ctx.check(Boundary.MODEL)


def test_ids_are_kept_exactly_as_given() -> None:
    ctx = new_run(session_id=" s 1 ", run_id="r\t1")
    assert (ctx.session_id, ctx.run_id) == (" s 1 ", "r\t1")


# -- the gate: ctx.check(boundary) ------------------------------------------------------------


def test_check_passes_one_nanosecond_before_the_deadline() -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, deadline=Deadline.at_ns(1_000))
    clock.advance_ns(999)
    for boundary in Boundary:
        ctx.check(boundary)
    ctx.reserve_model_call()
    ctx.reserve_tool_call("t")
    ctx.reserve_bytes(1)
    assert ctx.lifecycle.state is RunState.RUNNING
    assert not ctx.cancellation.is_cancelled


@pytest.mark.parametrize("boundary", list(Boundary))
def test_check_at_the_deadline_records_timed_out_and_signals(boundary: Boundary) -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, deadline=Deadline.at_ns(1_000))
    reasons: list[CancellationReason] = []
    ctx.cancellation.register(reasons.append)
    clock.advance_ns(1_000)

    with pytest.raises(RunTimedOut) as caught:
        ctx.check(boundary)

    termination = ctx.lifecycle.termination
    assert termination is not None
    assert caught.value.termination is termination
    assert caught.value.boundary is boundary
    assert (termination.state, termination.at_ns) == (RunState.TIMED_OUT, 1_000)
    assert termination.reason
    assert ctx.cancellation.reason is CancellationReason.DEADLINE_EXCEEDED
    assert reasons == [CancellationReason.DEADLINE_EXCEEDED]


def test_every_later_check_raises_the_same_termination() -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, deadline=Deadline.at_ns(10))
    clock.advance_ns(50)
    with pytest.raises(RunTimedOut) as first:
        ctx.check(Boundary.MODEL)
    clock.advance_ns(10_000)

    later: list[RunTerminated] = []
    calls: list[Callable[[], object]] = [
        *(lambda b=b: ctx.check(b) for b in Boundary),
        ctx.reserve_model_call,
        lambda: ctx.reserve_tool_call("t"),
        lambda: ctx.reserve_bytes(1),
    ]
    for call in calls:
        with pytest.raises(RunTimedOut) as caught:
            call()
        later.append(caught.value)

    assert all(error.termination is first.value.termination for error in later)
    assert first.value.termination.at_ns == 50  # when it was first observed, not later
    assert ctx.budget.snapshot().model_calls == 0


def test_a_check_after_success_raises_run_finished() -> None:
    ctx = new_run()
    ctx.lifecycle.succeed()
    with pytest.raises(RunFinished) as caught:
        ctx.check(Boundary.GUARD)
    assert caught.value.termination is ctx.lifecycle.termination
    with pytest.raises(RunFinished):
        ctx.reserve_tool_call("t")


def test_a_check_after_failure_raises_run_finished_even_past_the_deadline() -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, timeout=1)
    ctx.lifecycle.fail("boom")
    clock.advance(5)
    with pytest.raises(RunFinished):
        ctx.check(Boundary.MODEL)
    assert ctx.lifecycle.state is RunState.FAILED


def test_terminated_errors_are_neither_timeouts_nor_task_cancellations() -> None:
    ctx = new_run(timeout=0)
    with pytest.raises(RunTimedOut) as caught:
        ctx.check(Boundary.MODEL)
    error: BaseException = caught.value
    assert not isinstance(error, TimeoutError)
    assert not isinstance(error, asyncio.CancelledError)
    assert isinstance(error, diagnosis_harness.HarnessError)


def test_budget_refusal_names_its_dimension_on_the_error() -> None:
    ctx = new_run(budget=limits(model_calls=1))
    ctx.reserve_model_call()
    with pytest.raises(BudgetExhausted) as caught:
        ctx.reserve_model_call()
    assert caught.value.boundary is Boundary.MODEL
    assert caught.value.termination is ctx.lifecycle.termination


@pytest.mark.parametrize("ending", ["succeed", "cancel", "deadline", "budget"])
def test_a_run_is_freed_when_let_go_without_the_cyclic_gc(ending: str) -> None:
    """No reference cycle in a run: a service creating many runs frees each at once, not at a
    GC pass. The clock is held by the run's every part; a cycle among them would keep it."""

    class Clock:  # a plain class: weakly referenceable, unlike the library's slotted clocks
        def __init__(self) -> None:
            self.manual = ManualClock()

        def monotonic_ns(self) -> int:
            return self.manual.monotonic_ns()

    clock = Clock()
    ctx = new_run(clock=clock, budget=limits(model_calls=1))
    ctx.cancellation.register(lambda _reason: None)
    ctx.reserve_tool_call("read_logs")
    ctx.reserve_model_call()
    ctx.record_token_usage(input_tokens=10, output_tokens=2)
    if ending == "succeed":
        ctx.lifecycle.succeed()
    elif ending == "cancel":
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    elif ending == "deadline":
        clock.manual.advance(31)
        with pytest.raises(RunTimedOut):
            ctx.check(Boundary.TOOL)
    else:
        with pytest.raises(BudgetExhausted):
            ctx.reserve_model_call()
    assert ctx.lifecycle.is_terminal
    held = weakref.ref(clock)
    gc.disable()
    try:
        del ctx, clock
        assert held() is None
    finally:
        gc.enable()


def test_a_cancellation_kept_after_its_run_was_let_go_still_cancels() -> None:
    ctx = new_run()
    seen: list[CancellationReason] = []
    ctx.cancellation.register(seen.append)
    cancellation = ctx.cancellation
    del ctx  # the lifecycle goes with the run; nothing is left to record an outcome on
    assert cancellation.cancel(CancellationReason.SHUTDOWN) is True
    assert seen == [CancellationReason.SHUTDOWN]
    assert cancellation.reason is CancellationReason.SHUTDOWN


class _UntouchedStore:
    """A store whose methods fail the test: bad arguments must be refused before it is asked."""

    def create_run(self, **_kwargs: Any) -> Any:
        raise AssertionError("create_run was called")

    def attach_run(self, **_kwargs: Any) -> Any:
        raise AssertionError("attach_run was called")


def test_a_store_is_asked_only_with_arguments_that_were_checked() -> None:
    good = diagnosis_harness.BudgetLimits(
        model_calls=1,
        tool_calls=1,
        per_tool_calls=1,
        input_tokens=1,
        output_tokens=1,
        total_tokens=1,
        run_bytes=1,
    )
    store: Any = _UntouchedStore()
    with pytest.raises(TypeError, match="store must be a run store"):
        diagnosis_harness.RunContext.create(
            session_id="s",
            run_id="r",
            limits=good,
            timeout=1,
            store=object(),  # type: ignore[arg-type]  # the point
        )
    lock = threading.Lock()
    with pytest.raises(ValueError, match="_lock is for a run in this process"):
        diagnosis_harness.RunContext.create(
            session_id="s", run_id="r", limits=good, timeout=1, store=store, _lock=lock
        )
    with pytest.raises(TypeError, match="store must be a run store"):
        diagnosis_harness.RunContext.attach(session_id="s", run_id="r", store=object())  # type: ignore[arg-type]  # the point
    with pytest.raises(TypeError, match="limits must be BudgetLimits or None"):
        diagnosis_harness.RunContext.attach(session_id="s", run_id="r", store=store, limits={})  # type: ignore[arg-type]  # the point
    with pytest.raises(TypeError, match="retry_policies must be RetryPolicies"):
        diagnosis_harness.RunContext.attach(
            session_id="s",
            run_id="r",
            store=store,
            retry_policies=[],  # type: ignore[arg-type]  # the point
        )
    with pytest.raises(diagnosis_harness.InvalidRunIdentity):
        diagnosis_harness.RunContext.attach(session_id=" ", run_id="r", store=store)
    with pytest.raises(TypeError, match="clock must have monotonic_ns"):
        diagnosis_harness.RunContext.attach(session_id="s", run_id="r", store=store, clock=object())  # type: ignore[arg-type]  # the point
