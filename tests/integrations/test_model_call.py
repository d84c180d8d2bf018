"""One governed model call (``ModelCall``), as a user relies on it, driven by both loops.

Every case runs in the sync world (a worker thread and its relay: ``call``, ``open_stream``) and
in asyncio (``ctx.scope()``: ``call_async``, ``open_stream_async``) against a scripted provider,
and both must say the same: a refused reservation sends nothing, the usage is recorded once, a
stream cut by a cancellation records what it received, the timeout is cut to the time the run
has left, and a failure is classified by the retry policy.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pytest

from diagnosis_harness import (
    AttemptOutcome,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    FailureKind,
    HarnessRetryExecutor,
    RetryPolicy,
    RunCancelled,
    RunContext,
    RunState,
)
from diagnosis_harness.integrations import TokenUsage, UsageNotReported
from diagnosis_harness.integrations._governed import (
    GovernedCall,
    call,
    call_async,
    open_stream,
    open_stream_async,
)
from diagnosis_harness.integrations._model_call import Chat, ModelCall
from diagnosis_harness.testing import ManualClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

Flavour = Literal["sync", "async"]
FLAVOURS: list[Flavour] = ["sync", "async"]
NAME = "scripted chat"


class Flaky(Exception):
    """A provider failure the policy retries (a 5xx)."""


class Refused(Exception):
    """A provider failure the policy does not retry."""


def _classify(error: Exception) -> FailureKind | None:
    if isinstance(error, Flaky):
        return FailureKind.SERVER_ERROR
    if isinstance(error, Refused):
        return FailureKind.BUSINESS_REJECTION
    return None


def _run(clock: ManualClock | None = None, *, model_calls: int = 10) -> RunContext:
    limits = BudgetLimits(
        model_calls=model_calls,
        tool_calls=10,
        per_tool_calls=10,
        input_tokens=1_000,
        output_tokens=1_000,
        total_tokens=2_000,
        run_bytes=1 << 20,
    )
    return RunContext.create(
        session_id="s-1",
        run_id="r-1",
        limits=limits,
        timeout=30,
        clock=ManualClock() if clock is None else clock,
    )


def _model_call(ctx: RunContext, policy: str = "intent_router") -> ModelCall:
    return ModelCall(ctx, policy=policy, classifier=_classify)


@dataclass
class Answer:
    usage: TokenUsage | None


def _usage_of(answer: Answer) -> TokenUsage | None:
    return answer.usage


@dataclass
class Provider:
    """Scripted answers, one per request: an ``Answer`` to return or an exception to raise."""

    script: list[Answer | Exception]
    timeouts: list[object] = field(default_factory=list)  # each request's timeout=

    def answer(self, timeout: object) -> Answer:
        self.timeouts.append(timeout)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def _create(
    flavour: Flavour, model_call: ModelCall, provider: Provider, client_timeout: object = 600.0
) -> Answer:
    """One governed call, as the sync or the async client makes it."""
    if flavour == "sync":
        prepared = GovernedCall(model_call, provider.answer, client_timeout, NAME, Chat("m"))
        return call(prepared, _usage_of)

    async def send(timeout: object) -> Answer:
        return provider.answer(timeout)

    prepared = GovernedCall(model_call, send, client_timeout, NAME, Chat("m"))
    return asyncio.run(call_async(prepared, _usage_of))


def _journal(model_call: ModelCall) -> list[tuple[AttemptOutcome, FailureKind | None]]:
    return [(a.outcome, a.failure) for a in model_call.executor.attempts]


# -- the reservation --------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_refused_reservation_never_sends_the_request(flavour: Flavour) -> None:
    ctx = _run(model_calls=1)
    model_call = _model_call(ctx)
    provider = Provider([Answer(TokenUsage(7, 3)), Answer(TokenUsage(7, 3))])
    _create(flavour, model_call, provider)
    with pytest.raises(BudgetExhausted):
        _create(flavour, model_call, provider)
    assert len(provider.timeouts) == 1  # the second request was never sent
    assert ctx.budget.snapshot().model_calls == 1
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_usage_is_recorded_once(flavour: Flavour) -> None:
    ctx = _run()
    model_call = _model_call(ctx)
    answer = _create(flavour, model_call, Provider([Answer(TokenUsage(7, 3))]))
    assert answer.usage == TokenUsage(7, 3)
    snapshot = ctx.budget.snapshot()
    assert (snapshot.model_calls, snapshot.input_tokens, snapshot.output_tokens) == (1, 7, 3)
    assert _journal(model_call) == [(AttemptOutcome.SUCCEEDED, None)]


def test_a_second_record_on_one_reservation_is_an_error_and_counts_nothing() -> None:
    ctx = _run()
    reservation = _model_call(ctx).reserve(NAME)
    reservation.record(TokenUsage(7, 3))
    with pytest.raises(RuntimeError, match="recorded twice"):
        reservation.record(TokenUsage(7, 3))
    assert ctx.budget.snapshot().input_tokens == 7
    assert reservation.usage == TokenUsage(7, 3)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_answer_without_usage_is_not_retried(flavour: Flavour) -> None:
    ctx = _run()
    model_call = _model_call(ctx)
    provider = Provider([Answer(None), Answer(TokenUsage(7, 3))])
    with pytest.raises(UsageNotReported, match=f"{NAME}: the response reports no token usage"):
        _create(flavour, model_call, provider)
    assert len(provider.timeouts) == 1  # answered: asking again would spend twice
    assert _journal(model_call) == [(AttemptOutcome.FAILED, FailureKind.UNKNOWN)]


# -- the request under the run's deadline ----------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_timeout_is_cut_to_the_time_the_run_has_left(flavour: Flavour) -> None:
    clock = ManualClock()
    ctx = _run(clock)
    clock.advance(25)  # 5 s left of 30
    provider = Provider([Answer(TokenUsage(1, 1)), Answer(TokenUsage(1, 1))])
    _create(flavour, _model_call(ctx), provider, client_timeout=600.0)
    _create(flavour, _model_call(ctx), provider, client_timeout=2.0)
    assert provider.timeouts == [5.0, 2.0]


def test_a_timeout_with_parts_keeps_its_shape_each_part_cut() -> None:
    @dataclass(frozen=True)
    class Timeout:  # the shape of httpx's
        connect: float | None
        read: float | None
        write: float | None
        pool: float | None

    clock = ManualClock()
    ctx = _run(clock)
    clock.advance(20)
    cut = _model_call(ctx).timeout(Timeout(5.0, 600.0, None, 600.0))
    assert cut == Timeout(5.0, 10.0, 10.0, 10.0)
    assert ModelCall(ctx, policy="tool_call", request_timeout=3).timeout(None) == 3.0


# -- the failure classified by the policy ----------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_failure_is_classified_by_the_policy(flavour: Flavour) -> None:
    ctx = _run()
    model_call = _model_call(ctx)  # intent_router: 2 attempts for technical failures
    provider = Provider([Flaky("503"), Answer(TokenUsage(7, 3))])
    assert _create(flavour, model_call, provider).usage == TokenUsage(7, 3)
    provider = Provider([Refused("no"), Answer(TokenUsage(7, 3))])
    with pytest.raises(Refused):
        _create(flavour, model_call, provider)
    assert _journal(model_call) == [
        (AttemptOutcome.FAILED, FailureKind.SERVER_ERROR),
        (AttemptOutcome.SUCCEEDED, None),
        (AttemptOutcome.FAILED, FailureKind.BUSINESS_REJECTION),
    ]
    snapshot = ctx.budget.snapshot()
    assert (snapshot.model_calls, snapshot.input_tokens) == (3, 7)  # each attempt reserved one


def test_both_loops_journal_the_same_attempts() -> None:
    journals = []
    for flavour in FLAVOURS:
        ctx = _run()
        model_call = _model_call(ctx)
        script: list[Answer | Exception] = [Flaky("503"), Flaky("503"), Answer(TokenUsage(1, 1))]
        with pytest.raises(Flaky):
            _create(flavour, model_call, Provider(script))
        _create(flavour, model_call, Provider([Flaky("503"), Answer(TokenUsage(2, 2))]))
        journals.append((_journal(model_call), ctx.budget.snapshot()))
    assert journals[0] == journals[1]


# -- a stream: its usage at its end, also when cut ---------------------------------------------


@dataclass
class Chunk:
    usage: TokenUsage | None  # what the provider reported with it, cumulative


class _Meter:
    __slots__ = ("_final", "_usage")

    def __init__(self) -> None:
        self._usage: TokenUsage | None = None
        self._final = False

    def observe(self, chunk: Chunk) -> None:
        if chunk.usage is not None:
            self._usage = chunk.usage

    @property
    def final(self) -> bool:
        return self._final

    def usage(self) -> TokenUsage | None:
        return self._usage


class _SyncStream:
    """One chunk, then silence until closed (a provider keeping the stream open)."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[Chunk]:
        yield Chunk(TokenUsage(5, 0))  # the input tokens, reported first (as Anthropic does)
        self._closed.wait()

    def close(self) -> None:
        self._closed.set()


class _AsyncStream:
    def __init__(self) -> None:
        self._closed = asyncio.Event()

    async def _chunks(self) -> AsyncIterator[Chunk]:
        yield Chunk(TokenUsage(5, 0))
        await self._closed.wait()

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    async def close(self) -> None:
        self._closed.set()


def _cut_stream(flavour: Flavour, ctx: RunContext) -> Any:
    """Open a stream, read its first chunk, cancel the run, read on; the stream's usage."""
    model_call = _model_call(ctx)
    cancel = CancellationReason.CLIENT_DISCONNECTED
    if flavour == "sync":
        prepared = GovernedCall(model_call, lambda _t: _SyncStream(), 600.0, NAME, Chat("m"))
        stream = open_stream(prepared, _Meter)
        assert next(stream) == Chunk(TokenUsage(5, 0))
        ctx.cancellation.cancel(cancel)
        with pytest.raises(RunCancelled):
            next(stream)
        for worker in [t for t in threading.enumerate() if t.name == NAME]:
            worker.join()  # the worker records what the stream received, once it ends
        return stream.usage

    async def main() -> TokenUsage | None:
        async def send(_timeout: object) -> _AsyncStream:
            return _AsyncStream()

        prepared = GovernedCall(model_call, send, 600.0, NAME, Chat("m"))
        stream = await open_stream_async(prepared, _Meter)
        assert await anext(stream) == Chunk(TokenUsage(5, 0))
        ctx.cancellation.cancel(cancel)
        with pytest.raises(RunCancelled):
            await anext(stream)
        return stream.usage

    return asyncio.run(main())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_stream_cut_by_a_cancellation_records_what_it_received(flavour: Flavour) -> None:
    ctx = _run()
    assert _cut_stream(flavour, ctx) == TokenUsage(5, 0)
    snapshot = ctx.budget.snapshot()
    assert (snapshot.model_calls, snapshot.input_tokens, snapshot.output_tokens) == (1, 5, 0)
    assert ctx.lifecycle.state is RunState.CANCELLED


def test_a_stream_read_to_its_end_without_usage_records_what_it_knows_then_raises() -> None:
    ctx = _run()
    reservation = _model_call(ctx).reserve(NAME)
    meter = _Meter()
    meter.observe(Chunk(TokenUsage(5, 0)))
    with pytest.raises(UsageNotReported, match="the stream ended without token usage"):
        reservation.end_stream(meter, complete=True)
    assert ctx.budget.snapshot().input_tokens == 5
    with pytest.raises(RuntimeError, match="recorded twice"):
        reservation.end_stream(meter, complete=False)


# -- the arguments, checked once for every adapter ----------------------------------------------


def test_bad_arguments_are_refused_before_anything() -> None:
    ctx = _run()
    with pytest.raises(TypeError, match="ctx must be a RunContext"):
        ModelCall("ctx", policy="tool_call")  # type: ignore[arg-type]  # the refused case
    with pytest.raises(ValueError, match="policy must name one of the run's retry policies"):
        ModelCall(ctx, policy="router")
    with pytest.raises(KeyError, match="no retry policy named 'router'"):
        ModelCall(ctx, policy="router")  # as the governed clients always refused it
    with pytest.raises(TypeError, match="policy must be the name of one of"):
        ModelCall(ctx, policy=2)  # type: ignore[arg-type]  # the refused case
    with pytest.raises(ValueError, match="give executor or classifier, not both"):
        ModelCall(ctx, policy="tool_call", executor=HarnessRetryExecutor(ctx), classifier=_classify)
    with pytest.raises(TypeError, match="executor must be a HarnessRetryExecutor"):
        ModelCall(ctx, policy="tool_call", executor=object())  # type: ignore[arg-type]  # refused
    with pytest.raises(ValueError, match="request_timeout must be finite and > 0"):
        ModelCall(ctx, policy="tool_call", request_timeout=0)
    assert ModelCall(ctx, policy=RetryPolicy("mine", 1)).policy.name == "mine"
    assert ctx.budget.snapshot().model_calls == 0


def test_a_failed_attempt_spent_its_model_call_and_recorded_no_usage() -> None:
    ctx = _run()
    model_call = _model_call(ctx)
    with pytest.raises(Flaky), model_call.reserve(NAME) as reservation:
        raise Flaky("503")
    assert (reservation.settled, reservation.usage) == (False, None)
    snapshot = ctx.budget.snapshot()
    assert (snapshot.model_calls, snapshot.input_tokens) == (1, 0)
    reservation.record(TokenUsage(7, 3))  # a late answer (a sync worker's) still counts
    assert ctx.budget.snapshot().input_tokens == 7
