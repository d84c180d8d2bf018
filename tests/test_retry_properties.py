"""Properties of the retry executor against a reference model, for any policy and any script.

A script is what each invocation of the operation does: first, optionally, something that ends
the run while the attempt is in flight (cancel it, move a ManualClock past the deadline, spend the
Model-call budget), then its outcome (return a value, raise a typed or classified failure of any
kind -- never-retried ones included --, raise an unclassified error, be interrupted, or have the
run's own budget refuse it). The reference model below is written from the spec, not from the
executor; the generated python-statemachine model of ``model/retry.toml`` is the oracle of the
final state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import diagnosis_harness._retry as retry_module
from diagnosis_harness import (
    AttemptOutcome,
    Backoff,
    BudgetExhausted,
    CancellationReason,
    ExecutionRecord,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicy,
    RunCancelled,
    RunContext,
    RunState,
    RunTerminated,
    RunTimedOut,
    StopReason,
)
from diagnosis_harness._generated.models import RetryModel
from diagnosis_harness._generated.tables import RetryState
from strategies import limits, new_run

TECHNICAL = (
    FailureKind.TRANSPORT,
    FailureKind.TIMEOUT,
    FailureKind.RATE_LIMITED,
    FailureKind.SERVER_ERROR,
    FailureKind.MALFORMED_RESPONSE,
)
NEVER_RETRIED = tuple(kind for kind in FailureKind if kind not in TECHNICAL)
MAX_ATTEMPTS = 6
SCRIPT_LENGTH = MAX_ATTEMPTS + 1  # one more than any policy allows: over-invoking would show
DEADLINE_S = 30

# What an effect does to the run: the exception the next gate must raise.
ENDS_RUN: dict[str, type[RunTerminated]] = {
    "cancel": RunCancelled,
    "deadline": RunTimedOut,
    "budget": BudgetExhausted,
}
STATE: dict[type[RunTerminated], RunState] = {
    RunCancelled: RunState.CANCELLED,
    RunTimedOut: RunState.TIMED_OUT,
    BudgetExhausted: RunState.BUDGET_EXHAUSTED,
}
KIND_OF_END = {
    RunCancelled: FailureKind.CANCELLED,
    RunTimedOut: FailureKind.DEADLINE_EXCEEDED,
    BudgetExhausted: FailureKind.BUDGET_EXHAUSTED,
}
STATE_FOR_STOP = {
    StopReason.SUCCEEDED: RetryState.SUCCEEDED,
    StopReason.NOT_RETRYABLE: RetryState.FAILED,
    StopReason.ATTEMPTS_EXHAUSTED: RetryState.FAILED,
    StopReason.INTERRUPTED: RetryState.FAILED,
    StopReason.RUN_TERMINATED: RetryState.STOPPED,
}


class Interrupt(BaseException):
    """Not an ``Exception``: the executor must let it through at once, like Ctrl-C."""


class SdkError(Exception):
    """An SDK's own exception; only the classifier knows its kind."""

    def __init__(self, kind: FailureKind) -> None:
        super().__init__(kind.name)
        self.kind = kind


def classify(error: Exception) -> FailureKind | None:
    return error.kind if isinstance(error, SdkError) else None


@dataclass(frozen=True)
class Step:
    effect: str  # "none", or a key of ENDS_RUN: happens first, inside the attempt
    outcome: str  # "ok", "typed", "classified", "unknown", "interrupt", "refused"
    kind: FailureKind  # for "typed" and "classified"
    value: int  # for "ok"


any_step = st.builds(
    Step,
    effect=st.sampled_from(["none", *sorted(ENDS_RUN)]),
    outcome=st.sampled_from(["typed", "classified", "ok", "unknown", "interrupt", "refused"]),
    kind=st.sampled_from(TECHNICAL + NEVER_RETRIED),
    value=st.integers(0, 1_000),
)
technical_failure = st.builds(
    Step,
    effect=st.just("none"),
    outcome=st.sampled_from(["typed", "classified"]),
    kind=st.sampled_from(TECHNICAL),
    value=st.just(0),
)


@st.composite
def scripts(draw: st.DrawFn) -> list[Step]:
    """A run of technical failures of any length, then anything: so that retries go deep."""
    failures = draw(st.lists(technical_failure, max_size=SCRIPT_LENGTH))
    rest = draw(st.lists(any_step, min_size=SCRIPT_LENGTH, max_size=SCRIPT_LENGTH))
    return (failures + rest)[:SCRIPT_LENGTH]


policies = st.builds(
    RetryPolicy,
    name=st.just("under-test"),
    max_attempts=st.sampled_from(range(MAX_ATTEMPTS, 0, -1)),  # shrinks towards more attempts
    retryable=st.one_of(st.just(frozenset(TECHNICAL)), st.frozensets(st.sampled_from(TECHNICAL))),
)


@dataclass
class Expected:
    attempts: list[tuple[int, AttemptOutcome, FailureKind | None]] = field(default_factory=list)
    stop: StopReason | None = None
    value: int | None = None
    raised_by_step: int | None = None  # the 1-based step whose own exception is re-raised
    gate_error: type[RunTerminated] | None = None  # raised by the gate (RUN_TERMINATED)
    refused_error: type[RunTerminated] | None = None  # raised inside the operation ("refused")
    run_state: RunState = RunState.RUNNING
    retried: list[int] = field(default_factory=list)  # attempts after which the loop went on


def expect(policy: RetryPolicy, script: list[Step]) -> Expected:
    """The spec, executed by hand: gate, attempt, classify, retry only if listed and allowed."""
    out = Expected()
    over: type[RunTerminated] | None = None
    for number, step in enumerate(script, start=1):
        if over is not None:  # the gate before this attempt refuses it
            out.stop, out.gate_error, out.run_state = StopReason.RUN_TERMINATED, over, STATE[over]
            return out
        if step.effect != "none":
            over = ENDS_RUN[step.effect]
            if over is not RunTimedOut:  # a passed deadline is recorded when a gate reads it
                out.run_state = STATE[over]
        if step.outcome == "ok":
            out.attempts.append((number, AttemptOutcome.SUCCEEDED, None))
            out.stop, out.value = StopReason.SUCCEEDED, step.value
            return out
        if step.outcome == "interrupt":
            out.attempts.append((number, AttemptOutcome.INTERRUPTED, None))
            out.stop, out.raised_by_step = StopReason.INTERRUPTED, number
            return out
        if step.outcome == "refused":  # the run's own boundary inside the operation raises
            refused = BudgetExhausted if over is None else over
            out.attempts.append((number, AttemptOutcome.FAILED, KIND_OF_END[refused]))
            out.stop, out.refused_error, out.run_state = (
                StopReason.NOT_RETRYABLE,
                refused,
                STATE[refused],
            )
            return out
        kind = FailureKind.UNKNOWN if step.outcome == "unknown" else step.kind
        out.attempts.append((number, AttemptOutcome.FAILED, kind))
        if kind in policy.retryable and number < policy.max_attempts:
            out.retried.append(number)
            continue
        listed = kind in policy.retryable
        out.stop = StopReason.ATTEMPTS_EXHAUSTED if listed else StopReason.NOT_RETRYABLE
        out.raised_by_step = number
        return out
    raise AssertionError("the script is longer than any policy allows")


@dataclass
class Operation:
    """Plays the script against the run; remembers each invocation's clock span and error."""

    ctx: RunContext
    clock: ManualClock
    script: list[Step]
    spans: list[tuple[int, int]] = field(default_factory=list)
    errors: dict[int, BaseException] = field(default_factory=dict)

    def __call__(self, tag: str, *, flag: bool) -> int:
        assert (tag, flag) == ("args", True)  # every attempt gets the same arguments
        number = len(self.spans) + 1
        step = self.script[number - 1]
        started = self.clock.monotonic_ns()
        self.clock.advance_ns(number)  # each attempt takes a different, known time
        self._effect(step.effect)
        self.spans.append((started, self.clock.monotonic_ns()))
        error = self._error(step)
        if error is None:
            return step.value
        self.errors[number] = error
        raise error

    async def run_async(self, tag: str, *, flag: bool) -> int:
        await asyncio.sleep(0)
        return self(tag, flag=flag)

    def _effect(self, effect: str) -> None:
        if effect == "cancel":
            assert self.ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
        elif effect == "deadline":
            self.clock.advance(DEADLINE_S + 1)
        elif effect == "budget":
            while True:  # spend what is left of the Model-call budget, up to its refusal
                try:
                    self.ctx.reserve_model_call()
                except BudgetExhausted:
                    break

    def _error(self, step: Step) -> BaseException | None:
        if step.outcome == "ok":
            return None
        if step.outcome == "typed":
            return HarnessFailure(step.kind, "scripted")
        if step.outcome == "classified":
            return SdkError(step.kind)
        if step.outcome == "unknown":
            return RuntimeError("nobody classified this")
        if step.outcome == "interrupt":
            return Interrupt()
        try:  # "refused": the run's Model-call boundary, until it refuses
            while True:
                self.ctx.reserve_model_call()
        except RunTerminated as refused:
            return refused


@dataclass
class Pauses:
    calls: list[float] = field(default_factory=list)

    def sync(self, _ctx: RunContext, seconds: float) -> None:
        self.calls.append(seconds)

    async def async_(self, _ctx: RunContext, seconds: float) -> None:
        self.calls.append(seconds)


def _execute(
    mode: str, executor: HarnessRetryExecutor, policy: RetryPolicy, operation: Operation
) -> tuple[object, BaseException | None]:
    try:
        if mode == "sync":
            return executor.execute(policy, operation, "args", flag=True), None
        return asyncio.run(
            executor.execute_async(policy, operation.run_async, "args", flag=True)
        ), None
    except BaseException as error:  # Interrupt included: the property inspects it
        return None, error


def _replay_on_the_model(policy: RetryPolicy, record: ExecutionRecord) -> RetryState:
    """Drive the generated python-statemachine model with the events the record implies."""
    model = RetryModel()
    for attempt in record.attempts:
        model.fire("attempt")
        if attempt.outcome is AttemptOutcome.SUCCEEDED:
            model.fire("succeed")
        else:
            kind = attempt.failure
            allowed = kind is not None and policy.may_retry(kind, attempt.number)
            model.fire("fail", retry_allowed=allowed)
    if record.stop is StopReason.RUN_TERMINATED:
        model.fire("stop")
    return model.model_state


@pytest.mark.parametrize("mode", ["sync", "async"])
@given(policy=policies, script=scripts(), initial=st.sampled_from([0.0, 0.25]))
def test_executor_agrees_with_the_reference_model(
    mode: str, policy: RetryPolicy, script: list[Step], initial: float
) -> None:
    clock = ManualClock(5_000)
    ctx = new_run(clock=clock, timeout=DEADLINE_S, budget=limits(model_calls=3))
    operation = Operation(ctx, clock, script)
    backoff = Backoff(initial=initial, multiplier=2, maximum=1)
    executor = HarnessRetryExecutor(ctx, classifier=classify, backoff=backoff)
    pauses = Pauses()
    with (
        mock.patch.object(retry_module, "pause", pauses.sync),
        mock.patch.object(retry_module, "pause_async", pauses.async_),
    ):
        result, raised = _execute(mode, executor, policy, operation)
    expected = expect(policy, script)
    event(f"stop: {expected.stop}")
    event(f"attempts: {len(expected.attempts)}")

    # One record per actual invocation, never more than the policy allows, numbered from 1.
    (record,) = executor.executions
    invocations = len(operation.spans)
    assert invocations == len(record.attempts) == len(executor.attempts)
    assert invocations <= policy.max_attempts
    assert [(a.number, a.outcome, a.failure) for a in record.attempts] == expected.attempts
    assert [(a.started_ns, a.ended_ns) for a in record.attempts] == operation.spans
    assert {a.policy for a in record.attempts} <= {"under-test"}

    # Why it stopped, and the machine's final state, as the spec and the generated model say.
    assert record.stop is expected.stop
    assert record.state is STATE_FOR_STOP[record.stop]
    assert record.state is _replay_on_the_model(policy, record)
    assert ctx.lifecycle.state is expected.run_state

    # The first success's result, or the right exception carrying the history.
    if expected.stop is StopReason.SUCCEEDED:
        assert raised is None
        assert result == expected.value
        assert record.termination is None
    else:
        assert raised is not None
        assert raised.harness_execution == record  # type: ignore[attr-defined]
        if expected.raised_by_step is not None:
            assert raised is operation.errors[expected.raised_by_step]
        if expected.refused_error is not None:
            assert type(raised) is expected.refused_error
            assert raised is operation.errors[invocations]
        if expected.gate_error is not None:
            assert type(raised) is expected.gate_error
            assert isinstance(raised, RunTerminated)
            assert raised.termination is ctx.lifecycle.termination
            assert record.termination is ctx.lifecycle.termination
        else:
            assert record.termination is None

    # A wait happens between attempts only, and only for a positive delay.
    assert pauses.calls == [backoff.delay(n) for n in expected.retried if backoff.delay(n) > 0]
    if initial == 0:
        assert pauses.calls == []


@given(policy=policies, script=scripts())
def test_sync_and_async_executions_record_the_same_history(
    policy: RetryPolicy, script: list[Step]
) -> None:
    histories: list[tuple[Any, ...]] = []
    for mode in ("sync", "async"):
        clock = ManualClock(0)
        ctx = new_run(clock=clock, timeout=DEADLINE_S, budget=limits(model_calls=3))
        executor = HarnessRetryExecutor(ctx, classifier=classify)
        _, raised = _execute(mode, executor, policy, Operation(ctx, clock, script))
        (record,) = executor.executions
        histories.append((record, type(raised), ctx.lifecycle.state))
    assert histories[0] == histories[1]
