"""OpenTelemetry spans of a governed run, read back from the SDK's in-memory exporter.

The spans come from the real ``opentelemetry-sdk`` (a ``TracerProvider`` of the test's own, never
the global one), the model calls from the real ``openai`` client over HTTP to the loopback
provider, and the pydantic-ai spans from pydantic-ai's own instrumentation.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from diagnosis_harness import (
    BudgetExhausted,
    BudgetLimits,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    ManualClock,
    RetryPolicies,
    RetryPolicy,
    RunContext,
)
from diagnosis_harness.integrations import (
    AsyncGovernedAnthropic,
    AsyncGovernedOpenAI,
    GovernedOpenAI,
    GovernedTools,
    classify_sdk,
)
from diagnosis_harness.integrations.otel import (
    ATTEMPT_NUMBER,
    ATTEMPT_OUTCOME,
    BUDGET_EXHAUSTED,
    FAILURE_KIND,
    TERMINATION_STATE,
    HarnessTracing,
)

from .loopback import ANSWER, LoopbackServer, Reply, ToolCall

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.trace import Tracer

KEY = "test-key-not-a-secret"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def tracer(provider: TracerProvider) -> Tracer:
    return provider.get_tracer("diagnosis_harness.tests")


def _run(**overrides: int) -> RunContext:
    policies = RetryPolicies(
        [
            *RetryPolicies.defaults().values(),
            RetryPolicy("flaky_tool", 2, frozenset({FailureKind.TIMEOUT})),
        ]
    )
    values: dict[str, int] = {
        "model_calls": 10,
        "tool_calls": 10,
        "per_tool_calls": 10,
        "input_tokens": 1_000,
        "output_tokens": 1_000,
        "total_tokens": 2_000,
        "run_bytes": 1 << 20,
        **overrides,
    }
    return RunContext.create(
        session_id="s-1",
        run_id="r-1",
        limits=BudgetLimits(**values),  # type: ignore[arg-type]  # BudgetLimits' own keywords
        timeout=30,
        clock=ManualClock(),
        retry_policies=policies,
    )


def _named(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def _parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _attribute_values(spans: tuple[ReadableSpan, ...]) -> list[str]:
    return [str(value) for span in spans for value in (span.attributes or {}).values()]


# -- a governed openai call: one chat span per attempt, children of the run span -----------------


def test_a_500_then_success_is_two_chat_spans_under_the_run_span(
    loopback: LoopbackServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    loopback.script(Reply(status=500), Reply(input_tokens=30, output_tokens=4))
    with (
        HarnessTracing(tracer).run(ctx, "diagnosis") as tracing,
        openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client,
    ):
        governed = GovernedOpenAI(
            client, ctx, policy="intent_router", executor=executor, tracing=tracing
        )
        completion = governed.create(
            model="gpt-test", messages=[{"role": "user", "content": "why?"}]
        )
        assert completion.choices[0].message.content == ANSWER
        ctx.lifecycle.succeed("diagnosed")

    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    chats = _named(spans, "chat")
    assert run.name == "invoke_agent diagnosis"
    assert run.parent is None
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes[TERMINATION_STATE] == "SUCCESS"
    assert BUDGET_EXHAUSTED not in run.attributes
    # exactly the attempts the provider saw and the executor recorded, in order
    assert loopback.count == len(chats) == len(executor.attempts) == 2
    assert [span.name for span in chats] == ["chat gpt-test", "chat gpt-test"]
    assert all(_parent_id(span) == run.context.span_id for span in chats)
    assert all(span.context.trace_id == run.context.trace_id for span in chats)
    first, second = (dict(span.attributes or {}) for span in chats)
    assert first["gen_ai.operation.name"] == second["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "openai"
    assert (first[ATTEMPT_NUMBER], first[ATTEMPT_OUTCOME]) == (1, "failed")
    assert first[FAILURE_KIND] == FailureKind.SERVER_ERROR.name
    assert first["error.type"] == "InternalServerError"
    assert "gen_ai.usage.input_tokens" not in first
    assert chats[0].status.status_code is StatusCode.ERROR
    assert (second[ATTEMPT_NUMBER], second[ATTEMPT_OUTCOME]) == (2, "succeeded")
    assert FAILURE_KIND not in second
    assert (second["gen_ai.usage.input_tokens"], second["gen_ai.usage.output_tokens"]) == (30, 4)


def test_the_parent_is_the_one_given_never_the_current_span(
    loopback: LoopbackServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run()
    parent = tracer.start_span("request")
    with (
        tracer.start_as_current_span("unrelated current span"),
        HarnessTracing(tracer, parent=parent).run(ctx, "diagnosis") as tracing,
        openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client,
    ):
        GovernedOpenAI(client, ctx, policy="intent_router", tracing=tracing).create(
            model="gpt-test", messages=[{"role": "user", "content": "why?"}]
        )
    parent.end()
    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    [chat] = _named(spans, "chat")
    assert _parent_id(run) == parent.get_span_context().span_id
    assert _parent_id(chat) == run.context.span_id
    assert TERMINATION_STATE not in (run.attributes or {})  # the run has not ended


# -- the GenAI conventions' attributes, read off the real SDK clients and their answers -----------


def test_spans_name_the_conversation_provider_server_and_the_answer_the_provider_gave(
    loopback: LoopbackServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run()
    # The provider answers with a dated snapshot of the model asked for, as OpenAI does: the span
    # reports both, each from where it comes (the request, the answer).
    loopback.script(Reply(status=500), Reply(model="gpt-test-2026-01-01", id="chatcmpl-7f3a"))
    with (
        HarnessTracing(tracer).run(ctx, "diagnosis", provider="openai") as tracing,
        openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client,
    ):
        governed = GovernedOpenAI(client, ctx, policy="intent_router", tracing=tracing)
        governed.create(model="gpt-test", messages=[{"role": "user", "content": "why?"}])

    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    failed, answered = (dict(span.attributes or {}) for span in _named(spans, "chat"))
    assert run.attributes is not None
    assert run.attributes["gen_ai.provider.name"] == "openai"
    assert run.attributes["gen_ai.conversation.id"] == ctx.session_id == "s-1"
    port = loopback.server_port
    for chat in (failed, answered):  # where the request went is known before any answer
        assert (chat["server.address"], chat["server.port"]) == ("127.0.0.1", port)
        assert chat["gen_ai.request.model"] == "gpt-test"
    assert not any(name.startswith("gen_ai.response.") for name in failed)  # no answer: a 500
    assert answered["gen_ai.response.model"] == "gpt-test-2026-01-01"
    assert answered["gen_ai.response.id"] == "chatcmpl-7f3a"
    assert answered["gen_ai.response.finish_reasons"] == ("stop",)


def test_an_anthropic_chat_span_reports_its_stop_reason_and_server(
    loopback: LoopbackServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run()
    call = ToolCall("logs", {"service": "db"}, "toolu_1")
    loopback.script(Reply(text="", tool_calls=(call,), model="claude-test-1", id="msg_01XY"))

    async def ask() -> None:
        async with anthropic.AsyncAnthropic(
            api_key=KEY, base_url=loopback.url, max_retries=0
        ) as client:
            with HarnessTracing(tracer).run(ctx, "diagnosis") as tracing:
                governed = AsyncGovernedAnthropic(
                    client, ctx, policy="intent_router", tracing=tracing
                )
                await governed.create(
                    model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "?"}]
                )

    asyncio.run(ask())
    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    [chat] = _named(spans, "chat")
    assert "gen_ai.provider.name" not in (run.attributes or {})  # not given: not guessed
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"
    port = loopback.server_port
    assert (chat.attributes["server.address"], chat.attributes["server.port"]) == (
        "127.0.0.1",
        port,
    )
    assert chat.attributes["gen_ai.response.model"] == "claude-test-1"
    assert chat.attributes["gen_ai.response.id"] == "msg_01XY"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)


def test_a_stream_s_chat_span_reports_no_answer_it_has_not_seen(
    loopback: LoopbackServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run()
    loopback.script(Reply(model="gpt-test-2026-01-01"))
    with (
        HarnessTracing(tracer).run(ctx, "diagnosis") as tracing,
        openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client,
    ):
        governed = GovernedOpenAI(client, ctx, policy="intent_router", tracing=tracing)
        with governed.stream(model="gpt-test", messages=[{"role": "user", "content": "?"}]) as s:
            assert {chunk.model for chunk in s} == {"gpt-test-2026-01-01"}
    [chat] = _named(exporter.get_finished_spans(), "chat")
    assert chat.attributes is not None
    assert chat.attributes[ATTEMPT_OUTCOME] == "succeeded"  # the stream opened
    assert not any(name.startswith("gen_ai.response.") for name in chat.attributes)
    assert chat.attributes["server.address"] == "127.0.0.1"


def test_the_provider_of_a_run_span_is_a_non_blank_str(tracer: Tracer) -> None:
    ctx = _run()
    for bad in (" ", 7):
        with (
            pytest.raises(ValueError, match="provider must be a non-blank str"),
            HarnessTracing(tracer).run(ctx, "diagnosis", provider=bad),  # type: ignore[arg-type]  # wrong on purpose
        ):
            pass


# -- a governed Tool call: one execute_tool span, no Tool Call key anywhere -----------------------


def test_a_tool_call_span_carries_the_call_id_never_its_key(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run()
    with HarnessTracing(tracer).run(ctx, "diagnosis") as tracing:
        tools = GovernedTools(ctx, tracing=tracing)
        assert tools.call("logs", "call-42", lambda: "disk full") == "disk full"
    key = tools.key("call-42")
    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    [tool] = _named(spans, "execute_tool")
    assert tool.name == "execute_tool logs"
    assert _parent_id(tool) == run.context.span_id
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "logs"
    assert tool.attributes["gen_ai.tool.type"] == "function"
    assert tool.attributes["gen_ai.tool.call.id"] == "call-42"
    assert (tool.attributes[ATTEMPT_NUMBER], tool.attributes[ATTEMPT_OUTCOME]) == (1, "succeeded")
    assert not any(key in value for value in _attribute_values(spans))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_retried_tool_call_span_counts_its_attempts(
    tracer: Tracer, exporter: InMemorySpanExporter, use_async: bool
) -> None:
    """One ``execute_tool`` span per Tool call, whose attempt number is the attempts the executor
    made: a timeout then a success is attempt 2 -- for an async Tool as for a sync one."""
    ctx = _run()
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise HarnessFailure(FailureKind.TIMEOUT, "slow backend")
        return "disk full"

    async def flaky_async() -> str:
        await asyncio.sleep(0)
        return flaky()

    with HarnessTracing(tracer).run(ctx, "diagnosis") as tracing:
        tools = GovernedTools(ctx, policy="flaky_tool", tracing=tracing)
        if use_async:
            answer = asyncio.run(tools.call_async("logs", "call-7", flaky_async))
        else:
            answer = tools.call("logs", "call-7", flaky)
    assert answer == "disk full"
    [execution] = tools.executor.executions
    assert len(execution.attempts) == len(calls) == 2
    [tool] = _named(exporter.get_finished_spans(), "execute_tool")
    assert tool.attributes is not None
    assert (tool.attributes[ATTEMPT_NUMBER], tool.attributes[ATTEMPT_OUTCOME]) == (2, "succeeded")


def test_a_run_ended_by_a_refused_tool_call_says_budget_exhausted_and_its_dimension(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run(per_tool_calls=1)
    with (  # noqa: PT012 - the run span ends with the block, after the refusal
        pytest.raises(BudgetExhausted) as raised,
        HarnessTracing(tracer).run(ctx, "diagnosis") as tracing,
    ):
        tools = GovernedTools(ctx, tracing=tracing)
        tools.call("logs", "call-1", lambda: "first")
        tools.call("logs", "call-2", lambda: "never runs")
    keys = (tools.key("call-1"), tools.key("call-2"))
    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    ok, refused = _named(spans, "execute_tool")
    assert run.attributes is not None
    assert run.attributes[TERMINATION_STATE] == "BUDGET_EXHAUSTED"
    assert run.attributes[BUDGET_EXHAUSTED] == "per_tool_calls"
    assert run.attributes["error.type"] == "BudgetExhausted"
    assert run.status.status_code is StatusCode.ERROR
    assert (ok.attributes or {})[ATTEMPT_OUTCOME] == "succeeded"
    assert refused.attributes is not None
    assert refused.attributes["gen_ai.tool.call.id"] == "call-2"
    assert refused.attributes[ATTEMPT_OUTCOME] == "failed"
    # the kind the executor's journal records for the refused attempt
    [attempt] = raised.value.harness_execution.attempts  # type: ignore[attr-defined]  # the documented extra attribute
    assert attempt.failure is not None
    assert refused.attributes[FAILURE_KIND] == attempt.failure.name
    assert not any(key in value for key in keys for value in _attribute_values(spans))


# -- bad input ------------------------------------------------------------------------------------


def test_tracing_must_be_a_harness_tracing_and_is_checked_first(tracer: Tracer) -> None:
    ctx = _run()
    with pytest.raises(TypeError, match="tracing must be a HarnessTracing"):
        GovernedTools(ctx, tracing=tracer)  # type: ignore[arg-type]  # the wrong object, on purpose
    with pytest.raises(TypeError, match=r"tracer must be an opentelemetry\.trace\.Tracer"):
        HarnessTracing("tracer")  # type: ignore[arg-type]  # the wrong object, on purpose
    with pytest.raises(ValueError, match="agent must be a non-blank str"):  # noqa: SIM117
        with HarnessTracing(tracer).run(ctx, " "):
            pass
    assert ctx.budget.snapshot().tool_calls == 0


# -- pydantic-ai: its own spans, annotated, none doubled ------------------------------------------


def _pydantic_agent(
    provider: TracerProvider,
    ctx: RunContext,
    answer: list[Any],
    tool_policy: str = "tool_call",
) -> Any:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")
    from pydantic_ai import Agent  # noqa: PLC0415 - Python 3.11+ only
    from pydantic_ai.capabilities.instrumentation import Instrumentation  # noqa: PLC0415
    from pydantic_ai.messages import ModelResponse, TextPart  # noqa: PLC0415
    from pydantic_ai.models.function import FunctionModel  # noqa: PLC0415
    from pydantic_ai.models.instrumented import InstrumentationSettings  # noqa: PLC0415

    from diagnosis_harness.integrations.pydantic_ai import (  # noqa: PLC0415
        HarnessCapability,
        HarnessSpanAttributes,
    )

    capability = HarnessCapability(ctx, tool_policy=tool_policy)
    replies = iter([ModelResponse(parts=answer), ModelResponse(parts=[TextPart("diagnosed")])])

    agent = Agent(
        FunctionModel(lambda _messages, _info: next(replies)),
        name="diagnosis",
        capabilities=[
            capability,
            HarnessSpanAttributes(capability),
            Instrumentation(settings=InstrumentationSettings(tracer_provider=provider)),
        ],
    )

    failures = (
        [HarnessFailure(FailureKind.TIMEOUT, "log store slow")]
        if tool_policy != "tool_call"
        else []
    )

    @agent.tool_plain
    def logs() -> str:
        if failures:
            raise failures.pop()
        return "disk full"

    return agent


def test_pydantic_ai_spans_get_the_harness_attributes_and_are_not_doubled(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")
    from pydantic_ai.messages import ToolCallPart  # noqa: PLC0415 - Python 3.11+ only

    ctx = _run()
    call = ToolCallPart("logs", {}, tool_call_id="call-42")
    agent = _pydantic_agent(provider, ctx, [call])
    assert asyncio.run(agent.run("why is checkout down?")).output == "diagnosed"

    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    chats = _named(spans, "chat")
    [tool] = _named(spans, "execute_tool")
    assert len(chats) == ctx.budget.snapshot().model_calls == 2  # one span per request, not two
    assert len(spans) == 4
    assert run.attributes is not None
    assert run.attributes[TERMINATION_STATE] == "SUCCESS"
    assert all((span.attributes or {})[ATTEMPT_OUTCOME] == "succeeded" for span in chats)
    assert all(_parent_id(span) == run.context.span_id for span in (*chats, tool))
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "call-42"
    assert tool.attributes["gen_ai.tool.type"] == "function"  # pydantic-ai's span lacks it
    assert (tool.attributes[ATTEMPT_NUMBER], tool.attributes[ATTEMPT_OUTCOME]) == (1, "succeeded")
    key = f"tool:{ctx.run_id}:call-42"  # the Tool Call key HarnessCapability builds
    assert not any(key in value for value in _attribute_values(spans))


def test_a_pydantic_ai_run_ending_budget_exhausted_says_so_on_its_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")
    from pydantic_ai.messages import ToolCallPart  # noqa: PLC0415 - Python 3.11+ only

    ctx = _run(tool_calls=1)
    calls = [ToolCallPart("logs", {}, tool_call_id=f"call-{n}") for n in (1, 2)]
    agent = _pydantic_agent(provider, ctx, calls)
    with pytest.raises(BudgetExhausted):
        asyncio.run(agent.run("why is checkout down?"))

    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    assert run.attributes is not None
    assert run.attributes[TERMINATION_STATE] == "BUDGET_EXHAUSTED"
    assert run.attributes[BUDGET_EXHAUSTED] == "tool_calls"
    # exactly one of the two calls fit: it ran, in pydantic-ai's span; the other never started
    [tool] = _named(spans, "execute_tool")
    assert tool.attributes is not None
    assert (tool.attributes[ATTEMPT_NUMBER], tool.attributes[ATTEMPT_OUTCOME]) == (1, "succeeded")
    assert ctx.budget.snapshot().tool_calls == 1


# -- openai-agents: its tracing is not OpenTelemetry's, so the harness starts the spans ----------


def test_an_openai_agents_run_has_chat_and_tool_spans_under_the_run_span(
    loopback: LoopbackServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    from agents import Agent, function_tool, set_tracing_disabled  # noqa: PLC0415
    from agents.models.openai_provider import OpenAIProvider  # noqa: PLC0415

    from diagnosis_harness.integrations import (  # noqa: PLC0415
        ModelClientConfig,
        async_openai_client,
    )
    from diagnosis_harness.integrations.openai_agents import (  # noqa: PLC0415
        governed_tool,
        harness_run_config,
        run_governed,
    )

    from .loopback import ToolCall  # noqa: PLC0415

    set_tracing_disabled(True)  # the SDK would otherwise try to export its traces to OpenAI

    async def logs(service: str) -> str:
        """Read the logs of a service."""
        return f"{service}: disk full"

    ctx = _run()
    client = async_openai_client(ModelClientConfig(base_url=loopback.openai_url), api_key="t")
    loopback.script(
        Reply(text="", tool_calls=(ToolCall("logs", {"service": "db"}, "call_logs_0"),)),
        Reply(text="done", input_tokens=12, output_tokens=3),
    )
    with HarnessTracing(tracer).run(ctx, "diag") as tracing:
        config = harness_run_config(
            ctx,
            model_provider=OpenAIProvider(openai_client=client, use_responses=False),
            model="loopback-model",
            tracing=tracing,
        )
        agent = Agent(name="diag", tools=[governed_tool(function_tool(logs))])
        result = asyncio.run(run_governed(agent, "why?", run_config=config))
    assert result.final_output == "done"

    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    chats = _named(spans, "chat")
    [tool] = _named(spans, "execute_tool")
    assert loopback.count == len(chats) == 2
    assert all(_parent_id(span) == run.context.span_id for span in (*chats, tool))
    assert [span.name for span in chats] == ["chat loopback-model"] * 2
    last = chats[-1].attributes or {}
    assert (last["gen_ai.usage.input_tokens"], last["gen_ai.usage.output_tokens"]) == (12, 3)
    # The SDK's Chat Completions model keeps no response ID: none is made up.
    assert "gen_ai.response.id" not in last
    assert (tool.attributes or {})["gen_ai.tool.call.id"] == "call_logs_0"
    assert (tool.attributes or {})["gen_ai.tool.type"] == "function"
    assert (run.attributes or {})[TERMINATION_STATE] == "SUCCESS"
    key = f"tool:{ctx.run_id}:call_logs_0"
    assert not any(key in value for value in _attribute_values(spans))


def test_span_attributes_need_the_run_s_harness_capability() -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")
    from diagnosis_harness.integrations.pydantic_ai import HarnessSpanAttributes  # noqa: PLC0415

    with pytest.raises(TypeError, match="capability must be a HarnessCapability"):
        HarnessSpanAttributes(_run())  # type: ignore[arg-type]  # the wrong object, on purpose


def test_a_retried_pydantic_ai_tool_call_numbers_pydantic_ai_s_span_per_attempt(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")
    from pydantic_ai.messages import ToolCallPart  # noqa: PLC0415 - Python 3.11+ only

    ctx = _run()
    call = ToolCallPart("logs", {}, tool_call_id="call-42")
    agent = _pydantic_agent(provider, ctx, [call], "flaky_tool")
    assert asyncio.run(agent.run("why is checkout down?")).output == "diagnosed"

    first, second = _named(exporter.get_finished_spans(), "execute_tool")  # one per attempt
    assert first.attributes is not None
    assert second.attributes is not None
    assert (first.attributes[ATTEMPT_NUMBER], first.attributes[ATTEMPT_OUTCOME]) == (1, "failed")
    assert first.attributes[FAILURE_KIND] == FailureKind.TIMEOUT.name
    assert (second.attributes[ATTEMPT_NUMBER], second.attributes[ATTEMPT_OUTCOME]) == (
        2,
        "succeeded",
    )
    assert ctx.budget.snapshot().tool_calls == 1  # one Tool call, two attempts


def test_an_async_governed_call_has_its_chat_span_too(
    loopback: LoopbackServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    ctx = _run()
    loopback.script(Reply(input_tokens=8, output_tokens=2))

    async def ask() -> None:
        async with openai.AsyncOpenAI(
            api_key=KEY, base_url=loopback.openai_url, max_retries=0
        ) as client:
            with HarnessTracing(tracer).run(ctx, "diagnosis") as tracing:
                governed = AsyncGovernedOpenAI(client, ctx, policy="intent_router", tracing=tracing)
                await governed.create(model="gpt-test", messages=[{"role": "user", "content": "?"}])

    asyncio.run(ask())
    spans = exporter.get_finished_spans()
    [run] = _named(spans, "invoke_agent")
    [chat] = _named(spans, "chat")
    assert _parent_id(chat) == run.context.span_id
    assert chat.attributes is not None
    assert (chat.attributes[ATTEMPT_NUMBER], chat.attributes[ATTEMPT_OUTCOME]) == (1, "succeeded")
    assert (
        chat.attributes["gen_ai.usage.input_tokens"],
        chat.attributes["gen_ai.usage.output_tokens"],
    ) == (8, 2)
