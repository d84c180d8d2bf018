"""``harness_run_config``: the real openai-agents SDK, its Chat Completions model, real HTTP.

Every test drives ``agents.Runner`` with ``OpenAIChatCompletionsModel`` against the loopback
provider and asserts the provider saw exactly the requests the harness recorded as attempts --
no hidden retry in the SDK or in the openai client.
"""

from __future__ import annotations

import asyncio
import re
import threading
from typing import TYPE_CHECKING, Any

import openai
import pytest
from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    ModelRetrySettings,
    ModelSettings,
    RunHooks,
    Runner,
    UserError,
    function_tool,
    set_tracing_disabled,
)
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_provider import OpenAIProvider

from diagnosis_harness import (
    AttemptOutcome,
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    FailureKind,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunCancelled,
    RunContext,
    RunState,
    RunTimedOut,
)
from diagnosis_harness.integrations import ModelClientConfig, async_openai_client, classify_openai
from diagnosis_harness.integrations.openai_agents import (
    _finish,
    governed_tool,
    harness_run_config,
    run_governed,
    run_governed_streamed,
)

from .loopback import LoopbackServer, Reply, ToolCall, serve

if TYPE_CHECKING:
    from collections.abc import Callable

    from agents import RunConfig

set_tracing_disabled(True)  # the SDK would otherwise try to export traces to OpenAI

ROUNDS = 20  # rounds of each race: enough to catch a lost update


def _limits(**overrides: Any) -> BudgetLimits:
    values: dict[str, Any] = {
        "model_calls": 10,
        "tool_calls": 10,
        "per_tool_calls": 10,
        "input_tokens": 10_000,
        "output_tokens": 10_000,
        "total_tokens": 20_000,
        "run_bytes": 100_000,
        **overrides,
    }
    return BudgetLimits(**values)


def _run(*, clock: ManualClock | None = None, timeout: float = 60, **overrides: Any) -> RunContext:
    policies = RetryPolicies(
        [
            *RetryPolicies.defaults().values(),
            RetryPolicy("model_twice", 2, frozenset({FailureKind.SERVER_ERROR})),
        ]
    )
    return RunContext.create(
        session_id="s-1",
        run_id="run-7",
        limits=_limits(**overrides),
        timeout=timeout,
        clock=clock,
        retry_policies=policies,
    )


def _provider(server: LoopbackServer) -> OpenAIProvider:
    client = async_openai_client(ModelClientConfig(base_url=server.openai_url), api_key="test")
    return OpenAIProvider(openai_client=client, use_responses=False)


def _config(
    ctx: RunContext, server: LoopbackServer, **kw: Any
) -> tuple[RunConfig, HarnessRetryExecutor]:
    executor = HarnessRetryExecutor(ctx, classifier=classify_openai)
    config = harness_run_config(
        ctx, model_provider=_provider(server), model="loopback-model", executor=executor, **kw
    )
    return config, executor


def _model_attempts(executor: HarnessRetryExecutor, policy: str = "diagnosis_agent") -> int:
    return sum(len(e.attempts) for e in executor.executions if e.policy == policy)


class _Tools:
    """Async tools that record each start: the only evidence a tool ran."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []

    def tool(self, name: str) -> FunctionTool:
        async def body(service: str) -> str:
            self.started.append((name, service))
            await asyncio.sleep(0)  # a yield: lets the other parallel calls interleave
            return f"{name} of {service}: disk full"

        body.__name__ = name
        body.__doc__ = f"Read the {name} of a service."
        return governed_tool(function_tool(body))


def _calls(name: str, n: int, prefix: str = "call") -> tuple[ToolCall, ...]:
    return tuple(ToolCall(name, {"service": f"svc{i}"}, f"{prefix}_{name}_{i}") for i in range(n))


@pytest.fixture
def server(direct_connections: None) -> Any:
    with serve() as loopback:
        yield loopback


# -- Model calls ---------------------------------------------------------------------------------


def test_a_final_answer_is_one_recorded_attempt_its_usage_recorded_and_success(
    server: LoopbackServer,
) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    server.script(Reply(text="root cause: disk full", input_tokens=120, output_tokens=40))

    result = asyncio.run(
        run_governed(Agent(name="diag"), "why is checkout down?", run_config=config)
    )

    assert result.final_output == "root cause: disk full"
    assert server.count == _model_attempts(executor) == 1
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (1, 120, 40)
    assert ctx.lifecycle.state is RunState.SUCCESS


def test_a_500_is_one_request_no_hidden_retry_and_the_run_fails(server: LoopbackServer) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    server.script(Reply(status=500))

    with pytest.raises(openai.InternalServerError):
        asyncio.run(run_governed(Agent(name="diag"), "why?", run_config=config))

    # The openai client retries a 500 twice by default and the SDK can retry too: neither did.
    assert server.count == _model_attempts(executor) == 1
    assert ctx.lifecycle.state is RunState.FAILED
    assert "InternalServerError" in ctx.lifecycle.termination.reason  # type: ignore[union-attr]


def test_only_the_harness_retries_each_attempt_recorded(server: LoopbackServer) -> None:
    ctx = _run()
    config, executor = _config(ctx, server, model_policy="model_twice")
    server.script(Reply(status=500), Reply(text="after a retry"))

    result = asyncio.run(run_governed(Agent(name="diag"), "why?", run_config=config))

    assert result.final_output == "after a retry"
    attempts = [a for e in executor.executions for a in e.attempts]
    assert server.count == len(attempts) == 2
    assert [a.outcome for a in attempts] == [AttemptOutcome.FAILED, AttemptOutcome.SUCCEEDED]
    assert ctx.budget.snapshot().model_calls == 2  # one Model call reserved per attempt


def test_usage_past_a_limit_ends_the_run_budget_exhausted(server: LoopbackServer) -> None:
    ctx = _run(output_tokens=30)
    config, executor = _config(ctx, server)
    server.script(Reply(text="a long answer", output_tokens=31))

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(run_governed(Agent(name="diag"), "why?", run_config=config))

    assert caught.value.termination.state is RunState.BUDGET_EXHAUSTED
    assert ctx.budget.exhausted is BudgetDimension.OUTPUT_TOKENS
    assert server.count == _model_attempts(executor) == 1


def test_the_sdk_retries_are_off_in_the_config(server: LoopbackServer) -> None:
    config, _ = _config(_run(), server)

    assert config.model_settings is not None
    assert config.model_settings.retry == ModelRetrySettings(max_retries=0)


# -- Tool calls ----------------------------------------------------------------------------------


def test_a_tool_call_runs_governed_keyed_by_the_sdk_call_id(server: LoopbackServer) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    server.script(Reply(text="", tool_calls=_calls("logs", 1)), Reply(text="done"))

    result = asyncio.run(run_governed(agent, "why?", run_config=config))

    assert result.final_output == "done"
    assert tools.started == [("logs", "svc0")]
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.tool_calls, dict(usage.per_tool_calls)) == (2, 1, {"logs": 1})
    assert usage.run_bytes == len(b"logs of svc0: disk full")
    assert server.count == _model_attempts(executor) == 2
    assert _model_attempts(executor, "tool_call") == 1
    # The model saw the tool's result under the SDK's own call ID.
    sent = server.requests[1].body["messages"]
    assert any(m.get("tool_call_id") == "call_logs_0" for m in sent)


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_more_parallel_calls_than_fit_exactly_as_many_run_as_fit(
    server: LoopbackServer, round_: int
) -> None:
    ctx = _run(tool_calls=9)
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    server.script(Reply(text="", tool_calls=_calls("logs", 16, f"r{round_}")))

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(run_governed(agent, "why?", run_config=config))

    assert len(tools.started) == 9  # the 9 that fit ran, the other 7 never started
    assert caught.value.termination.state is RunState.BUDGET_EXHAUSTED
    assert ctx.budget.exhausted is BudgetDimension.TOOL_CALLS
    assert ctx.budget.snapshot().tool_calls == 9
    # The SDK's next Model call was refused before any request: one request, one attempt.
    assert server.count == _model_attempts(executor) == 1


def test_a_call_past_a_per_tool_limit_ends_the_run_no_tool_starts_after_it(
    server: LoopbackServer,
) -> None:
    ctx = _run(per_tool_overrides={"logs": 2})
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs"), tools.tool("metrics")])
    server.script(Reply(text="", tool_calls=_calls("logs", 3) + _calls("metrics", 2)))

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(run_governed(agent, "why?", run_config=config))

    # The SDK starts the calls in answer order: two logs fit, the third is refused and ends
    # the run, so the metrics calls after it never start either.
    assert [name for name, _ in tools.started] == ["logs", "logs"]
    assert caught.value.termination.state is RunState.BUDGET_EXHAUSTED
    assert ctx.budget.snapshot().per_tool_calls["logs"] == 2
    assert server.count == _model_attempts(executor) == 1


# -- deadline and cancellation -------------------------------------------------------------------


def test_the_deadline_cuts_a_stalled_request(direct_connections: None) -> None:
    clock = ManualClock()
    stall = threading.Event()
    # The provider takes "two seconds" (on the run's clock) and then holds its answer.
    with serve(on_request=lambda _seen: clock.advance(2.0)) as server:
        ctx = _run(clock=clock, timeout=0.05)
        config, executor = _config(ctx, server)
        tools = _Tools()
        agent = Agent(name="diag", tools=[tools.tool("logs")])
        server.script(Reply(text="", tool_calls=_calls("logs", 1), stall=stall))

        with pytest.raises(RunTimedOut):
            asyncio.run(run_governed(agent, "why?", run_config=config))

        assert ctx.lifecycle.state is RunState.TIMED_OUT
        assert server.count == _model_attempts(executor) == 1
        stall.set()
    assert tools.started == []


@pytest.mark.parametrize("round_", range(5))
def test_a_cancel_from_another_thread_stops_a_request_in_flight(
    server: LoopbackServer, round_: int
) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    stall = threading.Event()
    server.script(Reply(text="", tool_calls=_calls("logs", 2, f"r{round_}"), stall=stall))

    def cancel_when_stalled() -> None:
        server.wait_for_stalled()
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
        stall.set()  # the provider now answers, with tool calls nobody may start

    canceller = threading.Thread(target=cancel_when_stalled)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            asyncio.run(run_governed(agent, "why?", run_config=config))
    finally:
        canceller.join(30)

    assert tools.started == []
    assert ctx.lifecycle.state is RunState.CANCELLED
    assert server.count == _model_attempts(executor) == 1


def test_the_config_alone_cuts_a_request_in_flight_under_plain_runner_run(
    server: LoopbackServer,
) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    stall = threading.Event()
    server.script(Reply(stall=stall))

    def cancel_when_stalled() -> None:
        server.wait_for_stalled()
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    canceller = threading.Thread(target=cancel_when_stalled)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            asyncio.run(Runner.run(Agent(name="diag"), "why?", run_config=config))
    finally:
        canceller.join(30)
        stall.set()
    assert server.count == _model_attempts(executor) == 1


def test_a_cancel_while_tools_run_stops_the_run_and_no_tool_starts_after(
    server: LoopbackServer,
) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    started = threading.Event()
    starts: list[str] = []

    async def slow(service: str) -> str:
        """A tool that waits until the run is cancelled."""
        starts.append(service)
        started.set()
        await asyncio.Event().wait()  # never set: only the cancellation ends it
        return "unreachable"

    agent = Agent(name="diag", tools=[governed_tool(function_tool(slow))])
    server.script(
        Reply(text="", tool_calls=(ToolCall("slow", {"service": "a"}, "call_a"),)),
        Reply(text="", tool_calls=(ToolCall("slow", {"service": "b"}, "call_b"),)),
    )

    def cancel_when_started() -> None:
        assert started.wait(30)
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    canceller = threading.Thread(target=cancel_when_started)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            asyncio.run(run_governed(agent, "why?", run_config=config))
    finally:
        canceller.join(30)

    assert starts == ["a"]
    assert server.count == _model_attempts(executor) == 1


# -- streamed runs -------------------------------------------------------------------------------


def test_a_streamed_run_records_its_attempt_usage_and_success(server: LoopbackServer) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    events: list[object] = []
    server.script(Reply(text="root cause: disk full", input_tokens=50, output_tokens=7))

    result = asyncio.run(
        run_governed_streamed(Agent(name="diag"), "why?", run_config=config, on_event=events.append)
    )

    assert result.final_output == "root cause: disk full"
    assert events
    assert server.requests[0].streamed
    assert server.requests[0].body["stream_options"] == {"include_usage": True}
    usage = ctx.budget.snapshot()
    assert (usage.input_tokens, usage.output_tokens) == (50, 7)
    assert server.count == _model_attempts(executor) == 1
    assert ctx.lifecycle.state is RunState.SUCCESS


def test_a_streamed_run_with_more_parallel_calls_than_fit(server: LoopbackServer) -> None:
    ctx = _run(tool_calls=3)
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    server.script(Reply(text="", tool_calls=_calls("logs", 5)))

    with pytest.raises(BudgetExhausted):
        asyncio.run(run_governed_streamed(agent, "why?", run_config=config))

    assert len(tools.started) == 3
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    assert server.count == _model_attempts(executor) == 1


def test_a_cancel_cuts_a_stalled_stream(server: LoopbackServer) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    stall = threading.Event()
    server.script(
        Reply(text="partial", tool_calls=_calls("logs", 1), stall=stall, stall_after_events=2)
    )

    def cancel_when_stalled() -> None:
        server.wait_for_stalled()
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
        stall.set()

    canceller = threading.Thread(target=cancel_when_stalled)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            asyncio.run(run_governed_streamed(agent, "why?", run_config=config))
    finally:
        canceller.join(30)

    assert tools.started == []
    assert ctx.lifecycle.state is RunState.CANCELLED
    assert server.count == _model_attempts(executor) == 1


# -- outcome -------------------------------------------------------------------------------------


def test_an_sdk_error_fails_the_run(server: LoopbackServer) -> None:
    ctx = _run()
    config, _ = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    server.default = Reply(text="", tool_calls=_calls("logs", 1))

    with pytest.raises(MaxTurnsExceeded):
        asyncio.run(run_governed(agent, "why?", run_config=config, max_turns=2))

    assert ctx.lifecycle.state is RunState.FAILED
    assert "MaxTurnsExceeded" in ctx.lifecycle.termination.reason  # type: ignore[union-attr]


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run",
    [run_governed, Runner.run, run_governed_streamed],
    ids=["run_governed", "Runner.run", "run_governed_streamed"],
)
def test_a_config_on_an_ended_run_refuses_the_agent_run_with_its_termination(
    server: LoopbackServer, run: Callable[..., Any]
) -> None:
    ctx = _run()
    config, _ = _config(ctx, server)
    ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    with pytest.raises(RunCancelled) as caught:
        asyncio.run(run(Agent(name="diag"), "why?", run_config=config))

    assert caught.value.termination is ctx.lifecycle.termination
    assert server.count == 0


def test_an_unknown_policy_name_is_a_clear_error(server: LoopbackServer) -> None:
    with pytest.raises(ValueError, match="policy must name one of the run's retry policies"):
        _config(_run(), server, model_policy="no_such_policy")
    with pytest.raises(ValueError, match="no_such_policy"):
        _config(_run(), server, tool_policy="no_such_policy")


def test_keys_the_harness_owns_are_refused(server: LoopbackServer) -> None:
    with pytest.raises(TypeError, match="call_model_input_filter"):
        _config(_run(), server, call_model_input_filter=lambda data: data.model_data)
    with pytest.raises(ValueError, match=r"model_settings\.retry"):
        _config(
            _run(), server, model_settings=ModelSettings(retry=ModelRetrySettings(max_retries=2))
        )


def test_a_tool_name_that_is_not_a_budget_key_is_refused() -> None:
    async def body() -> str:
        return "x"

    tool = function_tool(body, name_override=" ")
    with pytest.raises(ValueError, match="non-blank str naming the Tool"):
        governed_tool(tool)


def test_an_unsafe_tool_call_id_is_a_clear_error_and_no_tool_runs(server: LoopbackServer) -> None:
    ctx = _run()
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    calls = (
        ToolCall("logs", {"service": "a"}, "call_ok"),
        ToolCall("logs", {"service": "b"}, "call:../other-run"),
    )
    server.script(Reply(text="", tool_calls=calls))

    with pytest.raises(ValueError, match=re.escape("call:../other-run")):
        asyncio.run(run_governed(agent, "why?", run_config=config))

    assert tools.started == []
    assert ctx.budget.snapshot().tool_calls == 0
    assert ctx.lifecycle.state is RunState.FAILED
    assert server.count == _model_attempts(executor) == 1


def test_an_ungoverned_tool_is_refused_before_any_request(server: LoopbackServer) -> None:
    ctx = _run()
    config, _ = _config(ctx, server)

    async def logs(service: str) -> str:
        """Read logs."""
        return service

    agent = Agent(name="diag", tools=[function_tool(logs)])

    with pytest.raises(ValueError, match="'logs' is not governed"):
        asyncio.run(run_governed(agent, "why?", run_config=config))
    assert server.count == 0
    assert ctx.budget.snapshot().model_calls == 0


def test_an_agent_model_instance_that_bypasses_the_provider_is_refused(
    server: LoopbackServer,
) -> None:
    ctx = _run()
    config = harness_run_config(ctx, model_provider=_provider(server))
    client = async_openai_client(ModelClientConfig(base_url=server.openai_url), api_key="test")
    agent = Agent(name="diag", model=OpenAIChatCompletionsModel("m", openai_client=client))

    with pytest.raises(ValueError, match="bypasses the harness's model provider"):
        asyncio.run(run_governed(agent, "why?", run_config=config))
    assert server.count == 0


def test_a_model_instance_given_to_the_config_is_governed(server: LoopbackServer) -> None:
    ctx = _run()
    client = async_openai_client(ModelClientConfig(base_url=server.openai_url), api_key="test")
    executor = HarnessRetryExecutor(ctx, classifier=classify_openai)
    config = harness_run_config(
        ctx, model=OpenAIChatCompletionsModel("m", openai_client=client), executor=executor
    )

    asyncio.run(run_governed(Agent(name="diag"), "why?", run_config=config))

    assert server.count == _model_attempts(executor) == 1
    assert ctx.budget.snapshot().model_calls == 1


def test_a_governed_tool_refuses_a_run_config_not_built_by_the_harness(
    server: LoopbackServer,
) -> None:
    from agents import RunConfig  # noqa: PLC0415 - only this test builds a plain one

    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    server.script(Reply(text="", tool_calls=_calls("logs", 1)), Reply(text="done"))
    plain = RunConfig(model_provider=_provider(server), model="m")

    with pytest.raises(UserError, match=r"must be built by .*harness_run_config"):
        asyncio.run(Runner.run(agent, "why?", run_config=plain))

    assert tools.started == []


def test_plain_runner_run_with_the_config_raises_the_harness_ending_itself(
    server: LoopbackServer,
) -> None:
    ctx = _run(tool_calls=9)
    config, executor = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    server.script(Reply(text="", tool_calls=_calls("logs", 16)))

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(Runner.run(agent, "why?", run_config=config))

    assert type(caught.value) is BudgetExhausted  # not wrapped in an SDK exception
    assert len(tools.started) == 9
    assert server.count == _model_attempts(executor) == 1


def test_a_streamed_request_is_retried_by_the_harness_only_before_its_first_event(
    server: LoopbackServer,
) -> None:
    ctx = _run()
    config, executor = _config(ctx, server, model_policy="model_twice")
    server.script(Reply(status=500), Reply(text="after a retry"))

    result = asyncio.run(run_governed_streamed(Agent(name="diag"), "why?", run_config=config))

    assert result.final_output == "after a retry"
    attempts = [a.outcome for e in executor.executions for a in e.attempts]
    assert attempts == [AttemptOutcome.FAILED, AttemptOutcome.SUCCEEDED]
    assert server.count == 2
    assert all(seen.streamed for seen in server.requests)


def test_a_hook_that_ends_the_run_stops_it_with_the_harness_ending(
    server: LoopbackServer,
) -> None:
    """A hook ending the run mid-step: the run's scope stops the SDK, its ending reaches you."""
    ctx = _run()
    config, _ = _config(ctx, server)
    tools = _Tools()
    agent = Agent(name="diag", tools=[tools.tool("logs")])
    server.script(Reply(text="", tool_calls=_calls("logs", 1)))

    class CheckingHooks(RunHooks[Any]):
        async def on_tool_start(self, *_args: Any) -> None:
            ctx.reserve_bytes(1_000_000)  # past the run's byte budget: BudgetExhausted

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(run_governed(agent, "why?", run_config=config, hooks=CheckingHooks()))

    assert caught.value.termination is ctx.lifecycle.termination
    assert tools.started == []


def test_a_harness_ending_wrapped_by_the_sdk_is_unwrapped_for_the_caller() -> None:
    """What the SDK wraps (a hook's exception, as ``UserError``) reaches you as the harness's own.

    Driven directly: under ``run_governed`` the run's scope usually cancels the step first, so
    this is the order where the SDK's exception arrives before that cancellation.
    """
    ctx = _run(run_bytes=10)
    with pytest.raises(BudgetExhausted) as ending:
        ctx.reserve_bytes(11)
    wrapped = UserError("Error running tool logs")
    wrapped.__cause__ = ending.value

    with pytest.raises(BudgetExhausted) as caught:
        _finish(ctx, wrapped)

    assert caught.value is ending.value
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED  # not recorded as FAILED


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
def test_a_client_left_with_its_default_retries_still_sends_one_request_per_attempt(
    server: LoopbackServer, streamed: bool
) -> None:
    """The config's ``ModelRetrySettings(max_retries=0)`` makes the SDK send with the client's
    retries off, even for a client built with the openai default (two retries)."""
    ctx = _run()
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test")
    assert client.max_retries == 2
    executor = HarnessRetryExecutor(ctx, classifier=classify_openai)
    config = harness_run_config(
        ctx,
        model_provider=OpenAIProvider(openai_client=client, use_responses=False),
        model="loopback-model",
        executor=executor,
    )
    server.script(Reply(status=500))
    run = run_governed_streamed if streamed else run_governed

    with pytest.raises(openai.InternalServerError):
        asyncio.run(run(Agent(name="diag"), "why?", run_config=config))

    assert server.count == _model_attempts(executor) == 1
