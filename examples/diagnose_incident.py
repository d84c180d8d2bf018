"""An incident-diagnosis agent on pydantic-ai, governed by one ``RunContext`` per incident.

    python examples/diagnose_incident.py             # offline: scripted model and provider
    OPENAI_API_KEY=... python examples/diagnose_incident.py   # a real OpenAI-compatible endpoint

Needs ``pip install 'diagnosis-harness[pydantic-ai,openai]'`` (pydantic-ai: Python 3.11+).

Each incident is one run with a deadline, budgets and a per-tool limit (``logs`` at most twice).
It has two steps, each with its own retry policy (the run's defaults):

1. **Triage** -- one governed Chat Completions call (``AsyncGovernedOpenAI``, policy
   ``intent_router``: up to 2 attempts on technical failures). Only the harness retries it: the
   SDK client is built with ``max_retries=0``, and every attempt is one Model call reserved and
   one entry in the call's attempts journal.
2. **Investigation** -- a pydantic-ai agent with three tools (``logs``, ``metrics``,
   ``deploys``) under ``HarnessCapability(ctx)``: each model request reserves one Model call and
   records its usage; each tool call is reserved (per-tool limit included) and runs under the
   ``tool_call`` policy, journaled in ``capability.executor``. The capability does not retry a
   model request (the ``diagnosis_agent`` policy allows one attempt) and keeps no journal of
   them: the example prints how many it reserved, one request each.

Offline (no ``OPENAI_API_KEY``, or ``--offline``), three incidents show a model retry (the
triage provider answers 503 once), the per-tool limit (a third ``logs`` call is refused before
it runs) and the deadline (a model request in flight when the run's 1 s deadline passes is
cut). The agent's model is pydantic-ai's ``FunctionModel``, scripted; the triage call goes
through the real ``openai`` client to a scripted transport in this process (httpx's
``MockTransport``).

With ``OPENAI_API_KEY`` set, one incident runs against ``OPENAI_BASE_URL`` (the SDK's default
when unset) with the model ``OPENAI_MODEL`` (default ``gpt-4o-mini``): the same steps, limits
and printout; what the model asks for is up to the model.

For every incident it prints the attempts journal, the Model calls reserved -- exactly the
requests sent to the provider, there being no hidden retry -- and the run's termination.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

try:
    import httpx2
    from pydantic_ai import Agent, capture_run_messages
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import RequestUsage
except ImportError as missing:  # pragma: no cover - a message for a reader without the extras
    sys.exit(
        f"this example needs pydantic-ai and openai ({missing}): "
        "pip install 'diagnosis-harness[pydantic-ai,openai]' (Python 3.11+)"
    )

from diagnosis_harness import BudgetExhausted, BudgetLimits, RunContext, RunTerminated
from diagnosis_harness.integrations import (
    AsyncGovernedOpenAI,
    ModelClientConfig,
    async_openai_client,
)
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability

if TYPE_CHECKING:
    import openai
    from pydantic_ai.models import Model

    from diagnosis_harness import HarnessRetryExecutor

LOGS_PER_RUN = 2  # the per-tool limit every incident runs under

# The incident's evidence, as the three tools return it.
LOGS = {
    "checkout": "10:02 ERROR upstream timeout (pool exhausted) x 412",
    "payments": "10:03 WARN retrying card authorisation x 37",
    "inventory": "no errors since 09:00",
}
METRICS = {"checkout": {"p99_ms": 840, "p50_ms": 120, "error_rate_pct": 12}}
DEPLOYS = {"checkout": ["v42 at 10:01 (connection pool 50 -> 5)", "v41 at 08:15"]}

TRIAGE_PROMPT = "Classify this incident in one word (latency, errors, outage): {incident}"
AGENT_PROMPT = (
    "Incident ({category}): {incident}. Use the logs, metrics and deploys tools, "
    "then state the most likely cause and the fix in one sentence."
)


# -- the agent: three tools over the incident's evidence ------------------------------------------


def build_agent(model: Model, say: Callable[[str], None]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, system_prompt="You diagnose production incidents.")

    @agent.tool_plain
    def logs(service: str) -> str:
        """The recent error log lines of a service."""
        say(f"  tool logs({service!r}) ran")
        return LOGS.get(service, "no such service")

    @agent.tool_plain
    def metrics(service: str) -> dict[str, int]:
        """The latency and error metrics of a service."""
        say(f"  tool metrics({service!r}) ran")
        return METRICS.get(service, {})

    @agent.tool_plain
    def deploys(service: str) -> list[str]:
        """The deploy history of a service, newest first."""
        say(f"  tool deploys({service!r}) ran")
        return DEPLOYS.get(service, [])

    return agent


# -- one incident: a run, triage, investigation, the journal and the termination --------------


@dataclass(frozen=True)
class Incident:
    """One incident to diagnose: its run's deadline, the agent's model, the triage client."""

    title: str
    timeout: float
    model: Model
    client: openai.AsyncOpenAI
    model_name: str
    run_id: str


def limits() -> BudgetLimits:
    return BudgetLimits(
        model_calls=8,
        tool_calls=8,
        per_tool_calls=4,
        per_tool_overrides={"logs": LOGS_PER_RUN},
        input_tokens=50_000,
        output_tokens=5_000,
        total_tokens=55_000,
        run_bytes=64_000,
    )


async def diagnose(incident: Incident) -> RunContext:
    """Run one incident and print what happened; the run's termination is printed last."""
    say = print
    budget = limits()
    ctx = RunContext.create(
        session_id="incident-4711", run_id=incident.run_id, limits=budget, timeout=incident.timeout
    )
    say(f"== {incident.run_id}: {incident.title}")
    say(
        f"deadline {incident.timeout:g} s; limits: {budget.model_calls} Model calls, "
        f"{budget.tool_calls} Tool calls, logs at most {LOGS_PER_RUN} per run"
    )
    triage = AsyncGovernedOpenAI(incident.client, ctx, policy="intent_router")
    capability = HarnessCapability(ctx)
    agent = build_agent(incident.model, say)
    with capture_run_messages() as messages:
        try:
            answer = await triage.create(
                model=incident.model_name,
                messages=[
                    {"role": "user", "content": TRIAGE_PROMPT.format(incident=incident.title)}
                ],
            )
            category = (answer.choices[0].message.content or "unknown").strip()
            say(f"  triage: {category!r}")
            prompt = AGENT_PROMPT.format(category=category, incident=incident.title)
            result = await agent.run(prompt, capabilities=[capability])
            say(f"  output: {result.output}")
        except BudgetExhausted as ended:
            dimension = "?" if ended.dimension is None else ended.dimension.name
            say(f"  the harness ended the run: BudgetExhausted ({dimension})")
        except RunTerminated as ended:
            say(f"  the harness ended the run: {type(ended).__name__}")
        except Exception as error:  # the run records FAILED; the example shows it and goes on
            say(f"  failed: {type(error).__name__}: {error}")
            ctx.lifecycle.fail(f"{type(error).__name__}: {error}"[:200])
    print_journal(ctx, triage.executor, capability.executor, messages)
    return ctx


def print_journal(
    ctx: RunContext,
    triage: HarnessRetryExecutor,
    tools: HarnessRetryExecutor,
    messages: list[ModelMessage],
) -> None:
    say = print
    say("attempts journal:")
    for execution in triage.executions:
        say(f"  triage  {execution.describe()}")
    triage_attempts = len(triage.attempts)
    used = ctx.budget.snapshot()
    agent_requests = used.model_calls - triage_attempts
    answered = sum(isinstance(message, ModelResponse) for message in messages)
    say(
        f"  agent   {agent_requests} model request(s), one attempt each, "
        f"{answered} answered (HarnessCapability reserves each; it does not retry them)"
    )
    for execution in tools.executions:
        say(f"  tools   {execution.describe()}")
    say(
        f"model calls reserved: {used.model_calls} "
        f"(triage attempts {triage_attempts} + agent requests {agent_requests}); "
        f"tool calls: {dict(used.per_tool_calls)}; "
        f"tokens: {used.input_tokens} in, {used.output_tokens} out"
    )
    termination = ctx.lifecycle.termination
    if termination is None:  # every path above ends the run; this is a reader's safety net
        say("termination: none (the run is still RUNNING)")
        return
    say(f"termination: {termination.state.name}: {termination.reason}")
    say("")


# -- offline: a scripted provider for triage, a scripted model for the agent ------------------


def scripted_provider(statuses: list[int], category: str) -> httpx2.AsyncClient:
    """A Chat Completions endpoint in this process: ``statuses`` first, then ``category``."""
    queue = list(statuses)

    def answer(request: httpx2.Request) -> httpx2.Response:
        status = queue.pop(0) if queue else 200
        if status != 200:
            error = {"error": {"message": f"scripted {status}", "type": "server_error"}}
            return httpx2.Response(status, json=error)
        model = json.loads(request.content).get("model", "scripted")
        return httpx2.Response(
            200,
            json={
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": category},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 30, "completion_tokens": 1, "total_tokens": 31},
            },
        )

    return httpx2.AsyncClient(transport=httpx2.MockTransport(answer))


Step = Callable[[], ModelResponse]


def scripted_model(*steps: Step | None) -> FunctionModel:
    """The agent's model: answer ``steps[n]`` to its ``n``-th request; ``None`` never answers."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:  # noqa: ARG001 - FunctionModel's signature
        step = steps[sum(isinstance(message, ModelResponse) for message in messages)]
        if step is None:
            await asyncio.Event().wait()  # a provider that stalls: only the run's end stops it
        assert step is not None
        return step()

    return FunctionModel(respond)


def ask(*calls: tuple[str, str]) -> Step:
    def step() -> ModelResponse:
        parts = [
            ToolCallPart(tool, {"service": service}, tool_call_id=f"call_{tool}_{service}")
            for tool, service in calls
        ]
        return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=200, output_tokens=30))

    return step


def conclude(text: str) -> Step:
    def step() -> ModelResponse:
        return ModelResponse(
            parts=[TextPart(text)], usage=RequestUsage(input_tokens=600, output_tokens=25)
        )

    return step


def offline_client(statuses: list[int], category: str) -> openai.AsyncOpenAI:
    config = ModelClientConfig(base_url="http://scripted.invalid/v1")
    return async_openai_client(
        config, api_key="offline", http_client=scripted_provider(statuses, category)
    )


async def offline() -> list[RunContext]:
    fix = "checkout v42 shrank its connection pool from 50 to 5: roll back to v41"
    incidents = [
        Incident(
            "checkout p99 at 840 ms (a model retry)",
            timeout=60,
            model=scripted_model(
                ask(("logs", "checkout"), ("metrics", "checkout"), ("deploys", "checkout")),
                conclude(fix),
            ),
            client=offline_client([503], "latency"),
            model_name="scripted",
            run_id="incident-1",
        ),
        Incident(
            "checkout errors (the per-tool limit)",
            timeout=60,
            model=scripted_model(
                ask(("logs", "checkout"), ("deploys", "checkout")),
                ask(("logs", "payments")),
                ask(("logs", "inventory")),
                conclude("never reached"),
            ),
            client=offline_client([], "errors"),
            model_name="scripted",
            run_id="incident-2",
        ),
        Incident(
            "checkout down (the deadline)",
            timeout=1.0,
            model=scripted_model(ask(("deploys", "checkout")), None),
            client=offline_client([], "outage"),
            model_name="scripted",
            run_id="incident-3",
        ),
    ]
    runs = []
    for incident in incidents:
        runs.append(await diagnose(incident))
        await incident.client.close()
    return runs


# -- live: a real OpenAI-compatible endpoint -------------------------------------------------


async def live(model_name: str) -> list[RunContext]:
    # max_retries=0: only the harness retries; OPENAI_API_KEY and OPENAI_BASE_URL are the SDK's.
    client = async_openai_client(ModelClientConfig(timeout_seconds=30))
    model = OpenAIChatModel(model_name, provider=OpenAIProvider(openai_client=client))
    print(f"endpoint {client.base_url}, model {model_name}")
    incident = Incident(
        "checkout p99 at 840 ms since 10:02",
        timeout=120,
        model=model,
        client=client,
        model_name=model_name,
        run_id="incident-1",
    )
    try:
        return [await diagnose(incident)]
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--offline",
        action="store_true",
        help="use the scripted model and provider even when OPENAI_API_KEY is set",
    )
    args = parser.parse_args(argv)
    if os.environ.get("OPENAI_API_KEY") and not args.offline:
        runs = asyncio.run(live(os.environ.get("OPENAI_MODEL") or "gpt-4o-mini"))
    else:
        runs = asyncio.run(offline())
    return 0 if all(ctx.lifecycle.termination is not None for ctx in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
