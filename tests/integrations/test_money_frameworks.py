"""Money budgets on the agent frameworks, and the side by side with pydantic-ai's ``cost_limit``.

The side by side runs the same pydantic-ai agent twice: its model is OpenAI's ``gpt-4o``, priced
by genai-prices' data, served by the loopback provider (``loopback.py``) over OpenAI's wire
format; the agent's output validator rejects every answer (pydantic-ai's ``ModelRetry``), so the
agent keeps requesting, and every answer reports a usage worth exactly $0.40 (40 input tokens and
the output tokens that make up the rest, computed from genai-prices' price), cut to the
``max_completion_tokens`` the request allows, as a real model stops there. The limit is $1.00.

Measured:

- pydantic-ai's ``UsageLimits(cost_limit=Decimal("1.00"))`` compares the spend so far before a
  request and the response's cost after it: three requests are sent and answered, the run raises
  ``UsageLimitExceeded`` with **$1.20 spent** -- $0.20 past its limit, paid for.
- ``HarnessCapability(ctx, prices=GenaiPrices())`` with ``BudgetLimits(cost=Decimal("1.00"))``
  holds each request's worst case before it is sent: settled + held, read by the provider as
  each request arrives, was $0.402155, $0.806965 and $1.00 -- never above $1.00. The third
  request held the $0.20 left (the run holds as much of the worst case as the money left pays
  for, in the reservation's one decision) and went out with ``max_tokens`` lowered from 40,000 to
  18,940 (the most whose worst case, its input bound included, fits the $0.20 held; $0.1999925),
  cost $0.1895, and the fourth was refused before it was
  sent: the run ends ``BUDGET_EXHAUSTED`` on ``COST`` with **$0.9895 spent**, nothing held.
  (The exact figures follow from the bytes of pydantic-ai's messages, which bound the input;
  the assertions pin what does not depend on them.)
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")

from agents import Agent as AgentsAgent
from agents import ModelSettings as AgentsModelSettings
from agents import function_tool, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider as AgentsOpenAIProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.exceptions import ModelRetry, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RequestUsage, UsageLimits

from diagnosis_harness import (
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    ManualClock,
    RunCancelled,
    RunContext,
    RunState,
)
from diagnosis_harness.integrations import (
    DEFAULT_MAX_TOKENS,
    ModelClientConfig,
    UnknownToolPrice,
    UsageNotReported,
    async_openai_client,
)
from diagnosis_harness.integrations._anthropic import TOOLS_PROMPT_TOKENS
from diagnosis_harness.integrations.openai_agents import (
    governed_tool,
    harness_run_config,
    model_charges,
    run_governed,
    run_governed_streamed,
)
from diagnosis_harness.integrations.otel import COST, COST_HELD, HarnessTracing
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability, HarnessSpanAttributes
from diagnosis_harness.pricing import GenaiPrices, ModelPrice, PriceTable, UnknownPrice
from racing import BOUND

from .loopback import LoopbackServer, Reply, SeenRequest, ToolCall

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    import openai
    from agents import RunConfig

set_tracing_disabled(True)  # the SDK would otherwise try to export traces to OpenAI

MODEL = "gpt-4o"
PRICES = GenaiPrices()
PRICE = PRICES.model_price(MODEL, provider="openai")
WORTH = Decimal("0.40")  # what every answer's usage costs, by genai-prices' data
LIMIT = Decimal("1.00")
ZERO = Decimal(0)
INPUT_TOKENS = 40  # fewer than the bytes of any request the agent sends: a usage it can report
# The output tokens that make the answer worth WORTH exactly (39,990 for gpt-4o's $2.50 / $10).
OUTPUT_TOKENS = int(
    (WORTH - PRICE.cost(input_tokens=INPUT_TOKENS, output_tokens=0))
    / PRICE.output_per_mtok
    * 1_000_000
)
MAX_TOKENS = 40_000  # the agent's own max_tokens: every $0.40 answer fits in it
ANSWERS = 10  # the validator's retries: more answers than either run can pay for


def _bounded(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, BOUND)

    return asyncio.run(bounded())


def _paid_answers(loopback: LoopbackServer) -> None:
    """Every answer a text, its usage worth $0.40 (cut to the request's ``max_tokens``)."""
    loopback.default = Reply(
        text="not sure yet",
        input_tokens=INPUT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        within_max_tokens=True,
    )


def _looping_agent(loopback: LoopbackServer) -> tuple[Agent[None, str], openai.AsyncOpenAI]:
    """The one agent of the side by side: gpt-4o on the loopback provider, ``max_tokens`` of its
    own, and an output validator that asks the model again after every answer."""
    config = ModelClientConfig(max_attempts=1, timeout_seconds=10.0, base_url=loopback.openai_url)
    client = async_openai_client(config, api_key="test")
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    agent: Agent[None, str] = Agent(
        model, model_settings={"max_tokens": MAX_TOKENS}, retries={"output": ANSWERS}
    )

    @agent.output_validator
    def keep_asking(output: str) -> str:
        raise ModelRetry(f"{output!r} names no root cause: look again")

    return agent, client


def _spent(loopback: LoopbackServer) -> Decimal:
    """What the provider billed: each request's answer, its output cut to the request's limit."""
    total = Decimal(0)
    for seen in loopback.requests:
        allowed = seen.body.get("max_completion_tokens", seen.body.get("max_tokens"))
        output = OUTPUT_TOKENS if allowed is None else min(OUTPUT_TOKENS, int(allowed))
        total += PRICE.cost(input_tokens=INPUT_TOKENS, output_tokens=output)
    return total


def test_the_answers_are_worth_forty_cents_by_genai_prices() -> None:
    assert PRICE.cost(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS) == WORTH
    assert OUTPUT_TOKENS <= MAX_TOKENS


def test_pydantic_ais_cost_limit_ends_the_run_past_its_limit(loopback: LoopbackServer) -> None:
    """The baseline, measured: ``cost_limit=$1.00`` ends after three answers, $1.20 spent."""
    _paid_answers(loopback)
    agent, client = _looping_agent(loopback)

    with pytest.raises(UsageLimitExceeded, match="cost_limit"):
        _bounded(agent.run("why is checkout slow?", usage_limits=UsageLimits(cost_limit=LIMIT)))

    assert loopback.count == 3
    assert [seen.body["max_completion_tokens"] for seen in loopback.requests] == [MAX_TOKENS] * 3
    assert _spent(loopback) == Decimal("1.20") > LIMIT
    _bounded(client.close())


def _money_run(**limits: Any) -> RunContext:
    values: dict[str, Any] = {
        "model_calls": 20,
        "tool_calls": 20,
        "per_tool_calls": 20,
        "input_tokens": 1_000_000,
        "output_tokens": 1_000_000,
        "total_tokens": 2_000_000,
        "run_bytes": 1_000_000,
        "cost": LIMIT,
        **limits,
    }
    return RunContext.create(
        session_id="s-1",
        run_id="run-money",
        limits=BudgetLimits(**values),
        timeout=60,
        clock=ManualClock(),
    )


def _money_at_arrival(
    ctx: RunContext, at_arrival: list[tuple[Decimal, Decimal]]
) -> Callable[[SeenRequest], None]:
    """The provider's ``on_request``: the run's (settled, held) money as each request arrives,
    its hold placed and not settled yet (one snapshot: one consistent reading)."""

    def observe(seen: SeenRequest) -> None:
        usage = ctx.budget.snapshot()
        at_arrival.append((usage.cost, usage.cost_held))

    return observe


def test_harness_capability_never_lets_settled_and_held_pass_the_limit(
    loopback: LoopbackServer,
) -> None:
    """The same agent under ``HarnessCapability``: settled + held is read by the provider as each
    request arrives (its hold placed, not yet settled), and is never above $1.00."""
    _paid_answers(loopback)
    ctx = _money_run()
    at_arrival: list[tuple[Decimal, Decimal]] = []  # (settled, held) as each request arrived
    loopback.on_request = _money_at_arrival(ctx, at_arrival)
    agent, client = _looping_agent(loopback)
    capability = HarnessCapability(ctx, prices=PRICES)

    with pytest.raises(BudgetExhausted) as exhausted:
        _bounded(agent.run("why is checkout slow?", capabilities=[capability]))

    assert exhausted.value.dimension is BudgetDimension.COST
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    assert all(settled + held <= LIMIT for settled, held in at_arrival)
    usage = ctx.budget.snapshot()
    assert usage.cost_held == 0
    assert usage.cost == _spent(loopback) <= LIMIT
    assert usage.cost > 2 * WORTH  # the third request ran, lowered
    sent = [seen.body["max_completion_tokens"] for seen in loopback.requests]
    assert len(sent) == 3
    assert sent[:2] == [MAX_TOKENS, MAX_TOKENS]  # two whole answers fit in $1.00 ...
    assert sent[2] < OUTPUT_TOKENS  # ... the third only with max_tokens lowered
    assert [charge.lowered for charge in capability.charges] == [False, False, True]
    assert [charge.max_tokens for charge in capability.charges] == sent
    _bounded(client.close())


# -- pydantic-ai: HarnessCapability(prices=...), offline through its function model --------------

SCRIPTED = "function:answer:"  # FunctionModel(answer)'s model name, priced by a PriceTable
TABLE_PRICE = ModelPrice(input_per_mtok=Decimal("2"), output_per_mtok=Decimal("8"))
TABLE = PriceTable({SCRIPTED: TABLE_PRICE})


def _sent_max_tokens(info: AgentInfo) -> object:
    """The ``max_tokens`` a request was sent with (``None``: none)."""
    return (info.model_settings or {}).get("max_tokens")


def _scripted_agent(seen: list[AgentInfo], **agent: Any) -> Agent[None, str]:
    """A function model answering once, its usage 300 in / 50 out; ``seen`` gets what each
    request was sent with (its model settings)."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        return ModelResponse(
            parts=[TextPart("disk full")], usage=RequestUsage(input_tokens=300, output_tokens=50)
        )

    return Agent(FunctionModel(answer), **agent)


def test_a_priced_request_holds_its_worst_case_and_settles_its_actual_cost() -> None:
    ctx = _money_run(cost=Decimal("5"))
    seen: list[AgentInfo] = []
    capability = HarnessCapability(ctx, prices=TABLE)

    result = _bounded(_scripted_agent(seen).run("why?", capabilities=[capability]))

    assert result.output == "disk full"
    assert ctx.lifecycle.state is RunState.SUCCESS
    (charge,) = capability.charges
    # A request without max_tokens, under a money limit, is sent with the default.
    assert charge.max_tokens == DEFAULT_MAX_TOKENS == _sent_max_tokens(seen[0])
    assert not charge.lowered
    assert charge.held > TABLE_PRICE.cost(input_tokens=300, output_tokens=DEFAULT_MAX_TOKENS)
    assert charge.cost == TABLE_PRICE.cost(input_tokens=300, output_tokens=50)
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (charge.cost, ZERO)
    assert (usage.input_tokens, usage.output_tokens) == (300, 50)


def test_the_models_own_max_tokens_is_held_and_sent() -> None:
    ctx = _money_run(cost=Decimal("5"))
    seen: list[AgentInfo] = []
    capability = HarnessCapability(ctx, prices=TABLE)

    _bounded(
        _scripted_agent(seen, model_settings={"max_tokens": 700}).run(
            "why?", capabilities=[capability]
        )
    )

    (charge,) = capability.charges
    assert charge.max_tokens == 700 == _sent_max_tokens(seen[0])


def test_max_tokens_is_lowered_to_what_the_money_left_can_pay_for() -> None:
    # $0.01 pays for the input bound and well under the default 4,096 output tokens at $8/M.
    ctx = _money_run(cost=Decimal("0.01"))
    seen: list[AgentInfo] = []
    capability = HarnessCapability(ctx, prices=TABLE)

    _bounded(_scripted_agent(seen).run("why?", capabilities=[capability]))

    (charge,) = capability.charges
    assert charge.lowered
    assert charge.max_tokens is not None
    assert 50 <= charge.max_tokens < DEFAULT_MAX_TOKENS
    assert _sent_max_tokens(seen[0]) == charge.max_tokens
    assert charge.held <= Decimal("0.01")
    assert ctx.budget.snapshot().cost == charge.cost


def test_an_unknown_price_is_refused_before_the_request_is_sent() -> None:
    ctx = _money_run()
    seen: list[AgentInfo] = []
    capability = HarnessCapability(ctx, prices=PriceTable({}))

    with pytest.raises(UnknownPrice, match=re.escape(repr(SCRIPTED))):
        _bounded(_scripted_agent(seen).run("why?", capabilities=[capability]))

    assert seen == []
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.cost, usage.cost_held) == (0, ZERO, ZERO)


def test_a_money_limit_without_prices_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="prices is required"):
        HarnessCapability(_money_run())


def test_without_a_money_limit_the_cost_is_tracked_and_nothing_is_added_to_the_request() -> None:
    ctx = _money_run(cost=None)
    seen: list[AgentInfo] = []
    capability = HarnessCapability(ctx, prices=TABLE)

    _bounded(_scripted_agent(seen).run("why?", capabilities=[capability]))

    (charge,) = capability.charges
    assert charge.max_tokens is None
    assert _sent_max_tokens(seen[0]) is None
    assert ctx.budget.snapshot().cost == TABLE_PRICE.cost(input_tokens=300, output_tokens=50)


def test_a_claude_model_given_tools_holds_anthropics_tool_prompt_too() -> None:
    """Anthropic adds a tool-use system prompt the request does not send: its bound is added."""

    def held_for(model_name: str) -> Decimal:
        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(
                parts=[TextPart("disk full")], usage=RequestUsage(input_tokens=1, output_tokens=1)
            )

        agent: Agent[None, str] = Agent(FunctionModel(answer, model_name=model_name))

        @agent.tool_plain
        def logs(service: str) -> str:
            return "ok"

        capability = HarnessCapability(_money_run(), prices=PriceTable({model_name: TABLE_PRICE}))
        _bounded(agent.run("why?", capabilities=[capability]))
        return capability.charges[0].held

    tool_prompt = TABLE_PRICE.cost(input_tokens=TOOLS_PROMPT_TOKENS, output_tokens=0)
    assert held_for("claude-sonnet-4-5") - held_for("llama-3") == tool_prompt


def test_a_priced_stream_settles_at_its_end(loopback: LoopbackServer) -> None:
    loopback.script(Reply(text="disk full", input_tokens=INPUT_TOKENS, output_tokens=900))
    ctx = _money_run()
    config = ModelClientConfig(max_attempts=1, timeout_seconds=10.0, base_url=loopback.openai_url)
    client = async_openai_client(config, api_key="test")
    agent: Agent[None, str] = Agent(
        OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    )
    capability = HarnessCapability(ctx, prices=PRICES)

    async def streamed() -> str:
        async with agent.run_stream("why?", capabilities=[capability]) as result:
            return await result.get_output()

    assert _bounded(streamed()) == "disk full"
    assert loopback.requests[0].body["max_completion_tokens"] == DEFAULT_MAX_TOKENS
    usage = ctx.budget.snapshot()
    assert usage.cost == PRICE.cost(input_tokens=INPUT_TOKENS, output_tokens=900)
    assert usage.cost_held == 0
    _bounded(client.close())


def test_a_stream_cut_before_its_usage_keeps_its_worst_case_held(loopback: LoopbackServer) -> None:
    stall = threading.Event()
    loopback.script(Reply(text="disk full, maybe", stall=stall, stall_after_events=2))
    ctx = _money_run()
    config = ModelClientConfig(max_attempts=1, timeout_seconds=10.0, base_url=loopback.openai_url)
    client = async_openai_client(config, api_key="test")
    agent: Agent[None, str] = Agent(
        OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    )
    capability = HarnessCapability(ctx, prices=PRICES)

    async def streamed() -> str:
        async with agent.run_stream("why?", capabilities=[capability]) as result:
            return await result.get_output()

    def cancel_when_stalled() -> None:
        loopback.wait_for_stalled()
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
        stall.set()

    canceller = threading.Thread(target=cancel_when_stalled)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            _bounded(streamed())
    finally:
        canceller.join(BOUND)

    (charge,) = capability.charges
    assert charge.cost is None  # never settled: the cut request may have been billed
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (ZERO, charge.held)
    assert charge.held > 0
    _bounded(client.close())


# -- openai-agents: harness_run_config(prices=...), through the loopback provider ----------------


def _agents_config(ctx: RunContext, loopback: LoopbackServer, **kw: Any) -> RunConfig:
    client = async_openai_client(ModelClientConfig(base_url=loopback.openai_url), api_key="test")
    provider = AgentsOpenAIProvider(openai_client=client, use_responses=False)
    return harness_run_config(ctx, model_provider=provider, model=MODEL, **kw)


def test_an_agents_request_holds_its_worst_case_then_settles_its_actual_cost(
    loopback: LoopbackServer,
) -> None:
    loopback.script(Reply(text="disk full", input_tokens=INPUT_TOKENS, output_tokens=900))
    ctx = _money_run()
    at_arrival: list[tuple[Decimal, Decimal]] = []
    loopback.on_request = _money_at_arrival(ctx, at_arrival)
    config = _agents_config(ctx, loopback, prices=PRICES)

    result = asyncio.run(run_governed(AgentsAgent(name="diag"), "why?", run_config=config))

    assert result.final_output == "disk full"
    (charge,) = model_charges(config)
    assert charge.model == MODEL
    assert charge.provider == "openai"
    assert loopback.requests[0].body["max_tokens"] == charge.max_tokens == DEFAULT_MAX_TOKENS
    assert at_arrival == [(ZERO, charge.held)]  # held while the request was in flight
    assert charge.held > PRICE.cost(input_tokens=0, output_tokens=DEFAULT_MAX_TOKENS)
    assert charge.cost == PRICE.cost(input_tokens=INPUT_TOKENS, output_tokens=900)
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (charge.cost, ZERO)
    assert ctx.lifecycle.state is RunState.SUCCESS


def test_an_agents_request_is_sent_with_max_tokens_lowered_to_what_is_left(
    loopback: LoopbackServer,
) -> None:
    answer = Reply(text="disk full", input_tokens=INPUT_TOKENS, output_tokens=900)
    loopback.script(replace(answer, within_max_tokens=True))
    ctx = _money_run(cost=Decimal("0.01"))  # $10 per million output tokens: under 1,000
    config = _agents_config(
        ctx, loopback, prices=PRICES, model_settings=AgentsModelSettings(max_tokens=2_000)
    )

    asyncio.run(run_governed(AgentsAgent(name="diag"), "why?", run_config=config))

    (charge,) = model_charges(config)
    assert charge.lowered
    assert charge.max_tokens is not None
    assert charge.max_tokens < 1_000
    assert loopback.requests[0].body["max_tokens"] == charge.max_tokens
    assert charge.cost is not None
    assert ctx.budget.snapshot().cost == charge.cost <= Decimal("0.01")


def test_an_agents_stream_settles_at_its_end(loopback: LoopbackServer) -> None:
    loopback.script(Reply(text="disk full", input_tokens=INPUT_TOKENS, output_tokens=900))
    ctx = _money_run()
    config = _agents_config(ctx, loopback, prices=PRICES)

    asyncio.run(run_governed_streamed(AgentsAgent(name="diag"), "why?", run_config=config))

    (charge,) = model_charges(config)
    assert charge.cost == PRICE.cost(input_tokens=INPUT_TOKENS, output_tokens=900)
    assert ctx.budget.snapshot().cost_held == ZERO


def test_an_agents_stream_cut_before_its_completed_event_keeps_its_worst_case_held(
    loopback: LoopbackServer,
) -> None:
    """The SDK reports a stream's usage in its completed event only: a stream cut before it
    received none, so its hold stays at the worst case (the request may have been billed), and
    its reservation ends cleanly -- settled once, nothing raised but the run's ending."""
    stall = threading.Event()
    loopback.script(Reply(text="disk full, maybe", stall=stall, stall_after_events=2))
    ctx = _money_run()
    config = _agents_config(ctx, loopback, prices=PRICES)

    def cancel_when_stalled() -> None:
        loopback.wait_for_stalled()
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)
        stall.set()

    canceller = threading.Thread(target=cancel_when_stalled)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            asyncio.run(run_governed_streamed(AgentsAgent(name="diag"), "why?", run_config=config))
    finally:
        canceller.join(BOUND)

    (charge,) = model_charges(config)
    assert charge.cost is None
    assert charge.usage is None
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (ZERO, charge.held)
    assert charge.held > 0
    assert (usage.input_tokens, usage.output_tokens) == (0, 0)
    assert ctx.lifecycle.state is RunState.CANCELLED


def test_an_agents_request_of_an_unknown_price_is_never_sent(loopback: LoopbackServer) -> None:
    ctx = _money_run()
    config = _agents_config(ctx, loopback, prices=PriceTable({}))

    with pytest.raises(UnknownPrice, match=MODEL):
        asyncio.run(run_governed(AgentsAgent(name="diag"), "why?", run_config=config))

    assert loopback.count == 0
    assert ctx.budget.snapshot().cost_held == ZERO


def test_a_priced_agents_request_continuing_a_stored_conversation_is_refused(
    loopback: LoopbackServer,
) -> None:
    ctx = _money_run()
    config = _agents_config(ctx, loopback, prices=PRICES)

    with pytest.raises(ValueError, match="previous_response_id"):
        asyncio.run(
            run_governed(
                AgentsAgent(name="diag"),
                "why?",
                run_config=config,
                previous_response_id="resp_earlier",
            )
        )

    assert loopback.count == 0


def test_harness_run_config_under_a_money_limit_needs_prices(loopback: LoopbackServer) -> None:
    with pytest.raises(ValueError, match="prices is required"):
        _agents_config(_money_run(), loopback)


def test_an_agents_chat_span_carries_the_cost(loopback: LoopbackServer) -> None:
    loopback.script(Reply(text="disk full", input_tokens=INPUT_TOKENS, output_tokens=900))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ctx = _money_run()
    tracing = HarnessTracing(provider.get_tracer("diagnosis_harness.tests"))
    config = _agents_config(ctx, loopback, prices=PRICES, tracing=tracing)

    asyncio.run(run_governed(AgentsAgent(name="diag"), "why?", run_config=config))

    (charge,) = model_charges(config)
    assert charge.cost is not None
    (chat,) = [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]
    attributes = chat.attributes or {}
    assert attributes[COST] == float(charge.cost)
    assert attributes[COST_HELD] == float(charge.held)
    assert attributes["gen_ai.request.max_tokens"] == DEFAULT_MAX_TOKENS
    assert attributes["gen_ai.usage.output_tokens"] == 900
    provider.shutdown()


def test_pydantic_ais_chat_span_carries_the_cost() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ctx = _money_run(cost=Decimal("5"))
    capability = HarnessCapability(ctx, prices=TABLE)
    instrumentation = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
    agent = _scripted_agent(
        [], capabilities=[capability, HarnessSpanAttributes(capability), instrumentation]
    )

    assert _bounded(agent.run("why?")).output == "disk full"

    (charge,) = capability.charges
    assert charge.cost is not None
    (chat,) = [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]
    attributes = chat.attributes or {}
    assert attributes[COST] == float(charge.cost)
    assert attributes[COST_HELD] == float(charge.held)
    assert attributes["gen_ai.request.max_tokens"] == DEFAULT_MAX_TOKENS
    assert capability.charge_of(ModelResponse(parts=[])) is None  # an answer it never priced
    provider.shutdown()


def test_an_agents_stream_read_to_its_end_without_usage_is_refused_and_keeps_its_hold(
    loopback: LoopbackServer,
) -> None:
    """A server that ignores ``include_usage``: the stream ends without a usage, which the run's
    budgets cannot count -- ``UsageNotReported``, as every governed stream, and the hold stays."""
    loopback.script(Reply(text="disk full", usage=False))
    ctx = _money_run()
    config = _agents_config(ctx, loopback, prices=PRICES)

    with pytest.raises(UsageNotReported):
        asyncio.run(run_governed_streamed(AgentsAgent(name="diag"), "why?", run_config=config))

    (charge,) = model_charges(config)
    assert charge.cost is None
    assert ctx.budget.snapshot().cost_held == charge.held
    assert ctx.lifecycle.state is RunState.FAILED


# -- paid tools through the adapters: 16 parallel calls of a $0.10 tool under $1.00 -------------

FREE = ModelPrice(input_per_mtok=Decimal(0), output_per_mtok=Decimal(0))  # only the tool costs
TOOL_PRICE = Decimal("0.10")


def test_sixteen_paid_tool_calls_of_a_pydantic_ai_answer_run_exactly_ten() -> None:
    calls = [ToolCallPart("search", {"q": f"q{i}"}, tool_call_id=f"call_{i}") for i in range(16)]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=list(calls) if len(messages) == 1 else [TextPart("done")])

    ran: list[str] = []
    agent: Agent[None, str] = Agent(FunctionModel(answer, model_name="free"))

    @agent.tool_plain
    def search(q: str) -> str:
        ran.append(q)
        return "ok"

    ctx = _money_run()
    capability = HarnessCapability(
        ctx, prices=PriceTable({"free": FREE}), tool_prices={"search": TOOL_PRICE}
    )

    with pytest.raises(BudgetExhausted) as exhausted:
        _bounded(agent.run("search everything", capabilities=[capability]))

    assert exhausted.value.dimension is BudgetDimension.COST
    assert len(ran) == 10
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (LIMIT, ZERO)


def test_a_pydantic_ai_tool_without_a_price_is_refused_under_a_money_limit() -> None:
    call = ToolCallPart("search", {"q": "x"}, tool_call_id="call_0")

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[call] if len(messages) == 1 else [TextPart("done")])

    ran: list[str] = []
    agent: Agent[None, str] = Agent(FunctionModel(answer, model_name="free"))

    @agent.tool_plain
    def search(q: str) -> str:
        ran.append(q)
        return "ok"

    capability = HarnessCapability(_money_run(), prices=PriceTable({"free": FREE}))

    with pytest.raises(UnknownToolPrice, match="search"):
        _bounded(agent.run("search", capabilities=[capability]))

    assert ran == []


def test_sixteen_paid_tool_calls_of_an_agents_answer_run_exactly_ten(
    loopback: LoopbackServer,
) -> None:
    calls = tuple(ToolCall("search", {"q": f"q{i}"}, id=f"call_{i}") for i in range(16))
    loopback.script(Reply(text="", tool_calls=calls), Reply(text="done"))
    ran: list[str] = []

    @function_tool
    async def search(q: str) -> str:
        """Search the incident index."""
        ran.append(q)
        return "ok"

    ctx = _money_run()
    config = _agents_config(
        ctx,
        loopback,
        prices=PriceTable({MODEL: FREE}),
        tool_prices={"search": TOOL_PRICE},
    )
    agent = AgentsAgent(name="diag", tools=[governed_tool(search)])

    with pytest.raises(BudgetExhausted) as exhausted:
        asyncio.run(run_governed(agent, "search everything", run_config=config))

    assert exhausted.value.dimension is BudgetDimension.COST
    assert len(ran) == 10
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (LIMIT, ZERO)


def test_an_unpriced_tool_in_an_answer_stops_every_call_of_it_before_any_starts() -> None:
    """A priced tool and an unpriced one asked for together: neither starts."""
    calls = [
        ToolCallPart("search", {"q": "x"}, tool_call_id="call_0"),
        ToolCallPart("page", {"q": "y"}, tool_call_id="call_1"),
    ]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=calls if len(messages) == 1 else [TextPart("done")])

    ran: list[str] = []
    agent: Agent[None, str] = Agent(FunctionModel(answer, model_name="free"))

    @agent.tool_plain
    def search(q: str) -> str:
        ran.append(q)
        return "ok"

    @agent.tool_plain
    def page(q: str) -> str:
        ran.append(q)
        return "ok"

    ctx = _money_run()
    capability = HarnessCapability(
        ctx, prices=PriceTable({"free": FREE}), tool_prices={"search": TOOL_PRICE}
    )

    with pytest.raises(UnknownToolPrice, match="page"):
        _bounded(agent.run("search", capabilities=[capability]))

    assert ran == []
    assert ctx.budget.snapshot().tool_calls == 0


def test_a_priced_pydantic_ai_answer_without_usage_is_refused_and_keeps_its_hold(
    loopback: LoopbackServer,
) -> None:
    """A server that reports no usage: a priced request is never silently free."""
    loopback.script(Reply(text="disk full", usage=False))
    ctx = _money_run()
    config = ModelClientConfig(max_attempts=1, timeout_seconds=10.0, base_url=loopback.openai_url)
    client = async_openai_client(config, api_key="test")
    agent: Agent[None, str] = Agent(
        OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    )
    capability = HarnessCapability(ctx, prices=PRICES)

    with pytest.raises(UsageNotReported):
        _bounded(agent.run("why?", capabilities=[capability]))

    (charge,) = capability.charges
    assert charge.cost is None
    assert ctx.budget.snapshot().cost_held == charge.held
    assert ctx.lifecycle.state is RunState.FAILED
    _bounded(client.close())


def test_a_priced_agents_answer_without_usage_is_refused_and_keeps_its_hold(
    loopback: LoopbackServer,
) -> None:
    """The SDK gives zeros for a usage the provider left out: priced, that is no usage."""
    loopback.script(Reply(text="disk full", usage=False))
    ctx = _money_run()
    config = _agents_config(ctx, loopback, prices=PRICES)

    with pytest.raises(UsageNotReported):
        asyncio.run(run_governed(AgentsAgent(name="diag"), "why?", run_config=config))

    (charge,) = model_charges(config)
    assert charge.cost is None
    assert ctx.budget.snapshot().cost_held == charge.held
    assert ctx.lifecycle.state is RunState.FAILED


def test_an_agents_answers_cached_input_is_priced_at_the_caches_price(
    loopback: LoopbackServer,
) -> None:
    loopback.script(
        Reply(text="disk full", input_tokens=400, cache_read_tokens=600, output_tokens=50)
    )
    ctx = _money_run()
    config = _agents_config(ctx, loopback, prices=PRICES)

    asyncio.run(run_governed(AgentsAgent(name="diag"), "why?", run_config=config))

    (charge,) = model_charges(config)
    expected = PRICE.cost(input_tokens=1_000, cache_read_tokens=600, output_tokens=50)
    assert charge.cost == expected < PRICE.cost(input_tokens=1_000, output_tokens=50)
    assert ctx.budget.snapshot().input_tokens == 1_000


def test_two_sub_agents_sharing_one_run_never_pass_its_money_limit() -> None:
    """Two pydantic-ai sub-agents, each with a capability of its own on one shared run, on two
    threads at once: each loops model request -> paid Tool call until the money runs out.
    Settled + held, read at every request and every Tool call of either, never passes the
    limit; the settled spend is the sum of what every answer the harness received and every
    Tool call cost; a request the run's end cut in flight stays held at its worst case (the
    provider may bill it), so what the provider billed is within settled + held, and that within
    the limit; and the run ends on COST for both."""
    price = ModelPrice(input_per_mtok=Decimal("2"), output_per_mtok=Decimal("8"))
    grep_price = Decimal("0.02")
    ctx = _money_run(model_calls=500, tool_calls=500, per_tool_calls=500)
    seen: list[Decimal] = []  # settled + held, at every request and Tool call of either agent
    billed: list[Decimal] = []  # what each answer cost, received by the harness or not
    greps: list[str] = []  # the Tool calls that ran
    start = threading.Barrier(2, timeout=BOUND)

    def in_use() -> Decimal:
        usage = ctx.budget.snapshot()
        return usage.cost + usage.cost_held

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(in_use())
        sent = _sent_max_tokens(info)
        output = min(2_000, sent if isinstance(sent, int) else 2_000)  # a model keeps to it
        billed.append(price.cost(input_tokens=10, output_tokens=output))
        call = ToolCallPart("grep", {"pattern": "error"}, tool_call_id=f"call_{len(messages)}")
        return ModelResponse(
            parts=[call], usage=RequestUsage(input_tokens=10, output_tokens=output)
        )

    def sub_agent(name: str) -> Agent[None, str]:
        agent: Agent[None, str] = Agent(FunctionModel(answer, model_name="sub"), name=name)

        @agent.tool_plain
        def grep(pattern: str) -> str:
            seen.append(in_use())
            greps.append(pattern)
            return f"no {pattern} in {name}'s logs"

        return agent

    endings: list[BudgetExhausted] = []
    capabilities: list[HarnessCapability] = []

    def run(name: str) -> None:
        capability = HarnessCapability(
            ctx,
            prices=PriceTable({"sub": price}),
            default_max_tokens=2_000,
            tool_prices={"grep": grep_price},
        )
        capabilities.append(capability)
        start.wait()
        try:
            _bounded(sub_agent(name).run("look", capabilities=[capability]))
        except BudgetExhausted as ended:
            endings.append(ended)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("logs", "metrics")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)

    assert len(endings) == 2
    assert {ended.dimension for ended in endings} == {BudgetDimension.COST}
    assert len(seen) > 20  # both agents ran many rounds before the money ran out
    assert max(seen) <= LIMIT
    usage = ctx.budget.snapshot()
    charges = [charge for capability in capabilities for charge in capability.charges]
    received = sum((c.cost for c in charges if c.cost is not None), ZERO)
    assert usage.cost == received + grep_price * len(greps)
    assert usage.cost_held == sum((c.held for c in charges if c.cost is None), ZERO)
    assert sum(billed, ZERO) + grep_price * len(greps) <= usage.cost + usage.cost_held <= LIMIT
