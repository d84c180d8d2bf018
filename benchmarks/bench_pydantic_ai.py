"""The pydantic-ai capability's cost per agent step, as a ratio timed in the same run.

One agent run is two steps: a ``FunctionModel`` answer asking for three parallel tool calls (logs,
metrics, deploy history), then a final text answer. The baseline runs the agent bare; the
candidate runs it with ``HarnessCapability`` on a fresh ``RunContext`` (built inside the timed
loop: a run is part of what a governed agent run costs), so every step reserves a Model call,
records its usage, and every tool call is checked, reserved, run under the Tool policy and its
result's bytes counted. The ratio of the means per step is the harness's cost; the target is the
issue's: within 10 % of the bare agent. Two more sides show what pydantic-ai itself charges, which
the harness's figure includes: the same agent with a capability that overrides no hook (any
capability given per run: pydantic-ai rebuilds and re-sorts the run's capabilities), and with one
that overrides the same hooks as ``HarnessCapability`` but does nothing in them (pydantic-ai
dispatches every overridden hook through its capability chain, replacing its run context for
each). What is left above the last is the harness's own work.

Timed with pyperf (``_ratio.py``): each side runs ``loops`` agent runs inside one event loop per
value, timed in CPU seconds of the process (``time.process_time``): every tool here is async, so
the process's CPU time is the agent's, and it is what two cores shared by other jobs distort
least. Run: ``tox -e bench`` (or ``python benchmarks/bench_pydantic_ai.py [--quick] [pyperf
options]``). Writes ``benchmarks/results/pydantic_ai.json``, ``pydantic_ai.md`` and pyperf's own
``pydantic_ai.pyperf.json``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from _ratio import Ratio, Session
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from diagnosis_harness import BudgetLimits, RunContext
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

TARGET = 1.10  # the figure: the harness's cost per step within 10 % of the bare agent
STEPS = 2  # model requests per agent run: the tool calls' answer, then the final answer
PATH = "agent step: FunctionModel, three parallel tool calls"

_LIMITS = BudgetLimits(
    model_calls=100,
    tool_calls=100,
    per_tool_calls=100,
    input_tokens=1 << 40,
    output_tokens=1 << 40,
    total_tokens=1 << 40,
    run_bytes=1 << 40,
)


def _respond(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(
            parts=[
                ToolCallPart("logs", {"service": "checkout"}, tool_call_id="call_logs"),
                ToolCallPart("metrics", {"service": "checkout"}, tool_call_id="call_metrics"),
                ToolCallPart("deploys", {"service": "checkout"}, tool_call_id="call_deploys"),
            ],
            usage=RequestUsage(input_tokens=120, output_tokens=40),
        )
    return ModelResponse(
        parts=[TextPart("checkout v42 raised p99 to 840 ms: roll back")],
        usage=RequestUsage(input_tokens=300, output_tokens=20),
    )


def _agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(_respond))

    @agent.tool_plain
    async def logs(service: str) -> str:
        return f"{service}: 5xx rate 12 % since 10:02"

    @agent.tool_plain
    async def metrics(service: str) -> dict[str, float]:
        return {"p99_ms": 840.0 if service == "checkout" else 90.0, "p50_ms": 120.0}

    @agent.tool_plain
    async def deploys(service: str) -> list[str]:
        return [f"{service} v42 at 10:01"]

    return agent


@dataclass
class _Nothing(AbstractCapability[Any]):
    """A capability that overrides no hook: what pydantic-ai charges for any capability."""


@dataclass
class _SameHooks(AbstractCapability[Any]):
    """The hooks ``HarnessCapability`` overrides, each passing straight through."""

    def get_ordering(self) -> CapabilityOrdering:
        return CapabilityOrdering(position="outermost")

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        return await handler()

    async def after_run(self, ctx: Any, *, result: Any) -> Any:
        return result

    async def on_run_error(self, ctx: Any, *, error: BaseException) -> Any:
        raise error

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> Any:
        return await handler(request_context)

    async def prepare_model_request(self, ctx: Any, request_context: Any) -> Any:
        return request_context

    async def after_model_request(self, ctx: Any, *, request_context: Any, response: Any) -> Any:
        return response

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        return await handler(args)


def _runs() -> dict[str, Callable[[], Coroutine[Any, Any, object]]]:
    agent = _agent()
    count = 0

    async def bare() -> object:
        return await agent.run("why is checkout slow?")

    async def nothing() -> object:
        return await agent.run("why is checkout slow?", capabilities=[_Nothing()])

    async def same_hooks() -> object:
        return await agent.run("why is checkout slow?", capabilities=[_SameHooks()])

    async def governed() -> object:
        nonlocal count
        count += 1
        ctx = RunContext.create(
            session_id="bench", run_id=f"run-{count}", limits=_LIMITS, timeout=3600
        )
        return await agent.run("why is checkout slow?", capabilities=[HarnessCapability(ctx)])

    return {
        "bare agent": bare,
        "a no-op capability": nothing,
        "the same hooks, doing nothing": same_hooks,
        "HarnessCapability": governed,
    }


def _timed(run: Callable[[], Coroutine[Any, Any, object]]) -> Callable[[int], float]:
    """``loops`` agent runs in one event loop: their CPU seconds, summed (pyperf divides)."""

    def time_func(loops: int) -> float:
        async def all_runs() -> float:
            started = time.process_time()
            for _ in range(loops):
                await run()
            return time.process_time() - started

        return asyncio.run(all_runs())

    return time_func


def main() -> int:
    session = Session(__doc__.split("\n", 1)[0] if __doc__ else "bench_pydantic_ai")
    timings = {
        name: session.time_loops(f"{PATH} [{name}]", _timed(run)) for name, run in _runs().items()
    }
    if session.worker:
        return 0
    bare, nothing, same_hooks, governed = (timings[name] for name in _runs())
    assert bare is not None
    assert nothing is not None
    assert same_hooks is not None
    assert governed is not None
    ratio = Ratio(PATH, governed, bare, TARGET)
    per_step = {name: timing.mean_ns / STEPS for name, timing in timings.items() if timing}
    report = {
        **session.provenance(),
        "clock": "CPU time of the process (time.process_time)",
        "target_ratio": TARGET,
        "steps_per_run": STEPS,
        "paths": {
            PATH: {
                "ns_per_step": per_step,
                "stdev_ns_per_step": {
                    name: timing.stdev_ns / STEPS for name, timing in timings.items() if timing
                },
                "ratio": ratio.ratio,
                "no_op_capability_ratio": nothing.mean_ns / bare.mean_ns,
                "same_hooks_ratio": same_hooks.mean_ns / bare.mean_ns,
                "ratio_to_same_hooks": governed.mean_ns / same_hooks.mean_ns,
                "target": TARGET,
                "met": ratio.met,
                "baseline": "the same agent without the capability",
            }
        },
    }
    ns = [per_step[name] for name in _runs()]
    table = "\n".join(
        [
            "| path | bare agent | a no-op capability | the same hooks, doing nothing "
            "| HarnessCapability | ratio to bare | of which pydantic-ai's (same hooks) "
            "| target | |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|",
            f"| {PATH} (ns per step) | {ns[0]:,.0f} | {ns[1]:,.0f} | {ns[2]:,.0f} | {ns[3]:,.0f} "
            f"| {ratio.ratio:.3f}x | {ns[2] / ns[0]:.3f}x | <= {TARGET:g}x "
            f"| {'met' if ratio.met else '**not met**'} |",
        ]
    )
    session.save("pydantic_ai", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
