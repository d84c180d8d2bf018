"""Money budgets on the agent frameworks, and the side by side with pydantic-ai's ``cost_limit``.

The side by side runs the same pydantic-ai agent twice: its model is OpenAI's ``gpt-4o``, priced
by genai-prices' data, served by the loopback provider (``loopback.py``) over OpenAI's wire
format; every answer asks for one more tool call, so the agent keeps requesting, and every answer
reports a usage worth exactly $0.40 (40 input tokens and the output tokens that make up the rest,
computed from genai-prices' price), cut to the ``max_completion_tokens`` the request allows, as a
real model stops there. The limit is $1.00.

Measured (the figures the assertions below pin):

- pydantic-ai's ``UsageLimits(cost_limit=Decimal("1.00"))`` compares the spend so far before a
  request and the response's cost after it: three requests are sent and answered, the run raises
  ``UsageLimitExceeded`` with **$1.20 spent** -- $0.20 past its limit, paid for.
- ``HarnessCapability(ctx, prices=GenaiPrices())`` with ``BudgetLimits(cost=Decimal("1.00"))``
  holds each request's worst case before it is sent: settled + held, read by the provider as
  each request arrives, is at most $1.00 every time; the third request goes out with its
  ``max_tokens`` lowered to what the $0.20 left can pay for, and the run ends
  ``BUDGET_EXHAUSTED`` on ``COST`` with the spend at most $1.00.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

from diagnosis_harness.integrations import ModelClientConfig, async_openai_client
from diagnosis_harness.pricing import GenaiPrices
from racing import BOUND

from .loopback import LoopbackServer, Reply, ToolCall

if TYPE_CHECKING:
    from collections.abc import Coroutine

    import openai

MODEL = "gpt-4o"
PRICES = GenaiPrices()
PRICE = PRICES.model_price(MODEL, provider="openai")
WORTH = Decimal("0.40")  # what every answer's usage costs, by genai-prices' data
LIMIT = Decimal("1.00")
INPUT_TOKENS = 40  # fewer than the bytes of any request the agent sends: a usage it can report
# The output tokens that make the answer worth WORTH exactly (39,990 for gpt-4o's $2.50 / $10).
OUTPUT_TOKENS = int(
    (WORTH - PRICE.cost(input_tokens=INPUT_TOKENS, output_tokens=0))
    / PRICE.output_per_mtok
    * 1_000_000
)
MAX_TOKENS = 40_000  # the agent's own max_tokens: every $0.40 answer fits in it
ANSWERS = 10  # more tool-calling answers than either run can pay for


def _bounded(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, BOUND)

    return asyncio.run(bounded())


def _paid_answers(loopback: LoopbackServer) -> None:
    """Every answer asks for one more tool call (a new ID each), its usage worth $0.40."""
    loopback.script(
        *(
            Reply(
                text="",
                tool_calls=(ToolCall("logs", {"q": f"q{i}"}, id=f"call_{i}"),),
                input_tokens=INPUT_TOKENS,
                output_tokens=OUTPUT_TOKENS,
                within_max_tokens=True,
            )
            for i in range(ANSWERS)
        )
    )


def _looping_agent(loopback: LoopbackServer) -> tuple[Agent[None, str], openai.AsyncOpenAI]:
    """The one agent of the side by side: gpt-4o on the loopback provider, a tool it keeps
    calling, ``max_tokens`` of its own."""
    config = ModelClientConfig(max_attempts=1, timeout_seconds=10.0, base_url=loopback.openai_url)
    client = async_openai_client(config, api_key="test")
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    agent: Agent[None, str] = Agent(model, model_settings={"max_tokens": MAX_TOKENS})

    @agent.tool_plain
    def logs(q: str) -> str:
        return f"no errors for {q}"

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
