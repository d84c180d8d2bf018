"""HarnessRetryExecutor.execute: the gate before every attempt, typed classification, records.

Every test drives the executor with scripted operations on a ManualClock; the operation advances
the clock itself, so the records' timestamps are the clock's and nothing waits in real time. The
backoff tests replace the executor's wait (``pause``) with a recorder, or bound a real wait with
a thread join, so that a bug fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given

import diagnosis_harness._retry as retry_module
from diagnosis_harness import (
    AttemptOutcome,
    AttemptRecord,
    Backoff,
    Boundary,
    BudgetExhausted,
    CancellationReason,
    Deadline,
    ExecutionRecord,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunCancelled,
    RunContext,
    RunFinished,
    RunState,
    RunTerminated,
    RunTimedOut,
    StopReason,
    SystemClock,
)
from diagnosis_harness._generated.tables import RetryState
from diagnosis_harness.conformance.suite._support import (
    Scripted,
    attempts_summary,
    only_execution,
    run_on_clock,
)
from diagnosis_harness.testing import FakeModel, FakeResponse
from strategies import limits, new_run, not_callable

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

NS = 1_000_000_000
TECHNICAL = frozenset(
    {
        FailureKind.TRANSPORT,
        FailureKind.TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.SERVER_ERROR,
        FailureKind.MALFORMED_RESPONSE,
    }
)
NEVER_RETRIED = frozenset(FailureKind) - TECHNICAL
ROUTER = RetryPolicies.defaults()["intent_router"]
THREE_TRIES = RetryPolicy("three", 3, TECHNICAL)
BOUND = 10.0  # seconds a worker may take before the test calls it a hang


def _kind_id(kind: FailureKind) -> str:
    return kind.name


def _notes(error: BaseException) -> list[str]:
    notes: list[str] = getattr(error, "__notes__", [])
    return notes


def _other_run_error(end: str) -> RunTerminated:
    """A real RunTerminated subclass, raised by the gate of a second run that is over."""
    ctx, clock = run_on_clock(budget=limits(model_calls=1))
    if end == "cancelled":
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
    elif end == "timed_out":
        clock.advance(31)
    elif end == "exhausted":
        ctx.reserve_model_call()
    elif end == "succeeded":
        ctx.lifecycle.succeed()
    else:
        ctx.lifecycle.fail("broken")
    try:
        if end == "exhausted":
            ctx.reserve_model_call()
        else:
            ctx.check(Boundary.MODEL)
    except RunTerminated as error:
        return error
    raise AssertionError(f"the {end} run did not refuse")


# The seed scenarios are shown in src/diagnosis_harness/conformance/suite/test_harness_retry.py.


# -- the gate: a run that is over rejects the next attempt ----------------------------------------


def _end_run(how: str, ctx: RunContext, clock: ManualClock) -> None:
    if how == "cancel":
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    elif how == "deadline":
        clock.advance(30)  # exactly on the deadline: expired
    elif how == "budget":
        ctx.reserve_model_call()
        with pytest.raises(BudgetExhausted):
            ctx.reserve_model_call()
    elif how == "tokens":
        ctx.record_token_usage(input_tokens=11, output_tokens=0)
    elif how == "succeed":
        ctx.lifecycle.succeed()
    else:
        ctx.lifecycle.fail("gave up")


ENDINGS = [
    ("cancel", RunCancelled, RunState.CANCELLED),
    ("deadline", RunTimedOut, RunState.TIMED_OUT),
    ("budget", BudgetExhausted, RunState.BUDGET_EXHAUSTED),
    ("tokens", BudgetExhausted, RunState.BUDGET_EXHAUSTED),
    ("succeed", RunFinished, RunState.SUCCESS),
    ("fail", RunFinished, RunState.FAILED),
]


@pytest.mark.parametrize(("how", "error", "state"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_a_run_over_before_the_first_attempt_never_invokes_the_operation(
    how: str, error: type[RunTerminated], state: RunState
) -> None:
    ctx, clock = run_on_clock(budget=limits(model_calls=1, input_tokens=10))
    _end_run(how, ctx, clock)
    operation = Scripted(["unreached"], clock)
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(error) as raised:
        executor.execute(THREE_TRIES, operation)

    assert type(raised.value) is error
    assert operation.calls == []
    assert executor.attempts == ()
    execution = only_execution(executor)
    assert execution == ExecutionRecord(
        "three", (), StopReason.RUN_TERMINATED, RetryState.STOPPED, ctx.lifecycle.termination
    )
    assert ctx.lifecycle.state is state
    assert raised.value.harness_execution == execution  # type: ignore[attr-defined]


@pytest.mark.parametrize(("how", "error", "state"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_a_run_ended_during_a_retryable_attempt_rejects_the_next_one(
    how: str, error: type[RunTerminated], state: RunState
) -> None:
    ctx, clock = run_on_clock(budget=limits(model_calls=1, input_tokens=10))
    operation = Scripted(
        [HarnessFailure(FailureKind.RATE_LIMITED), "unreached", "unreached"],
        clock,
        before=lambda _: _end_run(how, ctx, clock),
    )
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(error):
        executor.execute(THREE_TRIES, operation)

    assert len(operation.calls) == 1
    execution = only_execution(executor)
    assert attempts_summary(execution.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.RATE_LIMITED)
    ]
    assert (execution.stop, execution.state) == (StopReason.RUN_TERMINATED, RetryState.STOPPED)
    assert execution.termination is ctx.lifecycle.termination
    assert ctx.lifecycle.state is state


def test_the_gate_is_checked_before_every_attempt_not_only_the_first() -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.SERVER_ERROR)

    def before(n: int) -> None:
        if n == 2:
            clock.advance(60)

    operation = Scripted([failure, failure, "unreached"], clock, before=before)
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(RunTimedOut):
        executor.execute(THREE_TRIES, operation)

    assert len(operation.calls) == 2
    assert [a.outcome for a in executor.attempts] == [AttemptOutcome.FAILED] * 2
    assert only_execution(executor).stop is StopReason.RUN_TERMINATED


# -- what is recorded -----------------------------------------------------------------------------


def test_first_try_success_is_one_record_with_the_clocks_timestamps() -> None:
    ctx, clock = run_on_clock()
    operation = Scripted(["done"], clock, step_ns=250)
    executor = HarnessRetryExecutor(ctx)

    assert executor.execute(ROUTER, operation, 1, key="v") == "done"

    assert operation.calls == [((1,), {"key": "v"})]
    assert executor.attempts == (
        AttemptRecord("intent_router", 1, AttemptOutcome.SUCCEEDED, None, 1_000, 1_250),
    )
    assert only_execution(executor) == ExecutionRecord(
        "intent_router", executor.attempts, StopReason.SUCCEEDED, RetryState.SUCCEEDED, None
    )


def test_every_attempt_is_recorded_in_order_with_its_kind_and_span() -> None:
    ctx, clock = run_on_clock()
    errors = [HarnessFailure(FailureKind.TIMEOUT), HarnessFailure(FailureKind.MALFORMED_RESPONSE)]
    operation = Scripted([*errors, "third"], clock, step_ns=40)
    executor = HarnessRetryExecutor(ctx)

    assert executor.execute(THREE_TRIES, operation, "same", arg=2) == "third"

    assert operation.calls == [(("same",), {"arg": 2})] * 3
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TIMEOUT),
        (2, AttemptOutcome.FAILED, FailureKind.MALFORMED_RESPONSE),
        (3, AttemptOutcome.SUCCEEDED, None),
    ]
    assert [(a.started_ns, a.ended_ns) for a in executor.attempts] == operation.spans
    assert operation.spans == [(1_000, 1_040), (1_040, 1_080), (1_080, 1_120)]
    assert {a.policy for a in executor.attempts} == {"three"}


def test_exhausted_attempts_reraise_the_last_attempts_own_exception() -> None:
    ctx, clock = run_on_clock()
    first, second = (HarnessFailure(FailureKind.TRANSPORT, str(n)) for n in (1, 2))
    operation = Scripted([first, second, "unreached"], clock)
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(HarnessFailure) as raised:
        executor.execute("intent_router", operation)

    assert raised.value is second
    assert len(operation.calls) == 2
    execution = only_execution(executor)
    assert (execution.stop, execution.state) == (StopReason.ATTEMPTS_EXHAUSTED, RetryState.FAILED)
    assert second.harness_execution == execution  # type: ignore[attr-defined]
    assert not hasattr(first, "harness_execution")  # only the re-raised error carries it
    assert ctx.lifecycle.state is RunState.RUNNING  # a failed operation does not end the run


def test_final_failure_carries_the_history_as_attribute_and_note() -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.NO_EVIDENCE, "nothing in the logs")
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(HarnessFailure) as raised:
        executor.execute(
            "intent_router", Scripted([HarnessFailure(FailureKind.TRANSPORT), failure], clock)
        )

    assert raised.value is failure
    record: ExecutionRecord = failure.harness_execution  # type: ignore[attr-defined]
    assert record == only_execution(executor)
    assert record.describe() == (
        "harness retry [intent_router]: attempt 1 failed (TRANSPORT); "
        "attempt 2 failed (NO_EVIDENCE); stop: NOT_RETRYABLE"
    )
    if sys.version_info >= (3, 11):
        assert _notes(failure) == [record.describe()]
    else:
        assert _notes(failure) == []


def test_describe_says_no_attempt_for_a_stop_before_the_first() -> None:
    record = ExecutionRecord("p", (), StopReason.RUN_TERMINATED, RetryState.STOPPED)
    assert record.describe() == "harness retry [p]: no attempt; stop: RUN_TERMINATED"


def test_records_are_immutable() -> None:
    ctx, clock = run_on_clock()
    executor = HarnessRetryExecutor(ctx)
    executor.execute(ROUTER, Scripted(["ok"], clock))
    (attempt,) = executor.attempts
    with pytest.raises(AttributeError):
        attempt.number = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        only_execution(executor).stop = StopReason.INTERRUPTED  # type: ignore[misc]


def test_executions_accumulate_in_the_order_they_end() -> None:
    ctx, clock = run_on_clock()
    executor = HarnessRetryExecutor(ctx)
    empty = (executor.executions, executor.attempts)
    assert empty == ((), ())
    executor.execute(ROUTER, Scripted([HarnessFailure(FailureKind.TIMEOUT), "a"], clock))
    with pytest.raises(ValueError, match="boom"):
        executor.execute("tool_call", Scripted([ValueError("boom")], clock))
    executor.execute(THREE_TRIES, Scripted(["c"], clock))

    assert [(e.policy, e.stop) for e in executor.executions] == [
        ("intent_router", StopReason.SUCCEEDED),
        ("tool_call", StopReason.NOT_RETRYABLE),
        ("three", StopReason.SUCCEEDED),
    ]
    assert [(a.policy, a.number) for a in executor.attempts] == [
        ("intent_router", 1),
        ("intent_router", 2),
        ("tool_call", 1),
        ("three", 1),
    ]
    assert executor.executions == executor.executions  # reading does not consume


# -- classification -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(TECHNICAL, key=str), ids=_kind_id)
def test_each_technical_kind_is_retried_under_the_router_policy(kind: FailureKind) -> None:
    ctx, clock = run_on_clock()
    executor = HarnessRetryExecutor(ctx)
    assert executor.execute(ROUTER, Scripted([HarnessFailure(kind), "ok"], clock)) == "ok"
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, kind),
        (2, AttemptOutcome.SUCCEEDED, None),
    ]


@pytest.mark.parametrize("kind", sorted(NEVER_RETRIED, key=str), ids=_kind_id)
def test_a_never_retried_kind_fails_at_once_even_with_attempts_left(kind: FailureKind) -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(kind, "typed")
    operation = Scripted([failure, "unreached"], clock)
    executor = HarnessRetryExecutor(ctx)

    with pytest.raises(HarnessFailure) as raised:
        executor.execute(RetryPolicy("all", 6, TECHNICAL), operation)

    assert raised.value is failure
    assert failure.kind is kind
    assert len(operation.calls) == 1
    assert attempts_summary(executor.attempts) == [(1, AttemptOutcome.FAILED, kind)]
    assert only_execution(executor).stop is StopReason.NOT_RETRYABLE


def test_a_technical_kind_the_policy_does_not_list_is_not_retried() -> None:
    ctx, clock = run_on_clock()
    policy = RetryPolicy("timeouts_only", 3, frozenset({FailureKind.TIMEOUT}))
    operation = Scripted([HarnessFailure(FailureKind.RATE_LIMITED), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx)
    with pytest.raises(HarnessFailure):
        executor.execute(policy, operation)
    assert len(operation.calls) == 1
    assert only_execution(executor).stop is StopReason.NOT_RETRYABLE


def test_harness_failure_carries_its_kind_and_message() -> None:
    failure = HarnessFailure(FailureKind.RATE_LIMITED, "429 from provider")
    assert failure.kind is FailureKind.RATE_LIMITED
    assert failure.message == "429 from provider"
    assert str(failure) == "RATE_LIMITED: 429 from provider"
    assert str(HarnessFailure(FailureKind.TIMEOUT)) == "TIMEOUT"


@pytest.mark.parametrize(
    "kind", ["transport", None, CancellationReason.USER_REQUESTED, RunState.FAILED], ids=repr
)
def test_harness_failure_refuses_a_kind_that_is_not_a_failure_kind(kind: Any) -> None:
    # BUG: HarnessFailure does not validate `kind`. A str or None fails with AttributeError
    # (from `kind.name` in the message); any other enum member is accepted, and the executor then
    # records it as the attempt's `failure`, which is typed `FailureKind | None`.
    with pytest.raises(TypeError, match="kind"):
        HarnessFailure(kind)


TERMINATIONS = [
    ("cancelled", RunCancelled, FailureKind.CANCELLED),
    ("timed_out", RunTimedOut, FailureKind.DEADLINE_EXCEEDED),
    ("exhausted", BudgetExhausted, FailureKind.BUDGET_EXHAUSTED),
    ("succeeded", RunFinished, FailureKind.CANCELLED),
    ("failed", RunFinished, FailureKind.CANCELLED),
]


@pytest.mark.parametrize(("end", "cls", "kind"), TERMINATIONS, ids=[t[0] for t in TERMINATIONS])
def test_run_terminated_raised_by_the_operation_maps_to_its_kind_and_is_never_retried(
    end: str, cls: type[RunTerminated], kind: FailureKind
) -> None:
    error = _other_run_error(end)
    assert type(error) is cls
    ctx, clock = run_on_clock()
    operation = Scripted([error, "unreached"], clock)
    # Even a classifier that calls everything a transport failure cannot make it retryable.
    executor = HarnessRetryExecutor(ctx, classifier=lambda _: FailureKind.TRANSPORT)

    with pytest.raises(cls) as raised:
        executor.execute(RetryPolicy("all", 6, TECHNICAL), operation)

    assert raised.value is error
    assert len(operation.calls) == 1
    assert attempts_summary(executor.attempts) == [(1, AttemptOutcome.FAILED, kind)]
    assert only_execution(executor).stop is StopReason.NOT_RETRYABLE
    assert ctx.lifecycle.state is RunState.RUNNING


def test_the_operations_own_budget_refusal_is_recorded_and_not_retried() -> None:
    ctx, _ = run_on_clock(budget=limits(model_calls=1))
    model = FakeModel([HarnessFailure(FailureKind.TRANSPORT), FakeResponse("unreached")])
    executor = HarnessRetryExecutor(ctx)

    # The first attempt spends the only Model call and fails retryably; the second attempt's own
    # reservation is refused inside the operation, so the model is never asked again.
    with pytest.raises(BudgetExhausted):
        executor.execute(ROUTER, model.complete, ctx, "p")

    assert model.calls == 1
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT),
        (2, AttemptOutcome.FAILED, FailureKind.BUDGET_EXHAUSTED),
    ]
    assert only_execution(executor).stop is StopReason.NOT_RETRYABLE
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


@pytest.mark.parametrize(
    "error",
    [ValueError("bad"), TimeoutError("sdk timeout"), ConnectionError("reset"), OSError("io")],
    ids=lambda e: type(e).__name__,
)
def test_an_unclassified_exception_is_unknown_and_never_retried(error: Exception) -> None:
    ctx, clock = run_on_clock()
    operation = Scripted([error, "unreached"], clock)
    executor = HarnessRetryExecutor(ctx)
    with pytest.raises(type(error)) as raised:
        executor.execute(RetryPolicy("all", 6, TECHNICAL), operation)
    assert raised.value is error
    assert len(operation.calls) == 1
    assert attempts_summary(executor.attempts) == [(1, AttemptOutcome.FAILED, FailureKind.UNKNOWN)]


@pytest.mark.parametrize(
    "interrupt",
    [KeyboardInterrupt(), SystemExit(3), asyncio.CancelledError(), GeneratorExit()],
    ids=lambda e: type(e).__name__,
)
def test_base_exceptions_propagate_at_once_and_are_recorded_as_interrupted(
    interrupt: BaseException,
) -> None:
    ctx, clock = run_on_clock()
    operation = Scripted([interrupt, "unreached"], clock, step_ns=3)
    seen: list[Exception] = []

    def classify(error: Exception) -> FailureKind:
        seen.append(error)
        return FailureKind.TRANSPORT

    executor = HarnessRetryExecutor(ctx, classifier=classify)

    with pytest.raises(type(interrupt)) as raised:
        executor.execute(RetryPolicy("all", 6, TECHNICAL), operation)

    assert raised.value is interrupt
    assert len(operation.calls) == 1
    assert seen == []  # never offered to the classifier as a failure
    assert executor.attempts == (
        AttemptRecord("all", 1, AttemptOutcome.INTERRUPTED, None, 1_000, 1_003),
    )
    execution = only_execution(executor)
    assert (execution.stop, execution.state) == (StopReason.INTERRUPTED, RetryState.FAILED)
    assert interrupt.harness_execution == execution  # type: ignore[attr-defined]
    assert ctx.lifecycle.state is RunState.RUNNING


# -- the user classifier --------------------------------------------------------------------------


def test_a_classifier_maps_sdk_exceptions_to_kinds() -> None:
    ctx, clock = run_on_clock()

    def classify(error: Exception) -> FailureKind | None:
        if isinstance(error, ConnectionResetError):
            return FailureKind.TRANSPORT
        if isinstance(error, LookupError):
            return FailureKind.BUSINESS_REJECTION
        return None

    executor = HarnessRetryExecutor(ctx, classifier=classify)
    assert executor.execute(ROUTER, Scripted([ConnectionResetError(), "ok"], clock)) == "ok"
    with pytest.raises(KeyError):
        executor.execute(ROUTER, Scripted([KeyError("no such host"), "unreached"], clock))
    with pytest.raises(ZeroDivisionError):
        executor.execute(ROUTER, Scripted([ZeroDivisionError(), "unreached"], clock))

    assert [[a.failure for a in e.attempts] for e in executor.executions] == [
        [FailureKind.TRANSPORT, None],
        [FailureKind.BUSINESS_REJECTION],
        [FailureKind.UNKNOWN],  # None: not the classifier's, so UNKNOWN
    ]


def test_an_explicit_harness_failure_kind_wins_over_the_classifier() -> None:
    ctx, clock = run_on_clock()
    executor = HarnessRetryExecutor(ctx, classifier=lambda _: FailureKind.TRANSPORT)
    operation = Scripted([HarnessFailure(FailureKind.NO_EVIDENCE), "unreached"], clock)
    with pytest.raises(HarnessFailure):
        executor.execute(ROUTER, operation)
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.NO_EVIDENCE)
    ]


@pytest.mark.parametrize("returned", ["transport", "TRANSPORT", 1, True, RunState.FAILED], ids=repr)
def test_a_classifier_returning_a_non_kind_raises_type_error(returned: Any) -> None:
    ctx, clock = run_on_clock()
    error = ConnectionResetError("reset")
    executor = HarnessRetryExecutor(ctx, classifier=lambda _: returned)
    with pytest.raises(TypeError, match="classifier returned") as raised:
        executor.execute(ROUTER, Scripted([error, "unreached"], clock))
    assert raised.value.__context__ is error


def test_the_attempt_is_recorded_when_the_classifier_returns_a_non_kind() -> None:
    # BUG: the operation was invoked once, but no AttemptRecord and no ExecutionRecord exist,
    # because the classifier's TypeError escapes _failed() before the attempt is appended.
    ctx, clock = run_on_clock()
    operation = Scripted([ConnectionResetError("reset"), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, classifier=lambda _: "transport")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError):
        executor.execute(ROUTER, operation)
    assert len(operation.calls) == 1
    assert len(executor.attempts) == len(operation.calls)
    assert executor.attempts[0].outcome is AttemptOutcome.FAILED


# -- arguments ------------------------------------------------------------------------------------


def test_a_policy_name_is_looked_up_in_the_runs_policies() -> None:
    custom = RetryPolicies([RetryPolicy("planner", 3, frozenset({FailureKind.TIMEOUT}))])
    ctx, clock = run_on_clock(retry_policies=custom)
    failure = HarnessFailure(FailureKind.TIMEOUT)
    operation = Scripted([failure, failure, "third"], clock)
    executor = HarnessRetryExecutor(ctx)
    assert executor.execute("planner", operation) == "third"
    assert only_execution(executor).policy == "planner"
    with pytest.raises(KeyError, match="intent_router"):
        executor.execute("intent_router", operation)  # not among this run's policies
    assert len(operation.calls) == 3


@pytest.mark.parametrize("policy", [None, 2, b"intent_router", ("intent_router",)], ids=repr)
def test_a_policy_that_is_neither_a_policy_nor_a_name_is_a_type_error(policy: Any) -> None:
    ctx, clock = run_on_clock()
    operation = Scripted(["unreached"], clock)
    executor = HarnessRetryExecutor(ctx)
    with pytest.raises(TypeError, match="policy"):
        executor.execute(policy, operation)
    assert operation.calls == []
    assert executor.executions == ()


def test_an_unknown_policy_name_invokes_nothing() -> None:
    ctx, clock = run_on_clock()
    operation = Scripted(["unreached"], clock)
    executor = HarnessRetryExecutor(ctx)
    with pytest.raises(KeyError, match="no retry policy named 'nope'"):
        executor.execute("nope", operation)
    assert operation.calls == []
    assert executor.executions == ()


@pytest.mark.parametrize("ctx", [None, "ctx", object()], ids=repr)
def test_executor_needs_a_run_context(ctx: Any) -> None:
    with pytest.raises(TypeError, match="ctx"):
        HarnessRetryExecutor(ctx)


@given(classifier=not_callable.filter(lambda value: value is not None))  # None: no classifier
def test_executor_refuses_a_classifier_that_is_not_callable(classifier: Any) -> None:
    ctx, _ = run_on_clock()
    with pytest.raises(TypeError, match="classifier"):
        HarnessRetryExecutor(ctx, classifier=classifier)


@pytest.mark.parametrize("backoff", [1.0, {"initial": 1}, "exponential", Backoff], ids=repr)
def test_executor_refuses_a_backoff_that_is_not_a_backoff(backoff: Any) -> None:
    ctx, _ = run_on_clock()
    with pytest.raises(TypeError, match="backoff"):
        HarnessRetryExecutor(ctx, backoff=backoff)


# -- backoff between attempts ---------------------------------------------------------------------


@dataclass
class PauseRecorder:
    calls: list[tuple[RunContext, float]] = field(default_factory=list)

    def __call__(self, ctx: RunContext, seconds: float) -> None:
        self.calls.append((ctx, seconds))


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> PauseRecorder:
    recorder = PauseRecorder()
    monkeypatch.setattr(retry_module, "pause", recorder)
    return recorder


@pytest.mark.parametrize("backoff", [None, Backoff(), Backoff(initial=0, multiplier=3)])
def test_a_zero_delay_makes_no_wait_call_at_all(
    backoff: Backoff | None, pauses: PauseRecorder
) -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.TRANSPORT)
    executor = HarnessRetryExecutor(ctx, backoff=backoff)
    assert executor.execute(THREE_TRIES, Scripted([failure, failure, "ok"], clock)) == "ok"
    assert pauses.calls == []


def test_a_positive_delay_waits_once_per_retry_with_the_backoff_delay(
    pauses: PauseRecorder,
) -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.TRANSPORT)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=0.25, multiplier=2))

    assert executor.execute(ROUTER, Scripted([failure, "ok"], clock)) == "ok"
    assert pauses.calls == [(ctx, 0.25)]

    executor.execute(THREE_TRIES, Scripted([failure, failure, "ok"], clock))
    assert [seconds for _, seconds in pauses.calls] == [0.25, 0.25, 0.5]


def test_no_wait_after_the_last_attempt_or_a_non_retryable_failure(pauses: PauseRecorder) -> None:
    ctx, clock = run_on_clock()
    failure = HarnessFailure(FailureKind.TRANSPORT)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=5))
    with pytest.raises(HarnessFailure):
        executor.execute(ROUTER, Scripted([failure, failure], clock))
    assert len(pauses.calls) == 1  # between attempts 1 and 2, not after 2
    with pytest.raises(HarnessFailure):
        executor.execute(ROUTER, Scripted([HarnessFailure(FailureKind.UNKNOWN)], clock))
    with pytest.raises(ValueError, match="x"):
        executor.execute(ROUTER, Scripted([ValueError("x")], clock))
    assert len(pauses.calls) == 1


def _run_in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def main() -> None:
        try:
            outcome.append(target())
        except BaseException as error:  # handed to the test thread to assert on
            outcome.append(error)

    worker = threading.Thread(target=main, daemon=True)
    worker.start()
    return worker, outcome


def test_a_backoff_never_sleeps_past_the_deadline() -> None:
    ctx = new_run(clock=SystemClock(), timeout=0.05)
    failure = HarnessFailure(FailureKind.TRANSPORT)
    operation = Scripted([failure, "unreached"])
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=60, maximum=60))

    worker, outcome = _run_in_thread(lambda: executor.execute(ROUTER, operation))
    worker.join(BOUND)

    assert not worker.is_alive(), "the 60 s backoff outlived the run's 0.05 s deadline"
    (error,) = outcome
    assert isinstance(error, RunTimedOut)
    assert len(operation.calls) == 1
    assert ctx.lifecycle.state is RunState.TIMED_OUT
    execution = only_execution(executor)
    assert (execution.stop, execution.state) == (StopReason.RUN_TERMINATED, RetryState.STOPPED)


def test_a_backoff_ends_early_when_the_run_is_cancelled_from_another_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx, clock = run_on_clock(timeout=600)
    waiting = threading.Event()
    real_pause = retry_module.pause

    def pause(ctx: RunContext, seconds: float) -> None:
        waiting.set()
        real_pause(ctx, seconds)

    monkeypatch.setattr(retry_module, "pause", pause)
    operation = Scripted([HarnessFailure(FailureKind.TRANSPORT), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=60, maximum=60))

    worker, outcome = _run_in_thread(lambda: executor.execute(ROUTER, operation))
    try:
        assert waiting.wait(BOUND)
        assert ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
        worker.join(BOUND)
        assert not worker.is_alive(), "cancellation did not end the 60 s backoff"
    finally:
        ctx.cancellation.cancel(CancellationReason.SHUTDOWN)  # never leave the worker waiting
    (error,) = outcome
    assert isinstance(error, RunCancelled)
    assert len(operation.calls) == 1
    assert only_execution(executor).stop is StopReason.RUN_TERMINATED


FAR = [
    pytest.param({"timeout": sys.float_info.max}, id="timeout=float-max"),
    pytest.param({"timeout": 1e300}, id="timeout=1e300"),
    pytest.param({"timeout": 10**400}, id="timeout=10**400"),
    pytest.param({"deadline": Deadline.at_ns(10**400)}, id="at_ns(10**400)"),
]


@pytest.mark.parametrize("far", FAR)
def test_a_backoff_under_a_far_deadline_waits_its_delay(far: dict[str, Any]) -> None:
    """The wait lasts the delay or the capped time left: no overflow, whatever the deadline."""
    ctx, clock = run_on_clock(**far)
    operation = Scripted([HarnessFailure(FailureKind.TRANSPORT), "ok"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=0.001, maximum=0.001))

    worker, outcome = _run_in_thread(lambda: executor.execute(ROUTER, operation))
    worker.join(BOUND)

    assert not worker.is_alive(), "a 1 ms backoff did not end"
    assert outcome == ["ok"]
    assert len(operation.calls) == 2


def test_a_huge_backoff_under_a_far_deadline_waits_until_the_run_is_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx, clock = run_on_clock(deadline=Deadline.at_ns(10**400))
    waiting = threading.Event()
    real_pause = retry_module.pause

    def pause(ctx: RunContext, seconds: float) -> None:
        waiting.set()
        real_pause(ctx, seconds)

    monkeypatch.setattr(retry_module, "pause", pause)
    operation = Scripted([HarnessFailure(FailureKind.TRANSPORT), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=1e300, maximum=1e300))

    worker, outcome = _run_in_thread(lambda: executor.execute(ROUTER, operation))
    try:
        assert waiting.wait(BOUND)
        ctx.cancellation.cancel(CancellationReason.SHUTDOWN)  # wakes the wait, wherever it is
        worker.join(BOUND)
        assert not worker.is_alive(), "cancellation did not end the backoff"
    finally:
        ctx.cancellation.cancel(CancellationReason.SHUTDOWN)  # never leave the worker waiting
    (error,) = outcome
    assert isinstance(error, RunCancelled), error
    assert len(operation.calls) == 1


def test_a_backoff_longer_than_one_capped_wait_waits_again_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wait that ended on ``Deadline.MAX_WAIT_SECONDS`` was neither the delay nor the deadline.

    The cap is lowered to 10 ms so that a 50 ms backoff spans five capped waits.
    """
    monkeypatch.setattr(Deadline, "MAX_WAIT_SECONDS", 0.01)
    ctx, clock = run_on_clock(deadline=Deadline.at_ns(10**400))
    operation = Scripted([HarnessFailure(FailureKind.TRANSPORT), "ok"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=0.05, maximum=0.05))

    started = time.monotonic()
    worker, outcome = _run_in_thread(lambda: executor.execute(ROUTER, operation))
    worker.join(BOUND)
    waited = time.monotonic() - started

    assert outcome == ["ok"]
    assert waited >= 0.05, f"the backoff ended after one capped wait ({waited:.3f} s)"


def test_an_interrupt_during_the_backoff_keeps_the_executions_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # BUG: a KeyboardInterrupt (or SystemExit) while waiting between attempts propagates, but the
    # execution -- with its actual, failed first attempt -- is never stored or attached.
    ctx, clock = run_on_clock()

    def interrupted(ctx: RunContext, seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(retry_module, "pause", interrupted)
    operation = Scripted([HarnessFailure(FailureKind.TRANSPORT), "unreached"], clock)
    executor = HarnessRetryExecutor(ctx, backoff=Backoff(initial=1))
    with pytest.raises(KeyboardInterrupt):
        executor.execute(ROUTER, operation)
    assert len(operation.calls) == 1
    assert attempts_summary(executor.attempts) == [
        (1, AttemptOutcome.FAILED, FailureKind.TRANSPORT)
    ]


# -- concurrency ----------------------------------------------------------------------------------


def test_concurrent_executions_on_one_executor_are_all_recorded_correctly() -> None:
    threads, runs = 8, 40
    ctx, clock = run_on_clock()
    executor = HarnessRetryExecutor(ctx)
    barrier = threading.Barrier(threads)
    policies = [RetryPolicy(f"worker-{i}", 3, TECHNICAL) for i in range(threads)]
    results: list[list[object]] = [[] for _ in range(threads)]
    invocations = [0] * threads

    def work(i: int) -> None:
        barrier.wait()
        for r in range(runs):
            failures = (i + r) % 3  # 0, 1 or 2 retryable failures before the success
            script: list[object] = [HarnessFailure(FailureKind.TIMEOUT)] * failures + [(i, r)]
            operation = Scripted(script, clock, step_ns=1)
            results[i].append(executor.execute(policies[i], operation))
            invocations[i] += len(operation.calls)
            if r % 10 == 0:
                assert len(executor.executions) >= r  # reading while others write

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(BOUND * 3)
    assert not any(worker.is_alive() for worker in workers)

    assert results == [[(i, r) for r in range(runs)] for i in range(threads)]
    executions = executor.executions
    assert len(executions) == threads * runs
    assert len(executor.attempts) == sum(invocations)
    for i in range(threads):
        mine = [e for e in executions if e.policy == f"worker-{i}"]
        assert len(mine) == runs
        assert sum(len(e.attempts) for e in mine) == invocations[i]
        for r, execution in enumerate(mine):  # one thread's executions end in its own order
            failures = (i + r) % 3
            assert [a.number for a in execution.attempts] == list(range(1, failures + 2))
            assert [a.outcome for a in execution.attempts] == (
                [AttemptOutcome.FAILED] * failures + [AttemptOutcome.SUCCEEDED]
            )
            assert {a.policy for a in execution.attempts} == {f"worker-{i}"}
            assert execution.stop is StopReason.SUCCEEDED


def test_a_non_callable_operation_is_refused_before_any_attempt() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)
    bad: Any = None
    with pytest.raises(TypeError, match="fn must be callable"):
        executor.execute("tool_call", bad)
    assert executor.attempts == ()
    assert executor.executions == ()


def test_an_async_function_given_to_execute_is_refused_and_never_recorded_as_a_success() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)
    ran: list[str] = []

    async def operation() -> str:
        ran.append("body")
        return "answer"

    untyped: Any = operation  # mypy already refuses this call: an unused coroutine
    with pytest.raises(TypeError, match="use execute_async"):
        executor.execute("tool_call", untyped)
    assert ran == []  # the coroutine was closed, not left to warn as "never awaited"
    assert executor.executions == ()


def test_an_async_function_is_refused_as_bad_input_even_on_an_ended_run() -> None:
    ctx = new_run(timeout=0)  # the RETRY gate would refuse any attempt

    async def operation() -> str:
        return "answer"

    executor = HarnessRetryExecutor(ctx)
    untyped: Any = operation
    with pytest.raises(TypeError, match="coroutine function"):
        executor.execute("tool_call", untyped)
    assert executor.executions == ()
    assert ctx.lifecycle.state is RunState.RUNNING  # the gate was never asked


async def _answer() -> str:
    return "answer"


class _Service:
    async def ask(self) -> str:
        return "answer"


def _async_with_attributes() -> Callable[[], Coroutine[Any, Any, str]]:
    async def labelled() -> str:
        return "answer"

    labelled.label = "router"  # type: ignore[attr-defined]  # a decorator's bookkeeping
    return labelled


def _coroutine_functions() -> list[Any]:
    forms: list[Any] = [
        pytest.param(_answer, id="async def"),
        pytest.param(functools.partial(_answer), id="partial"),
        pytest.param(_Service().ask, id="bound method"),
        pytest.param(_async_with_attributes(), id="async def with attributes"),
    ]
    if sys.version_info >= (3, 12):

        def starts_it() -> Coroutine[Any, Any, str]:  # a plain function, marked as async
            return _answer()

        marked = inspect.markcoroutinefunction(starts_it)
        forms.append(pytest.param(marked, id="markcoroutinefunction"))
    return forms


@pytest.mark.parametrize("operation", _coroutine_functions())
def test_every_form_of_coroutine_function_is_refused_before_the_gate(operation: Any) -> None:
    ctx = new_run(timeout=0)  # the RETRY gate would refuse any attempt
    executor = HarnessRetryExecutor(ctx)
    with pytest.raises(TypeError, match="coroutine function"):
        executor.execute("tool_call", operation)
    assert executor.executions == ()
    assert ctx.lifecycle.state is RunState.RUNNING  # the gate was never asked


def test_a_plain_function_carrying_attributes_runs_as_a_plain_function() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)

    @functools.wraps(_answer)  # copies __name__, __doc__... and sets __wrapped__
    def operation() -> str:
        return "answer"

    assert executor.execute("tool_call", operation) == "answer"
    (execution,) = executor.executions
    assert [a.outcome for a in execution.attempts] == [AttemptOutcome.SUCCEEDED]


def test_a_plain_function_returning_a_coroutine_is_still_refused_after_its_call() -> None:
    ctx = new_run()
    executor = HarnessRetryExecutor(ctx)
    ran: list[str] = []

    async def operation() -> str:
        ran.append("body")
        return "answer"

    def starts_it() -> Coroutine[Any, Any, str]:  # not a coroutine function; returns a coroutine
        return operation()

    untyped: Any = starts_it
    with pytest.raises(TypeError, match="use execute_async"):
        executor.execute("tool_call", untyped)
    assert ran == []
