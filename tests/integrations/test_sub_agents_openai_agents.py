"""Sub-agents of an openai-agents agent on child runs: ``governed_agent_tool`` (``as_tool``).

The real SDK and its Chat Completions model over real HTTP to the loopback provider, which
scripts each request's answer -- the parent's, then its sub-agents' -- and holds the requests a
cancel must cut. No sleep.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from agents import Agent, FunctionTool, function_tool, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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
from diagnosis_harness.integrations import ModelClientConfig, async_openai_client
from diagnosis_harness.integrations.openai_agents import (
    governed_agent_tool,
    governed_tool,
    harness_run_config,
    model_charges,
    run_governed,
)
from diagnosis_harness.integrations.otel import PARENT_RUN_ID, RUN_ID, HarnessTracing
from diagnosis_harness.pricing import ModelPrice, PriceTable
from racing import BOUND

from .loopback import LoopbackServer, Reply, ToolCall

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from agents import RunConfig

set_tracing_disabled(True)  # the SDK would otherwise try to export traces to OpenAI

OPERATION = "gen_ai.operation.name"
ROUNDS = 10  # rounds of the parallel delegations' race
MODEL = "loopback-model"
GENEROUS: dict[str, int] = {
    "model_calls": 50,
    "tool_calls": 50,
    "per_tool_calls": 50,
    "input_tokens": 100_000,
    "output_tokens": 100_000,
    "total_tokens": 200_000,
    "run_bytes": 100_000,
}


def _limits(**overrides: Any) -> BudgetLimits:
    return BudgetLimits(**{**GENEROUS, **overrides})


def _parent(**overrides: Any) -> RunContext:
    return RunContext.create(
        session_id="s-1",
        run_id="diagnosis",
        limits=_limits(**overrides),
        timeout=60,
        clock=ManualClock(),
    )


def _config(ctx: RunContext, server: LoopbackServer, **kw: Any) -> RunConfig:
    client = async_openai_client(ModelClientConfig(base_url=server.openai_url), api_key="test")
    provider = OpenAIProvider(openai_client=client, use_responses=False)
    return harness_run_config(ctx, model_provider=provider, model=MODEL, **kw)


def _bounded(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, BOUND)

    return asyncio.run(bounded())


class _Searches:
    """A governed async ``search`` tool that counts its starts by the sub-agent's run."""

    def __init__(self) -> None:
        self.started: Counter[str] = Counter()

    def tool(self, area: str) -> FunctionTool:
        async def search(q: str) -> str:
            """Search the area."""
            self.started[area] += 1
            await asyncio.sleep(0)  # a yield: lets the other parallel calls interleave
            return f"hit {q}"

        return governed_tool(function_tool(search))


def _searches(n: int, prefix: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall("search", {"q": str(i)}, f"{prefix}_s{i}") for i in range(n))


def _ask(area: str) -> ToolCall:
    return ToolCall(f"ask_{area}", {"input": f"dig into {area}"}, f"call_{area}")


def _sub_agent_tool(area: str, searches: _Searches, **kw: Any) -> FunctionTool:
    agent = Agent(
        name=f"{area}_agent", instructions=f"Dig into {area}.", tools=[searches.tool(area)]
    )
    return governed_agent_tool(
        agent,
        tool_name=f"ask_{area}",
        tool_description=f"Ask the {area} agent.",
        run_id=lambda _tool_context: area,
        **kw,
    )


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_two_parallel_agent_tools_run_exactly_the_parent_s_nine_tool_calls_neither_past_six(
    loopback: LoopbackServer, round_: int
) -> None:
    """The issue's figure through ``as_tool``: parent tool limit 9, two sub-agents capped at 6
    each asking for 8 searches at once, in parallel: 2 delegations + 7 searches."""
    parent = _parent(tool_calls=9)
    searches = _Searches()
    child_limits = _limits(tool_calls=6)
    agent = Agent(
        name="diagnosis",
        tools=[
            _sub_agent_tool("logs", searches, limits=child_limits),
            _sub_agent_tool("metrics", searches, limits=child_limits),
        ],
    )
    loopback.script(
        Reply(text="", tool_calls=(_ask("logs"), _ask("metrics"))),
        Reply(text="", tool_calls=_searches(8, f"r{round_}a")),
        Reply(text="", tool_calls=_searches(8, f"r{round_}b")),
    )

    with pytest.raises(BudgetExhausted) as refused:
        _bounded(run_governed(agent, "why?", run_config=_config(parent, loopback)))

    assert refused.value.termination is parent.lifecycle.termination
    usage = parent.budget.snapshot()
    assert usage.tool_calls == 9
    assert usage.exhausted is BudgetDimension.TOOL_CALLS
    counted = {area: child.tool_calls for area, child in usage.children.items()}
    assert set(counted) == {"logs", "metrics"}
    assert all(n <= 6 for n in counted.values()), counted
    assert sum(counted.values()) == 7
    assert all(searches.started[area] <= counted[area] for area in counted)
    # Nothing was asked of the provider after the parent's end: its request and the children's.
    assert loopback.count == 3


def test_a_delegation_runs_the_sub_agent_on_a_child_run_and_answers_its_output(
    loopback: LoopbackServer,
) -> None:
    price = ModelPrice(input_per_mtok=Decimal("2"), output_per_mtok=Decimal("8"))
    parent = _parent(cost=Decimal("1"))
    searches = _Searches()
    logs = Agent(name="logs_agent", tools=[searches.tool("logs")])
    agent = Agent(name="diagnosis", tools=[governed_agent_tool(logs, tool_name="ask_logs")])
    loopback.script(
        Reply(text="", tool_calls=(_ask("logs"),), input_tokens=100, output_tokens=10),
        Reply(text="disk full on db-1", input_tokens=300, output_tokens=30),
        Reply(text="done", input_tokens=200, output_tokens=20),
    )
    # The delegation itself costs nothing: what its sub-agent spends is counted in full.
    config = _config(
        parent, loopback, prices=PriceTable({MODEL: price}), tool_prices={"ask_logs": Decimal(0)}
    )

    result = _bounded(run_governed(agent, "why?", run_config=config))

    assert result.final_output == "done"
    child_id = "diagnosis.call_logs"  # the default: the parent's run and the SDK's call ID
    usage = parent.budget.snapshot()
    child = usage.children[child_id]
    assert (usage.model_calls, child.model_calls) == (3, 1)
    assert (usage.input_tokens, child.input_tokens) == (600, 300)
    assert parent.lifecycle.state is RunState.SUCCESS
    # The parent's model got the sub-agent's output as the tool's answer.
    sent = loopback.requests[2].body["messages"]
    assert any(m.get("content") == "disk full on db-1" for m in sent if m.get("role") == "tool")
    # The parent's journal holds the sub-agent's priced request, tagged with its run.
    journal = [(charge.run_id, charge.cost) for charge in model_charges(config)]
    assert journal == [
        ("diagnosis", price.cost(input_tokens=100, output_tokens=10)),
        (child_id, price.cost(input_tokens=300, output_tokens=30)),
        ("diagnosis", price.cost(input_tokens=200, output_tokens=20)),
    ]
    assert usage.cost == sum(cost for _, cost in journal if cost is not None)
    assert child.cost == journal[1][1]


def test_a_sub_agent_past_its_own_cap_is_told_to_the_parent_s_model_and_the_parent_goes_on(
    loopback: LoopbackServer,
) -> None:
    parent = _parent()
    searches = _Searches()
    agent = Agent(
        name="diagnosis", tools=[_sub_agent_tool("logs", searches, limits=_limits(tool_calls=1))]
    )
    loopback.script(
        Reply(text="", tool_calls=(_ask("logs"),)),
        Reply(text="", tool_calls=_searches(2, "s")),
        Reply(text="done"),
    )

    result = _bounded(run_governed(agent, "why?", run_config=_config(parent, loopback)))

    assert result.final_output == "done"
    assert parent.lifecycle.state is RunState.SUCCESS
    child = parent.budget.snapshot().children["logs"]
    assert child.exhausted is BudgetDimension.TOOL_CALLS
    assert searches.started["logs"] == 1
    told = [m["content"] for m in loopback.requests[2].body["messages"] if m.get("role") == "tool"]
    assert len(told) == 1
    assert told[0].startswith("sub-agent run 'logs' ended BUDGET_EXHAUSTED: ")


def test_a_parent_cancelled_while_three_agent_tools_are_mid_request_cuts_every_one(
    loopback: LoopbackServer,
) -> None:
    stall = threading.Event()  # never set: only a cut ends the sub-agents' requests
    areas = ["logs", "metrics", "traces"]
    loopback.script(
        Reply(text="", tool_calls=tuple(_ask(area) for area in areas)),
        *(Reply(stall=stall) for _ in areas),
    )
    parent = _parent()
    searches = _Searches()
    agent = Agent(name="diagnosis", tools=[_sub_agent_tool(area, searches) for area in areas])

    def cancel_when_all_are_mid_request() -> None:
        loopback.wait_for_stalled(3, timeout=BOUND)
        assert parent.cancellation.cancel(CancellationReason.USER_REQUESTED)

    canceller = threading.Thread(target=cancel_when_all_are_mid_request, daemon=True)
    canceller.start()
    with pytest.raises(RunCancelled) as cancelled:
        _bounded(run_governed(agent, "why?", run_config=_config(parent, loopback)))
    canceller.join(BOUND)

    assert cancelled.value.termination is parent.lifecycle.termination
    assert loopback.count == 4
    assert loopback.stalled == 3  # cut in flight: the provider still holds all three
    usage = parent.budget.snapshot()
    assert set(usage.children) == set(areas)
    assert all(child.model_calls == 1 for child in usage.children.values())
    assert not canceller.is_alive()


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["run_config", "failure_error_function"])
def test_what_the_harness_sets_itself_is_refused(key: str) -> None:
    with pytest.raises(TypeError, match=f"governed_agent_tool sets {key} itself"):
        governed_agent_tool(Agent(name="logs"), **{key: None})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"run_id": "logs"}, "run_id must be None or a callable"),
        ({"limits": {"tool_calls": 6}}, "limits must be BudgetLimits or None"),
        ({"timeout": -1}, "timeout"),
        ({"tool_prices": {"search": 1.5}}, "search"),
    ],
)
def test_bad_arguments_are_refused_when_the_tool_is_made(kw: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        governed_agent_tool(Agent(name="logs"), **kw)


def test_the_agent_must_be_an_sdk_agent() -> None:
    with pytest.raises(TypeError, match=r"agent must be an agents\.Agent"):
        governed_agent_tool("logs")  # type: ignore[arg-type]  # the wrong type, on purpose


# -- spans: the sub-agent's invoke_agent under the parent's execute_tool -------------------------


def _named(spans: tuple[ReadableSpan, ...], operation: str) -> list[ReadableSpan]:
    return [
        span for span in spans if (span.attributes or {}).get("gen_ai.operation.name") == operation
    ]


def _parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_the_sub_agent_s_spans_nest_under_the_parent_s_tool_call(loopback: LoopbackServer) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("diagnosis_harness.tests")
    parent = _parent()
    searches = _Searches()
    agent = Agent(name="diagnosis", tools=[_sub_agent_tool("logs", searches)])
    loopback.script(
        Reply(text="", tool_calls=(_ask("logs"),)),
        Reply(text="", tool_calls=_searches(1, "s")),
        Reply(text="disk full"),
        Reply(text="done"),
    )

    with HarnessTracing(tracer).run(parent, "diagnosis") as tracing:
        config = _config(parent, loopback, tracing=tracing)
        assert _bounded(run_governed(agent, "why?", run_config=config)).final_output == "done"
    provider.shutdown()

    spans = exporter.get_finished_spans()
    runs = {(span.attributes or {})[RUN_ID]: span for span in _named(spans, "invoke_agent")}
    assert set(runs) == {"diagnosis", "logs"}
    root, child = runs["diagnosis"], runs["logs"]
    [delegation] = [
        span for span in _named(spans, "execute_tool") if span.name == "execute_tool ask_logs"
    ]
    [search] = [
        span for span in _named(spans, "execute_tool") if span.name == "execute_tool search"
    ]
    assert _parent_id(delegation) == root.context.span_id
    assert _parent_id(child) == delegation.context.span_id
    assert _parent_id(search) == child.context.span_id
    chats = _named(spans, "chat")
    assert sorted(_parent_id(span) == child.context.span_id for span in chats) == [
        False,
        False,
        True,
        True,
    ]
    assert (child.attributes or {})[PARENT_RUN_ID] == "diagnosis"
    assert PARENT_RUN_ID not in (root.attributes or {})
    assert (child.attributes or {})["diagnosis_harness.termination.state"] == "SUCCESS"
