"""``HarnessCapability``: a real pydantic-ai agent governed by a run.

Driven offline by pydantic-ai's own ``FunctionModel`` and ``TestModel``, with real asyncio tasks and
the worker threads pydantic-ai runs sync tools in; its OpenAI model talks over real HTTP to the
shared loopback provider (``loopback.py``), which counts the requests it received. No sleep: a
stalled model request waits on an event nobody sets, and every scenario is bounded by
``asyncio.wait_for(..., BOUND)``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import openai
import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")

from pydantic_ai import Agent, Tool
from pydantic_ai import RunContext as AgentRunContext
from pydantic_ai.capabilities import ModelFallback
from pydantic_ai.exceptions import ModelHTTPError, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RequestUsage, UsageLimits

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    FailureKind,
    HarnessFailure,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunCancelled,
    RunContext,
    RunFinished,
    RunState,
    RunTimedOut,
    UnsafeKeySegment,
)
from diagnosis_harness.integrations import ModelClientConfig, async_openai_client
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability, tool_result_bytes
from racing import BOUND, race

from .loopback import LoopbackServer, Reply, ToolCall

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from pydantic_ai.models import Model

    from diagnosis_harness import Clock

ROUNDS = 30  # the parallel-call races repeat this often: a lost update shows within a few


def _run(clock: Clock | None = None, timeout: float = 60, **overrides: object) -> RunContext:
    values: dict[str, object] = {
        "model_calls": 20,
        "tool_calls": 50,
        "per_tool_calls": 50,
        "input_tokens": 100_000,
        "output_tokens": 100_000,
        "total_tokens": 200_000,
        "run_bytes": 100_000,
        **overrides,
    }
    policies = RetryPolicies(
        [
            *RetryPolicies.defaults().values(),
            RetryPolicy("flaky_tool", 3, frozenset({FailureKind.TIMEOUT})),
        ]
    )
    return RunContext.create(
        session_id="s-1",
        run_id="run-7",
        limits=BudgetLimits(**values),  # type: ignore[arg-type]  # BudgetLimits' own keywords
        timeout=timeout,
        clock=clock or ManualClock(),
        retry_policies=policies,
    )


def _answer_once(*parts: TextPart | ToolCallPart, final: str = "diagnosed") -> FunctionModel:
    """A model that answers ``parts`` to the prompt, then ``final`` to anything after it."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=list(parts), usage=RequestUsage(input_tokens=5, output_tokens=7)
            )
        return ModelResponse(
            parts=[TextPart(final)], usage=RequestUsage(input_tokens=11, output_tokens=13)
        )

    return FunctionModel(respond)


def _calls(tool: str, n: int, prefix: str = "call_") -> list[ToolCallPart]:
    return [ToolCallPart(tool, {"q": str(i)}, tool_call_id=f"{prefix}{i}") for i in range(n)]


def _bounded(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, BOUND)

    return asyncio.run(bounded())


def _logs_agent(model: Model, ran: list[str], **agent: Any) -> Agent[None, str]:
    built: Agent[None, str] = Agent(model, **agent)

    @built.tool_plain
    def logs(q: str) -> str:
        ran.append(q)
        return "ok"

    return built


# -- 16 parallel calls under a limit of 9 ---------------------------------------------------------


def test_pydantic_ais_own_tool_calls_limit_refuses_the_whole_answer() -> None:
    """The baseline, measured here: ``UsageLimits(tool_calls_limit=9)`` runs none of the 16."""
    ran: list[str] = []
    agent = _logs_agent(_answer_once(*_calls("logs", 16)), ran)
    with pytest.raises(UsageLimitExceeded, match="tool_calls_limit of 9"):
        _bounded(agent.run("why is checkout slow?", usage_limits=UsageLimits(tool_calls_limit=9)))
    assert ran == []


@pytest.mark.parametrize("where", ["agent", "run"])
def test_sixteen_parallel_calls_under_a_limit_of_nine_run_exactly_nine(where: str) -> None:
    """The capability runs the 9 that fit, the other 7 never start, and ``agent.run`` raises the
    harness's own ``BudgetExhausted`` with the run's termination -- every round."""
    for _ in range(ROUNDS):
        ctx = _run(tool_calls=9)
        capability = HarnessCapability(ctx)
        ran: list[str] = []
        on_agent = [capability] if where == "agent" else []
        agent = _logs_agent(_answer_once(*_calls("logs", 16)), ran, capabilities=on_agent)
        on_run = [capability] if where == "run" else None
        with pytest.raises(BudgetExhausted) as ended:
            _bounded(agent.run("why is checkout slow?", capabilities=on_run))
        assert len(ran) == 9
        assert ended.value.termination is ctx.lifecycle.termination
        assert ended.value.dimension is BudgetDimension.TOOL_CALLS
        usage = ctx.budget.snapshot()
        assert (usage.model_calls, usage.tool_calls) == (1, 9)
        assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


def _async_tools_round() -> tuple[RunContext, list[str]]:
    ctx = _run(tool_calls=9)
    ran: list[str] = []
    agent = Agent(_answer_once(*_calls("metrics", 16)), capabilities=[HarnessCapability(ctx)])

    @agent.tool_plain
    async def metrics(q: str) -> str:
        await asyncio.sleep(0)  # every call yields to its siblings mid-flight
        ran.append(q)
        return "p99 840ms"

    with pytest.raises(BudgetExhausted):
        _bounded(agent.run("why is checkout slow?"))
    return ctx, ran


def test_async_tools_racing_for_the_last_calls_run_exactly_as_many_as_fit() -> None:
    for _ in range(ROUNDS):
        ctx, ran = _async_tools_round()
        assert len(ran) == 9
        assert ctx.budget.snapshot().tool_calls == 9


def _sub_agents_round() -> tuple[RunContext, list[str], list[BaseException]]:
    ctx = _run(tool_calls=9)
    ran: list[str] = []
    outcomes: list[BaseException] = []

    def sub_agent(name: str) -> None:
        agent = _logs_agent(_answer_once(*_calls("logs", 8, prefix=f"{name}_")), ran)
        try:
            capability = HarnessCapability(ctx, finishes_run=False)
            _bounded(agent.run("look", capabilities=[capability]))
        except BudgetExhausted as ended:
            outcomes.append(ended)

    race([lambda: sub_agent("a"), lambda: sub_agent("b")])
    return ctx, ran, outcomes


def test_parallel_sub_agents_sharing_a_run_never_overshoot_its_limit() -> None:
    """Two sub-agents in two threads, 8 parallel calls each, one run's limit of 9: exactly 9 run
    (pydantic-ai's own per-agent limits let such sub-agents reach 16). Neither decides the run's
    outcome (``finishes_run=False``): one may finish before the other starts."""
    for _ in range(ROUNDS):
        ctx, ran, outcomes = _sub_agents_round()
        assert len(ran) == 9
        assert outcomes  # the sub-agent refused raised the run's BudgetExhausted
        assert ctx.budget.snapshot().tool_calls == 9
        assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED


# -- per-tool and model-call limits, usage ---------------------------------------------------


def test_a_per_tool_limit_stops_that_tool_at_its_limit() -> None:
    """``metrics`` may run twice, the others 50 times: the third ``metrics`` call is refused and
    ends the run; the calls started before it ran, none after it starts."""
    ctx = _run(per_tool_overrides={"metrics": 2})
    ran: list[str] = []
    model = _answer_once(*_calls("logs", 2, "l"), *_calls("metrics", 4, "m"), *_calls("logs", 1))
    agent = _logs_agent(model, ran, capabilities=[HarnessCapability(ctx)])

    @agent.tool_plain
    def metrics(q: str) -> str:
        ran.append(f"metrics {q}")
        return "p99 840ms"

    with pytest.raises(BudgetExhausted) as ended:
        _bounded(agent.run("why?"))
    assert ended.value.dimension is BudgetDimension.PER_TOOL_CALLS
    assert sorted(ran) == ["0", "1", "metrics 0", "metrics 1"]
    assert dict(ctx.budget.snapshot().per_tool_calls) == {"metrics": 2, "logs": 2}


def test_the_model_call_limit_refuses_the_next_request_before_it_is_sent() -> None:
    ctx = _run(model_calls=2)
    requests: list[int] = []

    def always_a_tool(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(len(messages))
        return ModelResponse(parts=_calls("logs", 1, f"r{len(requests)}_"))

    ran: list[str] = []
    agent = _logs_agent(FunctionModel(always_a_tool), ran, capabilities=[HarnessCapability(ctx)])
    with pytest.raises(BudgetExhausted) as ended:
        _bounded(agent.run("why?"))
    assert (ended.value.dimension, ended.value.boundary) == (
        BudgetDimension.MODEL_CALLS,
        Boundary.MODEL,
    )
    assert len(requests) == 2
    assert len(ran) == 2


def test_the_actual_usage_of_every_response_is_recorded() -> None:
    ctx = _run()
    ran: list[str] = []
    agent = _logs_agent(_answer_once(*_calls("logs", 3)), ran)
    result = _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)]))
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens) == (5 + 11, 7 + 13)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (16, 20)
    assert (usage.model_calls, usage.tool_calls, usage.run_bytes) == (2, 3, 3 * len(b"ok"))
    assert result.output == "diagnosed"


def test_a_response_past_the_token_budget_ends_the_run_and_its_output_is_withheld() -> None:
    ctx = _run(output_tokens=15)  # the tool answer costs 7, the final one 13
    ran: list[str] = []
    agent = _logs_agent(_answer_once(*_calls("logs", 1)), ran)
    with pytest.raises(BudgetExhausted) as ended:
        _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)]))
    assert ended.value.dimension is BudgetDimension.OUTPUT_TOKENS
    assert ctx.budget.snapshot().output_tokens == 20  # recorded as reported, past the limit


def test_test_model_calls_every_tool_through_the_capability() -> None:
    ctx = _run()
    agent = Agent(TestModel(), capabilities=[HarnessCapability(ctx)])

    @agent.tool_plain
    def logs(service: str) -> str:
        return f"{service}: 500s since 10:02"

    @agent.tool_plain
    def metrics(service: str) -> str:
        return f"{service}: p99 840ms"

    @agent.tool_plain
    async def deploys(service: str) -> list[str]:
        return [f"{service} v42 at 10:01"]

    _bounded(agent.run("why is checkout slow?"))
    usage = ctx.budget.snapshot()
    assert dict(usage.per_tool_calls) == {"logs": 1, "metrics": 1, "deploys": 1}
    assert usage.model_calls == 2
    assert ctx.lifecycle.state is RunState.SUCCESS


def test_a_tool_runs_under_the_tool_policy_as_one_call_under_one_key() -> None:
    ctx = _run()
    capability = HarnessCapability(ctx, tool_policy="flaky_tool")
    agent = Agent(_answer_once(ToolCallPart("logs", {}, tool_call_id="call_1")))
    attempts: list[str] = []

    @agent.tool
    def logs(run: AgentRunContext[Any], /) -> str:
        assert run.tool_call_id is not None
        attempts.append(capability.tool_call_key(run.tool_call_id))
        if len(attempts) < 3:
            raise HarnessFailure(FailureKind.TIMEOUT, "log store slow")
        return "ok"

    _bounded(agent.run("why?", capabilities=[capability]))
    assert attempts == ["tool:run-7:call_1"] * 3
    assert ctx.budget.snapshot().tool_calls == 1
    [execution] = capability.executor.executions
    assert [a.failure for a in execution.attempts] == [FailureKind.TIMEOUT] * 2 + [None]


# -- the deadline and cancellation --------------------------------------------------------------


def _stalled_model(started: threading.Event, clock: ManualClock | None = None) -> FunctionModel:
    """A model whose request never answers: only the run's end can stop it."""

    async def stall(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if clock is not None:
            clock.advance(1)  # the run's clock passes the deadline while the request is in flight
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("a stalled request never answers")

    return FunctionModel(stall)


def test_the_deadline_stops_a_model_request_in_flight() -> None:
    clock = ManualClock()
    ctx = _run(clock, timeout=0.05)
    started = threading.Event()
    ran: list[str] = []
    agent = _logs_agent(_stalled_model(started, clock), ran)
    with pytest.raises(RunTimedOut) as ended:
        _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)]))
    assert started.is_set()
    assert ended.value.termination is ctx.lifecycle.termination
    assert ctx.lifecycle.state is RunState.TIMED_OUT
    assert ran == []


def test_the_deadline_passed_during_a_tool_refuses_the_next_request() -> None:
    clock = ManualClock()
    ctx = _run(clock, timeout=30)
    requests: list[int] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(1)
        return ModelResponse(parts=_calls("logs", 1))

    agent = Agent(FunctionModel(respond), capabilities=[HarnessCapability(ctx)])

    @agent.tool_plain
    def logs(q: str) -> str:
        clock.advance(31)
        return "slow"

    with pytest.raises(RunTimedOut) as ended:
        _bounded(agent.run("why?"))
    assert ended.value.boundary is Boundary.MODEL
    assert requests == [1]


def test_a_cancel_from_another_thread_stops_a_request_in_flight() -> None:
    for _ in range(ROUNDS):
        ctx = _run()
        started = threading.Event()
        ran: list[str] = []
        agent = _logs_agent(_stalled_model(started), ran)

        def disconnect(ctx: RunContext = ctx, started: threading.Event = started) -> None:
            assert started.wait(BOUND)
            ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

        canceller = threading.Thread(target=disconnect)
        canceller.start()
        with pytest.raises(RunCancelled) as ended:
            _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)]))
        canceller.join(BOUND)
        assert ended.value.termination is ctx.lifecycle.termination
        assert ctx.cancellation.reason is CancellationReason.CLIENT_DISCONNECTED
        assert ran == []


def test_no_tool_starts_after_a_cancel() -> None:
    """The first of four calls cancels the run from another thread: the other three never start,
    and no model request follows."""
    ctx = _run()
    requests: list[int] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(1)
        return ModelResponse(parts=_calls("restart", 4))

    agent = Agent(FunctionModel(respond), capabilities=[HarnessCapability(ctx)])
    ran: list[str] = []

    @agent.tool_plain(sequential=True)
    def restart(q: str) -> str:
        ran.append(q)
        canceller = threading.Thread(
            target=ctx.cancellation.cancel, args=(CancellationReason.CLIENT_DISCONNECTED,)
        )
        canceller.start()
        canceller.join(BOUND)
        return "restarted"

    with pytest.raises(RunCancelled):
        _bounded(agent.run("fix it"))
    assert ran == ["0"]
    assert requests == [1]
    assert ctx.budget.snapshot().tool_calls == 1


# -- the run's one terminal outcome ------------------------------------------------------------


def test_a_sub_agent_run_records_no_outcome() -> None:
    ctx = _run()
    agent = _logs_agent(_answer_once(*_calls("logs", 1)), [])
    _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx, finishes_run=False)]))
    assert ctx.lifecycle.state is RunState.RUNNING
    failing = Agent(_answer_once(*_calls("logs", 1)))

    @failing.tool_plain
    def logs(q: str) -> str:
        raise LookupError("gone")

    with pytest.raises(LookupError):
        _bounded(failing.run("why?", capabilities=[HarnessCapability(ctx, finishes_run=False)]))
    assert ctx.lifecycle.state is RunState.RUNNING
    assert ctx.budget.snapshot().model_calls == 3


def test_an_agent_run_with_an_output_ends_the_run_success() -> None:
    ctx = _run()
    agent = _logs_agent(_answer_once(*_calls("logs", 2)), [])
    result = _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)]))
    assert result.output == "diagnosed"
    assert ctx.lifecycle.state is RunState.SUCCESS


def test_an_agent_run_that_raises_ends_the_run_failed_with_its_own_exception() -> None:
    ctx = _run()
    agent = Agent(_answer_once(*_calls("logs", 1)), capabilities=[HarnessCapability(ctx)])

    @agent.tool_plain
    def logs(q: str) -> str:
        raise LookupError("no such index: logs-2026")

    with pytest.raises(LookupError, match="no such index"):
        _bounded(agent.run("why?"))
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.FAILED
    assert "LookupError: no such index" in termination.reason


def test_an_exception_after_the_harness_ended_the_run_raises_the_harness_ending() -> None:
    ctx = _run()
    agent = Agent(_answer_once(*_calls("logs", 1)), capabilities=[HarnessCapability(ctx)])

    # An async tool that raises before it yields: its exception, not the cut, ends the call (a
    # sync tool's would be discarded as a late result -- the run's end abandons its thread).
    @agent.tool_plain
    async def logs(q: str) -> str:
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
        raise ConnectionError("log store went away")

    with pytest.raises(RunCancelled) as ended:
        _bounded(agent.run("why?"))
    assert isinstance(ended.value.__cause__, ConnectionError)
    assert ctx.lifecycle.state is RunState.CANCELLED


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("end", "error"),
    [
        pytest.param(lambda ctx: ctx.lifecycle.succeed(), RunFinished, id="succeeded"),
        pytest.param(
            lambda ctx: ctx.cancellation.cancel(CancellationReason.SHUTDOWN),
            RunCancelled,
            id="cancelled",
        ),
    ],
)
def test_a_capability_on_an_ended_run_refuses_the_agent_run(
    end: Callable[[RunContext], object], error: type[Exception]
) -> None:
    ctx = _run()
    capability = HarnessCapability(ctx)
    end(ctx)
    requests: list[int] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(1)
        return ModelResponse(parts=[TextPart("never")])

    with pytest.raises(error) as refused:
        _bounded(Agent(FunctionModel(respond)).run("why?", capabilities=[capability]))
    assert refused.value.termination is ctx.lifecycle.termination  # type: ignore[attr-defined]
    assert requests == []
    assert ctx.budget.snapshot().model_calls == 0


def test_a_second_agent_run_on_a_finished_run_is_refused() -> None:
    ctx = _run()
    agent = _logs_agent(_answer_once(*_calls("logs", 1)), [], capabilities=[HarnessCapability(ctx)])
    _bounded(agent.run("why?"))
    used = ctx.budget.snapshot()
    with pytest.raises(RunFinished):
        _bounded(agent.run("and now?"))
    assert ctx.budget.snapshot() == used


def test_an_unknown_policy_name_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"policy must name one of .*'tool_calls'"):
        HarnessCapability(_run(), tool_policy="tool_calls")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"ctx": "run-7"}, TypeError, "ctx must be a RunContext", id="ctx"),
        pytest.param({"key_prefix": "a:b"}, UnsafeKeySegment, "prefix", id="key_prefix"),
        pytest.param({"finishes_run": "yes"}, TypeError, "finishes_run must be", id="finishes"),
        pytest.param({"classifier": 3}, TypeError, "classifier must be", id="classifier"),
    ],
)
def test_bad_configuration_is_refused_at_construction(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    arguments: dict[str, object] = {"ctx": _run(), **kwargs}
    with pytest.raises(error, match=match):
        HarnessCapability(**arguments)  # type: ignore[arg-type]  # bad on purpose


def test_a_tool_call_id_unsafe_for_a_key_fails_the_run_before_any_tool_runs() -> None:
    ctx = _run()
    ran: list[str] = []
    unsafe = ToolCallPart("logs", {"q": "x"}, tool_call_id="call:1")
    agent = _logs_agent(_answer_once(*_calls("logs", 2), unsafe), ran)
    with pytest.raises(UnsafeKeySegment, match="tool_call_id holds the unsafe character ':'"):
        _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)]))
    assert ran == []
    assert ctx.budget.snapshot().tool_calls == 0
    assert ctx.lifecycle.state is RunState.FAILED


def test_a_tool_name_that_is_not_a_budget_key_fails_the_run_before_any_tool_runs() -> None:
    ctx = _run()
    ran: list[str] = []

    def blank() -> str:
        ran.append("blank")
        return "x"

    agent = _logs_agent(
        _answer_once(ToolCallPart(" ", {}, tool_call_id="c1"), *_calls("logs", 1)),
        ran,
        tools=[Tool(blank, name=" ")],
    )
    with pytest.raises(ValueError, match="tool must be a non-blank str"):
        _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)]))
    assert ran == []
    assert ctx.budget.snapshot().tool_calls == 0


def test_tool_result_bytes_counts_what_pydantic_ai_sends() -> None:
    assert tool_result_bytes("é") == 2
    assert tool_result_bytes({"a": [1, 2]}) == len(b'{"a":[1,2]}')


# -- the provider's hidden retries ----------------------------------------------------------------


@pytest.fixture
def failing_provider(loopback: LoopbackServer) -> LoopbackServer:
    """The loopback provider answering every request with a 500 (it counts the requests)."""
    loopback.default = Reply(status=500)
    return loopback


def _openai_agent(client: openai.AsyncOpenAI) -> Agent[None, str]:
    provider = OpenAIProvider(openai_client=client)
    return Agent(OpenAIChatModel("gpt-4o-mini", provider=provider))


@pytest.mark.parametrize("max_retries", [None, 1, 5], ids=["default", "1", "5"])
def test_a_model_whose_client_retries_on_its_own_is_refused_before_any_request(
    failing_provider: LoopbackServer, max_retries: int | None
) -> None:
    """Any number of the SDK's own retries but 0 is refused: the SDK's default (2), and others."""
    ctx = _run()
    if max_retries is None:  # the SDK's default: 2 retries
        client = openai.AsyncOpenAI(api_key="test", base_url=failing_provider.openai_url)
    else:
        client = openai.AsyncOpenAI(
            api_key="test", base_url=failing_provider.openai_url, max_retries=max_retries
        )
    expected = 2 if max_retries is None else max_retries
    with pytest.raises(ValueError, match=rf"max_retries={expected}\b"):
        _bounded(_openai_agent(client).run("why?", capabilities=[HarnessCapability(ctx)]))
    assert failing_provider.requests == ()
    assert ctx.budget.snapshot().model_calls == 0
    _bounded(client.close())


def test_the_provider_sees_exactly_the_model_calls_the_run_reserved(
    failing_provider: LoopbackServer,
) -> None:
    ctx = _run()
    config = ModelClientConfig(
        max_attempts=1, timeout_seconds=10.0, base_url=failing_provider.openai_url
    )
    client = async_openai_client(config, api_key="test")
    with pytest.raises(ModelHTTPError):
        _bounded(_openai_agent(client).run("why?", capabilities=[HarnessCapability(ctx)]))
    assert failing_provider.count == ctx.budget.snapshot().model_calls == 1
    assert ctx.lifecycle.state is RunState.FAILED
    _bounded(client.close())


# -- streamed runs: run_stream and iter ----------------------------------------------------------


def _loopback_client(loopback: LoopbackServer) -> openai.AsyncOpenAI:
    """An ``openai`` client for the loopback provider, built as the guide says: no SDK retries."""
    config = ModelClientConfig(max_attempts=1, timeout_seconds=10.0, base_url=loopback.openai_url)
    return async_openai_client(config, api_key="test")


def _streaming_openai_agent(
    loopback: LoopbackServer, ran: list[str]
) -> tuple[Agent[None, str], openai.AsyncOpenAI]:
    client = _loopback_client(loopback)
    agent = _logs_agent(
        OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client)), ran
    )
    return agent, client


async def _streamed_output(agent: Agent[None, str], ctx: RunContext) -> str:
    async with agent.run_stream("why?", capabilities=[HarnessCapability(ctx)]) as result:
        return await result.get_output()


def _tool_then_answer(loopback: LoopbackServer) -> tuple[Reply, Reply]:
    first = Reply(
        text="",
        tool_calls=(ToolCall("logs", {"q": "checkout"}, id="call_a"),),
        input_tokens=40,
        output_tokens=9,
    )
    second = Reply(text="roll back checkout v42", input_tokens=70, output_tokens=6)
    loopback.script(first, second)
    return first, second


def test_a_streamed_run_reserves_every_request_and_records_the_usage_each_stream_reported(
    loopback: LoopbackServer,
) -> None:
    first, second = _tool_then_answer(loopback)
    ctx = _run()
    ran: list[str] = []
    agent, client = _streaming_openai_agent(loopback, ran)

    assert _bounded(_streamed_output(agent, ctx)) == "roll back checkout v42"
    snapshot = ctx.budget.snapshot()
    assert [seen.streamed for seen in loopback.requests] == [True, True]
    assert snapshot.model_calls == loopback.count == 2
    assert snapshot.input_tokens == first.input_tokens + second.input_tokens
    assert snapshot.output_tokens == first.output_tokens + second.output_tokens
    assert snapshot.tool_calls == 1
    assert ran == ["checkout"]
    assert ctx.lifecycle.state is RunState.SUCCESS
    _bounded(client.close())


def test_an_iterated_run_is_governed_node_by_node(loopback: LoopbackServer) -> None:
    first, second = _tool_then_answer(loopback)
    ctx = _run()
    ran: list[str] = []
    agent, client = _streaming_openai_agent(loopback, ran)

    async def iterate() -> tuple[list[str], str]:
        nodes: list[str] = []
        async with agent.iter("why?", capabilities=[HarnessCapability(ctx)]) as run:
            async for node in run:
                nodes.append(type(node).__name__)
            assert run.result is not None
            return nodes, run.result.output

    nodes, output = _bounded(iterate())
    assert output == "roll back checkout v42"
    assert nodes.count("ModelRequestNode") == 2
    assert ctx.budget.snapshot().model_calls == loopback.count == 2
    assert ctx.budget.snapshot().input_tokens == first.input_tokens + second.input_tokens
    assert ran == ["checkout"]
    assert ctx.lifecycle.state is RunState.SUCCESS
    _bounded(client.close())


def test_the_model_call_limit_refuses_a_streamed_request_before_it_is_sent(
    loopback: LoopbackServer,
) -> None:
    _tool_then_answer(loopback)
    ctx = _run(model_calls=1)
    ran: list[str] = []
    agent, client = _streaming_openai_agent(loopback, ran)

    with pytest.raises(BudgetExhausted) as ended:
        _bounded(_streamed_output(agent, ctx))
    assert ended.value.dimension is BudgetDimension.MODEL_CALLS
    assert loopback.count == ctx.budget.snapshot().model_calls == 1
    assert ran == ["checkout"]
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    _bounded(client.close())


def test_a_cancel_from_another_thread_stops_a_stream_in_flight(loopback: LoopbackServer) -> None:
    """The provider sends the stream's first events, then stalls: the cancel ends the stream."""
    stall = threading.Event()
    loopback.script(Reply(text="one two three four", stall=stall, stall_after_events=2, chunks=4))
    ctx = _run()
    ran: list[str] = []
    agent, client = _streaming_openai_agent(loopback, ran)
    received: list[str] = []

    def disconnect() -> None:
        loopback.wait_for_stalled(1, BOUND)
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    async def stream() -> None:
        async with agent.run_stream("why?", capabilities=[HarnessCapability(ctx)]) as result:
            async for text in result.stream_text(delta=True):
                received.append(text)

    canceller = threading.Thread(target=disconnect)
    canceller.start()
    with pytest.raises(RunCancelled) as ended:
        _bounded(stream())
    canceller.join(BOUND)
    assert ended.value.termination is ctx.lifecycle.termination
    assert ctx.cancellation.reason is CancellationReason.CLIENT_DISCONNECTED
    assert loopback.count == ctx.budget.snapshot().model_calls == 1
    assert ran == []
    _bounded(client.close())


def test_every_attempt_of_a_fallback_chain_is_a_model_call(loopback: LoopbackServer) -> None:
    """pydantic-ai's ``ModelFallback`` sends a failed request again, to its next model, inside
    one model request step: each model that is sent the request reserves its own Model call."""
    loopback.script(Reply(status=500), Reply(text="diagnosed", input_tokens=30, output_tokens=4))
    ctx = _run()
    client = _loopback_client(loopback)
    provider = OpenAIProvider(openai_client=client)
    agent: Agent[None, str] = Agent(
        OpenAIChatModel("gpt-4o-mini", provider=provider),
        capabilities=[ModelFallback(OpenAIChatModel("gpt-4o", provider=provider))],
    )
    assert _bounded(agent.run("why?", capabilities=[HarnessCapability(ctx)])).output == "diagnosed"
    assert [seen.body["model"] for seen in loopback.requests] == ["gpt-4o-mini", "gpt-4o"]
    assert ctx.budget.snapshot().model_calls == loopback.count == 2
    assert ctx.budget.snapshot().input_tokens == 30
    assert ctx.lifecycle.state is RunState.SUCCESS
    _bounded(client.close())


def test_a_streamed_answer_with_an_unsafe_tool_call_id_runs_none_of_its_tools(
    loopback: LoopbackServer,
) -> None:
    loopback.script(
        Reply(
            text="",
            tool_calls=(
                ToolCall("logs", {"q": "a"}, id="call_a"),
                ToolCall("logs", {"q": "b"}, id="call:b"),
            ),
        )
    )
    ctx = _run()
    ran: list[str] = []
    agent, client = _streaming_openai_agent(loopback, ran)

    with pytest.raises(UnsafeKeySegment, match="tool_call_id holds the unsafe character ':'"):
        _bounded(_streamed_output(agent, ctx))
    assert ran == []
    assert ctx.budget.snapshot().tool_calls == 0
    assert ctx.lifecycle.state is RunState.FAILED
    _bounded(client.close())
