"""Governed openai and anthropic calls, sync and async, against the real SDKs over real HTTP.

The loopback provider counts the requests it receives; every test compares that count with the
attempts the executor recorded and the Model calls the run reserved: no hidden retry, and no
request the run did not pay for.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
import openai
import pytest

from diagnosis_harness import (
    AttemptOutcome,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    FailureKind,
    HarnessRetryExecutor,
    RunCancelled,
    RunContext,
    RunState,
    RunTimedOut,
)
from diagnosis_harness.integrations import (
    AsyncGovernedAnthropic,
    AsyncGovernedOpenAI,
    GovernedAnthropic,
    GovernedOpenAI,
    UsageNotReported,
    classify_sdk,
)
from diagnosis_harness.testing import ManualClock
from racing import BOUND, race

from .loopback import ANSWER, ANTHROPIC_PATH, OPENAI_PATH, LoopbackServer, Reply, SeenRequest

if TYPE_CHECKING:
    from collections.abc import Callable

KEY = "test-key-not-a-secret"
QUESTION = "why is checkout down?"


def _limits(**changes: int) -> BudgetLimits:
    values: dict[str, Any] = {
        "model_calls": 10,
        "tool_calls": 10,
        "per_tool_calls": 10,
        "input_tokens": 1_000,
        "output_tokens": 1_000,
        "total_tokens": 2_000,
        "run_bytes": 1 << 20,
    }
    values.update(changes)
    return BudgetLimits(**values)


def _run(clock: ManualClock | None = None, timeout: float = 30, **limits: int) -> RunContext:
    return RunContext.create(
        session_id="s-1",
        run_id="r-1",
        limits=_limits(**limits),
        timeout=timeout,
        clock=ManualClock() if clock is None else clock,
    )


# -- one governed call, in each of the four flavours ---------------------------------------------


@dataclass(frozen=True)
class Flavour:
    """One SDK in one world: ``ask`` makes one governed call on a fresh client, returns the text."""

    name: str
    path: str
    ask: Callable[..., str]
    ask_stream: Callable[..., str]


def _openai_text(completion: Any) -> str:
    return str(completion.choices[0].message.content or "")


def _anthropic_text(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def _openai_chunks_text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _anthropic_events_text(events: list[Any]) -> str:
    return "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )


OPENAI_PARAMS: dict[str, Any] = {
    "model": "gpt-test",
    "messages": [{"role": "user", "content": QUESTION}],
}
ANTHROPIC_PARAMS: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": QUESTION}],
}


def _sync_openai(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    with openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0) as client:
        return _openai_text(GovernedOpenAI(client, ctx, **kw).create(**OPENAI_PARAMS))


def _sync_openai_stream(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    with openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0) as client:
        return _openai_chunks_text(list(GovernedOpenAI(client, ctx, **kw).stream(**OPENAI_PARAMS)))


def _async_openai(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    async def ask() -> str:
        async with openai.AsyncOpenAI(
            api_key=KEY, base_url=server.openai_url, max_retries=0
        ) as client:
            completion = await AsyncGovernedOpenAI(client, ctx, **kw).create(**OPENAI_PARAMS)
            return _openai_text(completion)

    return asyncio.run(ask())


def _async_openai_stream(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    async def ask() -> str:
        async with openai.AsyncOpenAI(
            api_key=KEY, base_url=server.openai_url, max_retries=0
        ) as client:
            stream = await AsyncGovernedOpenAI(client, ctx, **kw).stream(**OPENAI_PARAMS)
            return _openai_chunks_text([chunk async for chunk in stream])

    return asyncio.run(ask())


def _sync_anthropic(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    with anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0) as client:
        return _anthropic_text(GovernedAnthropic(client, ctx, **kw).create(**ANTHROPIC_PARAMS))


def _sync_anthropic_stream(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    with anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0) as client:
        events = list(GovernedAnthropic(client, ctx, **kw).stream(**ANTHROPIC_PARAMS))
        return _anthropic_events_text(events)


def _async_anthropic(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    async def ask() -> str:
        async with anthropic.AsyncAnthropic(
            api_key=KEY, base_url=server.url, max_retries=0
        ) as client:
            message = await AsyncGovernedAnthropic(client, ctx, **kw).create(**ANTHROPIC_PARAMS)
            return _anthropic_text(message)

    return asyncio.run(ask())


def _async_anthropic_stream(server: LoopbackServer, ctx: RunContext, **kw: Any) -> str:
    async def ask() -> str:
        async with anthropic.AsyncAnthropic(
            api_key=KEY, base_url=server.url, max_retries=0
        ) as client:
            stream = await AsyncGovernedAnthropic(client, ctx, **kw).stream(**ANTHROPIC_PARAMS)
            return _anthropic_events_text([event async for event in stream])

    return asyncio.run(ask())


FLAVOURS = [
    Flavour("openai", OPENAI_PATH, _sync_openai, _sync_openai_stream),
    Flavour("async-openai", OPENAI_PATH, _async_openai, _async_openai_stream),
    Flavour("anthropic", ANTHROPIC_PATH, _sync_anthropic, _sync_anthropic_stream),
    Flavour("async-anthropic", ANTHROPIC_PATH, _async_anthropic, _async_anthropic_stream),
]
flavours = pytest.mark.parametrize("flavour", FLAVOURS, ids=[f.name for f in FLAVOURS])


def _journal(executor: HarnessRetryExecutor) -> list[tuple[AttemptOutcome, FailureKind | None]]:
    return [(a.outcome, a.failure) for a in executor.attempts]


SUCCEEDED = (AttemptOutcome.SUCCEEDED, None)


# -- success, retries, budgets -------------------------------------------------------------------


@flavours
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_a_call_records_its_usage_and_one_attempt(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(input_tokens=120, output_tokens=8))
    ask = flavour.ask_stream if streamed else flavour.ask
    assert ask(loopback, ctx, policy="diagnosis_agent", executor=executor) == ANSWER
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (1, 120, 8)
    assert loopback.count == 1
    assert _journal(executor) == [SUCCEEDED]
    (seen,) = loopback.requests
    assert seen.path == flavour.path
    assert seen.streamed is streamed
    if streamed and flavour.path == OPENAI_PATH:
        assert seen.body["stream_options"] == {"include_usage": True}
    assert ctx.lifecycle.state is RunState.RUNNING


@flavours
def test_a_500_then_success_is_two_requests_two_attempts_two_model_calls(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(status=500), Reply(input_tokens=30, output_tokens=4))
    assert flavour.ask(loopback, ctx, policy="intent_router", executor=executor) == ANSWER
    assert loopback.count == 2
    assert _journal(executor) == [(AttemptOutcome.FAILED, FailureKind.SERVER_ERROR), SUCCEEDED]
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (2, 30, 4)
    # each request was the SDK's first try: the retry was the executor's
    assert [seen.headers.get("x-stainless-retry-count") for seen in loopback.requests] == ["0", "0"]


@flavours
def test_a_stream_that_fails_to_open_is_retried_like_a_call(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(status=429, retry_after=0.001), Reply(input_tokens=9, output_tokens=2))
    assert flavour.ask_stream(loopback, ctx, policy="intent_router", executor=executor) == ANSWER
    assert loopback.count == 2
    assert _journal(executor) == [(AttemptOutcome.FAILED, FailureKind.RATE_LIMITED), SUCCEEDED]
    assert ctx.budget.snapshot().model_calls == 2


@flavours
def test_a_policy_of_one_attempt_sends_a_500_once(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(status=500))
    with pytest.raises((openai.InternalServerError, anthropic.InternalServerError)):
        flavour.ask(loopback, ctx, policy="diagnosis_agent", executor=executor)
    assert loopback.count == 1
    assert _journal(executor) == [(AttemptOutcome.FAILED, FailureKind.SERVER_ERROR)]
    assert ctx.budget.snapshot().model_calls == 1
    assert ctx.lifecycle.state is RunState.RUNNING  # a failed call does not end the run


@flavours
def test_no_model_call_left_sends_nothing_and_ends_the_run(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    ctx = _run(model_calls=1)
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    assert flavour.ask(loopback, ctx, policy="intent_router", executor=executor) == ANSWER
    with pytest.raises(BudgetExhausted) as refused:
        flavour.ask(loopback, ctx, policy="intent_router", executor=executor)
    assert loopback.count == 1
    assert refused.value.termination.state is RunState.BUDGET_EXHAUSTED
    assert ctx.budget.exhausted is BudgetDimension.MODEL_CALLS
    assert _journal(executor) == [SUCCEEDED, (AttemptOutcome.FAILED, FailureKind.BUDGET_EXHAUSTED)]


@flavours
def test_a_retry_reserves_again_and_is_refused_when_no_model_call_is_left(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    ctx = _run(model_calls=1)
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(status=500))
    with pytest.raises(BudgetExhausted):
        flavour.ask(loopback, ctx, policy="intent_router", executor=executor)
    assert loopback.count == 1  # the retry was refused before it was sent
    assert _journal(executor) == [
        (AttemptOutcome.FAILED, FailureKind.SERVER_ERROR),
        (AttemptOutcome.FAILED, FailureKind.BUDGET_EXHAUSTED),
    ]
    assert ctx.budget.snapshot().model_calls == 1
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


@flavours
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_usage_past_the_token_limit_is_recorded_and_the_next_call_refused(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool
) -> None:
    ctx = _run(total_tokens=20)
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(input_tokens=15, output_tokens=10))
    ask = flavour.ask_stream if streamed else flavour.ask
    assert ask(loopback, ctx, policy="diagnosis_agent", executor=executor) == ANSWER
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (15, 10, 25)
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    assert ctx.budget.exhausted is BudgetDimension.TOTAL_TOKENS
    with pytest.raises(BudgetExhausted):
        ask(loopback, ctx, policy="diagnosis_agent", executor=executor)
    assert loopback.count == 1
    assert ctx.budget.snapshot().model_calls == 1


@flavours
def test_an_ended_run_sends_nothing(loopback: LoopbackServer, flavour: Flavour) -> None:
    ctx = _run()
    ctx.lifecycle.succeed()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    with pytest.raises(Exception, match="SUCCESS"):
        flavour.ask(loopback, ctx, policy="intent_router", executor=executor)
    assert loopback.count == 0
    assert ctx.budget.snapshot().model_calls == 0
    assert executor.attempts == ()  # the gate refused before the first attempt


# -- the deadline and cancellation -----------------------------------------------------------------


@flavours
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_a_stall_past_the_deadline_is_cut_by_the_request_timeout(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool
) -> None:
    """The run's clock has 0.5 s left, so the request's timeout is 0.5 s, not the client's 600.

    The provider takes 5 s on the run's clock (the hook advances it as the request arrives) and
    never answers; the request is cut by its timeout, and the run ends TIMED_OUT -- not retried
    under a policy that retries timeouts, because the gate finds the deadline passed.
    """
    clock = ManualClock()
    ctx = _run(clock, timeout=0.5)  # real seconds for the cut timeout: room for a loaded machine
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)

    def provider_takes_5_seconds(_seen: SeenRequest) -> None:
        clock.advance(5)

    loopback.on_request = provider_takes_5_seconds
    loopback.script(Reply(stall=threading.Event()))
    ask = flavour.ask_stream if streamed else flavour.ask
    with pytest.raises(RunTimedOut):
        ask(loopback, ctx, policy="intent_router", executor=executor)
    assert ctx.lifecycle.state is RunState.TIMED_OUT
    assert loopback.count == 1
    assert _journal(executor) == [(AttemptOutcome.FAILED, FailureKind.DEADLINE_EXCEEDED)]
    assert ctx.budget.snapshot().model_calls == 1


@flavours
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_a_failure_after_the_deadline_passed_raises_the_runs_ending(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool
) -> None:
    """The provider answers 500, but by then the run's clock has passed the deadline (the hook
    advances it as the request arrives): the call raises ``RunTimedOut``, not the SDK's error --
    under a policy of one attempt, so no retry's gate decides it instead."""
    clock = ManualClock()
    ctx = _run(clock)
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)

    def the_deadline_passes(_seen: SeenRequest) -> None:
        clock.advance(60)

    loopback.on_request = the_deadline_passes
    loopback.script(Reply(status=500))
    ask = flavour.ask_stream if streamed else flavour.ask
    with pytest.raises(RunTimedOut):
        ask(loopback, ctx, policy="diagnosis_agent", executor=executor)
    assert ctx.lifecycle.state is RunState.TIMED_OUT
    assert loopback.count == 1
    assert ctx.budget.snapshot().model_calls == 1


def _cancel_when_stalled(server: LoopbackServer, ctx: RunContext) -> threading.Thread:
    def cancel() -> None:
        server.wait_for_stalled(1)
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    canceller = threading.Thread(target=cancel, name="canceller")
    canceller.start()
    return canceller


@flavours
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("round_", range(3))
def test_a_cancel_from_another_thread_stops_a_stalled_request(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool, round_: int
) -> None:
    """The provider holds its answer until the test ends; the cancel must not wait for it."""
    ctx = _run(timeout=600)
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    stall = threading.Event()
    # a streamed answer stalls after its first events, a JSON one before its status line
    loopback.script(Reply(stall=stall, stall_after_events=2 if streamed else None))
    canceller = _cancel_when_stalled(loopback, ctx)
    ask = flavour.ask_stream if streamed else flavour.ask
    with pytest.raises(RunCancelled):
        ask(loopback, ctx, policy="intent_router", executor=executor)
    canceller.join()
    assert not stall.is_set()  # the answer never came: the cancel alone ended the call
    assert ctx.lifecycle.state is RunState.CANCELLED
    assert loopback.count == 1
    assert ctx.budget.snapshot().model_calls == 1
    assert len(executor.attempts) == 1
    if not streamed:  # a stream's attempt (opening it) had succeeded before the stall
        assert _journal(executor) == [(AttemptOutcome.FAILED, FailureKind.CANCELLED)]


# -- streams without usage -------------------------------------------------------------------------


@flavours
def test_a_stream_without_usage_delivers_its_chunks_then_says_so(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(usage=False))
    with pytest.raises(UsageNotReported, match="without token usage"):
        flavour.ask_stream(loopback, ctx, policy="diagnosis_agent", executor=executor)
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (1, 0, 0)
    assert loopback.count == 1
    assert _journal(executor) == [SUCCEEDED]


@flavours
def test_a_response_without_usage_is_not_retried(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(usage=False))
    with pytest.raises(UsageNotReported, match="reports no token usage") as missing:
        flavour.ask(loopback, ctx, policy="intent_router", executor=executor)
    assert missing.value.response is not None  # the answer is kept on the error
    assert loopback.count == 1
    assert _journal(executor) == [(AttemptOutcome.FAILED, FailureKind.UNKNOWN)]


def test_a_sync_stream_closed_early_stops_reading(loopback: LoopbackServer) -> None:
    ctx = _run()
    loopback.script(Reply(input_tokens=40, output_tokens=9, chunks=5))
    with openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client:
        governed = GovernedOpenAI(client, ctx, policy="diagnosis_agent")
        with governed.stream(**OPENAI_PARAMS) as stream:
            first = next(stream)
        assert first.choices[0].delta.role == "assistant"
        assert list(stream) == []  # closed: nothing more, and no wait
    assert governed.executor.attempts[0].outcome is AttemptOutcome.SUCCEEDED
    assert loopback.count == 1


def test_a_stream_whose_own_usage_ends_the_run_still_delivers_every_chunk(
    loopback: LoopbackServer,
) -> None:
    """The worker records the usage while the reader is still on its first chunk."""
    ctx = _run(total_tokens=20)
    loopback.script(Reply(input_tokens=15, output_tokens=10, chunks=4))
    with openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client:
        stream = GovernedOpenAI(client, ctx, policy="diagnosis_agent").stream(**OPENAI_PARAMS)
        first = next(stream)
        assert ctx.cancellation.wait(timeout=10)  # the run ended: the usage is recorded
        rest = list(stream)
    assert _openai_chunks_text([first, *rest]) == ANSWER
    assert stream.usage is not None
    assert stream.usage.total_tokens == 25
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


# -- bad input: a clear error, and nothing sent or reserved ----------------------------------------


def _bad_inputs(
    server: LoopbackServer, ctx: RunContext, clients: ExitStack
) -> list[tuple[Callable[[], object], str]]:
    sync_openai = clients.enter_context(
        openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0)
    )
    async_openai = openai.AsyncOpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0)
    retrying = clients.enter_context(openai.OpenAI(api_key=KEY, base_url=server.openai_url))
    sync_anthropic = clients.enter_context(
        anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)
    )
    governed = GovernedOpenAI(sync_openai, ctx, policy="intent_router")
    params = OPENAI_PARAMS
    no_model = {"messages": params["messages"]}
    return [
        (
            lambda: GovernedOpenAI(async_openai, ctx, policy="intent_router"),  # type: ignore[arg-type]
            "client must be an openai.OpenAI (an openai.AsyncOpenAI goes to AsyncGovernedOpenAI)",
        ),
        (
            lambda: AsyncGovernedOpenAI(sync_openai, ctx, policy="intent_router"),  # type: ignore[arg-type]
            "client must be an openai.AsyncOpenAI (an openai.OpenAI goes to GovernedOpenAI)",
        ),
        (
            lambda: GovernedAnthropic(sync_openai, ctx, policy="intent_router"),  # type: ignore[arg-type]
            "client must be an anthropic.Anthropic, got",
        ),
        (lambda: GovernedOpenAI(retrying, ctx, policy="intent_router"), "OpenAI has max_retries=2"),
        (
            lambda: GovernedAnthropic(
                sync_anthropic.with_options(max_retries=1), ctx, policy="tool_call"
            ),
            "Anthropic has max_retries=1",
        ),
        (
            lambda: GovernedOpenAI(sync_openai, "ctx", policy="intent_router"),  # type: ignore[arg-type]
            "ctx must be a RunContext",
        ),
        (
            lambda: GovernedOpenAI(sync_openai, ctx, policy="router"),
            "no retry policy named 'router'",
        ),
        (
            lambda: GovernedOpenAI(sync_openai, ctx, policy=2),  # type: ignore[arg-type]
            "policy must be the name of one of the run's retry policies",
        ),
        (
            lambda: GovernedOpenAI(sync_openai, ctx, policy="tool_call", request_timeout=0),
            "request_timeout must be finite and > 0",
        ),
        (
            lambda: GovernedOpenAI(sync_openai, ctx, policy="tool_call", executor=object()),  # type: ignore[arg-type]
            "executor must be a HarnessRetryExecutor",
        ),
        (lambda: governed.create(**params, stream=True), "create() does not take stream"),
        (lambda: governed.create(**params, timeout=5), "create() does not take timeout"),
        (
            lambda: governed.create(**no_model),
            "create() is missing required parameter(s): model",
        ),
        (
            lambda: governed.stream(**params, stream_options={"include_usage": False}),
            "stream_options.include_usage must be True",
        ),
    ]


def test_bad_input_is_a_clear_error_and_sends_nothing(loopback: LoopbackServer) -> None:
    ctx = _run()
    with ExitStack() as clients:
        for attempt, message in _bad_inputs(loopback, ctx, clients):
            with pytest.raises((TypeError, ValueError, KeyError), match=re.escape(message)):
                attempt()
    assert loopback.count == 0
    assert ctx.budget.snapshot().model_calls == 0
    assert ctx.lifecycle.state is RunState.RUNNING


# -- a cancellation racing the answer -------------------------------------------------------------


def _race_cancel_with_answer(loopback: LoopbackServer, flavour: Flavour) -> bool:
    """One round; True if the answer won. The cancel starts as the request reaches the server."""
    ctx = _run(total_tokens=20)
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    arrived = threading.Event()
    loopback.on_request = lambda _seen: arrived.set()
    results: list[object] = []

    def ask() -> None:
        try:
            results.append(flavour.ask(loopback, ctx, policy="tool_call", executor=executor))
        except RunCancelled as error:
            results.append(error)

    def cancel() -> None:
        assert arrived.wait(BOUND)
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    race([ask, cancel])
    usage = ctx.budget.snapshot()
    assert usage.model_calls == len(executor.attempts) == 1
    if results == [ANSWER]:
        assert (usage.input_tokens, usage.output_tokens) == (15, 10)
        assert _journal(executor) == [SUCCEEDED]
    else:
        assert isinstance(results[0], RunCancelled)
        assert _journal(executor) == [(AttemptOutcome.FAILED, FailureKind.CANCELLED)]
    assert ctx.lifecycle.state in (RunState.CANCELLED, RunState.BUDGET_EXHAUSTED)
    return results == [ANSWER]


@pytest.mark.usefixtures("eager_thread_switching")
@pytest.mark.parametrize("flavour", FLAVOURS[::2], ids=[f.name for f in FLAVOURS[::2]])
def test_a_cancel_racing_the_answer_never_loses_the_usage_of_an_answer(
    loopback: LoopbackServer, flavour: Flavour
) -> None:
    """A cancel released as the request reaches the provider, racing its answer, 12 rounds.

    The answer's usage ends the run too (the token limit). Whoever wins, a returned answer has
    its usage recorded already, a cancelled call has its CANCELLED record, each round is one
    request, one attempt and one Model call, and the run has one ending.
    """
    loopback.default = Reply(input_tokens=15, output_tokens=10)
    winners = Counter(_race_cancel_with_answer(loopback, flavour) for _ in range(12))
    assert sum(winners.values()) == 12
    assert loopback.count == 12


# -- the request's timeout -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "request_timeout", "expected"),
    [
        # the SDK's default Timeout(600, connect=5), each part cut to what the run has left
        (30.0, None, {"connect": 5.0, "read": 30.0, "write": 30.0, "pool": 30.0}),
        (2.0, None, {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}),
        # request_timeout replaces the client's, and is cut all the same
        (30.0, 7.0, {"connect": 7.0, "read": 7.0, "write": 7.0, "pool": 7.0}),
        (2.0, 7.0, {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}),
    ],
)
def test_each_request_carries_a_timeout_cut_to_the_deadline(
    loopback: LoopbackServer, left: float, request_timeout: float | None, expected: object
) -> None:
    clock = ManualClock()
    ctx = _run(clock, timeout=left + 10)
    clock.advance(10)  # the run has `left` seconds left on its own clock
    sent: list[object] = []

    def seen(request: httpx2.Request) -> None:
        sent.append(request.extensions["timeout"])

    with (
        httpx2.Client(event_hooks={"request": [seen]}) as http,
        openai.OpenAI(
            api_key=KEY, base_url=loopback.openai_url, max_retries=0, http_client=http
        ) as client,
    ):
        governed = GovernedOpenAI(client, ctx, policy="tool_call", request_timeout=request_timeout)
        governed.create(**OPENAI_PARAMS)
        list(governed.stream(**OPENAI_PARAMS))
    assert sent == [expected, expected]
    assert loopback.count == 2


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_anthropic_prompt_cache_reads_count_as_input_tokens(
    loopback: LoopbackServer, streamed: bool
) -> None:
    """Anthropic reports cache reads apart from input_tokens; the run's input budget counts both."""
    ctx = _run()
    loopback.script(Reply(input_tokens=20, cache_read_tokens=300, output_tokens=6))
    ask = _sync_anthropic_stream if streamed else _sync_anthropic
    assert ask(loopback, ctx, policy="tool_call") == ANSWER
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens) == (320, 6)
