"""What a person reads when an agent run ends, the same whichever adapter ran the agent.

The same scenarios through pydantic-ai (``HarnessCapability``, its own ``FunctionModel``) and
openai-agents (``harness_run_config``, the real ``openai`` client over HTTP to the loopback
provider): the per-Tool limit's message names the TOOL boundary, though the framework's next
Model call is what raises it; the run's reason for a success or a failure is worded once; the
attempts journal names each Tool. About 1 s in all (one real 0.2 s deadline).
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai needs Python 3.11+")

from agents import Agent as SdkAgent
from agents import MaxTurnsExceeded, function_tool, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider
from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from diagnosis_harness import (
    BudgetExhausted,
    BudgetLimits,
    HarnessRetryExecutor,
    RunContext,
    RunTimedOut,
)
from diagnosis_harness.integrations import ModelClientConfig, async_openai_client
from diagnosis_harness.integrations.openai_agents import (
    governed_tool,
    harness_run_config,
    run_governed,
)
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability
from racing import BOUND

from .loopback import LoopbackServer, Reply, ToolCall, serve

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agents import RunConfig

set_tracing_disabled(True)  # the SDK would otherwise try to export traces to OpenAI

LIMIT_MESSAGE = (
    "TOOL boundary refused: run is BUDGET_EXHAUSTED "
    "(per_tool_calls limit 3 for Tool 'lookup' reached: call 4 refused)"
)
REFUSED_JOURNAL = (
    "harness retry [tool_call] Tool 'lookup': attempt 1 failed (BUDGET_EXHAUSTED); "
    "stop: NOT_RETRYABLE"
)
SUCCEEDED_JOURNAL = "harness retry [tool_call] Tool 'lookup': attempt 1 succeeded; stop: SUCCEEDED"


def _run(timeout: float = 60) -> RunContext:
    limits = BudgetLimits(
        model_calls=10,
        tool_calls=10,
        per_tool_calls=3,
        input_tokens=10_000,
        output_tokens=10_000,
        total_tokens=20_000,
        run_bytes=100_000,
    )
    return RunContext.create(session_id="s-1", run_id="run-7", limits=limits, timeout=timeout)


def _journal(executor: HarnessRetryExecutor) -> list[str]:
    return [execution.describe() for execution in executor.executions]


@pytest.fixture
def server(direct_connections: None) -> Iterator[LoopbackServer]:
    with serve() as loopback:
        yield loopback


# -- pydantic-ai ---------------------------------------------------------------------------------


def _pydantic_agent(first: list[TextPart | ToolCallPart]) -> Agent[None, str]:
    """A model that answers ``first`` to the prompt, then ``"diagnosed"``."""

    def respond(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=list(first) if len(messages) == 1 else [TextPart("diagnosed")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def lookup(q: str) -> str:
        return f"found {q}"

    return agent


def _lookups(n: int) -> list[TextPart | ToolCallPart]:
    return [ToolCallPart("lookup", {"q": str(i)}, tool_call_id=f"call_{i}") for i in range(n)]


def test_pydantic_ai_a_per_tool_limit_names_the_tool_boundary_and_the_tool() -> None:
    ctx = _run()
    capability = HarnessCapability(ctx)
    agent = _pydantic_agent(_lookups(4))
    with capture_run_messages() as messages, pytest.raises(BudgetExhausted) as raised:
        asyncio.run(asyncio.wait_for(agent.run("why?", capabilities=[capability]), BOUND))
    assert str(raised.value) == LIMIT_MESSAGE
    assert sorted(_journal(capability.executor)) == [REFUSED_JOURNAL] + [SUCCEEDED_JOURNAL] * 3
    # What the framework was told for the refused call: the run's ending, worded the same way.
    told = [
        str(getattr(part, "content", ""))
        for message in messages
        for part in getattr(message, "parts", ())
        if "refused this tool call" in str(getattr(part, "content", ""))
    ]
    assert told == [
        "the diagnosis run refused this tool call: TOOL boundary refused: run is BUDGET_EXHAUSTED "
        "(per_tool_calls limit 3 for Tool 'lookup' reached: call 4 refused)"
    ]


def test_pydantic_ai_success_and_failure_reasons() -> None:
    ctx = _run()
    asyncio.run(
        _pydantic_agent([TextPart("diagnosed")]).run("?", capabilities=[HarnessCapability(ctx)])
    )
    assert ctx.lifecycle.termination is not None
    assert ctx.lifecycle.termination.reason == "the agent run produced its final output"

    def broken(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        raise ValueError("the model's answer is garbage")

    failed = _run()
    with pytest.raises(ValueError, match="garbage"):
        asyncio.run(Agent(FunctionModel(broken)).run("?", capabilities=[HarnessCapability(failed)]))
    assert failed.lifecycle.termination is not None
    assert failed.lifecycle.termination.reason == (
        "the agent run raised ValueError: the model's answer is garbage"
    )


def test_pydantic_ai_a_deadline_passed_during_a_tool_says_how_far_past_at_the_tool() -> None:
    ctx = _run(timeout=0.2)
    agent: Agent[None, str] = Agent(
        FunctionModel(
            lambda messages, _info: ModelResponse(
                parts=_lookups(1) if len(messages) == 1 else [TextPart("late")]
            )
        )
    )

    @agent.tool_plain
    async def lookup(q: str) -> str:
        await asyncio.sleep(0.4)  # a tool that outlives the run's deadline
        return f"found {q}"

    with pytest.raises(RunTimedOut) as raised:
        asyncio.run(asyncio.wait_for(agent.run("?", capabilities=[HarnessCapability(ctx)]), BOUND))
    reason = raised.value.termination.reason
    assert re.fullmatch(
        r"deadline exceeded: \d+\.\d+ s past it when the TOOL boundary checked", reason
    )
    assert "ns" not in reason.split()
    assert str(raised.value).startswith(
        "TOOL boundary refused: run is TIMED_OUT (deadline exceeded"
    )


# -- openai-agents: the same endings, the same words ---------------------------------------------


def _config(
    ctx: RunContext, server: LoopbackServer, executor: HarnessRetryExecutor | None = None
) -> RunConfig:
    client = async_openai_client(ModelClientConfig(base_url=server.openai_url), api_key="test")
    provider = OpenAIProvider(openai_client=client, use_responses=False)
    return harness_run_config(
        ctx, model_provider=provider, model="loopback-model", executor=executor
    )


def _sdk_agent() -> SdkAgent[Any]:
    async def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    return SdkAgent(name="diag", tools=[governed_tool(function_tool(lookup))])


def test_openai_agents_a_per_tool_limit_reads_as_through_pydantic_ai(
    server: LoopbackServer,
) -> None:
    ctx = _run()
    executor = HarnessRetryExecutor(ctx)
    config = _config(ctx, server, executor)
    calls = tuple(ToolCall("lookup", {"q": str(i)}, f"call_{i}") for i in range(4))
    server.script(Reply(text="", tool_calls=calls))
    with pytest.raises(BudgetExhausted) as raised:
        asyncio.run(run_governed(_sdk_agent(), "why?", run_config=config))
    assert str(raised.value) == LIMIT_MESSAGE
    tools = [line for line in _journal(executor) if "[tool_call]" in line]
    assert sorted(tools) == [REFUSED_JOURNAL] + [SUCCEEDED_JOURNAL] * 3


def test_openai_agents_success_and_failure_reasons_read_as_through_pydantic_ai(
    server: LoopbackServer,
) -> None:
    ctx = _run()
    server.script(Reply(text="diagnosed"))
    asyncio.run(run_governed(_sdk_agent(), "?", run_config=_config(ctx, server)))
    assert ctx.lifecycle.termination is not None
    assert ctx.lifecycle.termination.reason == "the agent run produced its final output"

    failed = _run()
    server.default = Reply(text="", tool_calls=(ToolCall("lookup", {"q": "x"}, "call_x"),))
    with pytest.raises(MaxTurnsExceeded):
        asyncio.run(
            run_governed(_sdk_agent(), "?", run_config=_config(failed, server), max_turns=1)
        )
    assert failed.lifecycle.termination is not None
    assert failed.lifecycle.termination.reason.startswith("the agent run raised MaxTurnsExceeded: ")
